"""What an evidence bundle holds, for one run, a workflow run, a definition or a period.

An auditor asks for a scope (``ExportScope``); the bundle then carries, for every run in it,
the rows its seal covers (``runs/<id>.json``: the sealed columns, every transition, its dead
letters), the workflow runs, the definition versions and configuration snapshots the runs were
bound to, the approvals of those definitions, every seal of each of these records with its
Merkle proof in its ``records.sealed`` batch (and the values each kept, when there are
several), the audit entries about them and the batch entries, each entry's inclusion proof in
its signed anchor, and the published evidence keys.

From that alone (``check_contents``) a verifier recomputes every record's seal with the rules
of ``core.seals``, follows each seal to its batch root, the root to its audit entry, the entry
to its anchor, and checks the anchor's signature with the key it trusts: a chain from the rows
an auditor reads to a signature nobody without the key can make.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobgate.core import merkle, seal_trails, seals
from jobgate.core.audit import AuditEntry, AuditEvent, entry_hash
from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.encoding import to_us
from jobgate.core.errors import NotFoundError, ValidationError, refuse_bytes
from jobgate.core.records import AuditFilter
from jobgate.definitions.schema import content_digest
from jobgate.evidence import anchors
from jobgate.evidence import keys as evidence_keys
from jobgate.evidence.timestamping import TimestampTrust
from jobgate.export.detail_check import detail_problems
from jobgate.governance import signing
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine
from jobgate.store.base import RetiredRun, RunFilter
from jobgate.store.sqlstore import StoreTx
from jobgate.views.runs import run_detail_view

MAX_RUNS = 10_000  # a larger scope is refused: narrow the period


@dataclass(frozen=True)
class ExportScope:
    """One of: a run, a workflow run, a definition (optionally within a period), a period."""

    tenant_id: str = "default"
    job_run_id: str | None = None
    workflow_run_id: str | None = None
    job_definition_id: str | None = None
    start: datetime | None = None  # runs created at or after
    end: datetime | None = None  # ... and before

    def check(self) -> None:
        chosen = [x for x in (self.job_run_id, self.workflow_run_id) if x]
        period = self.start is not None or self.end is not None
        if len(chosen) + bool(self.job_definition_id or period) != 1:
            raise ValidationError("name one run, one workflow run, a definition or a period", field="scope")
        for field, at in (("from", self.start), ("to", self.end)):
            if at is not None:
                _in_utc(at, field)
        if period and (self.start is None or self.end is None):
            missing = "from" if self.start is None else "to"
            raise ValidationError(f"a period needs both bounds: {missing!r} is missing", field=missing)
        if period and self.start is not None and self.end is not None and self.start >= self.end:
            raise ValidationError("a period needs a start before its end", field="scope")

    def describe(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"tenant_id": self.tenant_id}
        for key in ("job_run_id", "workflow_run_id", "job_definition_id"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        if self.start is not None and self.end is not None:
            doc["from"], doc["to"] = isoformat_utc(self.start), isoformat_utc(self.end)
        return doc


def _in_utc(at: datetime, field: str) -> None:
    """A bound the bundle states in UTC: one with an offset that takes it before year 1 or past
    year 9999 there (``0001-01-01T00:00:00+14:00``) has no UTC instant to state."""
    if at.tzinfo is None:
        raise ValidationError("give a timezone (e.g. 2026-01-01T00:00:00Z)", field=field)
    try:
        at.astimezone(UTC)
    except OverflowError:
        raise ValidationError("is outside the years 1 to 9999 in UTC", field=field) from None


def json_file(value: Any) -> bytes:
    """A bundle file's bytes: indented, sorted keys, UTF-8, one trailing newline."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def entry_doc(e: AuditEntry) -> dict[str, Any]:
    ev = e.event
    return {
        "tenant_id": ev.tenant_id,
        "seq": e.seq,
        "at": isoformat_utc(ev.at),
        "actor": ev.actor,
        "action": ev.action,
        "target_type": ev.target_type,
        "target_id": ev.target_id,
        "reason": ev.reason,
        "payload": dict(ev.payload),
        "prev_hash": e.prev_hash,
        "entry_hash": e.entry_hash,
    }


