"""A replica cut off from PostgreSQL by a network fault: its job lease runs out, another
replica takes the job over and finishes it, and when the network comes back the cut-off
replica — alive all along, sure it still holds the job — can write nothing more.

The cut-off replica (A) runs in a network namespace of this test's own, joined to the
root namespace by a veth pair; it reaches PostgreSQL (a private server of the test's, which
listens on 127.0.0.1 only)
through a small TCP relay of the test's, listening on the root end of the veth. "The
network fails" is ``ip link set <root end> down``: A's packets go nowhere, its
connections hang (nothing tells A they are dead), exactly as when a switch or a cable
fails. Replica B runs in the root namespace.

A's job is paused by the demo tool's hook right after its effect (the line is written),
before the journal knows the call finished; the pause ends after the link is back, so A
then tries to journal the result and to renew its leases with its old fences. The
database's own record of who wrote each row (``replica_helpers.install_write_audit``)
must show nothing from A after B took the session over.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

_spec = importlib.util.spec_from_file_location(
    "replica_helpers", Path(__file__).with_name("replica_helpers.py")
)
assert _spec is not None and _spec.loader is not None
rh = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("replica_helpers", rh)
_spec.loader.exec_module(rh)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.postgres]


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Relay:
    """TCP relay: accepts on (host, port), forwards each connection to ``target``; notes when
    bytes last came from the clients."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server((host, 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.client_bytes: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink, from_client in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, from_client), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client:
                    with self.lock:
                        self.client_bytes.append((time.time(), len(chunk)))
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def bytes_since(self, moment: float) -> int:
        with self.lock:
            return sum(n for at, n in self.client_bytes if at >= moment)

    def close(self) -> None:
        self.stopping.set()
        self.server.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        self.thread.join(5)


