"""The shell segmenter: what it splits, what it refuses, and a real shell agreeing with it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from koboi_governance.shell import RUNNERS, Segment, TooComplex, segments


def texts(command: str) -> list[str]:
    return [s.text for s in segments(command)]


# -- splitting -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls -la", ["ls -la"]),
        ("ls && rm -rf x", ["ls", "rm -rf x"]),
        ("ls || rm -rf x", ["ls", "rm -rf x"]),
        ("ls; rm -rf x", ["ls", "rm -rf x"]),
        ("ls | rm -rf x", ["ls", "rm -rf x"]),
        ("ls |& rm -rf x", ["ls", "rm -rf x"]),
        ("ls & rm -rf x", ["ls", "rm -rf x"]),
        ("ls\nrm -rf x", ["ls", "rm -rf x"]),
        ("ls &&\n  rm -rf x", ["ls", "rm -rf x"]),
        ("ls;", ["ls"]),
        ("ls &", ["ls"]),
        ("", []),
        ("   \n\t ", []),
        ("# only a comment", []),
        ("ls # && rm -rf x", ["ls"]),
        ("ls a#b", ["ls a#b"]),
        ("echo $(rm -rf /)", ["rm -rf /", "echo $(rm -rf /)"]),
        ("echo `rm -rf /`", ["rm -rf /", "echo `rm -rf /`"]),
        ('echo "$(rm -rf "$HOME")"', ["rm -rf $HOME", 'echo $(rm -rf "$HOME")']),
        ("echo $(ls $(rm x))", ["rm x", "ls $(rm x)", "echo $(ls $(rm x))"]),
        ("cat <(rm x) >(tee y)", ["rm x", "tee y", "cat <(rm x) >(tee y)"]),
        ("ls > >(rm x)", ["rm x", "ls"]),
        ("(cd src && rm -rf x)", ["cd src", "rm -rf x"]),
        ("{ ls; rm -rf x; }", ["ls", "rm -rf x"]),
        ("! rm x", ["rm x"]),
        ("echo ${x:-$(rm -rf y)}", ["rm -rf y", "echo ${x:-$(rm -rf y)}"]),
        ("echo $((1 + 2))", ["echo $((1 + 2))"]),
        ("X=$(rm x) ls", ["rm x", "ls"]),
        ("ls > $(rm x)", ["rm x", "ls"]),
        # Quote removal builds what the program receives.
        ("r'm' -rf x", ["rm -rf x"]),
        ('r"m" -rf x', ["rm -rf x"]),
        ("\\rm -rf x", ["rm -rf x"]),
        ("$'\\x72m' -rf x", ["rm -rf x"]),
        ("ls \\\n-la", ["ls -la"]),
        ("echo 'a && b' \"c ; d\" e\\;f", ["echo a && b c ; d e;f"]),
        ("git   status", ["git status"]),
        ('git commit -m "fix `foo`" --no-edit', ["foo", "git commit -m fix `foo` --no-edit"]),
        ("git commit -m 'fix `foo`'", ["git commit -m fix `foo`"]),
        ("echo }", ["echo }"]),
        ("[ -f x ] && echo ok", ["[ -f x ]", "echo ok"]),
    ],
)
def test_splits_into_the_commands_it_runs(command: str, expected: list[str]) -> None:
    assert texts(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("find . -exec rm {} \\;", ["find . -exec rm {} ;", "rm {}"]),
        ("find . -execdir rm -f {} +", ["find . -execdir rm -f {} +", "rm -f {}"]),
        (
            "find . -ok rm {} ';' -okdir shred {} \\;",
            ["find . -ok rm {} ; -okdir shred {} ;", "rm {}", "shred {}"],
        ),
        ("find . -name '*.py' -print", ["find . -name *.py -print"]),
        ("ls | xargs rm", ["ls", "xargs rm", "rm"]),
        ("xargs -0 -n 1 -P4 rm -f", ["xargs -0 -n 1 -P4 rm -f", "rm -f"]),
        ("xargs -I{} mv {} /tmp", ["xargs -I{} mv {} /tmp", "mv {} /tmp"]),
        ("env X=1 rm", ["env X=1 rm", "rm"]),
        ("env -i -u HOME PATH=/bin rm x", ["env -i -u HOME PATH=/bin rm x", "rm x"]),
        ("sudo -u root -E rm -rf /", ["sudo -u root -E rm -rf /", "rm -rf /"]),
        ("sudo --user=root rm x", ["sudo --user=root rm x", "rm x"]),
        ("doas -u root rm x", ["doas -u root rm x", "rm x"]),
        ("nohup rm x", ["nohup rm x", "rm x"]),
        ("timeout -s KILL 5s rm x", ["timeout -s KILL 5s rm x", "rm x"]),
        ("nice -n 10 rm x", ["nice -n 10 rm x", "rm x"]),
        ("nice -10 rm x", ["nice -10 rm x", "rm x"]),
        ("ionice -c 3 rm x", ["ionice -c 3 rm x", "rm x"]),
        ("time rm x", ["time rm x", "rm x"]),
        ("command rm x", ["command rm x", "rm x"]),
        ("command -v rm", ["command -v rm"]),
        ("builtin cd /", ["builtin cd /", "cd /"]),
        ("exec rm x", ["exec rm x", "rm x"]),
        ("stdbuf -oL rm x", ["stdbuf -oL rm x", "rm x"]),
        ("chroot /srv rm x", ["chroot /srv rm x", "rm x"]),
        ("setsid -f rm x", ["setsid -f rm x", "rm x"]),
        ("busybox rm x", ["busybox rm x", "rm x"]),
        ("watch -n 1 'ls; rm x'", ["watch -n 1 ls; rm x", "ls", "rm x"]),
        ("watch -x rm x", ["watch -x rm x", "rm x"]),
        ("su -c 'rm x' root", ["su -c rm x root", "rm x"]),
        ("bash -c 'rm -rf x'", ["bash -c rm -rf x", "rm -rf x"]),
        ("sh -ec 'ls && rm x' arg0", ["sh -ec ls && rm x arg0", "ls", "rm x"]),
        ("bash -o pipefail -c 'rm x'", ["bash -o pipefail -c rm x", "rm x"]),
        ("/bin/sh -c 'rm x'", ["/bin/sh -c rm x", "rm x"]),
        ("sh script.sh", ["sh script.sh"]),
        ("sudo nice -n 5 env A=1 rm x", ["sudo nice -n 5 env A=1 rm x", "nice -n 5 env A=1 rm x"]),
        (
            "find . -exec sh -c 'rm \"$1\"' _ {} \\;",
            ['find . -exec sh -c rm "$1" _ {} ;', 'sh -c rm "$1" _ {}', "rm $1"],
        ),
    ],
)
def test_runners_are_unwrapped(command: str, expected: list[str]) -> None:
    found = texts(command)
    assert found[: len(expected)] == expected


def test_nested_runners_unwrap_to_the_innermost_program() -> None:
    found = texts("sudo nice -n 5 env A=1 timeout 3 rm x")
    assert found[-1] == "rm x"
    assert len(found) == 5


def test_redirects_and_assignments_are_kept_apart_from_argv() -> None:
    [segment] = segments("LD_PRELOAD=x.so CC=clang make all > log.txt 2>&1")
    assert segment == Segment(
        argv=("make", "all"),
        redirects=("> log.txt", "2>&1"),
        assignments=("LD_PRELOAD=x.so", "CC=clang"),
    )
    assert segment.text == "make all"


def test_env_assignments_go_to_the_command_env_runs() -> None:
    runner, program = segments("env LD_PRELOAD=x.so ls")
    assert runner.argv == ("env", "LD_PRELOAD=x.so", "ls")
    assert program == Segment(argv=("ls",), assignments=("LD_PRELOAD=x.so",))


def test_group_redirects_apply_to_every_command_inside() -> None:
    found = segments("{ ls; rm x; } 2>/dev/null")
    assert [s.redirects for s in found] == [("2> /dev/null",), ("2> /dev/null",)]


def test_redirect_only_and_assignment_only_commands_are_segments() -> None:
    assert segments("> important.txt") == [Segment(argv=(), redirects=("> important.txt",))]
    assert segments("PATH=/tmp/evil") == [Segment(argv=(), assignments=("PATH=/tmp/evil",))]


def test_ansi_c_quotes_decode_like_bash() -> None:
    [segment] = segments("printf $'\\xe2\\x80\\x99 \\x72m \\101 \\t'")
    assert segment.argv == ("printf", "\u2019 rm A \t")


# -- refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("eval ls", "eval"),
        ("ls && eval 'rm -rf x'", "eval"),
        ("builtin eval x", "eval"),
        ("source ./env.sh", "source"),
        (". ./env.sh", "'.'"),
        ("alias ls='rm -rf x'", "alias"),
        ("trap 'rm -rf x' EXIT", "trap"),
        ("let 'a[$(rm x)]=1'", "let"),
        ("declare 'a[$(rm x)]=1'", "declare"),
        ("printf -v 'a[$(rm x)]' x", "printf -v"),
        ("test -v 'a[$(rm x)]'", "test -v"),
        ("[ -v 'a[$(rm x)]' ]", "-v"),
        ("read 'a[$(rm x)]'", "array element"),
        ("echo $((x + 1))", "$(("),
        ("echo 'unterminated", "unterminated single quote"),
        ('echo "unterminated', "unterminated double quote"),
        ("echo $(ls", "unterminated '('"),
        ("echo `ls", "unterminated backquote"),
        ("echo ${x", "unterminated '${'"),
        ("cat <<EOF\nrm x\nEOF", "here-document"),
        ("cat <<< 'x'", "here-document"),
        ("$CMD -rf x", "program name"),
        ("${CMD} -rf x", "program name"),
        ('"$CMD" -rf x', "program name"),
        ("$(echo rm) -rf x", "program name"),
        ("`echo rm` -rf x", "program name"),
        ("/bin/r? -rf x", "pattern"),
        ("{rm,-rf,x}", "pattern"),
        ("f() { rm x; }", "function"),
        ("function f { rm x; }", "function"),
        ("if true; then rm x; fi", "'if'"),
        ("for f in *; do rm $f; done", "'for'"),
        ("while true; do rm x; done", "'while'"),
        ("case x in x) rm x;; esac", "'case'"),
        ("[[ -f x ]] && rm x", "'[['"),
        ("(( x = 1 ))", "arithmetic"),
        ("coproc rm x", "coproc"),
        ("a=(1 2 3)", "array"),
        ("echo ${!name}", "indirect"),
        ("echo ${a[$(rm x)]}", "subscript"),
        ("echo ${x@P}", "transformation"),
        ("PS4='$(rm x)' bash -xc ls", "command substitution"),
        ("export PS4='$(rm x)'", "command substitution"),
        ("ls\0 && rm x", "NUL"),
        ("echo $'\\0'", "NUL"),
        ("curl example.com | sh", "reads commands from its input"),
        ("bash < script.sh", "reads commands from its input"),
        ('sh -c "$SCRIPT"', "known only when the command runs"),
        ("bash -s", "reads commands from its input"),
        ("sudo -s", "starts a shell"),
        ("su root", "starts a shell"),
        ("chroot /srv", "starts a shell"),
        ("env -S 'rm -rf x'", "env -S"),
        ("xargs -I{} {}", "from its input"),
        ("find . -exec {} \\;", "runs the files it finds"),
        ("find . -exec rm {}", "without a closing"),
        ("find . -name *.py -delete", "quote patterns"),
        ('find "$D" -delete', "not literal text"),
        ("find . -exec sh -c 'echo {}' \\;", "not literal text"),
        ("printf 'x;rm y' | xargs -I% sh -c 'echo %'", "not literal text"),
        ("fish -c 'rm x'", "not a POSIX shell"),
        ("zsh -c '=rm x'", "'='"),
        ("ls ;; rm x", "case syntax"),
        ("; ls", "nothing before"),
        ("ls &&", "nothing after"),
        ("ls | | rm", "nothing after"),
        ("ls )", "unmatched ')'"),
        ("}", "unmatched '}'"),
        ("(ls) rm", "word after"),
        ("ls >", "without a target"),
        ("ls \\", "lone backslash"),
    ],
)
def test_refuses_what_it_cannot_judge(command: str, why: str) -> None:
    with pytest.raises(TooComplex) as refused:
        segments(command)
    assert why in str(refused.value)


@pytest.mark.parametrize(
    "command",
    [
        # Positive controls for the refusals above: the same shapes, judged.
        "echo ls",
        "cat ./env.sh",
        "test -f x",
        "printf '%s\\n' x",
        "read line",
        "echo $((1 + 2))",
        "echo 'terminated'",
        "cat < input.txt",
        'echo $HOME ${USER:-me} "$PWD"',
        "ls *.py",
        "echo {a,b}",
        "sh -c 'ls'",
        "sudo ls",
        "su -c 'ls' root",
        "chroot /srv ls",
        'env A="$X" ls',
        'env A="$(date)" ls',
        'sudo -u "$(whoami)" ls',
        "xargs -I{} echo {}",
        "xargs sudo ls",
        "find . -exec ls {} \\;",
        "find . -name '*.py' -delete",
        "find . -exec sh -c 'echo \"$1\"' _ {} \\;",
        "export PATH=/opt/bin:$PATH",
    ],
)
def test_the_same_shapes_are_judged_when_sound(command: str) -> None:
    assert segments(command)


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("sudo --frobnicate rm x", "unknown option --frobnicate"),
        ("timeout --bogus 5 rm x", "unknown option --bogus"),
        ("nice -Z 5 rm x", "unknown option -Z"),
        ("flock --s f rm x", "ambiguous"),  # --shared or --start
        ("gdb -batch -ex run --args rm x", "own language"),
        ("env A=$X rm", "could split"),
        ("env A=$(echo 1 rm) ls", "could split"),
        ("sudo -u $(echo root rm) ls", "could split"),
        ("sudo -u `echo root rm` ls", "could split"),
        ('timeout "$T" rm x', "known only when the command runs"),
        ("echo rm -rf x | xargs sudo", "xargs appends"),
        ("echo -exec rm {} + | xargs find .", "xargs appends"),
    ],
)
def test_a_runner_it_cannot_read_is_an_opaque_segment(command: str, why: str) -> None:
    # Not refused outright (the policy refuses it when a deny or ask rule could apply).
    runner = next(s for s in segments(command) if s.opaque)
    assert why in runner.opaque
    assert segments(command)[-1] == runner  # nothing it might start is a segment


def test_long_options_may_be_abbreviated_as_getopt_allows() -> None:
    assert texts("timeout --sig=KILL 5 rm x")[-1] == "rm x"
    assert texts("nice --adj 3 rm x")[-1] == "rm x"
    assert texts("flock --time 3 f rm x")[-1] == "rm x"


def test_limits_on_segments_and_depth() -> None:
    chain = " && ".join(["true"] * 60) + " && rm -rf x"
    assert texts(chain)[-1] == "rm -rf x"
    assert len(segments(chain)) == 61
    with pytest.raises(TooComplex, match="more than 60 commands"):
        segments(chain, max_segments=60)
    nested = "echo " + "$(echo " * 8 + "x" + ")" * 8
    assert len(segments(nested)) == 9
    with pytest.raises(TooComplex, match="more than 8 levels"):
        segments("echo " + "$(echo " * 9 + "x" + ")" * 9)


# -- properties ------------------------------------------------------------------

SHELLISH = st.text(
    alphabet=st.sampled_from([*"ab -;&|()<>$`'\"\\{}[]*?!#=\n\t~%0e,.:/+@^", "\0"]),
    max_size=80,
)

#: Names the splitter treats specially: keywords, refused or checked builtins, runners.
_SPECIAL = {
    "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until",
    "for", "select", "function", "coproc", "repeat", "foreach", "time", "eval", "source",
    "alias", "trap", "let", "declare", "typeset", "local", "readonly", "mapfile",
    "readarray", "enable", "fc", "compgen", "complete", "bind", "hash", "test", "printf",
    "read", "export", "echo", "type", "true", "false", "help", *RUNNERS,
}  # fmt: skip
PROGRAM = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True).filter(
    lambda w: w not in _SPECIAL
)
PLAIN_ARG = st.from_regex(r"[A-Za-z0-9_./,:%+-]{1,10}", fullmatch=True).filter(
    lambda w: "=" not in w
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(SHELLISH, st.text(max_size=80)))
def test_never_raises_anything_but_too_complex(command: str) -> None:
    try:
        found = segments(command)
    except TooComplex:
        return
    assert all(isinstance(s, Segment) for s in found)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(PROGRAM, st.lists(PLAIN_ARG, max_size=4)), min_size=1, max_size=12))
def test_simple_commands_joined_by_semicolons_come_back(
    commands: list[tuple[str, list[str]]],
) -> None:
    line = "; ".join(" ".join([program, *args]) for program, args in commands)
    assert [s.argv for s in segments(line)] == [(p, *a) for p, a in commands]


@settings(max_examples=200, deadline=None)
@given(PROGRAM, st.lists(st.text(st.characters(exclude_characters="\0"), max_size=12), max_size=5))
def test_quoted_arguments_reach_argv_exactly(program: str, args: list[str]) -> None:
    line = " ".join([program, *(shlex.quote(a) for a in args)])
    assert segments(line) == [Segment(argv=(program, *args))]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=300))
def test_segment_limit_holds(count: int, limit: int) -> None:
    line = " ; ".join(["true"] * count)
    if count <= limit:
        assert len(segments(line, max_segments=limit)) == count
    else:
        with pytest.raises(TooComplex):
            segments(line, max_segments=limit)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=1, max_value=10),
    st.sampled_from(["echo $({})", "echo `{}`", "( {} )", "{{ {}; }}", "echo <({})", "sh -c {}"]),
)
def test_depth_limit_holds(depth: int, limit: int, shape: str) -> None:
    command = "ls"
    for _ in range(depth):
        inner = shlex.quote(command) if shape.startswith("sh") else command
        if shape.endswith("`{}`") and "`" in command:
            inner = command.replace("\\", "\\\\").replace("`", "\\`")
        command = shape.format(inner)
    if depth <= limit:
        assert "ls" in texts_with_limit(command, limit)
    else:
        with pytest.raises(TooComplex, match="levels deep"):
            segments(command, max_depth=limit)


def texts_with_limit(command: str, limit: int) -> list[str]:
    return [s.text for s in segments(command, max_depth=limit)]


# -- a real shell agrees -----------------------------------------------------------


def _quote(word: str, style: str) -> str:
    if style == "single":
        return "'" + word.replace("'", "'\\''") + "'"
    if style == "double":
        return '"' + "".join("\\" + c if c in '\\"$`' else c for c in word) + '"'
    if style == "backslash":
        return "".join("'\n'" if c == "\n" else "\\" + c for c in word) or "''"
    # ANSI-C: control characters as \xHH, the rest as itself
    body = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or c in "\\'" else c for c in word)
    return f"$'{body}'"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=8),
            st.sampled_from(["single", "double", "backslash", "ansi"]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_argv_matches_what_bash_passes(words: list[tuple[str, str]]) -> None:
    line = "printf '%s\\0' " + " ".join(_quote(w, style) for w, style in words)
    [segment] = segments(line)
    ran = subprocess.run(
        ["bash", "-c", line],
        capture_output=True,
        check=True,
        timeout=10,
        env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"},
    )
    received = ran.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert list(segment.argv[2:]) == received


_SHIM = """#!/bin/sh
printf '%s\\037' "${0##*/}" "$@" > "$KOBOI_SHIM_LOG/$$"
"""
_PROGRAMS = ("ka", "kb", "kc")


@pytest.fixture(scope="module")
def shim_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Programs ka, kb, kc that record the argv they ran with, one file per process."""
    directory = tmp_path_factory.mktemp("shims")
    for name in _PROGRAMS:
        path = directory / name
        path.write_text(_SHIM)
        path.chmod(0o755)
    return directory


