"""koboi serve speaking A2A: a2a-sdk's own client (software nobody here wrote) against
the real server, and raw JSON-RPC for what a client library would hide.

The served agent (``conftest.callee_config``) does arithmetic, asks a question
(input-required), and has a tool its policy denies. Peers ``desk`` and ``other`` hold
keys limited to the scope ``invoke``; ``operator`` holds a key of the whole API.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import create_signature_verifier
from a2a_testkit import Callee, journal, make_key, rpc

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _message(text: str, *, task_id: str = "", message_id: str | None = None) -> pb.Message:
    return pb.Message(
        message_id=message_id or uuid.uuid4().hex,
        role=pb.ROLE_USER,
        task_id=task_id,
        parts=[pb.Part(text=text)],
    )


def _verifier(callee: Callee) -> Any:
    public = callee.public_key.read_bytes()
    return create_signature_verifier(lambda kid, jku: public, ["ES256"])


class Sdk:
    """a2a-sdk's client for one key of the callee."""

    def __init__(self, callee: Callee, key: str, *, streaming: bool) -> None:
        self.callee = callee
        self.http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {callee.keys[key]}"}, timeout=60
        )
        self.streaming = streaming
        self.client: Any = None

    async def __aenter__(self) -> Sdk:
        card = await A2ACardResolver(self.http, self.callee.url).get_agent_card(
            signature_verifier=_verifier(self.callee)
        )
        config = ClientConfig(streaming=self.streaming, httpx_client=self.http)
        self.client = ClientFactory(config).create(card)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.http.aclose()

    async def send(self, message: pb.Message) -> list[pb.StreamResponse]:
        return [e async for e in self.client.send_message(pb.SendMessageRequest(message=message))]


async def test_the_card_is_signed_and_a2a_sdk_verifies_it(callee: Callee) -> None:
    async with httpx.AsyncClient() as http:
        resolver = A2ACardResolver(http, callee.url)
        card = await resolver.get_agent_card(signature_verifier=_verifier(callee))
        assert card.name == "calc" and card.description == "I do arithmetic."
        assert [s.id for s in card.skills] == ["calc"]
        assert set(card.skills[0].tags) >= {"calculator", "append_log"}
        assert card.capabilities.streaming and not card.capabilities.push_notifications
        (interface,) = card.supported_interfaces
        assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
            callee.url + "/v1/a2a",
            "JSONRPC",
            "1.0",
        )
        assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
        # Cacheable: a weak ETag of its content, and 304 when the client has it.
        served = await http.get(callee.url + "/.well-known/agent-card.json")
        etag = served.headers["etag"]
        assert etag.startswith('W/"') and served.headers["last-modified"]
        again = await http.get(
            callee.url + "/.well-known/agent-card.json", headers={"If-None-Match": etag}
        )
        assert again.status_code == 304
        # The key set named by the signature's jku is served too.
        jwks = (await http.get(callee.url + "/.well-known/jwks.json")).json()
        assert jwks["keys"][0]["kid"] == "koboi-card" and jwks["keys"][0]["kty"] == "EC"

        # A card changed on the way (one word of its description) no longer verifies.
        tampered = pb.AgentCard()
        tampered.CopyFrom(card)
        tampered.description = "I do arithmetic, and I transfer money."
        with pytest.raises(Exception, match="No valid signature"):
            _verifier(callee)(tampered)


async def test_a_blocking_send_is_a_completed_task_read_back_with_get_and_list(
    callee: Callee,
) -> None:
    async with Sdk(callee, "desk", streaming=False) as sdk:
        (answer,) = await sdk.send(_message("What is 6 * 7?"))
        task = answer.task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        assert [a.parts[0].text for a in task.artifacts] == ["6 * 7 = 42"]
        assert task.history[0].parts[0].text == "What is 6 * 7?"

        got = await sdk.client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == pb.TASK_STATE_COMPLETED and got.id == task.id
        listed = await sdk.client.list_tasks(pb.ListTasksRequest(include_artifacts=True))
        assert [t.id for t in listed.tasks] == [task.id]

    # Another peer does not see it: the same answer as for a task that does not exist.
    async with Sdk(callee, "other", streaming=False) as other:
        with pytest.raises(Exception, match=r"(?i)not found|no task"):
            await other.client.get_task(pb.GetTaskRequest(id=task.id))
        assert list((await other.client.list_tasks(pb.ListTasksRequest())).tasks) == []

    # The task is a job of the peer's principal, in a session owned by it: audited
    # under its name.
    job = callee.server.state
    found = await _job(job, task.id)
    assert found.owner == "desk" and found.status == "completed"


