"""Definition versions: storing what was applied, and reading a stored version back as a
definition this host can run.

A stored version is re-read through today's registries: a target that vanished is refused, a
signature no longer trusted is a governance refusal, and content whose digest no longer matches
what was stored is refused as tampered. Applying stores every version or none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from jobgate.clock import Clock
from jobgate.config import JobgateConfig
from jobgate.core.canonical import canonical_json
from jobgate.core.errors import GovernanceRefusal, NotFoundError, ValidationError
from jobgate.core.models import DefinitionStatus, JobDefinition
from jobgate.definitions.schema import LoadedDefinition, parse_definition
from jobgate.governance.code import CodeReader
from jobgate.governance.handler_source import check_handler_source
from jobgate.plugins.admission import check_handler
from jobgate.scheduling.model import schedule_document
from jobgate.scheduling.owned import first_anchor, owned_kind, owned_schedule, owned_schedule_id
from jobgate.scheduling.plan import windows_after_edit
from jobgate.scheduling.records import OWNED_SOURCE, PAUSED_UNAPPROVED, ScheduleChange, pause_after_edit
from jobgate.service.submission import SYSTEM_ACTOR
from jobgate.store.base import DefinitionPut, StoredDefinition
from jobgate.store.sqlstore import Store, StoreTx


@dataclass(frozen=True)
class ApplyResult:
    job_definition_id: str
    version: int
    digest: str
    created: bool
    source: str | None
    reverted: bool = False  # an older version is current again (its content applied again)
    older: int | None = None  # the content was this older version's, and the current one stayed


_BUILT_LIMIT = 1024  # versions kept built per process; emptied when full


class Definitions:
    """Definition versions of one store, read through one configuration's registries."""

    def __init__(self, store: Store, config: JobgateConfig, clock: Clock) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.code_reader = CodeReader(config.registries, config.base_dir)
        # Versions as built, keyed by everything ``build`` reads: parsing a version's content
        # was a tenth of a single submission's time, and a stored version never changes.
        self._built: dict[tuple[Any, ...], JobDefinition] = {}

    def apply(
        self,
        loaded: Sequence[LoadedDefinition],
        *,
        tenant_id: str | None = None,
        progress: Callable[[int], None] | None = None,
        applied_by: str = SYSTEM_ACTOR,
        applied_lineage: tuple[str, ...] = (),
        revert: bool = True,
    ) -> list[ApplyResult]:
        """Store every definition or none: one transaction for the whole load. ``applied_by``
        (and who minted their credential, ``applied_lineage``) is recorded with each new version:
        four eyes keeps them from approving it. ``revert`` False: an older version's content
        leaves the current version as it is (a start-up load: ``ApplyResult.older``)."""
        for item in loaded:
            check_executable(item, self.config.worker.trusted_handlers)
        now = self.clock.now()
        out: list[ApplyResult] = []
        with self.store.write() as tx:
            tx.gates_closing()  # a status in the files may suspend or retire a definition
            for item in loaded:
                d = item.definition
                _refuse_unretiring(tx, tenant_id or d.tenant_id, item)
                result = tx.definition_put(
                    DefinitionPut(
                        tenant_id=tenant_id or d.tenant_id,
                        job_definition_id=d.job_definition_id,
                        digest=d.digest,
                        content=d.content,
                        job_code=d.job_code,
                        job_class=str(d.job_class),
                        status=item.status,
                        source=item.source,
                        now=now,
                        applied_by=applied_by,
                        applied_lineage=applied_lineage,
                        revert=revert,
                    )
                )
                out.append(
                    ApplyResult(
                        d.job_definition_id,
                        result.definition.version,
                        d.digest,
                        result.created,
                        item.source,
                        reverted=result.reverted,
                        older=result.older,
                    )
                )
                if result.created or result.reverted:  # the current version changed: its own schedule too
                    self.keep_owned_schedule(tx, tenant_id or d.tenant_id, d, actor=applied_by, now=now)
                if progress:
                    progress(1)
        return out

    def keep_owned_schedule(
        self, tx: StoreTx, tenant_id: str, definition: JobDefinition, *, actor: str, now: datetime
    ) -> None:
        """A new version's own schedule (``trigger_type`` + ``schedule_expression``), in the
        version's transaction: stored paused until the version is approved (the approval resumes
        it), removed when the version declares none. A schedule of that name stored by someone
        else is not taken over: the apply is refused."""
        name = owned_schedule_id(definition.job_definition_id)
        existing = tx.schedule_get(tenant_id, name, lock=True)
        if existing is not None and existing.source != OWNED_SOURCE:
            raise ValidationError(
                f"a schedule {name!r} stored by {existing.source} exists: delete or rename it, so the "
                "definition can keep its own",
                field="schedule_expression",
                source=definition.job_definition_id,
            )
        kept = existing.schedule if existing is not None and existing.schedule.kind is owned_kind(definition) else None
        wanted = owned_schedule(
            definition,
            tenant_id=tenant_id,
            anchor=kept.anchor if kept is not None else first_anchor(definition, now),
            timezone=self.config.scheduling.timezone,
            misfire=self.config.scheduling.misfire,
        )
        before = None if existing is None else canonical_json(schedule_document(existing.schedule)).decode()
        if wanted is None:
            if existing is not None:
                tx.schedule_delete(tenant_id, name)
                tx.change_record(tenant_id, name, ScheduleChange(now, "deleted", before, "deleted", True, actor, None))
            return
        from jobgate.service.schedules import check_params  # it imports the engine, which imports us

        try:  # a schedule that could never fire is refused, as one stored by hand is
            rendered = check_params(definition, wanted, now)
            if "workflow" in definition.content:
                self._check_owned_workflow_inputs(tx, tenant_id, definition, rendered, wanted.payload_params)
        except ValidationError as exc:
            raise ValidationError(
                f"its own schedule could never fire: {exc.field}: {exc.message}",
                field="schedule_expression",
                source=definition.job_definition_id,
            ) from None
        # A new version waits for its approval; an earlier version made current again runs on the
        # approval its content already has (a regression review found it waiting for one given).
        approved = any(
            a.active and a.digest == definition.digest
            for a in tx.approvals_list(tenant_id, definition.job_definition_id)
        )
        paused, pause_reason = pause_after_edit(existing, asked=False, unapproved=not approved)  # an operator's stays
        wanted = replace(wanted, paused=paused)
        if existing is not None:
            wanted = windows_after_edit(existing.schedule, wanted, now)
        made = tx.schedule_put(wanted, watermark=now, source=OWNED_SOURCE, now=now, pause_reason=pause_reason)
        if existing is not None:
            from jobgate.service.schedules import settle_owed_before_edit  # it imports the engine, which imports us

            settle_owed_before_edit(tx, existing, wanted, now)
        after = canonical_json(schedule_document(wanted)).decode()
        reason = f"version of {definition.job_definition_id}; " + (
            "paused until approved"
            if pause_reason == PAUSED_UNAPPROVED
            else "kept paused (paused by an operator)"
            if paused
            else "its content approved already"
        )
        tx.change_record(
            tenant_id, name, ScheduleChange(now, "created" if made else "updated", before, after, True, actor, reason)
        )

    def _check_owned_workflow_inputs(
        self, tx: StoreTx, tenant: str, definition: JobDefinition, params: Mapping[str, object], later: Sequence[str]
    ) -> None:
        """``check_workflow_inputs`` for a workflow's own schedule, as one stored by hand is
        checked; unless a step's definition is not stored yet (applied later in the same
        batch, say): what it declares is not known, and its fires are checked as they come."""
        try:
            steps = self.step_definitions(tx, definition, tenant)
        except ValidationError:
            return
        self.check_workflow_inputs(tx, definition, tenant, params, later=frozenset(later), steps=steps)

    def step_definitions(self, tx: StoreTx, definition: JobDefinition, tenant: str) -> dict[str, JobDefinition]:
        """The current definition of each job a workflow's steps and compensations name: each
        must exist and be a job (a step runs a job, never another workflow)."""
        from jobgate.workflows.spec import workflow_spec_of

        out: dict[str, JobDefinition] = {}
        for job in workflow_spec_of(definition.content, definition.job_definition_id).jobs:
            try:
                step = self.get(tx, tenant, job)
            except NotFoundError:
                raise ValidationError(f"step job {job!r} is not a known definition", field="workflow.steps") from None
            if "workflow" in step.content:
                raise ValidationError(f"step job {job!r} is a workflow; a step runs a job", field="workflow.steps")
            out[job] = step
        return out

    def check_workflow_inputs(
        self,
        tx: StoreTx,
        definition: JobDefinition,
        tenant: str,
        params: Mapping[str, object],
        *,
        later: Collection[str] = (),
        steps: Mapping[str, JobDefinition] | None = None,
    ) -> None:
        """What a workflow's steps will be given, against their definitions as they stand
        (``workflows.inputs``): at a start, and when a schedule of it is stored (``later``: the
        params an event's payload supplies when it fires)."""
        from jobgate.core.params import validate_params
        from jobgate.workflows.inputs import check_start
        from jobgate.workflows.spec import workflow_spec_of

        steps = self.step_definitions(tx, definition, tenant) if steps is None else steps
        spec = workflow_spec_of(definition.content, definition.job_definition_id)
        specs = [replace(p, required=False) if p.name in later else p for p in definition.params]
        given = validate_params(specs, params, source=definition.job_definition_id)
        declared = {job: step.params for job, step in steps.items()}
        check_start(spec, declared, given, source=definition.job_definition_id, later=later)

    def get(self, tx: StoreTx, tenant_id: str, job_definition_id: str, version: int | None = None) -> JobDefinition:
        """A stored version (the current one when ``version`` is None), checked as ``build``."""
        stored = tx.definition_get(tenant_id, job_definition_id, version)
        if stored is None:
            raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
        return self.build(stored)

    def build(self, stored: StoredDefinition, config: JobgateConfig | None = None) -> JobDefinition:
        """Re-read stored content through today's registries (a target that vanished is refused),
        or through ``config``'s (an audit replay's: today's with the run's recorded policies)."""
        key: tuple[Any, ...] | None = None
        if config is None and stored.content_text is not None:
            key = (stored.tenant_id, stored.job_definition_id, stored.version, stored.status, stored.digest)
            key += (stored.source, stored.content_text)
            cached = self._built.get(key)
            if cached is not None:
                return cached
        built = self._build(stored, config)
        if key is not None:
            if len(self._built) >= _BUILT_LIMIT:
                self._built.clear()
            self._built[key] = built
        return built

    def _build(self, stored: StoredDefinition, config: JobgateConfig | None) -> JobDefinition:
        source = stored.source or f"stored:{stored.job_definition_id}"
        try:
            loaded = parse_definition(stored.content, source, config or self.config)
        except ValidationError as exc:
            if exc.field != "signature":
                raise
            # Stored before signatures were required, or its key is no longer trusted: it
            # stays refused, as a governance refusal (audited), whatever triggers it.
            raise GovernanceRefusal(
                exc.message, code="definition_not_signed", rule="signed_definitions", field="signature"
            ) from None
        if loaded.definition.digest != stored.digest:
            raise ValidationError(
                f"stored content of version {stored.version} no longer matches its digest {stored.digest}",
                field="digest",
                source=source,
            )
        return replace(loaded.definition, version=stored.version, status=stored.status, tenant_id=stored.tenant_id)