_ARG = st.one_of(
    st.from_regex(r"[a-z0-9]{1,4}", fullmatch=True),
    st.sampled_from(["'a;b'", '"x && y"', "a\\|b", "'$(kc)'", '"q r"', "--flag=1", "'#x'"]),
)
_SIMPLE = st.builds(
    lambda program, args: " ".join([program, *args]),
    st.sampled_from(_PROGRAMS),
    st.lists(_ARG, max_size=3),
)


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(
            lambda a, op, b: f"{a} {op} {b}",
            inner,
            st.sampled_from(["&&", "||", ";", "|", "\n"]),
            inner,
        ),
        st.builds(lambda a: f"( {a} )", inner),
        st.builds(lambda a: f"{{ {a}\n}}", inner),
        st.builds(lambda p, a: f'{p} "$({a})"', st.sampled_from(_PROGRAMS), inner),
        st.builds(lambda p, a: f"{p} $({a})", st.sampled_from(_PROGRAMS), inner),
        st.builds(lambda a: f"sh -c {shlex.quote(a)}", inner),
        st.builds(
            lambda runner, a: f"{runner} {a}",
            st.sampled_from(["env X=1", "nice -n 1", "nohup", "timeout 5", "command", "X=1"]),
            _SIMPLE,
        ),
        st.builds(lambda a: f"echo 1 | xargs {a}", _SIMPLE),
        st.builds(lambda a: f"{a} > /dev/null 2>&1", _SIMPLE),
        st.builds(lambda a: f"{a} # && kc hidden", _SIMPLE),
    )


