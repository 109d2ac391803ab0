"""``${VAR}`` / ``${VAR:default}`` interpolation and ``.env`` files.

Rules (docs/config.md):

- ``${NAME}`` is replaced by the environment variable ``NAME``; if it is unset,
  that is an error naming the variable and the key path, never literal text.
- ``${NAME:default}`` (or ``${NAME:-default}``) uses ``default`` when ``NAME``
  is unset or empty.
- ``$${`` is a literal ``${``.
- Only string values are interpolated, never keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from koboi.errors import ConfigProblem

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)\}|\$\{")
_BODY = re.compile(rf"^(?P<name>{_NAME})(?::-?(?P<default>.*))?$", re.DOTALL)


def interpolate_text(
    text: str, env: Mapping[str, str], path: str
) -> tuple[str, list[ConfigProblem]]:
    """Interpolate one string. Returns the result and the problems found."""
    problems: list[ConfigProblem] = []
    out: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(text):
        out.append(text[pos : match.start()])
        pos = match.end()
        token = match.group(0)
        if token == "$${":
            out.append("${")
            continue
        body = match.group("body")
        if body is None:
            problems.append(
                ConfigProblem(path, "unclosed '${' in value", "write '$${' for a literal '${'")
            )
            out.append(token)
            continue
        parsed = _BODY.match(body)
        if not parsed:
            problems.append(
                ConfigProblem(
                    path,
                    f"invalid variable reference '${{{body}}}'",
                    "use ${NAME} or ${NAME:default} with NAME made of letters, digits and '_'",
                )
            )
            continue
        name, default = parsed.group("name"), parsed.group("default")
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                problems.append(
                    ConfigProblem(
                        path,
                        f"environment variable {name} is not set",
                        f"export {name}=..., add it to .env, or write ${{{name}:default}}",
                    )
                )
                continue
            value = default
        out.append(value)
    out.append(text[pos:])
    return "".join(out), problems


def interpolate(
    value: Any, env: Mapping[str, str], path: str = ""
) -> tuple[Any, list[ConfigProblem]]:
    """Interpolate every string inside ``value`` (mappings and lists recursively)."""
    if isinstance(value, str):
        if "$" not in value:
            return value, []
        return interpolate_text(value, env, path)
    problems: list[ConfigProblem] = []
    if isinstance(value, Mapping):
        result: dict[Any, Any] = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            result[key], found = interpolate(item, env, child)
            problems.extend(found)
        return result, problems
    if isinstance(value, list):
        items: list[Any] = []
        for index, item in enumerate(value):
            new, found = interpolate(item, env, f"{path}[{index}]")
            items.append(new)
            problems.extend(found)
        return items, problems
    return value, []


_DOTENV_LINE = re.compile(rf"^\s*(?:export\s+)?(?P<key>{_NAME})\s*=\s*(?P<value>.*?)\s*$")


def parse_dotenv(text: str) -> dict[str, str]:
    """Parse ``.env`` text: ``KEY=value`` lines, ``export`` prefix, quotes, ``#`` comments."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _DOTENV_LINE.match(line)
        if not match:
            continue
        key, raw = match.group("key"), match.group("value")
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
            value = raw[1:-1]
            if raw[0] == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        else:
            value = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
        values[key] = value
    return values


def load_dotenv(path: Path, environ: dict[str, str] | Any) -> dict[str, str]:
    """Load ``path`` into ``environ`` without overriding what is already set.

    Returns the values the file defined. A missing file is not an error.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return {}
    values = parse_dotenv(text)
    for key, value in values.items():
        environ.setdefault(key, value)
    return values