@contextlib.contextmanager
def namespace_with_veth() -> Iterator[dict[str, str]]:
    """A network namespace joined to the root namespace by a veth pair of its own."""
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("ss")):
        _missing("network namespaces need root and iproute2 (ip, ss)")
    tag = uuid.uuid4().hex[:6]
    net = {
        "ns": f"koboi-{tag}",
        "root_if": f"kbr{tag}",
        "ns_if": f"kbn{tag}",
        # A /30 of its own, so concurrent runs do not collide.
        "subnet": f"10.{random.randrange(200, 250)}.{random.randrange(256)}",
    }
    net["root_ip"], net["ns_ip"] = f"{net['subnet']}.1", f"{net['subnet']}.2"
    made = _ip("netns", "add", net["ns"], check=False)
    if made.returncode != 0:
        _missing(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        _ip("link", "add", net["root_if"], "type", "veth", "peer", "name", net["ns_if"])
        _ip("link", "set", net["ns_if"], "netns", net["ns"])
        _ip("addr", "add", f"{net['root_ip']}/30", "dev", net["root_if"])
        _ip("link", "set", net["root_if"], "up")
        inside = ("netns", "exec", net["ns"], "ip")
        _ip(*inside, "addr", "add", f"{net['ns_ip']}/30", "dev", net["ns_if"])
        _ip(*inside, "link", "set", net["ns_if"], "up")
        _ip(*inside, "link", "set", "lo", "up")
        yield net
    finally:
        _ip("link", "del", net["root_if"], check=False)
        _ip("netns", "del", net["ns"], check=False)


def _unsent(ns: str, peer: str) -> int:
    """Bytes the namespace's TCP connections to ``peer`` have not had acknowledged (or not
    sent yet): 0 once everything they had to say reached the relay."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-tnH", "dst", peer],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(line.split()[2]) for line in out.splitlines() if line.strip())


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_a_replica_cut_off_from_postgres_loses_its_job_and_is_fenced_out_when_it_returns(
    tmp_path: Path,
) -> None:
    pause_seconds = 16.0
    try:
        rh.postgres_programs()
    except AssertionError as exc:
        _missing(str(exc))
    with (
        namespace_with_veth() as net,
        # A server of the test's own (another port, database "postgres"): the relay and
        # A's URL must follow the server every helper uses, not assume the shared one.
        rh.private_postgres() as server,
        rh.use_server(server),
        rh.pg_schema("koboi_partition") as schema,
        contextlib.ExitStack() as stack,
    ):
        rh.require_postgres()
        relay = Relay(net["root_ip"], server.host_port)
        stack.callback(relay.close)
        cluster = rh.Cluster(tmp_path, schema, 0, step_seconds=0.2, lease=2.0, job_lease=2.0)
        stack.callback(cluster.close)
        marker = tmp_path / "paused.marker"
        a = cluster.add(
            env={
                "KOBOI_DEMO_PAUSE_AFTER_EFFECT": "part-1",
                "KOBOI_DEMO_PAUSE_MARKER": str(marker),
                "KOBOI_DEMO_PAUSE_SECONDS": str(pause_seconds),
            },
            prefix=("ip", "netns", "exec", net["ns"]),
            host=net["ns_ip"],
            pg_base=server.via(net["root_ip"], relay.port),
        )
        b = cluster.add()
        a.start(timeout=90)  # alone: it claims the jobs
        client = stack.enter_context(
            httpx.Client(base_url=a.base_url, headers=cluster.headers(), timeout=10)
        )

        # Positive control: A (through the namespace and the relay) runs a job to its end.
        control = client.post("/v1/jobs", json={"input": "log control-1"}).json()
        done = rh.wait_jobs_done(cluster, [control["id"]], 60)[control["id"]]
        assert (done["status"], done["attempts"]) == ("completed", 1), done

        job = client.post("/v1/jobs", json={"input": "log part-1"}).json()
        _wait(marker.exists, 30, "A never ran the job's tool")
        paused_at = time.time()
        _ip("link", "set", net["root_if"], "down")
        cut_at = time.time()
        a.ready = False  # unreachable: the harness's clients go to B only
        print(f"link down {cut_at - paused_at:.2f} s after A paused (line written, not journaled)")
        assert rh.shared_log(tmp_path) == ["control-1", "part-1"]

        b.start(timeout=90)
        done = rh.wait_jobs_done(cluster, [job["id"]], 60)[job["id"]]
        finished_at = time.time()
        assert done["status"] == "completed", done
        print(f"B finished the job {finished_at - cut_at:.1f} s after the cut: {done['result']}")
        _ip("link", "set", net["root_if"], "up")
        up_at = time.time()
        # A's pause ends (before or after the link is back: its writes wait in TCP either
        # way); it journals its call's result and renews its leases with the fences it
        # had. Wait until A has nothing left unsent to the database, well after that.
        _wait(
            lambda: httpx.get(a.base_url + "/readyz", timeout=5).status_code == 200,
            60,
            "A did not come back after the link did",
        )
        a.ready = True
        quiet_since: float | None = None
        deadline = time.monotonic() + 60
        while quiet_since is None or time.time() - quiet_since < 1.5:
            assert time.monotonic() < deadline, "A's connections never drained"
            settled = time.time() > paused_at + pause_seconds + 1.0
            if settled and _unsent(net["ns"], net["root_ip"]) == 0:
                quiet_since = quiet_since or time.time()
            else:
                quiet_since = None
            time.sleep(0.1)
        assert relay.bytes_since(up_at) > 0, (
            "A never talked to the database after the link came back"
        )

        events = rh.read_journal(cluster.url, job["session_id"])
        writes, job_writes = rh.read_writes(schema)
        mine = sorted((w for w in writes if w.session_id == job["session_id"]), key=lambda w: w.seq)
        a_apps = {i.app for i in a.incarnations}
        b_apps = {i.app for i in b.incarnations}
        taken = min(w.seq for w in mine if w.app in b_apps)
        print("journal:", [(e.seq, e.type, w.app) for e, w in zip(events, mine, strict=True)])
        print(
            "job rows:",
            [
                (w.old_status, w.new_status, w.old_fence, w.new_fence, w.app)
                for w in job_writes
                if w.id == job["id"]
            ],
        )

        # Positive control of the audit: it saw both writers, A before and B after.
        assert {w.app for w in mine} == a_apps | b_apps
        # Fenced: nothing from A after B's first write, nor after the cut at all.
        late = [
            (w.seq, w.type, w.app)
            for w in mine
            if w.app in a_apps and (w.seq > taken or w.at > cut_at)
        ]
        assert late == [], f"A wrote after the takeover: {late}"
        assert events[taken - 1].type == "run_resumed"
        assert rh.pid_of(events[taken - 1].data["holder"]) == b.incarnations[0].pid
        late_job = [
            w for w in job_writes if w.id == job["id"] and w.app in a_apps and w.at > cut_at
        ]
        assert late_job == [], f"A updated the job after the cut: {late_job}"
        finisher = [w.app for w in job_writes if w.id == job["id"] and w.new_status == "completed"]
        assert finisher == [b.app]
        # The journal: A's in-doubt call was not run again; B finished the run once.
        report = rh.audit_session(events, Counter(rh.shared_log(tmp_path)))
        assert report.problems == [], report.problems
        assert [report.lines[c] for c in report.interrupted] == ["part-1"]
        assert report.run_finished == 1 and report.outcome == "completed"
        assert rh.shared_log(tmp_path).count("part-1") == 1
        # A is alive and serving: it lost the job, not its mind.
        assert a.alive and b.alive, a.log()