def _covers(segment: Segment, ran: list[str]) -> bool:
    """Whether a segment accounts for a recorded run (xargs may append arguments)."""
    argv = segment.argv
    if not argv or argv[0] != ran[0]:
        return False
    if any("$(" in word for word in argv):
        return True  # an unquoted substitution may add or remove words: the program is the proof
    if len(ran) < len(argv):
        return False
    return all(
        mine == theirs or "$(" in mine or "`" in mine
        for mine, theirs in zip(argv, ran, strict=False)
    )


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_SIMPLE, _compound, max_leaves=6), st.sampled_from(["sh", "bash"]))
def test_every_command_a_real_shell_runs_is_a_segment(
    shim_bin: Path, tmp_path_factory: pytest.TempPathFactory, line: str, shell: str
) -> None:
    try:
        found = segments(line)
    except TooComplex:
        reject()
    log = tmp_path_factory.mktemp("runs")
    subprocess.run(
        [shell, "-c", line],
        capture_output=True,
        timeout=20,
        cwd=log,
        env={"PATH": f"{shim_bin}:/usr/bin:/bin", "KOBOI_SHIM_LOG": str(log)},
    )
    runs = [p.read_text().split("\x1f")[:-1] for p in log.iterdir() if p.name.isdigit()]
    assume(runs)
    for ran in runs:
        assert any(_covers(s, ran) for s in found), (line, ran, found)


