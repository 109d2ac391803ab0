"""Split a POSIX shell command line into the simple commands it would run.

The policy judges a shell tool call command by command, so that ``ls && rm -rf x``
is judged as ``ls`` *and* ``rm -rf x``. :func:`segments` returns every simple
command the line can start, in the order the shell would reach them:

- commands joined by ``&&``, ``||``, ``;``, ``|``, ``|&``, ``&`` and newlines;
- commands inside ``$( … )``, backquotes, ``<( … )``, ``>( … )``, ``( … )``
  subshells and ``{ …; }`` groups, wherever they appear (a substitution inside an
  argument, an assignment or a redirection target yields its own segments, listed
  before the command that uses it, since it runs first);
- the programs that command runners start: ``xargs``, ``find -exec/-execdir/-ok/
  -okdir``, ``env``, ``sudo``, ``doas``, ``su -c``, ``nohup``, ``timeout``,
  ``nice``, ``ionice``, ``time``, ``command``, ``builtin``, ``exec``, ``stdbuf``,
  ``chroot``, ``setsid``, ``script -c``, ``watch``, ``busybox``, zsh's ``noglob``
  and ``nocorrect``, and ``sh|bash|dash|zsh|ksh|ash|mksh|posh -c STRING`` (STRING
  is split in turn). The runner stays a segment of its own: ``sudo rm x`` yields
  ``sudo rm x`` and ``rm x``.

A segment's ``argv`` is what the program receives, after quote removal
(``'…'``, ``"…"``, ``$'…'``, backslashes). Expansions whose value is only known when
the command runs (``$HOME``, ``$(date)``, ``$((1+2))``) are kept as written.
Leading ``NAME=value`` assignments go to ``assignments``, redirections to
``redirects`` (``> out.txt``, ``2>&1``).

The splitter is conservative: whatever it cannot judge soundly raises
:class:`TooComplex`, and the policy denies the call. That covers code that the
shell builds at run time (``eval``, ``source``/``.``, ``alias``, ``trap``, bash's
``let``/``declare``/``printf -v``/``test -v`` and arithmetic on names, which can
run commands hidden in array subscripts), a variable, substitution or pattern
where a program name goes, control structures and function definitions,
heredocs, unterminated quotes, a shell reading commands from its input
(``curl … | sh``), options of a runner that are not known (they might hide
where the wrapped command starts), more than ``max_segments`` segments, nesting
deeper than ``max_depth`` and NUL bytes.

What this does not see: programs that run code given as data (``python -c``,
``awk``, ``git -c alias.x=!…``, ``make``, a script file) are segments like any
other; allow them only where you would allow anything they could do.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from koboi.errors import KoboiError

__all__ = ["Segment", "TooComplex", "segments"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One simple command the shell would run.

    ``argv`` is the program and its arguments after quote removal; ``redirects``
    the redirections written on it (``> out.txt``, ``2>&1``); ``assignments`` the
    ``NAME=value`` words that set its environment (``LD_PRELOAD=x.so ls``), or,
    for a command of assignments alone, the shell variables it sets.
    """

    argv: tuple[str, ...]
    redirects: tuple[str, ...] = ()
    assignments: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """``argv`` joined by single spaces: what command patterns match against."""
        return " ".join(self.argv)


class TooComplex(KoboiError, ValueError):
    """The command line cannot be judged soundly; the message says why."""


#: Characters that end an unquoted word.
_BLANK_RUN = re.compile(r"(?:[ \t]|\\\n)*")
_WORD_END = frozenset(" \t\n;&|()")
#: A run of characters that are literal in an unquoted word.
_PLAIN_RUN = re.compile(r"[^ \t\n;&|<>()'\"\\$`*?\[{]+")
#: A run of characters that are literal between double quotes.
_DQUOTED_RUN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[-@*#?$!]")
_DIGITS = re.compile(r"[0-9]+")
#: A file descriptor number written right before a redirection: the 2 of 2>&1.
_IO_NUMBER = re.compile(r"[0-9]+(?=[<>](?!\())")
_PARAMETER_START = frozenset(string.ascii_letters + string.digits + "_-@*#?$!")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
#: Characters allowed inside ``$(( … ))``: digits and operators. A name is refused:
#: bash evaluates a variable's value as an expression, and ``a[$(cmd)]`` in that
#: value runs ``cmd``.
_ARITHMETIC_CHARS = frozenset("0123456789 \t\n+-*/%<>=!&|^~?:,")
_REDIRECT_OPS = ("&>>", "&>", ">>", ">|", ">&", "<&", "<>", ">", "<")
_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}

#: Reserved words that open or close control structures: nothing in them is judged.
_KEYWORDS = frozenset(
    [
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "case",
        "esac",
        "while",
        "until",
        "for",
        "select",
        "function",
        "coproc",
        "[[",
        "]]",
        "repeat",
        "foreach",
    ]
)

#: Builtins that run text as code, change what later names mean, or (in bash)
#: evaluate array subscripts, which can hold a command substitution.
_REFUSED = {
    "eval": "uses eval (it runs text as shell code)",
    "source": "uses source (it runs a file as shell code)",
    ".": "uses '.' (it runs a file as shell code)",
    "alias": "defines an alias (it changes what later command names run)",
    "trap": "sets a trap (it runs text as shell code later)",
    "let": "uses let (bash arithmetic can run commands hidden in array subscripts)",
    "declare": "uses declare (bash evaluates array subscripts, which can run commands)",
    "typeset": "uses typeset (bash evaluates array subscripts, which can run commands)",
    "local": "uses local (bash evaluates array subscripts, which can run commands)",
    "readonly": "uses readonly (bash evaluates array subscripts, which can run commands)",
    "mapfile": "uses mapfile (it can run a callback given as text)",
    "readarray": "uses readarray (it can run a callback given as text)",
    "enable": "uses enable (it can load builtins from a shared library)",
    "fc": "uses fc (it re-runs history as shell code)",
    "compgen": "uses compgen (it can run a command given as text)",
    "complete": "uses complete (it can run a command given as text)",
    "bind": "uses bind (it can run a command given as text)",
    "hash": "uses hash (it can remap a command name to another program)",
}

