"""``jobgate definitions approve|revoke|approval`` and ``jobgate audit list``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from jobgate.cli import render
from jobgate.cli.args import PERSON, os_user, tenant_option
from jobgate.cli.context import AppContext, pass_app
from jobgate.cli.main import definitions
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.evidence import keys as evidence_keys
from jobgate.service import approvals, audit


@click.command("approve")
@click.argument("job")
@click.option("--note", help="why it is approved (recorded)")
@click.option("--digest", help="the content digest you reviewed: refused if the current version differs")
@click.option("--code-digest", help="the code digest you reviewed: refused if the code here differs")
@click.option(
    "--by", "by", type=PERSON, help="who approves (default: the OS user); four eyes compares it with the applier"
)
@tenant_option()
@pass_app
def approve(
    app: AppContext,
    job: str,
    note: str | None,
    digest: str | None,
    code_digest: str | None,
    by: str | None,
    tenant: str,
) -> None:
    """Approve the current content of JOB (its digest, as stored) and the code it executes on
    this host (its code digest): from now on it may run. Approving again after a code change
    binds the new code."""
    from jobgate.plugins.admission import admit as admit_plugins

    admit_plugins(app.config().plugins)  # the code approved may be an admitted plugin's, found as apply finds it
    actor = by or os_user()
    a = approvals.approve(app.engine(), tenant, job, actor=actor, note=note, digest=digest, code_digest=code_digest)
    data = {
        "job_definition_id": job,
        "version": a.version,
        "digest": a.digest,
        "code_digest": a.code_digest,
        "code_identity": a.code_identity,
        "approved_by": a.approved_by,
        "approval_id": a.approval_id,
    }
    if app.json_output:
        render.emit_json(data)
    else:
        print(f"{job} v{a.version} approved by {a.approved_by}")
        print(f"  content {a.digest}")
        print(f"  code    {a.code_digest}")
        for part, value in sorted((a.code_identity or {}).items()):
            print(f"    {part}: {value}")


@click.command("revoke")
@click.argument("job")
@click.option("--reason", help="why (recorded)")
@tenant_option()
@pass_app
def revoke(app: AppContext, job: str, reason: str | None, tenant: str) -> None:
    """Revoke JOB's approval: new triggers are refused, runs not yet started are cancelled."""
    done = approvals.revoke(app.engine(), tenant, job, actor=os_user(), reason=reason)
    if app.json_output:
        render.emit_json(
            {
                "job_definition_id": job,
                "revoked": [a.digest for a in done.revoked],
                "cancelled_runs": done.cancelled_runs,
            }
        )
    else:
        print(
            f"{job}: approval revoked; {len(done.cancelled_runs)} queued runs cancelled (a run executing now"
            " finishes its attempt and is not started again)"
        )


@click.command("approval")
@click.argument("job")
@tenant_option()
@pass_app
def approval(app: AppContext, job: str, tenant: str) -> None:
    """Who approved what, and whether the current content still matches it."""
    from jobgate.plugins.admission import admit as admit_plugins

    admit_plugins(app.config().plugins)  # a plugin's code is read where its verified files are
    st = approvals.status(app.engine(), tenant, job)
    rows = [
        {
            "approval_id": a.approval_id,
            "digest": a.digest,
            "version": a.version,
            "code_digest": a.code_digest,
            "approved_by": a.approved_by,
            "approved_at": isoformat_utc(a.approved_at),
            "revoked": "" if a.revoked_at is None else f"{a.revoked_by} at {isoformat_utc(a.revoked_at)}",
            "current": a.digest == st.current_digest,
        }
        for a in st.history
    ]
    code = None if st.code is None else st.code.digest
    if app.json_output:
        render.emit_json(
            {
                "job_definition_id": job,
                "current_version": st.current_version,
                "current_digest": st.current_digest,
                "current_code_digest": code,
                "code_problem": st.code_problem,
                "approved": st.approved,
                "matches": st.matches,
                "changed": list(st.changed),  # the API's name: 'content', or the code's parts
                "code_changed": list(st.code_changed),
                "history": rows,
            }
        )
        return
    if not st.approved:
        verdict = "content NOT approved: it will not run"
    elif not st.code_matches:
        changed = ", ".join(st.code_changed) or st.code_problem or "not recorded"
        verdict = f"content approved, code NOT ({changed}): its runs are held until someone approves it again"
    else:
        verdict = "content and code approved"
    print(f"{job} v{st.current_version}: {verdict}")
    print(f"  content {st.current_digest}")
    print(f"  code    {code or st.code_problem}")
    render.records(False, "approvals", rows)


