"""Schema administration behind ``koboi db``: report and upgrade a store's revision."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from koboi_store_sql import database, migrate
from koboi_store_sql.url import StoreURL, parse_store_url


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database's schema stands against what this koboi knows."""

    label: str
    #: The database's revision; None for a database koboi has not set up yet.
    current: str | None
    head: str
    #: False when a SQLite file does not exist yet (it is created on first use).
    exists: bool = True

    @property
    def state(self) -> str:
        """``current``, ``behind`` (upgradable), ``newer`` (refused) or ``missing``."""
        if not self.exists:
            return "missing"
        if self.current == self.head:
            return "current"
        if self.current is None or self.current in migrate.revisions().known:
            return "behind"
        return "newer"


def schema_status(url: str, base_dir: Path | None = None) -> SchemaStatus:
    """Read a store's revision without writing anything (a missing SQLite file stays missing)."""
    target = parse_store_url(url, base_dir)
    head = migrate.revisions().head
    if target.dialect == "sqlite":
        assert target.path is not None
        if not target.path.exists():
            return SchemaStatus(target.label, None, head, exists=False)
        return SchemaStatus(target.label, database.inspect_sqlite_file(target), head)
    return SchemaStatus(target.label, _postgres_revision(target), head)


def _postgres_revision(target: StoreURL) -> str | None:
    handle = database.Database(target)
    try:
        with database.translated(target):
            return handle.revision()
    finally:
        handle.dispose()


def upgrade_schema(url: str, base_dir: Path | None = None) -> tuple[SchemaStatus, SchemaStatus]:
    """Create or upgrade a store's schema; the status before and after."""
    before = schema_status(url, base_dir)
    target = parse_store_url(url, base_dir)
    handle = database.attach(target)
    database.detach(handle)
    return before, schema_status(url, base_dir)