_POSIX_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "posh", "rbash"})
_OTHER_SHELLS = frozenset({"fish", "csh", "tcsh", "pwsh", "nu", "xonsh", "elvish", "rc"})


@dataclass(slots=True)
class _Word:
    """One word of a simple command, with what the splitter learnt reading it."""

    value: str
    raw: str
    #: Holds an expansion ($x, $(…), `…`, <(…), $((…))): its value is known only at run time.
    expanded: bool = False
    #: May become several words or none: an unquoted expansion, a glob or a brace list.
    splittable: bool = False
    quoted: bool = False
    #: The word's text outside expansions: data, unless something evaluates it later.
    literal: str = ""


@dataclass(slots=True)
class _WordBuilder:
    value: list[str] = field(default_factory=list)
    literal: list[str] = field(default_factory=list)
    expanded: bool = False
    splittable: bool = False
    quoted: bool = False
    brace: bool = False
    bracket: bool = False


@dataclass(slots=True)
class _Output:
    segments: list[Segment]
    max_segments: int
    max_depth: int

    def add(self, segment: Segment) -> None:
        if len(self.segments) >= self.max_segments:
            raise TooComplex(f"runs more than {self.max_segments} commands")
        self.segments.append(segment)


@dataclass(frozen=True, slots=True)
class _Inner:
    """A command a runner starts: its words and the environment it sets."""

    words: Sequence[_Word]
    assignments: tuple[str, ...] = ()
    #: More words are appended when it runs (xargs): they could be what a runner runs.
    open_ended: bool = False


#: What a runner starts: another command, or a script for a shell to parse.
_Started = _Inner | str


def segments(command: str, *, max_segments: int = 256, max_depth: int = 8) -> list[Segment]:
    """Every simple command ``command`` would run, in order (see the module docstring).

    Raises :class:`TooComplex` when the line cannot be judged soundly; never a
    silent pass. An empty line or a comment yields no segment.
    """
    if "\0" in command:
        raise TooComplex("contains a NUL byte")
    out = _Output([], max_segments, max_depth)
    _Parser(command, out).parse_list(0, None)
    return out.segments


