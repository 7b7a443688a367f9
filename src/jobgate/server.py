"""``jobgate serve``: the API, the scheduler and an embedded worker in one process.

Shutdown on SIGTERM or SIGINT is graceful in the order that loses nothing: the HTTP side
stops accepting connections and ends open streams (clients reconnect with their last event
id), the scheduler gives up its leader lease so a standby takes over at once, and the
worker stops claiming, lets running jobs finish within ``worker.shutdown_grace_seconds``
and releases the rest to the queue.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType

import uvicorn

from jobgate.api.server_state import ServerState
from jobgate.console.app import create_app
from jobgate.core.errors import ValidationError
from jobgate.runtime.loops import Loop, LoopThread
from jobgate.runtime.process import WorkerProcess, worker_settings
from jobgate.runtime.pubsub import pubsub_source
from jobgate.runtime.scheduler import Scheduler
from jobgate.runtime.sla import SlaMonitor
from jobgate.service import tokens
from jobgate.service.engine import Engine

log = logging.getLogger("jobgate.server")


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    auth: bool = True
    worker: bool = True
    scheduler: bool = True
    bootstrap_token_file: Path | None = None
    concurrency: int | None = None
    log_level: str = "info"
    redis_url: str | None = None  # --redis-url: pub/sub triggers (over the config's pubsub.url)


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the server on this machine (``--no-auth`` requires it)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_options(options: ServeOptions) -> None:
    if not options.auth and not is_loopback(options.host):
        raise ValidationError(
            f"--no-auth serves without authentication and only binds to a loopback address, not {options.host!r}",
            field="--host",
        )
    if not 0 < options.port < 65536:
        raise ValidationError("a TCP port, 1-65535", field="--port")


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, telling us the moment a shutdown signal arrives, so the loops start
    stopping while HTTP drains rather than after."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


class ApiServer:
    def __init__(self, engine: Engine, options: ServeOptions) -> None:
        check_options(options)
        self.engine = engine
        self.options = options
        self.worker = (
            WorkerProcess(engine, worker_settings(engine, concurrency=options.concurrency)) if options.worker else None
        )
        # The scheduler, and the SLA monitor when no embedded worker (WorkerProcess) runs it.
        loops: list[Loop] = [Scheduler(engine)] if options.scheduler else []
        if not options.worker:
            loops.append(SlaMonitor(engine))
        self._loops = {loop.name: LoopThread(loop, engine.clock) for loop in loops}
        # Seed 004's pub/sub triggers: built now, so a bad mapping or a missing extra fails the start.
        self.pubsub = pubsub_source(engine, options.redis_url)
        self.state = ServerState(
            engine,
            auth=options.auth,
            embedded_worker=options.worker,
            loops=self.loops,
            loops_failing=self.loops_failing,
            pubsub=self.pubsub_health,
        )
        self.app = create_app(self.state)

    def loops(self) -> dict[str, bool]:
        out = {name: loop.running for name, loop in self._loops.items()}
        if self.worker is not None:
            out["worker"] = not self.worker.worker.wait_stopped(0)
        if self.pubsub is not None:
            out[self.pubsub.name] = self.pubsub.running
        return out

    def loops_failing(self) -> dict[str, int]:
        """Each background loop's failed passes in a row (``/readyz``)."""
        out = {name: loop.failing for name, loop in self._loops.items()}
        if self.pubsub is not None:  # a broker that refuses or cannot be reached, attempt after attempt
            out[self.pubsub.name] = self.pubsub.failing
        return out

    def pubsub_health(self) -> str:
        """``/healthz``'s ``pubsub``: connected, disconnected, or skip (none configured)."""
        return "skip" if self.pubsub is None else self.pubsub.health()

    def bootstrap(self) -> tokens.CreatedToken | None:
        if not self.options.auth:
            return None
        return tokens.bootstrap(
            self.engine, tenant_id=self.engine.config.server.tenant, path=self.options.bootstrap_token_file
        )

    def start_loops(self) -> None:
        if self.worker is not None:
            self.worker.start()
        for loop in self._loops.values():
            loop.start()
        if self.pubsub is not None:
            self.pubsub.start()

    def begin_stop(self) -> None:
        """Start every graceful stop without waiting: streams end, no new claims or fires."""
        self.state.stopping.set()
        for loop in self._loops.values():
            loop.stop()
        if self.worker is not None:
            self.worker.stop()

    def stop_loops(self) -> None:
        """Stop and wait: running jobs finish within the grace period, the rest is released."""
        self.begin_stop()
        if self.worker is not None:
            self.worker.join()
        for loop in self._loops.values():
            loop.join(timeout=30)
        if self.pubsub is not None:
            self.pubsub.stop()

    def serve(self) -> None:
        """Serve until SIGTERM/SIGINT, then shut down gracefully (see the module docstring)."""
        config = uvicorn.Config(
            self.app,
            host=self.options.host,
            port=self.options.port,
            log_level=self.options.log_level,
            log_config=None,  # uvicorn's records go to the process's handler (jobgate.logs): one format
            forwarded_allow_ips=list(self.engine.config.server.trusted_proxies),  # whose X-Forwarded-* count
            timeout_graceful_shutdown=max(5, int(self.engine.config.worker.shutdown_grace / timedelta(seconds=1))),
            access_log=False,
        )
        server = _Uvicorn(config, self.begin_stop)
        # uvicorn restores the handlers it found and re-raises the signal once HTTP has
        # drained; ours then starts (again, idempotently) the graceful stop instead of the
        # default action killing the process before the running jobs finish.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda _sig, _frame: self.begin_stop())
        self.start_loops()
        try:
            server.run()
        finally:
            self.stop_loops()
            if "authenticator" in vars(self.state):  # built by a first request: its connections go
                self.state.authenticator.close()
        log.info("server stopped", extra={"action": "server_stopped"})