def _run_ids(tx: StoreTx, scope: ExportScope) -> list[str]:
    if scope.job_run_id:
        run = tx.run_get(scope.job_run_id, scope.tenant_id)
        if run is None:  # a retired run is named as one, whichever door asked (CLI or API)
            raise no_run(tx, scope.job_run_id, scope.tenant_id)
        return [run.job_run_id]
    if scope.workflow_run_id:
        if tx.workflow_get(scope.workflow_run_id, scope.tenant_id) is None:
            raise NotFoundError(f"no workflow run {scope.workflow_run_id!r}", field="workflow_run_id")
        return [s.job_run_id for s in tx.workflow_steps(scope.workflow_run_id) if s.job_run_id] + [
            s.compensation_run_id for s in tx.workflow_steps(scope.workflow_run_id) if s.compensation_run_id
        ]
    f = RunFilter(
        tenant_id=scope.tenant_id,
        job_definition_id=scope.job_definition_id,
        created_from=scope.start,
        created_to=scope.end,
        limit=MAX_RUNS + 1,
    )
    runs = tx.runs_list(f)
    if len(runs) > MAX_RUNS:
        raise ValidationError(f"more than {MAX_RUNS} runs in this scope: narrow the period", field="scope")
    if scope.job_definition_id and not runs and tx.definition_get(scope.tenant_id, scope.job_definition_id) is None:
        raise NotFoundError(f"no definition {scope.job_definition_id!r}", field="job_definition_id")
    return sorted(r.job_run_id for r in runs)


def bundle_files(engine: Engine, scope: ExportScope) -> dict[str, bytes]:
    """Every file of the bundle but the manifest, read in one transaction (so they agree)."""
    scope.check()
    tenant = scope.tenant_id
    with engine.store.read(tenant_id=tenant) as tx:
        ids = _run_ids(tx, scope)
        rows = tx.evidence
        runs = rows.raw_runs(ids)
        for r in runs:  # JSON has no bytes: named, not a crash (a direct write to a SQLite file)
            rid = str(r["row"]["job_run_id"])
            refuse_bytes(r["row"], f"run {rid}")
            for i, t in enumerate(r["transitions"], start=1):
                refuse_bytes(t, f"transition {i} of run {rid}")
            for letter in r["dead_letters"]:
                refuse_bytes(letter, f"a dead letter of run {rid}")
        workflow_ids = sorted({str(r["row"]["workflow_run_id"]) for r in runs if r["row"]["workflow_run_id"]})
        if scope.workflow_run_id and scope.workflow_run_id not in workflow_ids:
            workflow_ids.append(scope.workflow_run_id)
        workflows = {w: rows.raw_workflow(w) for w in workflow_ids}
        bound = sorted({(str(r["row"]["job_definition_id"]), int(r["row"]["definition_version"])) for r in runs})
        for w in workflows.values():
            if w is not None:
                bound.append((str(w["row"]["job_definition_id"]), int(w["row"]["definition_version"])))
        if scope.job_definition_id:
            bound += [
                (scope.job_definition_id, d.version) for d in tx.definition_versions(tenant, scope.job_definition_id)
            ]
        bound = sorted(set(bound))
        definitions = [
            row
            for job, version in bound
            for row in rows.raw_rows("definition", tenant, {"job_definition_id": job, "version": version})
        ]
        snapshot_ids = sorted(
            {str(r["row"]["config_snapshot_id"]) for r in runs}
            | {str(w["row"]["config_snapshot_id"]) for w in workflows.values() if w is not None}
        )
        snapshots = [
            row for sid in snapshot_ids for row in rows.raw_rows("snapshot", tenant, {"config_snapshot_id": sid})
        ]
        jobs = sorted({job for job, _ in bound})
        approvals = [row for job in jobs for row in rows.raw_rows("approval", tenant, {"job_definition_id": job})]
        for kind, kept in (("definition", definitions), ("snapshot", snapshots), ("approval", approvals)):
            for row in kept:
                refuse_bytes(row, f"{kind} {seals.record_id(seals.SPECS[kind], row)}")
        retired = _retired_in(tx, scope, ids)
        records = (
            [(seals.RUN, str(r["row"]["job_run_id"])) for r in runs]
            + [(seals.RUN, gone.job_run_id) for gone in retired]
            + [(seals.WORKFLOW, w) for w in workflow_ids]
            + [("definition", f"{d['job_definition_id']}@{d['version']}") for d in definitions]
            + [("snapshot", str(s["config_snapshot_id"])) for s in snapshots]
            + [("approval", str(a["approval_id"])) for a in approvals]
        )
        sealed = rows.seal_proofs(tenant, records)
        batch_seqs = sorted({int(s["batch_seq"]) for s in sealed if s["batch_seq"] is not None})
        entries: dict[int, AuditEntry] = {}
        for target in [*ids, *workflow_ids, *jobs]:
            for e in tx.audit_list(AuditFilter(tenant_id=tenant, target_id=target, limit=100_000)):
                entries[e.seq] = e
        for seq in batch_seqs:
            for e in tx.anchors.entries(tenant, seq, seq):
                entries[e.seq] = e
        if retired:  # the retention entries naming them: they vouch for what retired.json says
            named = {gone.job_run_id for gone in retired}
            wanted = AuditFilter(tenant_id=tenant, action=seal_trails.RETENTION_DELETED, limit=1_000_000)
            for e in tx.audit_list(wanted):
                listed = e.event.payload.get("runs")
                if isinstance(listed, list) and named.intersection(str(r) for r in listed):
                    entries[e.seq] = e
        proofs = [p for seq in sorted(entries) if (p := anchors.inclusion_proof(tx, tenant, seq)) is not None]
    files: dict[str, bytes] = {}
    for r in runs:  # the rows the seal covers, and the run as the API shows it (its contract's shape)
        rid = str(r["row"]["job_run_id"])
        files[f"runs/{rid}.json"] = json_file(
            {**r, "detail": run_detail_view(engine, rid, tenant).model_dump(mode="json")}
        )
    files.update({f"workflows/{w}.json": json_file(doc) for w, doc in workflows.items() if doc is not None})
    files["definitions.json"] = json_file(definitions)
    files["snapshots.json"] = json_file(snapshots)
    files["approvals.json"] = json_file(approvals)
    if retired:  # runs of the period retention deleted: named, each with its tombstone's seal
        files["retired.json"] = json_file([_retired_doc(gone) for gone in retired])
    files["seals.json"] = json_file(sealed)
    files["audit.json"] = json_file([entry_doc(entries[s]) for s in sorted(entries)])
    files["proofs.json"] = json_file(proofs)
    files["keys.json"] = json_file(evidence_keys.published(engine.config))
    return files


