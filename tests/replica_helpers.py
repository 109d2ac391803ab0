"""Helpers of the multi-replica and database-fault trials: real ``koboi serve`` replicas on one
PostgreSQL schema, a load of chats and jobs, SSE followers that hop between replicas, and
audits of what the journal, the jobs table and the shared log file say afterwards.

Shared by ``tests/test_replica_chaos.py``, ``tests/test_partition_fencing.py``,
``tests/test_store_faults.py`` and ``benchmarks/server/bench_chaos.py`` (each loads this
file by path, like ``crash_helpers.py``).

Who wrote what: every replica process connects with its own libpq
``application_name`` (``r1.0`` is replica 1's first process, ``r1.1`` the same replica
after its first restart), and :func:`install_write_audit` adds triggers to the test's
private schema that note, for every journal row inserted and every job row updated, the
``application_name`` of the connection that did it and the database's clock. So a trial
can say not only that the journal looks right but *which process* wrote each event —
which is how "nothing was written by the old holder after the takeover" is checked.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
LOG_NAME = "crash_demo.log"

#: The served agent: no approvals (yolo), ``log X`` calls the non-idempotent ``append_log``
#: (one fsynced line per call), arithmetic calls ``calculator``. No ``store.url``: each
#: replica process gets its store URL from ``KOBOI_STORE`` (with its own application_name).
AGENT = """
agent: {{name: chaos, mode: yolo, lease_seconds: {lease}}}
llm:
  provider: scripted
  rules:
    - match: 'log (?P<line>[\\w-]+)'
      tool: append_log
      arguments: {{line: "{{line}}"}}
      reply: "logged: {{result}}"
    - match: '(?P<expr>\\d+ [*+] \\d+)'
      tool: calculator
      arguments: {{expression: "{{expr}}"}}
      reply: "{{expr}} = {{result}}"
  fallback: "Nothing to do."
tools: {{builtin: [append_log, calculator]}}
sandbox: {{backend: passthrough, workdir: work}}
server:
  access_log: false
  poll_seconds: 0.1
  recovery_interval_seconds: 0.5
  job_lease_seconds: {job_lease}
  job_poll_seconds: 0.1
  keepalive_seconds: 1
  drain_seconds: 1
"""

#: The SSE event each journal event type becomes (docs/server.md, "Streaming").
SSE_NAME = {
    "run_started": "run_started",
    "run_resumed": "run_resumed",
    "model_call_started": "step_started",
    "model_call_finished": "step",
    "model_call_failed": "step_failed",
    "tool_call_started": "tool_call",
    "tool_call_finished": "tool_result",
    "tool_call_refused": "tool_result",
    "tool_call_interrupted": "tool_result",
    "approval_requested": "pending_approval",
    "approval_decided": "approval_decided",
    "provider_event": "provider_event",
    "budget_exceeded": "budget_exceeded",
    "tool_call_suspended": "tool_suspended",
    "context_added": "context_added",
    "answer_replaced": "answer_replaced",
    "run_continued": "run_continued",
    "side_call_started": "side_call_started",
    "side_call_finished": "side_call_finished",
    "side_call_failed": "side_call_failed",
    "tools_changed": "tools_changed",
    "run_finished": "final",
}


def sse_name(event_type: str) -> str:
    """The SSE event a journal event becomes: :data:`SSE_NAME`, ``plugin_event`` for a
    plugin's event (``"<plugin>.<name>"``), else ``journal`` (an event of a newer kernel)."""
    from koboi.journal import is_plugin_event

    if event_type in SSE_NAME:
        return SSE_NAME[event_type]
    return "plugin_event" if is_plugin_event(event_type) else "journal"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without koboi settings of the caller's shell, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOBOI_")}
    env["KOBOI_STRICT_PLUGINS"] = "1"
    env["KOBOI_DEMO_STEP_SECONDS"] = "0"
    env.update(extra)
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# -- PostgreSQL ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL server the helpers talk to: the shared test server, or a private one."""

    url: str
    #: ``pg_ctl`` arguments that stop and start it (private servers only).
    control: tuple[str, ...] = ()
    #: The user ``pg_ctl`` runs as.
    user: str = "postgres"

    @property
    def conninfo(self) -> str:
        return self.url.replace("postgresql+psycopg://", "postgresql://", 1)

    @property
    def address(self) -> str:
        """``host:port``, as an error message names the server."""
        return self.url.split("@", 1)[1].split("/", 1)[0]

    @property
    def host_port(self) -> tuple[str, int]:
        """Where the server listens (a relay in front of it forwards there)."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    def via(self, host: str, port: int) -> str:
        """This server's URL (same user, password, database) reached at ``host:port``."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@{host}:{port}" if credentials else f"{host}:{port}"
        return parts._replace(netloc=netloc).geturl()


#: The shared test server (``KOBOI_TEST_POSTGRES_URL``); other tests use it at the same time.
SHARED = PostgresServer(POSTGRES_URL)
_current = [SHARED]


def current_server() -> PostgresServer:
    """The server the helpers use now: :data:`SHARED`, or the one :func:`use_server` names."""
    return _current[-1]


@contextlib.contextmanager
def use_server(server: PostgresServer) -> Iterator[PostgresServer]:
    """Point every helper (connections, schemas, store URLs, replicas) at ``server``."""
    _current.append(server)
    try:
        yield server
    finally:
        _current.pop()


def pg_connect(**kwargs: Any) -> Any:
    import psycopg

    return psycopg.connect(current_server().conninfo, autocommit=True, connect_timeout=5, **kwargs)


