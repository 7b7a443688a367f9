"""Applying a definition reads its handler's module without running it (found by a review:
``serve`` and ``apply`` imported unapproved handlers, running their module-level code in the
process that holds the database and the tokens). What the source shows cannot run is refused;
what only an import could tell is left to the worker, which checks again after the gates."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from jobgate.core.errors import ValidationError
from jobgate.governance.handler_source import check_handler_source

MARK = "import os\nopen(os.environ['HANDLER_SOURCE_MARKER'], 'a').write('ran\\n')\n"


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Path]:
    """A folder on sys.path, a fresh module name in it, and the marker its top level writes."""
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "ran.txt"
    monkeypatch.setenv("HANDLER_SOURCE_MARKER", str(marker))
    return tmp_path, f"hsrc_{uuid.uuid4().hex[:8]}", marker


@pytest.mark.parametrize(
    ("body", "handler", "said"),
    [
        ("def other(ctx):\n    return {}\n", "run", "has no attribute 'run'"),
        ("async def run(ctx):\n    return {}\n", "run", "coroutine function"),
        ("run = 5\n", "run", "is not callable"),
        (
            "from jobgate.governance.code import host_job\n\n@host_job\ndef run(ctx, host):\n    return {}\n",
            "run",
            "worker.trusted_handlers",
        ),
        ("class Job:\n    def other(self, ctx):\n        return {}\n", "Job.run", "has no attribute 'Job.run'"),
        ("def run(ctx)\n    return {}\n", "run", "SyntaxError"),
        # found by the regression reviews: host_job under another name, or applied by a call
        (
            "from jobgate.governance.code import host_job as hj\n\n@hj\ndef run(ctx, host):\n    return {}\n",
            "run",
            "worker.trusted_handlers",
        ),
        (
            "from jobgate.governance import code as c\n\ndef _r(ctx, host):\n    return {}\n\nrun = c.host_job(_r)\n",
            "run",
            "worker.trusted_handlers",
        ),
        (
            "from jobgate.governance.code import host_job\n\n@host_job()\ndef run(ctx, host):\n    return {}\n",
            "run",
            "worker.trusted_handlers",
        ),
        # found by a first-hour review: a module is not a handler (its runs waited for ever)
        ("import os\n", "os", "is a module"),
    ],
)
def test_what_the_source_shows_cannot_run_is_refused_and_nothing_runs(
    module: tuple[Path, str, Path], body: str, handler: str, said: str
) -> None:
    folder, name, marker = module
    (folder / f"{name}.py").write_text(MARK + body)
    with pytest.raises(ValidationError) as refused:
        check_handler_source(f"{name}:{handler}", trusted=())
    assert refused.value.field == "handler" and said in refused.value.message, refused.value.message
    assert not marker.exists() and name not in sys.modules


@pytest.mark.parametrize(
    "body",
    [
        "def run(ctx):\n    return {}\n",
        "try:\n    import json\nexcept ImportError:\n    pass\nelse:\n    def run(ctx):\n        return {}\n",
        "if True:\n    run = print\n",
        "from json import loads as run\n",
        "from json import *\n",  # what a star import binds is known only to an import: the worker's
        "def __getattr__(name):\n    return print\n",
        "class Job:\n    def run(self, ctx):\n        return {}\n",
        # found by the regression reviews: shapes that import and run fine
        "import sys\nmatch sys.platform:\n    case _:\n        def run(ctx):\n            return {}\n",
        "try:\n    def run(ctx):\n        return {}\nexcept* ValueError:\n    pass\n",
        "if (run := print):\n    pass\n",
        "import contextlib\nwith contextlib.nullcontext(print) as run:\n    pass\n",
        "def _make(ctx):\n    return {}\nfor run in (_make,):\n    pass\n",
        "def setup():\n    global run\n    def run(ctx):\n        return {}\nsetup()\n",
        "globals()['run'] = print\n",
        "import sys\nsetattr(sys.modules[__name__], 'run', print)\n",
        "exec('def run(ctx): return {}')\n",
        "import sys\nif sys.version_info >= (3, 8):\n    def run(ctx):\n        return {}\nelse:\n    run = None\n",
        "def run(ctx):\n    return {}\nif False:\n    run = None\n",
        "def sync(f):\n    return lambda ctx: {}\n@sync\nasync def run(ctx):\n    return {}\n",
        "try:\n    from json import loads as run\nexcept ImportError:\n    run = None\n",
    ],
)
def test_what_the_source_binds_is_accepted_without_running_it(module: tuple[Path, str, Path], body: str) -> None:
    folder, name, marker = module
    (folder / f"{name}.py").write_text(MARK + body)
    handler = "Job.run" if body.startswith("class") else "run"
    check_handler_source(f"{name}:{handler}", trusted=())
    assert not marker.exists() and name not in sys.modules


def test_a_trusted_module_may_ask_for_the_host(module: tuple[Path, str, Path]) -> None:
    folder, name, _marker = module
    (folder / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from jobgate.governance.code import host_job

            @host_job
            def run(ctx, host):
                return {}
            """
        )
    )
    check_handler_source(f"{name}:run", trusted=(name,))


def test_a_missing_module_is_refused(module: tuple[Path, str, Path]) -> None:
    _folder, name, _marker = module
    with pytest.raises(ValidationError) as refused:
        check_handler_source(f"{name}:run", trusted=())
    assert refused.value.field == "handler" and name in refused.value.message
