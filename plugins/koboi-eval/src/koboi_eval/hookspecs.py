"""The hooks koboi-eval defines for other plugins.

koboi-eval (plugin id ``eval``) publishes them through the kernel's
``koboi_register_hookspecs`` (see ``koboi_eval.plugin``), so they live in its
namespace, ``koboi_eval_...``. A plugin implements one like any kernel hook,
with ``from koboi import hookimpl``; when koboi-eval is not installed the
implementation is simply never called (``koboi plugins inspect`` lists the hook
as waiting for its owner), so a plugin can offer checks without depending on
koboi-eval.

This module imports nothing but the hook marker: the kernel imports it while
loading plugins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from koboi.hookspecs import hookspec

if TYPE_CHECKING:
    from koboi_eval.checks import Check

#: The hook a plugin implements to provide checks.
REGISTER_CHECKS = "koboi_eval_register_checks"
#: What the registered things are called in errors and listings.
CHECK_KIND = "eval check"


class RegisterCheck(Protocol):
    """``register(name, factory, *, description="")`` of :func:`koboi_eval_register_checks`;
    ``factory(*args, **kwargs)`` returns a :class:`koboi_eval.Check`."""

    def __call__(
        self, name: str, factory: Callable[..., Check], *, description: str = "", **extra: Any
    ) -> None: ...


@hookspec
def koboi_eval_register_checks(register: RegisterCheck) -> None:
    """Provide checks that eval cases use by name: ``plugin_check(name, *args, **kwargs)``.

    A *check* is an object an eval case lists in ``expect=[...]``: a subclass of
    :class:`koboi_eval.Check` that judges the case's :class:`koboi_eval.Trace` (the
    session's journal, folded: tool calls asked for, refused and run, the runs and
    their outcomes, the output, the cost, the working directory, and the plugin's
    own journal events through ``trace.plugin_events("<plugin>.<name>")``). It
    returns a :class:`koboi_eval.CheckResult`, passed, failed (what was expected,
    what happened) or skipped (why), from ``check(trace)`` or an async
    ``evaluate(trace, context)``. Its ``label`` and explanations are stable text
    (no ids, no timings): they are part of the deterministic report.

    :param register: ``register(name, factory, *, description="")``, once per
        check. ``name`` is what eval files pass to ``plugin_check`` (and how
        ``koboi plugins inspect`` shows it); it must be unique among every
        installed plugin's checks: a name registered by two plugins is an error
        naming both. ``factory(*args, **kwargs)`` receives the arguments the eval
        file gave ``plugin_check(name, ...)`` after the name, and returns a
        ``Check``; it runs while the eval file loads, so it should reject bad
        arguments by raising :class:`koboi_eval.errors.EvalDefinitionError` with
        what to fix. ``description`` is one line saying what the check asserts.

    Called at most once per plugin host, the first time an eval file asks for a
    check by name (never when no eval runs): import the module holding the checks
    inside the implementation, not at the top of ``plugin.py``. An implementation
    that raises is isolated: its plugin is marked failed with the reason
    (``koboi plugins list`` shows it; an error under ``KOBOI_STRICT_PLUGINS=1``)
    and its checks are not offered. Plugins are asked in the host's order (the
    built-in plugin, then by entry-point id); order never decides between two
    registrations of one name. Sync only.
    """
