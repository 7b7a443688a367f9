"""The alert webhook: an outbox sink that POSTs alerts (dead letters, SLA breaches,
escalations, safe mode, dependency outages) to the URLs in ``alerts.webhook_url``.

It sits in the outbox publisher's chain of sinks, after the others, so an alert is sent at
least once and only for an event that committed. Each body is the event envelope plus
``alert_id`` (the event id, also sent as ``Idempotency-Key``) so a receiver can drop the
repeats that at-least-once delivery implies.

A receiver that is down must not stop the publisher (seed 000 §58: "observability
unavailable: continue but local log"): a delivery is retried ``max_attempts`` times with
doubling backoff, and an alert still not accepted is appended (and fsynced) to the local
``alerts-undelivered.jsonl`` with a warning log line, before the publisher marks the batch
delivered; then the URL is given ``cooldown`` during which its alerts go to the local log
without waiting on it again. So an outage of the receiver costs the other sinks at most one
round of retries per cooldown, and no alert is ever lost: it reached the receiver or the log.

Why not a cursor of its own? On SQLite the outbox could keep a second cursor, but on
PostgreSQL a lower event id can commit after a higher one, which is why delivery there marks
each row; a second, independent delivery record would need a column per sink (a schema
change) or a visibility horizon. The bounded, cooled-down retry keeps one delivery record and
still bounds what a slow webhook can cost the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx

from jobgate.core.canonical import isoformat_utc
from jobgate.core.models import OutboxEvent
from jobgate.health import rules
from jobgate.health.settings import AlertSettings
from jobgate.runtime.outbox import envelope
from jobgate.store import codec

log = logging.getLogger("jobgate.alerts")

REMEMBERED = 10_000  # (alert, url) pairs already accepted: a redelivered batch is not re-sent
# Time one batch may spend on webhooks: well inside the publisher's 10 s lock, so a slow
# receiver never makes the publisher lose its lock and deliver the batch twice to every sink.
BATCH_BUDGET_SECONDS = 6.0


class WebhookAlertSink:
    def __init__(
        self,
        settings: AlertSettings,
        *,
        undelivered_log: Path,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.undelivered_log = undelivered_log
        self._sleep = sleep
        self._monotonic = monotonic
        self._now = now
        self._headers = {"Content-Type": "application/json", **dict(settings.headers)}
        self._cooling: dict[str, float] = {}  # url -> monotonic instant until which it is not tried
        self._accepted: OrderedDict[tuple[int, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self.delivered = 0
        self.logged = 0

    def publish(self, events: Sequence[OutboxEvent]) -> None:
        types = self.settings.event_types
        alerts = [e for e in events if e.event_type in types]
        if not alerts:
            return  # the common batch: nothing to alert on
        with self._lock:
            deadline = self._monotonic() + BATCH_BUDGET_SECONDS
            for event in alerts:
                body = rules.alert_body(envelope(event))
                data = codec.dumps(body).encode("utf-8")
                for url in self.settings.webhook_urls:
                    key = (event.event_id, url)
                    if key in self._accepted:
                        continue
                    problem = self._deliver(url, data, event.event_id, deadline)
                    if problem is None:
                        self._remember(key)
                        self.delivered += 1
                    else:
                        self._log_undelivered(url, body, problem)

    def _deliver(self, url: str, data: bytes, alert_id: int, deadline: float) -> str | None:
        """POST with retries; None once accepted (2xx), else why it was not."""
        s = self.settings
        if self._monotonic() < self._cooling.get(url, 0.0):
            return "not tried: the webhook failed recently (cooling down)"
        headers = {**self._headers, "Idempotency-Key": str(alert_id)}
        problem = ""
        for attempt in range(1, s.max_attempts + 1):
            if self._monotonic() >= deadline:
                spent = f"not tried: this batch spent its {BATCH_BUDGET_SECONDS:g} s on webhooks"
                return f"{spent} (last: {problem})" if problem else spent
            try:
                response = httpx.post(
                    url, content=data, headers=headers, timeout=s.timeout.total_seconds(), follow_redirects=False
                )
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}"
            else:
                if 200 <= response.status_code < 300:
                    self._cooling.pop(url, None)
                    return None
                problem = f"HTTP {response.status_code}"
                if not rules.retryable_status(response.status_code):
                    return f"refused: {problem}"  # the receiver is up; retrying will not change its answer
            if attempt < s.max_attempts:
                self._sleep(rules.retry_delay(attempt, s.backoff, s.max_backoff).total_seconds())
        self._cooling[url] = self._monotonic() + s.cooldown.total_seconds()
        log.warning(
            "alert webhook failed %d times (%s); alerts go to %s for %g s",
            s.max_attempts,
            problem,
            self.undelivered_log,
            s.cooldown.total_seconds(),
            extra={"action": "alert_webhook_down"},
        )
        return f"{problem} after {s.max_attempts} attempts"

    def _remember(self, key: tuple[int, str]) -> None:
        self._accepted[key] = None
        while len(self._accepted) > REMEMBERED:
            self._accepted.popitem(last=False)

    def _log_undelivered(self, url: str, body: dict[str, object], problem: str) -> None:
        """Append the alert to the local log (fsynced); if even that fails the batch stays
        undelivered and the publisher tries again, so the alert is not lost."""
        record = {
            "alert_id": body["alert_id"],
            "url": url,
            "problem": problem,
            "logged_at": isoformat_utc(self._now()),
            "alert": body,
        }
        self.undelivered_log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.undelivered_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (codec.dumps(record) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.logged += 1
        log.warning(
            "alert %s (%s) not delivered: %s; kept in %s",
            body["alert_id"],
            body.get("event_type"),
            problem,
            self.undelivered_log,
            extra={"action": "alert_undelivered", "alert_id": body["alert_id"]},
        )


def alert_sink(settings: AlertSettings, data_dir: Path) -> WebhookAlertSink | None:
    """The configured sink, or None when no webhook is configured."""
    if not settings.enabled:
        return None
    return WebhookAlertSink(settings, undelivered_log=settings.undelivered_log or data_dir / "alerts-undelivered.jsonl")
