"""The HTTP API under load: many clients creating runs while the embedded worker executes them.

Why: ``jobgate serve`` is the product's main entry point, and its target is >= 1,000 accepted
``POST /api/v1/runs`` per second from 16 clients with the embedded worker running, p99 < 50 ms,
on SQLite and on PostgreSQL, with nothing lost or doubled. This benchmark reproduces that load
against a real server process and checks the outcome in the database afterwards.

    python benchmarks/api_load.py --backend sqlite --seconds 30
    python benchmarks/api_load.py --backend postgres --seconds 30        # cleans the target database
    python benchmarks/api_load.py --short                                # CI: ~5 s, 4 clients
    python benchmarks/api_load.py --seconds 1800 --rate 200 --workers 1 --listers 1 \
        --no-cli-loop --sample-every 60                                  # a 30-minute soak: memory

What it does:
  1. a fresh folder (configuration, one definition whose body is the peers' ``record``: one
     Redis round trip), the definition applied and approved; on PostgreSQL the database's
     jobgate tables are truncated first (``--db``, default the local ``jobgate_bench2``);
  2. an operator token made with ``jobgate tokens create``, then ``jobgate serve`` started as a
     subprocess on 127.0.0.1 and a free port, embedded worker and scheduler on; ``/readyz``
     is polled until it answers 200 (with a deadline);
  3. for ``--seconds``: ``--clients`` threads each posting ``POST /api/v1/runs`` (one keep-alive
     httpx client per thread, a distinct ``Idempotency-Key`` per request), ``--listers``
     threads reading ``GET /api/v1/runs``, and a loop running ``jobgate submit`` as a new
     process each time, as a person at the host would (``--no-cli-loop`` to leave it out;
     ``--cli-via-server`` to send it through the API instead of the database);
  4. waits until every run has reached a final state, then checks that every accepted run is
     in the database exactly once and COMPLETED, and that its body ran exactly once (Redis).

Printed: the machine, per-status counts, POST latency p50/p95/p99, list latency p50/p99, the
server's RSS before and after and its CPU (utime + stime of the process, which includes the
embedded worker) per accepted submit. ``errors`` counts failed requests (any non-2xx status or
transport error, the CLI's failures) plus server log lines saying ``database is locked``. The
last line is ``RESULT backend=... clients=N seconds=S submits_per_s=X p50_ms=X p99_ms=X
errors=N lost=N duplicated=N list_p99_ms=X server_cpu_ms_per_submit=X rss_start_mb=X
rss_end_mb=X``; the exit status is 1 when errors, lost or duplicated is not 0.

A soak (``--rate``, ``--workers``, ``--sample-every``): the clients post at a steady total rate
instead of as fast as the server answers, ``--workers`` ``jobgate worker`` processes run beside
the server's embedded worker, and the RSS of the server and of each worker is printed every
``--sample-every`` seconds, then at the start and the end (``rss_worker_*`` in the RESULT line:
the largest worker's). Memory that grows with the number of runs handled shows as a rising
series; a cache that fills and then holds shows as a step and a plateau.

The clients are threads of this one Python process (the GIL included): the CPU this process
used during the load is printed, so a client-bound run can be told from a server-bound one.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/jobgate_bench2"
PEERS_DIR = Path(os.environ.get("JOBGATE_PEERS_DIR") or REPO.parent / "shared" / "bench" / "peers")
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PEERS_DIR))

import common  # type: ignore[import-not-found]  # noqa: E402
from bench_site import make_site  # noqa: E402
from figures import child_pythonpath, machine, pct  # noqa: E402

from jobgate.core.states import RunStatus  # noqa: E402
from jobgate.testing import connection  # noqa: E402

JOB = "bench-api"
DEFINITION = f"""
job_definition_id: {JOB}
job_code: BENCH-API
job_class: OBSERVABILITY_JOB
canonical_name: API load benchmark body (peers' record)
trigger_type: manual
handler: jobgate_bench_body:record
priority: normal
params:
  - {{name: i, required: true, pattern: '[0-9]{{1,9}}'}}
  - {{name: t, pattern: '[0-9]{{1,12}}([.][0-9]{{1,9}})?', default: "0"}}
"""
READY_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LOCKED = "database is locked"


# ---------------------------------------------------------------- what the threads record
@dataclass
class Tally:
    """One thread's observations (merged after the threads have stopped: no shared lock)."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    accepted: dict[str, int] = field(default_factory=dict)  # run id -> the run's ``i``
    replayed: int = 0  # 200 instead of 201: an idempotency key seen before (must stay 0)
    failed_i: list[int] = field(default_factory=list)  # ``i`` of requests without a 2xx answer
    ended: float = 0.0  # perf_counter when the thread's last request was answered

    def merge(self, other: Tally) -> None:
        self.latencies_ms += other.latencies_ms
        self.statuses.update(other.statuses)
        self.accepted.update(other.accepted)
        self.replayed += other.replayed
        self.failed_i += other.failed_i
        self.ended = max(self.ended, other.ended)

    @property
    def failures(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))


