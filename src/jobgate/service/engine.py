"""The services over one store and one configuration, composed once.

``Engine`` holds the store, the configuration and the clock (database time on a shared
database), and the services built from them: ``definitions`` (storing and reading definition
versions), ``admission`` (the admission rule at a run's creation), ``pipeline`` (triggers into
runs). Replacing the configuration rebuilds them, so no cache outlives the configuration it was
computed from. ``submit``, ``submit_many``, ``apply_definitions`` and ``definition`` are the
doors most callers need.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jobgate.clock import Clock
from jobgate.config import JobgateConfig
from jobgate.core.models import JobDefinition
from jobgate.definitions.schema import LoadedDefinition
from jobgate.service.admission import Admission
from jobgate.service.definitions import ApplyResult, Definitions
from jobgate.service.pipeline import Pipeline
from jobgate.service.submission import SYSTEM_ACTOR, SubmitRequest, SubmitResult
from jobgate.store.sqlstore import Store, StoreTx


class Engine:
    """The service layer over one store and one configuration."""

    def __init__(self, store: Store, config: JobgateConfig, clock: Clock | None = None) -> None:
        self.store = store
        self.clock = clock or store.clock()  # database time on a shared database
        self.config = config

    @property
    def config(self) -> JobgateConfig:
        return self._config

    @config.setter
    def config(self, config: JobgateConfig) -> None:
        self._config = config
        self.definitions = Definitions(self.store, config, self.clock)
        self.admission = Admission(self.store, config, self.definitions)
        self.pipeline = Pipeline(self.store, config, self.clock, self.definitions, self.admission)

    def submit(self, request: SubmitRequest, *, actor: str | None = None) -> SubmitResult:
        """One trigger into one run (``service.pipeline``)."""
        return self.pipeline.submit_many([request], actor=actor)[0]

    def submit_many(self, requests: Sequence[SubmitRequest], *, actor: str | None = None) -> list[SubmitResult]:
        """A batch of triggers, validated together and stored in one transaction."""
        return self.pipeline.submit_many(requests, actor=actor)

    def apply_definitions(
        self,
        loaded: Sequence[LoadedDefinition],
        *,
        tenant_id: str | None = None,
        progress: Callable[[int], None] | None = None,
        applied_by: str = SYSTEM_ACTOR,
        applied_lineage: tuple[str, ...] = (),
        revert: bool = True,
    ) -> list[ApplyResult]:
        """Store every definition or none (``service.definitions``)."""
        return self.definitions.apply(
            loaded,
            tenant_id=tenant_id,
            progress=progress,
            applied_by=applied_by,
            applied_lineage=applied_lineage,
            revert=revert,
        )

    def definition(
        self, tx: StoreTx, tenant_id: str, job_definition_id: str, version: int | None = None
    ) -> JobDefinition:
        """A stored definition version, read back through this configuration's registries."""
        return self.definitions.get(tx, tenant_id, job_definition_id, version)
