"""Loading definition files: one definition per file, YAML, JSON or a seed 004 scenario.

A load is all-or-nothing: ``load_definitions`` either returns every definition of every
path or raises on the first refusal (naming the file), so a half-valid folder can never
become half a deployment. A folder is read non-recursively, in sorted file-name order,
taking only ``*.yaml``, ``*.yml`` and ``*.json`` files not starting with ``.`` (editor
back-ups, ``README.md`` and sub-folders are ignored); a named file must have one of those
suffixes. Two files defining the same ``job_definition_id`` for the same tenant are refused,
naming both files, since which of them would win is exactly the ambiguity a review exists
to rule out.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from jobgate.core.errors import ValidationError
from jobgate.definitions.scenario import HEADER_KEY, parse_scenario, split_header, starts_with_header
from jobgate.definitions.schema import LoadedDefinition, parse_definition
from jobgate.documents import parse_json, parse_yaml, read_text

if TYPE_CHECKING:  # only for annotations: jobgate.config imports this package's documents module
    from jobgate.config import JobgateConfig

DEFINITION_SUFFIXES = (".yaml", ".yml", ".json")
DocumentFormat = Literal["yaml", "json"]


def load_definitions(paths: Iterable[str | Path], config: JobgateConfig) -> list[LoadedDefinition]:
    """Load every definition under ``paths`` (files or folders), all or nothing, in a stable order."""
    loaded = [load_definition_file(file, config) for file in definition_files(paths)]
    refuse_duplicates(loaded)
    return loaded


def refuse_duplicates(loaded: Iterable[LoadedDefinition]) -> None:
    """Refuse two definitions of one id for one tenant, naming both sources."""
    seen: dict[tuple[str, str], str] = {}
    for item in loaded:
        key = (item.definition.tenant_id, item.job_definition_id)
        if key in seen:
            raise ValidationError(
                f"duplicate id {item.job_definition_id!r} (tenant {key[0]!r}): also defined in {seen[key]}",
                field="job_definition_id",
                source=item.source,
            )
        seen[key] = item.source


def definition_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files a load reads, in order; a path that is neither file nor folder is refused."""
    files: list[Path] = []
    resolved: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = sorted(
                child
                for child in path.iterdir()
                if child.is_file() and child.suffix in DEFINITION_SUFFIXES and not child.name.startswith(".")
            )
        elif path.is_file():
            if path.suffix not in DEFINITION_SUFFIXES:
                raise ValidationError("unsupported file type (expected .yaml, .yml, .json)", source=shown_path(path))
            candidates = [path]
        elif path.exists():
            raise ValidationError("not a regular file or a folder of definitions", source=shown_path(path))
        else:
            raise ValidationError("no such file or folder", source=shown_path(path))
        for candidate in candidates:
            key = candidate.resolve()
            if key not in resolved:  # a file named directly and through its folder is read once
                resolved.add(key)
                files.append(candidate)
    return files


def load_definition_file(path: str | Path, config: JobgateConfig) -> LoadedDefinition:
    """Read and validate one file; its name is the ``source`` every error and record carries."""
    file = Path(path)
    fmt: DocumentFormat = "json" if file.suffix == ".json" else "yaml"
    return parse_definition_text(read_text(file), shown_path(file), config, fmt=fmt)


def shown_path(path: Path) -> str:
    """A file's name as text any record can hold: a name that is not UTF-8 (Python hands its
    bytes over as lone surrogates, which no database can store) keeps them as ``\\xf6``."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def parse_definition_text(
    text: str, source: str, config: JobgateConfig, *, fmt: DocumentFormat = "yaml"
) -> LoadedDefinition:
    """Parse a definition or scenario from text (a file's, or one posted to the API)."""
    if fmt == "yaml" and starts_with_header(text):
        return parse_scenario(text, split_header(text, source), source, config)
    document = parse_json(text, source=source) if fmt == "json" else parse_yaml(text, source=source)
    if isinstance(document, dict) and HEADER_KEY in document:
        return parse_scenario(text, document[HEADER_KEY], source, config)
    return parse_definition(document, source, config)
