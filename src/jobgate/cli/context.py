"""What every command needs: configuration, the store, the engine, and the output mode."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import click

from jobgate.config import CONFIG_FILENAME, JobgateConfig, default_config, load_config, resolve_database_url
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store

CONFIG_ENV = "JOBGATE_CONFIG"


@dataclass
class AppContext:
    config_path: str | None
    database: str | None
    json_output: bool
    _engine: Engine | None = field(default=None, repr=False)

    def config(self) -> JobgateConfig:
        path = self.config_path or os.environ.get(CONFIG_ENV)
        if path:
            return load_config(path)
        if Path(CONFIG_FILENAME).is_file():
            return load_config(CONFIG_FILENAME)
        return default_config(Path.cwd())

    def engine(self) -> Engine:
        if self._engine is None:
            config = self.config()
            url = resolve_database_url(config, self.database)
            self._engine = Engine(Store(url, synchronous=config.sqlite.synchronous), config)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.store.dispose()


pass_app = click.make_pass_decorator(AppContext)
