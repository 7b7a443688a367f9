"""Definitions declared in Python (``@jobgate.job``), read from importable modules.

``load_module_definitions(["pkg.jobs"], config)`` imports each module (a package: every module
under it), finds the jobs declared in it and parses their documents with the same rules as a
file (``parse_definition``), all or nothing, like ``load_definitions``. A job re-exported by
another module is read once, where it is defined. The module must be importable by this
process (installed, e.g. ``pip install -e .``, or on ``PYTHONPATH``): a worker imports it the
same way to run it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from jobgate.core.errors import ValidationError
from jobgate.decorator import DeclarationError, JobFunction
from jobgate.definitions.schema import LoadedDefinition, parse_definition

if TYPE_CHECKING:
    from jobgate.config import JobgateConfig


def load_module_definitions(modules: Iterable[str], config: JobgateConfig) -> list[LoadedDefinition]:
    """Every job declared in ``modules``, validated, in module then id order."""
    return [parse_definition(job.document, job.handler, config) for job in declared_jobs(modules)]


def declared_jobs(modules: Iterable[str]) -> list[JobFunction]:
    found: dict[str, JobFunction] = {}
    for name in modules:
        jobs = sorted(
            {id(j): j for module in _modules(name) for j in _jobs_in(module)}.values(),
            key=lambda j: j.job_definition_id,
        )
        if not jobs:
            raise ValidationError(f"no @jobgate.job functions in {name!r}", source=f"module:{name}")
        for job in jobs:
            found.setdefault(job.handler, job)
    return list(found.values())


def _modules(name: str) -> Iterator[ModuleType]:
    module = _import(name)
    yield module
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{module.__name__}."):
        yield _import(info.name)


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except DeclarationError as exc:
        raise ValidationError(str(exc), field="handler", source=f"module:{name}") from None
    except ModuleNotFoundError as exc:
        raise ValidationError(
            f"cannot import {exc.name!r}: install your package (pip install -e .) or add its folder to PYTHONPATH",
            source=f"module:{name}",
        ) from None
    except Exception as exc:  # the module's top level can fail in any way
        raise ValidationError(f"importing it raised {type(exc).__name__}: {exc}", source=f"module:{name}") from None


def _jobs_in(module: ModuleType) -> Iterator[JobFunction]:
    for value in vars(module).values():
        if isinstance(value, JobFunction) and value.module == module.__name__:
            yield value