class _Parser:
    """A recursive-descent reader of one shell text (a line, a backquoted or -c script)."""

    def __init__(self, source: str, out: _Output) -> None:
        self.s = source
        self.n = len(source)
        self.i = 0
        self.out = out

    # -- helpers ---------------------------------------------------------------

    def _nest(self, depth: int) -> int:
        deeper = depth + 1
        if deeper > self.out.max_depth:
            raise TooComplex(f"nests commands more than {self.out.max_depth} levels deep")
        return deeper

    def _peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.s[j] if j < self.n else ""

    def _skip_blanks(self) -> None:
        if self.i >= self.n or self.s[self.i] not in " \t\\":
            return
        match = _BLANK_RUN.match(self.s, self.i)
        assert match is not None  # the pattern matches the empty string
        self.i = match.end()

    def _skip_comment(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = self.n if end < 0 else end

    def _skip_linebreaks(self) -> None:
        while True:
            self._skip_blanks()
            c = self._peek()
            if c == "\n":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            else:
                return

    # -- grammar ---------------------------------------------------------------

    def parse_list(self, depth: int, closer: str | None) -> None:
        """Commands separated by ``;``, ``&`` or newlines, up to ``closer`` or the end."""
        while True:
            self._skip_linebreaks()
            if self.i >= self.n:
                if closer is not None:
                    opened = "(" if closer == ")" else "{"
                    raise TooComplex(f"has an unterminated '{opened}'")
                return
            c = self.s[self.i]
            if c == ")":
                if closer != ")":
                    raise TooComplex("has an unmatched ')'")
                self.i += 1
                return
            if c in ";&|":
                raise TooComplex(f"has nothing before '{c}'")
            if self._and_or(depth, closer):
                return
            self._skip_blanks()
            c = self._peek()
            if c == ";":
                if self._peek(1) in (";", "&"):
                    raise TooComplex("uses case syntax (';;' or ';&')")
                self.i += 1
            elif c in ("&", "\n"):
                self.i += 1
            elif c in ("", ")", "#"):
                continue
            else:
                raise TooComplex(f"has an unexpected {c!r}")

    def _and_or(self, depth: int, closer: str | None) -> bool:
        """A pipeline chain; true when it was the ``}`` that closes the current group."""
        if self._command(depth, closer):
            return True
        while True:
            self._skip_blanks()
            s, i = self.s, self.i
            if s.startswith(("&&", "||", "|&"), i):
                op = s[i : i + 2]
            elif s.startswith("|", i):
                op = "|"
            else:
                return False
            self.i += len(op)
            self._skip_linebreaks()
            if self.i >= self.n or self.s[self.i] in ";&|)":
                raise TooComplex(f"has nothing after '{op}'")
            if self._command(depth, closer):
                raise TooComplex(f"has nothing after '{op}'")

    def _command(self, depth: int, closer: str | None) -> bool:
        self._skip_blanks()
        if self.s.startswith("((", self.i):
            raise TooComplex("uses an arithmetic command '(( … ))'")
        if self._peek() == "(":
            inner = self._nest(depth)
            first = len(self.out.segments)
            self.i += 1
            self.parse_list(inner, ")")
            self._trailing_redirects(depth, first, ")")
            return False
        return self._simple(depth, closer)

    def _simple(self, depth: int, closer: str | None) -> bool:
        s, n = self.s, self.n
        words: list[_Word] = []
        assignments: list[str] = []
        redirects: list[str] = []
        while True:
            self._skip_blanks()
            if self.i >= n:
                break
            c = s[self.i]
            nxt = self._peek(1)
            if c in "\n;|)" or (c == "&" and nxt != ">"):
                break
            if c == "(":
                if words or assignments:
                    raise TooComplex(
                        "has a '(' after a word (function definitions, array assignments "
                        "and glob qualifiers are not judged)"
                    )
                raise TooComplex("has an unexpected '('")
            if c == "#":
                self._skip_comment()
                break
            redirect = self._redirection(depth)
            if redirect is not None:
                redirects.append(redirect)
                continue
            word = self._word(depth)
            if not words:
                if _ASSIGNMENT.match(word.raw):
                    assignments.append(_assignment(word))
                    continue
                keyword = word.raw if word.raw == word.value else ""
                if keyword == "!":
                    continue
                if keyword == "{":
                    if assignments or redirects:
                        raise TooComplex("has an unexpected '{'")
                    inner = self._nest(depth)
                    first = len(self.out.segments)
                    self.parse_list(inner, "}")
                    self._trailing_redirects(depth, first, "}")
                    return False
                if keyword == "}":
                    if closer != "}" or assignments or redirects:
                        raise TooComplex("has an unmatched '}'")
                    return True
                if keyword in _KEYWORDS:
                    raise TooComplex(
                        f"uses the shell keyword '{keyword}' (control structures and "
                        "functions are not judged)"
                    )
            words.append(word)
        if not (words or assignments or redirects):
            raise TooComplex("has an empty command")
        self._emit(words, tuple(assignments), tuple(redirects), depth)
        return False

    def _trailing_redirects(self, depth: int, first: int, closed: str) -> None:
        """Redirections after ``)`` or ``}``: they apply to every command inside."""
        redirects: list[str] = []
        while True:
            self._skip_blanks()
            c, nxt = self._peek(), self._peek(1)
            if c == "" or c in "\n;|)" or (c == "&" and nxt != ">"):
                break
            if c == "#":
                self._skip_comment()
                break
            redirect = self._redirection(depth)
            if redirect is None:
                raise TooComplex(f"has a word after '{closed}'")
            redirects.append(redirect)
        if redirects:
            added = tuple(redirects)
            found = self.out.segments
            for k in range(first, len(found)):
                found[k] = replace(found[k], redirects=found[k].redirects + added)

    def _redirection(self, depth: int) -> str | None:
        """The redirection at the cursor (``> x``, ``2>&1``, ``&> x``); None if a word starts."""
        c, nxt = self._peek(), self._peek(1)
        if (c in "<>" and nxt != "(") or (c == "&" and nxt == ">"):
            return self._redirect("", depth)
        descriptor = _IO_NUMBER.match(self.s, self.i)
        if descriptor is None:
            return None
        self.i = descriptor.end()
        return self._redirect(descriptor.group(), depth)

    def _redirect(self, prefix: str, depth: int) -> str:
        s, i = self.s, self.i
        if s.startswith("<<", i):
            raise TooComplex("uses a here-document or here-string ('<<')")
        op = next(o for o in _REDIRECT_OPS if s.startswith(o, i))
        self.i += len(op)
        self._skip_blanks()
        c, nxt = self._peek(), self._peek(1)
        if c == "" or c in _WORD_END or (c in "<>" and nxt != "("):
            raise TooComplex(f"has a redirection '{prefix}{op}' without a target")
        target = self._word(depth)
        if op in (">&", "<&") and (_DIGITS.fullmatch(target.value) or target.value == "-"):
            return f"{prefix}{op}{target.value}"
        return f"{prefix}{op} {target.value}"

    # -- words -----------------------------------------------------------------

    def _word(self, depth: int) -> _Word:
        s, n = self.s, self.n
        start = self.i
        plain = _PLAIN_RUN.match(s, start)
        if plain is not None:
            end = plain.end()
            if end == n or s[end] in _WORD_END or (s[end] in "<>" and s[end + 1 : end + 2] != "("):
                # The common case: a word without quotes, expansions or patterns.
                self.i = end
                text = plain.group()
                return _Word(value=text, raw=text, literal=text)
        b = _WordBuilder()
        while self.i < n:
            i = self.i
            c = s[i]
            if c in _WORD_END:
                break
            if c in "<>":
                if self._peek(1) != "(":
                    break
                self.i += 2
                self.parse_list(self._nest(depth), ")")
                b.value.append(s[i : self.i])
                b.expanded = True
                continue
            if c == "\\":
                if i + 1 >= n:
                    raise TooComplex("ends with a lone backslash")
                escaped = s[i + 1]
                self.i += 2
                if escaped != "\n":
                    b.value.append(escaped)
                    b.literal.append(escaped)
                    b.quoted = True
                continue
            if c == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise TooComplex("has an unterminated single quote")
                part = s[i + 1 : end]
                b.value.append(part)
                b.literal.append(part)
                b.quoted = True
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                self._double_quoted(depth, b)
                b.quoted = True
                continue
            if self._expansion(c, depth, b, in_quotes=False):
                continue
            if c in "*?":
                b.splittable = True
            elif c == "[":
                b.bracket = True
            elif c == "{":
                b.brace = True
            else:
                match = _PLAIN_RUN.match(s, i)
                assert match is not None  # c is none of the characters the run excludes
                b.value.append(match.group())
                b.literal.append(match.group())
                self.i = match.end()
                continue
            b.value.append(c)
            b.literal.append(c)
            self.i += 1
        raw = s[start : self.i]
        splittable = b.splittable
        if b.bracket and "]" in raw[raw.index("[") :]:
            splittable = True  # a [...] glob; a lone '[' is the test command
        if b.brace and "}" in raw and ("," in raw or ".." in raw):
            splittable = True  # bash brace expansion: {rm,-rf,x} is three words
        return _Word(
            value="".join(b.value),
            raw=raw,
            expanded=b.expanded,
            splittable=splittable,
            quoted=b.quoted,
            literal="".join(b.literal),
        )

    def _double_quoted(self, depth: int, b: _WordBuilder) -> None:
        s, n = self.s, self.n
        while self.i < n:
            i = self.i
            c = s[i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                escaped = self._peek(1)
                if escaped == "\n":
                    self.i += 2
                elif escaped and escaped in '$`"\\':
                    b.value.append(escaped)
                    b.literal.append(escaped)
                    self.i += 2
                else:
                    b.value.append("\\")
                    b.literal.append("\\")
                    self.i += 1
                continue
            if self._expansion(c, depth, b, in_quotes=True):
                continue
            match = _DQUOTED_RUN.match(s, i)
            assert match is not None
            b.value.append(match.group())
            b.literal.append(match.group())
            self.i = match.end()
        raise TooComplex("has an unterminated double quote")

    def _expansion(self, c: str, depth: int, b: _WordBuilder, *, in_quotes: bool) -> bool:
        """Read the ``$…`` or backquoted expansion at the cursor; false if ``c`` starts none."""
        if c == "$":
            self._dollar(depth, b, in_quotes=in_quotes)
        elif c == "`":
            self._backquoted(depth, b, in_quotes=in_quotes)
        else:
            return False
        return True

    def _dollar(self, depth: int, b: _WordBuilder, *, in_quotes: bool) -> None:
        s, i = self.s, self.i
        nxt = self._peek(1)
        if nxt == "(":
            if s.startswith("$((", i):
                self._arithmetic()
                b.splittable = b.splittable or not in_quotes  # IFS may hold digits
            else:
                self.i += 2
                self.parse_list(self._nest(depth), ")")
                b.splittable = b.splittable or not in_quotes
        elif nxt == "{":
            self._parameter_braces(depth, in_quotes=in_quotes)
            b.splittable = b.splittable or not in_quotes or s.startswith("${@", i)
        elif nxt == "'" and not in_quotes:
            decoded, end = _ansi_c(s, i + 2)
            b.value.append(decoded)
            b.literal.append(decoded)
            b.quoted = True
            self.i = end
            return
        elif nxt == '"' and not in_quotes:
            self.i += 2  # $"…": a translated string, otherwise double quotes
            self._double_quoted(depth, b)
            b.quoted = True
            return
        elif nxt == "[":
            raise TooComplex("uses the old '$[ … ]' arithmetic")
        elif nxt and nxt in "=~^+" and not in_quotes:
            # zsh reads $=x, $~x, $^x and $+x as expansions of x; bash and dash as text.
            self.i += 1
            b.splittable = True
        elif nxt and nxt in _PARAMETER_START:
            match = _PARAMETER.match(s, i + 1)
            assert match is not None
            self.i = match.end()
            b.splittable = b.splittable or not in_quotes or nxt == "@"
        else:
            b.value.append("$")  # a '$' that starts no expansion is a literal '$'
            b.literal.append("$")
            self.i += 1
            return
        b.value.append(s[i : self.i])
        b.expanded = True

    def _arithmetic(self) -> None:
        s, n = self.s, self.n
        j = self.i + 3
        open_parens = 0
        while j < n:
            c = s[j]
            if c == "(":
                open_parens += 1
            elif c == ")":
                if open_parens:
                    open_parens -= 1
                elif j + 1 < n and s[j + 1] == ")":
                    self.i = j + 2
                    return
                else:
                    raise TooComplex("has an ambiguous '$(( … )'")
            elif c not in _ARITHMETIC_CHARS:
                raise TooComplex(
                    "uses names or expansions in '$(( … ))' (bash evaluates a variable's "
                    "value as an expression, which can run commands); use digits only"
                )
            j += 1
        raise TooComplex("has an unterminated '$(('")

    def _parameter_braces(self, depth: int, *, in_quotes: bool) -> None:
        s, n = self.s, self.n
        inner = self._nest(depth)
        j = self.i + 2
        if j < n and s[j] == "!":
            raise TooComplex("uses indirect expansion '${!…}'")
        if j + 1 < n and s[j] == "#" and s[j + 1] != "}":
            j += 1
        name = _PARAMETER.match(s, j)
        if name is None:
            raise TooComplex("has a '${…}' without a parameter name")
        j = name.end()
        if j < n and s[j] == "[":
            end = s.find("]", j)
            subscript = s[j + 1 : end] if end > 0 else ""
            if not (subscript in ("@", "*") or _DIGITS.fullmatch(subscript)):
                raise TooComplex(
                    "uses an array subscript in '${…}' (bash evaluates it, which can run commands)"
                )
            j = end + 1
        if j < n and s[j] == "@":
            raise TooComplex("uses a '${…@…}' transformation (some expand text as a prompt)")
        scratch = _WordBuilder()
        while j < n:
            c = s[j]
            if c == "}":
                self.i = j + 1
                return
            if c == "{":
                raise TooComplex("has a '{' inside '${…}'")
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                if in_quotes:
                    # bash and dash disagree about quotes inside "${…}": where this one
                    # ends cannot be known for sure.
                    raise TooComplex("has quotes inside a double-quoted '${…}'")
                if c == "'":
                    end = s.find("'", j + 1)
                    if end < 0:
                        raise TooComplex("has an unterminated single quote")
                    j = end + 1
                else:
                    self.i = j + 1
                    self._double_quoted(inner, scratch)
                    j = self.i
                continue
            self.i = j
            if self._expansion(c, inner, scratch, in_quotes=True):
                j = self.i
                continue
            j += 1
        raise TooComplex("has an unterminated '${'")

    def _backquoted(self, depth: int, b: _WordBuilder, *, in_quotes: bool) -> None:
        s, n = self.s, self.n
        start = self.i
        escapable = '$`\\"' if in_quotes else "$`\\"
        body: list[str] = []
        j = start + 1
        while j < n:
            c = s[j]
            if c == "`":
                break
            if c == "\\" and j + 1 < n and s[j + 1] in escapable:
                body.append(s[j + 1])
                j += 2
                continue
            body.append(c)
            j += 1
        else:
            raise TooComplex("has an unterminated backquote")
        _Parser("".join(body), self.out).parse_list(self._nest(depth), None)
        self.i = j + 1
        b.value.append(s[start : self.i])
        b.expanded = True
        b.splittable = b.splittable or not in_quotes

    # -- commands --------------------------------------------------------------

    def _emit(
        self,
        words: list[_Word],
        assignments: tuple[str, ...],
        redirects: tuple[str, ...],
        depth: int,
    ) -> None:
        """Record a simple command and, iteratively, what its runners start."""
        if not words:
            self.out.add(Segment((), redirects, assignments))
            return
        first = words[0]
        name = first.value.rpartition("/")[2]
        if name not in _NEEDS_A_LOOK:
            # The common case: a program that is neither a runner nor a refused builtin.
            _check_command_word(first)
            self.out.add(Segment(tuple(w.value for w in words), redirects, assignments))
            return
        pending: list[_Inner] = [_Inner(words, assignments)]
        while pending:
            started = pending.pop(0)
            command = started.words
            _check_command_word(command[0])
            argv = tuple(w.value for w in command)
            self.out.add(Segment(argv, redirects, started.assignments))
            redirects = ()  # only the outermost command carries the written redirections
            name = argv[0].rpartition("/")[2]
            refused = _REFUSED.get(name)
            if refused:
                raise TooComplex(refused)
            _check_builtin_arguments(name, command[1:])
            runner = _RUNNERS.get(name)
            if runner is None:
                continue
            items = runner(name, command[1:])
            if started.open_ended and (not items or name in _READS_ALL_ARGUMENTS):
                raise TooComplex(
                    f"xargs appends words from its input to '{name}', which would decide "
                    "what it runs"
                )
            for item in items:
                if isinstance(item, str):
                    _Parser(item, self.out).parse_list(self._nest(depth), None)
                else:
                    pending.append(replace(item, open_ended=item.open_ended or started.open_ended))


# -- word checks ---------------------------------------------------------------


def _assignment(word: _Word) -> str:
    _check_assigned_value(word)
    return word.value


def _check_assigned_value(word: _Word) -> None:
    # PS4='$(cmd)' with set -x, or a value later read by bash arithmetic, turns quoted
    # text back into a command: a quoted substitution in a variable is not judged.
    literal = word.literal
    if "$(" in literal or "`" in literal or "${" in literal:
        raise TooComplex(
            f"assigns text that holds a command substitution ({word.raw}); it could run later"
        )


def _check_command_word(word: _Word) -> None:
    if word.expanded:
        raise TooComplex(f"has a variable or substitution where a program name goes ({word.raw})")
    if word.splittable:
        raise TooComplex(f"has a pattern where a program name goes ({word.raw})")
    if word.value.startswith("="):
        raise TooComplex(f"has a program name starting with '=' ({word.raw}), which zsh expands")


def _check_builtin_arguments(name: str, args: Sequence[_Word]) -> None:
    """Bash builtins that evaluate array subscripts in their operands can run commands."""
    if name in ("test", "[") and any(w.value in ("-v", "-R") for w in args):
        raise TooComplex(f"uses '{name} -v' (bash evaluates the array subscript it names)")
    if name == "printf" and any(w.value == "-v" or "%(" in w.value for w in args):
        raise TooComplex("uses 'printf -v' or '%(…)T' (bash evaluates names it is given)")
    if name == "read" and any("[" in w.value for w in args):
        raise TooComplex("reads into an array element (bash evaluates the subscript)")
    if name == "export":
        for w in args:
            if _ASSIGNMENT.match(w.raw):
                _check_assigned_value(w)


def _surely_operand(word: _Word) -> bool:
    """Whether a word's value cannot start with '-' or '+' whatever its expansions give."""
    first = word.raw[:1]
    return bool(first) and _PLAIN_RUN.match(first) is not None and first not in "-+"


def _interpreted(runner: str, word: _Word) -> str:
    """The text of a word a runner interprets (an option, a name): it must be literal."""
    if word.expanded or word.splittable:
        raise TooComplex(
            f"{runner}: '{word.raw}' is known only when the command runs, and {runner} "
            "reads its options and command from it"
        )
    return word.value


def _single(runner: str, word: _Word) -> str:
    """An option's argument or an operand a runner consumes: it must stay one word."""
    if word.splittable:
        raise TooComplex(f"{runner}: '{word.raw}' could split into several words")
    return word.value


def _script(runner: str, word: _Word) -> str:
    """A script a shell will parse: its text must be known now."""
    if word.expanded:
        raise TooComplex(f"{runner} runs a script that is not literal text ({word.raw})")
    return word.value


# -- runners -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    """The options a runner accepts, getopt style; anything else is refused."""

    flags: str = ""
    with_arg: str = ""
    #: Short options whose argument, if any, is glued to them (xargs -i[R]).
    glued_arg: str = ""
    long_flags: frozenset[str] = frozenset()
    long_with_arg: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    #: Accepts -N / --N as a number (nice -10).
    numeric: bool = False
    #: Accepts +x clusters as well (shell options).
    plus: bool = False
    #: Options may follow operands (GNU getopt without '+').
    permute: bool = False


def _options(
    runner: str, words: Sequence[_Word], spec: _Options
) -> tuple[list[_Word], dict[str, str]]:
    """Split ``words`` into operands and the options seen (name → argument, or "")."""
    seen: dict[str, str] = {}
    operands: list[_Word] = []
    i = 0
    count = len(words)

    def argument(index: int, option: str) -> str:
        if index >= count:
            raise TooComplex(f"{runner}: option {option} needs a value")
        return _single(runner, words[index])

    while i < count:
        word = words[i]
        if (word.expanded or word.splittable) and _surely_operand(word):
            is_option = False
        else:
            text = _interpreted(runner, word)
            is_option = len(text) > 1 and (text[0] == "-" or (spec.plus and text[0] == "+"))
        if not is_option:
            if not spec.permute:
                break
            operands.append(word)
            i += 1
            continue
        if text == "--":
            i += 1
            break
        if text.startswith("--"):
            option, equals, value = text.partition("=")
            if spec.numeric and option[2:].isdigit():
                seen["-n"] = option[2:]
            elif option in spec.long_flags and not equals:
                seen[option] = ""
            elif option in spec.long_with_arg:
                if not equals:
                    i += 1
                    value = argument(i, option)
                seen[option] = value
            elif option in spec.long_optional:
                seen[option] = value
            else:
                raise TooComplex(f"{runner}: unknown option {option}")
            i += 1
            continue
        body = text[1:]
        if spec.numeric and body.isdigit():
            seen["-n"] = body
            i += 1
            continue
        k = 0
        while k < len(body):
            letter = body[k]
            if letter in spec.flags:
                seen[letter] = ""
                k += 1
            elif letter in spec.with_arg:
                if k + 1 < len(body):
                    seen[letter] = body[k + 1 :]
                else:
                    i += 1
                    seen[letter] = argument(i, f"-{letter}")
                break
            elif letter in spec.glued_arg:
                seen[letter] = body[k + 1 :]
                break
            else:
                raise TooComplex(f"{runner}: unknown option -{letter}")
        i += 1
    operands.extend(words[i:])
    return operands, seen


def _leading_assignments(runner: str, words: Sequence[_Word]) -> tuple[tuple[str, ...], int]:
    found: list[str] = []
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].raw):
        _single(runner, words[i])
        _check_assigned_value(words[i])
        found.append(words[i].value)
        i += 1
    return tuple(found), i