class Sequence:
    """Distinct ``i`` for every run this benchmark asks for (the Redis bitmap's bit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = itertools.count()

    def take(self) -> int:
        with self._lock:
            return next(self._next)


class Pacer:
    """A steady total rate across the posting threads (``--rate``): each takes the next slot."""

    def __init__(self, per_second: float | None) -> None:
        self._gap = 1.0 / per_second if per_second else 0.0
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def wait(self, stop: threading.Event) -> None:
        """Return at this thread's next slot (at once without a rate, or when ``stop`` is set)."""
        if not self._gap:
            return
        with self._lock:
            slot = self._next = max(self._next + self._gap, time.monotonic())
        delay = slot - time.monotonic()
        if delay > 0:
            stop.wait(delay)


# ---------------------------------------------------------------- the server process
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu(pid: int) -> tuple[float, float]:
    """(utime, stime) seconds of one process (all its threads), from ``/proc/<pid>/stat``."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # fields from the third (state) on
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def proc_status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    return ""


def rss_mb(pid: int) -> float:
    value = proc_status(pid, "VmRSS")  # "123456 kB"
    return int(value.split()[0]) / 1024 if value else float("nan")


def child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG", "JOBGATE_SERVER", "JOBGATE_TOKEN"}
    }
    env["PYTHONPATH"] = child_pythonpath(HERE, PEERS_DIR)
    env["JOBGATE_PEERS_DIR"] = str(PEERS_DIR)
    return env


def jobgate_cmd(config: Path) -> list[str]:
    return [sys.executable, "-m", "jobgate.cli.entry", "--config", str(config)]


class Site:
    """The folder, the database and the token; then the server process."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.config_path, self.engine = make_site(root, DEFINITION, db=args.db)
        self.dialect = self.engine.store.dialect
        self.env = child_env()
        made = subprocess.run(
            [*jobgate_cmd(self.config_path), "--json", "tokens", "create", "--role", "operator", "--label", "api-load"],
            env=self.env,
            capture_output=True,
            check=True,
            timeout=CLI_TIMEOUT_S,
        )
        self.token = str(json.loads(made.stdout)["token"])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "serve.log"
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def db_version(self) -> str:
        with self.engine.store.read() as tx:
            if self.dialect == "postgresql":
                return str(connection(tx).exec_driver_sql("SHOW server_version").scalar())
            return "sqlite " + str(connection(tx).exec_driver_sql("SELECT sqlite_version()").scalar())

    def start_server(self) -> int:
        cmd = [*jobgate_cmd(self.config_path), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if self.args.worker_concurrency:
            cmd += ["--concurrency", str(self.args.worker_concurrency)]
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.server = subprocess.Popen(
                cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(base_url=self.url, timeout=2) as client:
            while True:
                if self.server.poll() is not None:
                    raise SystemExit(f"jobgate serve exited with {self.server.returncode}:\n{self.log_tail()}")
                try:
                    if client.get("/readyz").status_code == 200:
                        return self.server.pid
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"jobgate serve not ready after {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
                time.sleep(0.05)  # a poll with a deadline, not a fixed wait

    def start_workers(self, n: int) -> list[int]:
        """``n`` ``jobgate worker`` processes beside the server (logging into its log), returned
        once each has announced itself (its first heartbeat), so the first RSS sample is a
        started worker's."""
        with self.log_path.open("ab") as log:
            for _ in range(n):
                self.workers.append(
                    subprocess.Popen(
                        [*jobgate_cmd(self.config_path), "worker"],
                        env=self.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        pids = [w.pid for w in self.workers]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while pids:  # each has started once it has written its first heartbeat
            with self.engine.store.read() as tx:
                beating = {
                    int(pid)
                    for (pid,) in connection(tx).exec_driver_sql("SELECT pid FROM workers WHERE stopped_at IS NULL")
                }
            if beating >= set(pids):
                break
            dead = [w.pid for w in self.workers if w.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"worker processes {dead or pids} did not start:\n{self.log_tail()}")
            time.sleep(0.05)  # a poll with a deadline, not a fixed wait
        return pids

    def stop_server(self) -> int | None:
        workers, self.workers = self.workers, []
        if workers:
            common.stop(workers, grace=60)
        if self.server is None:
            return None
        server, self.server = self.server, None
        common.stop([server], grace=60)  # SIGTERM to its process group, SIGKILL after the grace
        return server.returncode

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def log_problems(self) -> tuple[int, int, list[str]]:
        """Lines saying ``database is locked``, lines at ERROR (or tracebacks), a few examples."""
        locked = errors = 0
        examples: list[str] = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            is_locked = LOCKED in line
            is_error = "ERROR" in line or line.startswith("Traceback")
            locked += is_locked
            errors += is_error
            if (is_locked or is_error) and len(examples) < 5:
                examples.append(line[:240])
        return locked, errors, examples

    # the database after the load ------------------------------------------
    def runs(self) -> list[tuple[str, str, int]]:
        """(run id, status, i) of every run of the benchmark's definition."""
        with self.engine.store.read() as tx:
            rows = (
                connection(tx)
                .exec_driver_sql(f"SELECT job_run_id, status, params FROM job_runs WHERE job_definition_id = '{JOB}'")
                .all()
            )
        out = []
        for run_id, status, params in rows:
            p = json.loads(params) if isinstance(params, str | bytes) else params
            out.append((str(run_id), str(status), int(p["i"])))
        return out

    def wait_final(self, expected: int, timeout: float) -> float:
        """Poll until at least ``expected`` runs exist and none is still open; seconds waited."""
        t0 = time.monotonic()
        while True:
            with self.engine.store.read() as tx:
                rows = (
                    connection(tx)
                    .exec_driver_sql(
                        f"SELECT status, count(*) FROM job_runs WHERE job_definition_id = '{JOB}' GROUP BY status"
                    )
                    .all()
                )
            total = sum(int(n) for _, n in rows)
            open_runs = sum(int(n) for s, n in rows if not RunStatus(s).is_terminal)
            if total >= expected and open_runs == 0:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                print(f"warning: runs still open after {timeout:.0f} s: {dict(rows)}", flush=True)
                return time.monotonic() - t0
            time.sleep(0.2)


# ---------------------------------------------------------------- the load
def poster(
    n: int, url: str, token: str, tag: str, seq: Sequence, pacer: Pacer, stop: threading.Event, out: Tally
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S) as client:
        for k in itertools.count():
            pacer.wait(stop)
            if stop.is_set():
                out.ended = time.perf_counter()
                return
            i = seq.take()
            body = {"job_definition_id": JOB, "params": {"i": str(i)}}
            t = time.perf_counter()
            try:
                r = client.post("/api/v1/runs", json=body, headers={"Idempotency-Key": f"{tag}-c{n}-{k}"})
            except httpx.HTTPError as exc:
                out.statuses[type(exc).__name__] += 1
                out.failed_i.append(i)
                continue
            out.latencies_ms.append((time.perf_counter() - t) * 1000)
            out.statuses[str(r.status_code)] += 1
            if r.is_success:
                answer = r.json()
                out.accepted[str(answer["run"]["job_run_id"])] = i
                out.replayed += not answer["created"]
            else:
                out.failed_i.append(i)


def lister(url: str, token: str, stop: threading.Event, out: Tally) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S) as client:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                r = client.get("/api/v1/runs", params={"limit": 100})
            except httpx.HTTPError as exc:
                out.statuses[type(exc).__name__] += 1
                continue
            out.latencies_ms.append((time.perf_counter() - t) * 1000)
            out.statuses[str(r.status_code)] += 1


class CliLoop:
    """``jobgate submit`` as a new process each time, one after the other."""

    def __init__(self, site: Site, tag: str, seq: Sequence, stop: threading.Event, via_server: bool) -> None:
        self.site, self.tag, self.seq, self.stop, self.via_server = site, tag, seq, stop, via_server
        self.out = Tally()
        self.current: subprocess.Popen[bytes] | None = None

    def run(self) -> None:
        base = [*jobgate_cmd(self.site.config_path), "--json"]
        env = dict(self.site.env)
        if self.via_server:
            base += ["--server", self.site.url]
            env["JOBGATE_TOKEN"] = self.site.token  # not on the command line (ps shows it)
        for k in itertools.count():
            if self.stop.is_set():
                return
            i = self.seq.take()
            cmd = [*base, "submit", JOB, "-p", f"i={i}", "--request-id", f"{self.tag}-cli-{k}", "--by", "bench"]
            t = time.perf_counter()
            self.current = subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
            try:
                stdout, stderr = self.current.communicate(timeout=CLI_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                self.out.statuses["cli_timeout"] += 1
                self.out.failed_i.append(i)
                continue
            self.out.latencies_ms.append((time.perf_counter() - t) * 1000)
            if self.current.returncode == 0:
                self.out.statuses["2xx_cli_ok"] += 1
                self.out.accepted[str(json.loads(stdout)["job_run_id"])] = i
            else:
                self.out.statuses[f"cli_exit_{self.current.returncode}"] += 1
                self.out.failed_i.append(i)
                if self.out.statuses[f"cli_exit_{self.current.returncode}"] <= 3:
                    print(f"cli submit failed: {stderr.decode(errors='replace').strip()[:300]}", flush=True)

    def kill(self) -> None:
        proc = self.current
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class MemorySamples:
    """RSS of the server and of each worker process over the load, printed as it goes."""

    def __init__(self, server: int, workers: list[int]) -> None:
        self.server, self.workers = server, workers
        self.rows: list[tuple[float, float, list[float]]] = []

    def sample(self, at_s: float) -> None:
        row = (at_s, rss_mb(self.server), [rss_mb(w) for w in self.workers])
        self.rows.append(row)
        if len(self.rows) > 1:
            workers = ", ".join(f"{x:.1f}" for x in row[2])
            print(f"  RSS at {at_s:7.1f} s: server {row[1]:.1f} MB" + (f", workers {workers} MB" if workers else ""))

    def report(self) -> None:
        if len(self.rows) < 2:
            return
        first, last = self.rows[0], self.rows[-1]
        peak = max(r[1] for r in self.rows)
        print(f"server RSS: first {first[1]:.1f}, last {last[1]:.1f}, peak {peak:.1f} MB over {len(self.rows)} samples")
        for n in range(len(self.workers)):
            series = [r[2][n] for r in self.rows]
            print(f"worker {n + 1} RSS: first {series[0]:.1f}, last {series[-1]:.1f}, peak {max(series):.1f} MB")

    def result_fields(self) -> str:
        if not self.workers or not self.rows:
            return ""
        first, last = self.rows[0][2], self.rows[-1][2]
        return f" rss_worker_start_mb={max(first):.1f} rss_worker_end_mb={max(last):.1f}"


def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.1f}"


def percentiles(xs: list[float], qs: tuple[float, ...]) -> list[float]:
    return [pct(xs, q) if xs else float("nan") for q in qs]


def run(args: argparse.Namespace, site: Site) -> int:
    tag = f"load{int(time.time())}"
    seq = Sequence()
    common.reset_sink()
    pid = site.start_server()
    worker_pids = site.start_workers(args.workers)
    rss_start = rss_mb(pid)
    print(
        f"server: pid {pid} at {site.url}, database {site.db_version()}, {proc_status(pid, 'Threads')} threads, "
        f"RSS {rss_start:.1f} MB; {len(worker_pids)} worker processes",
        flush=True,
    )
    stop = threading.Event()
    pacer = Pacer(args.rate)
    memory = MemorySamples(pid, worker_pids)
    posts = [Tally() for _ in range(args.clients)]
    lists = [Tally() for _ in range(args.listers)]
    threads = [
        threading.Thread(target=poster, args=(n, site.url, site.token, tag, seq, pacer, stop, posts[n]), daemon=True)
        for n in range(args.clients)
    ]
    threads += [
        threading.Thread(target=lister, args=(site.url, site.token, stop, lists[n]), daemon=True)
        for n in range(args.listers)
    ]
    cli = None if args.no_cli_loop else CliLoop(site, tag, seq, stop, args.cli_via_server)
    if cli is not None:
        threads.append(threading.Thread(target=cli.run, daemon=True))
    cpu0, own0 = proc_cpu(pid), os.times()
    t0 = time.perf_counter()
    try:
        for th in threads:
            th.start()
        memory.sample(0.0)  # the workers' RSS once they have started
        ends = time.monotonic() + args.seconds
        every = args.sample_every or args.seconds
        while not stop.wait(max(0.0, min(every, ends - time.monotonic()))):
            if time.monotonic() >= ends:
                break
            memory.sample(time.perf_counter() - t0)
    finally:
        stop.set()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S + CLI_TIMEOUT_S
        for th in threads:
            th.join(max(0.1, deadline - time.monotonic()))
        if cli is not None:
            cli.kill()
    cpu1, own1 = proc_cpu(pid), os.times()
    alive = [th.name for th in threads if th.is_alive()]
    if alive:
        print(f"warning: threads still running after the load: {alive}", flush=True)

    post, listed = Tally(), Tally()
    for tally in posts:
        post.merge(tally)
    window = (post.ended or time.perf_counter()) - t0  # until the last POST was answered
    for tally in lists:
        listed.merge(tally)
    cli_out = cli.out if cli is not None else Tally()
    accepted = {**post.accepted, **cli_out.accepted}

    # every accepted run to a final state, then the checks
    drained_s = site.wait_final(len(accepted), args.drain_timeout)
    cpu2 = proc_cpu(pid)
    cpu_load, cpu_total = sum(cpu1) - sum(cpu0), sum(cpu2) - sum(cpu0)
    user, system = cpu2[0] - cpu0[0], cpu2[1] - cpu0[1]
    rss_end = rss_mb(pid)
    memory.sample(time.perf_counter() - t0)
    threads_end = proc_status(pid, "Threads")
    rows = site.runs()
    by_i: Counter[int] = Counter(i for _, _, i in rows)
    status_of = {run_id: status for run_id, status, _ in rows}
    missing = [r for r in accepted if r not in status_of]
    unfinished = [r for r in accepted if r in status_of and status_of[r] != RunStatus.COMPLETED.value]
    duplicated_rows = sum(n - 1 for n in by_i.values() if n > 1)
    accepted_i = set(accepted.values())
    extra = [run_id for run_id, _, i in rows if i not in accepted_i]  # e.g. from a request that timed out
    done, distinct = common.counts()
    ran_twice = done - distinct
    lost = len(missing) + len(unfinished)
    duplicated = duplicated_rows + ran_twice + post.replayed
    returncode = site.stop_server()
    locked, log_errors, examples = site.log_problems()
    errors = post.failures + listed.failures + cli_out.failures + locked

    submits_per_s = len(post.accepted) / window
    p50, p95, p99 = percentiles(post.latencies_ms, (50, 95, 99))
    lp50, lp99 = percentiles(listed.latencies_ms, (50, 99))
    cp50, cp99 = percentiles(cli_out.latencies_ms, (50, 99))
    cpu_ms = cpu_total / len(post.accepted) * 1000 if post.accepted else float("nan")
    own_cpu = (own1.user + own1.system) - (own0.user + own0.system)
    print(
        f"load: {window:.1f} s, {args.clients} clients, {args.listers} listers, "
        f"cli loop {'off' if cli is None else ('via server' if args.cli_via_server else 'on the database')}",
        flush=True,
    )
    print(
        f"POST /api/v1/runs: {len(post.accepted)} accepted ({submits_per_s:.1f}/s), statuses "
        f"{dict(sorted(post.statuses.items()))}, p50 {fmt(p50)} ms, p95 {fmt(p95)} ms, p99 {fmt(p99)} ms, "
        f"max {fmt(max(post.latencies_ms, default=float('nan')))} ms"
    )
    print(
        f"GET /api/v1/runs: {len(listed.latencies_ms)} pages, statuses {dict(sorted(listed.statuses.items()))}, "
        f"p50 {fmt(lp50)} ms, p99 {fmt(lp99)} ms"
    )
    if cli is not None:
        print(
            f"CLI submit: {len(cli_out.accepted)} runs, statuses {dict(sorted(cli_out.statuses.items()))}, "
            f"p50 {fmt(cp50)} ms, p99 {fmt(cp99)} ms (a process each)"
        )
    print(
        f"server: CPU {cpu_load:.1f} s during the load, {cpu_total:.1f} s until drained "
        f"(user {user:.1f} s, system {system:.1f} s; {cpu_ms:.2f} ms per accepted POST, the embedded worker's "
        "execution and the listing included); "
        f"RSS {rss_start:.1f} -> {rss_end:.1f} MB; threads {threads_end}; exit status {returncode}"
    )
    print(f"this process (the clients): CPU {own_cpu:.1f} s over {window:.1f} s ({own_cpu / window:.2f} cores)")
    print(
        f"after the load: drained in {drained_s:.1f} s; database {len(rows)} runs "
        f"({dict(Counter(s for _, s, _ in rows))}); accepted {len(accepted)}, missing {len(missing)}, "
        f"not completed {len(unfinished)}, duplicate rows {duplicated_rows}, replayed keys {post.replayed}, "
        f"runs from unanswered requests {len(extra)}; bodies ran {done} times for {distinct} distinct runs"
    )
    memory.report()
    print(f"server log: {locked} '{LOCKED}' lines, {log_errors} ERROR/traceback lines")
    for line in examples:
        print(f"  {line}")
    print(
        f"RESULT backend={args.backend} clients={args.clients} seconds={args.seconds:g} "
        f"submits_per_s={submits_per_s:.1f} p50_ms={fmt(p50)} p99_ms={fmt(p99)} errors={errors} lost={lost} "
        f"duplicated={duplicated} list_p99_ms={fmt(lp99)} server_cpu_ms_per_submit={cpu_ms:.2f} "
        f"rss_start_mb={rss_start:.1f} rss_end_mb={rss_end:.1f}{memory.result_fields()}",
        flush=True,
    )
    return 1 if errors or lost or duplicated else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--db", help=f"database URL for --backend postgres (default: {DEFAULT_PG_URL}; truncated)")
    p.add_argument("--clients", type=int, help="threads posting runs (default 16; 4 with --short)")
    p.add_argument("--listers", type=int, default=2, help="threads listing runs")
    p.add_argument("--seconds", type=float, help="length of the load (default 40; 5 with --short)")
    p.add_argument("--no-cli-loop", action="store_true", help="no `jobgate submit` processes during the load")
    p.add_argument("--cli-via-server", action="store_true", help="the CLI loop submits through the API")
    p.add_argument("--worker-concurrency", type=int, help="embedded worker threads (default: the configuration's)")
    p.add_argument("--drain-timeout", type=float, default=300.0, help="seconds to wait for the runs to finish")
    p.add_argument(
        "--rate", type=float, help="total POSTs per second across the clients (default: as fast as answered)"
    )
    p.add_argument("--workers", type=int, default=0, help="`jobgate worker` processes beside the server")
    p.add_argument("--sample-every", type=float, help="print the processes' RSS every this many seconds")
    p.add_argument("--short", action="store_true", help="CI mode: ~5 s, 4 clients")
    args = p.parse_args()
    if args.clients is None:
        args.clients = 4 if args.short else 16
    if args.seconds is None:
        args.seconds = 5.0 if args.short else 40.0
    for name in ("rate", "sample_every"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be greater than 0")
    if args.workers < 0:
        p.error("--workers must be 0 or more")
    if args.backend == "postgres" and not args.db:
        args.db = os.environ.get("JOBGATE_BENCH_POSTGRES_URL", DEFAULT_PG_URL)
    if args.backend == "sqlite" and args.db:
        p.error("--db is for --backend postgres (SQLite uses a fresh file in a temporary folder)")
    # SIGTERM unwinds like Ctrl-C, so the finally-blocks stop the server and the CLI process.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    print(f"machine: {machine()}")
    print(
        f"jobgate api_load: backend={args.backend} clients={args.clients} listers={args.listers} "
        f"seconds={args.seconds:g} cli_loop={'no' if args.no_cli_loop else 'yes'}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="jobgate-api-load-") as tmp:
        site = Site(args, Path(tmp))
        try:
            status = run(args, site)
        except (Exception, KeyboardInterrupt):
            print(f"server log tail:\n{site.log_tail()}", file=sys.stderr)
            raise
        finally:
            site.stop_server()
            site.engine.store.dispose()
    sys.exit(status)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
