"""From a claimed run to an executor and the context it runs in (seed 000 §56).

The context carries only the run's own snapshot and payload. Definitions and snapshots are
immutable per version and id, so they are cached for the life of the worker.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from jobgate.context import DispatchPayload, ExecutionContext
from jobgate.core.errors import ValidationError
from jobgate.core.models import ConfigSnapshot, JobDefinition, JobRun
from jobgate.core.trace import TraceContext, attempt_trace
from jobgate.governance.code import locate_handler
from jobgate.plugins.admission import check_handler
from jobgate.registry import RunnerSpec
from jobgate.runtime.executors.base import Executor
from jobgate.runtime.executors.command import CommandExecutor
from jobgate.runtime.executors.http import HttpExecutor
from jobgate.runtime.executors.python import PythonExecutor
from jobgate.service.engine import Engine
from jobgate.service.host import Host


class Dispatcher:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._definitions: dict[tuple[str, str, int], JobDefinition] = {}
        self._snapshots: dict[str, ConfigSnapshot] = {}
        self._python: dict[str, PythonExecutor] = {}
        self._lock = threading.Lock()
        self._runs_dir = str(Path(engine.config.data_dir) / "runs")
        self._config = engine.config
        self._host = Host(engine)  # for jobgate's own jobs only (``PythonExecutor``)

    def prepare(self, runs: list[JobRun]) -> None:
        """Load (once) the definitions and snapshots a batch of runs needs, in one read."""
        if all(
            (r.tenant_id, r.job_definition_id, r.definition_version) in self._definitions
            and r.config_snapshot_id in self._snapshots
            for r in runs
        ):
            return  # the common case: everything is cached
        missing_defs = {
            key
            for r in runs
            if (key := (r.tenant_id, r.job_definition_id, r.definition_version)) not in self._definitions
        }
        missing_snaps = {r.config_snapshot_id for r in runs if r.config_snapshot_id not in self._snapshots}
        if not missing_defs and not missing_snaps:
            return
        with self.engine.store.read() as tx:
            for tenant, def_id, version in missing_defs:
                self._definitions[(tenant, def_id, version)] = self.engine.definition(tx, tenant, def_id, version)
            for snap_id in missing_snaps:
                snap = tx.snapshot_get(snap_id)
                if snap is None:
                    raise ValidationError(f"config snapshot {snap_id} is missing", field="config_snapshot_id")
                self._snapshots[snap_id] = snap

    def definition(self, run: JobRun) -> JobDefinition:
        return self._definitions[(run.tenant_id, run.job_definition_id, run.definition_version)]

    def context(self, run: JobRun, attempt: int, trace: TraceContext | None = None) -> ExecutionContext:
        """The attempt's context. ``trace`` is the attempt's trace context when a span was opened
        for it (OpenTelemetry); otherwise it is derived from the run (``core.trace``)."""
        if trace is None:
            trace = attempt_trace(
                run.job_run_id, attempt, workflow_run_id=run.workflow_run_id, traceparent=run.traceparent
            )
        definition = self.definition(run)
        snapshot = self._snapshots[run.config_snapshot_id]
        run_dir = f"{self._runs_dir}/{run.job_run_id}"
        payload = DispatchPayload(
            job_run_id=run.job_run_id,
            idempotency_key=run.idempotency_key,
            attempt=attempt,
            job_definition_id=run.job_definition_id,
            job_class=str(run.job_class),
            config_snapshot_id=snapshot.config_snapshot_id,
            config_digest=snapshot.config_digest,
            config=snapshot.content,
            params=dict(run.params),
            scope=dict(run.scope),
            target_engine_meid=definition.target_engine_meid,
            target_engine_cmi=definition.target_engine_cmi,
            authorization_context={
                "requested_by": run.requested_by,
                "tenant_id": run.tenant_id,
                "definition_digest": run.definition_digest,
            },
            trace_context=trace.as_dict(),
            execution_timeout=run.execution_timeout,
            max_attempts=run.max_attempts,
        )
        return ExecutionContext(payload=payload, workdir=f"{run_dir}/attempt-{attempt}", log_path=f"{run_dir}/run.log")

    def executor(self, run: JobRun) -> Executor:
        definition = self.definition(run)
        spec = definition.executor
        if spec.kind == "command" and spec.runner:
            body = definition.content.get("body")
            return CommandExecutor(
                self._runner(spec.runner),
                body if isinstance(body, str) else None,
                dict(run.params),
                binary_sha256=self._approved_binary(run),
            )
        return self._shared(definition)

    def _approved_binary(self, run: JobRun) -> str | None:
        """The runner binary's digest the run's approval holds (its active approval of the run's
        content), read at each attempt: a re-approval of changed code counts at once. None for
        an approval made before code was approved (it names no binary)."""
        with self.engine.store.read(tenant_id=run.tenant_id) as tx:
            approvals = tx.approvals_list(run.tenant_id, run.job_definition_id)
        current = [a for a in approvals if a.active and a.digest == run.definition_digest and a.code_identity]
        if not current:
            return None
        newest = max(current, key=lambda a: a.approved_at)  # the one the gate judged by
        return (newest.code_identity or {}).get("binary_sha256")

    def check(self, definition: JobDefinition) -> None:
        """Whether this host can execute ``definition``, by the same resolution an attempt
        makes: a ``ValidationError`` whose ``field`` says what it lacks (``handler``: its code
        does not import here; ``runner``, ``target_engine_meid``: not configured here)."""
        spec = definition.executor
        if spec.kind == "command" and spec.runner:
            self._runner(spec.runner)  # its executor is per run: it renders the run's params
        elif spec.kind == "python" and spec.handler:
            # Found, not imported: importing runs the module's code, and no gate has judged
            # this definition yet (an attempt imports it after the gates admitted it).
            check_handler(spec.handler)
            locate_handler(spec.handler)
        else:
            self._shared(definition)

    def _shared(self, definition: JobDefinition) -> Executor:
        """The executor every run of a Python handler or HTTP target shares."""
        spec = definition.executor
        if spec.kind == "python" and spec.handler:
            cached = self._python.get(spec.handler)
            if cached is not None:
                return cached
            with self._lock:
                if spec.handler not in self._python:
                    self._python[spec.handler] = PythonExecutor(
                        spec.handler, self._host, self._config.worker.trusted_handlers
                    )
                return self._python[spec.handler]
        registries = self.engine.config.registries
        if spec.kind == "http" and spec.target:
            target = registries.targets.get(spec.target)
            if target is None or target.http is None:
                raise ValidationError(f"HTTP target {spec.target!r} is not registered", field="target_engine_meid")
            return HttpExecutor(target.http)
        raise ValidationError(f"definition has no usable executor ({spec.kind})", field="executor")

    def _runner(self, name: str) -> RunnerSpec:
        runner = self.engine.config.registries.runners.get(name)
        if runner is None:
            raise ValidationError(f"runner {name!r} is not registered", field="runner")
        return runner


def grace_for(executor: Executor, default: timedelta) -> timedelta:
    runner = getattr(executor, "runner", None)
    return getattr(runner, "stop_grace", default)
