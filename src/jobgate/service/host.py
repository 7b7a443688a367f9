"""What jobgate's own jobs may use beyond a run's context, and who is given it.

A handler receives an ``ExecutionContext``: the run's own payload, snapshot and work folder,
nothing broader (seed 000 §56). jobgate's built-in jobs (anchoring, retention, telemetry,
replay sampling, the safe-mode job, the workflow starter) need more: the store, the clock,
the configuration. They declare it, ``@host_job``, and take a second parameter, ``Host``; the
worker passes it only to handlers whose module is jobgate's own or one the operator trusts
(``worker.trusted_handlers``). Any other handler that asks for it is refused when it is
loaded, so a definition cannot buy a way into the database by naming a handler
(``governance.code.host_job``, ``check_trusted``).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobgate.clock import Clock
from jobgate.config import JobgateConfig
from jobgate.context import ExecutionContext, StoreEffect, add_store_effect
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store


@dataclass(frozen=True)
class Host:
    """The engine a built-in job runs in: its services, store, clock and configuration."""

    engine: Engine

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def clock(self) -> Clock:
        return self.engine.clock

    @property
    def config(self) -> JobgateConfig:
        return self.engine.config

    def on_complete(self, ctx: ExecutionContext, effect: StoreEffect) -> None:
        """Make ``effect(tx)`` part of the transaction that completes ``ctx``'s run (as a
        handler's ``ctx.on_complete``, exactly once), with the store's transaction to write through."""
        add_store_effect(ctx, effect)
