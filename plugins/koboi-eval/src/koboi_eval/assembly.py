"""What a case runs with: its validated config, approver and sandbox.

The same functions serve a case run here and one run in a child process
(crash cases, cases with ``env``), so both see exactly the same agent.

Whatever the config says, a case gets a private store (``memory://`` or a
SQLite file in its temporary directory) and its tools a private working
directory: an eval never reads or writes the project's ``.koboi/``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi_eval.dsl import EvalCase

if TYPE_CHECKING:
    from koboi.approval import Approver
    from koboi.config import AgentConfig
    from koboi.plugins import Catalog, PluginHost
    from koboi.sandbox import Sandbox

SCRIPTED = "scripted"


class CaseSkipped(Exception):
    """The case cannot run in this mode; ``reason`` says why (it is reported as skipped)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def plugin_host() -> PluginHost:
    """The installed plugins: the CLI's host when the CLI is installed."""
    try:
        from koboi_cli.api import get_host
    except ImportError:  # used without koboi-cli (embedding, the pytest plugin)
        from koboi.plugins import default_host

        return default_host()
    return get_host()


def raw_config(case: EvalCase, *, mock: bool) -> tuple[dict[str, Any], Path | None, Path]:
    """The case's config as a mapping (with ``overrides`` merged, and under ``mock``
    its scripted model in place of the provider), its file, and its directory."""
    from koboi.config import deep_merge, read_with_extends

    if isinstance(case.config, Path):
        raw = read_with_extends(case.config)
        source: Path | None = case.config
        base_dir = case.config.parent
    else:
        raw = copy.deepcopy(dict(case.config))
        source = None
        base_dir = case.file.parent if case.file is not None else Path.cwd()
    raw = deep_merge(raw, case.overrides)
    if mock:
        raw = _mocked(raw, case)
    return raw, source, base_dir.resolve()


def _providers(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    providers = raw.get("providers")
    return providers if isinstance(providers, Mapping) else {}


def _scripted_only(section: Any, providers: Mapping[str, Any], seen: frozenset[str]) -> bool:
    """True when every model ``section`` can call is the scripted provider."""
    if isinstance(section, str):
        if section in seen:
            return False
        return _scripted_only(providers.get(section), providers, seen | {section})
    if not isinstance(section, Mapping):
        return False
    pool = section.get("pool")
    if isinstance(pool, list) and pool:
        return all(_scripted_only(member, providers, seen) for member in pool)
    return section.get("provider") == SCRIPTED


def _provider_label(section: Any) -> str:
    if isinstance(section, str):
        return f"the provider named {section!r}"
    if isinstance(section, Mapping) and section.get("pool"):
        return f"the pool {section.get('pool')!r}"
    if isinstance(section, Mapping):
        return repr(section.get("provider"))
    return "missing"


def _pricing(raw: Mapping[str, Any]) -> Any:
    llm = raw.get("llm")
    if isinstance(llm, str):
        llm = _providers(raw).get(llm)
    return llm.get("pricing") if isinstance(llm, Mapping) else None


def _mocked(raw: dict[str, Any], case: EvalCase) -> dict[str, Any]:
    llm = raw.get("llm")
    if case.mock is None:
        if _scripted_only(llm, _providers(raw), frozenset()):
            return raw  # already offline and deterministic
        raise CaseSkipped(
            f"no scripted model for --mock: the config's provider is {_provider_label(llm)}; "
            "give the case mock=[...] to run it offline"
        )
    section: dict[str, Any] = {"provider": SCRIPTED, **case.mock.options}
    pricing = case.mock.pricing if case.mock.pricing is not None else _pricing(raw)
    if pricing is not None:
        # Kept, so cost_below() checks the prices the config declares, offline.
        section["pricing"] = pricing
    # The real providers (and their keys) and the response cache play no part.
    mocked = {k: v for k, v in raw.items() if k not in ("llm", "providers", "cache")}
    mocked["llm"] = section
    return mocked


def case_config(
    case: EvalCase, *, mock: bool, store_url: str, workdir: Path, catalog: Catalog
) -> AgentConfig:
    """Validate the case's config with its private store and working directory.

    ``${VAR}`` is filled from the environment plus the case's ``env``.
    """
    import os

    from koboi.config import load_env_files, validate_config

    raw, source, base_dir = raw_config(case, mock=mock)
    raw["store"] = {"url": store_url}
    sandbox = dict(raw.get("sandbox") or {})
    backend = str(sandbox.get("backend", "passthrough"))
    registration = catalog.sandboxes.get(backend)
    options = registration.options if registration is not None else None
    if options is not None and "workdir" in options.model_fields:
        sandbox["workdir"] = str(workdir)
        raw["sandbox"] = sandbox
    # As `koboi run` does: ${VAR} may come from a .env beside the config.
    load_env_files(base_dir)
    env = {**os.environ, **case.env}
    return validate_config(raw, catalog, source=source, base_dir=base_dir, env=env)


def approver_for(case: EvalCase) -> Approver:
    """Who answers the case's approval requests."""
    from koboi.approval import AllowAllApprover, CallbackApprover, DenyAllApprover

    if case.approve == "deny":
        return DenyAllApprover()
    if case.approve == "allow":
        return AllowAllApprover()
    return CallbackApprover(case.approve)


def build_sandbox(config: AgentConfig, catalog: Catalog) -> Sandbox:
    """The sandbox of ``config`` (the runner builds it to know the session's workdir)."""
    from koboi.errors import KoboiError
    from koboi.sandbox import Sandbox

    entry = catalog.sandboxes.get(config.sandbox.backend)
    if entry is None:
        raise KoboiError(f"sandbox backend {config.sandbox.backend!r} is not installed")
    sandbox = entry.target(config.sandbox_options, config)
    if not isinstance(sandbox, Sandbox):
        raise KoboiError(f"sandbox plugin {entry.plugin!r} returned {sandbox!r}, not a Sandbox")
    return sandbox


def seed_files(workdir: Path | None, files: Mapping[str, str]) -> None:
    """Create the case's ``files`` in the session's working directory."""
    if not files:
        return
    if workdir is None:
        from koboi_eval.errors import EvalDefinitionError

        raise EvalDefinitionError(
            "files= needs a working directory, and this config's sandbox has none"
        )
    for relative, text in files.items():
        target = workdir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def store_url_for(case: EvalCase, directory: Path) -> str:
    """``memory://``, or a SQLite file in the case's temporary directory."""
    if case.store == "sqlite":
        return f"sqlite:///{(directory / 'journal.db').as_posix()}"
    return "memory://"
