"""``koboi a2a``: make a card-signing key, check the peers of a config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="A2A: card-signing keys and the peers of a config.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.command("keygen")
def keygen(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the private key (PEM, mode 600).")
    ],
    algorithm: Annotated[
        str, typer.Option("--algorithm", help="ES256 (EC P-256) or EdDSA (Ed25519).")
    ] = "ES256",
) -> None:
    """Make a private key to sign the agent card with; print its public key (PEM).

    Give the private key to a2a.serve.signing.key_file; give the public key to the
    peers that call this agent (their a2a.peers[].public_key_file)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from koboi.errors import KoboiError

    if algorithm == "ES256":
        key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey = ec.generate_private_key(
            ec.SECP256R1()
        )
    elif algorithm == "EdDSA":
        key = ed25519.Ed25519PrivateKey.generate()
    else:
        raise KoboiError(f"--algorithm {algorithm!r}: use ES256 or EdDSA")
    if out.exists():
        raise KoboiError(f"{out} exists: choose another path (a key is never overwritten)")
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    out.touch(mode=0o600)
    out.write_bytes(pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    typer.echo(public.decode(), nl=False)
    typer.echo(f"private key written to {out} (keep it secret); public key above", err=True)


@app.command("peers")
def peers(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", help="The agent's YAML config.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fetch and check each peer's card: signed or refused, and the tools it offers."""
    import anyio

    from koboi.config import load_config
    from koboi_a2a.card import CardRefused
    from koboi_a2a.config import A2ASettings
    from koboi_a2a.outbound import Peer

    loaded = load_config(config)
    section = loaded.section("a2a")
    if not isinstance(section, A2ASettings) or not section.peers:
        typer.echo("no A2A peers in this config (a2a.peers)")
        return
    rows: list[dict[str, object]] = []

    async def check() -> None:
        for settings in section.peers:
            peer = Peer(settings, Path(loaded.base_dir))
            row: dict[str, object] = {"peer": settings.name, "url": settings.url}
            try:
                found = await peer.fetch()
                row.update(
                    status="signed" if found.signed else "unsigned (allowed)",
                    agent=found.card.name,
                    tools=[f"{settings.name}__{s.id}" for s in found.card.skills],
                )
            except CardRefused as exc:
                row.update(status="refused", error=str(exc))
            except Exception as exc:  # whatever kept the card from us: reported per peer
                row.update(status="unreachable", error=str(exc))
            rows.append(row)

    anyio.run(check)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        for row in rows:
            tools = row.get("tools")
            detail = row.get("error") or (", ".join(tools) if isinstance(tools, list) else "")
            typer.echo(f"{row['peer']}  {row['status']}  {row['url']}  {detail}")
    if any(r["status"] in ("refused", "unreachable") for r in rows):
        raise typer.Exit(1)
