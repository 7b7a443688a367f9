"""What an approval's code digest covers, found by a review trying to run unapproved code: a
forged bytecode cache of a module imported later, a module shipped as bytecode alone, a
package in a zip archive or behind a symlinked folder, an edit made while an attempt runs, a
runner binary found on the runner's own PATH; and reading an approval runs no package code.
Each asserts through a marker written by the code itself what really executed."""

from __future__ import annotations

import importlib
import os
import py_compile
import sys
import textwrap
import uuid
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from runtime_support import marker_lines, running_worker, wait_status, wait_until
from tests.executors.support import make_context
from tests.runtime.test_attempt_gates import submit

from helpers import define
from jobgate.core.decide import OutcomeKind
from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.governance import code
from jobgate.registry import RunnerSpec
from jobgate.runtime.executors import CommandExecutor
from jobgate.runtime.worker import Worker
from jobgate.service.engine import Engine


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executed.txt"
    monkeypatch.setenv("JOBGATE_TEST_MARKER", str(path))
    return path


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for this test's packages; each package's modules are forgotten after."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


LAZY = textwrap.dedent(
    """
    import os

    def work(ctx):
        from .helper import VALUE  # imported by the attempt, not when the handler is
        with open(os.environ["JOBGATE_TEST_MARKER"], "a") as fh:
            fh.write(VALUE + "\\n")
        return {}
    """
)


def test_a_module_imported_by_the_attempt_runs_its_source_not_a_forged_bytecode_cache(
    engine: Engine, site: Path, marker: Path
) -> None:
    """A ``.pyc`` planted for a module the handler imports later, compiled from other code of the
    same size and stamped with the approved source's time: Python would load it; a governed
    import compiles the approved source."""
    name = _name("lazy")
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text(LAZY)
    helper = package / "helper.py"
    helper.write_text('VALUE = "approved"\n')
    job = define(engine, handler=f"{name}:work")
    approved = os.stat(helper)
    helper.write_text('VALUE = "forged!!"\n')  # same size
    py_compile.compile(str(helper))  # the cache an import of the forged source leaves
    helper.write_text('VALUE = "approved"\n')
    os.utime(helper, ns=(approved.st_atime_ns, approved.st_mtime_ns))  # the cache's recorded time and size
    run_id = submit(engine, job)
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert marker_lines(marker) == [["approved"]]


def test_code_edited_while_an_attempt_runs_is_not_imported_by_it(engine: Engine, site: Path, marker: Path) -> None:
    """The handler's module imported, then its package edited before the attempt imports the
    rest: that import is refused (the attempt fails), and the next attempt is held."""
    name = _name("midway")
    package = site / name
    package.mkdir()
    edit_first = (
        "    with open(__file__.replace('__init__', 'helper'), 'w') as f:\n        f.write('VALUE = \"edited\"')\n"
    )
    (package / "__init__.py").write_text(LAZY.replace("def work(ctx):\n", "def work(ctx):\n" + edit_first))
    (package / "helper.py").write_text('VALUE = "approved"\n')
    job = define(engine, handler=f"{name}:work", retry_policy="test_fixed_v1")
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed"
    assert marker_lines(marker) == []


def test_a_module_shipped_as_bytecode_alone_is_part_of_the_digest(site: Path) -> None:
    name = _name("sourceless")
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "job_src.py"
    source.write_text("VALUE = 1\n")
    py_compile.compile(str(source), cfile=str(package / "job.pyc"))
    source.unlink()
    before = code.package_digest(name)
    source.write_text("VALUE = 2\n")
    py_compile.compile(str(source), cfile=str(package / "job.pyc"))
    source.unlink()
    assert code.package_digest(name) != before


def test_a_package_in_a_zip_archive_is_digested_as_the_archive(site: Path, tmp_path: Path) -> None:
    name = _name("zipped")
    archive = tmp_path / "jobs.zip"

    def build(value: str) -> None:
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr(f"{name}/__init__.py", f"VALUE = {value!r}\n")

    build("approved")
    sys.path.insert(0, str(archive))
    try:
        before = code.package_digest(name)
        assert before.startswith("zip:")
        build("edited!!")
        assert code.package_digest(name) != before
    finally:
        sys.path.remove(str(archive))
        sys.path_importer_cache.pop(str(archive), None)