_TOKENS = [
    *("ka", "kb", "kc", " ", " ", ";", "&&", "||", "|", "&", "\n", "$(", ")", "(", "`"),
    *("'", '"', "\\", "#", "{ ", "}", "<", ">", "x", "=", "$x", "*", "sh -c ", "env "),
    *("X=1 ", "xargs ", "nice ", "$'", "\\n", "2>&1", "$((1))", "${x:-", "!", "a b"),
    *("command ", "timeout 1 ", "exec ", "echo 1 | ", "\t", "<(", ">("),
]


@pytest.mark.e2e
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=14), st.sampled_from(["sh", "bash"]))
def test_token_soup_a_real_shell_runs_is_covered(
    shim_bin: Path, tmp_path_factory: pytest.TempPathFactory, tokens: list[str], shell: str
) -> None:
    """Whatever the splitter accepts, every program the shell then runs is one of its segments."""
    line = "".join(tokens)
    try:
        found = segments(line)
    except TooComplex:
        reject()
    log, cwd = tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("cwd")
    subprocess.run(
        [shell, "-c", line],
        capture_output=True,
        timeout=20,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={"PATH": f"{shim_bin}:/usr/bin:/bin", "KOBOI_SHIM_LOG": str(log)},
    )
    programs = {s.argv[0] for s in found if s.argv}
    for record in log.iterdir():
        program = record.read_text().split("\x1f")[0]
        assert program in programs, (line, program, [s.argv for s in found])
