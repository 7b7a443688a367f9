"""Schedule commands: manage schedules, preview their fires, and run the scheduler."""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.progress import Progress

from jobgate.cli import render
from jobgate.cli.args import PERSON, FiniteFloat, os_user, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.documents import parse_yaml, read_text
from jobgate.plugins.admission import admit as admit_plugins
from jobgate.runtime.loops import LoopThread
from jobgate.runtime.scheduler import Scheduler
from jobgate.scheduling.model import Schedule, ScheduleKind
from jobgate.scheduling.plan import MissReason, next_fires
from jobgate.service import schedules as service
from jobgate.service import triggers


def _params(values: tuple[str, ...]) -> dict[str, str]:
    from jobgate.cli.args import parse_params

    return parse_params(values)


@click.group("schedules")
def schedules() -> None:
    """Schedules attached to job definitions (cron, interval, batch window)."""


@schedules.command("list")
@tenant_option()
@pass_app
def schedules_list(app: AppContext, tenant: str) -> None:
    """List the schedules: rhythm, state and how far each is planned (`jobgate next` lists fires)."""
    with app.engine().store.read() as tx:
        items = tx.schedules_list(tenant)
    rows = [
        {
            "schedule_id": i.schedule.schedule_id,
            "job": i.schedule.job_definition_id,
            "kind": i.schedule.kind.value,
            "when": _when(i.schedule),
            "timezone": i.schedule.timezone,
            "misfire": i.schedule.misfire.value,
            "state": i.state,
            "planned_through": isoformat_utc(i.watermark),
            "owner": _owner(i.source),
            **({"last_error": i.last_error} if i.last_error else {}),
        }
        for i in items
    ]
    render.records(app.json_output, "schedules", rows)


def _owner(source: str) -> str:
    """Who keeps the schedule: its definition (``trigger_type`` + ``schedule_expression``), or
    whoever stored it (the CLI, the API, a seed file)."""
    return "definition" if source == service.DEFINITION_SOURCE else source


def _period(every: timedelta) -> str:
    """A period in the largest unit that divides it (``3650d``, ``90m``, ``1.5s``): never in
    scientific notation, which ``{:g}`` wrote for ten years (``3.1536e+08s``)."""
    seconds = every.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:.6f}".rstrip("0") + "s"


def _when(s: Schedule) -> str:
    """What makes the schedule fire, in a few words."""
    timing = s.cron or (f"every {_period(s.every)}" if s.every is not None else "")
    if s.kind is ScheduleKind.BATCH_WINDOW:
        return f"windows of {timing[6:]}"
    if s.kind is ScheduleKind.SAFE_MODE:
        return "at safe-mode activation" + (f", then {timing} while on" if timing else "")
    if s.kind.evented:
        return f"on event {s.event_type}"
    if s.kind.conditional:
        return f"when {s.condition}"
    if s.kind is ScheduleKind.CONFIGURATION:
        watched = f" ({', '.join(s.config_watch)})" if s.config_watch else ""
        return f"on new config {s.config_profile}{watched}"
    return timing


