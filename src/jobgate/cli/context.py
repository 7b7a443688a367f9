"""What every command needs: configuration, the store, the engine, and the output mode."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jobgate.core.errors import ValidationError

if TYPE_CHECKING:  # imported where used: ``jobgate --help`` loads none of them
    from jobgate.client.runs import RunsClient
    from jobgate.config import JobgateConfig
    from jobgate.service.engine import Engine

CONFIG_ENV = "JOBGATE_CONFIG"
NO_CONFIG = "no jobgate.yaml here — run `jobgate init` or pass --config"


@dataclass
class AppContext:
    config_path: str | None
    database: str | None
    json_output: bool
    server: str | None = None
    token: str | None = field(default=None, repr=False)
    server_named_as: str = "--server"  # or "$JOBGATE_SERVER": what a refusal names
    log_format: str | None = None  # --log-format / $JOBGATE_LOG_FORMAT; None: the config's
    log_level: str | None = None
    # init, demo and migrate (and serve, worker, scheduler with --migrate): create the database
    # and bring its schema up to date. Every other command opens what exists, or refuses.
    may_create: bool = False
    _engine: Engine | None = field(default=None, repr=False)
    _built_in_noted: bool = field(default=False, repr=False)

    def config(self) -> JobgateConfig:
        from jobgate.config import CONFIG_FILENAME, default_config, load_config

        path = self.config_path or os.environ.get(CONFIG_ENV)
        if path:
            return load_config(path)
        if Path(CONFIG_FILENAME).is_file():
            return load_config(CONFIG_FILENAME)
        self._note_built_in()
        return default_config(Path.cwd())

    def _note_built_in(self) -> None:
        """Say once, on stderr, that a command given a database but no configuration works under
        the built-in one: a review's runs submitted with ``--db folder/jobgate.db`` from outside
        the folder were bound to a configuration snapshot without the folder's profiles, and
        nothing said so. (A cluster's hosts may run on ``$JOBGATE_DATABASE_URL`` alone.)"""
        from jobgate.config import DATABASE_ENV

        if self._built_in_noted or not (self.database or os.environ.get(DATABASE_ENV)):
            return
        self._built_in_noted = True
        click.echo(
            "note: no jobgate.yaml here: the built-in configuration applies (no profiles, policies or"
            " runners of a folder's); pass --config FILE to use one",
            err=True,
        )

    def setup_logging(self) -> None:
        """Logging for a long-running command (worker, scheduler, serve): the command line's
        format and level, else the configuration's ``logging`` section (``jobgate.logs``)."""
        from jobgate.logs import configure

        settings = self.config().logging
        fmt = self.log_format or settings.format
        configure("json" if fmt == "json" else "text", (self.log_level or settings.level).lower())

    def engine(self) -> Engine:
        if self.server:
            raise ValidationError(
                f"this command works on a local database; through a server ({self.server_named_as} is set) only"
                " submit and runs … are available",
                field=self.server_named_as,
            )
        if self._engine is None:
            from jobgate.config import DATABASE_ENV, resolve_database_url
            from jobgate.service.engine import Engine
            from jobgate.store.opening import database_url, open_store

            config = self.config()
            url = database_url(resolve_database_url(config, self.database))
            hint = "" if config.path is not None or self.database or os.environ.get(DATABASE_ENV) else NO_CONFIG
            store = open_store(url, synchronous=config.sqlite.synchronous, create=self.may_create, hint=hint)
            self._engine = Engine(store, config)
        return self._engine

    def runs_client(self, *, requested_by: str | None = None, tenant_given: bool = False) -> RunsClient:
        """The local database, or the server given with ``--server`` (whose token decides
        the tenant and who asks, so ``--by`` and ``--tenant`` are refused there: a ``--tenant``
        written out, its default's name included, would otherwise be silently another's)."""
        from jobgate.client.runs import LocalRuns, RemoteRuns

        if not self.server:
            return LocalRuns(self.engine())
        if not self.token:
            raise ValidationError("give the server's bearer token (or set $JOBGATE_TOKEN)", field="--token")
        if requested_by:
            raise ValidationError("through --server the token is who asks; leave --by out", field="--by")
        if tenant_given:
            raise ValidationError("through --server the token decides the tenant; leave --tenant out", field="--tenant")
        return RemoteRuns(self.server, self.token, named_as=self.server_named_as)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.store.dispose()


pass_app = click.make_pass_decorator(AppContext)