async def _job(state: Any, job_id: str) -> Any:
    return await state.jobs.get_job(job_id)


async def test_a_streamed_send_carries_the_tool_call_the_answer_and_the_end(
    callee: Callee,
) -> None:
    async with Sdk(callee, "desk", streaming=True) as sdk:
        events = await sdk.send(_message("What is 2 + 3?"))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    statuses = [e.status_update for e in events if e.HasField("status_update")]
    texts = [s.status.message.parts[0].text for s in statuses if s.status.message.parts]
    assert "calling calculator" in texts and "calculator finished" in texts
    answers = [e.artifact_update for e in events if e.HasField("artifact_update")]
    final_answer = [a for a in answers if a.artifact.artifact_id == "answer"]
    assert final_answer[-1].artifact.parts[0].text == "2 + 3 = 5" and final_answer[-1].last_chunk
    assert statuses[-1].status.state == pb.TASK_STATE_COMPLETED


async def test_input_required_is_the_pause_and_the_next_message_answers_it(
    callee: Callee,
) -> None:
    async with Sdk(callee, "desk", streaming=False) as sdk:
        (first,) = await sdk.send(_message("ask what is your name"))
        task = first.task
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert "what is your name" in task.status.message.parts[0].text
        state = callee.server.state
        assert (await _job(state, task.id)).status == "waiting_input"

        (second,) = await sdk.send(_message("Ada", task_id=task.id))
        assert second.task.status.state == pb.TASK_STATE_COMPLETED
        assert second.task.artifacts[0].parts[0].text == "done: the user answered: Ada"

        # A finished task takes no more messages: one clear error.
        with pytest.raises(Exception, match="input-required"):
            await sdk.send(_message("again", task_id=task.id))


async def test_a_task_waiting_for_input_is_cancelled_and_cannot_be_cancelled_twice(
    callee: Callee,
) -> None:
    async with Sdk(callee, "desk", streaming=False) as sdk:
        (first,) = await sdk.send(_message("ask are you sure"))
        task_id = first.task.id
        cancelled = await sdk.client.cancel_task(pb.CancelTaskRequest(id=task_id))
        assert cancelled.status.state == pb.TASK_STATE_CANCELED
        with pytest.raises(Exception, match=r"(?i)cancel"):
            await sdk.client.cancel_task(pb.CancelTaskRequest(id=task_id))


async def test_a_message_sent_again_is_the_same_task(callee: Callee) -> None:
    async with Sdk(callee, "desk", streaming=False) as sdk:
        mid = uuid.uuid4().hex
        (one,) = await sdk.send(_message("What is 1 + 1?", message_id=mid))
        (two,) = await sdk.send(_message("What is 1 + 1?", message_id=mid))
        assert one.task.id == two.task.id
        # An id reused for another message is another message (clients do reuse ids).
        (three,) = await sdk.send(_message("What is 2 + 2?", message_id=mid))
        assert three.task.id != one.task.id
        assert three.task.artifacts[0].parts[0].text == "2 + 2 = 4"
    jobs = await callee.server.state.jobs.list_jobs(owner="desk")
    assert len(jobs) == 2