@schedules.command("add")
@click.argument("schedule_id")
@click.argument("job")
@click.option("--cron", help="five-field cron expression or @daily-style macro")
@click.option("--every", "every_seconds", type=float, help="interval in seconds")
@click.option("--window", "window_seconds", type=float, help="batch window length in seconds")
@click.option("--event", "event_type", help="fire on each posted event of this type (jobgate events emit)")
@click.option("--queue", is_flag=True, help="with --event: record the trigger as a queue trigger")
@click.option("--payload-param", "payload_params", multiple=True, help="event data field passed on as a param")
@click.option("--adaptive", is_flag=True, help="with --every: a recommender may move it within the bounds")
@click.option("--min-every", "min_every_seconds", type=float, help="adaptive: the shortest interval allowed")
@click.option("--max-every", "max_every_seconds", type=float, help="adaptive: the longest interval allowed")
@click.option("--condition", help="policy trigger: '<fact> <op> <number>', fired once per episode")
@click.option("--on-config", "config_profile", help="fire when a new snapshot of this configuration profile is active")
@click.option("--alert", is_flag=True, help="with --condition: record the trigger as an alert trigger")
@click.option("--watch", multiple=True, help="with --on-config: fire only when this profile key changes")
@click.option(
    "--safe-mode", "safe_mode", is_flag=True, help="fire at each safe-mode activation (and --cron/--every while on)"
)
@click.option("--tz", "timezone", default="UTC", show_default=True, help="IANA timezone of the cron expression")
@click.option("--anchor", help="ISO 8601 instant the interval or windows count from")
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE", help="may use {{current_date}} etc.")
@click.option(
    "--misfire",
    default="fire_once",
    show_default=True,
    type=click.Choice(["fire_once", "fire_all", "skip"]),
    help="what late slots do after downtime: one run, each its run, or none",
)
@click.option(
    "--grace-seconds",
    "misfire_grace_seconds",
    type=float,
    default=60,
    show_default=True,
    help="how late a slot may fire and still count as on time, in seconds",
)
@click.option(
    "--max-catchup",
    type=int,
    default=100,
    show_default=True,
    help="after downtime, at most this many late slots fire under fire_all",
)
@click.option(
    "--overlap",
    default="allow",
    show_default=True,
    type=click.Choice(["allow", "forbid", "replace"]),
    help="a fire while the previous run still runs: run beside it, skip, or replace it",
)
@tenant_option()
@click.option("--allow-pending", is_flag=True, help="store it paused until its definition is approved")
@pass_app
def schedules_add(
    app: AppContext, /, schedule_id: str, job: str, params: tuple[str, ...], allow_pending: bool, **options: Any
) -> None:
    """Add (or update) a schedule for JOB. Refused when it could not fire (params the definition
    refuses, an unapproved definition: see --allow-pending)."""
    now = app.engine().clock.now()
    doc = {k: v for k, v in options.items() if v is not None and v != () and v is not False}
    doc.update(id=schedule_id, job=job, params=_params(params))
    for key in ("payload_params", "watch"):
        if key in doc:
            doc[key] = list(doc[key])
    doc["tenant"] = doc.pop("tenant", "default")
    schedule = service.schedule_from_document(doc, now=now, source="cli")
    warnings: list[str] = []
    (outcome,) = service.put_schedules(
        app.engine(), [schedule], source="cli", now=now, actor=os_user(),
        allow_pending=allow_pending, warnings=warnings,
    )  # fmt: skip
    _warn(app, warnings)
    said = {"created": "added", "updated": "updated", "unchanged": "unchanged (already stored as given)"}
    _say(
        app,
        {
            "schedule_id": schedule_id,
            "created": outcome is service.PutOutcome.CREATED,
            "outcome": outcome.value,
            "warnings": warnings,
        },
        f"schedule {schedule_id} {said[outcome.value]}",
    )


def _warn(app: AppContext, warnings: list[str]) -> None:
    if not app.json_output:
        for line in warnings:
            click.echo(f"warning: {line}", err=True)


@schedules.command("apply")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--allow-pending", is_flag=True, help="store schedules of unapproved definitions paused until approved")
@pass_app
def schedules_apply(app: AppContext, path: Path, allow_pending: bool) -> None:
    """Seed schedules from a YAML file (``schedules: [{id, job, cron, params, ...}]``); all or none."""
    document = parse_yaml(read_text(path, error=ValidationError), source=str(path), error=ValidationError)
    entries = document.get("schedules") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValidationError("expected a top-level 'schedules' list", field="schedules", source=str(path))
    now = app.engine().clock.now()
    items = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValidationError("each schedule is a mapping", field="schedules", source=str(path))
        try:
            items.append(service.schedule_from_document(entry, now=now, source=str(path)))
        except ValidationError as exc:
            raise ValidationError(exc.message, field=exc.field, source=f"{path}: {exc.source}") from None
    warnings: list[str] = []
    outcomes = service.put_schedules(
        app.engine(), items, source=str(path.name), now=now, actor=os_user(),
        allow_pending=allow_pending, warnings=warnings,
    )  # fmt: skip
    _warn(app, warnings)
    new = sum(o is service.PutOutcome.CREATED for o in outcomes)
    same = sum(o is service.PutOutcome.UNCHANGED for o in outcomes)
    _say(
        app,
        [
            {"schedule_id": s.schedule_id, "created": o is service.PutOutcome.CREATED, "outcome": o.value}
            for s, o in zip(items, outcomes, strict=True)
        ],
        f"{len(items)} schedules applied ({new} new" + (f", {same} unchanged)" if same else ")"),
    )