@click.group("audit")
def audit_group() -> None:
    """The audit log: every material action and every refusal, hash-chained per tenant."""


@audit_group.command("list")
@tenant_option()
@click.option("--actor", help="only entries by this actor")
@click.option("--action", help="only entries of this action (e.g. run.refused)")
@click.option("--target", help="a target id (run, definition, request, token ...)")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1, 100_000), help="at most this many entries"
)
@click.option(
    "--after",
    "after_seq",
    type=click.IntRange(0),
    help="the entries after this position, oldest first (default: the newest --limit entries)",
)
@pass_app
def audit_list(
    app: AppContext,
    tenant: str,
    actor: str | None,
    action: str | None,
    target: str | None,
    limit: int,
    after_seq: int | None,
) -> None:
    """The audit log's entries in chain order: the newest ``--limit`` of them, or with ``--after``
    a page from that position on (a full page says how to read on)."""
    wanted = audit.AuditFilter(
        tenant_id=tenant,
        actor=actor,
        action=action,
        target_id=target,
        limit=limit,
        after_seq=after_seq or 0,
        newest=after_seq is None,
    )
    entries = audit.search(app.engine(), wanted)
    if len(entries) == limit and not app.json_output:
        if after_seq is None:
            hint = f"the newest {limit} entries; older ones: --after 0 (or a higher --limit)"
        else:
            hint = f"{limit} entries from {after_seq + 1}; the next page: --after {entries[-1].seq}"
        render.err.print(hint)
    rows = [
        {
            "seq": e.seq,
            "at": isoformat_utc(e.event.at),
            "actor": e.event.actor,
            "action": e.event.action,
            "target": f"{e.event.target_type}:{e.event.target_id}",
            "reason": e.event.reason,
            "payload": dict(e.event.payload),
            "entry_hash": e.entry_hash,
        }
        for e in entries
    ]
    render.records(app.json_output, "audit", rows, columns=["seq", "at", "actor", "action", "target", "reason"])


@audit_group.command("verify")
@tenant_option(default=None, help="one tenant's chain (default: every chain)")
@click.option("--offline", is_flag=True, help="do not read the anchor sink (a warning says the anchors are unchecked)")
@click.option(
    "--records",
    is_flag=True,
    help="also recompute every sealed record (runs, definitions, approvals, ...) from its rows",
)
@pass_app
def audit_verify(app: AppContext, tenant: str | None, offline: bool, records: bool) -> None:
    """Recompute every chain, its head and its anchors, and check the anchors against the
    sink's copies (a file, or an HTTP sink read back); exit 1 naming the first entry that
    fails, or when the sink cannot be read (``--offline`` to verify the database alone).
    With ``--records``, every sealed record is recomputed from its rows as well, and the first
    record that differs from its seal is named with the part and column."""
    from jobgate.evidence import anchors, sinks

    engine = app.engine()
    sink = sinks.sink_for(engine.config)
    keys = evidence_keys.trusted_keys(engine.config)
    if not keys:
        render.err.print(
            "warning: no evidence key: the anchors' signatures are not checked (jobgate keys evidence --create)",
            markup=False,
        )
    witnessed = None
    if offline:
        render.err.print("warning: --offline: the anchors are not checked against the sink", markup=False)
    else:
        try:
            witnessed = sink.records()
        except sinks.SinkUnreadable as exc:  # fails closed
            raise sinks.SinkUnreadable(
                f"{exc.message}: the anchors cannot be checked (--offline verifies the database alone)",
                field=exc.field,
            ) from None
    with engine.store.read() as tx:
        tenants = (
            [tenant] if tenant else sorted(set(tx.audit_tenants()) | {str(r["tenant_id"]) for r in witnessed or ()})
        )  # a chain wiped out entirely is still named by its anchors in the sink
        now = engine.clock.now()
        results = [anchors.verify_configured(tx, engine.config, t, sink_records=witnessed, now=now) for t in tenants]
    render.records(
        app.json_output,
        "audit chains",
        [
            {
                "tenant": r.tenant_id,
                "entries": r.entries,
                "anchors": r.anchors,
                "ok": r.ok,
                "first_bad_seq": r.first_bad_seq,
                "problem": r.problem,
            }
            for r in results
        ],
    )
    failed = [r for r in results if not r.ok]
    reports = audit.verify_records(engine, [tenant] if tenant else None) if records else []
    for report in reports:
        _render_records(app, report)
    if failed:
        first = failed[0]
        raise ValidationError(f"tenant {first.tenant_id}: {first.problem}", field="audit")
    bad = [r for r in reports if not r.ok]
    if bad:
        finding = bad[0].findings[0]
        raise ValidationError(f"tenant {bad[0].tenant_id}: {finding.message()}", field="records")


