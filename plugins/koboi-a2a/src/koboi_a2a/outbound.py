"""A2A peers as tools: each skill of a peer's card is offered as ``<peer>__<skill>``.

The card is fetched from the peer's well-known path when the agent opens, its
signature checked (a card without a valid signature is refused unless the peer's
``allow_unsigned`` says otherwise), and kept: in memory for ``card_ttl_seconds``, and
in the store's keyed records so an agent that opens while the peer is down still
offers its tools. A call is a tool call like any other (risk, approval, rate limits,
journal); it sends one A2A message with a2a-sdk's client and:

- sends ``traceparent`` (a child of the run's trace) and the peer key;
- streams the peer's task events into this run's stream (``a2a.status``,
  ``a2a.artifact`` progress events of the call);
- remembers the task it started (a keyed record per session and call), so a call run
  again after a crash or a suspension follows that task instead of starting another;
  its message id is derived from the session and the call, so a peer that recognises
  repeated message ids (koboi does) answers a re-sent message with the same task;
- survives the peer going away mid-call: it polls the task until the peer answers
  again, within ``timeout_seconds``;
- suspends this run when the peer asks for input (``input-required``): the reply that
  continues the run is sent to the peer's task.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from pydantic import BaseModel, ConfigDict, Field

from koboi.errors import KoboiError, ToolError
from koboi.logs import get_logger
from koboi.store import KeyedRecords, records_of
from koboi.tools import Risk, Tool, ToolContext
from koboi.toolsets import Toolset, ToolsetContext
from koboi.tracing import TraceContext, current_trace
from koboi_a2a.card import CARD_PATH, CardRefused, parse_card, verifier_for
from koboi_a2a.config import A2ASettings, PeerSettings

log = get_logger("koboi.a2a")

CARD_KIND = "a2a.peer_card"
CALL_KIND = "a2a.peer_call"
#: Seconds between two reads of a task while its peer cannot stream it.
POLL_SECONDS = 0.5


def _records(store: Any) -> KeyedRecords | None:
    """The store's keyed records, or None (a journal-only store: nothing is kept)."""
    if store is None:
        return None
    try:
        return records_of(store, "A2A peer cards and calls")
    except KoboiError:
        return None


class PeerArgs(BaseModel):
    """What a peer call takes: the message to send."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(description="What to ask the agent (one message, in plain text).")


@dataclass
class PeerCard:
    """A peer's card as fetched and checked."""

    card: Any  # a2a.types.AgentCard
    fetched_at: float
    signed: bool


def _same_origin(a: str, b: str) -> bool:
    x, y = urlsplit(a), urlsplit(b)
    return (x.scheme, x.netloc) == (y.scheme, y.netloc)


