"""Observability from the database: the seed 000 §50 Prometheus metrics (``metrics``) and the
seed §37/§51 AII telemetry rollups (``rollup``, published through ``sinks`` once per
``core.periods.Period``)."""