@schedules.command("recommend")
@click.argument("schedule_id")
@click.option(
    "--every", "every_seconds", type=FiniteFloat(-1e9, 1e9), required=True, help="the proposed interval in seconds"
)
@click.option("--by", "source", type=PERSON, required=True, help="who recommends it (e.g. the DSAIL recommender)")
@click.option("--reason", help="why this interval is recommended")
@tenant_option()
@pass_app
def schedules_recommend(
    app: AppContext, schedule_id: str, every_seconds: float, source: str, reason: str | None, tenant: str
) -> None:
    """Propose a new interval for an adaptive schedule: applied within its bounds, refused outside;
    recorded either way. A recommendation can do nothing else."""
    service.recommend_interval(
        app.engine(),
        tenant_id=tenant,
        schedule_id=schedule_id,
        every=timedelta(seconds=every_seconds),
        source=source,
        reason=reason,
    )
    _say(
        app,
        {"schedule_id": schedule_id, "every_seconds": every_seconds},
        f"schedule {schedule_id}: every {every_seconds:g}s",
    )


@schedules.command("changes")
@click.argument("schedule_id")
@tenant_option()
@pass_app
def schedules_changes(app: AppContext, schedule_id: str, tenant: str) -> None:
    """Every change of a schedule: created, updated, paused, resumed, deleted (who, when, from
    what to what) and each recommended interval, applied or refused."""
    with app.engine().store.read() as tx:
        items = tx.changes_list(tenant, schedule_id)
    rows = [
        {"at": isoformat_utc(c.changed_at), "field": c.field, "from": c.old_value, "to": c.new_value,
         "accepted": c.accepted, "source": c.source, "reason": c.reason}
        for c in items
    ]  # fmt: skip
    render.records(app.json_output, f"changes of {schedule_id}", rows)


@schedules.command("misses")
@click.argument("schedule_id")
@click.option("--reason", type=click.Choice([r.value for r in MissReason]), help="only misses for this reason")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="at most this many misses")
@click.option("--after", help="only misses after this instant (the last one of the previous page)")
@tenant_option()
@pass_app
def schedules_misses(
    app: AppContext, schedule_id: str, reason: str | None, limit: int, after: str | None, tenant: str
) -> None:
    """The slots a schedule owed and did not fire, with why (coalesced into a catch-up run,
    beyond max_catchup, skipped, paused, refused, overlap, edited), oldest first."""
    since = None if after is None else service.parse_instant(after, field="after")
    page = service.misses(app.engine(), tenant, schedule_id, reason=reason, after=since, limit=limit)
    rows = [
        {"fire_at": isoformat_utc(m.fire_at), "reason": m.reason, "recorded_at": isoformat_utc(m.recorded_at)}
        for m in page
    ]
    render.records(app.json_output, f"misses of {schedule_id}", rows)


@schedules.command("pause")
@click.argument("schedule_id")
@tenant_option()
@pass_app
def schedules_pause(app: AppContext, schedule_id: str, tenant: str) -> None:
    """Pause a schedule: its slots are recorded as paused misses and never run."""
    _pause(app, schedule_id, tenant, True)


@schedules.command("resume")
@click.argument("schedule_id")
@tenant_option()
@pass_app
def schedules_resume(app: AppContext, schedule_id: str, tenant: str) -> None:
    """Resume a paused schedule: its slots fire again from now (those of the pause stay missed, paused)."""
    _pause(app, schedule_id, tenant, False)


