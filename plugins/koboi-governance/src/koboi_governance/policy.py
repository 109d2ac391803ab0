"""Policy rules: allow, ask or deny a tool call by tool name and argument patterns.

A policy is a list of rules, written in YAML::

    rules:
      - {tool: read_file, args: {path: "src/**"}, action: allow}
      - {tool: "git_*", action: allow}
      - {tool: run_shell, command: ["ls *", "git status", "pytest *"], action: allow}
      - {tool: run_shell, command: "rm *", action: deny, reason: "no deleting"}
      - {tool: "*", args: {path: "secrets/**"}, action: deny, id: no-secrets}

How a call is judged
--------------------

- ``tool`` is a tool's exact name or a glob over names (``git_*``, ``*``), case
  sensitive.
- ``args`` maps argument names (top-level only) to patterns; every one must match.
  A string pattern is a glob matched against the whole value: ``*`` any text,
  ``?`` one character, ``[abc]`` / ``[!abc]`` one of / none of. A pattern with a
  ``/`` or a ``**`` (and no ``://``, so URLs stay plain globs) is a *path pattern*:
  ``*`` and ``?`` stay inside one path component, ``**`` is any number of
  components (``src/**`` matches ``src``, ``src/a`` and ``src/a/b.py``;
  ``**/*.py`` any ``.py`` file), and the value is normalised first
  (``src/./a/../b`` is ``src/b``). A value that normalises to something absolute,
  or that starts with ``..``, never matches a relative pattern: ``src/**`` does
  not match ``src/../secrets`` nor ``/etc/passwd``. Numbers and ``true``/``false``
  match equal values of that type (a string pattern also matches a number's
  decimal text). For a list value, an ``allow`` rule must match every item and a
  ``deny`` or ``ask`` rule matches if any item does. A missing argument does not
  match.
- All rules that match are considered and the most restrictive wins:
  ``deny`` > ``ask`` > ``allow``; among equals the first one written is reported.
  :meth:`Policy.judge` answers ``None`` when no rule matches: the mode decides.

Shell tools (``shell_arguments`` names each one and the argument holding its
command line; default ``run_shell: command``) are judged command by command:

- The command line is split into segments with
  :func:`koboi_governance.shell.segments` (``&&``, ``;``, ``|``, newlines,
  ``$(…)``, backquotes, subshells, and every program in
  :data:`koboi_governance.shell.RUNNERS`: ``xargs``, ``find -exec``, ``sudo``,
  ``timeout``, ``flock``, ``sh -c`` …). A line that is too complex to judge is
  **denied**, whatever the rules say, with the reason. A segment whose runner
  cannot be read for sure (``Segment.opaque``) is denied when a deny or ask rule
  with ``command`` applies to the call, and never allowed.
- ``command`` (a glob or a list of globs) is matched against each segment's text:
  its arguments joined by single spaces (``git   status`` is ``git status``). A
  pattern that ends in `` *`` also matches the bare command: ``rm *`` matches
  ``rm`` and ``rm -rf x`` (not ``rmdir``). ``*`` matches any text, spaces
  included.
- ``allow`` patterns must match the segment as it runs: with its leading
  assignments (``LD_PRELOAD=x.so ls`` is not allowed by ``ls *``) and its program
  as written (``ls *`` does not allow ``./ls``). ``deny`` and ``ask`` patterns
  match any spelling: the text alone, with the assignments, with the
  redirections (``echo hi > /etc/x`` for ``* > /etc/*``), and with the program's
  directory removed (``/usr/bin/rm -rf x`` is denied by ``rm *``).
- ``deny`` and ``ask`` patterns also judge the commands a segment's arguments
  name, whatever program runs them (``eatmydata rm -f x``, ``foo 'ls; rm x'``):
  see :class:`_ArgumentSearch`. So ``git rm x`` is denied by ``rm *`` too.
- A rule with ``command`` judges segments; a rule without it judges the call as a
  whole and so applies to every segment. The call is denied if any segment is
  denied, asks if any segment asks, and is allowed only if every segment is
  allowed; if some segment is allowed by no rule, the call is not allowed: the
  answer is ``None`` (or ``ask``/``deny`` from other matches).
- A command runner is a segment too: ``sudo rm x`` needs ``sudo rm x`` *and*
  ``rm x`` allowed; ``xargs rm`` needs ``xargs rm`` and ``rm``.
- Rules with ``command`` never match other tools. An ``allow`` rule may not
  pattern the shell argument itself (``args: {command: "ls*"}`` would allow
  ``ls && rm -rf x``): that is refused when the policy is loaded.

What it does not protect against: a program that runs code it is given as data
(``python -c``, ``awk``, ``make``, a script file) is one segment like any other;
allow such programs only where anything they could do is acceptable. The
sandbox is the next line of defence.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from koboi_governance.shell import RUNNERS, Segment, TooComplex, segments

__all__ = ["Action", "Policy", "PolicyRule", "PolicySection", "PolicyVerdict"]

Action = Literal["allow", "ask", "deny"]

_ALLOW, _ASK, _DENY = 0, 1, 2
_RANK: dict[str, int] = {"allow": _ALLOW, "ask": _ASK, "deny": _DENY}
#: The ``rule`` of a verdict that comes from the shell splitter, not from a rule.
SHELL_RULE = "shell"
#: How many distinct tool names keep their compiled rule set (tool names come from
#: the registry, so this bounds memory, not correctness).
_BUCKET_CACHE = 4096
_SHOWN = 120


# -- config models ---------------------------------------------------------------


class PolicyRule(BaseModel):
    """One rule: which calls it matches and what to do with them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(
        description="The tool's exact name, or a glob over names: 'git_*', '*'. Case sensitive."
    )
    args: dict[str, str | bool | int | float] = Field(
        default_factory=dict,
        description="Argument name -> pattern; all must match. A string is a glob matched "
        "against the whole value; one with '/' or '**' is a path pattern ('src/**'): the value "
        "is normalised first and '..' or absolute values never match a relative pattern. "
        "Numbers and true/false match equal values.",
    )
    command: str | list[str] | None = Field(
        default=None,
        description="Shell tools only: a glob or a list of globs matched against each command "
        "of the command line (its arguments joined by single spaces). 'rm *' matches 'rm' "
        "and 'rm -rf x'.",
    )
    action: Action = Field(
        description="allow: run without asking; ask: a human approves; deny: refused."
    )
    reason: str | None = Field(
        default=None, description="Why: shown to the model and in the audit trail."
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        description="A name for the rule, reported in decisions instead of 'rules[N]'.",
    )

    @field_validator("tool")
    @classmethod
    def _tool_pattern(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("tool must name a tool, or be a glob over names like 'git_*' or '*'")
        _glob(value, path=False)
        return value

    @field_validator("args", mode="before")
    @classmethod
    def _args_types(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            for name, pattern in value.items():
                if not isinstance(name, str) or not name:
                    raise ValueError("args: each key must be an argument's name")
                if not isinstance(pattern, str | bool | int | float):
                    raise ValueError(
                        f"args.{name}: give a glob string, a number or true/false, "
                        f"not {type(pattern).__name__}"
                    )
        return value

    @field_validator("args")
    @classmethod
    def _args_patterns(
        cls, value: dict[str, str | bool | int | float]
    ) -> dict[str, str | bool | int | float]:
        for name, pattern in value.items():
            if isinstance(pattern, float) and not math.isfinite(pattern):
                raise ValueError(f"args.{name}: a number pattern must be finite")
            if isinstance(pattern, str):
                try:
                    _ArgPattern.compile(name, pattern)
                except ValueError as exc:
                    raise ValueError(f"args.{name}: {exc}") from None
        return value

    @field_validator("command")
    @classmethod
    def _command_patterns(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return None
        patterns = [value] if isinstance(value, str) else value
        if not patterns:
            raise ValueError("command: give at least one pattern, or leave command out")
        for pattern in patterns:
            if not pattern.strip():
                raise ValueError("command: a pattern cannot be empty (use '*' for any command)")
            _command_regex(pattern)
        return value

    def command_patterns(self) -> tuple[str, ...]:
        """``command`` as a tuple (empty when the rule judges the whole call)."""
        if self.command is None:
            return ()
        return (self.command,) if isinstance(self.command, str) else tuple(self.command)


class PolicySection(BaseModel):
    """The policy: rules, and which tools run shell command lines."""

    model_config = ConfigDict(extra="forbid")

    rules: list[PolicyRule] = Field(
        default_factory=list,
        description="The rules, all considered for every call; the most restrictive match "
        "wins (deny > ask > allow). No match: the mode decides.",
    )
    shell_arguments: dict[str, str] = Field(
        default_factory=lambda: {"run_shell": "command"},
        description="Shell tools: tool name -> the argument that holds its command line. "
        "Their calls are judged command by command.",
    )

    @field_validator("shell_arguments")
    @classmethod
    def _shell_arguments(cls, value: dict[str, str]) -> dict[str, str]:
        for tool, argument in value.items():
            if not tool or not argument:
                raise ValueError("shell_arguments: map each shell tool's name to an argument name")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> PolicySection:
        problems: list[str] = []
        seen_ids: dict[str, int] = {}
        shell_tools = sorted(self.shell_arguments)
        for index, rule in enumerate(self.rules):
            where = f"rules[{index}]"
            if rule.id is not None:
                if rule.id in seen_ids:
                    problems.append(
                        f"{where}: id {rule.id!r} is already used by rules[{seen_ids[rule.id]}]"
                    )
                seen_ids.setdefault(rule.id, index)
            tool_regex = _glob(rule.tool, path=False)
            covered = [t for t in shell_tools if tool_regex.fullmatch(t)]
            if rule.command is not None and not covered:
                listed = ", ".join(shell_tools) or "none"
                problems.append(
                    f"{where}: 'command' only applies to shell tools and {rule.tool!r} matches "
                    f"none (shell_arguments lists: {listed}); add the tool to shell_arguments "
                    "or remove 'command'"
                )
            if rule.action == "allow":
                for tool in covered:
                    argument = self.shell_arguments[tool]
                    if argument in rule.args:
                        problems.append(
                            f"{where}: an allow rule cannot pattern {tool}'s whole "
                            f"{argument!r} text (it would allow 'ls && rm -rf x' along with "
                            "'ls'); use 'command:' to allow commands one by one"
                        )
        if problems:
            raise ValueError("; ".join(problems))
        return self


# -- verdicts --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    """What the policy says about a call.

    ``rule`` is the deciding rule's ``id`` or ``rules[N]`` (several, comma
    separated, when each command of a shell line was allowed by its own rule), or
    ``"shell"`` when the command line could not be judged.
    """

    action: Action
    reason: str
    rule: str


# -- patterns --------------------------------------------------------------------


def _class(body: str, *, path: bool) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    # Escape what re would read as set operations or nested sets; keep '-' ranges.
    escaped = "".join("\\" + c if c in "\\[]^&~|" else c for c in body)
    if negate:
        return f"[^/{escaped}]" if path else f"[^{escaped}]"
    return f"[{escaped}]"


@lru_cache(maxsize=4096)
def _glob_source(pattern: str, *, path: bool) -> str:
    """The regex source of a glob; ``path`` makes ``*`` stop at '/' and adds ``**``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*" and path and pattern.startswith("**", i):
            after = i + 2
            if not ((i == 0 or pattern[i - 1] == "/") and (after == n or pattern[after] == "/")):
                raise ValueError(
                    f"'**' must be a whole path component in {pattern!r} "
                    "(write 'a/**/b', '**/x' or 'x/**')"
                )
            if after == n:
                if out:
                    out[-1] = "(?:/.*)?"  # 'x/**': x itself or anything below it
                else:
                    out.append(".*")
                i = after
            else:
                out.append("(?:.*/)?")  # '**/': any number of whole components
                i = after + 1
            continue
        if c == "*":
            out.append("[^/]*" if path else ".*")
        elif c == "?":
            out.append("[^/]" if path else ".")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            end = pattern.find("]", j)
            if end < 0:
                raise ValueError(f"unclosed '[' in {pattern!r} (write '[[]' for a literal '[')")
            out.append(_class(pattern[i + 1 : end], path=path))
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _glob(pattern: str, *, path: bool) -> re.Pattern[str]:
    return _compiled(_glob_source(pattern, path=path))


@lru_cache(maxsize=4096)
def _compiled(source: str) -> re.Pattern[str]:
    return re.compile(source, re.DOTALL)


def _command_regex(pattern: str) -> re.Pattern[str]:
    if pattern.endswith(" *"):
        # 'rm *' also matches the bare 'rm' (xargs rm, a command without arguments).
        return _compiled(_glob_source(pattern[:-2], path=False) + "(?: .*)?")
    return _glob(pattern, path=False)


def _is_path_pattern(pattern: str) -> bool:
    return ("/" in pattern or "**" in pattern) and "://" not in pattern


def _normalised_path(value: str) -> str | None:
    if "\0" in value:
        return None
    normal = posixpath.normpath(value) if value else "."
    return "" if normal == "." else normal


@dataclass(frozen=True, slots=True)
class _ArgPattern:
    name: str
    expected: str | bool | int | float
    #: The glob as plain text (for non-path patterns, and for a shell tool's command text).
    plain: re.Pattern[str] | None
    #: The glob as a path pattern, when it is one.
    path: re.Pattern[str] | None
    absolute: bool

    @classmethod
    def compile(cls, name: str, expected: str | bool | int | float) -> _ArgPattern:
        if not isinstance(expected, str):
            return cls(name, expected, None, None, False)
        plain = _glob(expected, path=False)
        if not _is_path_pattern(expected):
            return cls(name, expected, plain, None, False)
        normal = posixpath.normpath(expected)
        if normal == ".." or normal.startswith("../"):
            raise ValueError(
                f"{expected!r} starts with '..': relative path patterns match only paths "
                "inside the working directory"
            )
        return cls(name, expected, plain, _glob(normal, path=True), normal.startswith("/"))

    def matches(self, value: Any, *, every: bool, as_text: bool) -> bool:
        """``every``: a list must match item by item (allow); else any item will do."""
        if isinstance(value, list | tuple):
            if not value:
                return False
            if every:
                return all(self._matches_one(v, as_text) for v in value)
            return any(self._matches_one(v, as_text) for v in value)
        return self._matches_one(value, as_text)

    def _matches_one(self, value: Any, as_text: bool) -> bool:
        expected = self.expected
        if isinstance(expected, bool):
            return isinstance(value, bool) and value is expected
        if not isinstance(expected, str):
            return (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and (value == expected)
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return False
        text = value if isinstance(value, str) else str(value)
        if self.path is None or as_text:
            assert self.plain is not None
            return self.plain.fullmatch(text) is not None
        normal = _normalised_path(text)
        if normal is None:
            return False
        if self.absolute != normal.startswith("/"):
            return False
        if not self.absolute and (normal == ".." or normal.startswith("../")):
            return False
        return self.path.fullmatch(normal) is not None


@dataclass(frozen=True, slots=True, eq=False)  # identity: rules are compared as objects
class _Rule:
    index: int
    label: str
    action: Action
    rank: int
    reason: str | None
    args: tuple[_ArgPattern, ...]
    commands: tuple[re.Pattern[str], ...]
    #: The command patterns' first word when it is literal; None when one is a glob.
    first_words: tuple[str, ...] | None
    #: The literal first words among the command patterns (all of them, glob or not).
    literal_firsts: tuple[str, ...] = ()
    #: For patterns whose first word is a glob not starting with '*': the literal text
    #: before the glob. A command named in a segment's arguments must start with one.
    glob_prefixes: tuple[str, ...] = ()

    def args_match(self, arguments: Mapping[str, Any], text_argument: str | None) -> bool:
        every = self.rank == _ALLOW
        for pattern in self.args:
            if pattern.name not in arguments:
                return False
            as_text = pattern.name == text_argument
            if not pattern.matches(arguments[pattern.name], every=every, as_text=as_text):
                return False
        return True

    def matches_segment(self, forms: Sequence[str]) -> bool:
        return any(rx.fullmatch(form) for rx in self.commands for form in forms)

    def explain(self) -> str:
        return self.reason or f"policy rule {self.label} says {self.action}"


@dataclass(frozen=True, slots=True)
class _ToolRules:
    """The rules that can apply to one tool name, compiled for it."""

    #: The argument holding the command line, for a shell tool.
    shell_argument: str | None
    whole: tuple[_Rule, ...]
    #: Command rules without args, by the literal first word of their patterns.
    by_first_word: Mapping[str, tuple[_Rule, ...]]
    #: Command rules whose patterns start with a glob, or that have args.
    scanned: tuple[_Rule, ...]
    #: Command rules without args (deny and ask ones judge what arguments name).
    plain_command_rules: tuple[_Rule, ...]
    #: Those rules, indexed for a call whose rules with args all fail to match.
    guards: _Guards


@dataclass(frozen=True, slots=True)
class _Guards:
    """Deny and ask command rules, indexed to judge the commands a segment's arguments name."""

    #: Whether any deny or ask command rule applies to the call at all.
    present: bool = False
    #: Rules by the literal first word of their patterns.
    by_word: Mapping[str, tuple[_Rule, ...]] = field(default_factory=dict)
    #: Rules with a pattern whose first word is a glob (see _Rule.glob_prefixes).
    by_prefix: tuple[_Rule, ...] = ()

    @classmethod
    def of(cls, rules: Sequence[_Rule]) -> _Guards:
        guarding = [r for r in rules if r.commands and r.rank > _ALLOW]
        by_word: dict[str, list[_Rule]] = {}
        for rule in guarding:
            for word in dict.fromkeys(rule.literal_firsts):
                by_word.setdefault(word, []).append(rule)
        return cls(
            present=bool(guarding),
            by_word={k: tuple(v) for k, v in by_word.items()},
            by_prefix=tuple(r for r in guarding if r.glob_prefixes),
        )

    def rules_for(self, head: str) -> Sequence[_Rule]:
        """The rules whose patterns could match a command that starts with ``head``."""
        keyed = self.by_word.get(head.partition(" ")[0], ())
        if not self.by_prefix:
            return keyed
        prefixed = [r for r in self.by_prefix if any(map(head.startswith, r.glob_prefixes))]
        return [*keyed, *prefixed] if prefixed else keyed


def _first_word(pattern: str) -> str | None:
    word = pattern.split(" ", 1)[0]
    return None if any(c in word for c in "*?[") or not word else word


def _glob_prefix(pattern: str) -> str | None:
    """The literal text before a pattern's first glob character; None if it starts with '*'.

    A pattern that starts with ``*`` matches a segment's whole text whenever it matches
    a command named inside it, so it needs no search of the arguments.
    """
    match = re.match(r"[^*?\[]*", pattern)
    prefix = match.group() if match else ""
    return None if pattern.startswith("*") else prefix


def _compile_rule(index: int, rule: PolicyRule) -> _Rule:
    patterns = rule.command_patterns()
    firsts = [_first_word(p) for p in patterns]
    return _Rule(
        index=index,
        label=rule.id or f"rules[{index}]",
        action=rule.action,
        rank=_RANK[rule.action],
        reason=rule.reason,
        args=tuple(_ArgPattern.compile(k, v) for k, v in rule.args.items()),
        commands=tuple(_command_regex(p) for p in patterns),
        first_words=None if None in firsts else tuple(f for f in firsts if f is not None),
        literal_firsts=tuple(f for f in firsts if f is not None),
        glob_prefixes=tuple(
            prefix
            for pattern, first in zip(patterns, firsts, strict=True)
            if first is None and (prefix := _glob_prefix(pattern)) is not None
        ),
    )


def _shown(segment: Segment) -> str:
    parts = (*segment.assignments, segment.text, *segment.redirects)
    return _clipped(" ".join(p for p in parts if p))


def _clipped(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _segment_forms(
    segment: Segment, *, without_directory: bool = True
) -> tuple[str, tuple[str, ...]]:
    """The segment as it runs (for allow) and every spelling deny/ask patterns try."""
    text = segment.text
    if not (segment.assignments or segment.redirects or "/" in text.partition(" ")[0]):
        return text, (text,)  # the common case: one spelling
    bases = [text]
    if without_directory and segment.argv and "/" in segment.argv[0]:
        program = posixpath.basename(segment.argv[0])
        if program:
            bases.append(" ".join((program, *segment.argv[1:])))
    prefix = " ".join(segment.assignments)
    suffix = " ".join(segment.redirects)
    as_run = f"{prefix} {text}" if prefix and text else prefix or text
    spellings: dict[str, None] = {}
    for base in bases:
        for before in ("", prefix) if prefix else ("",):
            for after in ("", suffix) if suffix else ("",):
                spellings[" ".join(p for p in (before, base, after) if p)] = None
    return as_run, tuple(spellings)


# -- the matcher -----------------------------------------------------------------


class Policy:
    """A :class:`PolicySection` compiled once; :meth:`judge` is called per tool call.

    Globs are compiled when the policy is built, and the rules that can apply to
    a tool name are gathered the first time that name is judged.
    """

    def __init__(self, section: PolicySection | None = None) -> None:
        self.section = section if section is not None else PolicySection()
        self._shell_arguments = dict(self.section.shell_arguments)
        compiled = [_compile_rule(i, r) for i, r in enumerate(self.section.rules)]
        self._exact: dict[str, list[_Rule]] = {}
        self._globbed: list[tuple[re.Pattern[str], _Rule]] = []
        for rule, source in zip(compiled, self.section.rules, strict=True):
            if any(c in source.tool for c in "*?["):
                self._globbed.append((_glob(source.tool, path=False), rule))
            else:
                self._exact.setdefault(source.tool, []).append(rule)
        self._buckets: dict[str, _ToolRules] = {}

    def __len__(self) -> int:
        return len(self.section.rules)

    def judge(self, tool_name: str, arguments: Mapping[str, Any]) -> PolicyVerdict | None:
        """The policy's verdict on one call, or None when no rule matches (see the module doc)."""
        rules = self._rules_for(tool_name)
        if rules.shell_argument is None:
            best = _most_restrictive(rules.whole, arguments, None)
            return _verdict(best) if best is not None else None
        return self._judge_shell(tool_name, rules, rules.shell_argument, arguments)

    def _judge_shell(
        self,
        tool_name: str,
        rules: _ToolRules,
        argument: str,
        arguments: Mapping[str, Any],
    ) -> PolicyVerdict | None:
        command = arguments.get(argument)
        if not isinstance(command, str):
            return PolicyVerdict(
                "deny",
                f"{tool_name} needs its {argument!r} argument as text for the policy to judge it",
                SHELL_RULE,
            )
        try:
            found = segments(command)
        except TooComplex as exc:
            return PolicyVerdict(
                "deny",
                f"the shell command cannot be judged safely: {exc}. Run simpler commands "
                "(no eval, control structures or variables as program names).",
                SHELL_RULE,
            )
        whole = _most_restrictive(rules.whole, arguments, argument)
        if whole is not None and whole.rank == _DENY:
            return _verdict(whole)
        scanned = tuple(r for r in rules.scanned if r.args_match(arguments, argument))
        guards = rules.guards
        if any(r.rank > _ALLOW and r.args for r in scanned):
            guards = _Guards.of([*rules.plain_command_rules, *(r for r in scanned if r.args)])
        search = _ArgumentSearch(guards)
        asked: tuple[_Rule, Segment, str | None] | None = None
        allowed_by: list[_Rule] = []
        every_segment_allowed = True
        unseen = False
        judged: dict[Segment, tuple[_Rule | None, str | None]] = {}  # `true && true && …` once
        try:
            for segment in found:
                if segment.opaque:
                    if guards.present:
                        return PolicyVerdict(
                            "deny",
                            f"the shell command cannot be judged safely: {segment.opaque}, and "
                            "a deny or ask rule could apply to what it runs (command: "
                            f"{_shown(segment)})",
                            SHELL_RULE,
                        )
                    every_segment_allowed = False  # no rule can allow what it cannot see
                    unseen = True
                    continue
                if segment in judged:
                    best, via = judged[segment]
                else:
                    best, via = judged[segment] = _judge_segment(
                        rules.by_first_word, scanned, segment, search
                    )
                if best is None:
                    every_segment_allowed = False
                elif best.rank == _DENY:
                    return _verdict(best, segment, via)
                elif best.rank == _ASK:
                    asked = asked or (best, segment, via)
                elif best not in allowed_by:
                    allowed_by.append(best)
        except _TooManyCandidates as exc:
            return PolicyVerdict(
                "deny", f"the shell command cannot be judged safely: {exc}", SHELL_RULE
            )
        if whole is not None and whole.rank == _ASK:
            return _verdict(whole)
        if asked is not None:
            return _verdict(*asked)
        if unseen:
            return None  # not even an allow for the whole call covers a command nobody can see
        if whole is not None:
            return _verdict(whole)  # an allow for the whole call covers every segment
        if found and every_segment_allowed:
            if len(allowed_by) == 1:
                return _verdict(allowed_by[0])
            labels = ", ".join(r.label for r in allowed_by)
            return PolicyVerdict("allow", f"every command is allowed ({labels})", labels)
        return None

    def _rules_for(self, tool_name: str) -> _ToolRules:
        found = self._buckets.get(tool_name)
        if found is not None:
            return found
        matching = list(self._exact.get(tool_name, ()))
        matching += [rule for regex, rule in self._globbed if regex.fullmatch(tool_name)]
        matching.sort(key=lambda r: r.index)
        shell_argument = self._shell_arguments.get(tool_name)
        whole = tuple(r for r in matching if not r.commands)
        by_first_word: dict[str, list[_Rule]] = {}
        scanned: list[_Rule] = []
        if shell_argument is not None:
            for rule in matching:
                if not rule.commands:
                    continue
                if rule.args or rule.first_words is None:
                    scanned.append(rule)
                else:
                    for word in dict.fromkeys(rule.first_words):
                        by_first_word.setdefault(word, []).append(rule)
        plain = tuple(r for r in matching if r.commands and not r.args)
        compiled = _ToolRules(
            shell_argument=shell_argument,
            whole=whole,
            by_first_word={k: tuple(v) for k, v in by_first_word.items()},
            scanned=tuple(scanned),
            plain_command_rules=plain if shell_argument is not None else (),
            guards=_Guards.of(plain) if shell_argument is not None else _Guards(),
        )
        if len(self._buckets) >= _BUCKET_CACHE:
            self._buckets.clear()
        self._buckets[tool_name] = compiled
        return compiled


def _most_restrictive(
    rules: Sequence[_Rule], arguments: Mapping[str, Any], text_argument: str | None
) -> _Rule | None:
    best: _Rule | None = None
    for rule in rules:
        if best is not None and rule.rank <= best.rank:
            continue  # cannot change the answer: an equal or weaker rule written later
        if rule.args_match(arguments, text_argument):
            best = rule
            if best.rank == _DENY:
                break
    return best


def _judge_segment(
    by_first_word: Mapping[str, tuple[_Rule, ...]],
    scanned: Sequence[_Rule],
    segment: Segment,
    search: _ArgumentSearch,
) -> tuple[_Rule | None, str | None]:
    """The most restrictive rule for a segment, and the command it was matched on when that
    is one the segment's arguments name (``rm -f x`` in ``foo rm -f x``)."""
    best = _rule_for(by_first_word, scanned, segment)
    if best is not None and best.rank == _DENY:
        return best, None
    found = search.through_arguments(segment, _ALLOW if best is None else best.rank)
    if found is not None:
        return found
    return best, None


def _rule_for(
    by_first_word: Mapping[str, tuple[_Rule, ...]],
    scanned: Sequence[_Rule],
    segment: Segment,
) -> _Rule | None:
    as_run, spellings = _segment_forms(segment)
    candidates: Sequence[_Rule] = scanned
    if by_first_word:
        keyed = [by_first_word.get(form.partition(" ")[0], ()) for form in spellings]
        if scanned or len(keyed) > 1:
            merged = dict.fromkeys(rule for group in (scanned, *keyed) for rule in group)
            candidates = sorted(merged, key=lambda r: r.index)
        else:
            candidates = keyed[0]
    best: _Rule | None = None
    for rule in candidates:
        if best is not None and rule.rank <= best.rank:
            continue
        forms = (as_run,) if rule.rank == _ALLOW else spellings
        if rule.matches_segment(forms):
            best = rule
            if best.rank == _DENY:
                break
    return best


class _TooManyCandidates(Exception):
    """The arguments name more commands than the search tries: the call cannot be judged."""


#: Words that could be a command line of their own: ``'rm -rf x'``, ``'ls;rm x'``.
_COMMAND_LIKE = re.compile(r"[\s;&|()`$<>]")
#: How many (rule, command) pairs the argument search of one call may try (splitting the
#: rest of a segment again, from a runner's name, counts as 16 and one per 256 characters).
_SEARCH_BUDGET = 4096
#: How many runners named in arguments, one inside the other, the search follows.
_NESTING = 4


class _ArgumentSearch:
    """Deny and ask rules tried on the commands a segment's arguments could run.

    A program the splitter does not know may run any of its arguments (``eatmydata rm
    -f x``, ``ssh host 'rm x'``), so a deny or ask pattern is also tried on the text
    from each word that names the program the pattern starts with (the word itself,
    its file name without directory, the value of an ``--opt=VALUE`` word, a part of a
    brace list) to the end of the segment, and on the commands of each word that reads
    as a command line of its own. From a word naming a runner the splitter knows
    (``foo sh -c 'bar rm x'``), the rest of the segment is split again and judged in
    full. The words a runner hands to the command it starts are left to that command's
    own segment (see ``Segment.scan_end``).
    """

    def __init__(self, guards: _Guards) -> None:
        self.guards = guards
        self.left = _SEARCH_BUDGET

    def through_arguments(
        self, segment: Segment, floor: int, depth: int = 0
    ) -> tuple[_Rule, str] | None:
        """The most restrictive deny or ask rule ranked above ``floor`` that matches a
        command named in ``segment``'s arguments, with that command's text."""
        if not self.guards.present or floor == _DENY:
            return None
        # Assignments name programs too: EDITOR='rm -rf x' git commit, PAGER=… man ls.
        argv = ("", *segment.assignments, *segment.argv)
        start = len(segment.assignments) + 1
        end = len(argv) if segment.scan_end is None else start + segment.scan_end
        end = min(end, len(argv))
        suffix = " ".join(segment.redirects)
        best: tuple[_Rule, str] | None = None
        resplit = depth < _NESTING
        for index in (*range(1, start), *range(start + 1, end)):
            word = argv[index]
            found = self._word(argv, index, suffix, floor if best is None else best[0].rank)
            if resplit and word.rpartition("/")[2] in RUNNERS:
                rank = (floor if best is None else best[0].rank) if found is None else found[0].rank
                resplit = False  # once is enough: the rest holds every later runner word
                inner = self._resplit(argv[index:], rank, depth)
                found = inner or found
            if found is not None and (best is None or found[0].rank > best[0].rank):
                best = found
                if best[0].rank == _DENY:
                    return best
        return best

    def _word(
        self, argv: tuple[str, ...], index: int, suffix: str, floor: int
    ) -> tuple[_Rule, str] | None:
        word = argv[index]
        candidates: list[tuple[Sequence[_Rule], tuple[str, ...]]] = []
        for head in _heads(word):
            rules = self.guards.rules_for(head)
            if rules:
                text = " ".join((head, *argv[index + 1 :]))
                candidates.append((rules, (text, f"{text} {suffix}") if suffix else (text,)))
        for line in _command_lines(word):
            for inner in _commands_in(line):
                for form in _line_spellings(inner):
                    rules = self.guards.rules_for(form)
                    if rules:
                        candidates.append((rules, (form,)))
        best: tuple[_Rule, str] | None = None
        for rules, forms in candidates:
            found = self._try(rules, forms, floor if best is None else best[0].rank)
            if found is not None:
                best = (found, forms[0])
                if found.rank == _DENY:
                    break
        return best

    def _resplit(self, words: Sequence[str], floor: int, depth: int) -> tuple[_Rule, str] | None:
        """Judge ``words`` as a command line of their own (they start with a runner): the
        most restrictive rule above ``floor`` they meet."""
        line = shlex.join(words)
        self._spend(16 + len(line) // 256)  # splitting costs with the text's length
        best: tuple[_Rule, str] | None = None
        for inner in _commands_in(line):
            if inner.argv == tuple(words):
                continue  # the runner itself: the caller searched its words already
            rank = floor if best is None else best[0].rank
            spellings = _segment_forms(inner)[1]
            found: tuple[_Rule, str] | None = None
            for form in spellings:
                rule = self._try(self.guards.rules_for(form), (form,), rank)
                if rule is not None:
                    found, rank = (rule, form), rule.rank
            found = self.through_arguments(inner, rank, depth + 1) or found
            if found is not None:
                best = found
                if found[0].rank == _DENY:
                    break
        return best

    def _try(self, rules: Sequence[_Rule], forms: Sequence[str], floor: int) -> _Rule | None:
        best: _Rule | None = None
        for rule in rules:
            if rule.rank <= (floor if best is None else best.rank):
                continue
            self._spend(1)
            if rule.matches_segment(forms):
                best = rule
        return best

    def _spend(self, cost: int) -> None:
        self.left -= cost
        if self.left < 0:
            raise _TooManyCandidates(
                f"its arguments name more commands than the {_SEARCH_BUDGET} checks against "
                "the deny and ask rules one call may take"
            )


def _values(word: str) -> list[str]:
    """What follows '=' in ``word``, as a program could read it: ``--exec=rm``,
    ``git -c core.editor=rm``, ``make CC=rm``, and git's ``alias.x=!rm -rf y``."""
    if "=" not in word:
        return []
    value = word.partition("=")[2]
    return [value, value[1:]] if value.startswith("!") else [value]


def _heads(word: str) -> list[str]:
    """The ways ``word`` could start a command a wrapper runs (see _ArgumentSearch)."""
    heads = [word, *_values(word)]
    if "{" in word and "}" in word:
        heads.extend(part for part in re.split(r"[{},]", word) if part)  # {rm,-rf,x}
    for head in list(heads):
        # One word is one path: `/bin/rm` is rm, `s/rm -rf/x/` (a sed script) is not.
        if "/" in head and " " not in head and (name := head.rpartition("/")[2]):
            heads.append(name)  # /bin/rm, ./rm
    return list(dict.fromkeys(h for h in heads if h))


def _command_lines(word: str) -> list[str]:
    """The parts of ``word`` that could be command lines handed to a shell (``'ls; rm x'``)."""
    return [line for line in (word, *_values(word)) if _COMMAND_LIKE.search(line)]


def _line_spellings(segment: Segment) -> tuple[str, ...]:
    """A command's spellings in a word that only may be a command line: its program's
    directory is dropped only when it reads as a path (``/bin/rm``, ``./rm``), not in
    text such as a sed script (``s/rm -rf/echo/``)."""
    program = segment.argv[0]
    as_path = "/" not in program or program.startswith(("/", "."))
    return _segment_forms(segment, without_directory=as_path)[1]


def _commands_in(line: str) -> list[Segment]:
    """The commands ``line`` would run as a shell line; none when it would not parse."""
    try:
        return [s for s in segments(line) if s.argv and not s.opaque]
    except TooComplex:
        return []  # not shell code a wrapper could run as it is


def _verdict(rule: _Rule, segment: Segment | None = None, via: str | None = None) -> PolicyVerdict:
    reason = rule.explain()
    if segment is not None and rule.rank > _ALLOW:
        judged_as = f", judged as: {_clipped(via)}" if via is not None else ""
        reason = f"{reason} (command: {_shown(segment)}{judged_as})"
    return PolicyVerdict(rule.action, reason, rule.label)
