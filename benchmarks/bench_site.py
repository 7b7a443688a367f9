"""The folder a benchmark runs jobgate in: configuration, one approved definition, a clean database.

``throughput.py`` and ``api_load.py`` start from the same place: a fresh folder with a
``jobgate.yaml`` (the database, the data folder, events to a file), one definition whose body is
the peers' job, applied and approved as an admin would, and on PostgreSQL the benchmark
database's jobgate tables emptied first.
"""

from __future__ import annotations

import json
from pathlib import Path

from jobgate.config import load_config
from jobgate.definitions import load_definitions
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.store.tables import metadata
from jobgate.testing import connection


def make_site(root: Path, definition: str, *, db: str | None, synchronous: str = "FULL") -> tuple[Path, Engine]:
    """Write the folder under ``root`` and return its configuration file and an engine on it.
    ``db``: a PostgreSQL URL (its tables are truncated), or None for a SQLite file in ``root``."""
    (root / "definitions").mkdir(parents=True)
    (root / "definitions" / "bench.yaml").write_text(definition)
    config_path = root / "jobgate.yaml"
    config_path.write_text(
        json.dumps(
            {
                "database": db or f"sqlite:///{root}/jobgate.db",
                "data_dir": str(root / "data"),
                "definitions": ["definitions"],
                "events": {"jsonl_path": str(root / "data" / "events.jsonl"), "log": False},
                "sqlite": {"synchronous": synchronous},
            }
        )
    )
    config = load_config(config_path)
    engine = Engine(Store(config.database, synchronous=config.sqlite.synchronous), config)
    if db and engine.store.dialect == "postgresql":
        tables = ", ".join(t.name for t in metadata.sorted_tables)
        with engine.store.write() as tx:  # a clean slate in the benchmark database
            connection(tx).exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY")
    for applied in engine.apply_definitions(load_definitions([root / "definitions"], config)):
        approvals.approve(engine, "default", applied.job_definition_id, actor="bench")  # an admin's blessing
    return config_path, engine
