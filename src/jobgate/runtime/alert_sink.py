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

Time: one batch spends at most ``outbox.SINK_BUDGET`` (6 s) on webhooks, which the publisher's
lock (10 s, renewed just before the sinks are called) covers, so a slow receiver never makes
the publisher lose its lock and deliver the batch twice. An attempt starts only if its whole
timeout fits in what is left of the budget (a timeout is at most the budget), and a backoff
sleep is cut to leave it that time. An alert whose turn comes after the budget is spent is
not a failure of the receiver: the sink raises ``outbox.Deferred`` and the publisher marks
only the events before it delivered; the rest come again in the next batch, where the retries
already made count (so a receiver that stays down still reaches the local log after
``max_attempts``). The first alert of a batch always gets an attempt, so every batch moves on.
The local log and every log line name a URL by scheme and host only (``telemetry.redact``):
a webhook's path or query can be its secret.

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

from jobgate.config.health import AlertSettings
from jobgate.core import encoding
from jobgate.core.canonical import isoformat_utc
from jobgate.core.models import OutboxEvent
from jobgate.health import rules
from jobgate.redact import shown_url
from jobgate.runtime.outbox import SINK_BUDGET, Deferred, envelope

log = logging.getLogger("jobgate.alerts")

REMEMBERED = 10_000  # (alert, url) pairs already accepted: a redelivered batch is not re-sent
# Time one batch may spend on webhooks: inside the publisher's 10 s lock (see the docstring).
BATCH_BUDGET_SECONDS = SINK_BUDGET.total_seconds()


class _OutOfTime(Exception):
    """This alert's turn came after the batch's budget was spent: it waits for the next batch."""


class WebhookAlertSink:
    def __init__(
        self,
        settings: AlertSettings,
        *,
        undelivered_log: Path,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        budget: float | None = None,
    ) -> None:
        self.settings = settings
        self.undelivered_log = undelivered_log
        self.budget = BATCH_BUDGET_SECONDS if budget is None else budget
        self._sleep = sleep
        self._monotonic = monotonic
        self._now = now
        self._headers = {"Content-Type": "application/json", **dict(settings.headers)}
        # An attempt always fits a fresh budget, with room to spare: the first attempt of a batch
        # is made unconditionally (so every batch moves on), and it must not overrun the budget.
        self._timeout = min(settings.timeout.total_seconds(), self.budget * 0.8)
        self._attempted = False  # has this batch made an attempt yet
        self._cooling: dict[str, float] = {}  # url -> monotonic instant until which it is not tried
        self._accepted: OrderedDict[tuple[int, str], None] = OrderedDict()
        self._tries: OrderedDict[tuple[int, str], tuple[int, str]] = OrderedDict()  # attempts made, last problem
        self._lock = threading.Lock()
        self.delivered = 0
        self.logged = 0
        self.deferred = 0  # batches cut short by the budget

    def publish(self, events: Sequence[OutboxEvent]) -> None:
        types = self.settings.event_types
        if not any(e.event_type in types for e in events):
            return  # the common batch: nothing to alert on
        with self._lock:
            deadline = self._monotonic() + self.budget
            self._attempted = False
            for index, event in enumerate(events):
                if event.event_type not in types:
                    continue
                body = rules.alert_body(envelope(event))
                data = encoding.dumps(body).encode("utf-8")
                for number, url in enumerate(self.settings.webhook_urls, start=1):
                    key = (event.event_id, url)
                    if key in self._accepted:
                        continue
                    try:
                        problem = self._deliver(url, data, event.event_id, deadline)
                    except _OutOfTime:
                        self.deferred += 1
                        raise Deferred(index, f"alert webhooks spent this batch's {self.budget:g} s") from None
                    if problem is None:
                        self._remember(key)
                        self.delivered += 1
                    else:
                        self._log_undelivered(url, number, body, problem)

    def _deliver(self, url: str, data: bytes, alert_id: int, deadline: float) -> str | None:
        """POST with retries; None once accepted (2xx), else why it was not. Raises
        ``_OutOfTime`` when the next attempt does not fit in the batch's budget (the attempts
        made so far are kept for the next batch)."""
        s = self.settings
        if self._monotonic() < self._cooling.get(url, 0.0):
            return "not tried: the webhook failed recently (cooling down)"
        headers = {**self._headers, "Idempotency-Key": str(alert_id)}
        key = (alert_id, url)
        made, problem = self._tries.pop(key, (0, ""))
        for attempt in range(made + 1, s.max_attempts + 1):
            if attempt > 1:  # the backoff, cut to leave the attempt its whole timeout
                delay = rules.retry_delay(attempt - 1, s.backoff, s.max_backoff).total_seconds()
                self._sleep(max(0.0, min(delay, deadline - self._monotonic() - self._timeout)))
            # Deferred only once this batch has made an attempt: otherwise a carried-over alert
            # whose backoff ate the (overshooting) sleep could be deferred at every batch, and the
            # outbox would never move again.
            if self._attempted and deadline - self._monotonic() < self._timeout:
                self._keep_tries(key, attempt - 1, problem)
                raise _OutOfTime
            self._attempted = True
            try:
                response = httpx.post(url, content=data, headers=headers, timeout=self._timeout, follow_redirects=False)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}"
            else:
                if 200 <= response.status_code < 300:
                    self._cooling.pop(url, None)
                    return None
                problem = f"HTTP {response.status_code}"
                if not rules.retryable_status(response.status_code):
                    return f"refused: {problem}"  # the receiver is up; retrying will not change its answer
        self._cooling[url] = self._monotonic() + s.cooldown.total_seconds()
        log.warning(
            "alert webhook %s failed %d times (%s); its alerts go to %s for %g s",
            shown_url(url),
            s.max_attempts,
            problem,
            self.undelivered_log,
            s.cooldown.total_seconds(),
            extra={"action": "alert_webhook_down", "webhook": shown_url(url)},
        )
        return f"{problem} after {s.max_attempts} attempts"

    def _keep_tries(self, key: tuple[int, str], made: int, problem: str) -> None:
        self._tries[key] = (made, problem)
        while len(self._tries) > REMEMBERED:
            self._tries.popitem(last=False)

    def _remember(self, key: tuple[int, str]) -> None:
        self._accepted[key] = None
        while len(self._accepted) > REMEMBERED:
            self._accepted.popitem(last=False)

    def _log_undelivered(self, url: str, number: int, body: dict[str, object], problem: str) -> None:
        """Append the alert to the local log (fsynced); if even that fails the batch stays
        undelivered and the publisher tries again, so the alert is not lost. The URL is kept
        as scheme and host, with its position in ``alerts.webhook_url`` (1-based)."""
        record = {
            "alert_id": body["alert_id"],
            "url": shown_url(url),
            "webhook": number,
            "problem": problem,
            "logged_at": isoformat_utc(self._now()),
            "alert": body,
        }
        self.undelivered_log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.undelivered_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (encoding.dumps(record) + "\n").encode("utf-8"))
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
