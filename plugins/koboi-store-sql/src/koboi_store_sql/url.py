"""Store URLs: which database, and the koboi options carried in its query string.

Store factories are called as ``factory(url, base_dir)`` with no config, so the
options live in the URL itself (which also makes them work in ``KOBOI_STORE``)::

    sqlite:///.koboi/koboi.db?durability=process&busy_timeout=2
    postgresql+psycopg://koboi@db.internal:5432/koboi?pool_size=10&sslmode=require

Options koboi reads (and removes before handing the URL to the driver):

``durability``
    ``power_loss`` (default): a commit is on disk before ``append`` returns
    (SQLite ``synchronous=FULL``; PostgreSQL ``synchronous_commit=on``).
    ``process``: a commit survives the koboi process dying, but the last few
    may be lost if the machine loses power (SQLite ``synchronous=NORMAL``;
    PostgreSQL ``synchronous_commit=off``). Never corrupts the journal.
``busy_timeout``
    Seconds a write waits for another writer before failing (SQLite busy
    timeout; PostgreSQL ``lock_timeout``). Default 5.
``pool_size``
    PostgreSQL only: connections kept open per process. Default 5.

Any other query parameter of a PostgreSQL URL goes to libpq unchanged
(``sslmode``, ``options``, ``connect_timeout``...). SQLite URLs take no others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from koboi.errors import StoreError

Durability = Literal["power_loss", "process"]
Dialect = Literal["sqlite", "postgresql"]

DEFAULT_BUSY_TIMEOUT = 5.0
DEFAULT_POOL_SIZE = 5
_DURABILITIES: tuple[Durability, ...] = ("power_loss", "process")
_SQLITE_OPTIONS = ("durability", "busy_timeout")
_POSTGRES_OPTIONS = ("durability", "busy_timeout", "pool_size")


class StoreURLError(StoreError):
    """A store URL this plugin cannot use."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: the driver URL (without koboi's options) and the options."""

    dialect: Dialect
    #: What SQLAlchemy connects to (``sqlite:////abs/path.db``, ``postgresql+psycopg://...``).
    driver_url: str
    #: For messages: the path of a SQLite file, or the PostgreSQL URL without its password.
    label: str
    durability: Durability = "power_loss"
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    pool_size: int = DEFAULT_POOL_SIZE
    #: SQLite: the database file (absolute).
    path: Path | None = None

    @property
    def key(self) -> str:
        """Identifies the database: stores of one process with the same key share engines."""
        if self.path is not None:
            return f"sqlite:{self.path}"
        return f"{self.driver_url}#pool={self.pool_size}&{self.durability}&{self.busy_timeout}"


def _number(name: str, raw: str, url: str, *, integer: bool = False) -> float:
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "a whole number" if integer else "a number of seconds"
        raise StoreURLError(f"store URL option {name}={raw!r} must be {kind} ({url})") from None
    if value < 0 or (integer and value < 1):
        raise StoreURLError(f"store URL option {name}={raw!r} is out of range ({url})")
    return value


def parse_store_url(url: str, base_dir: Path | None = None) -> StoreURL:
    """Parse ``url``; a relative SQLite path resolves against ``base_dir`` (default: cwd)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreURLError(
            f"not a store URL: {url!r} (expected sqlite:///path.db or "
            "postgresql+psycopg://user@host:5432/db)"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    shown = parsed.render_as_string(hide_password=True)
    query = {k: (v[-1] if isinstance(v, tuple) else v) for k, v in parsed.query.items()}
    known = _SQLITE_OPTIONS if backend == "sqlite" else _POSTGRES_OPTIONS
    options = {k: query.pop(k) for k in list(query) if k in known}

    durability = options.get("durability", "power_loss").replace("-", "_")
    if durability not in _DURABILITIES:
        raise StoreURLError(
            f"store URL option durability={options['durability']!r} is not one of "
            f"power_loss, process ({shown})"
        )
    busy_timeout = _number("busy_timeout", options.get("busy_timeout", "5"), shown)

    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreURLError(f"unsupported SQLite driver {driver!r} in {shown}; use sqlite:///")
        if query:
            raise StoreURLError(
                f"unknown option(s) {', '.join(sorted(query))} in store URL {shown}; "
                f"SQLite URLs take: {', '.join(_SQLITE_OPTIONS)}"
            )
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            raise StoreURLError(
                f"store URL {shown} names no database file; use sqlite:///path/to/koboi.db "
                "(or memory:// for a throwaway store)"
            )
        path = Path(database).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        path = Path(_absolute(path))
        return StoreURL(
            dialect="sqlite",
            driver_url=f"sqlite:///{path}",
            label=str(path),
            durability=durability,
            busy_timeout=busy_timeout,
            path=path,
        )

    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise StoreURLError(
                f"unsupported PostgreSQL driver {driver!r} in {shown}; use postgresql+psycopg://"
            )
        pool_size = int(_number("pool_size", options.get("pool_size", "5"), shown, integer=True))
        driver_url = parsed.set(drivername="postgresql+psycopg", query=query)
        return StoreURL(
            dialect="postgresql",
            driver_url=driver_url.render_as_string(hide_password=False),
            label=driver_url.render_as_string(hide_password=True),
            durability=durability,
            busy_timeout=busy_timeout,
            pool_size=pool_size,
        )

    raise StoreURLError(
        f"koboi-store-sql cannot open {shown}: it handles sqlite:/// and postgresql:// URLs"
    )


def _absolute(path: Path) -> str:
    # os.path.abspath normalises ".." without resolving symlinks (resolve() would
    # follow a symlinked .koboi to wherever it points, which is still correct, but
    # keeping the user's spelling makes messages recognisable).
    import os

    return os.path.abspath(path)