def _rest(words: Sequence[_Word], assignments: tuple[str, ...] = ()) -> list[_Started]:
    return [_Inner(words, assignments)] if words else []


_ENV = _Options(
    flags="i0v",
    with_arg="uCSP",
    long_flags=frozenset({"--ignore-environment", "--null", "--debug", "--list-signal-handling"}),
    long_with_arg=frozenset({"--unset", "--chdir", "--split-string"}),
    long_optional=frozenset({"--block-signal", "--default-signal", "--ignore-signal"}),
)


def _env(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _ENV)
    if "S" in seen or "--split-string" in seen:
        raise TooComplex("env -S splits a string into a command line, which is not judged")
    if operands and operands[0].value == "-" and not operands[0].expanded:
        operands = operands[1:]  # `env -` is `env -i`
    assignments, start = _leading_assignments(runner, operands)
    return _rest(operands[start:], assignments)


_SUDO = _Options(
    flags="AbEeHiKklnPSsVvBN",
    with_arg="CDghprRtTUu",
    long_flags=frozenset(
        {
            "--askpass",
            "--background",
            "--bell",
            "--edit",
            "--set-home",
            "--login",
            "--remove-timestamp",
            "--reset-timestamp",
            "--list",
            "--non-interactive",
            "--preserve-groups",
            "--stdin",
            "--shell",
            "--validate",
            "--version",
            "--help",
        }
    ),
    long_with_arg=frozenset(
        {
            "--close-from",
            "--chdir",
            "--group",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--command-timeout",
            "--other-user",
            "--user",
            "--chroot",
        }
    ),
    long_optional=frozenset({"--preserve-env"}),
)
_SUDO_RUNS_NOTHING = frozenset(
    {"e", "--edit", "l", "--list", "v", "--validate", "V", "--version", "K"}
    | {"--remove-timestamp", "--help"}
)