def _pause(app: AppContext, schedule_id: str, tenant: str, paused: bool) -> None:
    engine = app.engine()
    changed = service.set_paused(engine, tenant, schedule_id, paused, now=engine.clock.now(), actor=os_user())
    word = "paused" if paused else "resumed"
    line = f"schedule {schedule_id} {word}" if changed else f"schedule {schedule_id} was already {word}"
    _say(app, {"schedule_id": schedule_id, "paused": paused, "changed": changed}, line)


@schedules.command("delete")
@click.argument("schedule_id")
@tenant_option()
@pass_app
def schedules_delete(app: AppContext, schedule_id: str, tenant: str) -> None:
    """Delete a schedule and its misses (its changes and audit entries stay); a definition's own
    schedule is changed by applying the definition."""
    service.delete(app.engine(), tenant, schedule_id, now=app.engine().clock.now(), actor=os_user())
    _say(app, {"schedule_id": schedule_id, "deleted": True}, f"schedule {schedule_id} deleted")


@click.command("next")
@click.argument("job")
@click.option("--count", default=5, show_default=True, type=click.IntRange(1, 1000), help="how many fires to list")
@tenant_option()
@pass_app
def next_command(app: AppContext, job: str, count: int, tenant: str) -> None:
    """The next fire times of JOB's schedules, in each schedule's timezone and in UTC (a paused
    schedule's are marked: they are recorded as missed, not run)."""
    with app.engine().store.read() as tx:
        items = [i for i in tx.schedules_list(tenant) if i.schedule.job_definition_id == job]
        period = tx.safe_mode_current(tenant)
    if not items:
        raise NotFoundError(f"no schedule for {job!r}", field="job")
    now = app.engine().clock.now()
    since = None if period is None else period.activated_at
    rows = []
    for i in items:
        for slot in next_fires(i.schedule, max(now, i.watermark), count, safe_mode_since=since):
            rows.append(
                {
                    "schedule_id": i.schedule.schedule_id,
                    # a paused schedule's slots are recorded as missed, not run: said on each row
                    "state": "paused: not run" if i.schedule.paused else "active",
                    "local": slot.fire_at.astimezone(i.schedule.zone).isoformat(),
                    "utc": isoformat_utc(slot.fire_at),
                    "window": None
                    if slot.window is None
                    else [isoformat_utc(slot.window.start), isoformat_utc(slot.window.end)],
                }
            )
    render.records(app.json_output, f"next fires of {job}", rows)


@click.group("events")
def events() -> None:
    """Events posted to jobgate: they fire the schedules subscribed to their type."""


@events.command("emit")
@click.argument("event_type")
@click.option(
    "--event-id",
    "--id",
    "event_id",
    required=True,
    help="the source's event id (event_id in the API): a second emit of it is a no-op",
)
@click.option("--data", default="{}", show_default=True, help="a JSON object, or @file.json")
@click.option("--by", "requested_by", type=PERSON, help="who posts it (default: $USER)")
@tenant_option()
@pass_app
def events_emit(
    app: AppContext, event_type: str, event_id: str, data: str, requested_by: str | None, tenant: str
) -> None:
    """Post an event of EVENT_TYPE; prints what each subscribed schedule made of it."""
    document = _json_object(data)
    fires = triggers.emit_event(
        app.engine(),
        event_type=event_type,
        event_id=event_id,
        data=document,
        tenant_id=tenant,
        actor=requested_by or os_user(),
    )
    rows = [
        {
            "schedule_id": f.schedule_id,
            "job": f.job_definition_id,
            "job_run_id": f.job_run_id,
            "created": f.created,
            "refused": f.refused,
        }
        for f in fires
    ]
    if app.json_output:
        render.emit_json(rows)
    elif not rows:
        render.out.print(f"no schedule subscribes to {event_type!r}")
    else:
        render.table(f"event {event_type} {event_id}", list(rows[0]), [tuple(r.values()) for r in rows])
    _exit_if_all_refused([(str(r["schedule_id"]), r["refused"]) for r in rows])


