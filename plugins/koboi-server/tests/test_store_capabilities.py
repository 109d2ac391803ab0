"""The server needs two optional store capabilities, keyed records and a job queue: a store
without one is refused when the app is made, in one line naming what is missing; a store
with both (the control) is served."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import MissingCapability
from koboi.store import InMemoryStore, KeyedRecords, Store

_JOURNAL = frozenset(
    {
        "create_session",
        "get_session",
        "list_sessions",
        "set_status",
        "append",
        "acquire_lease",
        "get_lease",
        "renew_lease",
        "release_lease",
        "match_sessions",
        "resolve_session",
        "read",
        "read_audit",
    }
)
_RECORDS = frozenset(
    {
        "record_put",
        "record_get",
        "record_list",
        "record_delete",
        "record_create",
        "counter_add",
        "purge_expired",
    }
)


class JournalOnly(Store):
    """A third-party store with the journal and nothing else (an in-memory one behind it)."""

    name = "journal-only"
    offers = _JOURNAL

    def __init__(self) -> None:
        self._inner = InMemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name in self.offers:
            return getattr(self._inner, name)
        raise AttributeError(name)


class RecordsNoJobs(JournalOnly, KeyedRecords):
    """Keyed records too, but no job queue."""

    name = "records-no-jobs"
    offers = _JOURNAL | _RECORDS


# Every abstract method is served by the in-memory store behind (__getattr__).
JournalOnly.__abstractmethods__ = frozenset()
RecordsNoJobs.__abstractmethods__ = frozenset()


@pytest.mark.parametrize(
    ("store", "missing", "what"),
    [
        (JournalOnly, "keyed records", "has only the journal"),
        (RecordsNoJobs, "job queue", "has keyed records"),
    ],
)
def test_a_store_without_what_the_server_keeps_is_refused_in_one_line(
    config_path: Path, store: Callable[[], Store], missing: str, what: str
) -> None:
    from koboi_server import create_app

    with pytest.raises(MissingCapability) as raised:
        create_app(config_path, store=store())
    message = str(raised.value)
    assert "\n" not in message and message.startswith("koboi serve (")
    assert f"needs a store with {missing}" in message and what in message


def test_a_store_with_both_is_served(config_path: Path) -> None:
    from koboi_server import create_app

    app = create_app(config_path, store=InMemoryStore())
    state = app.state.koboi
    assert state.records is state.store and state.jobs is state.store
