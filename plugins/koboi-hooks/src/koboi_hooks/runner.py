"""Running one hook: a command through the run's sandbox, or a signed POST to a URL.

A command gets the event as JSON on stdin, in the session's working directory,
with a clean environment: ``PATH``, ``LANG``, ``HOME`` (the working directory),
``KOBOI_HOOK_EVENT``, ``KOBOI_SESSION_ID``, ``KOBOI_CONFIG_DIR`` and the
variables the hook names under ``env`` — nothing else of koboi's environment,
so no key a provider or another plugin holds. It runs through the same
sandbox as the run's tools (``run.sandbox``, as the session), under its
confinement, with the hook's timeout (the whole process tree is killed) and
output cap.

Every hook's outcome is journaled (``hooks.ran``) and audited
(``action: hook``) by :func:`journal_outcome`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi.errors import describe_error
from koboi.interceptors import RunInfo
from koboi.logs import get_logger
from koboi_hooks.contract import HookOutcome, clip, failure, from_output, from_process
from koboi_hooks.settings import CONTRACT_NAMES, HookSpec, HooksSettings

if TYPE_CHECKING:
    import httpx

    from koboi_http.guard import AddressPolicy, Resolver

log = get_logger("koboi_hooks")

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


class HookRunner:
    """Runs the hooks of one agent's ``hooks`` section."""

    def __init__(
        self,
        settings: HooksSettings,
        *,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.by_event = settings.by_event()
        self._resolver = resolver
        self._transport = transport
        self._policy: AddressPolicy | None = None

    def hooks(self, event: str, tool_name: str | None = None) -> list[HookSpec]:
        found = self.by_event.get(event, [])
        if tool_name is None:
            return list(found)
        return [h for h in found if h.matches(tool_name)]

    def payload(self, event: str, run: RunInfo, **extra: Any) -> dict[str, Any]:
        """The JSON a hook of ``event`` is given (see :mod:`koboi_hooks.contract`)."""
        return {
            "hook_event_name": CONTRACT_NAMES[event],
            "koboi_event": event,
            "session_id": run.session_id,
            "cwd": str(self._workdir(run) or ""),
            "agent": run.config.agent.name,
            "permission_mode": run.config.agent.mode,
            "step": run.step,
            **extra,
        }

    def timeout_of(self, hook: HookSpec) -> float:
        return hook.timeout if hook.timeout is not None else self.settings.command_timeout

    async def run(
        self, event: str, hook: HookSpec, payload: Mapping[str, Any], run: RunInfo
    ) -> HookOutcome:
        """Run ``hook`` once; a failure to run at all is an outcome with ``error``, never raised."""
        body = json.dumps(payload, ensure_ascii=False, default=str).encode()
        if hook.url is not None:
            return await self._post(event, hook, body)
        return await self._command(event, hook, body, run)

    def _workdir(self, run: RunInfo) -> Path | None:
        if run.sandbox is None:
            return None
        try:
            return run.sandbox.workdir_for(run.session_id)
        except Exception:  # a sandbox that cannot say: the hook runs where the sandbox puts it
            return None

    def environment(
        self, event: str, hook: HookSpec, run: RunInfo, cwd: Path | None
    ) -> dict[str, str]:
        env = {
            "PATH": BASE_PATH,
            "LANG": "C.UTF-8",
            "KOBOI_HOOK_EVENT": event,
            "KOBOI_SESSION_ID": run.session_id,
            "KOBOI_CONFIG_DIR": str(run.config.base_dir),
        }
        if cwd is not None:
            env["HOME"] = str(cwd)
        for name in hook.env:
            value = os.environ.get(name)
            if value is not None:
                env[name] = value
        return env

    async def _command(self, event: str, hook: HookSpec, body: bytes, run: RunInfo) -> HookOutcome:
        sandbox = run.sandbox
        if sandbox is None:
            return failure("no sandbox to run it in (this run has none)")
        argv = (
            list(hook.command)
            if isinstance(hook.command, list)
            else ["/bin/sh", "-c", str(hook.command)]
        )
        workdir = self._workdir(run)
        cwd = workdir / hook.cwd if workdir is not None and hook.cwd else workdir
        timeout = self.timeout_of(hook)
        try:
            result = await sandbox.run_process(
                argv,
                cwd=cwd,
                env=self.environment(event, hook, run, cwd),
                timeout=timeout,
                input=body + b"\n",
                max_output=self.settings.max_output,
                session_id=run.session_id,
            )
        except Exception as exc:  # the sandbox refused or could not start it: a hook error
            return failure(f"could not run: {clip(describe_error(exc))}")
        return from_process(event, result, timeout)

    async def _post(self, event: str, hook: HookSpec, body: bytes) -> HookOutcome:
        from koboi_hooks.posting import PostFailed, address_policy, post
        from koboi_hooks.signing import signed_headers

        assert hook.url is not None
        if self._policy is None:
            self._policy = address_policy(self.settings.url_allow)
        secret = hook.secret.get_secret_value() if hook.secret is not None else None
        try:
            answer = await post(
                hook.url,
                body,
                signed_headers(secret, body),
                policy=self._policy,
                timeout=self.timeout_of(hook),
                max_bytes=self.settings.max_output,
                resolver=self._resolver,
                transport=self._transport,
            )
        except PostFailed as exc:
            return failure(f"POST failed: {exc}")
        if not 200 <= answer.status < 300:
            return failure(f"the receiver answered HTTP {answer.status}")
        if len(answer.body) > self.settings.max_output:
            return failure("answered more than hooks.max_output bytes")
        return from_output(event, answer.body.decode("utf-8", errors="replace"))


def journal_outcome(
    run: RunInfo,
    event: str,
    hook: HookSpec,
    outcome: HookOutcome,
    effect: str,
    **where: Any,
) -> None:
    """Journal (``hooks.ran``) and audit one hook's outcome and what it did to the run."""
    data: dict[str, Any] = {"event": event, "hook": hook.label(), **where, **outcome.data()}
    data["effect"] = effect
    run.record("hooks.ran", data)
    audit: dict[str, Any] = {
        "action": "hook",
        "event": event,
        "hook": hook.label(),
        "decision": data["decision"],
        "effect": effect,
        **where,
    }
    for key in ("reason", "error"):
        if key in data:
            audit[key] = data[key]
    run.audit(audit)
    if outcome.failed:
        log.warning(
            "hook %r (%s) of session %s failed: %s; %s",
            hook.label(),
            event,
            run.session_id,
            outcome.error,
            effect,
        )
    if outcome.system_message:
        run.emit(
            "hooks.message", {"hook": hook.label(), "event": event, "text": outcome.system_message}
        )