def _retired_in(tx: StoreTx, scope: ExportScope, run_ids: Sequence[str]) -> list[RetiredRun]:
    """The runs of a period (or of a definition, within its period if it has one), or a workflow
    run's steps' runs, that retention deleted: without them a bundle would look complete when it
    is not (found by a review: a workflow's bundle held no runs and said nothing of its steps)."""
    if scope.workflow_run_id:
        return sorted(tx.runs_retired_of(scope.tenant_id, run_ids), key=lambda g: g.job_run_id)
    if scope.job_run_id:
        return []
    start = scope.start or datetime.min.replace(tzinfo=UTC)
    end = scope.end or datetime.max.replace(tzinfo=UTC)
    return tx.runs_retired_between(scope.tenant_id, start, end, scope.job_definition_id)


def _retired_doc(gone: RetiredRun) -> dict[str, Any]:
    return {
        "job_run_id": gone.job_run_id,
        "job_definition_id": gone.job_definition_id,
        "status": gone.status,
        "created_at": isoformat_utc(gone.created_at),
        "ended_at": None if gone.ended_at is None else isoformat_utc(gone.ended_at),
        "retired_at": isoformat_utc(gone.retired_at),
    }


# -- checking a bundle's contents, offline ----------------------------------------------------


@dataclass
class ContentCheck:
    problems: list[str]
    notes: list[str]  # what the bundle cannot vouch for yet (a seal not chained, an entry not anchored)
    anchors_checked: int = 0
    timestamps_checked: int = 0  # anchors whose RFC 3161 token verified against the given roots


def _load(files: Mapping[str, bytes], name: str) -> Any:
    return json.loads(files[name]) if name in files else []


