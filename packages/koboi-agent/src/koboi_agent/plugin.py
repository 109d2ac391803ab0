"""koboi hooks of koboi-agent: where first-party capabilities live, for "install ..." hints.

The kernel names no capability; when a config uses a section, provider, tool,
sandbox, store scheme, runner or pipeline stage that no installed plugin provides
(or someone invokes a ``koboi`` command none provides), its error names the distribution to install only because this plugin (or
another one) registered a hint. The list is data (``hints.toml``), read when
the catalog is first collected: adding a first-party plugin edits that file,
never the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import HintKind, RegisterHint

#: The table of hints.toml for each kind of hint.
TABLES: dict[str, HintKind] = {
    "sections": "section",
    "providers": "provider",
    "tools": "tool",
    "sandboxes": "sandbox",
    "store_schemes": "store_scheme",
    "runners": "runner",
    "stages": "stage",
    "commands": "command",
}


def load_hints() -> dict[str, Any]:
    """The parsed ``hints.toml`` shipped in this package."""
    # Imported here: every command (koboi --help too) imports this module, and only the
    # catalog, which --help never collects, needs the hints.
    import tomllib
    from importlib import resources

    text = resources.files("koboi_agent").joinpath("hints.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@hookimpl
def koboi_register_hints(register: RegisterHint) -> None:
    data = load_hints()
    for table, kind in TABLES.items():
        for name, distribution in data.get(table, {}).items():
            register(kind, name, distribution)
    # Backends that isolate tools: the only ones suggested when a run needs isolation.
    for name, distribution in data.get("isolating_sandboxes", {}).items():
        register("sandbox", name, distribution, isolating=True)
    for section, entry in data.get("moved_sections", {}).items():
        register("section", section, entry["distribution"], moved_to=entry["moved_to"])
