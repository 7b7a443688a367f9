"""Loading folders and several files: ordered, all-or-nothing, no duplicate ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jobgate.config import JobgateConfig
from jobgate.core.errors import ValidationError
from jobgate.definitions import definition_files, load_definitions

Write = Callable[[str, str], Path]


def definition(job_id: str, **extra: object) -> str:
    return json.dumps(
        {
            "job_definition_id": job_id,
            "job_class": "MAINTENANCE_JOB",
            "handler": "jobgate.standins:hello",
            **extra,
        }
    )


def test_demo_definitions_all_load(demo_config: JobgateConfig) -> None:
    loaded = load_definitions(demo_config.definitions, demo_config)
    ids = {item.job_definition_id for item in loaded}
    assert {
        "TGJOBDEF-REPLAY-SAMPLING-001",
        "demo-hello",
        "demo-flaky",
        "demo-report",
        "export-payroll",
    } <= ids
    assert len(ids) == len(loaded)
    assert [Path(item.source).name for item in loaded] == sorted(Path(item.source).name for item in loaded)


def test_folder_is_read_sorted_and_non_recursive(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    write("defs/b.yaml", "job_definition_id: b\njob_class: MAINTENANCE_JOB\nhandler: m:f\n")
    write("defs/a.json", definition("a"))
    write("defs/c.yml", "job_definition_id: c\njob_class: MAINTENANCE_JOB\nhandler: m:f\n")
    write("defs/README.md", "not a definition")
    write("defs/.#a.json", "editor lock file")
    write("defs/nested/d.json", definition("d"))
    loaded = load_definitions([tmp_path / "defs"], demo_config)
    assert [item.job_definition_id for item in loaded] == ["a", "b", "c"]


def test_load_is_all_or_nothing(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    write("defs/a.json", definition("a"))
    bad = write("defs/b.json", definition("b", priority="urgent"))
    write("defs/c.json", definition("c"))
    result: list[object] | None = None
    with pytest.raises(ValidationError) as caught:
        result = list(load_definitions([tmp_path / "defs"], demo_config))
    assert result is None
    assert caught.value.source == str(bad)
    assert caught.value.field == "priority"


def test_duplicate_ids_name_both_files(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    first = write("one/x.json", definition("same"))
    second = write("two/y.yaml", "job_definition_id: same\njob_class: MAINTENANCE_JOB\nhandler: m:f\n")
    with pytest.raises(ValidationError) as caught:
        load_definitions([tmp_path / "one", second], demo_config)
    assert caught.value.source == str(second)
    assert caught.value.field == "job_definition_id"
    assert str(first) in caught.value.message
    assert "duplicate id 'same'" in caught.value.message


def test_same_id_in_two_tenants_is_two_definitions(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    write("defs/a.json", definition("same", tenant_id="acme"))
    write("defs/b.json", definition("same", tenant_id="globex"))
    loaded = load_definitions([tmp_path / "defs"], demo_config)
    assert [item.definition.tenant_id for item in loaded] == ["acme", "globex"]


def test_a_file_named_twice_is_read_once(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    path = write("defs/a.json", definition("a"))
    assert definition_files([tmp_path / "defs", path]) == [tmp_path / "defs" / "a.json"]
    assert len(load_definitions([path, tmp_path / "defs"], demo_config)) == 1


def test_missing_path_and_wrong_suffix_are_refused(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    with pytest.raises(ValidationError) as caught:
        load_definitions([tmp_path / "nope"], demo_config)
    assert (caught.value.source, caught.value.message) == (str(tmp_path / "nope"), "no such file or folder")
    with pytest.raises(ValidationError) as caught:  # it exists: a device is named as what it is not
        load_definitions([Path("/dev/null")], demo_config)
    assert caught.value.message == "not a regular file or a folder of definitions"
    text = write("defs/a.txt", definition("a"))
    with pytest.raises(ValidationError) as caught:
        load_definitions([text], demo_config)
    assert "unsupported file type" in caught.value.message


def test_oversized_and_binary_files_are_refused(write: Write, tmp_path: Path, demo_config: JobgateConfig) -> None:
    big = write("big.yaml", "#" * (1 << 20) + "\n")
    with pytest.raises(ValidationError, match="larger than"):
        load_definitions([big], demo_config)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValidationError, match="not UTF-8"):
        load_definitions([binary], demo_config)


def test_empty_load(tmp_path: Path, demo_config: JobgateConfig) -> None:
    (tmp_path / "empty").mkdir()
    assert load_definitions([tmp_path / "empty"], demo_config) == []
    assert load_definitions([], demo_config) == []