def _refuse_unretiring(tx: StoreTx, tenant_id: str, item: LoadedDefinition) -> None:
    """Retirement is final (the governance guide's ``definition_retired`` never clears): a file
    that no longer says ``status: retired`` does not bring a retired definition back, under
    its old approval, by whoever may apply (found by a review: under four eyes, one person could
    undo a retirement alone). A job to run again takes a new ``job_definition_id``."""
    stored = tx.definition_get(tenant_id, item.definition.job_definition_id)
    if stored is not None and stored.status is DefinitionStatus.RETIRED and item.status is not DefinitionStatus.RETIRED:
        raise ValidationError(
            "the definition is retired, and retirement is final: keep `status: retired` in its file, or give"
            " the job a new job_definition_id",
            field="status",
            source=item.source or item.definition.job_definition_id,
        )


def check_executable(item: LoadedDefinition, trusted: Sequence[str]) -> None:
    """Refuse, before anything is stored, a handler that cannot be imported here (a typo, a
    missing package): otherwise it would be found only when a run fails at its first attempt;
    and one that asks for jobgate's host from a module nobody trusted (``governance.code``);
    and one whose code is a plugin this process did not admit (``plugins.admission``), checked
    before the import so that naming a plugin never loads it."""
    spec = item.definition.executor
    if spec.kind == "python" and spec.handler:
        try:
            check_handler(spec.handler)
            check_handler_source(spec.handler, trusted)  # read, never imported: nothing of it runs here
        except ValidationError as exc:
            raise ValidationError(exc.message, field="handler", source=item.source) from None
