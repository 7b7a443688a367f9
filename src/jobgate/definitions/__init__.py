"""Job definitions: reading, validating and digesting the files that say what can run."""

from jobgate.core.definition_fields import DEFINITION_FIELDS
from jobgate.definitions.loader import (
    DEFINITION_SUFFIXES,
    definition_files,
    load_definition_file,
    load_definitions,
    parse_definition_text,
)
from jobgate.definitions.scenario import parse_scenario
from jobgate.definitions.schema import (
    LoadedDefinition,
    is_cron_shaped,
    parse_definition,
)
from jobgate.scheduling.intervals import interval_seconds

__all__ = [
    "DEFINITION_FIELDS",
    "DEFINITION_SUFFIXES",
    "LoadedDefinition",
    "definition_files",
    "interval_seconds",
    "is_cron_shaped",
    "load_definition_file",
    "load_definitions",
    "parse_definition",
    "parse_definition_text",
    "parse_scenario",
]