def _sudo(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _SUDO)
    if _SUDO_RUNS_NOTHING.intersection(seen):
        return []
    assignments, start = _leading_assignments(runner, operands)
    command = operands[start:]
    if not command and {"s", "i", "--shell", "--login"}.intersection(seen):
        raise TooComplex(f"{runner} -s/-i without a command starts a shell that reads its input")
    return _rest(command, assignments)


_DOAS = _Options(flags="nsL", with_arg="auC")


def _doas(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _DOAS)
    if not operands and "s" in seen:
        raise TooComplex("doas -s starts a shell that reads its input")
    return _rest(operands)


_SU = _Options(
    flags="lmpfP",
    with_arg="cgGsw",
    long_flags=frozenset(
        {"--login", "--preserve-environment", "--fast", "--pty", "--help", "--version"}
    ),
    long_with_arg=frozenset(
        {
            "--command",
            "--session-command",
            "--group",
            "--supp-group",
            "--shell",
            "--whitelist-environment",
        }
    ),
    permute=True,
)
_SCRIPT = _Options(
    flags="aefqhV",
    with_arg="cEBIOTm",
    glued_arg="t",
    long_flags=frozenset({"--append", "--return", "--flush", "--force", "--quiet", "--help"}),
    long_with_arg=frozenset(
        {
            "--command",
            "--echo",
            "--log-io",
            "--log-in",
            "--log-out",
            "--log-timing",
            "--logging-format",
        }
    ),
    long_optional=frozenset({"--timing"}),
    permute=True,
)


