"""The outbox publisher: delivers committed events to sinks, at least once, in order.

Events are written in the transaction that caused them; this loop reads them in id order,
hands each batch to every sink, and marks the batch delivered. Only the holder of the
publisher lock (a fenced, expiring row in ``locks``) publishes, so there is one publisher per
database; sinks are called outside any transaction so slow sink I/O never holds up workers,
and marking delivered is fenced by the lock token. A sink that fails leaves the batch
undelivered and it is retried on the next turn; a holder that stalled past the lock's expiry
may deliver a batch again. Either way consumers may see an event twice and de-duplicate by
``event_id``.

Time: a sink may spend at most ``SINK_BUDGET`` on a batch; the publisher renews its lock just
before it calls the sinks whenever less than that (and a margin) is left of it, so a batch is
delivered and marked within the lock it was read under. A sink that runs out of its budget
part-way raises ``Deferred`` with how many events it handled: those are marked delivered, and
the rest are read again in the next batch (and given to every sink again: at least once).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from jobgate.clock import Clock
from jobgate.core import encoding
from jobgate.core.canonical import isoformat_utc
from jobgate.core.models import OutboxEvent
from jobgate.runtime.leadership import Lease
from jobgate.store.sqlstore import Store

log = logging.getLogger("jobgate.events")


# What one batch may spend in a slow sink (the alert webhooks), and what the publisher's lock
# must still have left when the sinks are called: the budget, the other sinks and the marking.
SINK_BUDGET = timedelta(seconds=6)
LOCK_MARGIN = timedelta(seconds=2)


class EventSink(Protocol):
    def publish(self, events: Sequence[OutboxEvent]) -> None: ...


class Deferred(Exception):
    """Raised by a sink that handled only the first ``handled`` events of a batch (its time ran
    out); the publisher marks those delivered and reads the rest again next turn."""

    def __init__(self, handled: int, reason: str) -> None:
        super().__init__(f"{reason}; {handled} events handled, the rest next batch")
        self.handled = handled


def envelope(e: OutboxEvent) -> dict[str, object]:
    return {"event_id": e.event_id, "recorded_at": isoformat_utc(e.created_at), **e.payload}


def envelope_json(e: OutboxEvent) -> str:
    """``envelope(e)`` as JSON text, spliced from the stored payload text without decoding it
    (the payload is a non-empty JSON object and never holds the two envelope keys)."""
    head = f'{{"event_id":{e.event_id},"recorded_at":"{isoformat_utc(e.created_at)}"'
    body = e.payload_json
    if body.startswith("{") and body != "{}":
        return head + "," + body[1:]
    return encoding.dumps(envelope(e))


class JsonLinesSink:
    """Appends one JSON object per line and fsyncs once per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def publish(self, events: Sequence[OutboxEvent]) -> None:
        data = "".join(envelope_json(e) + "\n" for e in events)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


class LogSink:
    """Structured log lines with a stable ``action`` key: the event type."""

    def publish(self, events: Sequence[OutboxEvent]) -> None:
        for e in events:
            log.info(
                "%s %s",
                e.payload.get("event_type"),
                e.job_run_id or "",
                extra={
                    "action": e.event_type,
                    "job_run_id": e.job_run_id,
                    "tenant_id": e.tenant_id,
                    "event_id": e.event_id,
                },
            )


class RecordingSink:
    """Keeps what it was given, for tests and embedding applications."""

    def __init__(self) -> None:
        self.events: list[OutboxEvent] = []
        self._lock = threading.Lock()

    def publish(self, events: Sequence[OutboxEvent]) -> None:
        with self._lock:
            self.events.extend(events)


PUBLISHER_LOCK = "outbox-publisher"


def publish_once(
    store: Store,
    sinks: Sequence[EventSink],
    clock: Clock,
    *,
    batch: int = 500,
    lock: tuple[str, int] | None = None,
    still_held: Callable[[], bool] | None = None,
) -> int:
    """Deliver one batch; returns how many events were delivered (0 when the outbox is empty).

    Sinks are called outside any write transaction, so slow sink I/O never holds up workers.
    ``lock`` is the (owner, token) of the publisher lock: marking delivered is fenced by it, so
    a publisher that lost its lock cannot mark a batch another one is delivering.
    ``still_held`` is asked just before the sinks are called (the publisher renews its lock
    there); False means the lock is gone and nothing is delivered. A sink that raises
    ``Deferred`` shortens the batch to what it handled: later sinks get that part only.
    """
    with store.read() as tx:
        pending = tx.outbox_pending(batch)
    if not pending:
        return 0
    if still_held is not None and not still_held():
        return 0
    for sink in sinks:
        try:
            sink.publish(pending)
        except Deferred as cut:
            log.info("%s", cut, extra={"action": "outbox_batch_deferred", "handled": cut.handled})
            pending = pending[: cut.handled]
    if not pending:
        return 0
    with store.write() as tx:
        if lock is not None and not tx.lock_holds(PUBLISHER_LOCK, lock[0], lock[1], clock.now()):
            return 0
        tx.outbox_mark_delivered([e.event_id for e in pending], clock.now())
    return len(pending)


class OutboxPublisher:
    """Delivers the outbox while it holds the publisher lock; other publishers wait as standby.
    A ``Loop`` (``runtime.loops``), leader-only."""

    name = "outbox"
    leader_only = True

    def __init__(
        self,
        store: Store,
        sinks: Sequence[EventSink],
        clock: Clock,
        interval: timedelta = timedelta(milliseconds=200),
        lock_ttl: timedelta = timedelta(seconds=10),
        owner: str | None = None,
    ) -> None:
        import uuid

        self.store = store
        self.sinks = list(sinks)
        self.clock = clock
        self.interval = interval
        self.lock_ttl = lock_ttl
        self.owner = owner or f"publisher-{uuid.uuid4().hex[:12]}"
        self.delivered = 0
        self.batch = 2000  # events per delivery: each batch costs a write transaction to mark
        self._lease = Lease(store, PUBLISHER_LOCK, self.owner, lock_ttl)

    def _hold_lock(self) -> int | None:
        return self._lease.hold(self.clock.now())

    def _still_held(self, token: int) -> Callable[[], bool]:
        """Just before the sinks: renew the lock unless it has the sinks' budget and a margin
        left, so the batch is delivered and marked before it can expire."""
        needed = min(SINK_BUDGET + LOCK_MARGIN, self.lock_ttl)
        return lambda: self._lease.hold(self.clock.now(), min_remaining=needed) == token

    def _publish(self, token: int, batch: int) -> int:
        return publish_once(
            self.store,
            self.sinks,
            self.clock,
            lock=(self.owner, token),
            batch=batch,
            still_held=self._still_held(token),
        )

    def step(self, now: datetime) -> timedelta:
        """Deliver a batch while this publisher holds the lock; at once again after a full one
        (a backlog), otherwise after ``interval`` (let events gather for a turn)."""
        token = self._hold_lock()
        if token is None:
            return self.interval
        n = self._publish(token, self.batch)
        self.delivered += n
        return timedelta(0) if n == self.batch else self._lease.within_renewal(self.interval)

    def close(self) -> None:
        """Drain what is left so a clean shutdown leaves nothing undelivered, then hand over."""
        try:
            token = self._hold_lock()
            while token is not None and self._publish(token, 500):
                pass
            if token is not None:
                self._lease.release()
        except Exception:
            log.warning("outbox drain at shutdown failed; events stay queued", exc_info=True)