def _exit_if_all_refused(outcomes: Sequence[tuple[str, object]]) -> None:
    """Exit 1 when every schedule an event or a fact fired refused its run (found by a review:
    the command exited 0, so a script saw success where nothing was made); a refusal beside
    runs that were made is said on stderr, the exit stays 0."""
    refused = [(schedule, why) for schedule, why in outcomes if why]
    for schedule, why in refused:
        render.err.print(f"schedule {schedule} refused: {why}", markup=False)
    if refused and len(refused) == len(outcomes):
        raise SystemExit(1)


@click.group("facts")
def facts() -> None:
    """Recorded facts: numeric observations that policy schedules' conditions watch."""


@facts.command("record")
@click.argument("name")
@click.argument("value", type=float)
@click.option("--source", default="cli", show_default=True, help="where the observation comes from")
@tenant_option()
@pass_app
def facts_record(app: AppContext, name: str, value: float, source: str, tenant: str) -> None:
    """Record NAME = VALUE; a policy whose condition becomes true with it fires (once per episode)."""
    fires = triggers.record_fact(app.engine(), tenant_id=tenant, name=name, value=value, source=source, actor=os_user())
    _policy_fires(app, fires, f"{name} = {value:g} recorded")


@click.group("alerts")
def alerts() -> None:
    """Alerts: recorded as facts (alert.NAME is 1 while firing), watched by alert schedules."""


@alerts.command("post")
@click.argument("name")
@click.option(
    "--status",
    type=click.Choice(["firing", "resolved"]),
    default="firing",
    show_default=True,
    help="the alert's state: firing starts an episode, resolved ends it",
)
@click.option("--data", default="{}", show_default=True, help="a JSON object (numeric fields become facts), or @file")
@tenant_option()
@pass_app
def alerts_post(app: AppContext, name: str, status: str, data: str, tenant: str) -> None:
    """Post an alert (firing or resolved): alert schedules fire on its episodes."""
    fires = triggers.post_alert(
        app.engine(),
        tenant_id=tenant,
        name=name,
        firing=status == "firing",
        data=_json_object(data),
        actor=os_user(),
    )
    _policy_fires(app, fires, f"alert {name} {status}")


def _policy_fires(app: AppContext, fires: list[triggers.PolicyFire], line: str) -> None:
    rows = [
        {"schedule_id": f.schedule_id, "job": f.job_definition_id, "fired": f.fired, "job_run_id": f.job_run_id,
         "refused": f.refused}
        for f in fires
    ]  # fmt: skip
    if app.json_output:
        render.emit_json(rows)
    else:
        fired = [r for r in rows if r["fired"]]
        render.out.print(line + (f"; fired {', '.join(str(r['schedule_id']) for r in fired)}" if fired else ""))
    decided = [(str(r["schedule_id"]), r["refused"]) for r in rows if r["fired"] or r["refused"]]
    _exit_if_all_refused(decided)


