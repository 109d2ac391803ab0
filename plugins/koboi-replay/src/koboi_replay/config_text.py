"""The config a bundle carries: as written, with no secret in it, and how it is loaded back.

Secrets never enter a bundle:

- ``${VAR}`` / ``${VAR:default}`` references are kept as written: the bundle
  holds the reference, never the value it had;
- a *literal* secret written into the YAML is replaced by a reference to a
  new variable named after its key path (``llm.api_key`` ->
  ``${KOBOI_SECRET_LLM_API_KEY}``), and the caller is told, so they know what
  to set to run the config live. A literal secret is (a) a non-empty string
  under a key that names one (``api_key``, ``token``, ``password``,
  ``secret``, ``authorization``, ``cookie``, ``credentials``, ``private_key``
  and keys ending in ``_<one of those>``; not ``api_key_env``, which names a
  variable, nor ``max_total_tokens``), or (b) a credential recognisable by
  its shape anywhere in a string (``sk-...``, ``ghp_...``, ``AKIA...``, JWTs,
  ``Bearer``/``Basic`` tokens, the password of ``scheme://user:password@``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from koboi.secrets import find_secrets, is_secret_name
from koboi_replay.errors import BundleError

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import Catalog

SECRET_PREFIX = "KOBOI_SECRET_"
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-?[^}]*)?\}")
_VARIABLE = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<default>:-?[^}]*)?\}")


def is_secret_key(key: str) -> bool:
    """True when a config key names a secret (``api_key``, ``auth_token``...): the
    kernel's one rule, :func:`koboi.secrets.is_secret_name`."""
    return is_secret_name(key)


def _holds_literal(text: str) -> bool:
    """True when a value under a secret-naming key holds more than references.

    ``${TOKEN}`` and ``Bearer ${TOKEN}`` hold no secret; ``sk-...`` or
    ``Bearer abc123`` do.
    """
    rest = _REFERENCE.sub(" ", text)
    rest = re.sub(r"\b(?:Bearer|Basic|Token)\b", " ", rest, flags=re.IGNORECASE)
    return any(c.isalnum() for c in rest)


@dataclass
class Redaction:
    """One literal secret taken out of a config: where it was, and what replaced it."""

    path: str
    variable: str

    def message(self) -> str:
        return (
            f"{self.path} held a literal secret; the bundle has ${{{self.variable}}} in its "
            f"place (set {self.variable} to run the config live)"
        )


@dataclass
class CleanConfig:
    """A config mapping with its literal secrets replaced."""

    raw: dict[str, Any]
    redactions: list[Redaction] = field(default_factory=list)


def remove_secrets(raw: Mapping[str, Any]) -> CleanConfig:
    """``raw`` with every literal secret replaced by a ``${KOBOI_SECRET_...}`` reference."""
    redactions: list[Redaction] = []
    used: set[str] = set()

    def variable_for(path: str) -> str:
        base = SECRET_PREFIX + re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_").upper()
        name, number = base, 2
        while name in used:
            name, number = f"{base}_{number}", number + 1
        used.add(name)
        return name

    def clean(value: Any, path: str, key: str) -> Any:
        if isinstance(value, Mapping):
            return {
                k: clean(v, f"{path}.{k}" if path else str(k), str(k)) for k, v in value.items()
            }
        if isinstance(value, list):
            return [clean(v, f"{path}[{i}]", key) for i, v in enumerate(value)]
        if not isinstance(value, str) or not value:
            return value
        if is_secret_key(key) and _holds_literal(value):
            variable = variable_for(path)
            redactions.append(Redaction(path, variable))
            return f"${{{variable}}}"
        # Credentials recognisable by their shape (the kernel's detectors), last first
        # so the earlier spans stay where they are.
        for finding in reversed(find_secrets(value)):
            variable = variable_for(path)
            redactions.append(Redaction(path, variable))
            value = f"{value[: finding.start]}${{{variable}}}{value[finding.end :]}"
        return value

    cleaned = clean(dict(raw), "", "")
    return CleanConfig(cleaned, redactions)


def dump_yaml(raw: Mapping[str, Any], *, header: str = "") -> str:
    """A config mapping as YAML, keys in their written order."""
    text = yaml.safe_dump(dict(raw), sort_keys=False, allow_unicode=True, width=100)
    if header:
        lines = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return lines + text
    return text


def parse_yaml(text: str, label: str) -> dict[str, Any]:
    """A bundle's config text back to a mapping (with libyaml's parser when it is there:
    a long scripted config parses many times faster)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise BundleError(f"{label}: the config is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{label}: the config is not a mapping of sections")
    return data


def referenced_variables(raw: Any) -> dict[str, bool]:
    """Every ``${VAR}`` a config refers to: name -> whether the reference has a default."""
    found: dict[str, bool] = {}
    if isinstance(raw, Mapping):
        for value in raw.values():
            for name, has_default in referenced_variables(value).items():
                found[name] = found.get(name, True) and has_default
    elif isinstance(raw, list):
        for value in raw:
            for name, has_default in referenced_variables(value).items():
                found[name] = found.get(name, True) and has_default
    elif isinstance(raw, str):
        for match in _VARIABLE.finditer(raw):
            name = match.group("name")
            found[name] = found.get(name, True) and match.group("default") is not None
    return found


def portable_config(
    raw: Mapping[str, Any],
    catalog: Catalog,
    *,
    base_dir: Path,
    env: Mapping[str, str],
    label: str,
    overrides: Mapping[str, Any] | None = None,
    keyless: bool = True,
) -> AgentConfig:
    """Validate a bundle's config without the secrets it refers to.

    A ``${VAR}`` that ``env`` does not set reads as empty (its default, if it
    has one), so a config whose secrets live in variables loads with no key
    at all. ``overrides`` replaces whole sections (the replay's own store and
    cache) without changing the config's hash, which stays the hash of the
    config as the bundle holds it. With ``keyless``, provider options are
    validated as under ``cache.mode: replay`` (the validation's cache mode,
    given to the kernel explicitly, never through the environment): no provider
    is called, so none needs a key. The config then says it was validated for
    ``replay`` (``config.cache_mode``); whoever runs it passes the mode it runs
    with (a bundle replay: ``live``).
    """
    from koboi.config import config_hash, validate_config

    variables = dict(env)
    for name in referenced_variables(raw):
        variables.setdefault(name, "")
    data = {**raw, **(overrides or {})}
    config = validate_config(
        data,
        catalog,
        source=Path(label),
        base_dir=base_dir,
        env=variables,
        cache_mode="replay" if keyless else None,
    )
    config.raw = dict(raw)
    config.config_hash = config_hash(raw)
    return config