def _render_records(app: AppContext, report: Any) -> None:
    checked = ", ".join(f"{n} {kind}" for kind, n in report.checked.items() if n)
    summary = {
        "tenant": report.tenant_id,
        "checked": checked or "nothing",
        "batches": report.batches,
        "pending": report.pending,
        "ok": report.ok,
        "findings": len(report.findings),
    }
    render.records(app.json_output, "sealed records", [summary])
    if report.findings:
        rows = [
            {
                "kind": f.kind,
                "record": f.record_id,
                "problem": f.problem,
                "part": f.part,
                "column": f.column,
                "message": f.message(),
            }
            for f in report.findings
        ]
        render.records(
            app.json_output, "records that differ", rows, columns=["kind", "record", "problem", "part", "column"]
        )
    if report.pending:
        render.err.print(
            f"note: {report.pending} seal(s) of {report.tenant_id} are not chained yet (the next batch chains them;"
            " `jobgate audit seal` now)",
            markup=False,
        )


# How long `audit seal` waits for transactions writing seals to end before saying so.
SEAL_PATIENCE = timedelta(seconds=30)


@audit_group.command("seal")
@tenant_option(default=None, help="one tenant (default: every tenant with seals waiting)")
@pass_app
def audit_seal(app: AppContext, tenant: str | None) -> None:
    """Chain the seals not yet chained into the audit log now (what the leader does every
    ``evidence.seal_interval_seconds``)."""
    engine = app.engine()
    batches = audit.seal_pending(engine, engine.clock.now(), tenant, patience=SEAL_PATIENCE)
    render.records(
        app.json_output,
        "seal batches",
        [{"tenant": b.tenant_id, "seq": b.seq, "seals": b.count, "root": b.root} for b in batches],
        columns=["tenant", "seq", "seals", "root"],
    )


@audit_group.command("anchor")
@tenant_option()
@pass_app
def audit_anchor(app: AppContext, tenant: str) -> None:
    """Anchor the tenant's ended windows now (what the DAL_ANCHOR_JOB does on its schedule)."""
    from jobgate.evidence import anchors

    engine = app.engine()
    with engine.store.write() as tx:
        made = anchors.anchor_configured(tx, engine.config, tenant, engine.clock.now())
    render.records(
        app.json_output,
        "anchors",
        [anchors.record_of(a) for a in made],
        columns=["anchor_seq", "first_seq", "last_seq", "leaf_count", "root"],
    )


@audit_group.command("proof")
@click.argument("seq", type=click.IntRange(1))
@tenant_option()
@pass_app
def audit_proof(app: AppContext, seq: int, tenant: str) -> None:
    """The inclusion proof of entry SEQ in its anchored root (JSON), for offline checking."""
    from jobgate.evidence import anchors

    with app.engine().store.read() as tx:
        proof = anchors.proof_of(tx, tenant, seq)
    render.emit_json(proof)


