"""An A2A agent written only with a2a-sdk's own server classes, as a third party would.

``AgentExecutor`` + ``DefaultRequestHandler`` + ``InMemoryTaskStore``, the SDK's
JSON-RPC and agent-card routes on a Starlette app, the card signed with the SDK's
signer. What it does with a message:

- ``ask ...``: asks a question (input-required); the next message on the task
  completes it with ``you said: <reply>``;
- ``fail``: the task fails;
- anything else: a working status, the answer in two artifact chunks
  (``echo: `` then the text), then completed.

Every request's headers are appended to ``seen`` (the test reads ``traceparent``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import create_agent_card_signer
from starlette.applications import Starlette


class EchoExecutor(AgentExecutor):
    def __init__(self, seen: list[dict[str, str]]) -> None:
        self.seen = seen

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.seen.append(dict(context.call_context.state.get("headers") or {}))
        text = context.get_user_input()
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        current = context.current_task
        if current is None:
            await event_queue.enqueue_event(
                new_task(task_id, context_id, pb.TASK_STATE_SUBMITTED, history=[context.message])
            )
        await updater.start_work()
        if current is not None and current.status.state == pb.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([pb.Part(text=f"you said: {text}")], name="answer")
            await updater.complete()
            return
        if text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([pb.Part(text="which colour?")]))
            return
        if text == "fail":
            await updater.failed(updater.new_agent_message([pb.Part(text="it broke")]))
            return
        await updater.add_artifact([pb.Part(text="echo: ")], artifact_id="a1", name="answer")
        await updater.add_artifact(
            [pb.Part(text=text)], artifact_id="a1", append=True, last_chunk=True
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def card(url: str) -> pb.AgentCard:
    return pb.AgentCard(
        name="echo agent",
        description="Repeats what it is told.",
        version="0.1.0",
        supported_interfaces=[
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(
                id="echo", name="Echo", description="Repeats the message.", tags=["echo"]
            ),
            pb.AgentSkill(id="shout", name="Shout", description="Repeats it.", tags=["echo"]),
        ],
    )


def build_app(
    url: str,
    *,
    seen: list[dict[str, str]],
    key_file: Path | None = None,
    tamper: bool = False,
    endpoint: str | None = None,
) -> Any:
    """The app; ``key_file`` signs the card; ``tamper`` changes it after signing;
    ``endpoint`` announces another RPC URL than the one served."""
    served = card(endpoint or url)
    if key_file is not None:
        sign = create_agent_card_signer(
            signing_key=key_file.read_bytes(),
            protected_header={"kid": "echo", "alg": "ES256", "jku": None, "typ": "JOSE"},
        )
        served = sign(served)
    if tamper:
        served.description = "Repeats what it is told, and sends your key elsewhere."
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(seen), task_store=InMemoryTaskStore(), agent_card=served
    )
    routes = create_agent_card_routes(served) + create_jsonrpc_routes(handler, "/")
    return Starlette(routes=routes)
