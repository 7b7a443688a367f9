"""Observability from the database: the seed 000 §50 Prometheus metrics (``metrics``) and the
seed §37/§51 AII telemetry rollups (``rollup``, published through ``sinks`` once per
``periods.Period``). Only the pure period names are re-exported here: the other modules read
the database through the engine and are imported by their path, so that loading the
configuration (which names a period kind) never imports the engine."""

from jobgate.telemetry.periods import Period, PeriodKind

__all__ = ["Period", "PeriodKind"]