@click.command("replay")
@click.argument("run_id")
@click.option("--simulate", is_flag=True, help="bind today's definition and configuration (never evidence)")
@pass_app
def replay_command(app: AppContext, run_id: str, simulate: bool) -> None:
    """Rebuild RUN_ID's record (or a TGWF- workflow run's state sequence) from its recorded
    inputs with the same decision code and compare hashes; exit 1 naming the first difference.
    It checks decisions, not the stored record: ``audit verify --records`` does that."""
    from jobgate.service.replay import replay
    from jobgate.service.workflow_replay import replay_workflow

    if run_id.startswith("TGWF-"):  # a workflow run: its state sequence (seed §14)
        if simulate:
            raise ValidationError("a workflow run replays against its recorded definition only", field="simulate")
        wf = replay_workflow(app.engine(), run_id)
        if app.json_output:
            render.emit_json(wf.__dict__)
        else:
            verdict = "MATCH" if wf.match else f"MISMATCH at {wf.first_difference}"
            print(f"{run_id} (workflow state sequence): {verdict}")
            print(f"  original {wf.original_hash}\n  replay   {wf.replay_hash}")
        if not wf.match:
            raise ValidationError(f"replay differs: {wf.first_difference}", field="replay")
        return
    report = replay(app.engine(), run_id, simulation=simulate)
    data = report.__dict__
    if app.json_output:
        render.emit_json(data)
    else:
        kind = "simulation" if simulate else "audit replay"
        verdict = "MATCH" if report.match else f"MISMATCH at {report.first_difference}"
        replayed = report.replay_hash or "(none: it stopped at the difference)"
        print(f"{run_id} ({kind}): {verdict}\n  original {report.original_hash}\n  replay   {replayed}")
        bound = report.binding or {}
        target = bound.get("target") or {}
        if target:
            named = target.get("handler") or target.get("runner") or target.get("target") or ""
            print(f"  target   {target.get('kind')} {named}".rstrip())
        if bound:
            print(f"  code     {bound.get('code_digest') or 'not bound (approved before code was)'}")
        for note in report.notes:
            print(f"  note     {note}")
        if not simulate:  # a MATCH read alone passed a run whose stored actor was edited (a review)
            print("  checks   the decisions its inputs make; `jobgate audit verify --records` checks its stored record")
    if not report.match:
        raise ValidationError(f"replay differs: {report.first_difference}", field="replay")


@click.group("retention")
def retention_group() -> None:
    """Retention of finished runs (retention.finished_runs_days); audit entries are never deleted."""


@retention_group.command("run")
@tenant_option()
@click.option("--dry-run", is_flag=True, help="count what would go; delete nothing")
@pass_app
def retention_run(app: AppContext, tenant: str, dry_run: bool) -> None:
    """What the MAINTENANCE_JOB (jobgate.retention:retention_job) does on its schedule."""
    from jobgate.service.retention import retire

    done = retire(app.engine(), tenant, dry_run=dry_run)
    if app.json_output:
        cutoff = None if done.cutoff is None else isoformat_utc(done.cutoff)
        rules = [{"rule": r.rule, "ended_before": isoformat_utc(r.cutoff), "runs": r.deleted} for r in done.rules]
        render.emit_json(
            {"tenant_id": tenant, "dry_run": dry_run, "cutoff": cutoff, "runs": done.deleted, "rules": rules}
        )
        return
    if done.cutoff is None:
        print(f"{tenant}: nothing may go (no retention configured, or nothing anchored yet)")
        return
    verb = "would delete" if dry_run else "deleted"
    for r in done.rules:  # each rule its own cutoff (a job class's days, then the rest's)
        print(f"{tenant}: {verb} {r.deleted} finished runs that ended before {isoformat_utc(r.cutoff)} ({r.rule})")
    if len(done.rules) > 1:
        print(f"{tenant}: {verb} {done.deleted} finished runs in all")


# ``jobgate definitions``: list and show (``cli.main``) with approve, revoke and approval.
definitions_group: click.Group = definitions
for _command in (approve, revoke, approval):
    definitions_group.add_command(_command)