class Peer:
    """One configured peer: its card (fetched, checked, cached) and its client."""

    def __init__(self, settings: PeerSettings, base_dir: Path) -> None:
        self.settings = settings
        self.base_dir = base_dir
        self.current: PeerCard | None = None
        self.records: KeyedRecords | None = None

    def _headers(self, trace: TraceContext | None = None) -> dict[str, str]:
        headers = {"A2A-Version": "1.0"}
        if self.settings.api_key is not None:
            headers["Authorization"] = f"Bearer {self.settings.api_key.get_secret_value()}"
        if trace is not None:
            headers["traceparent"] = trace.traceparent
            if trace.tracestate:
                headers["tracestate"] = trace.tracestate
        return headers

    async def fetch(self) -> PeerCard:
        """Fetch the card and check it; raises :class:`CardRefused` or KoboiError."""
        settings = self.settings
        url = settings.url + CARD_PATH
        async with httpx.AsyncClient(timeout=15.0) as client:
            try:
                response = await client.get(url)
                response.raise_for_status()
                data = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise KoboiError(f"peer {settings.name!r}: cannot fetch {url}: {exc}") from None
        return self.check(parse_card(data))

    def check(self, card: Any) -> PeerCard:
        settings = self.settings

        def jwks(address: str) -> Any:
            # Called by a2a-sdk's verifier (sync): the key set on the peer's own origin.
            with httpx.Client(timeout=15.0) as sync_client:
                found = sync_client.get(address)
                found.raise_for_status()
                return found.json()

        verify = verifier_for(settings, self.base_dir, jwks)
        signed = False
        if verify is None:
            if not settings.allow_unsigned:
                raise CardRefused(
                    f"peer {settings.name!r}: no key to check its card with: give "
                    "public_key_file (or trust_card_jwks), or allow_unsigned: true"
                )
        else:
            try:
                verify(card)
                signed = True
            except CardRefused as exc:
                if not settings.allow_unsigned:
                    raise CardRefused(
                        f"peer {settings.name!r}: its card is refused: {exc} (a card must "
                        "carry a valid signature unless allow_unsigned: true)"
                    ) from None
                log.warning("peer %r: card not verified (%s); allowed unsigned", settings.name, exc)
        for interface in card.supported_interfaces:
            if not _same_origin(interface.url, settings.url):
                raise CardRefused(
                    f"peer {settings.name!r}: its card names endpoint {interface.url!r}, not on "
                    f"{settings.url}: refused (the peer key is sent only to the peer's origin)"
                )
        if not card.supported_interfaces:
            raise CardRefused(f"peer {settings.name!r}: its card names no endpoint")
        return PeerCard(card=card, fetched_at=time.time(), signed=signed)

    async def card(self) -> PeerCard:
        """The card, fetched again once it is older than ``card_ttl_seconds``."""
        current = self.current
        if (
            current is not None
            and time.time() - current.fetched_at < self.settings.card_ttl_seconds
        ):
            return current
        try:
            self.current = await self.fetch()
        except CardRefused:
            raise
        except KoboiError:
            if current is None:
                raise
            log.warning(
                "peer %r: card not refreshed; using the one fetched before", self.settings.name
            )
            return current
        await self._remember()
        return self.current

    async def _remember(self) -> None:
        if self.records is None or self.current is None:
            return
        from google.protobuf.json_format import MessageToDict

        try:
            await self.records.record_put(
                CARD_KIND,
                self.settings.name,
                {"card": MessageToDict(self.current.card), "url": self.settings.url},
            )
        except Exception as exc:  # a cache the store could not fill: logged, not fatal
            log.warning("peer %r: could not keep its card: %s", self.settings.name, exc)

    async def remembered(self) -> PeerCard | None:
        """The card kept in the store from an earlier fetch (checked again)."""
        if self.records is None:
            return None
        kept = await self.records.record_get(CARD_KIND, self.settings.name)
        if not kept or kept.get("url") != self.settings.url:
            return None
        from a2a.types import a2a_pb2 as pb
        from google.protobuf.json_format import ParseDict

        card = ParseDict(kept["card"], pb.AgentCard(), ignore_unknown_fields=True)
        checked = self.check(card)
        return PeerCard(card=checked.card, fetched_at=0.0, signed=checked.signed)

    def client(self, trace: TraceContext | None) -> tuple[Any, httpx.AsyncClient]:
        from a2a.client import ClientConfig, ClientFactory

        assert self.current is not None
        http = httpx.AsyncClient(
            headers=self._headers(trace), timeout=httpx.Timeout(30.0, read=None)
        )
        streams = self.settings.streaming and self.current.card.capabilities.streaming
        factory = ClientFactory(ClientConfig(streaming=streams, httpx_client=http))
        return factory.create(self.current.card), http


def _text_of(parts: Sequence[Any]) -> str:
    texts: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToDict

            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif kind == "url":
            texts.append(f"[file: {part.url}]")
        elif kind == "raw":
            texts.append(f"[file: {part.media_type or 'bytes'}, {len(part.raw)} bytes]")
    return "\n".join(texts)


class PeerTool(Tool):
    """One skill of a peer: a message to the peer, its answer the result."""

    args_model = PeerArgs
    live_events = True

    def __init__(self, peer: Peer, skill: Any) -> None:
        self.peer = peer
        self.skill_id = str(skill.id)
        self.name = self.skill_id
        self.namespace = peer.settings.name
        card = peer.current.card if peer.current is not None else None
        who = card.name if card is not None else peer.settings.name
        about = skill.description or (card.description if card is not None else "")
        self.description = (
            f"Ask the remote agent {who!r} (skill {skill.name or skill.id}): {about}"
        )[:1024]
        self.risk = Risk(peer.settings.risk)
        self.idempotent = peer.settings.idempotent

    async def invoke(self, args: PeerArgs, ctx: ToolContext) -> str:
        return await PeerCall(self, ctx).run(args.message)