@click.command("backfill")
@click.argument("job")
@click.option("--from", "start", required=True, help="ISO 8601 instant, inclusive")
@click.option("--to", "end", required=True, help="ISO 8601 instant, exclusive")
@click.option("--schedule", "schedule_id", help="which of JOB's schedules gives the slots")
@click.option("--dry-run", is_flag=True, help="list the slots and their existing runs; store nothing")
@click.option("--by", "requested_by", type=PERSON, help="who requests it (default: $USER)")
@tenant_option()
@pass_app
def backfill_command(
    app: AppContext,
    job: str,
    start: str,
    end: str,
    schedule_id: str | None,
    dry_run: bool,
    requested_by: str | None,
    tenant: str,
) -> None:
    """One run per slot of JOB's schedule in [--from, --to); a slot that has a run gets no other."""
    engine = app.engine()
    with Progress(transient=True, disable=app.json_output) as bar:
        task = bar.add_task(f"backfilling {job}", total=None)
        result = service.backfill(
            engine,
            tenant_id=tenant,
            job_definition_id=job,
            start=service.parse_instant(start, field="--from"),
            end=service.parse_instant(end, field="--to"),
            schedule_id=schedule_id,
            dry_run=dry_run,
            actor=requested_by or os_user(),
            progress=lambda n: bar.advance(task, n),
        )
    rows = [
        {
            "fire_at": isoformat_utc(s.fire_at),
            "window": None if s.window is None else [isoformat_utc(s.window.start), isoformat_utc(s.window.end)],
            "job_run_id": s.job_run_id,
            "created": s.created,
        }
        for s in result
    ]
    if app.json_output:
        render.emit_json(rows)
        return
    created = sum(s.created for s in result)
    existing = sum(1 for s in result if s.job_run_id is not None and not s.created)
    if dry_run:
        render.table(
            f"backfill of {job} (dry run: nothing stored)",
            ["slot (UTC)", "window", "run"],
            [
                (
                    isoformat_utc(s.fire_at),
                    "" if s.window is None else f"{isoformat_utc(s.window.start)} to {isoformat_utc(s.window.end)}",
                    s.job_run_id or "would be created",
                )
                for s in result
            ],
        )
        render.out.print(
            f"{len(result)} slots: {existing} already have a run, {len(result) - existing} would be created"
        )
    else:
        render.out.print(f"{len(result)} slots: {created} runs created, {existing} already had one")


def _json_object(data: str) -> dict[str, Any]:
    """``--data``: a JSON object given inline or as ``@file.json``."""
    text = read_text(Path(data[1:]), error=ValidationError) if data.startswith("@") else data
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"not JSON: {exc}", field="--data") from None
    if not isinstance(document, dict):
        raise ValidationError("must be a JSON object", field="--data")
    return document


@click.command("scheduler")
@click.option(
    "--lease-seconds",
    type=FiniteFloat(1, 3600),
    default=10,
    show_default=True,
    help="how long leadership is held between renewals, in seconds",
)
@click.option("--once", is_flag=True, help="one pass (fire what is due), then exit")
@click.option("--migrate", "migrate_first", is_flag=True, help="bring an older database's schema up to date first")
@click.option("--redis-url", metavar="URL", help="subscribe to pub/sub triggers here (over the config's pubsub.url)")
@pass_app
def scheduler_command(
    app: AppContext, lease_seconds: float, once: bool, migrate_first: bool, redis_url: str | None
) -> None:
    """Fire due schedules while leading; wait as standby while another scheduler leads."""
    from jobgate.cli.serve import load_definitions_at_start
    from jobgate.runtime.pubsub import pubsub_source

    app.setup_logging()
    admit_plugins(app.config().plugins)  # verified before anything starts; a refusal names the file
    app.may_create = migrate_first
    engine = app.engine()
    load_definitions_at_start(engine)  # the configured definitions: folders, as jobgate serve
    scheduler = Scheduler(engine, lease=timedelta(seconds=lease_seconds))
    if once:
        try:
            result = scheduler.tick()
        finally:
            scheduler.release()
        _say(
            app,
            {"leader": result.leader, "fired": result.fired, "missed": result.missed},
            f"fired {result.fired}, missed {result.missed}"
            if result.leader
            else "standby: another scheduler leads, so this pass fired nothing",
        )
        return

    loop = LoopThread(scheduler, engine.clock)
    pubsub = pubsub_source(engine, redis_url)  # seed 004's pub/sub triggers, beside the scheduler

    def handle(signum: int, _frame: FrameType | None) -> None:
        loop.stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    logging.getLogger("jobgate.cli").info(
        "scheduler %s (pid %d) on %s",
        scheduler.owner,
        os.getpid(),
        engine.store.safe_url,
        extra={"action": "scheduler_started", "owner": scheduler.owner},
    )
    if pubsub is not None:
        pubsub.start()
    try:
        loop.run()
    finally:
        if pubsub is not None:
            pubsub.stop()


def _say(app: AppContext, data: Any, line: str) -> None:
    if app.json_output:
        render.emit_json(data)
    else:
        render.out.print(line)
