"""A human-in-the-loop client for ``koboi serve``: stream a chat, answer approvals at the terminal.

Only httpx is needed. Start a server and make a key first::

    koboi keys create                       # prints the key once
    koboi serve configs/hitl_demo.yaml
    KOBOI_API_KEY=koboi_... python examples/hitl_client.py        # asks "log hello"

It sends the message to ``POST /v1/chat/stream`` and prints what the agent
does as it happens. When a tool call needs approval (a ``pending_approval``
event) it asks you — yes, no, or always — and posts your answer to
``POST /v1/approvals/{id}``; the same stream then goes on. If the connection
drops (or the server restarts) it reconnects to ``GET /v1/sessions/{id}/events``
with ``Last-Event-ID``, so nothing is missed or shown twice: journal events by
their id, streamed text by its offset.

Exit status: 0 when the run completed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx


def read_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], int | None]]:
    """(event, data, id) for each server-sent event; comments (keepalives) are skipped."""
    name, ident = "message", None
    data: list[str] = []
    for line in response.iter_lines():
        if not line:
            if data:
                yield name, json.loads("\n".join(data)), ident
            name, data, ident = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                ident = int(value)


class Session:
    """What the client has shown so far: the last journal event id and the streamed text."""

    def __init__(self, client: httpx.Client, answer: str) -> None:
        self.client = client
        self.answer = answer
        self.session_id: str | None = None
        self.last_id = 0
        self.shown: dict[int, int] = {}  # chars of text shown, by the event that started it
        self.step_started: dict[int, int] = {}  # event id of each step's step_started
        self.asked: set[str] = set()
        self.result: dict[str, Any] | None = None
        self.ended_by: str | None = None  # the terminal event of the last stream

    def handle(self, event: str, data: dict[str, Any], ident: int | None) -> bool:
        """Show one event; True when the stream is over."""
        self.session_id = self.session_id or data.get("session_id")
        if ident is not None:
            if ident <= self.last_id:
                return False  # never happens with this server; kept as a safety net
            self.last_id = ident
        if event == "text_delta":
            start, text = data["offset"], data["text"]
            seen = self.shown.get(data["after_event_id"], 0)
            if start + len(text) > seen:
                print(text[max(0, seen - start) :], end="", flush=True)
                self.shown[data["after_event_id"]] = start + len(text)
        elif event == "step_started":
            self.step_started[data["step"]] = data["event_id"]
        elif event == "step":
            shown = self.shown.get(self.step_started.get(data["step"], -1), 0)
            text = data.get("text") or ""
            if len(text) > shown:
                # Not (all) streamed to us: another replica ran it, or we reconnected.
                print(text[shown:], end="", flush=True)
            if text:
                print()
        elif event == "tool_call":
            print(f"  -> {data['name']}({json.dumps(data['arguments'], ensure_ascii=False)})")
        elif event == "tool_result":
            why = f" [refused by {data['refused_by']}]" if data.get("refused_by") else ""
            print(f"  <- {data['name']}: {data['content'][:200]}{why}")
        elif event == "pending_approval":
            self.approve(data)
        elif event in ("final", "error", "idle"):
            # The terminal event: every stream ends with exactly one.
            self.ended_by = event
            if event == "final":
                self.result = data
                print(f"[{data['outcome']}] {data.get('error') or ''}".rstrip())
            else:
                print(f"[stream {event}: {data.get('message', '')}]", file=sys.stderr)
                if data.get("code") == "unauthorized":
                    raise SystemExit("the API key is not valid any more")
            return True
        return False

    def approve(self, data: dict[str, Any]) -> None:
        approval_id = data["approval_id"]
        if approval_id in self.asked:
            return
        self.asked.add(approval_id)
        arguments = json.dumps(data.get("arguments"), ensure_ascii=False)
        print(f"\n? {data['tool']}({arguments}) needs approval: {data.get('reason', '')}")
        choice = self.answer
        while choice not in ("y", "n", "a"):
            try:
                choice = input("  approve? [y]es / [n]o / [a]lways: ").strip().lower()[:1]
            except EOFError:
                choice = "n"
        decision = {
            "decision": "deny" if choice == "n" else "approve",
            "scope": "always" if choice == "a" else "once",
        }
        answer = self.client.post(f"/v1/approvals/{approval_id}", json=decision)
        if answer.status_code != 200:
            print(f"  (not recorded: {answer.json()['error']['message']})", file=sys.stderr)

    def follow(self, response: httpx.Response) -> bool:
        """Handle a stream until its terminal event; False when it broke off (reconnect)."""
        if response.status_code != 200:
            response.read()
            error = response.json().get("error", {})
            raise SystemExit(f"error {response.status_code}: {error.get('message', error)}")
        self.ended_by = None
        for event, data, ident in read_events(response):
            if self.handle(event, data, ident):
                break
        # "error" (the server is shutting down, its store failed...) means: reconnect.
        return self.ended_by in ("final", "idle")


def main() -> int:
    parser = argparse.ArgumentParser(description="Chat with a koboi server; answer approvals.")
    parser.add_argument(
        "message",
        nargs="?",
        default="log hello",
        help="What to ask the agent (default: 'log hello', which configs/hitl_demo.yaml "
        "answers with a tool call that needs approval).",
    )
    parser.add_argument("--url", default=os.environ.get("KOBOI_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--key", default=os.environ.get("KOBOI_API_KEY"), help="API key.")
    parser.add_argument("--session", help="Continue this session.")
    parser.add_argument(
        "--answer",
        choices=["ask", "y", "n", "a"],
        default="ask",
        help="Answer every approval without asking: y(es), n(o), a(lways).",
    )
    args = parser.parse_args()
    if not args.key:
        raise SystemExit("give --key or set KOBOI_API_KEY (make one: koboi keys create)")
    headers = {"Authorization": f"Bearer {args.key}"}
    timeout = httpx.Timeout(10.0, read=None)  # streams wait for humans and tools
    with httpx.Client(base_url=args.url, headers=headers, timeout=timeout) as client:
        session = Session(client, args.answer)
        body: dict[str, Any] = {"message": args.message}
        if args.session:
            body["session_id"] = args.session
        try:
            with client.stream("POST", "/v1/chat/stream", json=body) as response:
                done = session.follow(response)
        except httpx.TransportError:
            done = False
        delay = 0.5
        while not done:
            if session.session_id is None:
                raise SystemExit("the server went away before the run started")
            print(f"[reconnecting after event {session.last_id}]", file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            try:
                with client.stream(
                    "GET",
                    f"/v1/sessions/{session.session_id}/events",
                    headers={"Last-Event-ID": str(session.last_id)},
                ) as response:
                    done = session.follow(response)
            except httpx.TransportError:
                pass  # the server is not back yet
    outcome = (session.result or {}).get("outcome")
    return 0 if outcome == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