class PeerCall:
    """One call of a peer tool (see the module for what it does)."""

    def __init__(self, tool: PeerTool, ctx: ToolContext) -> None:
        self.tool = tool
        self.peer = tool.peer
        self.ctx = ctx
        run = ctx.run
        self.records = _records(getattr(run, "store", None) if run is not None else None)
        self.key = f"{ctx.session_id}:{ctx.call_id}"
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.answer: list[str] = []
        self.status_text = ""
        self.state: int | None = None

    def _trace(self) -> TraceContext | None:
        run = self.ctx.run
        trace = current_trace() or (getattr(run, "trace", None) if run is not None else None)
        return trace.child() if trace is not None else None

    def _message_id(self, *salt: str) -> str:
        return hashlib.sha256(":".join((self.key, *salt)).encode()).hexdigest()[:32]

    async def run(self, text: str) -> str:
        from a2a.types import a2a_pb2 as pb

        peer = self.peer
        try:
            await peer.card()
        except KoboiError as exc:
            raise ToolError(str(exc)) from None
        earlier = await self._earlier()
        trace = self._trace()
        if trace is not None:
            self.ctx.record(
                "a2a.call_sent",
                {
                    "peer": peer.settings.name,
                    "skill": self.tool.skill_id,
                    "traceparent": trace.traceparent,
                    "task_id": earlier.get("task_id") if earlier else None,
                },
            )
        client, http = peer.client(trace)
        try:
            with anyio.fail_after(peer.settings.timeout_seconds):
                if earlier and self.ctx.reply is not None:
                    # The run was suspended for the peer's question: send it the reply.
                    self.task_id = str(earlier["task_id"])
                    self.context_id = str(earlier.get("context_id") or "")
                    reply = self.ctx.reply
                    reply_text = reply if isinstance(reply, str) else json.dumps(reply)
                    message = pb.Message(
                        message_id=self._message_id(
                            "reply", hashlib.sha256(reply_text.encode()).hexdigest()
                        ),
                        role=pb.ROLE_USER,
                        task_id=self.task_id,
                        context_id=self.context_id,
                        parts=[pb.Part(text=reply_text)],
                    )
                    await self._send(client, message)
                elif earlier:
                    # Run again after a crash: follow the task the first run started.
                    self.task_id = str(earlier["task_id"])
                    await self._poll(client)
                else:
                    message = pb.Message(
                        message_id=self._message_id("message"),
                        role=pb.ROLE_USER,
                        parts=[pb.Part(text=text)],
                    )
                    message.metadata.update({"skill": self.tool.skill_id})
                    await self._send(client, message)
        except TimeoutError:
            raise ToolError(
                f"peer {peer.settings.name!r} did not finish within "
                f"{peer.settings.timeout_seconds:g} s (task {self.task_id})"
            ) from None
        finally:
            await client.close()
            await http.aclose()
        return self._result()

    async def _earlier(self) -> dict[str, Any] | None:
        if self.records is None:
            return None
        return await self.records.record_get(CALL_KIND, self.key)

    async def _remember(self) -> None:
        if self.records is None or self.task_id is None:
            return
        await self.records.record_put(
            CALL_KIND,
            self.key,
            {
                "peer": self.peer.settings.name,
                "task_id": self.task_id,
                "context_id": self.context_id,
                "at": time.time(),
            },
            expires_at=time.time() + 30 * 86400,
        )

    async def _send(self, client: Any, message: Any) -> None:
        from a2a.types import a2a_pb2 as pb

        request = pb.SendMessageRequest(message=message)
        try:
            async for event in client.send_message(request):
                await self._take(event)
                if self._settled():
                    return
        except Exception as exc:  # the peer went away, or the stream broke
            if self.task_id is None:
                raise ToolError(
                    f"peer {self.peer.settings.name!r}: the message was not delivered: "
                    f"{_short(exc)}"
                ) from None
            log.info(
                "peer %r: stream of task %s broke (%s); polling",
                self.peer.settings.name,
                self.task_id,
                _short(exc),
            )
        if not self._settled():
            await self._poll(client)

    async def _poll(self, client: Any) -> None:
        """Read the task until it settles, across the peer's restarts."""
        from a2a.types import a2a_pb2 as pb

        assert self.task_id is not None
        while True:
            try:
                task = await client.get_task(pb.GetTaskRequest(id=self.task_id))
            except Exception as exc:  # the peer is down or restarting: read again, unless gone
                if _not_found(exc):
                    raise ToolError(
                        f"peer {self.peer.settings.name!r} has no task {self.task_id} any more"
                    ) from None
                await anyio.sleep(POLL_SECONDS)
                continue
            await self._task(task)
            if self._settled():
                return
            await anyio.sleep(POLL_SECONDS)

    async def _task(self, task: Any) -> None:
        new = self.task_id is None
        self.task_id = task.id
        self.context_id = task.context_id
        if new:
            await self._remember()
        self.state = task.status.state
        self.status_text = _text_of(task.status.message.parts)
        if task.artifacts:
            self.answer = [
                _text_of(a.parts) for a in task.artifacts if not a.artifact_id.startswith("draft-")
            ]

    async def _take(self, event: Any) -> None:
        from google.protobuf.json_format import MessageToDict

        kind = event.WhichOneof("payload")
        if kind == "task":
            await self._task(event.task)
            self.ctx.emit(
                "a2a.status",
                {
                    "peer": self.peer.settings.name,
                    "task_id": self.task_id,
                    "state": _state_name(self.state),
                },
            )
        elif kind == "message":
            self.answer = [_text_of(event.message.parts)]
            self.state = -1  # a message is the whole answer
        elif kind == "status_update":
            update = event.status_update
            if self.task_id is None:
                self.task_id = update.task_id
                self.context_id = update.context_id
                await self._remember()
            self.state = update.status.state
            self.status_text = _text_of(update.status.message.parts)
            self.ctx.emit(
                "a2a.status",
                {
                    "peer": self.peer.settings.name,
                    "task_id": update.task_id,
                    "state": _state_name(self.state),
                    "text": self.status_text,
                    "metadata": MessageToDict(update.metadata),
                },
            )
        elif kind == "artifact_update":
            update = event.artifact_update
            artifact = update.artifact
            text = _text_of(artifact.parts)
            if not artifact.artifact_id.startswith("draft-"):
                if update.append and self.answer:
                    self.answer[-1] += text
                else:
                    self.answer.append(text)
            self.ctx.emit(
                "a2a.artifact",
                {
                    "peer": self.peer.settings.name,
                    "task_id": update.task_id,
                    "artifact_id": artifact.artifact_id,
                    "text": text,
                    "append": update.append,
                    "last_chunk": update.last_chunk,
                },
            )

    def _settled(self) -> bool:
        from a2a.types import a2a_pb2 as pb

        return self.state in (
            -1,
            pb.TASK_STATE_COMPLETED,
            pb.TASK_STATE_FAILED,
            pb.TASK_STATE_CANCELED,
            pb.TASK_STATE_REJECTED,
            pb.TASK_STATE_INPUT_REQUIRED,
            pb.TASK_STATE_AUTH_REQUIRED,
        )

    def _result(self) -> str:
        from a2a.types import a2a_pb2 as pb

        name = self.peer.settings.name
        if self.state in (-1, pb.TASK_STATE_COMPLETED):
            return "\n".join(a for a in self.answer if a) or self.status_text
        if self.state == pb.TASK_STATE_INPUT_REQUIRED:
            question = self.status_text or "the peer needs more input"
            self.ctx.suspend(
                f"peer {name} asks: {question}",
                kind="input",
                data={"peer": name, "task_id": self.task_id, "question": question},
            )
        raise ToolError(
            f"peer {name}: task {self.task_id} {_state_name(self.state)}"
            + (f": {self.status_text}" if self.status_text else "")
        )


