"""The policy language: each refusal beside a control that the same policy allows."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import koboi_governance.policy as policy_module
from koboi_governance.policy import Policy, PolicyRule, PolicySection, PolicyVerdict


def make(*rules: dict[str, Any], **section: Any) -> Policy:
    return Policy(PolicySection.model_validate({"rules": list(rules), **section}))


def shell(policy: Policy, command: str) -> PolicyVerdict | None:
    return policy.judge("run_shell", {"command": command})


def action(verdict: PolicyVerdict | None) -> str | None:
    return None if verdict is None else verdict.action


#: Read-only commands allowed one by one; deleting denied.
SMUGGLING = make(
    {
        "tool": "run_shell",
        "command": ["ls*", "echo *", "cat *", "true", "grep *"],
        "action": "allow",
    },
    {"tool": "run_shell", "command": ["find *", "xargs *", "bash -c *"], "action": "allow"},
    {"tool": "run_shell", "command": ["env *", "X=1 ls*"], "action": "allow"},
    {"tool": "run_shell", "command": "rm *", "action": "deny", "reason": "nothing is deleted"},
)


# -- shell segment smuggling -------------------------------------------------------


@pytest.mark.parametrize(
    ("denied", "allowed"),
    [
        ("ls && rm -rf x", "ls && ls -la"),
        ("ls; rm -rf x", "ls; cat x"),
        ("ls | rm -rf x", "ls | grep x"),
        ("ls || rm -rf x", "ls || true"),
        ("ls\nrm -rf x", "ls\nls -la"),
        ("echo $(rm -rf /)", "echo $(ls)"),
        ("echo `rm -rf /`", "echo `ls`"),
        ('echo "$(rm -rf /)"', 'echo "$(ls)"'),
        ("cat <(rm -rf x)", "cat <(ls)"),
        ("(ls; rm -rf x)", "(ls; ls -la)"),
        ("{ ls; rm -rf x; }", "{ ls; cat x; }"),
        ("find . -exec rm {} \\;", "find . -name '*.py' -exec grep -l x {} +"),
        ("find . -execdir rm -f {} +", "find . -execdir grep -l x {} +"),
        ("ls | xargs rm", "ls | xargs grep x"),
        ("ls | xargs -0 rm -f", "ls | xargs -0 grep -l x"),
        ('bash -c "rm -rf x"', 'bash -c "ls -la"'),
        ("bash -c 'ls && rm -rf x'", "bash -c 'ls && cat x'"),
        ("env X=1 rm", "env X=1 ls"),
        ("/bin/rm -rf x", "ls /bin"),
        ("\\rm -rf x", "\\ls"),
        ("r'm' -rf x", "l's' -la"),
        (" && ".join(["true"] * 60) + " && rm -rf x", " && ".join(["true"] * 60) + " && ls"),
    ],
)
def test_shell_smuggling_is_denied_and_its_control_allowed(denied: str, allowed: str) -> None:
    refused = shell(SMUGGLING, denied)
    assert refused is not None and refused.action == "deny", refused
    assert refused.reason.startswith("nothing is deleted")
    assert "rm" in refused.reason  # names the command that was denied
    assert action(shell(SMUGGLING, allowed)) == "allow"


@pytest.mark.parametrize(
    "command",
    ["eval 'rm -rf x'", "$CMD -rf x", "cat <<EOF\nx\nEOF", "for f in *; do rm $f; done", "ls '"],
)
def test_a_command_too_complex_to_judge_is_denied(command: str) -> None:
    # Even a policy that allows every shell call cannot let these through.
    everything = make({"tool": "run_shell", "action": "allow"})
    verdict = shell(everything, command)
    assert verdict is not None and verdict.action == "deny" and verdict.rule == "shell"
    assert "cannot be judged safely" in verdict.reason
    assert action(shell(everything, "ls -la && make test")) == "allow"  # control


def test_a_command_allowed_by_no_rule_gets_no_allow() -> None:
    assert shell(SMUGGLING, "ls && make") is None  # make: no rule, so no allow for the call
    assert action(shell(SMUGGLING, "ls")) == "allow"
    asking = make(
        {"tool": "run_shell", "command": "ls*", "action": "allow"},
        {"tool": "run_shell", "command": "git push *", "action": "ask"},
    )
    assert action(shell(asking, "ls && git push origin main")) == "ask"
    assert action(shell(asking, "ls && make && git push")) == "ask"


def test_a_runner_needs_its_own_allow() -> None:
    only_ls = make({"tool": "run_shell", "command": "ls *", "action": "allow"})
    assert shell(only_ls, "sudo ls") is None
    assert shell(only_ls, "ls | xargs ls") is None
    both = make({"tool": "run_shell", "command": ["ls *", "sudo ls*"], "action": "allow"})
    assert action(shell(both, "sudo ls")) == "allow"


def test_allow_patterns_see_the_command_as_it_runs() -> None:
    policy = make({"tool": "run_shell", "command": "ls *", "action": "allow"})
    assert action(shell(policy, "ls -la")) == "allow"
    assert shell(policy, "LD_PRELOAD=./evil.so ls") is None  # code injected into ls
    assert shell(policy, "./ls") is None  # a local program named ls
    assert shell(policy, "PATH=/tmp/evil; ls") is None  # the assignment runs no program
    assert action(shell(policy, "ls > listing.txt 2>&1")) == "allow"


def test_deny_patterns_match_every_spelling() -> None:
    policy = make(
        {"tool": "run_shell", "command": "*", "action": "allow"},
        {"tool": "run_shell", "command": "rm *", "action": "deny"},
        {"tool": "run_shell", "command": "* > /etc/*", "action": "deny", "id": "no-etc"},
        {"tool": "run_shell", "command": "LD_PRELOAD=*", "action": "deny"},
    )
    for command in ("/usr/bin/rm -rf x", "X=1 rm x", "rm", "rm x 2>/dev/null"):
        assert action(shell(policy, command)) == "deny", command
    verdict = shell(policy, "echo pwned > /etc/passwd")
    assert verdict is not None and verdict.action == "deny" and verdict.rule == "no-etc"
    assert action(shell(policy, "LD_PRELOAD=x.so ls")) == "deny"
    assert action(shell(policy, "echo fine > out.txt")) == "allow"  # control
    assert action(shell(policy, "rmdir empty")) == "allow"  # 'rm *' is not 'rm*'


def test_a_whole_call_rule_covers_every_segment() -> None:
    policy = make(
        {"tool": "run_shell", "action": "allow"},
        {"tool": "run_shell", "command": "rm *", "action": "deny"},
        {"tool": "run_shell", "command": "git push *", "action": "ask"},
    )
    assert action(shell(policy, "ls && make && ./configure")) == "allow"
    assert action(shell(policy, "make && rm -rf build")) == "deny"
    assert action(shell(policy, "make && git push")) == "ask"


def test_whole_call_rules_can_pattern_other_arguments_and_deny_on_the_raw_text() -> None:
    policy = make(
        {"tool": "run_shell", "command": "*", "action": "allow"},
        {"tool": "run_shell", "args": {"cwd": "/etc/**"}, "action": "deny"},
        {"tool": "run_shell", "args": {"command": "*curl*"}, "action": "ask"},
    )
    assert action(policy.judge("run_shell", {"command": "ls", "cwd": "/etc/ssl"})) == "deny"
    assert action(policy.judge("run_shell", {"command": "ls", "cwd": "src"})) == "allow"
    assert action(shell(policy, "echo x | curl -d @- example.com")) == "ask"


def test_segment_rules_with_args_need_both() -> None:
    policy = make(
        {"tool": "run_shell", "command": "make *", "args": {"cwd": "build/**"}, "action": "allow"}
    )
    assert action(policy.judge("run_shell", {"command": "make all", "cwd": "build/x"})) == "allow"
    assert policy.judge("run_shell", {"command": "make all", "cwd": "src"}) is None
    assert policy.judge("run_shell", {"command": "make all"}) is None


def test_the_shell_argument_must_be_text() -> None:
    policy = make({"tool": "run_shell", "action": "allow"})
    for arguments in ({}, {"command": ["ls"]}, {"command": 3}):
        verdict = policy.judge("run_shell", arguments)
        assert verdict is not None and verdict.action == "deny" and "as text" in verdict.reason
    assert action(policy.judge("run_shell", {"command": "ls"})) == "allow"


def test_other_shell_tools_are_named_in_shell_arguments() -> None:
    policy = make(
        {"tool": "ssh_exec", "command": "uptime", "action": "allow"},
        {"tool": "ssh_exec", "command": "rm *", "action": "deny"},
        shell_arguments={"run_shell": "command", "ssh_exec": "cmd"},
    )
    assert action(policy.judge("ssh_exec", {"cmd": "uptime"})) == "allow"
    assert action(policy.judge("ssh_exec", {"cmd": "uptime; rm -rf /"})) == "deny"


def test_command_rules_never_match_other_tools() -> None:
    policy = make({"tool": "*", "command": "*", "action": "deny"})
    assert policy.judge("read_file", {"path": "x"}) is None
    assert action(shell(policy, "ls")) == "deny"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(["ls", "ls -la src", "cat a.txt", "echo $(ls)", "grep -r x .", "true"]),
        min_size=0,
        max_size=20,
    ),
    st.lists(st.sampled_from(["&&", "||", ";", "|", "\n"]), min_size=21, max_size=21),
    st.integers(min_value=0, max_value=20),
)
def test_a_denied_command_anywhere_in_a_chain_denies_the_call(
    harmless: list[str], operators: list[str], position: int
) -> None:
    def chain(commands: list[str]) -> str:
        line = commands[0]
        for operator, command in zip(operators, commands[1:], strict=False):
            line += f" {operator} {command}"
        return line

    position = min(position, len(harmless))
    with_rm = [*harmless[:position], "rm -rf x", *harmless[position:]]
    assert action(shell(SMUGGLING, chain(with_rm))) == "deny"
    if harmless:
        assert action(shell(SMUGGLING, chain(harmless))) == "allow"


# -- arguments and paths -----------------------------------------------------------

PATHS = make(
    {"tool": "read_file", "args": {"path": "src/**"}, "action": "allow"},
    {"tool": "read_file", "args": {"path": "/tmp/**"}, "action": "allow"},
    {"tool": "glob", "args": {"pattern": "**/*.py"}, "action": "allow"},
    {"tool": "edit_file", "args": {"path": "docs/*.md"}, "action": "allow"},
    {"tool": "write_file", "args": {"path": "**"}, "action": "allow"},
)


@pytest.mark.parametrize(
    ("tool", "path", "allowed"),
    [
        ("read_file", "src/a/b.py", True),
        ("read_file", "src", True),
        ("read_file", "./src/a.py", True),
        ("read_file", "src/./a/../b.py", True),
        ("read_file", "src/../secrets", False),
        ("read_file", "src/../../etc/passwd", False),
        ("read_file", "../src/a.py", False),
        ("read_file", "/etc/passwd", False),
        ("read_file", "srcx/a.py", False),
        ("read_file", "/tmp/a/b", True),
        ("read_file", "/tmp/../etc/passwd", False),
        ("read_file", "tmp/a", False),  # a relative value never matches an absolute pattern
        ("read_file", "src/a\0.py", False),
        ("glob", "a/b/c.py", True),
        ("glob", "c.py", True),
        ("glob", "../c.py", False),
        ("glob", "/etc/c.py", False),  # '**' spans components, never out of the workdir
        ("write_file", "a/b/c", True),
        ("write_file", "/etc/passwd", False),
        ("write_file", "a/../../x", False),
        ("edit_file", "docs/a.md", True),
        ("edit_file", "docs/a/b.md", False),  # '*' stays inside one component
    ],
)
def test_path_globs(tool: str, path: str, allowed: bool) -> None:
    key = "pattern" if tool == "glob" else "path"
    assert action(PATHS.judge(tool, {key: path})) == ("allow" if allowed else None)


def test_plain_globs_numbers_booleans_lists_and_missing_arguments() -> None:
    policy = make(
        {"tool": "web_fetch", "args": {"url": "https://docs.example.com/*"}, "action": "allow"},
        {"tool": "web_fetch", "args": {"url": "*://169.254.*"}, "action": "deny"},
        {"tool": "run_job", "args": {"retries": 3, "dry_run": True}, "action": "allow"},
        {"tool": "delete_files", "args": {"paths": "build/**"}, "action": "allow"},
        {"tool": "delete_files", "args": {"paths": "**/.git/**"}, "action": "deny"},
        {"tool": "set_port", "args": {"port": "80*"}, "action": "allow"},
    )
    web = "web_fetch"
    assert action(policy.judge(web, {"url": "https://docs.example.com/a/b"})) == "allow"
    assert policy.judge(web, {"url": "https://example.com/"}) is None
    assert action(policy.judge(web, {"url": "http://169.254.169.254/x"})) == "deny"
    assert action(policy.judge("run_job", {"retries": 3, "dry_run": True})) == "allow"
    assert action(policy.judge("run_job", {"retries": 3.0, "dry_run": True})) == "allow"
    assert policy.judge("run_job", {"retries": 3, "dry_run": 1}) is None  # 1 is not true
    assert policy.judge("run_job", {"retries": True, "dry_run": True}) is None
    assert policy.judge("run_job", {"retries": "3", "dry_run": True}) is None
    assert policy.judge("run_job", {"dry_run": True}) is None  # missing argument
    delete = "delete_files"
    assert action(policy.judge(delete, {"paths": ["build/a", "build/b/c"]})) == "allow"
    assert policy.judge(delete, {"paths": ["build/a", "src/b"]}) is None  # allow needs all
    assert action(policy.judge(delete, {"paths": ["build/a", "x/.git/config"]})) == "deny"
    assert policy.judge(delete, {"paths": []}) is None
    assert action(policy.judge("set_port", {"port": 8080})) == "allow"


# -- precedence and tool names -------------------------------------------------------


def test_most_restrictive_wins_whatever_the_order() -> None:
    rules = [
        {"tool": "write_file", "action": "allow", "id": "writes"},
        {"tool": "write_file", "args": {"path": "**/*.lock"}, "action": "ask", "id": "locks"},
        {"tool": "*", "args": {"path": ".git/**"}, "action": "deny", "id": "git-dir"},
    ]
    for ordered in (rules, list(reversed(rules))):
        policy = make(*ordered)
        assert policy.judge("write_file", {"path": "a.txt"}) == PolicyVerdict(
            "allow", "policy rule writes says allow", "writes"
        )
        assert action(policy.judge("write_file", {"path": "uv.lock"})) == "ask"
        verdict = policy.judge("write_file", {"path": ".git/config"})
        assert verdict is not None and verdict.rule == "git-dir"


def test_among_equals_the_first_written_is_reported() -> None:
    policy = make(
        {"tool": "read_file", "action": "deny", "reason": "first"},
        {"tool": "read_*", "action": "deny", "reason": "second"},
    )
    assert policy.judge("read_file", {}) == PolicyVerdict("deny", "first", "rules[0]")


def test_tool_name_globs_are_exact_and_case_sensitive() -> None:
    policy = make(
        {"tool": "git_*", "action": "allow"},
        {"tool": "read_file", "action": "ask"},
        {"tool": "mcp_[!x]*", "action": "deny"},
    )
    assert action(policy.judge("git_status", {})) == "allow"
    assert policy.judge("gitstatus", {}) is None
    assert policy.judge("Git_status", {}) is None
    assert policy.judge("read_file ", {}) is None
    assert policy.judge("READ_FILE", {}) is None
    assert action(policy.judge("mcp_a_tool", {})) == "deny"
    assert policy.judge("mcp_x_tool", {}) is None
    assert policy.judge("anything", {}) is None  # no rule: the mode decides


def test_no_rules_means_no_verdict_except_for_unjudgeable_shell_lines() -> None:
    policy = Policy()
    assert policy.judge("read_file", {"path": "x"}) is None
    assert shell(policy, "ls") is None
    assert action(shell(policy, "eval x")) == "deny"


# -- loading -------------------------------------------------------------------------


def documented_example() -> str:
    """The YAML example at the top of the policy module's docstring."""
    assert policy_module.__doc__ is not None
    return policy_module.__doc__.split("::", 1)[1].split("How a call", 1)[0]


