"""A minimal MCP server on the standard library alone, for sandboxes without koboi's Python.

The restricted sandbox keeps koboi's virtualenv (and so the MCP SDK) out of a
confined process's reach: this test server runs on the system's python3 with
nothing installed. It answers the 2025-06-18 handshake (and refuses
``server/discover``, so clients fall back to it), and offers two tools:
``probe_network`` (can this process open a TCP connection?) and ``environment``
(is a variable set?).
"""

import json
import os
import socket
import sys

TOOLS = [
    {
        "name": "probe_network",
        "description": "Try to connect to 127.0.0.1:port.",
        "inputSchema": {
            "type": "object",
            "properties": {"port": {"type": "integer"}},
            "required": ["port"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "environment",
        "description": "Whether a variable is set (never its value).",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
        "annotations": {"readOnlyHint": True},
    },
]


def probe(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return "connected"
    except OSError as exc:
        return f"refused: {exc.__class__.__name__}: {exc}"


def answer(message):
    method = message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "plain", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        arguments = params.get("arguments") or {}
        if params.get("name") == "probe_network":
            text = probe(int(arguments.get("port", 0)))
        elif params.get("name") == "environment":
            text = "set" if arguments.get("name") in os.environ else "not set"
        else:
            raise LookupError("unknown tool")
        return {"content": [{"type": "text", "text": text}], "isError": False}
    raise LookupError(f"method not found: {method}")


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        try:
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
        except LookupError as exc:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": str(exc)},
            }
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