def require_postgres() -> None:
    """Fail (not skip) when the test server is unreachable: the trial cannot say anything."""
    import psycopg

    try:
        with pg_connect():
            pass
    except psycopg.OperationalError as exc:
        raise AssertionError(
            f"PostgreSQL is not reachable at {current_server().url} ({exc}); start it, set "
            'KOBOI_TEST_POSTGRES_URL, or deselect these tests with -m "not postgres"'
        ) from None


@contextlib.contextmanager
def pg_schema(prefix: str = "koboi_chaos") -> Iterator[str]:
    """A private schema (and its ``_audit`` sibling) on the test server; both dropped after."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with pg_connect() as db:
        db.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        # The server may have been restarted by the test: a fresh connection, retried.
        deadline = time.monotonic() + 30
        while True:
            try:
                with pg_connect() as db:
                    db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                    db.execute(f'DROP SCHEMA IF EXISTS "{schema}_audit" CASCADE')
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def postgres_programs() -> Path:
    """The newest installed PostgreSQL's program directory (Debian's layout)."""
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if os.geteuid() != 0 or not versions:
        raise AssertionError(
            "a private PostgreSQL server needs root and PostgreSQL's programs "
            "(/usr/lib/postgresql/VERSION/bin/initdb)"
        )
    return versions[-1]


@contextlib.contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, on a free loopback port, removed after.

    For the trials that stop and start PostgreSQL: stopping the shared server would
    pull it from under every other test that runs at the same time (the suite runs
    two pytest processes side by side). ``initdb`` runs as ``postgres`` (it refuses
    root) in a directory of its own; ``fsync=off`` because nothing here outlives it.
    """
    binaries = postgres_programs()
    home = Path(tempfile.mkdtemp(prefix="koboi-pg-"))
    try:
        shutil.chown(home, "postgres", "postgres")
        data, sockets = home / "data", home / "sockets"
        port = free_port()

        def as_postgres(*argv: str) -> None:
            done = subprocess.run(
                argv, user="postgres", group="postgres", capture_output=True, text=True, cwd=home
            )
            if done.returncode != 0:
                raise AssertionError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")

        as_postgres(
            str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
            "--auth=trust", "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        as_postgres("mkdir", str(sockets))
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        control = (str(binaries / "pg_ctl"), "-D", str(data), "-l", str(home / "log"))
        server = PostgresServer(
            f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
            control=(*control, "-o", options, "-w", "-t", "60"),
        )
        as_postgres(*server.control, "start")
        try:
            yield server
        finally:
            as_postgres(*server.control, "-m", "immediate", "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _control(server: PostgresServer, *action: str) -> None:
    if not server.control:
        raise AssertionError(
            "only a private server (private_postgres) is stopped and started by a test: "
            "the shared one serves other tests at the same time"
        )
    subprocess.run(
        [*server.control, *action],
        user=server.user,
        group=server.user,
        check=True,
        capture_output=True,
    )


def postgres_accepts(timeout: float = 60) -> None:
    """Wait until the server accepts connections again."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with pg_connect():
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stop_postgres() -> float:
    """Stop the current (private) server, fast: open connections are cut at once; return
    when it stopped."""
    _control(current_server(), "-m", "fast", "stop")
    return time.time()


def start_postgres() -> float:
    _control(current_server(), "start")
    postgres_accepts()
    return time.time()


@contextlib.contextmanager
def postgres_left_running() -> Iterator[None]:
    """Whatever the test does to the server, it is running again afterwards."""
    try:
        yield
    finally:
        try:
            with pg_connect():
                pass
        except Exception:
            start_postgres()


def store_url(
    schema: str, application_name: str | None = None, *, base: str | None = None, **query: str
) -> str:
    """The store URL of ``schema`` (optionally on another host/port given by ``base``; by
    default the current server's)."""
    parts = [f"options={quote(f'-csearch_path={schema}')}"]
    if application_name:
        parts.append(f"application_name={quote(application_name)}")
    parts += [f"{k}={quote(str(v))}" for k, v in query.items()]
    return f"{base or current_server().url}?{'&'.join(parts)}"


def migrate(url: str) -> None:
    """Open the store once (which creates its tables), then close it."""
    import anyio

    from koboi_store_sql.plugin import create_store

    async def open_close() -> None:
        async with create_store(url, ROOT):
            pass

    anyio.run(open_close)


def install_write_audit(schema: str) -> None:
    """Note who (application_name) inserted each journal event and updated each job, and when.

    The notes go to ``<schema>_audit`` (not the store's own schema, whose tables belong
    to the store's migrations). Call after the store's tables exist (:func:`migrate`).
    """
    audit = f'"{schema}_audit"'
    with pg_connect() as db:
        db.execute(f"CREATE SCHEMA {audit}")
        db.execute(
            f"CREATE TABLE {audit}.event_writes (session_id text, seq bigint, type text, "
            "app text, at double precision)"
        )
        db.execute(
            f"CREATE TABLE {audit}.job_writes (id text, old_status text, new_status text, "
            "old_holder text, new_holder text, old_fence bigint, new_fence bigint, "
            "app text, at double precision)"
        )
        db.execute(
            f"""CREATE FUNCTION {audit}.note_event() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              INSERT INTO {audit}.event_writes VALUES (NEW.session_id, NEW.seq, NEW.type,
                current_setting('application_name'), extract(epoch from clock_timestamp()));
              RETURN NEW;
            END $$"""
        )
        db.execute(
            f"""CREATE FUNCTION {audit}.note_job() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              INSERT INTO {audit}.job_writes VALUES (NEW.id, OLD.status, NEW.status,
                OLD.holder, NEW.holder, OLD.fence, NEW.fence,
                current_setting('application_name'), extract(epoch from clock_timestamp()));
              RETURN NEW;
            END $$"""
        )
        db.execute(
            f'CREATE TRIGGER koboi_test_note_event AFTER INSERT ON "{schema}".events '
            f"FOR EACH ROW EXECUTE FUNCTION {audit}.note_event()"
        )
        db.execute(
            f'CREATE TRIGGER koboi_test_note_job AFTER UPDATE ON "{schema}".jobs '
            f"FOR EACH ROW EXECUTE FUNCTION {audit}.note_job()"
        )


@dataclass(frozen=True)
class EventWrite:
    session_id: str
    seq: int
    type: str
    app: str
    at: float


@dataclass(frozen=True)
class JobWrite:
    id: str
    old_status: str
    new_status: str
    old_holder: str | None
    new_holder: str | None
    old_fence: int
    new_fence: int
    app: str
    at: float


def read_writes(schema: str) -> tuple[list[EventWrite], list[JobWrite]]:
    audit = f'"{schema}_audit"'
    with pg_connect() as db:
        events = [
            EventWrite(*row)
            for row in db.execute(
                f"SELECT session_id, seq, type, app, at FROM {audit}.event_writes ORDER BY at"
            )
        ]
        jobs = [
            JobWrite(*row) for row in db.execute(f"SELECT * FROM {audit}.job_writes ORDER BY at")
        ]
    return events, jobs


def sql(schema: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of a query on the store's own tables (search_path = the schema)."""
    with pg_connect() as db:
        db.execute(f'SET search_path = "{schema}"')
        return list(db.execute(query, args or None))


def pid_of(holder: str | None) -> int | None:
    """The pid in a ``host:pid:tag`` holder."""
    if not holder:
        return None
    parts = holder.split(":")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


# -- replicas -----------------------------------------------------------------------------


@dataclass
class Incarnation:
    """One process of a replica: its application_name, pid and life span (time.time())."""

    app: str
    pid: int
    started_at: float
    killed_at: float | None = None


@dataclass
class Replica:
    """One ``koboi serve`` replica; :meth:`kill` then :meth:`start` makes a new incarnation."""

    name: str
    config: Path
    schema: str
    env: dict[str, str]
    host: str = "127.0.0.1"
    port: int = 0
    #: Prepended to the command (``ip netns exec NS``).
    prefix: Sequence[str] = ()
    #: The store URL's ``base`` (host and port of PostgreSQL as this replica reaches it;
    #: by default the current server's).
    pg_base: str | None = None
    #: Extra store URL options (``busy_timeout``, ``connect_timeout``...).
    store_options: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    incarnations: list[Incarnation] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)
    #: The current process answered /readyz (clients only go to ready replicas).
    ready: bool = False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def app(self) -> str:
        """The application_name of the current (or last) process."""
        return self.incarnations[-1].app if self.incarnations else f"{self.name}.-"

    @property
    def alive(self) -> bool:
        """The current process runs and has answered /readyz."""
        return self.ready and self.proc is not None and self.proc.poll() is None

    def start(self, *, wait: bool = True, timeout: float = 60) -> Replica:
        if not self.port:
            self.port = free_port()
        app = f"{self.name}.{len(self.incarnations)}"
        self.ready = False
        url = store_url(self.schema, app, base=self.pg_base, **self.store_options)
        env = {**self.env, "KOBOI_STORE": url}
        log_path = self.config.parent / f"serve-{app}.log"
        self.log_paths.append(log_path)
        command = [*self.prefix, sys.executable, "-m", "koboi_cli", "serve", str(self.config)]
        command += ["--host", self.host, "--port", str(self.port)]
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.config.parent,
            )
        self.incarnations.append(Incarnation(app, self.proc.pid, time.time()))
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.app} exited at start:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=5).status_code == 200:
                    self.ready = True
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.app} did not become ready:\n{self.log()}")
            time.sleep(0.05)

    def kill(self) -> float:
        """SIGKILL the current process; return the time of the kill."""
        assert self.proc is not None
        at = time.time()
        self.ready = False
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.incarnations[-1].killed_at = at
        return at

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log(self, every: bool = False, tail: int | None = 6000) -> str:
        """The log of the current process (``every``: of all), each cut to its last ``tail``."""
        paths = self.log_paths if every else self.log_paths[-1:]
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-(tail or 0) :]}"
            for p in paths
            if p.exists()
        )