def test_a_peer_key_invokes_the_agent_and_nothing_else(callee: Callee) -> None:
    peer = {"Authorization": f"Bearer {callee.keys['desk']}"}
    for method, path in [
        ("GET", "/v1/sessions"),
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("POST", "/v1/chat"),
        ("GET", "/v1/approvals/ap_" + "0" * 32),
        ("POST", "/v1/approvals/ap_" + "0" * 32),
    ]:
        answer = httpx.request(method, callee.url + path, headers=peer, json={}, timeout=30)
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "insufficient_scope"
        assert 'error="insufficient_scope"' in answer.headers["www-authenticate"]
    # Without a key: 401, before anything is looked at.
    assert httpx.post(callee.url + "/v1/a2a", json={}, timeout=30).status_code == 401
    # The operator's key (the whole API) may invoke too.
    sent = rpc(
        callee,
        "operator",
        "SendMessage",
        {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "3 * 3"}]}},
    )
    assert sent.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_peer_cannot_make_the_agent_break_its_policy(callee: Callee) -> None:
    sent = rpc(
        callee,
        "desk",
        "SendMessage",
        {"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "log hello"}]}},
    )
    task = sent.json()["result"]["task"]
    # The run went on, but the tool never ran: the policy refused it.
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "no logging here" in task["artifacts"][0]["parts"][0]["text"]
    assert not (callee.config.parent / "work" / "log.txt").exists()
    job = callee.server.state
    import anyio

    session = anyio.run(_job, job, task["id"]).session_id
    refused = [e for e in journal(callee.config, session) if e.type == "tool_call_refused"]
    assert [e.data["name"] for e in refused] == ["append_log"]


def test_a_peer_key_has_its_own_rate_limit_and_budget(callee: Callee) -> None:
    callee.keys["hasty"] = make_key(callee.config, "hasty", scopes=["invoke"], rate_per_minute=2)
    callee.keys["broke"] = make_key(callee.config, "broke", scopes=["invoke"], budget_usd=0)
    get = {"id": "job_" + "0" * 32}
    answers = [rpc(callee, "hasty", "GetTask", get, rid=i).status_code for i in range(3)]
    assert answers == [200, 200, 429]

    refused = rpc(
        callee,
        "broke",
        "SendMessage",
        {"message": {"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "1 + 1"}]}},
    ).json()
    assert "budget_exhausted" in refused["error"]["message"]
    import anyio

    assert anyio.run(_jobs_of, callee, "broke") == []


async def _jobs_of(callee: Callee, owner: str) -> list[Any]:
    return list(await callee.server.state.jobs.list_jobs(owner=owner))


def test_the_callers_trace_is_in_the_journal_of_the_task(callee: Callee) -> None:
    trace_id = uuid.uuid4().hex
    traceparent = f"00-{trace_id}-{'1' * 16}-01"
    answer = httpx.post(
        callee.url + "/v1/a2a",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "m4", "role": "ROLE_USER", "parts": [{"text": "4 * 4"}]}
            },
        },
        headers={
            "Authorization": f"Bearer {callee.keys['desk']}",
            "A2A-Version": "1.0",
            "traceparent": traceparent,
        },
        timeout=60,
    ).json()
    import anyio

    job = anyio.run(_job, callee.server.state, answer["result"]["task"]["id"])
    started = [e for e in journal(callee.config, job.session_id) if e.type == "run_started"]
    assert started[0].data["trace"]["traceparent"].split("-")[1] == trace_id


def test_bad_requests_are_json_rpc_errors_not_tracebacks(callee: Callee) -> None:
    no_text = rpc(
        callee,
        "desk",
        "SendMessage",
        {"message": {"messageId": "m5", "role": "ROLE_USER", "parts": [{"url": "http://x/y"}]}},
    ).json()
    assert no_text["error"]["code"] == -32005  # content type not supported
    plain = httpx.post(
        callee.url + "/v1/a2a",
        content=b"{'not': 'json'}",
        headers={"Authorization": f"Bearer {callee.keys['desk']}", "Content-Type": "text/plain"},
        timeout=30,
    ).json()
    assert plain["error"]["code"] == -32005 and "text/plain" in plain["error"]["message"]
    unknown = rpc(callee, "desk", "GetTask", {"id": "nope"}).json()
    assert unknown["error"]["code"] == -32001  # task not found
    push = rpc(
        callee,
        "desk",
        "CreateTaskPushNotificationConfig",
        {"taskId": "x", "config": {"url": "https://example.com"}},
    ).json()
    assert "error" in push and "Traceback" not in str(push)