def _command_string(runner: str, words: Sequence[_Word], spec: _Options) -> list[_Started]:
    """su and script: the command is the text of -c, the other operands are no program."""
    string_options = ("c", "--command", "--session-command")
    operands, seen = _options(runner, words, spec)
    if runner == "su":
        operands = [w for w in operands if w.value != "-"]
        if len(operands) > 1:
            raise TooComplex("su passes its extra arguments to a shell, which is not judged")
    elif len(operands) > 1:
        raise TooComplex(f"{runner}: unexpected arguments")
    given = [seen[o] for o in string_options if o in seen]
    if not given:
        if "--help" in seen or "V" in seen or "--version" in seen:
            return []
        raise TooComplex(f"{runner} without -c starts a shell that reads its input")
    # The script is an option's value: refuse it if the word it came from is not literal.
    for word in words:
        if word.value in given and word.expanded:
            raise TooComplex(f"{runner} runs a script that is not literal text ({word.raw})")
    return list(given)


_NOHUP = _Options(long_flags=frozenset({"--help", "--version"}))
_TIMEOUT = _Options(
    flags="v",
    with_arg="ks",
    long_flags=frozenset({"--foreground", "--preserve-status", "--verbose", "--help"}),
    long_with_arg=frozenset({"--kill-after", "--signal"}),
)
_NICE = _Options(with_arg="n", long_with_arg=frozenset({"--adjustment"}), numeric=True)
_IONICE = _Options(
    flags="tVh",
    with_arg="cnpPu",
    long_flags=frozenset({"--ignore", "--help", "--version"}),
    long_with_arg=frozenset({"--class", "--classdata", "--pid", "--pgid", "--uid"}),
)
_TIME = _Options(
    flags="apqvV",
    with_arg="fo",
    long_flags=frozenset({"--append", "--verbose", "--quiet", "--portability", "--help"}),
    long_with_arg=frozenset({"--format", "--output"}),
)
_COMMAND = _Options(flags="pvV")
_EXEC = _Options(flags="cl", with_arg="a")
_STDBUF = _Options(with_arg="ioe", long_with_arg=frozenset({"--input", "--output", "--error"}))
_CHROOT = _Options(
    long_flags=frozenset({"--skip-chdir", "--help", "--version"}),
    long_with_arg=frozenset({"--userspec", "--groups"}),
)
_SETSID = _Options(flags="cfw", long_flags=frozenset({"--ctty", "--fork", "--wait"}))
_WATCH = _Options(
    flags="bcCegtwxprh",
    with_arg="nqs",
    glued_arg="d",
    long_flags=frozenset(
        {
            "--beep",
            "--color",
            "--no-color",
            "--errexit",
            "--chgexit",
            "--no-title",
            "--no-wrap",
            "--exec",
            "--precise",
            "--no-rerun",
            "--help",
            "--version",
        }
    ),
    long_with_arg=frozenset({"--interval", "--equexit", "--shotsdir"}),
    long_optional=frozenset({"--differences"}),
)
_XARGS = _Options(
    flags="0prtxo",
    with_arg="EIaLnsPd",
    glued_arg="eil",
    long_flags=frozenset(
        {
            "--null",
            "--interactive",
            "--no-run-if-empty",
            "--verbose",
            "--exit",
            "--open-tty",
            "--show-limits",
            "--help",
            "--version",
        }
    ),
    long_with_arg=frozenset(
        {
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        }
    ),
    long_optional=frozenset({"--replace", "--eof", "--max-lines"}),
)
_SHELL = _Options(
    flags="abefhiklmnprstuvxBCEHPTcs",
    with_arg="oO",
    long_flags=frozenset(
        {
            "--norc",
            "--noprofile",
            "--login",
            "--posix",
            "--noediting",
            "--restricted",
            "--verbose",
            "--version",
            "--help",
        }
    ),
    long_with_arg=frozenset({"--rcfile", "--init-file"}),
    plus=True,
)


