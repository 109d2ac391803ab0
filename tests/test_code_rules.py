"""House rules that hold over the whole tree, checked on the source text."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("plugins/*/src/**/*.py")])
#: Exception or BaseException as a name of its own (not KoboiException, ExceptionGroup).
_EVERYTHING = re.compile(r"(?<![\w.])(Base)?Exception(?!\w)")
#: ``except:``, ``except Exception``, ``except (OSError, Exception) as exc`` ...: what it catches.
_EXCEPT = re.compile(r"^\s*except\b\s*(?P<caught>[^:]*):\s*$")
#: ``suppress(Exception)``, ``contextlib.suppress(OSError, BaseException)``: what it swallows.
_SUPPRESS = re.compile(r"\bsuppress\((?P<caught>[^)]*)\)")


def broad_catch(line: str) -> bool:
    """True when ``line`` catches or suppresses everything: a bare ``except``, or an
    ``except`` / ``suppress(...)`` naming Exception or BaseException, alone or in a tuple."""
    code = line.split("#", 1)[0]
    found = _EXCEPT.match(code)
    if found is not None:
        caught = found.group("caught").split(" as ")[0].strip()
        return not caught or _EVERYTHING.search(caught) is not None
    return any(_EVERYTHING.search(m.group("caught")) for m in _SUPPRESS.finditer(code))


def test_the_broad_catch_rule_sees_every_form() -> None:
    for line in (
        "    except:",
        "    except Exception:",
        "    except BaseException as exc:  ",
        "    except (OSError, Exception) as exc:",
        "    except (Exception, OSError):",
        "    with contextlib.suppress(Exception):",
        "    with suppress(BaseException):",
        "    with anyio.CancelScope(shield=True), contextlib.suppress(OSError, Exception):",
    ):
        assert broad_catch(line), line
    # Controls: narrower catches are not broad.
    for line in (
        "    except OSError:",
        "    except (OSError, ValueError) as exc:",
        "    except KoboiException:",
        "    except* ExceptionGroupLike:",
        "    with contextlib.suppress(ProcessLookupError):",
        '    log.info("no Exception here")',
    ):
        assert not broad_catch(line), line


def test_every_broad_except_says_why() -> None:
    """A bare except, an except catching Exception or BaseException (alone or in a tuple), or a
    ``suppress(...)`` of either, has a comment saying why it is broad: on its line or the
    next."""
    unexplained = []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if not broad_catch(line):
                continue
            following = lines[number + 1].strip() if number + 1 < len(lines) else ""
            if "#" not in line and not following.startswith("#"):
                unexplained.append(f"{path.relative_to(ROOT)}:{number + 1}: {line.strip()}")
    assert not unexplained, "broad excepts without a reason:\n" + "\n".join(unexplained)


def test_module_loggers_mask_secrets() -> None:
    """Every module's logger comes from ``koboi.logs.get_logger`` (which masks secrets in
    every record), never from ``logging.getLogger``."""
    plain = re.compile(r"^\w+\s*(:[^=]+)?=\s*logging\.getLogger\(")
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if plain.match(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "module loggers without the redacting filter:\n" + "\n".join(found)


def test_plugins_use_only_the_clis_api() -> None:
    """A plugin's command uses ``koboi_cli.api``; the rest of koboi-cli is internal."""
    found = []
    for path in SOURCES:
        if not path.is_relative_to(ROOT / "plugins"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(
                r"from koboi_cli(\.(?!api\b)\w+)? import|import koboi_cli\.(?!api\b)", line
            ):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "plugins importing koboi-cli internals:\n" + "\n".join(found)


def test_no_package_talks_to_another_through_the_environment() -> None:
    """No source sets a KOBOI_* variable for another package to read. (koboi-server hands its
    own settings to its own worker processes that way, which is one package.)"""
    setting = re.compile(r"os\.environ(\[\s*['\"]KOBOI_|\.setdefault\(\s*['\"]KOBOI_|\.update\()")
    found = []
    for path in SOURCES:
        if path.is_relative_to(ROOT / "plugins" / "koboi-server" / "src" / "koboi_server"):
            continue
        if path.is_relative_to(ROOT / "packages" / "koboi-testing"):
            continue  # the test plugin turns strict mode on for the whole test session
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if setting.search(line) and "=" in line.split("os.environ", 1)[1][:60]:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _compares_an_event_type(node: object) -> bool:
    """Whether one side of the comparison is an event's type: ``x.type``, ``x.kind``, or
    a name ``type``, ``kind`` or ``event_type`` (an outcome or an SSE frame's name that
    shares an event's spelling is another thing)."""
    import ast

    assert isinstance(node, ast.Compare)
    return any(
        (isinstance(part, ast.Attribute) and part.attr in ("type", "kind"))
        or (isinstance(part, ast.Name) and part.id in ("type", "kind", "event_type"))
        for part in [node.left, *node.comparators]
    )


def _kernel_event_literals(path: Path) -> list[str]:
    """``<file>:<line>: <literal>`` for each comparison of something with a kernel event
    type spelled as a string (``event.type == "run_finished"``, ``in ("tool_call_started",)``)."""
    import ast

    from koboi.journal import EVENT_TYPES

    names = set(EVENT_TYPES)
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare) or not _compares_an_event_type(node):
            continue
        for part in [node.left, *node.comparators]:
            candidates = part.elts if isinstance(part, ast.Tuple | ast.List | ast.Set) else [part]
            for item in candidates:
                if isinstance(item, ast.Constant) and item.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {item.value!r}")
    return found


def test_kernel_events_are_read_through_their_schema() -> None:
    """Journal events are read through ``koboi.journal``'s kinds (``J.RUN_FINISHED.of(e)``),
    never by their type spelled as a string: a renamed or reshaped event is then a type
    error, not a silent miss."""
    journal = ROOT / "packages/koboi-core/src/koboi/journal.py"
    spelled = [hit for path in SOURCES if path != journal for hit in _kernel_event_literals(path)]
    assert not spelled, "kernel event types spelled as strings:\n" + "\n".join(spelled)
    # Control: the rule sees the form it forbids.
    probe = ROOT / "tests" / "_probe_event_literal.py"
    probe.write_text('def f(e):\n    return e.type == "run_finished"\n')
    try:
        assert _kernel_event_literals(probe) == ["tests/_probe_event_literal.py:2: 'run_finished'"]
    finally:
        probe.unlink()


def test_no_test_imports_conftest_by_name() -> None:
    """Under importlib mode every tests directory's conftest is named ``conftest``: a test
    module that imports from it gets whichever one a plugin's tests put first on
    ``sys.path`` when all suites run in one process. Shared helpers go in a module of a
    name of their own (``otel_kit.py``). A script a test runs as a process of its own may
    import it."""
    pattern = re.compile(r"^\s*(from conftest import|import conftest\b)", re.MULTILINE)
    tests = sorted([*ROOT.glob("packages/*/tests/**/*.py"), *ROOT.glob("plugins/*/tests/**/*.py")])
    found = [
        str(path.relative_to(ROOT))
        for path in tests
        if path.name.startswith("test_") and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert len(tests) > 100  # control: the test files were found
    assert not found, found