def write_agent(
    directory: Path,
    *,
    lease: float = 2.0,
    job_lease: float = 2.0,
    server: Mapping[str, Any] | None = None,
) -> Path:
    """The served agent's config (``server``: more keys of its ``server`` section)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "chaos.yaml"
    text = AGENT.format(lease=lease, job_lease=job_lease)
    text += "".join(f"  {key}: {json.dumps(value)}\n" for key, value in (server or {}).items())
    config.write_text(textwrap.dedent(text), encoding="utf-8")
    return config


def make_key(url: str, principal: str = "chaos") -> str:
    import anyio

    from koboi_server import KeyRing
    from koboi_store_sql.plugin import create_store

    async def create() -> str:
        async with create_store(url, ROOT) as store:
            _, token = await KeyRing(store).create(principal)
            return token

    return anyio.run(create)


def shared_log(directory: Path) -> list[str]:
    path = directory / "work" / LOG_NAME
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class Cluster:
    """Replicas of one agent sharing one PostgreSQL schema, and who is alive."""

    def __init__(
        self, directory: Path, schema: str, count: int, *, step_seconds: float = 0.4, **agent: Any
    ) -> None:
        self.directory = directory
        self.schema = schema
        self.config = write_agent(directory, **agent)
        self.url = store_url(schema, "harness")
        migrate(self.url)
        install_write_audit(schema)
        self.key = make_key(self.url)
        self.env = clean_env(KOBOI_DEMO_STEP_SECONDS=str(step_seconds))
        self.replicas: list[Replica] = []
        self.lock = threading.Lock()
        for _ in range(count):
            self.add()

    def add(self, *, env: Mapping[str, str] | None = None, **options: Any) -> Replica:
        """A new replica of the cluster (not started); ``options`` are :class:`Replica`'s."""
        replica = Replica(
            f"r{len(self.replicas) + 1}",
            self.config,
            self.schema,
            {**self.env, **(env or {})},
            **options,
        )
        self.replicas.append(replica)
        return replica

    def start(self) -> Cluster:
        for replica in self.replicas:
            replica.start(wait=False)
        for replica in self.replicas:
            replica.wait_ready()
        return self

    def alive(self) -> list[Replica]:
        with self.lock:
            return [r for r in self.replicas if r.alive]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def incarnations(self) -> list[Incarnation]:
        return [i for r in self.replicas for i in r.incarnations]

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop(signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(r.log(every=True) for r in self.replicas)


# -- SSE -----------------------------------------------------------------------------------


@dataclass
class SSE:
    event: str
    data: dict[str, Any]
    id: int | None


def read_sse(response: httpx.Response) -> Iterator[SSE]:
    """The events of an SSE response as they arrive (comments skipped)."""
    name, data, ident = "message", [], None
    for line in response.iter_lines():
        if line == "":
            if data:
                yield SSE(name, json.loads("\n".join(data)), ident)
            name, data, ident = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = int(value)


@dataclass
class Follower:
    """Follows one job's events to its ``final``, reconnecting (with ``Last-Event-ID``) to
    another live replica whenever its stream breaks."""

    cluster: Cluster
    job_id: str
    deadline: float
    rng: random.Random
    received: list[SSE] = field(default_factory=list)
    #: (replica app, cursor sent) of every connection made.
    connections: list[tuple[str, int]] = field(default_factory=list)
    #: Streams cut by a dead replica (then resumed elsewhere).
    broken: int = 0
    #: Streams that ended with ``idle`` or ``error`` before the final (then resumed).
    idles: int = 0
    errors: list[str] = field(default_factory=list)
    done: bool = False
    #: The replica (name) whose stream is open now; None between connections.
    streaming_on: str | None = None

    @property
    def cursor(self) -> int:
        ids = [e.id for e in self.received if e.id is not None]
        return ids[-1] if ids else 0

    @property
    def hops(self) -> int:
        """Reconnections that went to another replica than the previous connection."""
        names = [app.split(".")[0] for app, _ in self.connections]
        return sum(1 for a, b in itertools.pairwise(names) if a != b)

    def run(self) -> None:
        last: str | None = None
        while not self.done and time.time() < self.deadline:
            alive = self.cluster.alive()
            others = [r for r in alive if r.name != last] or alive
            if not others:
                time.sleep(0.1)
                continue
            replica = self.rng.choice(others)
            cursor = self.cursor
            headers = self.cluster.headers()
            if cursor:
                headers["Last-Event-ID"] = str(cursor)
            self.connections.append((replica.app, cursor))
            try:
                with httpx.stream(
                    "GET",
                    f"{replica.base_url}/v1/jobs/{self.job_id}/events",
                    headers=headers,
                    timeout=httpx.Timeout(10, read=15),
                ) as response:
                    if response.status_code != 200:
                        self.errors.append(f"{replica.app}: HTTP {response.status_code}")
                        time.sleep(0.2)
                        continue
                    self.streaming_on = replica.name
                    for item in read_sse(response):
                        if item.event in ("idle", "error"):
                            self.idles += 1
                            break
                        self.received.append(item)
                        if item.event == "final":
                            self.done = True
                            return
            except (httpx.TransportError, httpx.StreamError):
                self.broken += 1
                last = replica.name
                continue
            finally:
                self.streaming_on = None
            last = replica.name
            time.sleep(0.1)


def stream_problems(follower: Follower, journal: Sequence[Any]) -> list[str]:
    """What the follower got that the journal does not back: holes, repeats, other events."""
    problems: list[str] = []
    with_ids = [e for e in follower.received if e.id is not None]
    ids = [e.id for e in with_ids]
    repeats = [i for i, n in Counter(ids).items() if n > 1]
    if repeats:
        problems.append(f"events sent twice: {sorted(repeats)}")
    expected = list(range(1, len(journal) + 1))
    missing = sorted(set(expected) - set(ids))
    if missing:
        problems.append(f"events missed: {missing}")
    if ids != sorted(ids):
        problems.append(f"events out of order: {ids}")
    by_seq = {e.seq: e for e in journal}
    for got in with_ids:
        event = by_seq.get(got.id or -1)
        if event is None:
            problems.append(f"event {got.id} is not in the journal")
            continue
        want = sse_name(event.type)
        data = got.data
        if got.event != want:
            problems.append(f"event {got.id}: {got.event!r} for journal {event.type!r}")
        if data.get("event_id") != event.seq or data.get("session_id") != event.session_id:
            problems.append(f"event {got.id}: ids {data.get('event_id')}/{data.get('session_id')}")
        if data.get("at") != event.at:
            problems.append(f"event {got.id}: at {data.get('at')} != journal {event.at}")
        for key in ("step", "call_id", "name"):
            if key in event.data and data.get(key) != event.data[key]:
                problems.append(f"event {got.id}: {key} {data.get(key)!r} != {event.data[key]!r}")
        if event.type == "run_finished" and data.get("output") != event.data.get("output"):
            problems.append(f"event {got.id}: output differs from the journal's")
    if not follower.done:
        problems.append("never received the final event")
    return problems


# -- load ----------------------------------------------------------------------------------


def post_until_answered(
    cluster: Cluster,
    path: str,
    body: Mapping[str, Any],
    *,
    key: str,
    deadline: float,
    rng: random.Random,
    ok: tuple[int, ...] = (200, 202),
) -> tuple[httpx.Response | None, int, list[str]]:
    """POST with one Idempotency-Key to live replicas until one answers ``ok``.

    Returns the answer (None at the deadline), the number of attempts and what the
    failed attempts got.
    """
    attempts = 0
    notes: list[str] = []
    while time.time() < deadline:
        alive = cluster.alive()
        if not alive:
            time.sleep(0.1)
            continue
        replica = rng.choice(alive)
        attempts += 1
        headers = {**cluster.headers(), "Idempotency-Key": key}
        try:
            answer = httpx.post(
                replica.base_url + path, json=dict(body), headers=headers, timeout=60
            )
        except httpx.TransportError as exc:
            notes.append(f"{replica.app}: {type(exc).__name__}")
            time.sleep(0.1)
            continue
        if answer.status_code in ok:
            return answer, attempts, notes
        code = _error_code(answer)
        notes.append(f"{replica.app}: {answer.status_code} {code}")
        if answer.status_code in (409, 429, 503):
            # in progress / interrupted and being resumed / busy / draining: ask again soon.
            time.sleep(min(float(answer.headers.get("retry-after") or 0.3), 0.5))
            continue
        return answer, attempts, notes
    return None, attempts, notes


def _error_code(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["code"])
    except Exception:
        return answer.text[:80]


@dataclass
class Load:
    """A steady load on a cluster: jobs (``log job-N``, each followed over SSE) and chats
    (``log chat-N`` and arithmetic), each request retried with its Idempotency-Key until
    a live replica answers it."""

    cluster: Cluster
    rng: random.Random
    jobs_per_second: float = 2.0
    chats_per_second: float = 2.0
    #: At most this many jobs; None: until stopped.
    max_jobs: int | None = None
    #: Prefix of the lines (lines must be unique over the cluster's life).
    tag: str = "a"
    answer_seconds: float = 90.0
    jobs: dict[str, str] = field(default_factory=dict)  # job id -> its line
    job_failures: list[str] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)
    chats: list[dict[str, Any]] = field(default_factory=list)
    chat_failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Load:
        self._spawn(self._submit_jobs)
        self._spawn(self._send_chats)
        return self

    def _spawn(self, target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        with self.lock:
            self.threads.append(thread)
        return thread

    def _submit_jobs(self) -> None:
        n = 0
        while not self.stop.is_set() and (self.max_jobs is None or n < self.max_jobs):
            n += 1
            line = f"{self.tag}-job-{n}"
            answer, _, notes = post_until_answered(
                self.cluster,
                "/v1/jobs",
                {"input": f"log {line}"},
                key=f"{line}-{uuid.uuid4().hex[:6]}",
                deadline=time.time() + self.answer_seconds,
                rng=self.rng,
                ok=(202,),
            )
            if answer is None or answer.status_code != 202:
                self.job_failures.append(f"{line}: {answer and answer.status_code} {notes}")
            else:
                job_id = answer.json()["id"]
                follower = Follower(
                    self.cluster,
                    job_id,
                    deadline=time.time() + self.answer_seconds + 60,
                    rng=random.Random(self.rng.random()),
                )
                with self.lock:
                    self.jobs[job_id] = line
                    self.followers.append(follower)
                self._spawn(follower.run)
            self.stop.wait(self.rng.expovariate(self.jobs_per_second))

    def _send_chats(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            self._spawn(self._chat, n)
            self.stop.wait(self.rng.expovariate(self.chats_per_second))

    def _chat(self, n: int) -> None:
        logs = n % 2 == 1
        message = f"log {self.tag}-chat-{n}" if logs else f"What is {n} * 7?"
        started = time.time()
        answer, attempts, notes = post_until_answered(
            self.cluster,
            "/v1/chat",
            {"message": message},
            key=f"{self.tag}-chat-{n}-{uuid.uuid4().hex[:6]}",
            deadline=started + self.answer_seconds,
            rng=random.Random(self.rng.random()),
            ok=(200,),
        )
        if answer is None or answer.status_code != 200:
            self.chat_failures.append(
                f"{self.tag}-chat-{n}: {answer and answer.status_code} {notes}"
            )
            return
        body = answer.json()
        record = {
            "n": n,
            "line": f"{self.tag}-chat-{n}" if logs else None,
            "expected": None if logs else f"{n} * 7 = {n * 7}",
            "session_id": body.get("session_id"),
            "output": body.get("output"),
            "outcome": body.get("outcome"),
            "attempts": attempts,
            "replayed": answer.headers.get("idempotent-replayed") == "true",
            # A request that reached a replica which then died before answering.
            "cut": any("ConnectError" not in note and "Error" in note for note in notes),
            "notes": notes,
            "seconds": time.time() - started,
        }
        with self.lock:
            self.chats.append(record)

    def finish(self, timeout: float) -> None:
        """Stop making new requests; wait for every request and follower to be done."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                threads = list(self.threads)
            pending = [t for t in threads if t.is_alive()]
            if not pending or time.monotonic() > deadline:
                return
            pending[0].join(0.5)


# -- chaos -----------------------------------------------------------------------------------


def replica_mid_job(
    cluster: Cluster,
    *,
    mid_tool: bool,
    rng: random.Random | None = None,
    streamed: Callable[[Replica], bool] | None = None,
) -> tuple[Replica, str] | None:
    """A live replica that holds a running job now (with its last event a ``tool_call_started``
    when ``mid_tool``; with ``streamed``, one that also serves an open SSE stream), and that
    job's id."""
    rows = sql(
        cluster.schema,
        "SELECT j.id, j.holder, (SELECT e.type FROM events e WHERE e.session_id = j.session_id "
        "ORDER BY e.seq DESC LIMIT 1) FROM jobs j WHERE j.status = 'running' "
        "AND j.lease_expires_at > %s",
        time.time(),
    )
    by_pid = {r.proc.pid: r for r in cluster.alive() if r.proc is not None}
    candidates = [
        (by_pid[pid], job_id)
        for job_id, holder, last in rows
        if (pid := pid_of(holder)) in by_pid
        and (not mid_tool or last == "tool_call_started")
        and (streamed is None or streamed(by_pid[pid]))
    ]
    return (rng or random).choice(candidates) if candidates else None


@dataclass
class Kill:
    replica: str
    app: str
    at: float
    job_id: str | None
    mid_tool: bool
    #: SSE streams open on the replica when it was killed.
    streams_cut: int = 0


def chaos(
    cluster: Cluster,
    rng: random.Random,
    *,
    kills: int,
    down_seconds: tuple[float, float] = (0.5, 2.0),
    between_seconds: tuple[float, float] = (1.0, 3.0),
    keep_alive: int = 1,
    give_up_seconds: float = 120.0,
    report: Callable[[str], None] = lambda _: None,
    followers: Callable[[], Sequence[Follower]] = lambda: (),
) -> list[Kill]:
    """SIGKILL replicas mid-job ``kills`` times, each restarted after a while; never fewer
    than ``keep_alive`` alive. Gives up (returning fewer kills) after ``give_up_seconds``.

    A victim that serves an open SSE stream of ``followers`` is preferred (for up to
    5 s per kill), so the kills also cut streams that must resume elsewhere; each
    :class:`Kill` says how many it cut."""

    def streamed(replica: Replica) -> bool:
        return any(f.streaming_on == replica.name for f in followers())

    done: list[Kill] = []
    restarts: list[threading.Thread] = []
    give_up = time.monotonic() + give_up_seconds
    while len(done) < kills and time.monotonic() < give_up:
        time.sleep(rng.uniform(*between_seconds))
        if len(cluster.alive()) <= keep_alive:
            continue
        mid_tool = rng.random() < 0.7
        found = None
        deadline = time.monotonic() + 5
        while found is None and time.monotonic() < deadline:
            found = replica_mid_job(cluster, mid_tool=mid_tool, rng=rng, streamed=streamed)
            if found is None:
                time.sleep(0.02)
        deadline = time.monotonic() + 10
        while found is None and time.monotonic() < deadline:
            found = replica_mid_job(cluster, mid_tool=mid_tool, rng=rng)
            if found is None:
                time.sleep(0.02)
        if found is None:
            mid_tool = False
            found = replica_mid_job(cluster, mid_tool=False, rng=rng)
        if found is None:
            report("no replica holds a running job: waiting")
            continue
        replica, job_id = found
        with cluster.lock:
            if not replica.alive:
                continue
            app = replica.incarnations[-1].app
            cut = sum(1 for f in followers() if f.streaming_on == replica.name)
            at = replica.kill()
        done.append(Kill(replica.name, app, at, job_id, mid_tool, cut))
        report(
            f"kill {len(done)}: SIGKILL {app} holding {job_id} (mid tool: {mid_tool}; "
            f"{cut} open stream(s))"
        )

        def restart(r: Replica = replica) -> None:
            time.sleep(rng.uniform(*down_seconds))
            with cluster.lock:
                r.start(wait=False)
            try:
                r.wait_ready(timeout=180)
            except AssertionError as exc:  # reported; the trial goes on with the others
                report(f"restart of {r.app} failed: {exc}")

        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        restarts.append(thread)
        if len(cluster.alive()) <= keep_alive:
            thread.join()
    for thread in restarts:
        thread.join(90)
    return done


# -- audits ------------------------------------------------------------------------------------


def read_journal(url: str, session_id: str) -> list[Any]:
    import anyio

    from koboi_store_sql.plugin import create_store

    async def read() -> list[Any]:
        async with create_store(url, ROOT) as store:
            return list(await store.read(session_id))

    return anyio.run(read)


def read_journals(url: str, session_ids: Sequence[str]) -> dict[str, list[Any]]:
    import anyio

    from koboi_store_sql.plugin import create_store

    async def read() -> dict[str, list[Any]]:
        async with create_store(url, ROOT) as store:
            return {sid: list(await store.read(sid)) for sid in session_ids}

    return anyio.run(read)


def wait_jobs_done(cluster: Cluster, job_ids: Sequence[str], timeout: float) -> dict[str, Any]:
    """Poll live replicas until every job is terminal (or the timeout); the jobs as last seen."""
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    pending = list(job_ids)
    while pending and time.monotonic() < deadline:
        alive = cluster.alive()
        if not alive:
            time.sleep(0.2)
            continue
        replica = random.choice(alive)
        still = []
        for job_id in pending:
            try:
                job = httpx.get(
                    f"{replica.base_url}/v1/jobs/{job_id}", headers=cluster.headers(), timeout=10
                ).json()
            except (httpx.TransportError, ValueError):
                still.append(job_id)
                continue
            seen[job_id] = job
            if job.get("status") not in ("completed", "failed", "cancelled"):
                still.append(job_id)
        pending = still
        if pending:
            time.sleep(0.3)
    return seen


@dataclass
class SessionAudit:
    """What one session's journal and the shared log say about its non-idempotent calls."""

    session_id: str
    lines: dict[str, str]  # call id -> its line
    started: Counter[str]
    finished: list[str]
    interrupted: list[str]
    run_finished: int
    outcome: str | None
    problems: list[str]


def audit_session(events: Sequence[Any], counts: Counter[str]) -> SessionAudit:
    lines: dict[str, str] = {}
    started: Counter[str] = Counter()
    finished: list[str] = []
    interrupted: list[str] = []
    run_finished = 0
    outcome = None
    problems: list[str] = []
    sid = events[0].session_id if events else "?"
    if [e.seq for e in events] != list(range(1, len(events) + 1)):
        problems.append(f"{sid}: seqs are not 1..{len(events)}")
    for event in events:
        data = event.data
        if event.type == "tool_call_started" and data.get("name") == "append_log":
            started[data["call_id"]] += 1
            lines[data["call_id"]] = data.get("arguments", {}).get("line", "")
        elif event.type == "tool_call_finished" and data["call_id"] in lines:
            finished.append(data["call_id"])
        elif event.type == "tool_call_interrupted" and data["call_id"] in lines:
            interrupted.append(data["call_id"])
        elif event.type == "run_finished":
            run_finished += 1
            outcome = data.get("outcome")
    for call, n in started.items():
        if n > 1:
            problems.append(f"{sid}: call {call} ({lines[call]}) started {n} times")
    outcomes = Counter(finished + interrupted)
    for call in lines:
        if outcomes[call] != 1 and run_finished:
            problems.append(f"{sid}: call {call} has {outcomes[call]} outcomes")
    for call in finished:
        if counts[lines[call]] != 1:
            problems.append(
                f"{sid}: finished call {lines[call]} is in the log {counts[lines[call]]} times"
            )
    for call in interrupted:
        if counts[lines[call]] > 1:
            problems.append(
                f"{sid}: in-doubt call {lines[call]} is in the log {counts[lines[call]]} times"
            )
    return SessionAudit(sid, lines, started, finished, interrupted, run_finished, outcome, problems)


def writer_problems(
    writes: Sequence[EventWrite], incarnations: Sequence[Incarnation], events: Mapping[str, Any]
) -> list[str]:
    """Fencing, seen from the database: per session, once a process wrote after another one,
    the earlier one never writes again; nobody writes after being killed; a ``run_resumed``
    names the process that wrote it."""
    problems: list[str] = []
    by_app = {i.app: i for i in incarnations}
    by_session: dict[str, list[EventWrite]] = {}
    for write in writes:
        by_session.setdefault(write.session_id, []).append(write)
    for sid, rows in by_session.items():
        rows.sort(key=lambda w: w.seq)
        finished: set[str] = set()
        current: str | None = None
        for row in rows:
            if row.app != current:
                if row.app in finished:
                    problems.append(
                        f"{sid}: {row.app} wrote seq {row.seq} ({row.type}) after {current} "
                        "had taken the session over"
                    )
                if current is not None:
                    finished.add(current)
                current = row.app
            who = by_app.get(row.app)
            if who is not None and who.killed_at is not None and row.at > who.killed_at + 0.05:
                problems.append(f"{sid}: {row.app} wrote seq {row.seq} after it was killed")
        for event in events.get(sid, ()):
            if event.type == "run_resumed":
                writer = next((w.app for w in rows if w.seq == event.seq), None)
                who = by_app.get(writer or "")
                if who is not None and pid_of(event.data.get("holder")) != who.pid:
                    problems.append(
                        f"{sid}: run_resumed at seq {event.seq} names {event.data.get('holder')} "
                        f"but was written by {writer} (pid {who.pid})"
                    )
    return problems


def job_writer_problems(
    job_writes: Sequence[JobWrite], incarnations: Sequence[Incarnation]
) -> tuple[list[str], dict[str, str]]:
    """Every job update comes from the holder of its current claim (fencing of the job row);
    returns the problems and, per job, the process that recorded its final status."""
    problems: list[str] = []
    by_pid = {i.pid: i for i in incarnations}
    finisher: dict[str, str] = {}
    for write in job_writes:
        if write.new_fence != write.old_fence:
            continue  # a claim: the new holder takes the job (checked by the store's CAS)
        if write.old_holder is None:
            continue  # cancel of a queued job, or a harness update
        holder = by_pid.get(pid_of(write.old_holder) or -1)
        if holder is not None and holder.app != write.app:
            problems.append(
                f"{write.id}: {write.app} updated the job ({write.old_status} -> "
                f"{write.new_status}) while {holder.app} held it"
            )
        if write.new_status in ("completed", "failed", "cancelled"):
            finisher[write.id] = write.app
            if holder is not None and holder.killed_at is not None and write.at > holder.killed_at:
                problems.append(f"{write.id}: finished by {holder.app} after it was killed")
    return problems, finisher


# -- one trial ---------------------------------------------------------------------------------


def audit_trial(cluster: Cluster, load: Load, kills: Sequence[Kill]) -> dict[str, Any]:
    """Everything the trial found, as counts and lists of problems (empty when sound)."""
    jobs = wait_jobs_done(cluster, list(load.jobs), timeout=90)
    sessions = {job["session_id"]: job_id for job_id, job in jobs.items()}
    chat_sessions = [c["session_id"] for c in load.chats]
    journals = read_journals(cluster.url, [*sessions, *chat_sessions])
    counts = Counter(shared_log(cluster.directory))
    problems: list[str] = []
    problems += [f"job not accepted: {f}" for f in load.job_failures]
    problems += [f"chat not answered: {f}" for f in load.chat_failures]
    for job_id in load.jobs:
        job = jobs.get(job_id)
        if job is None or job["status"] != "completed":
            problems.append(f"job {job_id} ({load.jobs[job_id]}) did not complete: {job}")
    in_doubt = 0
    for sid, events in journals.items():
        report = audit_session(events, counts)
        problems += report.problems
        in_doubt += len(report.interrupted)
        if report.run_finished != 1 or report.outcome != "completed":
            problems.append(f"{sid}: {report.run_finished} run_finished, outcome {report.outcome}")
    duplicates = {line: n for line, n in counts.items() if n > 1}
    if duplicates:
        problems.append(f"lines appended more than once: {duplicates}")
    for chat in load.chats:
        if chat["line"] is None and chat["output"] != chat["expected"]:
            problems.append(f"chat {chat['n']}: {chat['output']!r} != {chat['expected']!r}")
        if chat["line"] is not None and not str(chat["output"]).startswith("logged: "):
            problems.append(f"chat {chat['n']}: {chat['output']!r}")
    left = sql(
        cluster.schema,
        "SELECT id, status FROM sessions WHERE status <> 'completed' AND last_seq > 0",
    )
    if left:
        problems.append(f"sessions with events that did not complete: {left}")
    # Sessions a chat created and never ran (its run was refused, e.g. 429, or its replica
    # died in between): litter, not lost work; counted, not failed.
    (empty,) = sql(cluster.schema, "SELECT count(*) FROM sessions WHERE last_seq = 0")[0]
    writes, job_writes = read_writes(cluster.schema)
    problems += writer_problems(writes, cluster.incarnations(), journals)
    job_problems, finisher = job_writer_problems(job_writes, cluster.incarnations())
    problems += job_problems
    for kill in kills:
        if kill.job_id in finisher and finisher[kill.job_id] == kill.app:
            problems.append(f"{kill.job_id} was finished by {kill.app}, which was killed")
    stream_issues: list[str] = []
    for follower in load.followers:
        job = jobs.get(follower.job_id)
        if job is None:
            continue
        for problem in stream_problems(follower, journals[job["session_id"]]):
            stream_issues.append(f"{follower.job_id}: {problem}")
    problems += stream_issues
    return {
        "problems": problems,
        "jobs": len(load.jobs),
        "completed": sum(1 for j in jobs.values() if j["status"] == "completed"),
        "taken_over": sum(1 for j in jobs.values() if j.get("attempts", 0) > 1),
        # The jobs the killed processes held, finished by another process.
        "victims_finished_elsewhere": sum(
            1 for k in kills if k.job_id in finisher and finisher[k.job_id] != k.app
        ),
        "chats": len(load.chats),
        "chats_retried": sum(1 for c in load.chats if c["attempts"] > 1),
        "chats_cut_mid_request": sum(1 for c in load.chats if c["cut"]),
        "chats_replayed": sum(1 for c in load.chats if c["replayed"]),
        "slowest_chat_seconds": round(max((c["seconds"] for c in load.chats), default=0.0), 1),
        "cut_chats": [
            (c["n"], round(c["seconds"], 1), c["replayed"], c["notes"])
            for c in load.chats
            if c["cut"]
        ],
        "in_doubt": in_doubt,
        "duplicates": sum(n - 1 for n in duplicates.values()),
        "followers": len(load.followers),
        "streams_broken": sum(f.broken for f in load.followers),
        "stream_hops": sum(f.hops for f in load.followers),
        "events_streamed": sum(len(f.received) for f in load.followers),
        "stream_problems": len(stream_issues),
        "empty_sessions": int(empty),
    }


def run_load(
    cluster: Cluster,
    rng: random.Random,
    tag: str,
    *,
    kills: int,
    seconds: float = 0.0,
    rate: float = 1.5,
    report: Callable[[str], None] = print,
    **chaos_options: Any,
) -> dict[str, Any]:
    """A load of ``rate`` jobs and chats a second for ``seconds`` (no kill), or until
    ``kills`` replicas were killed mid-job; then what :func:`audit_trial` finds."""
    started = time.monotonic()
    load = Load(cluster, rng, jobs_per_second=rate, chats_per_second=rate, tag=tag).start()
    done = (
        chaos(
            cluster,
            rng,
            kills=kills,
            report=report,
            followers=lambda: list(load.followers),
            **chaos_options,
        )
        if kills
        else []
    )
    time.sleep(seconds)
    load.finish(timeout=150)
    found = audit_trial(cluster, load, done)
    found["kills"] = len(done)
    found["kills_mid_tool"] = sum(1 for k in done if k.mid_tool)
    found["streams_cut"] = sum(k.streams_cut for k in done)
    found["seconds"] = round(time.monotonic() - started, 1)
    return found
