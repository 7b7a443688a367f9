"""What this worker can execute, found before it claims anything (issue 25: a misdeployed host
must not burn runs).

A worker probes the current version of every active definition of its queues with the same
resolution an attempt makes (``Dispatcher.check``: the handler imports here, the runner or the
target is configured here) and reads the code digest it would run. Definitions it cannot
execute are left out of its claims, so their runs stay queued for a worker that can; the
probe's findings are advertised in the worker's row (``workers.capabilities``), where ``jobgate
doctor`` and the console name the definitions no live worker can run.

Probing is cached by definition digest (a version's content never changes, and what a process
can import does not change under it: a handler's module is imported once) and repeated only for
versions stored since the last probe, which the store's definitions fingerprint tells cheaply.
A definition that fails for a reason that is not this host's (it is invalid under today's
configuration everywhere) is not advertised either way: its attempt reports that as it always
has.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobgate.core.capabilities import HOST_FIELDS, Capability
from jobgate.core.errors import JobgateError
from jobgate.core.models import DEFAULT_QUEUE, DefinitionStatus
from jobgate.runtime.dispatch import Dispatcher
from jobgate.service.engine import Engine
from jobgate.store.base import StoredDefinition
from jobgate.store.errors import is_transient

log = logging.getLogger("jobgate.worker")


class CapabilityProbe:
    """The worker's probe: ``refresh()`` after new versions were stored; ``unrunnable`` the
    digests its claims skip."""

    def __init__(self, engine: Engine, dispatcher: Dispatcher, queues: tuple[str, ...]) -> None:
        self.engine = engine
        self.dispatcher = dispatcher
        self.queues = frozenset(queues)
        self._found: dict[str, Capability] = {}
        self._fingerprint: tuple[int, int] | None = None
        self._dirty = True  # the advertisement is not written yet
        # ``refresh`` may run on a thread of its own (``start_refresh``): what the worker's loop
        # reads or adds meanwhile is guarded, and an advertisement it made waits here.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready: dict[str, dict[str, Any]] | None = None

    @property
    def unrunnable(self) -> frozenset[str]:
        with self._lock:
            return frozenset(digest for digest, c in self._found.items() if not c.runnable)

    def refresh(self) -> dict[str, dict[str, Any]] | None:
        """Probe what was stored since the last call; the advertisement when it changed, else
        None (nothing to write)."""
        with self.engine.store.read() as tx:
            fingerprint = tx.definitions_fingerprint()
            with self._lock:
                if fingerprint == self._fingerprint and not self._dirty:
                    return None
                changed = fingerprint != self._fingerprint
            stored = [s for s in tx.definitions_list(None) if self._mine(s)] if changed else []
        if changed:
            with self._lock:
                known = dict(self._found)
            # a handler's module is imported here: however long that takes, nothing is held
            probed = {s.digest: known.get(s.digest) or self._probe(s) for s in stored}
            found = {digest: c for digest, c in probed.items() if c is not None}
            with self._lock:
                # what an attempt found meanwhile (``found_unrunnable``) is kept
                found.update({d: c for d, c in self._found.items() if d not in known and not c.runnable})
                self._dirty = self._dirty or found != self._found
                self._found, self._fingerprint = found, fingerprint
        with self._lock:
            if not self._dirty:
                return None
            self._dirty = False
            return {digest: c.as_json() for digest, c in sorted(self._found.items())}

    def start_refresh(self) -> None:
        """``refresh`` on a thread of its own, unless one is running: a handler module that takes
        long to import (a minute, say) must not hold up the worker's loop, which renews the
        leases of the runs in hand (they expired, and their runs were started again elsewhere)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._refresh_apart, name="jobgate-probe", daemon=True)
            self._thread.start()

    def _refresh_apart(self) -> None:
        try:
            made = self.refresh()
        except Exception as exc:  # a database away is one line; anything else keeps its traceback
            log.warning("capability probe failed (%s)", type(exc).__name__, exc_info=not is_transient(exc))
            return
        if made is not None:
            with self._lock:
                self._ready = made

    def take_ready(self) -> dict[str, dict[str, Any]] | None:
        """The advertisement the last refresh on its own thread made, once (None: none new)."""
        with self._lock:
            made, self._ready = self._ready, None
            return made

    def unwritten(self) -> None:
        """The last advertisement was not stored (a failed heartbeat): write it again next time."""
        with self._lock:
            self._dirty = True

    def found_unrunnable(self, digest: str, tenant_id: str, job_definition_id: str, reason: str) -> None:
        """An attempt found what the probe could not (a version stored since): advertise it."""
        with self._lock:
            self._found[digest] = Capability(tenant_id, job_definition_id, False, reason=reason)
            self._dirty = True

    def _mine(self, stored: StoredDefinition) -> bool:
        queue = stored.content.get("queue", DEFAULT_QUEUE)
        return stored.status is DefinitionStatus.ACTIVE and (not self.queues or queue in self.queues)

    def _probe(self, stored: StoredDefinition) -> Capability | None:
        tenant, job = stored.tenant_id, stored.job_definition_id
        try:
            definition = self.engine.definitions.build(stored)
            self.dispatcher.check(definition)
        except JobgateError as exc:
            if exc.field not in HOST_FIELDS:
                return None
            log.warning(
                "this worker cannot run %s (%s); its runs are left to workers that can",
                job,
                exc.message,
                extra={"action": "definition_unrunnable", "job_definition_id": job},
            )
            return Capability(tenant, job, False, reason=exc.message)
        try:
            code = self.engine.definitions.code_reader.identity(definition, as_loaded=True).digest
        except JobgateError:
            code = None  # the attempt's code gate says why, with the run
        return Capability(tenant, job, True, code_digest=code)
