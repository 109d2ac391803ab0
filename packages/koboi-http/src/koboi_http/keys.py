"""API keys: where they come from, and refusing the ones that cannot work.

Keys are held as :class:`pydantic.SecretStr`, so printing an options object,
a config or a validation error never shows them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from pydantic import SecretStr

# Values people leave in example configs. A key that matches is refused at
# validation time instead of producing a 401 on the first call.
_PLACEHOLDER_SHAPE = re.compile(
    r"^(?:<.*>|\{.*\}|\$\{.*\}|\[.*\]|x+|\.+|\*+|-+|0+"
    r"|(?:sk|sk-ant|sk-proj)[-_]?(?:x+|\.+|\*+)?"
    r"|api[-_]?key|token|secret|none|null|test|key)$",
    re.IGNORECASE,
)
# Words that give a placeholder away; looked for only in short values or ones
# with spaces, since a long random key may contain any four letters.
_PLACEHOLDER_WORDS = re.compile(
    r"your|insert|enter|replace|here|placeholder|changeme|change[-_ ]me|todo|fixme|dummy"
    r"|example|redacted|\.\.\.",
    re.IGNORECASE,
)


# Whole words between separators: "your-cloudflare-api-token-here". A random key
# segment that is exactly one of these words is vanishingly unlikely.
_GIVEAWAY_PARTS = frozenset(
    [
        "your",
        "my",
        "insert",
        "enter",
        "replace",
        "here",
        "placeholder",
        "changeme",
        "todo",
        "fixme",
        "dummy",
        "example",
        "redacted",
        "fake",
        "xxx",
        "xxxx",
        "xxxxx",
    ]
)


def looks_like_placeholder(value: str) -> bool:
    """True for an empty key, or one copied from an example (``sk-...``, ``<your key>``...)."""
    value = value.strip()
    if not value or _PLACEHOLDER_SHAPE.match(value):
        return True
    parts = {p.lower() for p in re.split(r"[-_\s.]+", value) if p}
    if parts & _GIVEAWAY_PARTS:
        return True
    short_or_prose = len(value) < 24 or any(c.isspace() for c in value)
    return short_or_prose and _PLACEHOLDER_WORDS.search(value) is not None


def resolve_api_key(
    configured: SecretStr | None, env_vars: Sequence[str], *, what: str = "API key"
) -> SecretStr:
    """The configured key, else the first set variable of ``env_vars``.

    Raises ``ValueError`` (which pydantic turns into a config problem at the
    key's path) when there is none or it is a placeholder; the message names
    the variables to set and never contains the value.
    """
    names = " or ".join(env_vars)
    if configured is not None:
        if looks_like_placeholder(configured.get_secret_value()):
            raise ValueError(
                f"the configured {what} (or the variable it names) is a placeholder; put the "
                f"real key in {names} and write api_key: ${{{env_vars[0]}}}, or leave api_key out"
            )
        return configured
    for name in env_vars:
        value = os.environ.get(name)
        if value is None or not value.strip():
            continue
        if looks_like_placeholder(value):
            raise ValueError(f"{name} holds a placeholder, not a real {what}")
        return SecretStr(value.strip())
    raise ValueError(f"no {what}: set {names}, or api_key in this provider's config")