def _simple_runner(spec: _Options) -> Callable[[str, Sequence[_Word]], list[_Started]]:
    def run(runner: str, words: Sequence[_Word]) -> list[_Started]:
        operands, _ = _options(runner, words, spec)
        return _rest(operands)

    return run


def _timeout(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, _ = _options(runner, words, _TIMEOUT)
    if not operands:
        return []
    _single(runner, operands[0])  # the duration
    return _rest(operands[1:])


def _ionice(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _IONICE)
    if {"p", "P", "u", "--pid", "--pgid", "--uid"}.intersection(seen):
        return []  # it changes running processes, the operands are ids
    return _rest(operands)


def _command(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _COMMAND)
    if "v" in seen or "V" in seen:
        return []  # only says what a name is
    return _rest(operands)


def _builtin(runner: str, words: Sequence[_Word]) -> list[_Started]:
    return _rest(words)


def _chroot(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _CHROOT)
    if not operands:
        return []
    _single(runner, operands[0])  # the new root
    if len(operands) == 1 and not seen.keys() & {"--help", "--version"}:
        raise TooComplex("chroot without a command starts a shell that reads its input")
    return _rest(operands[1:])


def _watch(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _WATCH)
    if "x" in seen or "--exec" in seen:
        return _rest(operands)
    if not operands:
        return []
    # Without -x, watch joins its arguments with spaces and hands them to sh -c.
    return [" ".join(_script(runner, w) for w in operands)]


def _xargs(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _XARGS)
    if "I" in seen:
        replace_with: str | None = seen["I"]
    elif "i" in seen or "--replace" in seen:
        replace_with = seen.get("i") or seen.get("--replace") or "{}"
    else:
        replace_with = None
    if not operands:
        return []
    if replace_with:
        if replace_with in operands[0].value:
            raise TooComplex("xargs takes the program to run from its input")
        # Each input line replaces the placeholder: those words are known only at run time.
        return [_Inner(_from_input(operands, replace_with))]
    return [_Inner(operands, open_ended=True)]


def _from_input(words: Sequence[_Word], placeholder: str) -> list[_Word]:
    """``words`` with those holding ``placeholder`` marked as expanded at run time."""
    return [replace(w, expanded=True) if placeholder in w.value else w for w in words]


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(runner: str, words: Sequence[_Word]) -> list[_Started]:
    for word in words:
        if word.expanded or word.splittable:
            raise TooComplex(
                f"find: '{word.raw}' is not literal text (an expansion or an unquoted "
                "pattern could add -exec); quote patterns"
            )
    started: list[_Started] = []
    i = 0
    while i < len(words):
        action = words[i].value
        if action not in _FIND_EXEC:
            i += 1
            continue
        start = j = i + 1
        while j < len(words):
            value = words[j].value
            if value == ";" or (value == "+" and j > start and words[j - 1].value == "{}"):
                break
            j += 1
        else:
            raise TooComplex(f"find {action} without a closing ';' or '+'")
        command = words[start:j]
        if not command:
            raise TooComplex(f"find {action} without a command")
        if "{}" in command[0].value:
            raise TooComplex(f"find {action} runs the files it finds")
        # find puts file names wherever {} appears, even inside a word (sh -c 'echo {}').
        started.append(_Inner(_from_input(command, "{}")))
        i = j + 1
    return started


def _shell(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _SHELL)
    if "--version" in seen or "--help" in seen:
        return []
    if "c" in seen:
        if not operands:
            raise TooComplex(f"{runner} -c without a script")
        return [_script(runner, operands[0])]
    if "s" in seen or not operands:
        raise TooComplex(f"{runner} reads commands from its input, which is not judged")
    return []  # runs a script file: judged as this segment only


def _other_shell(runner: str, words: Sequence[_Word]) -> list[_Started]:
    raise TooComplex(f"{runner} is not a POSIX shell; its commands cannot be judged")


def _busybox(runner: str, words: Sequence[_Word]) -> list[_Started]:
    if not words or _interpreted(runner, words[0]).startswith("-"):
        return []
    return _rest(words)


#: Builtins whose arguments _check_builtin_arguments looks at.
_CHECKED_BUILTINS = frozenset({"test", "[", "printf", "read", "export"})

#: Runners whose meaning changes with words added at the end (find -exec, su -c, a
#: watch script): refused under xargs, which appends words from its input.
_READS_ALL_ARGUMENTS = frozenset({"find", "su", "script", "watch"})

_RUNNERS: dict[str, Callable[[str, Sequence[_Word]], list[_Started]]] = {
    "env": _env,
    "sudo": _sudo,
    "doas": _doas,
    "su": lambda runner, words: _command_string(runner, words, _SU),
    "script": lambda runner, words: _command_string(runner, words, _SCRIPT),
    "nohup": _simple_runner(_NOHUP),
    "timeout": _timeout,
    "nice": _simple_runner(_NICE),
    "ionice": _ionice,
    "time": _simple_runner(_TIME),
    "command": _command,
    "builtin": _builtin,
    "exec": _simple_runner(_EXEC),
    "stdbuf": _simple_runner(_STDBUF),
    "chroot": _chroot,
    "setsid": _simple_runner(_SETSID),
    "watch": _watch,
    "xargs": _xargs,
    "find": _find,
    "busybox": _busybox,
    "noglob": _builtin,
    "-": _builtin,
    "nocorrect": _builtin,
    **dict.fromkeys(_POSIX_SHELLS, _shell),
    **dict.fromkeys(_OTHER_SHELLS, _other_shell),
}


#: Program names :meth:`_Parser._emit` must look at more closely.
_NEEDS_A_LOOK = frozenset(_RUNNERS) | frozenset(_REFUSED) | _CHECKED_BUILTINS


# -- $'…' ----------------------------------------------------------------------


def _ansi_c(s: str, start: int) -> tuple[str, int]:
    """Decode bash's ``$'…'`` from ``start`` (after the quote); the text and where it ends.

    ``\\xHH`` and octal escapes are bytes, as in bash: ``$'\\xe2\\x80\\x99'`` is one
    UTF-8 character.
    """
    out: list[str] = []
    pending = bytearray()
    n = len(s)
    j = start

    def flush() -> None:
        if pending:
            out.append(pending.decode("utf-8", "surrogateescape"))
            pending.clear()

    while j < n:
        c = s[j]
        if c == "'":
            flush()
            text = "".join(out)
            if "\0" in text:
                raise TooComplex("has a NUL byte in $'…'")
            return text, j + 1
        if c != "\\" or j + 1 >= n:
            flush()
            out.append(c)
            j += 1
            continue
        e = s[j + 1]
        j += 2
        if e in "01234567":
            digits = re.match(r"[0-7]{0,2}", s[j : j + 2])
            assert digits is not None
            pending.append(int(e + digits.group(), 8) & 0xFF)
            j += digits.end()
            continue
        if e == "x":
            digits = re.match(r"[0-9A-Fa-f]{1,2}", s[j : j + 2])
            if digits is not None:
                pending.append(int(digits.group(), 16))
                j += digits.end()
                continue
        flush()
        if e in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[e])
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = re.match(rf"[0-9A-Fa-f]{{1,{width}}}", s[j : j + width])
            if digits is None:
                out.append("\\" + e)
                continue
            code = int(digits.group(), 16)
            if code > 0x10FFFF:
                raise TooComplex("has an invalid \\U escape in $'…'")
            out.append(chr(code))
            j += digits.end()
        elif e == "c" and j < n:
            out.append(chr(ord(s[j]) & 0x1F))
            j += 1
        else:
            out.append("\\" + e)
    raise TooComplex("has an unterminated $'…'")