def check_contents(
    files: Mapping[str, bytes],
    keys: Mapping[str, str] | None,
    timestamps: TimestampTrust | None = None,
    *,
    manifest: Mapping[str, Any] | None = None,
    window: timedelta | None = None,
) -> ContentCheck:
    """Recompute everything the files claim: digests, seals, batch roots, entry hashes, proofs,
    (with ``keys``) every anchor's signature and (with ``timestamps``) every batch anchor's
    RFC 3161 token."""
    out = ContentCheck([], [])
    definitions = {(d["job_definition_id"], d["version"]): d for d in _load(files, "definitions.json")}
    for (job, version), d in sorted(definitions.items()):
        if content_digest(json.loads(d["content"])) != d["digest"]:
            out.problems.append(f"definitions.json: {job} version {version}: content does not match its digest")
    snapshots = {s["config_snapshot_id"]: s for s in _load(files, "snapshots.json")}
    for sid, s in sorted(snapshots.items()):
        if digest(json.loads(s["content"])) != s["config_digest"]:
            out.problems.append(f"snapshots.json: {sid}: content does not match its digest")
    trails: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in sorted(_load(files, "seals.json"), key=lambda s: int(s["id"])):
        trails.setdefault((s["kind"], s["record_id"]), []).append(s)
    sealed = {key: trail[-1] for key, trail in trails.items()}
    entries = _check_entries(_load(files, "audit.json"), out)
    for trail in trails.values():
        for s in trail:
            _check_seal_chain(s, entries, out)
    approvals = _load(files, "approvals.json")
    for name in sorted(n for n in files if n.startswith("runs/")):
        doc = json.loads(files[name])
        row = doc["row"]
        rid = row["job_run_id"]
        if name != f"runs/{rid}.json":  # a file is named by what it holds, the scope by the file
            out.problems.append(f"{name}: holds run {rid}, not the run it is named for")
        _check_bound(name, row, definitions, snapshots, approvals, out)
        parts = seals.run_parts(row, doc["transitions"], doc["dead_letters"])
        history = [[t[c] for c in seals.TRANSITION_COLUMNS] for t in doc["transitions"]]
        _check_run(name, doc, parts, history, sealed.get((seals.RUN, rid)), _requeues(entries, rid), out)
        _check_trail(name, seal_trails.run_trail(_sealed(trails, seals.RUN, rid), history, _content), out)
        out.problems.extend(detail_problems(name, doc))
    for name in sorted(n for n in files if n.startswith("workflows/")):
        doc = json.loads(files[name])
        wid = doc["row"]["workflow_run_id"]
        if name != f"workflows/{wid}.json":
            out.problems.append(f"{name}: holds workflow run {wid}, not the workflow run it is named for")
        _check_bound(name, doc["row"], definitions, snapshots, approvals, out)
        parts = seals.workflow_parts(doc["row"], doc["steps"], doc["transitions"])
        ended = doc["row"]["status"] in seal_trails.WORKFLOW_ENDED
        _check_record(name, seals.WORKFLOW, parts, sealed.get((seals.WORKFLOW, wid)), out, ended=ended)
        _check_trail(name, seal_trails.workflow_trail(_sealed(trails, seals.WORKFLOW, wid), _content), out)
    for kind, file, rows in (
        ("definition", "definitions.json", definitions.values()),
        ("snapshot", "snapshots.json", snapshots.values()),
        ("approval", "approvals.json", approvals),
    ):
        spec = seals.SPECS[kind]
        present = {seals.record_id(spec, row) for row in rows}
        for kind_, rid in sorted(k for k in trails if k[0] == kind and k[1] not in present):
            out.problems.append(f"{file}: {kind_} {rid} is sealed in seals.json but not in {file}")
        for row in rows:
            rid = seals.record_id(spec, row)
            _check_record(f"{file}: {rid}", kind, seals.row_parts(spec, row), sealed.get((kind, rid)), out)
            _check_trail(f"{file}: {rid}", seal_trails.row_trail(kind, _sealed(trails, kind, rid), _content), out)
    _check_approvals_audited(approvals, entries, _log_began(manifest or {}, out), out)
    present = {n.removeprefix("runs/").removesuffix(".json") for n in files if n.startswith("runs/")}
    listed_retired = _load(files, "retired.json")
    for gone in listed_retired:
        _check_retired(gone, present, trails, entries, out)
    accounted = present | {str(g["job_run_id"]) for g in listed_retired}
    for seq, e in sorted(entries.items()):
        # the entries about a run are exported with it: one whose run is gone from a re-signed
        # bundle (its file and its seals) still names it
        if e["target_type"] == "run" and str(e["target_id"]) not in accounted:
            out.problems.append(
                f"audit.json: entry {seq} ({e['action']}) is about run {e['target_id']}, which is neither in the"
                " bundle nor listed as retired"
            )
    for kind, rid in sorted(k for k in trails if k[0] == seals.RUN and k[1] not in accounted):
        # a run's seal is exported with its run or its retirement: a re-signed bundle that left
        # the run (or its listing as retired) out and kept the seal is not complete
        out.problems.append(f"seals.json: {kind} {rid} is sealed but neither in the bundle nor listed as retired")
    scope = _scope_of(files)
    exported = scope.get("workflow_run_id")  # a workflow's bundle: the workflow and all its steps' runs
    if exported and f"workflows/{exported}.json" not in files:
        out.problems.append(f"manifest.json: its scope is workflow run {exported}, which the bundle does not hold")
    if (run := scope.get("job_run_id")) and run not in accounted:
        out.problems.append(
            f"manifest.json: its scope is run {run}, which is neither in the bundle nor listed as retired"
        )
    for name in sorted(n for n in files if n == f"workflows/{exported}.json"):
        for step in json.loads(files[name])["steps"]:
            for rid in (step.get("job_run_id"), step.get("compensation_run_id")):
                if rid and rid not in accounted:
                    out.problems.append(
                        f"{name}: step {step.get('step_id')}'s run {rid} is neither in the bundle nor listed as retired"
                    )
    proofs = _load(files, "proofs.json")
    claim = _anchoring_claim(manifest or {}, window, stamped=MANIFEST_STAMP in files, out=out)
    _check_proofs(proofs, entries, keys, out, claim)
    if timestamps is not None:
        _check_timestamps(proofs, timestamps, out)
    return out