def test_the_documented_example_loads_from_yaml_and_works() -> None:
    policy = Policy(PolicySection.model_validate(yaml.safe_load(documented_example())))
    assert action(policy.judge("read_file", {"path": "src/a.py"})) == "allow"
    assert action(policy.judge("git_log", {})) == "allow"
    assert action(shell(policy, "ls && git status && pytest -q")) == "allow"
    assert action(shell(policy, "ls && rm -rf src")) == "deny"
    verdict = policy.judge("write_file", {"path": "secrets/key"})
    assert verdict is not None and verdict.rule == "no-secrets"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"rules": [{"tool": "x", "action": "allow", "tols": 1}]}, "Extra inputs"),
        ({"rules": [{"tool": "x"}]}, "action"),
        ({"rules": [{"tool": "x", "action": "permit"}]}, "'allow', 'ask' or 'deny'"),
        ({"rules": [{"tool": " ", "action": "allow"}]}, "tool must name a tool"),
        ({"rules": [{"tool": "x[", "action": "allow"}]}, "unclosed '['"),
        ({"rules": [{"tool": "x", "args": {"p": None}, "action": "allow"}]}, "args.p"),
        ({"rules": [{"tool": "x", "args": {"p": ["a"]}, "action": "allow"}]}, "args.p"),
        ({"rules": [{"tool": "x", "args": {"p": "a**/b"}, "action": "allow"}]}, "whole path"),
        ({"rules": [{"tool": "x", "args": {"p": "../x/**"}, "action": "allow"}]}, "'..'"),
        ({"rules": [{"tool": "x", "args": {"p": float("nan")}, "action": "deny"}]}, "finite"),
        ({"rules": [{"tool": "run_shell", "command": [], "action": "allow"}]}, "at least one"),
        ({"rules": [{"tool": "run_shell", "command": " ", "action": "allow"}]}, "'*' for any"),
        (
            {"rules": [{"tool": "read_file", "command": "ls", "action": "allow"}]},
            "only applies to shell tools",
        ),
        (
            {"rules": [{"tool": "run_shell", "args": {"command": "ls*"}, "action": "allow"}]},
            "use 'command:'",
        ),
        (
            {"rules": [{"tool": "*", "args": {"command": "ls*"}, "action": "allow"}]},
            "use 'command:'",
        ),
        (
            {
                "rules": [
                    {"tool": "a", "action": "allow", "id": "r"},
                    {"tool": "b", "action": "deny", "id": "r"},
                ]
            },
            "already used by rules[0]",
        ),
        ({"shell_arguments": {"run_shell": ""}}, "shell_arguments"),
        ({"rulez": []}, "Extra inputs"),
    ],
)
def test_invalid_policies_say_what_to_fix(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as invalid:
        PolicySection.model_validate(section)
    assert message in str(invalid.value)


def test_positive_controls_for_validation() -> None:
    PolicySection.model_validate(
        {
            "rules": [
                {"tool": "run_shell", "args": {"command": "*curl*"}, "action": "deny"},
                {"tool": "read_file", "args": {"path": "a/**/b"}, "action": "allow", "id": "r"},
                {"tool": "*", "command": "ls", "action": "allow"},
                {"tool": "x", "args": {"n": 1.5, "flag": False}, "action": "ask"},
            ]
        }
    )


def test_every_field_is_described_for_the_config_schema() -> None:
    for model in (PolicyRule, PolicySection):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
        assert model.model_config.get("extra") == "forbid"


# -- a policy of 100 rules -----------------------------------------------------------


def hundred_rules() -> PolicySection:
    words = [f"prog{i}" for i in range(50)]
    rules: list[dict[str, Any]] = [
        {"tool": "run_shell", "command": f"{w} *", "action": "allow"} for w in words
    ]
    rules += [{"tool": "run_shell", "command": f"danger{i} *", "action": "deny"} for i in range(10)]
    rules += [
        {"tool": f"tool_{i}", "args": {"path": f"dir{i}/**"}, "action": "allow"} for i in range(30)
    ]
    rules += [{"tool": f"mcp_{i}_*", "action": "ask"} for i in range(9)]
    rules += [{"tool": "run_shell", "command": "*--force*", "action": "ask"}]
    return PolicySection.model_validate({"rules": rules})


def test_a_hundred_rule_policy_judges_correctly() -> None:
    section = hundred_rules()
    assert len(section.rules) == 100
    policy = Policy(section)
    assert action(shell(policy, "prog3 -x && prog49 | prog0")) == "allow"
    assert action(shell(policy, "prog3 && danger7 now")) == "deny"
    assert action(shell(policy, "prog3 --force")) == "ask"
    assert shell(policy, "prog3 && unknown") is None
    assert action(policy.judge("tool_29", {"path": "dir29/a/b"})) == "allow"
    assert policy.judge("tool_29", {"path": "dir28/a"}) is None
    assert action(policy.judge("mcp_8_search", {})) == "ask"


def test_rules_are_compiled_once_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = Policy(hundred_rules())
    shell(policy, "prog1 x")
    policy.judge("tool_3", {"path": "dir3/x"})

    def no_compiling(*args: Any, **kwargs: Any) -> re.Pattern[str]:
        raise AssertionError("a pattern was compiled while judging")

    monkeypatch.setattr(policy_module, "_glob", no_compiling)
    monkeypatch.setattr(policy_module, "_command_regex", no_compiling)
    monkeypatch.setattr(policy_module.re, "compile", no_compiling)
    for _ in range(3):
        assert action(shell(policy, "prog1 x && prog2 y")) == "allow"
        assert action(policy.judge("tool_3", {"path": "dir3/x"})) == "allow"
