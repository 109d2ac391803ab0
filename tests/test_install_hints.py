"""The first-party install hints (koboi-agent's ``hints.toml``) name the distribution of
everything a config can name that a first-party plugin registers, so "install X" is right
for each of them; and they name nothing no plugin registers (a stale line)."""

from __future__ import annotations

from koboi.plugins import PluginHost

#: Catalog registries a config names things from, and the hint kind of each.
KINDS = {
    "sections": "section",
    "providers": "provider",
    "tools": "tool",
    "sandboxes": "sandbox",
    "runners": "runner",
}
#: Registered by a plugin, but never named in a config by a user (nothing to hint).
UNHINTED = {
    ("section", "weather"),  # the example plugin, when it is installed
}


def _first_party() -> tuple[PluginHost, dict[str, str]]:
    host = PluginHost(strict=True)
    host.load()
    dists = {p.id: p.dist for p in host.plugins if not p.builtin}
    return host, dists


def test_every_first_party_registration_has_an_install_hint() -> None:
    host, dists = _first_party()
    catalog = host.catalog()
    hints = catalog.hints
    checked = 0
    missing: list[str] = []
    wrong: list[str] = []
    for table, kind in KINDS.items():
        for entry in catalog.registries()[table]:
            dist = dists.get(entry.plugin)
            if dist is None or not dist.startswith("koboi-") or (kind, entry.name) in UNHINTED:
                continue  # a kernel built-in, or a third party's plugin
            checked += 1
            hinted = hints.distribution(kind, entry.name)
            if hinted is None:
                missing.append(f"{kind} {entry.name!r} ({dist})")
            elif hinted != dist:
                wrong.append(f"{kind} {entry.name!r}: hints say {hinted}, {dist} registers it")
    assert checked > 40, checked  # control: the workspace's plugins were found
    assert not missing, "add to packages/koboi-agent/src/koboi_agent/hints.toml:\n" + "\n".join(
        missing
    )
    assert not wrong, "\n".join(wrong)


def test_no_hint_names_a_distribution_that_does_not_exist() -> None:
    """Every distribution a hint names is one of the workspace's: "install koboi-x" for a
    distribution that does not exist would send a user nowhere."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = {
        tomllib.loads(p.read_text())["project"]["name"]
        for p in [*root.glob("packages/*/pyproject.toml"), *root.glob("plugins/*/pyproject.toml")]
    }
    host, _ = _first_party()
    named = {e.target for e in host.catalog().hints.entries}
    assert named, "no hints were registered"
    assert not named - names, sorted(named - names)