def test_a_package_with_no_readable_file_binds_nothing_and_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(code.CodeUnreadable):
        code.tree_digest([str(tmp_path / "empty")])


def test_a_symlinked_folder_inside_a_package_is_digested(site: Path, tmp_path: Path) -> None:
    name = _name("linked")
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    shared = tmp_path / "shared" / "common"
    shared.mkdir(parents=True)
    (shared / "__init__.py").write_text("")
    (shared / "util.py").write_text("VALUE = 1\n")
    (package / "common").symlink_to(shared, target_is_directory=True)
    (package / "loop").symlink_to(package, target_is_directory=True)  # a loop is read once
    before = code.package_digest(name)
    (shared / "util.py").write_text("VALUE = 2\n")
    assert code.package_digest(name) != before


def test_reading_a_subpackages_digest_runs_none_of_its_code(site: Path, marker: Path) -> None:
    name = _name("sidefx")
    package = site / name
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported\\n')\n")
    (package / "sub" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported\\n')\n")
    (package / "sub" / "mod.py").write_text("")
    assert code.package_digest(f"{name}.sub").startswith("sha256:")
    assert not marker.exists() and name not in sys.modules


def test_a_runner_binary_is_the_one_on_the_runners_own_path(tmp_path: Path, marker: Path) -> None:
    """A runner's ``env`` PATH decides which binary runs: the approval digests that one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f"#!/bin/sh\necho fake >> {marker}\n")
    fake.chmod(0o755)
    runner = RunnerSpec(
        name="pathy", binary="python3", args=("-c", "pass"), env=(("PATH", f"{bin_dir}:/usr/bin:/bin"),)
    )
    parts = code.CodeReader(registries=None)._runner(runner)  # type: ignore[arg-type]
    assert parts["binary"] == str(fake.resolve())
    ran = CommandExecutor(runner, None, {}).execute(make_context(tmp_path))
    assert ran.outcome.kind is OutcomeKind.SUCCEEDED and marker_lines(marker) == [["fake"]]


def test_an_editable_distribution_binds_the_packages_it_makes_importable(site: Path, tmp_path: Path) -> None:
    """Found by a review: ``code: [distribution:NAME]`` of a ``pip install -e`` install digested
    only its ``.pth`` and metadata, so an edit of its code ran unapproved."""
    name = _name("edjobs")
    source = tmp_path / "project" / "src"
    (source / name).mkdir(parents=True)
    (source / name / "__init__.py").write_text("")
    (source / name / "util.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(source))  # what the install's .pth adds
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "direct_url.json").write_text('{"dir_info": {"editable": true}, "url": "file:///project"}')
    (site / f"__editable__.{name}-1.0.pth").write_text(f"{source}\n")
    (info / "RECORD").write_text(f"__editable__.{name}-1.0.pth,,\n{name}-1.0.dist-info/METADATA,,\n")
    try:
        reader = code.CodeReader(registries=None)  # type: ignore[arg-type]
        before = reader._distribution(name)
        (source / name / "util.py").write_text("VALUE = 2\n")
        assert reader._distribution(name) != before
    finally:
        sys.path.remove(str(source))


def test_a_listed_subpackage_binds_the_init_files_its_import_runs(site: Path) -> None:
    """``code: [package:a.sub]`` digested a/sub only; importing it runs a/__init__.py first."""
    name = _name("parent")
    (site / name / "sub").mkdir(parents=True)
    (site / name / "__init__.py").write_text("A = 1\n")
    (site / name / "sub" / "__init__.py").write_text("")
    reader = code.CodeReader(registries=None)  # type: ignore[arg-type]
    parts = reader._listed([f"package:{name}.sub"])
    assert sorted(parts) == [f"module:{name}", f"package:{name}.sub"]
    (site / name / "__init__.py").write_text("A = 2\n")
    assert reader._listed([f"package:{name}.sub"])[f"module:{name}"] != parts[f"module:{name}"]


def test_a_starting_worker_imports_no_handler_it_has_not_admitted(engine: Engine, site: Path, marker: Path) -> None:
    """Found by a review: a worker's capability probe imported the handler module of every
    active definition, running the module-level code of unapproved ones. It finds them
    without importing; a run's attempt imports its handler after the gates admitted it."""
    name = _name("unapproved")
    (site / name).mkdir()
    (site / name / "__init__.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('imported\\n')\n\ndef work(ctx):\n    return {{}}\n"
    )
    define(engine, handler=f"{name}:work", approve=False)
    assert not marker.exists() and name not in sys.modules  # applying read its source; none of it ran
    with running_worker(engine) as worker:
        worker.idle.wait(5)
    assert not marker.exists() and name not in sys.modules


def test_a_handler_package_another_handler_imports_is_governed_from_the_start(
    engine: Engine, site: Path, marker: Path
) -> None:
    """Found by a review: handler a's module imports handler b's package; a forged .pyc of b
    ran when a was loaded first (b was not governed yet). Every handler a worker may run is
    governed when it starts, before any is imported."""
    a, b = _name("pa"), _name("pb")
    for pkg in (a, b):
        (site / pkg).mkdir()
        (site / pkg / "__init__.py").write_text("")
    (site / a / "h.py").write_text(f"import {b}.h\n\ndef run(ctx):\n    return {{}}\n")
    source = site / b / "h.py"
    source.write_text(LAZY.replace("from .helper import VALUE  #", "VALUE = 'approved'  #"))
    ja, jb = define(engine, handler=f"{a}.h:run"), define(engine, handler=f"{b}.h:work")
    for gone in [m for m in sys.modules if m.startswith((a, b))]:
        sys.modules.pop(gone)  # a worker starts afresh
    for part in (f"package:{a}", f"package:{b}", f"module:{a}.h", f"module:{b}.h"):
        code._LOADED.pop(part, None)
    code._GOVERNED.difference_update({a, b})  # nor has it governed any package yet
    approved = os.stat(source)
    source.write_text(source.read_text().replace("'approved'", "'forged!!'"))
    py_compile.compile(str(source))
    source.write_text(source.read_text().replace("'forged!!'", "'approved'"))
    os.utime(source, ns=(approved.st_atime_ns, approved.st_mtime_ns))
    first = submit(engine, ja)
    with running_worker(engine):
        wait_status(engine, first, RunStatus.COMPLETED)
        second = submit(engine, jb)
        wait_status(engine, second, RunStatus.COMPLETED)
    assert marker_lines(marker) == [["approved"]]


def test_a_handler_reloading_its_package_after_an_edit_is_refused(engine: Engine, site: Path, marker: Path) -> None:
    """Found by a review: an edit of the package's own ``__init__`` during an attempt ran when the
    handler reloaded the package (only submodule imports were compared)."""
    name = _name("reload")
    (site / name).mkdir()
    (site / name / "__init__.py").write_text("VALUE = 'approved'\n")
    (site / name / "h.py").write_text(
        textwrap.dedent(
            f"""
            import importlib, os
            import {name}

            def run(ctx):
                with open({name}.__file__, "w") as f:
                    f.write("VALUE = 'edited'\\n")
                importlib.reload({name})
                with open(os.environ["JOBGATE_TEST_MARKER"], "a") as fh:
                    fh.write({name}.VALUE + "\\n")
                return {{}}
            """
        )
    )
    job = define(engine, handler=f"{name}.h:run", retry_policy="test_fixed_v1")
    run_id = submit(engine, job)
    with running_worker(engine):
        assert wait_status(engine, run_id, RunStatus.HELD).hold_reason == "code_changed"
    assert marker_lines(marker) == []


def test_a_handler_in_a_namespace_subpackage_is_found_and_digested(site: Path) -> None:
    """Found by a review (a regression of finding specs without importing): a folder with no
    ``__init__.py`` under a package made ``apply`` exit 70 (KeyError)."""
    name = _name("nsroot")
    (site / name / "tasks").mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    (site / name / "tasks" / "h.py").write_text("def run(ctx):\n    return {}\n")
    code.locate_handler(f"{name}.tasks.h:run")
    assert name not in sys.modules  # found, not imported
    assert code.package_digest(f"{name}.tasks").startswith("sha256:")
    assert callable(code.resolve_handler(f"{name}.tasks.h:run"))


RECORD = textwrap.dedent(
    """
    import os

    def work(ctx):
        with open(os.environ["JOBGATE_TEST_MARKER"], "a") as fh:
            fh.write("ran\\n")
        return {}
    """
)


def test_special_files_in_a_handler_package_are_not_code_and_stop_nothing(
    engine: Engine, site: Path, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a named pipe blocked the worker (inside its write transaction), a
    socket or a dangling symlink (an editor's lock file) made every cycle fail. None of them is
    anything an import reads. A hidden file is (a handler may import from ``.vendor``): found by
    the regression review of this fix, which first left hidden names out."""
    import socket

    name = _name("special")
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text(RECORD)
    job = define(engine, handler=f"{name}:work")
    approved = code.package_digest(name)
    os.mkfifo(package / "ctl.fifo")
    (package / ".#__init__.py").symlink_to("root@host.1:1")  # dangling, as Emacs leaves one
    monkeypatch.chdir(package)  # a socket's path is short
    listening = socket.socket(socket.AF_UNIX)
    listening.bind("app.sock")
    try:
        assert code.package_digest(name) == approved  # none of them is code
        with pytest.raises(code.CodeUnreadable):  # never opened as a file (it would block)
            code.FILES.sha256(str(package / "ctl.fifo"))
        run_id = submit(engine, job)
        with running_worker(engine):
            wait_status(engine, run_id, RunStatus.COMPLETED)
    finally:
        listening.close()
    assert marker_lines(marker) == [["ran"]]
    (package / ".vendor").mkdir()
    (package / ".vendor" / "rules.py").write_text("RULE = 'x'\n")
    assert code.package_digest(name) != approved  # a hidden folder's module is code the handler may import


def test_a_module_a_code_path_binds_runs_its_source_not_a_forged_cache(
    engine: Engine, site: Path, marker: Path
) -> None:
    """Found by a review: only ``package:`` parts were compiled from source; a module bound by a
    ``code:`` path (or a distribution) ran a planted ``.pyc`` while its approval matched."""
    name = _name("pathmod")
    helper = site / f"{name}_helper.py"
    helper.write_text('VALUE = "approved"\n')
    (site / f"{name}_h.py").write_text(LAZY.replace("from .helper import VALUE", f"from {name}_helper import VALUE"))
    job = define(engine, handler=f"{name}_h:work", code=[str(helper)])
    approved = os.stat(helper)
    helper.write_text('VALUE = "forged!!"\n')  # same size
    py_compile.compile(str(helper))
    helper.write_text('VALUE = "approved"\n')
    os.utime(helper, ns=(approved.st_atime_ns, approved.st_mtime_ns))
    run_id = submit(engine, job)
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert marker_lines(marker) == [["approved"]]


def test_a_code_list_binds_the_packages_above_the_handler(
    engine: Engine, site: Path, marker: Path, tmp_path: Path
) -> None:
    """Found by a review: with a ``code:`` list, an edit of an ``__init__.py`` above the handler's
    module (which its import runs first) ran under the approval."""
    name = _name("parents")
    (site / name / "x").mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    (site / name / "x" / "__init__.py").write_text("")
    (site / name / "x" / "h.py").write_text(RECORD)
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.py").write_text("")
    job = define(engine, handler=f"{name}.x.h:work", code=[str(other)])
    (site / name / "x" / "__init__.py").write_text(
        "import os\nopen(os.environ['JOBGATE_TEST_MARKER'], 'a').write('INIT\\n')\n"
    )
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed" and marker_lines(marker) == []


@pytest.mark.parametrize(
    "reexport",
    [
        "from {name}.helper import work",
        "from .helper import work as work",
        # found by the regression review: through a module, an alias, a star import, a fallback
        "from . import helper\nwork = helper.work",
        "from .helper import work as _w\nwork = _w",
        "from .helper import *",
        "import {name}.helper as h\nwork = h.work",
        "try:\n    from .fast import work\nexcept ImportError:\n    from .helper import work",
        # found by a review: built by a call (a partial, a factory), the body is in helper
        "import functools\nfrom . import helper\nwork = functools.partial(helper.work)",
        "import functools\nfrom .helper import work as _w\nwork = functools.partial(_w)",
        "from .helper import make\nwork = make()",
        # found by the second regression review: a dotted module path, a decorator
        "import {name}.helper\nimport functools\nwork = functools.partial({name}.helper.work)",
        "import {name}.helper\nwork = {name}.helper.work",
        "from . import helper\n\n@helper.wrap\ndef work(ctx):\n    return {{}}",
    ],
)
def test_a_code_list_binds_the_module_that_defines_a_reexported_handler(
    engine: Engine, site: Path, marker: Path, reexport: str
) -> None:
    """Found by a review: ``handler: mk2:work`` where ``mk2/__init__.py`` only re-exports
    ``work`` from ``mk2/helper.py``, and ``code: [mk2/__init__.py]``: an edit of the function's
    own body ran under the approval. The module that defines it is bound, through re-exports."""
    name = _name("reexp")
    (site / name).mkdir()
    (site / name / "__init__.py").write_text(reexport.format(name=name) + "\n")
    factory = "\ndef make():\n    return work\n\ndef wrap(fn):\n    return work\n"
    (site / name / "helper.py").write_text(RECORD + factory)
    job = define(engine, handler=f"{name}:work", code=[str(site / name / "__init__.py")])
    (site / name / "helper.py").write_text(RECORD.replace('"ran', '"EDITED') + factory)
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed" and marker_lines(marker) == []


def test_without_a_code_list_the_module_another_package_reexports_is_bound_too(
    engine: Engine, site: Path, marker: Path
) -> None:
    """Found by a review: ``handler: myjobs.greet:work`` where ``greet`` only imports ``work``
    from another top-level package, no ``code:`` list: the approval bound ``package:myjobs``
    alone, and an edit of the function's own body ran."""
    jobs, helpers = _name("myjobs"), _name("helperpkg")
    for package in (jobs, helpers):
        (site / package).mkdir()
        (site / package / "__init__.py").write_text("")
    (site / helpers / "impl.py").write_text(RECORD)
    (site / jobs / "greet.py").write_text(f"from {helpers}.impl import work\n")
    job = define(engine, handler=f"{jobs}.greet:work")
    (site / helpers / "impl.py").write_text(RECORD.replace('"ran', '"EDITED'))
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed" and marker_lines(marker) == []


def test_a_host_job_decorator_renamed_by_assignment_is_refused_at_apply(engine: Engine, site: Path) -> None:
    """Found by a review: ``hj = code.host_job`` then ``@hj`` passed ``apply`` (the worker then
    refused it, leaving its runs waiting for ever)."""
    from jobgate.core.errors import ValidationError

    name = _name("hostalias")
    (site / f"{name}.py").write_text(
        "from jobgate.governance import code\nhj = code.host_job\nalso = hj\n\n"
        "@also\ndef run(ctx, host):\n    return {}\n"
    )
    with pytest.raises(ValidationError) as refused:
        define(engine, handler=f"{name}:run")
    assert refused.value.field == "handler" and "host" in refused.value.message


def test_an_edit_in_another_definitions_narrowed_part_does_not_stop_this_one(
    engine: Engine, site: Path, marker: Path
) -> None:
    """Found by the regression review: two definitions narrowed to ``package:mp.a`` and
    ``package:mp.b``; an edit in ``mp.b`` made the worker refuse to import ``mp.a``'s handler."""
    name = _name("shared")
    for part in ("a", "b"):
        (site / name / part).mkdir(parents=True)
        (site / name / part / "__init__.py").write_text("")
        (site / name / part / "h.py").write_text(RECORD)
    (site / name / "__init__.py").write_text("")
    ja = define(engine, handler=f"{name}.a.h:work", code=[f"package:{name}.a"])
    jb = define(engine, handler=f"{name}.b.h:work", code=[f"package:{name}.b"])
    for gone in [m for m in sys.modules if m.startswith(name)]:
        sys.modules.pop(gone)
    for part in [p for p in code._LOADED if name in p]:
        code._LOADED.pop(part)
    with running_worker(engine):
        wait_status(engine, submit(engine, jb), RunStatus.COMPLETED)  # the worker read mp.b's files
        (site / name / "b" / "x.py").write_text("X = 2\n")  # an edit of mp.b, outside mp.a's approval
        wait_status(engine, submit(engine, ja), RunStatus.COMPLETED)
    assert marker_lines(marker) == [["ran"], ["ran"]]


def test_an_edit_outside_a_narrowed_approval_does_not_stop_the_handler(
    engine: Engine, site: Path, marker: Path
) -> None:
    """Found by a review: ``code: [package:a.sub]`` binds ``a.sub`` (and ``a/__init__.py``), but
    an edit of ``a/other.py`` made a running worker refuse to import the handler ("what an
    approval bound"), leaving its runs waiting with no hold."""
    name = _name("narrow")
    (site / name / "sub").mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    (site / name / "sub" / "__init__.py").write_text("")
    (site / name / "sub" / "h.py").write_text(RECORD)
    job = define(engine, handler=f"{name}.sub.h:work", code=[f"package:{name}.sub"])
    for gone in [m for m in sys.modules if m.startswith(name)]:
        sys.modules.pop(gone)  # a worker starts afresh (applying the definition imported it here)
    for part in [p for p in code._LOADED if name in p]:
        code._LOADED.pop(part)
    code.locate_handler(f"{name}.sub.h:work")  # what a starting worker's probe does: files first read
    (site / name / "other.py").write_text("TAG = 'not bound'\n")
    run_id = submit(engine, job)
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert marker_lines(marker) == [["ran"]]


def test_a_request_dry_run_names_code_that_differs_from_the_approved(engine: Engine, site: Path) -> None:
    """Found by a review: a request's dry run said "admissible" while the code differed from
    the approved code, and the run its approval made was held at once (code_changed). The dry
    run asks the code gate too, of the code this host reads."""
    from jobgate.service import requests

    name = _name("reqcode")
    (site / name).mkdir()
    (site / name / "__init__.py").write_text("")
    (site / name / "h.py").write_text(RECORD)
    job = define(engine, handler=f"{name}.h:work")
    asked = requests.propose(
        engine, tenant_id="default", requester="ada", job_definition_id=job, params={}, title="t", reason="r"
    )
    fine = requests.dry_run(engine, asked)
    assert fine.admissible and [c.check for c in fine.checks] == ["admission", "code"]
    (site / name / "h.py").write_text(RECORD.replace('"ran', '"edited'))
    changed = requests.dry_run(engine, asked)
    assert not changed.admissible
    (check,) = [c for c in changed.checks if not c.ok]
    assert check.check == "code_changed" and f"package:{name}" in check.detail


@pytest.mark.parametrize("spelling", ["{p}", "{p}/", "{p}/.", "{p}/sub/..", "./{rel}"])
def test_a_package_tree_digest_is_the_same_however_its_folder_is_spelled(
    tmp_path: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing names each file relative to its root however the root is written (a trailing
    slash, a dot, a parent step, relative to the working folder), as ``os.path.relpath`` would:
    the digest an approval binds must not change with how a path entry spells the folder."""
    pkg = tmp_path / "pkg"
    (pkg / "sub" / "deeper").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/deeper/mod.py", ".hidden.py"):
        (pkg / name).write_text(f"# {name}\n")
    reference = code._digest_of(
        [[str(0), os.path.relpath(p, pkg), code.FILES.sha256(p)] for p in code._files_under(str(pkg))]
    )
    monkeypatch.chdir(tmp_path)
    root = spelling.format(p=pkg, rel="pkg")
    assert code.tree_digest([root]) == reference


class _SwappingWorker(Worker):
    """A worker whose handler files are rewritten between the gate that admits an attempt and
    the attempt's import of its handler: the race a review won by swapping a module every 3 ms."""

    swap: Callable[[], None] = staticmethod(lambda: None)

    def _launch(self, run: JobRun, now: datetime) -> None:
        type(self).swap()
        super()._launch(run, now)


EVIL = 'import os\nwith open(os.environ["JOBGATE_TEST_MARKER"], "a") as fh:\n    fh.write("evil\\n")\n'


@pytest.mark.parametrize("layout", ["module", "package"])
def test_code_swapped_between_the_gate_and_the_import_never_runs(
    engine: Engine, site: Path, marker: Path, layout: str
) -> None:
    """Found by a review: the first import of a top-level module (or of a package's
    ``__init__``) was compared with the file's digest read afresh, so a file rewritten after
    the gate admitted the attempt ran its new code, and the run COMPLETED. The import now holds
    each file to the bytes the gate read: the attempt is handed back unrun, once, and this
    worker claims no more of the definition version (its code changed under it)."""
    name = _name("swapped")
    if layout == "module":
        source, handler = site / f"{name}.py", f"{name}:work"
    else:
        (site / name).mkdir()
        (site / name / "h.py").write_text(RECORD)
        source, handler = site / name / "__init__.py", f"{name}.h:work"
    source.write_text(RECORD if layout == "module" else "")
    job = define(engine, handler=handler)
    run_id = submit(engine, job)
    for gone in [m for m in sys.modules if m.startswith(name)]:
        sys.modules.pop(gone)  # a worker starts afresh (applying the definition read it here)
    _SwappingWorker.swap = staticmethod(lambda: source.write_text(EVIL + source.read_text()))
    with running_worker(engine, worker_class=_SwappingWorker) as worker:
        wait_until(lambda: bool(worker.unrunnable), what="the worker to stop claiming the definition")
        worker.idle.wait(5)
    assert marker_lines(marker) == []  # neither the module's top level nor the handler ran
    with engine.store.read() as tx:
        reasons = [t.reason for t in tx.run_transitions(run_id)]
        run = tx.run_get(run_id)
    assert reasons.count(TransitionReason.RELEASED_UNRUNNABLE) == 1  # handed back once, not counted
    assert run is not None and run.status is RunStatus.SCHEDULED


def test_a_namespace_package_digest_follows_the_import_order_of_its_portions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a namespace package's portions were digested in sorted order, so
    reordering ``sys.path`` (which changes which portion's module is imported) kept the digest
    the approval bound while other code ran."""
    name = _name("nsp")
    for portion, tag in (("a", "A"), ("b", "B")):
        (tmp_path / portion / name).mkdir(parents=True)
        (tmp_path / portion / name / "h.py").write_text(f"TAG = {tag!r}\n")
    digests = []
    for order in (("a", "b"), ("b", "a")):
        with monkeypatch.context() as patch:
            for portion in reversed(order):
                patch.syspath_prepend(str(tmp_path / portion))
            importlib.invalidate_caches()
            digests.append(code.package_digest(name))
    assert digests[0] != digests[1]


def test_a_schedule_of_changed_code_is_told_its_runs_would_be_held_not_refused(engine: Engine, site: Path) -> None:
    """Found by a review: storing a schedule for a definition whose code changed since its
    approval said "its fires would be refused", though its fires are admitted and each run is
    held at its start (code_changed) until the code is approved again."""
    from datetime import UTC

    from jobgate.core.errors import ValidationError
    from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule
    from jobgate.service.schedules import put_schedules

    name = _name("sched")
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text(LAZY)
    (package / "helper.py").write_text('VALUE = "approved"\n')
    job = define(engine, handler=f"{name}:work", trigger_type="event")
    (package / "helper.py").write_text('VALUE = "edited"\n')
    at = datetime(2026, 3, 1, tzinfo=UTC)
    schedule = check_schedule(Schedule("on-done", job, ScheduleKind.EVENT, at, event_type="x.done"))
    with pytest.raises(ValidationError) as refused:
        put_schedules(engine, [schedule], source="cli", now=at)
    message = str(refused.value)
    assert "not the approved code" in message and "held at their start" in message
    assert "would be refused" not in message
