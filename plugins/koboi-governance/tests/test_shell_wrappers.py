"""Programs that run other programs: a deny rule bites through every one, whatever its options.

Each family of runners is tried with many spellings in front of many spellings of ``rm``;
each has positive controls (the same shapes with an allowed program run, and nothing new
is refused when there are no rules), and a real shell runs the installed ones to show the
splitter finds exactly what they start.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koboi_governance.policy import SHELL_RULE, Policy, PolicySection, PolicyVerdict
from koboi_governance.shell import RUNNERS, TooComplex, segments


def make(*rules: dict[str, Any]) -> Policy:
    return Policy(PolicySection.model_validate({"rules": list(rules)}))


def shell(policy: Policy, command: str) -> PolicyVerdict | None:
    return policy.judge("run_shell", {"command": command})


def action(verdict: PolicyVerdict | None) -> str | None:
    return None if verdict is None else verdict.action


NO_RM = {"tool": "run_shell", "command": "rm *", "action": "deny", "id": "no-rm"}
#: Only a deny rule: what it does not deny is left to the mode (None).
DENY_RM = make(NO_RM)
#: Every command allowed, deleting denied: a control that comes back "allow" was judged.
ALLOW_ALL_BUT_RM = make({"tool": "run_shell", "command": "*", "action": "allow"}, NO_RM)
NO_RULES = Policy()

#: Each family's spellings; CMD stands for the command it runs.
FAMILIES: dict[str, list[str]] = {
    "flock": [
        "flock f CMD",
        "flock -w 3 f CMD",
        "flock --timeout=3 f CMD",
        "flock --time 3 f CMD",
        "flock -n -E 9 /tmp/lock CMD",
        "flock -s -o f CMD",
        "flock -x --verbose --nb f CMD",
        "flock --conflict-exit-code 3 -u dir CMD",
        "flock --fd 3 CMD",
    ],
    "flock -c": ["flock f -c 'CMD'", "flock -n f --command 'CMD'", "flock -c 'CMD'"],
    "taskset": [
        "taskset 1 CMD",
        "taskset -c 0-3 CMD",
        "taskset --cpu-list 0 CMD",
        "taskset -a 3 CMD",
    ],
    "numactl": [
        "numactl --interleave=all CMD",
        "numactl -i all CMD",
        "numactl -N 0 -m 0 CMD",
        "numactl --physcpubind=0-3 --localalloc CMD",
        "numactl -C 0 --preferred 1 CMD",
    ],
    "setarch": [
        "setarch x86_64 CMD",
        "setarch -R CMD",
        "setarch x86_64 -R -v CMD",
        "setarch --addr-no-randomize CMD",
        "setarch linux32 --3gb CMD",
        "setarch i686 --uname-2.6 -- CMD",
        "/usr/bin/setarch x86_64 CMD",
        "x86_64 CMD",
        "linux32 CMD",
        "linux64 -R CMD",
        "i386 -B CMD",
        "uname26 CMD",
        "aarch64 CMD",
    ],
    "prlimit": [
        "prlimit --nofile=10 CMD",
        "prlimit -n10 CMD",
        "prlimit --nofile=10:20 --cpu=5 CMD",
        "prlimit --nof=10 CMD",
        "prlimit -o RESOURCE,SOFT --raw CMD",
        "prlimit --noheadings -t=1 CMD",
    ],
    "chrt": [
        "chrt -f 1 CMD",
        "chrt --idle 0 CMD",
        "chrt -i CMD",
        "chrt -b CMD",
        "chrt -o 0 CMD",
        "chrt -r -R 1 CMD",
        "chrt --fifo --reset-on-fork 99 CMD",
        "chrt --deadline -T 100 -P 200 -D 200 0 CMD",
    ],
    "nice, ionice, choom, uclampset": [
        "nice CMD",
        "nice -n 5 CMD",
        "nice -5 CMD",
        "nice --adjustment=5 CMD",
        "nice --adj 5 CMD",
        "ionice -c 3 CMD",
        "ionice -c2 -n7 CMD",
        "ionice --class 2 --classdata 1 CMD",
        "choom -n 5 -- CMD",
        "choom -n 5 CMD",
        "uclampset -m 10 -M 20 CMD",
    ],
    "timeout": [
        "timeout 5 CMD",
        "timeout -s KILL 5 CMD",
        "timeout --signal=KILL 5s CMD",
        "timeout --sig KILL 5 CMD",
        "timeout -k 1 -v 5 CMD",
        "timeout --foreground --preserve-status 5 CMD",
    ],
    "environment and sessions": [
        "env CMD",
        "env -i CMD",
        "env X=1 CMD",
        "env -u HOME -C / CMD",
        "env --chdir=/ --ignore-environment CMD",
        "env - CMD",
        "/usr/bin/env CMD",
        "nohup CMD",
        "setsid CMD",
        "setsid -w CMD",
        "stdbuf -oL CMD",
        "stdbuf -o L -e 0 CMD",
        "unbuffer CMD",
        "unbuffer -p CMD",
        "chronic -e CMD",
        "eatmydata CMD",
        "eatmydata -- CMD",
        "dbus-run-session -- CMD",
        "dbus-run-session --config-file=x.conf CMD",
    ],
    "shell builtins": [
        "command CMD",
        "command -p CMD",
        "exec CMD",
        "exec -a name CMD",
        "time CMD",
        "time -p CMD",
        "noglob CMD",
        "nocorrect CMD",
    ],
    "roots, namespaces, privileges": [
        "chroot / CMD",
        "chroot --userspec=1:1 / CMD",
        "unshare -r CMD",
        "unshare --mount --pid --fork CMD",
        "unshare --map-user=1 --net=/run/netns/x CMD",
        "unshare -R / -w / CMD",
        "nsenter -t 1 -m CMD",
        "nsenter --target=1 --mount --uts CMD",
        "nsenter -t 1 -m/proc/1/ns/mnt CMD",
        "nsenter -a -t 1 -S 0 CMD",
        "setpriv --nnp CMD",
        "setpriv --reuid=1 --regid 1 --clear-groups CMD",
        "capsh -- -c 'CMD'",
        "capsh --caps=cap_net_raw+eip --user=u -- -c 'CMD'",
        "runcon -t t CMD",
        "runcon system_u:system_r:t:s0 CMD",
        "cgexec -g cpu:/x CMD",
        "cgexec -g cpu,memory:/x --sticky CMD",
        "fakeroot CMD",
        "fakeroot -- CMD",
        "fakeroot -l lib.so -s state CMD",
    ],
    "other users": [
        "sudo CMD",
        "sudo -u root -E CMD",
        "sudo --user=root CMD",
        "doas -u root CMD",
        "su -c 'CMD' root",
        "su - root -c 'CMD'",
        "runuser -u nobody -- CMD",
        "runuser -u nobody CMD",
        "runuser nobody -c 'CMD'",
        "runuser -l nobody -c 'CMD'",
        "sg wheel 'CMD'",
        "sg wheel -c 'CMD'",
        "sg - wheel -c 'CMD'",
        "pkexec CMD",
        "pkexec --user root CMD",
        "run0 CMD",
        "run0 -u root --chdir=/ CMD",
        "gosu nobody CMD",
        "su-exec nobody:nogroup CMD",
    ],
    "services and sandboxes": [
        "systemd-run CMD",
        "systemd-run --user --wait -p CPUQuota=10% CMD",
        "systemd-run --scope -E X=1 CMD",
        "systemd-run -u unit --on-active=5 CMD",
        "systemd-run --expand-environment=no CMD",
        "firejail CMD",
        "firejail --private --net=none CMD",
        "firejail --env=X=1 -- CMD",
        "bwrap --bind / / CMD",
        "bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all CMD",
        "bwrap --setenv X 1 --chdir / -- CMD",
        "bwrap --overlay-src a --overlay b c d CMD",
    ],
    "tracers": [
        "strace CMD",
        "strace -f -o /dev/null CMD",
        "strace -e trace=none CMD",
        "strace --trace=file -s 100 CMD",
        "strace -qq -E X=1 CMD",
        "strace -p 1 CMD",
        "ltrace CMD",
        "ltrace -o f -e malloc CMD",
        "valgrind CMD",
        "valgrind --tool=memcheck -q CMD",
        "catchsegv CMD",
    ],
    "multi-call binaries": ["busybox CMD", "toybox CMD", "busybox sh -c 'CMD'"],
    "command strings and lists": [
        "sh -c 'CMD'",
        "bash -c 'CMD'",
        "dash -c 'CMD'",
        "zsh -c 'CMD'",
        "bash -o pipefail -ec 'CMD'",
        "script -c 'CMD' /dev/null",
        "script -qc 'CMD'",
        "watch 'CMD'",
        "watch -n 1 -x CMD",
        "echo x | xargs CMD",
        "xargs -0 -n 1 CMD",
        "find . -exec CMD \\;",
        "ssh host CMD",
        "ssh -p 22 host 'CMD'",
        "ssh host -o BatchMode=yes -- CMD",
        "ssh -J jump -l me host CMD",
    ],
}
FLAT = [(family, template) for family, templates in FAMILIES.items() for template in templates]
#: Templates that hand CMD to a shell as one quoted word.
QUOTED = {t for _, t in FLAT if "'CMD'" in t}
#: Runners that read options after their operands too (GNU getopt permutes): the command's
#: own options would be theirs, so these only wrap commands without options.
PERMUTING = {"choom -n 5 CMD", "runuser -u nobody CMD"}

#: Spellings of the denied program, as a word list and inside single quotes.
RM = ["rm -f target", "/bin/rm -rf x", "\\rm x", "r'm' -f x", "/usr/bin/rm x", "./rm x", "rm"]
RM_QUOTABLE = ["rm -f target", "/bin/rm -rf x", "rm"]
RM_WITHOUT_OPTIONS = ["rm target", "/usr/bin/rm x", "\\rm x", "./rm x", "rm"]
CONTROLS = ["ls -la", "true", "echo hi"]


def line(template: str, command: str) -> str:
    return template.replace("CMD", command)


def _rm_cases() -> list[Any]:
    return [
        pytest.param(family, template, rm, id=f"{template} <- {rm}")
        for family, template in FLAT
        for rm in (
            RM_QUOTABLE
            if template in QUOTED
            else RM_WITHOUT_OPTIONS
            if template in PERMUTING
            else RM
        )
    ]


@pytest.mark.parametrize(("family", "template", "rm"), _rm_cases())
def test_a_deny_rule_bites_through_every_runner(family: str, template: str, rm: str) -> None:
    command = line(template, rm)
    verdict = shell(DENY_RM, command)
    assert verdict is not None and verdict.action == "deny", (family, command, verdict)
    assert verdict.rule == "no-rm", verdict  # judged by the rule, not refused as unjudgeable
    # The runner was read, not only searched: rm is a segment of its own.
    program = shlex.split(rm)[0]
    assert any(s.argv[:1] == (program,) for s in segments(command)), segments(command)


@pytest.mark.parametrize(("family", "template"), FLAT, ids=[t for _, t in FLAT])
def test_the_same_runners_with_an_allowed_program_run(family: str, template: str) -> None:
    for control in ["ls", "true"] if template in PERMUTING else CONTROLS:
        command = line(template, control)
        assert shell(DENY_RM, command) is None, command  # no deny: the mode decides
        assert action(shell(ALLOW_ALL_BUT_RM, command)) == "allow", command
        assert shell(NO_RULES, command) is None, command  # nothing new refused without rules


def test_nested_chains_are_judged_to_the_innermost_program() -> None:
    chains = [
        "nice timeout 5 env X=1 flock f rm -f t",
        "sudo -u root nice -n 5 taskset 1 setarch x86_64 prlimit --nofile=10 chrt -f 1 rm -f t",
        "strace -f ionice -c 3 stdbuf -oL unshare -r nsenter -t 1 -m rm x",
        'sh -c "flock f -c \'ssh host \\"sudo rm x\\"\'"',
        "firejail -- bwrap --bind / / -- valgrind -q busybox rm x",
        "xargs -0 timeout 5 chrt --idle 0 rm",
    ]
    for chain in chains:
        verdict = shell(DENY_RM, chain)
        assert verdict is not None and verdict.rule == "no-rm", (chain, verdict)
        assert "rm" in segments(chain)[-1].text
        control = chain.replace("rm -f t", "ls").replace("rm x", "ls").replace(" rm", " ls")
        assert action(shell(ALLOW_ALL_BUT_RM, control)) == "allow", control


def test_flock_options_with_values_do_not_hide_the_program() -> None:
    # -w takes a value: `flock -w 3 f rm` locks f and runs rm, and is judged as such.
    assert segments("flock -w 3 f rm x")[-1].argv == ("rm", "x")
    assert segments("flock f -c 'rm x'")[-1].argv == ("rm", "x")
    # prlimit's short resource options take a value only glued to them: `-n 10` shows the
    # limit and 10 is the program (which the deny rule then finds in its arguments).
    assert segments("prlimit -n10 rm x")[-1].argv == ("rm", "x")
    assert segments("prlimit -n 10 rm x")[-1].argv == ("10", "rm", "x")
    assert action(shell(DENY_RM, "prlimit -n 10 rm x")) == "deny"
    # Options that make a runner change a running process start nothing.
    for command in ("chrt -p 1 123", "taskset -p 3 123", "prlimit --pid 123 --nofile=1"):
        assert [s.text for s in segments(command)] == [command]


# -- what cannot be judged ------------------------------------------------------------

#: Runners whose arguments cannot be read for sure: refused when a deny or ask rule applies.
OPAQUE = [
    "gdb -batch -ex run --args rm x",
    "gdb -ex 'shell rm x'",
    "expect -c 'spawn rm x'",
    "parallel rm ::: a b",
    "ls | parallel",
    "sem rm x",
    "tmux new-session -d 'rm x'",
    "screen -dm rm x",
    "timeout --bogus 5 rm x",
    "sudo --frobnicate rm x",
    "flock --s f rm x",
    "taskset -Z 1 rm x",
    "setarch x86_64 --bogus rm x",
    "ssh -T git@example.com",
    "ssh -o ProxyCommand='rm x' host ls",
    "ssh host 'for f in *; do rm $f; done'",
    'ssh host "rm $X"',
    "systemd-run -p ExecStartPre='/bin/rm x' true",
    "systemd-run env '$X'",
    "systemd-run /usr/bin/%p",
    "bwrap --args 3 rm x",
    "firejail --private",
    "capsh == -- -c 'rm x'",
    'chrt -i "p$P" rm',
    "valgrind -x rm",
    "taskset $MASK ls",
    'flock "$LOCK" make',
    'setarch "$(uname -m)" -R ls',
    'timeout "$T" rm x',
    "env A=$X ls",
    "ls | xargs taskset 1",
    "newgrp docker",
    "sg wheel",
    "unshare -r",
    "nsenter -t 1 -m",
    "setarch x86_64",
    "linux32",
    "fakeroot",
    "pkexec",
    "run0",
    "runuser nobody",
    "runuser nobody extra words",
    "systemd-run --shell",
    "echo 'rm x' | at now",
    "batch",
]


@pytest.mark.parametrize("command", OPAQUE)
def test_what_cannot_be_read_is_refused_when_a_rule_could_apply(command: str) -> None:
    assert any(s.opaque for s in segments(command)), segments(command)
    for policy in (DENY_RM, make({"tool": "run_shell", "command": "curl *", "action": "ask"})):
        verdict = shell(policy, command)
        assert verdict is not None and verdict.action == "deny" and verdict.rule == SHELL_RULE
        assert "cannot be judged safely" in verdict.reason
    # Without a deny or ask rule it is not refused, and no allow rule allows it.
    assert shell(NO_RULES, command) is None
    assert shell(make({"tool": "run_shell", "action": "allow"}), command) is None
    assert shell(make({"tool": "run_shell", "command": "*", "action": "allow"}), command) is None


@pytest.mark.parametrize(
    "command",
    ["gdb --version", "expect -v", "tmux -V", "screen -ls", "parallel --version", "ssh -V"],
)
def test_the_harmless_forms_of_those_runners_are_judged(command: str) -> None:
    assert action(shell(ALLOW_ALL_BUT_RM, command)) == "allow"


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("taskset 1 $CMD", "program name"),
        ('flock f "$CMD" x', "program name"),
        ('flock f -c "$SCRIPT"', "not literal"),
        ('sg wheel -c "$SCRIPT"', "not literal"),
        ('sg wheel "$SCRIPT"', "not literal"),
        ("busybox $APPLET x", "program name"),
        ('taskset -c 0 "$CMD" x', "program name"),
        ("flock f -c 'eval rm x'", "eval"),
        ("taskset 1 eval 'rm x'", "eval"),
        ("strace -f bash", "reads commands from its input"),
        ("flock f sudo -s", "starts a shell"),
        ("setarch x86_64 fish -c ls", "not a POSIX shell"),
        ("prlimit --nofile=10 xargs -I{} {}", "from its input"),
    ],
)
def test_what_is_refused_without_rules_is_refused_behind_any_runner(command: str, why: str) -> None:
    with pytest.raises(TooComplex, match=re.escape(why)):
        segments(command)
    verdict = shell(NO_RULES, command)
    assert verdict is not None and verdict.action == "deny" and verdict.rule == SHELL_RULE


@pytest.mark.parametrize(
    "command", ["at -l", "at -f job.sh now", "atq", "sg wheel 'ls'", "unshare -r ls", "setarch"]
)
def test_controls_for_those_refusals(command: str) -> None:
    assert shell(NO_RULES, command) is None


# -- programs the splitter does not know ------------------------------------------------

#: The deny rule finds the program in the arguments of whatever runs it.
FOUND_IN_ARGUMENTS = [
    "mywrapper rm -f x",
    "uv run rm -rf x",
    "nocache rm x",
    "foo -q --level 3 rm x",
    "foo /bin/rm x",
    "foo ./rm x",
    "foo --exec=rm x",
    "foo --exec=/usr/bin/rm x",
    "tar --use-compress-program=rm -cf a.tar b",
    "foo {rm,-rf,x}",
    "foo 'rm -rf x'",
    "foo 'ls; rm x'",
    "foo --run='rm x'",
    "hyperfine 'sudo rm x'",
    "docker exec c sh -c 'rm x'",
    "kubectl exec pod -- rm x",
    "git bisect run rm x",
    "sudo -u root mywrapper rm x",
    "watch -x mywrapper rm x",
    "echo x | xargs mywrapper rm",
    "EDITOR='rm -rf x' git commit",
    "GIT_SSH_COMMAND='rm -rf x' git fetch",
    "git -c core.editor=rm commit",
    "git -c alias.x='!rm -rf y' x",
    "make CC=rm",
    "exec -a rm busybox -rf x",
    "env --argv0=rm busybox -rf x",
    "EDITOR=rm; export EDITOR",
    "export EDITOR='rm -rf x'",
]
NOT_FOUND_IN_ARGUMENTS = [
    "git commit -m 'remove the cache'",
    "git commit -m 'rmdir is fine'",
    "echo rm -rf x",
    "printf '%s\\n' rm",
    "command -v rm",
    "type rm",
    "[ -x /bin/rm ]",
    "test -f rm",
    "foo rmdir x",
    "foo --format=rmx",
    "grep -r remove .",
    "sed -i 's/rm -rf/rm -r/' build.sh",
    "sed -e 's,/bin/rm,/bin/true,' x",
    "python -m pytest -k 'not rm'",
]
#: Denied on purpose: the policy cannot tell a subcommand or a name from a program.
DOCUMENTED_OVERREACH = [
    "git rm x",
    "docker rm c",
    "man rm",
    "grep -rn rm .",
    "foo 'rm old'",
    "timeout 5 echo rm",  # behind a runner, echo's words are searched too
]


@pytest.mark.parametrize("command", FOUND_IN_ARGUMENTS)
def test_a_program_named_in_the_arguments_is_judged_as_that_program(command: str) -> None:
    verdict = shell(DENY_RM, command)
    assert verdict is not None and verdict.action == "deny" and verdict.rule == "no-rm"
    assert "rm" in verdict.reason


@pytest.mark.parametrize("command", NOT_FOUND_IN_ARGUMENTS)
def test_words_that_are_data_are_not_programs(command: str) -> None:
    assert action(shell(ALLOW_ALL_BUT_RM, command)) == "allow"


@pytest.mark.parametrize("command", DOCUMENTED_OVERREACH)
def test_the_search_errs_towards_refusing(command: str) -> None:
    assert action(shell(DENY_RM, command)) == "deny"


def test_ask_rules_and_globbed_rules_search_the_arguments_too() -> None:
    policy = make(
        {"tool": "run_shell", "command": "*", "action": "allow"},
        {"tool": "run_shell", "command": "git push *", "action": "ask"},
        {"tool": "run_shell", "command": "[c]url *", "action": "deny", "id": "no-curl"},
    )
    assert action(shell(policy, "mywrapper git push origin")) == "ask"
    assert action(shell(policy, "mywrapper git pull")) == "allow"
    verdict = shell(policy, "mywrapper -v curl example.com")
    assert verdict is not None and verdict.rule == "no-curl"
    assert "judged as: curl example.com" in verdict.reason
    assert action(shell(policy, "mywrapper -v wget example.com")) == "allow"


def test_rules_with_args_search_the_arguments_only_when_their_args_match() -> None:
    policy = make(
        {"tool": "run_shell", "command": "*", "action": "allow"},
        {"tool": "run_shell", "command": "rm *", "args": {"cwd": "/srv/**"}, "action": "deny"},
    )
    assert action(policy.judge("run_shell", {"command": "nocache rm x", "cwd": "/srv/a"})) == (
        "deny"
    )
    assert action(policy.judge("run_shell", {"command": "nocache rm x", "cwd": "/tmp"})) == (
        "allow"
    )


def test_the_search_has_a_budget() -> None:
    # Thousands of candidate commands that each need a regex: refused, not slow.
    policy = make({"tool": "run_shell", "command": "rm * z", "action": "deny"})
    verdict = shell(policy, "foo " + "rm a " * 5000)
    assert verdict is not None and verdict.rule == SHELL_RULE
    assert "more commands than" in verdict.reason
    assert shell(policy, "foo " + "rm a " * 100) is None  # control: a few are judged


# -- any chain of runners ----------------------------------------------------------------

#: Prefixes that run the words after them as a command.
ARGV_RUNNERS = [
    t.removesuffix(" CMD") for _, t in FLAT if t.endswith(" CMD") and "CMD" not in t[:-4]
]
ARGV_RUNNERS = [
    r
    for r in ARGV_RUNNERS
    if "xargs" not in r
    and "find" not in r
    and f"{r} CMD" not in PERMUTING
    and "%" not in r  # systemd-run would read it as a specifier in what it runs
    and not r.startswith("ssh")  # ssh joins its words: the remote shell re-reads quotes
]
#: Wrappers that take the command as one shell string.
STRING_RUNNERS = ["sh -c", "bash -c", "su root -c", "flock f -c", "sg wheel", "ssh host", "watch"]
#: Programs the splitter does not know, which the argument search sees through.
UNKNOWN_RUNNERS = ["mywrapper", "uv run", "nocache -q", "torsocks"]


def _wrap(command: str, wrapper: tuple[str, str]) -> str:
    kind, prefix = wrapper
    return f"{prefix} {shlex.quote(command)}" if kind == "string" else f"{prefix} {command}"


WRAPPER = st.one_of(
    st.tuples(st.just("argv"), st.sampled_from(ARGV_RUNNERS)),
    st.tuples(st.just("string"), st.sampled_from(STRING_RUNNERS)),
    st.tuples(st.just("unknown"), st.sampled_from(UNKNOWN_RUNNERS)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WRAPPER, min_size=1, max_size=5), st.sampled_from(RM_QUOTABLE))
def test_any_chain_of_runners_in_front_of_rm_is_still_denied(
    chain: list[tuple[str, str]], rm: str
) -> None:
    command, control = rm, "ls -la"
    for wrapper in reversed(chain):
        command, control = _wrap(command, wrapper), _wrap(control, wrapper)
    verdict = shell(ALLOW_ALL_BUT_RM, command)
    assert verdict is not None and verdict.action == "deny", (command, verdict)
    assert verdict.rule == "no-rm", (command, verdict)
    assert action(shell(ALLOW_ALL_BUT_RM, control)) == "allow", control
    assert shell(NO_RULES, control) is None


# -- the documentation lists what the code knows ----------------------------------------

DOCS = Path(__file__).resolve().parents[3] / "docs" / "governance.md"


def _documented(kind: str) -> set[str]:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"<!-- runners:{kind} -->(.*?)<!-- /runners -->", text, re.DOTALL)
    assert match is not None, f"docs/governance.md has no runners:{kind} list"
    names = {code.split()[0] for code in re.findall(r"`([^`]+)`", match.group(1))}
    return {n for n in names if not n.startswith("-") or n == "-"}


@pytest.mark.parametrize("kind", ["judged", "unjudged", "refused"])
def test_the_docs_list_every_runner_the_splitter_knows(kind: str) -> None:
    in_code = {name for name, handling in RUNNERS.items() if handling == kind}
    in_docs = _documented(kind)
    assert in_docs - in_code == set(), f"documented but not in shell.RUNNERS as {kind}"
    assert in_code - in_docs == set(), f"in shell.RUNNERS as {kind} but not documented"


def test_the_docs_name_no_runner_with_an_ellipsis() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for kind in ("judged", "unjudged", "refused"):
        block = re.search(rf"<!-- runners:{kind} -->(.*?)<!-- /runners -->", text, re.DOTALL)
        assert block is not None and "…" not in block.group(1)


# -- real runners agree -------------------------------------------------------------------

_SHIM = """#!/bin/sh
printf '%s\\037' "${0##*/}" "$@" > "$KOBOI_SHIM_LOG/$$"
"""

#: Runners installed on most Linux machines, run for real with a program that records its
#: argv. Each line runs ``kx`` (or nothing, when the runner refuses); whatever ran must be
#: a segment, and a ``kx *`` deny rule must deny the line.
REAL = [
    "flock {tmp}/lock kx a b",
    "flock -w 3 {tmp}/lock kx a",
    "flock -n {tmp}/lock -c 'kx a; kx b'",
    "flock --timeout=3 {tmp}/lock kx a",
    "flock --time 3 {tmp}/lock kx a",
    "flock -x -E 3 {tmp}/lock kx a",
    "flock -c 'kx a'",
    "taskset 1 kx a",
    "taskset -c 0 kx a",
    "setarch x86_64 kx a",
    "setarch -R kx a",
    "setarch x86_64 -R kx a",
    "x86_64 kx a",
    "linux64 kx a",
    "linux32 -R kx a",
    "i386 kx a",
    "prlimit --nofile=100 kx a",
    "prlimit -n100 kx a",
    "prlimit --nofile=100:200 --cpu=10 kx a",
    "prlimit --nof=100 kx a",
    "chrt -f 1 kx a",
    "chrt --idle 0 kx a",
    "chrt -i kx a",
    "chrt -o 0 kx a",
    "chrt -b 0 kx a",
    "ionice -c 3 kx a",
    "ionice -c2 -n7 kx a",
    "nice -n 5 kx a",
    "nice -5 kx a",
    "nice --adj 3 kx a",
    "timeout -s KILL 5 kx a",
    "timeout --sig=KILL 5 kx a",
    "timeout -k 1 5 kx a",
    "stdbuf -oL kx a",
    "stdbuf -o L kx a",
    "setsid -w kx a",
    "env -u HOME kx a",
    "env --chdir=/ kx a",
    "chroot / kx a",
    "unshare -m kx a",
    "unshare --fork --pid kx a",
    "runuser -u root -- kx a",
    "runuser -u root kx a",
    "runuser root -c 'kx a'",
    "sg root 'kx a; kx b'",
    "sg root -c 'kx a'",
    "setpriv --nnp kx a",
    "strace -f -o /dev/null kx a",
    "strace -qq -e trace=none -o /dev/null kx a",
    "script -qc 'kx a' /dev/null",
    "capsh -- -c 'kx a'",
    "fakeroot kx a",
    "choom -n 0 -- kx a",
    "choom -n 0 kx a",
    "nice timeout 5 env X=1 flock {tmp}/lock kx a",
]


@pytest.fixture(scope="module")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("shim")
    (directory / "kx").write_text(_SHIM)
    (directory / "kx").chmod(0o755)
    return directory


@pytest.mark.e2e
@pytest.mark.parametrize("template", REAL)
def test_what_a_real_runner_starts_is_a_segment(
    recorder: Path, tmp_path: Path, template: str
) -> None:
    program = template.split()[0]
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    log = tmp_path / "log"
    log.mkdir()
    command = template.format(tmp=tmp_path)
    subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        timeout=30,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env={
            "PATH": f"{recorder}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "KOBOI_SHIM_LOG": str(log),
            "HOME": str(tmp_path),
        },
        check=False,
    )
    runs = [tuple(p.read_text().split("\x1f")[:-1]) for p in log.iterdir()]
    found = [s.argv for s in segments(command)]
    for ran in runs:
        assert ran in found, (command, ran, found)
    if runs:
        denied = shell(make({"tool": "run_shell", "command": "kx *", "action": "deny"}), command)
        assert denied is not None and denied.action == "deny", (command, denied)
    else:
        pytest.skip(f"{program} could not run here: {command}")


#: Words each installed runner is tried with, in any order and number, around ``kx a``.
VOCABULARY = {
    runner: shlex.split(words)
    for runner, words in {
        "flock": """-s -x -n -o -F -u -w 3 -E 1 --verbose --nb --time 2 -c "'kx c'" --fd 3 f -- -e""",
        "taskset": "-a -c -p 1 0 0-1 --cpu-list -- 0x1",
        "setarch": "x86_64 -R -v -3 -B --uname-2.6 --4gb -L i386 --",
        "prlimit": "--nofile=100 -n100 -n 100 --cpu=10 -t10 --raw -- --noheadings -o RESOURCE "
        "--nof=99 --pid 0",
        "chrt": "-f -r -o -b -i 0 1 -R -v -- -m 99 -p",
        "nice": "-n 5 -5 --adj 3 --adjustment=2 -- -19",
        "ionice": "-c 3 -c2 -n7 -t -- -n 0 -p",
        "timeout": "5 -s KILL -k 1 --sig=TERM -v --foreground -- 9",
        "stdbuf": "-oL -o L -e 0 -i0 --output=L --",
        "setsid": "-w -f -c --wait --",
        "env": "-u HOME X=1 -i --chdir=/ -C / - -- -0",
        "unshare": "-m -r --fork --pid -u -i --mount-proc -U --",
        "setpriv": "--nnp --reuid=0 --regid 0 --clear-groups --keep-groups --",
        "runuser": """-u root -- -l root -c "'kx r'" -""",
        "sg": """root -c "'kx s'" - kx""",
        "choom": "-n 0 -- -p 1",
        "strace": "-f -o /dev/null -qq -e trace=none -E X=1 -- -s 10 -tt",
        "script": """-q -c "'kx t'" /dev/null -a -e -f --""",
        "capsh": """-- -c "'kx u'" --caps= ==""",
    }.items()
}
#: Allows every runner above and the words kx is given, never kx itself.
RUNNERS_ALLOWED = make(
    {
        "tool": "run_shell",
        "command": [*(f"{name} *" for name in VOCABULARY), "a", "a *", "f *"],
        "action": "allow",
    }
)
KX_DENIED = make({"tool": "run_shell", "command": "kx *", "action": "deny"})


@st.composite
def _invocations(draw: st.DrawFn) -> str:
    runner = draw(st.sampled_from(sorted(name for name in VOCABULARY if shutil.which(name))))
    words = draw(st.lists(st.sampled_from(VOCABULARY[runner]), max_size=4))
    at = draw(st.integers(min_value=0, max_value=len(words)))
    return " ".join([runner, *words[:at], "kx", "a", *words[at:]])


@pytest.mark.e2e
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_invocations())
def test_whatever_options_a_real_runner_gets_what_it_runs_is_judged(
    recorder: Path, tmp_path_factory: pytest.TempPathFactory, command: str
) -> None:
    """Run random option lists for real: when kx ran, ``kx *`` denies the line and an
    allow rule for the runner alone does not allow it."""
    cwd = tmp_path_factory.mktemp("run")
    log = cwd / "log"
    log.mkdir()
    env = {"PATH": f"{recorder}:/usr/bin:/bin:/usr/sbin:/sbin", "KOBOI_SHIM_LOG": str(log)}
    try:
        subprocess.run(
            ["sh", "-c", command],
            capture_output=True,
            timeout=15,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            env={**env, "HOME": str(cwd)},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return
    if not any(log.iterdir()):
        return  # the runner refused these options: nothing ran
    denied = shell(KX_DENIED, command)
    assert denied is not None and denied.action == "deny", (command, denied)
    assert action(shell(RUNNERS_ALLOWED, command)) != "allow", command


def test_a_pid_of_zero_is_no_other_process() -> None:
    # taskset and prlimit act on themselves for pid 0 and then run their command.
    assert segments("taskset -p 1 rm 0")[-1].argv == ("rm", "0")
    assert segments("prlimit --pid 0 --nofile=1 rm x")[-1].argv == ("rm", "x")
    assert [s.text for s in segments("taskset -p 1 123")] == ["taskset -p 1 123"]
    assert [s.text for s in segments("prlimit --pid 123")] == ["prlimit --pid 123"]
    assert segments("chrt -f 1 -- rm x")[-1].argv == ("rm", "x")