def _check_bound(
    name: str,
    row: Mapping[str, Any],
    definitions: Mapping[tuple[str, int], Mapping[str, Any]],
    snapshots: Mapping[str, Mapping[str, Any]],
    approvals: Sequence[Mapping[str, Any]],
    out: ContentCheck,
) -> None:
    """A run's or workflow run's definition version, snapshot and an approval of the definition's
    content are in the bundle, each with the digest the record names: either is made only under
    an approval, bound to both (a re-signed bundle that leaves one out is caught)."""
    d = definitions.get((row["job_definition_id"], row["definition_version"]))
    if d is None or d["digest"] != row["definition_digest"]:
        out.problems.append(f"{name}: its definition version is not in definitions.json with its digest")
    snap = snapshots.get(row["config_snapshot_id"])
    if snap is None or snap["config_digest"] != row["config_digest"]:
        out.problems.append(f"{name}: its snapshot is not in snapshots.json with its digest")
    if not any(
        a["job_definition_id"] == row["job_definition_id"] and a["digest"] == row["definition_digest"]
        for a in approvals
    ):
        out.problems.append(
            f"{name}: no approval of its definition ({row['job_definition_id']} {row['definition_digest']})"
            " is in approvals.json: it is made only under one"
        )


def _scope_of(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The scope the (signed) manifest states, or nothing."""
    try:
        scope = json.loads(files["manifest.json"]).get("scope")
    except (KeyError, ValueError, AttributeError):
        return {}
    return scope if isinstance(scope, dict) else {}


def _check_retired(
    gone: Mapping[str, Any],
    present: set[str],
    trails: Mapping[tuple[str, str], list[dict[str, Any]]],
    entries: Mapping[int, Mapping[str, Any]],
    out: ContentCheck,
) -> None:
    """A run the bundle says retention deleted: its tombstone (its latest seal, ``retired``) is in
    the bundle, chained like every seal (``_check_seal_chain``), its file is not, and what the
    bundle says of it (its definition, end and times) is what retention's audit entry holds."""
    rid = str(gone["job_run_id"])
    trail = trails.get((seals.RUN, rid), [])
    vouched = _retention_record(entries, rid)
    if rid in present:
        out.problems.append(f"retired.json: run {rid} is listed as retired and its file is in the bundle")
    elif not trail or trail[-1]["event"] != seals.RETIRED:
        out.problems.append(f"retired.json: run {rid} has no tombstone seal in seals.json")
    elif vouched is not None and vouched[1] != _retired_digest(gone):
        out.problems.append(
            f"retired.json: run {rid}'s definition, status or times are not what retention's audit entry"
            f" {vouched[0]} holds"
        )
    else:
        out.notes.append(
            f"run {rid} (created {gone['created_at']}, {gone['status']}) was retired by retention at"
            f" {gone['retired_at']}: its tombstone seal #{trail[-1]['id']} is in the bundle"
        )


def _retention_record(entries: Mapping[int, Mapping[str, Any]], rid: str) -> tuple[int, str | None] | None:
    """(the seq of the retention entry naming run ``rid``, the digest it holds of the run's
    definition, end and times), when the bundle carries that entry and it holds one."""
    for seq, e in sorted(entries.items()):
        payload = e.get("payload") or {}
        runs, records = payload.get("runs"), payload.get(seal_trails.RETIRED_RECORDS)
        if e.get("action") != seal_trails.RETENTION_DELETED or not isinstance(runs, list) or rid not in runs:
            continue
        if not isinstance(records, list) or len(records) != len(runs):
            return None  # written before retention kept that digest
        return seq, str(records[runs.index(rid)])
    return None


def _retired_digest(gone: Mapping[str, Any]) -> str | None:
    def us(value: Any) -> int | None:
        return None if value is None else to_us(_instant(value))

    try:
        return seal_trails.retired_record(
            str(gone["job_definition_id"]), str(gone["status"]), us(gone["created_at"]) or 0,
            us(gone.get("ended_at")), us(gone["retired_at"]) or 0,
        )  # fmt: skip
    except (KeyError, ValueError, TypeError, OverflowError):
        return None


def _check_entries(docs: list[dict[str, Any]], out: ContentCheck) -> dict[int, dict[str, Any]]:
    entries: dict[int, dict[str, Any]] = {}
    for e in docs:
        event = AuditEvent(
            e["tenant_id"], e["actor"], e["action"], e["target_type"], e["target_id"],
            datetime.fromisoformat(e["at"].replace("Z", "+00:00")), e["reason"], e["payload"],
        )  # fmt: skip
        if entry_hash(event, e["seq"], e["prev_hash"]) != e["entry_hash"]:
            out.problems.append(f"audit.json: entry {e['seq']} does not match its hash")
            continue
        entries[e["seq"]] = e
    return entries


def _sealed(trails: Mapping[tuple[str, str], list[dict[str, Any]]], kind: str, rid: str) -> list[dict[str, Any]]:
    return [s for s in trails.get((kind, rid), []) if s["event"] == seals.SEALED]


def _content(seal: Mapping[str, Any]) -> str | None:
    content = seal.get("content")
    return content if isinstance(content, str) else None


def _check_trail(where: str, problem: seal_trails.TrailProblem | None, out: ContentCheck) -> None:
    """A record's earlier seals (``core.seal_trails``): its latest is not one jobgate writes
    after them, or it no longer matches one of them."""
    if problem is None:
        return
    column = f", column {problem.column}" if problem.column else ""
    detail = f" ({problem.detail})" if problem.detail else ""
    said = {
        "changed": f"its {problem.part} no longer matches its earlier seal #{problem.seal_id}",
        "history_cut": f"has fewer transitions than its earlier seal #{problem.seal_id} covers",
    }.get(problem.problem, f"seal #{problem.seal_id} is not one jobgate writes after the earlier ones")
    if problem.problem == "resealed":
        said += f": {problem.part or 'the record'} changed{column}{detail}"
    out.problems.append(f"{where}: {said}")


def _requeues(entries: Mapping[int, Mapping[str, Any]], rid: str) -> list[tuple[str, int]]:
    """The ``run.requeued`` audit entries of run ``rid`` in the bundle: (actor, time in µs)."""
    return [
        (str(e["actor"]), _entry_us(e))
        for e in entries.values()
        if e["action"] == seal_trails.RUN_REQUEUED_ACTION and e["target_id"] == rid
    ]


def _check_run(
    where: str,
    doc: Mapping[str, Any],
    parts: seals.Parts,
    history: list[list[Any]],
    s: Mapping[str, Any] | None,
    requeues: list[tuple[str, int]],
    out: ContentCheck,
) -> None:
    """A run's file against its latest seal, by the rules ``audit verify --records`` applies:
    an ended run has a seal; a run with transitions beyond its seal was requeued (from a
    dead-lettered or escalated end, by an audited requeue) and has not ended since."""
    row, transitions = doc["row"], doc["transitions"]
    if s is None or s["extent"] is None or parts.extent is None or parts.extent <= s["extent"]:
        ended = seal_trails.run_ended(row["status"], (t["to_status"] for t in transitions))
        _check_record(where, seals.RUN, parts, s, out, ended=ended)
        # requeued and ended again: its requeue is still one an operator made (found by a review)
        if (n := seal_trails.unaudited_requeue(transitions, requeues)) is not None:
            out.problems.append(_unaudited_requeue(where, transitions, n))
        return
    extent = int(s["extent"])
    if row["status"] in seal_trails.RUN_ENDED:
        out.problems.append(
            f"{where}: ended after seal #{s['id']}, which covers {extent} of {len(history)} transitions,"
            " but its end has no seal"
        )
    elif (why := seal_trails.moved_on_without_requeue(s, history)) is not None:
        out.problems.append(f"{where}: transition {extent + 1}: {why}")
    elif seals.run_parts(row, transitions[:extent], doc["dead_letters"]).history != s["history"]:
        out.problems.append(f"{where}: its history differs from its seal #{s['id']} (within the transitions it covers)")
    elif (n := seal_trails.unaudited_requeue(transitions, requeues)) is not None:
        out.problems.append(_unaudited_requeue(where, transitions, n))
    else:
        out.notes.append(f"{where}: requeued after its seal #{s['id']} and not ended since: not sealed yet")


def _log_began(manifest: Mapping[str, Any], out: ContentCheck) -> int | None:
    """When the deployment's audit log began, as the manifest states it (µs), or None (a bundle
    exported before manifests stated it: revocations are then not judged by their entries)."""
    stated = manifest.get("audit_log_began")
    if stated is None:
        out.notes.append("manifest.json states no audit_log_began: approvals' revocations not matched to entries")
        return None
    try:
        return to_us(_instant(stated))
    except (ValueError, TypeError, OverflowError):
        out.problems.append("manifest.json: its audit_log_began is unreadable")
        return None


def _check_approvals_audited(
    approvals: Sequence[Mapping[str, Any]],
    entries: Mapping[int, Mapping[str, Any]],
    log_began: int | None,
    out: ContentCheck,
) -> None:
    """Each approval's making and revocation accounted for by its audit entry, in the bundle
    (``seal_trails.AUDITED_CHANGES``), as ``audit verify --records`` asks of the database: an
    approval revoked or inserted by a database write and sealed by the published rules is none
    jobgate made (found by a review: the bundle verified what the database check refused)."""
    for rule in seal_trails.AUDITED_CHANGES["approval"]:
        audited: dict[str, list[tuple[str, int, Any]]] = {}
        for _, e in sorted(entries.items()):
            if e["action"] == rule.action:
                audited.setdefault(str(e["target_id"]), []).append((str(e["actor"]), _entry_us(e), e["payload"]))
        for i in seal_trails.unaudited(rule, approvals, audited, log_began):
            row = approvals[i]
            out.problems.append(
                f"approvals.json: approval {row.get('approval_id')}: {rule.by} {row.get(rule.by)}"
                f" with no {rule.action} audit entry of it"
            )


def _entry_us(e: Mapping[str, Any]) -> int:
    return to_us(datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00")))


def _unaudited_requeue(where: str, transitions: Sequence[Mapping[str, Any]], n: int) -> str:
    return f"{where}: transition {n + 1}: a requeue by {transitions[n]['actor']} with no run.requeued audit entry"


def _check_record(
    where: str, kind: str, parts: seals.Parts, s: Mapping[str, Any] | None, out: ContentCheck, *, ended: bool = True
) -> None:
    """A record against its latest seal. Every definition version, snapshot and approval is
    sealed as it is written, and a run or workflow run when it ends: only a record that has
    not ended (``ended`` False) may have no seal yet."""
    if s is None:
        if ended:
            out.problems.append(f"{where}: has no seal" + (" though it has ended" if kind in _ENDING else ""))
        else:
            out.notes.append(f"{where}: not sealed yet (it has not ended)")
        return
    for part in ("identity", "outcome", "history"):
        if getattr(parts, part) != s[part]:
            out.problems.append(f"{where}: its {part} differs from its seal #{s['id']}")
            return


_ENDING = (seals.RUN, seals.WORKFLOW)  # sealed when they end; every other kind when written


def _check_seal_chain(s: Mapping[str, Any], entries: Mapping[int, Mapping[str, Any]], out: ContentCheck) -> None:
    where = f"seals.json: {s['kind']} {s['record_id']}"
    parts = seals.Parts(s["identity"], s["outcome"], s["history"], s["extent"])
    if seals.seal_of(s["kind"], s["record_id"], s["event"], parts) != s["seal"]:
        out.problems.append(f"{where}: the seal does not hash to its parts")
        return
    if s["batch_seq"] is None:
        out.notes.append(f"{where}: not chained yet (exported within seconds of its change)")
        return
    entry = entries.get(s["batch_seq"])
    if entry is None or entry["action"] != seals.BATCH_ACTION:
        out.problems.append(f"{where}: its batch entry {s['batch_seq']} is not in audit.json")
    elif not merkle.verify(s["seal"], s.get("proof") or [], entry["payload"].get("root", "")):
        out.problems.append(f"{where}: its proof does not reach the root of audit entry {s['batch_seq']}")


MANIFEST_STAMP = "manifest.tsr"  # an RFC 3161 token over the manifest's digest (base64), when a TSA is configured


@dataclass(frozen=True)
class AnchoringClaim:
    """What the manifest says was anchored when the bundle was exported (absent from bundles
    exported before it said so)."""

    anchored_through: int = 0
    exported_at: datetime | None = None
    window: timedelta | None = None


# The longest anchor window a manifest's own statement is taken for: a bundle's signer could
# state any (a year: no entry would be "two windows old"); a deployment anchoring less often
# says so to its auditors, who give it with ``--anchor-window``.
MAX_STATED_WINDOW = timedelta(days=1)


def _anchoring_claim(
    manifest: Mapping[str, Any], window: timedelta | None, *, stamped: bool, out: ContentCheck
) -> AnchoringClaim:
    """What the manifest says was anchored at export, and the window to judge entries by (the
    auditor's, else the stated one up to ``MAX_STATED_WINDOW``). A manifest that states no
    export time or window is a problem when it is timestamped or the auditor gave a window (the
    statement was stripped), a note otherwise (a bundle exported before manifests said it)."""
    try:
        through = int(manifest.get("anchored_through") or 0)
        at = manifest.get("exported_at")
        exported = None if at is None else _instant(at)
        seconds = manifest.get("anchor_window_seconds")
        stated = None if seconds is None else timedelta(seconds=float(seconds))
    except (ValueError, TypeError, OverflowError):
        raise ValueError("manifest.json: its anchoring claim (anchored_through, exported_at) is unreadable") from None
    if stated is not None and stated <= timedelta(0):
        stated = None
    judged = window or (None if stated is None else min(stated, MAX_STATED_WINDOW))
    if exported is None or judged is None:
        missing = "exported_at" if exported is None else "anchor_window_seconds"
        said = f"manifest.json states no {missing}: entries not anchored cannot be judged by their age"
        (out.problems if stamped or window is not None else out.notes).append(said)
        return AnchoringClaim(through, None, None)
    return AnchoringClaim(through, exported, judged)


def _check_proofs(
    proofs: list[dict[str, Any]],
    entries: Mapping[int, Mapping[str, Any]],
    keys: Mapping[str, str] | None,
    out: ContentCheck,
    claim: AnchoringClaim = AnchoringClaim(),
) -> None:
    trusted = {k: signing.public_key(v, field=k) for k, v in (keys or {}).items()}
    proven = set()
    signed: set[Any] = set()
    for p in proofs:
        seq = p["seq"]
        entry = entries.get(seq)
        anchor = p["anchor"]
        if entry is None or entry["entry_hash"] != p["entry_hash"]:
            out.problems.append(f"proofs.json: the proof of entry {seq} is not for the entry in audit.json")
        elif p["root"] != anchor["root"] or anchor["chain"] != anchors.chain_hash(anchor["prev_chain"], p["root"]):
            out.problems.append(f"proofs.json: entry {seq}'s root is not its anchor's")
        elif not merkle.verify(p["entry_hash"], p["proof"], p["root"]):
            out.problems.append(f"proofs.json: the proof of entry {seq} does not reach its root")
        elif trusted:
            problem = _anchor_signature(anchor, trusted)
            if problem:
                out.problems.append(f"proofs.json: entry {seq}'s anchor {anchor['anchor_seq']} {problem}")
            elif anchor["anchor_seq"] not in signed:  # an anchor many proofs share is counted once
                signed.add(anchor["anchor_seq"])
                out.anchors_checked += 1
        proven.add(seq)
    # Batch anchors cover the chain from its first entry without a gap, each from where the one
    # before ended: every entry up to the last batch anchor the bundle proves is in one, and a
    # bundle carries the proof of each. One without it was left out (and could have been
    # rewritten: its own hash is then unchecked by any anchor).
    through = max(
        claim.anchored_through,
        max(
            (int(p["anchor"]["last_seq"]) for p in proofs if p["anchor"].get("mode") == "batch" and p["seq"] in proven),
            default=0,
        ),
    )
    missing = sorted(seq for seq in set(entries) - proven if seq <= through)
    if missing:
        out.problems.append(
            f"audit.json: entry {missing[0]} lies within the anchored chain (entries 1-{through}) but"
            f" proofs.json has no proof of it ({len(missing)} such entr(y/ies))"
        )
    if claim.exported_at is not None and claim.window is not None:
        # As ``audit verify`` fails on an entry left unanchored past two windows: one that old
        # at export time has its proof, or the bundle left it out.
        stale = claim.exported_at - 2 * claim.window
        late = sorted(seq for seq in set(entries) - proven if seq > through and _entry_at(entries[seq]) < stale)
        if late:
            out.problems.append(
                f"audit.json: entry {late[0]} was recorded more than two anchor windows ({claim.window}) before the"
                f" export ({isoformat_utc(claim.exported_at)}) and proofs.json has no proof of it"
                f" ({len(late)} such entr(y/ies))"
            )
    unanchored = sorted(seq for seq in set(entries) - proven if seq > through)
    if unanchored:
        out.notes.append(f"audit.json: {len(unanchored)} entr(y/ies) not anchored yet (first {unanchored[0]})")


def _entry_at(entry: Mapping[str, Any]) -> datetime:
    return _instant(entry["at"])


def _instant(value: Any) -> datetime:
    """A time as a bundle writes it (ISO 8601, UTC)."""
    return datetime.fromisoformat(str(value))


def _check_timestamps(proofs: list[dict[str, Any]], trust: TimestampTrust, out: ContentCheck) -> None:
    """Each batch anchor the proofs name, once: its token must verify against ``trust``'s roots
    (a direct anchor is dated by the next batch anchor's token, ``timestamping``)."""
    batches = {p["anchor"]["anchor_seq"]: p["anchor"] for p in proofs if p["anchor"].get("mode") == "batch"}
    for seq, anchor in sorted(batches.items()):
        token = anchor.get("timestamp_token")
        if not token:
            out.problems.append(f"proofs.json: anchor {seq} is not timestamped")
            continue
        message = anchors.record_message(anchor)
        problem = trust.problem(
            token,
            message,
            created_at=datetime.fromisoformat(anchor["created_at"]),
            not_before=datetime.fromisoformat(anchor["window_end"]),
        )
        if problem:
            out.problems.append(f"proofs.json: anchor {seq} {problem}")
        else:
            out.timestamps_checked += 1


def _anchor_signature(anchor: Mapping[str, Any], trusted: Mapping[str, Any]) -> str | None:
    if not anchor.get("signature"):
        return "is not signed"
    message = anchors.record_message(anchor)
    try:
        signing.verify(message, {"key_id": anchor["key_id"], "value": anchor["signature"]}, trusted, what="the anchor")
    except ValidationError as exc:
        return str(exc.message)
    return None
