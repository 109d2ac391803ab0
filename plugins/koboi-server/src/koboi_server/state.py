"""What the routes of one app share: the agent, its store, the runs, keys and approvals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from koboi_server.approvals import ApprovalBook
from koboi_server.hub import Hub
from koboi_server.keys import KeyRing
from koboi_server.runs import RunRegistry

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi.config import AgentConfig
    from koboi.store import Store
    from koboi_server.settings import ServerSettings


@dataclass
class ServerState:
    """One per app; ``app.state.koboi``."""

    config: AgentConfig
    settings: ServerSettings
    agent: KoboiAgent
    store: Store
    hub: Hub
    registry: RunRegistry
    book: ApprovalBook
    keys: KeyRing
    #: False when the application brought its own approver: then approvals are not
    #: decided over HTTP (the routes say so).
    approvals_over_http: bool
    approver_name: str