def _state_name(state: int | None) -> str:
    from a2a.types import a2a_pb2 as pb

    if state is None or state < 0:
        return "answered"
    name: str = pb.TaskState.Name(state)
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


def _not_found(exc: BaseException) -> bool:
    from a2a.utils.errors import TaskNotFoundError

    return isinstance(exc, TaskNotFoundError) or (
        "not found" in str(exc).lower() and "task" in str(exc).lower()
    )


class PeerToolset(Toolset):
    """The skills of the ``a2a`` section's peers, one namespace per peer."""

    name = "a2a"

    def __init__(self, peers: Sequence[PeerSettings], *, base_dir: Path) -> None:
        self.peers = [Peer(p, base_dir) for p in peers]
        self._tools: list[Tool] = []

    async def open(self, context: ToolsetContext) -> None:
        records = _records(context.store)
        for peer in self.peers:
            peer.records = records
            try:
                await peer.card()
            except CardRefused as exc:
                log.warning("%s; its skills are not offered", exc)
                continue
            except KoboiError as exc:
                kept = None
                try:
                    kept = await peer.remembered()
                except KoboiError as refused:
                    log.warning("%s; its skills are not offered", refused)
                if kept is None:
                    log.warning("%s; its skills are not offered until it answers", exc)
                    continue
                log.warning("%s; offering its skills from the card fetched before", exc)
                peer.current = kept
        self._rebuild()

    def _rebuild(self) -> None:
        tools: list[Tool] = []
        for peer in self.peers:
            if peer.current is None:
                continue
            wanted = set(peer.settings.skills)
            for skill in peer.current.card.skills:
                if wanted and skill.id not in wanted:
                    continue
                tools.append(PeerTool(peer, skill))
        self._tools = tools

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)


def create_toolset(config: Any) -> PeerToolset | None:
    """The toolset of the config's peers (None without an ``a2a`` section or peers)."""
    settings = config.section("a2a")
    if not isinstance(settings, A2ASettings) or not settings.peers:
        return None
    return PeerToolset(settings.peers, base_dir=Path(config.base_dir))
