"""CommandExecutor with real subprocesses: exit mapping, parameters, body file, artifacts, env, log.

Every runner here is ``python -c CODE ...`` with the test interpreter, so the tests need no
other binary and the child can report exactly what it received (argv, env, cwd, files).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from jobgate.core.decide import OutcomeKind
from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec
from jobgate.core.params import validate_params
from jobgate.registry import DEFAULT_NON_RETRYABLE_EXIT_CODES, RunnerSpec
from jobgate.runtime.executors import CommandExecutor, ExecutionContext, ExecutionResult, capture

from .support import make_context, read_log

# The child writes its argv (after the code) into argv.json in its working directory.
RECORD_ARGV = "import json, pathlib, sys; pathlib.Path('argv.json').write_text(json.dumps(sys.argv[1:]))"
# The child writes argv[2] into the file argv[1]: if the marker exists, a process ran.
WRITE_MARKER = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
SEED_PERIOD_PATTERN = r"^\d{4}-\d{2}$"  # seed 004's declared pattern for `period`


def py_runner(
    code: str,
    *args: str,
    artifact: str | None = None,
    env: tuple[tuple[str, str], ...] = (),
    non_retryable_exit_codes: frozenset[int] = DEFAULT_NON_RETRYABLE_EXIT_CODES,
) -> RunnerSpec:
    return RunnerSpec(
        name="py",
        binary=sys.executable,
        args=("-c", code, *args),
        artifact=artifact,
        env=env,
        non_retryable_exit_codes=non_retryable_exit_codes,
    )


def run(
    runner: RunnerSpec,
    ctx: ExecutionContext,
    params: Mapping[str, str] | None = None,
    body: str | None = None,
) -> ExecutionResult:
    return CommandExecutor(runner, body, dict(params or {})).execute(ctx)


# -- exit codes ------------------------------------------------------------------------------


def test_exit_zero_succeeds_with_runner_result(tmp_path: Path) -> None:
    result = run(py_runner("pass"), make_context(tmp_path))
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.result == {"exit_code": 0, "runner": "py"}
    assert result.artifact is None


@pytest.mark.parametrize(
    ("code", "non_retryable", "kind", "error_code"),
    [
        ("raise SystemExit(65)", None, OutcomeKind.NON_RETRYABLE_FAILURE, "EXIT_65"),  # sysexits EX_DATAERR
        ("raise SystemExit(1)", None, OutcomeKind.RETRYABLE_FAILURE, "EXIT_1"),
        ("raise SystemExit(3)", frozenset({3}), OutcomeKind.NON_RETRYABLE_FAILURE, "EXIT_3"),
        ("raise SystemExit(65)", frozenset({3}), OutcomeKind.RETRYABLE_FAILURE, "EXIT_65"),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            None,
            OutcomeKind.RETRYABLE_FAILURE,
            "SIGNAL_SIGKILL",
        ),
    ],
)
def test_exit_code_mapping(
    tmp_path: Path, code: str, non_retryable: frozenset[int] | None, kind: OutcomeKind, error_code: str
) -> None:
    runner = py_runner(code) if non_retryable is None else py_runner(code, non_retryable_exit_codes=non_retryable)
    outcome = run(runner, make_context(tmp_path)).outcome
    assert (outcome.kind, outcome.error_code) == (kind, error_code)


# -- binary resolution -----------------------------------------------------------------------


@pytest.mark.parametrize("binary", ["jobgate-no-such-binary-xyz", "/nonexistent/bin/tool"])
def test_missing_binary(tmp_path: Path, binary: str) -> None:
    outcome = run(RunnerSpec(name="ghost", binary=binary), make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "RUNNER_BINARY_NOT_FOUND"


def test_relative_binary_is_not_looked_up_in_the_run_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that can write its work directory must not be able to supply the program it runs."""
    ctx = make_context(tmp_path)
    planted = ctx.workdir / "tool"
    planted.write_text(f"#!{sys.executable}\nimport pathlib; pathlib.Path('planted-ran').write_text('x')\n")
    planted.chmod(0o755)
    elsewhere = tmp_path / "scheduler-cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outcome = run(RunnerSpec(name="rel", binary="./tool"), ctx).outcome
    assert outcome.error_code == "RUNNER_BINARY_NOT_FOUND"
    assert not (ctx.workdir / "planted-ran").exists()


# -- parameters ------------------------------------------------------------------------------

INJECTIONS = ["; rm -rf /", "$(touch /tmp/pwned)", "../etc/passwd", "a\nb", "`id`", "2026-06\n", "x y"]


def validate_then_execute(
    specs: list[ParamSpec], raw: Mapping[str, object], runner: RunnerSpec, ctx: ExecutionContext
) -> ExecutionResult:
    """The order the worker follows: validate the request's values, then build and run the executor."""
    params = validate_params(specs, raw)
    return CommandExecutor(runner, None, params).execute(ctx)


@pytest.mark.parametrize("pattern", [None, SEED_PERIOD_PATTERN], ids=["default-pattern", "seed-pattern"])
@pytest.mark.parametrize("value", INJECTIONS)
def test_injection_attempt_is_refused_before_any_process_starts(
    tmp_path: Path, pattern: str | None, value: str
) -> None:
    ctx = make_context(tmp_path)
    marker = tmp_path / "marker"
    runner = py_runner(WRITE_MARKER, str(marker), "{{.period}}")
    with pytest.raises(ValidationError) as info:
        validate_then_execute([ParamSpec("period", required=True, pattern=pattern)], {"period": value}, runner, ctx)
    assert info.value.field == "params.period"
    assert not marker.exists()


@pytest.mark.parametrize("pattern", [None, SEED_PERIOD_PATTERN], ids=["default-pattern", "seed-pattern"])
def test_valid_value_runs_which_proves_the_marker_would_catch_a_start(tmp_path: Path, pattern: str | None) -> None:
    ctx = make_context(tmp_path)
    marker = tmp_path / "marker"
    runner = py_runner(WRITE_MARKER, str(marker), "{{.period}}")
    result = validate_then_execute([ParamSpec("period", pattern=pattern)], {"period": "2026-06"}, runner, ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert marker.read_text() == "2026-06"


@pytest.mark.parametrize("value", ["hello world; touch pwned", "$(touch pwned)", "`touch pwned`", "a | b > pwned"])
def test_argv_is_passed_literally_without_a_shell(tmp_path: Path, value: str) -> None:
    permissive = ParamSpec("note", pattern=r"[A-Za-z ;$()`|>]{1,64}")
    ctx = make_context(tmp_path)
    runner = py_runner(RECORD_ARGV, "--note", "{{note}}", "--run", "{{run_id}}-{{attempt}}")
    result = validate_then_execute([permissive], {"note": value}, runner, ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert json.loads((ctx.workdir / "argv.json").read_text()) == ["--note", value, "--run", "run-1-1"]
    assert not (ctx.workdir / "pwned").exists()


def test_missing_template_value_fails_before_any_process_starts(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    marker = tmp_path / "marker"
    outcome = run(py_runner(WRITE_MARKER, str(marker), "{{.period}}"), ctx, params={}).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "INVALID_PARAMS"
    assert outcome.error_message is not None and "period" in outcome.error_message
    assert not marker.exists()


def test_reserved_name_as_parameter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        CommandExecutor(py_runner("pass", "{{workdir}}"), None, {"workdir": "/"})
    assert info.value.field == "params.workdir"


# -- body file ({{tmpfile}}) -----------------------------------------------------------------

READ_BODY = """
import json, os, pathlib, stat, sys
path = pathlib.Path(sys.argv[1])
pathlib.Path('seen.json').write_text(json.dumps({
    'path': str(path), 'text': path.read_text(), 'mode': stat.S_IMODE(os.stat(path).st_mode),
    'period': sys.argv[2],
}))
"""

SEED_004_BODY = """\
# Below: normal pipeline YAML; {{.period}} substituted before tdtpcli runs.
sources:
  - name: payroll
    type: mssql
    query: "SELECT * FROM Payroll WHERE Period = '{{.period}}'"
"""


def test_body_is_rendered_into_a_private_tmpfile_inside_the_workdir(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    runner = py_runner(READ_BODY, "{{.tmpfile}}", "{{.period}}")
    params = validate_params([ParamSpec("period", required=True, pattern=SEED_PERIOD_PATTERN)], {"period": "2026-06"})
    result = run(runner, ctx, params, body=SEED_004_BODY)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    seen = json.loads((ctx.workdir / "seen.json").read_text())
    assert seen["text"] == SEED_004_BODY.replace("{{.period}}", "2026-06")
    assert "WHERE Period = '2026-06'" in seen["text"]
    assert seen["mode"] == stat.S_IRUSR | stat.S_IWUSR
    assert Path(seen["path"]).parent == ctx.workdir.resolve()
    assert seen["period"] == "2026-06"
    assert not Path(seen["path"]).exists(), "the rendered body is removed after the attempt"


def test_tmpfile_without_a_body_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        CommandExecutor(py_runner("pass", "--pipeline", "{{.tmpfile}}"), None, {})
    assert info.value.field == "args[3]"


def test_body_with_missing_value_fails_before_any_process_starts(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    marker = tmp_path / "marker"
    outcome = run(py_runner(WRITE_MARKER, str(marker), "{{tmpfile}}"), ctx, {}, body="period {{.period}}").outcome
    assert outcome.error_code == "INVALID_PARAMS"
    assert not marker.exists()
    assert list(ctx.workdir.iterdir()) == []


# -- artifacts -------------------------------------------------------------------------------

WRITE_ARTIFACT = (
    "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); "
    "p.write_bytes(bytes(range(256)) * 4099)"
)


def test_artifact_is_recorded_with_sha256_and_size(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    runner = py_runner(WRITE_ARTIFACT, "out/payroll-{{period}}.bin", artifact="out/payroll-{{period}}.bin")
    result = run(runner, ctx, {"period": "2026-06"})
    content = bytes(range(256)) * 4099  # > 1 MiB, so hashing crosses a chunk boundary
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.artifact is not None
    assert result.artifact.path == str(ctx.workdir.resolve() / "out" / "payroll-2026-06.bin")
    assert result.artifact.sha256 == "sha256:" + hashlib.sha256(content).hexdigest()
    assert result.artifact.size == len(content)


def test_missing_artifact_after_success_is_not_an_error(tmp_path: Path) -> None:
    result = run(py_runner("pass", artifact="out/never-written.csv"), make_context(tmp_path))
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.artifact is None


@pytest.mark.parametrize("artifact", ["../escape.csv", "out/../../escape.csv", "/etc/passwd", "{{workdir}}/../x"])
def test_artifact_path_outside_workdir_is_refused_before_any_process_starts(tmp_path: Path, artifact: str) -> None:
    ctx = make_context(tmp_path)
    marker = tmp_path / "marker"
    outcome = run(py_runner(WRITE_MARKER, str(marker), "ran", artifact=artifact), ctx).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "ARTIFACT_OUTSIDE_WORKDIR"
    assert not marker.exists()


def test_artifact_symlink_pointing_outside_workdir_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    ctx = make_context(tmp_path)
    link = "import os, sys; os.symlink(sys.argv[1], 'report.csv')"
    outcome = run(py_runner(link, str(secret), artifact="report.csv"), ctx).outcome
    assert outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert outcome.error_code == "ARTIFACT_OUTSIDE_WORKDIR"


# -- environment and log ---------------------------------------------------------------------

DUMP_ENV = "import json, os, pathlib; pathlib.Path('env.json').write_text(json.dumps(dict(os.environ)))"


def test_child_gets_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBGATE_DATABASE_URL", "postgresql://secret@db/jobgate")
    ctx = make_context(tmp_path, attempt=2)
    runner = py_runner(DUMP_ENV, env=(("TDTP_MODE", "batch"), ("JOBGATE_RUN_ID", "spoofed")))
    assert run(runner, ctx).outcome.kind is OutcomeKind.SUCCEEDED
    env = json.loads((ctx.workdir / "env.json").read_text())
    assert "JOBGATE_DATABASE_URL" not in env
    assert env["TDTP_MODE"] == "batch"
    assert env["JOBGATE_RUN_ID"] == "run-1"
    assert env["JOBGATE_ATTEMPT"] == "2"
    assert env["JOBGATE_IDEMPOTENCY_KEY"] == "key-run-1"
    allowed = {
        "PATH",
        "LANG",
        "HOME",
        "TDTP_MODE",
        "JOBGATE_RUN_ID",
        "JOBGATE_ATTEMPT",
        "JOBGATE_IDEMPOTENCY_KEY",
        "JOBGATE_OUTPUTS",  # where the command may write its outputs (a file in its work dir)
    }
    # The interpreter or libc may add a few variables of its own (e.g. LC_CTYPE on some platforms).
    assert set(env) - allowed <= {"LC_CTYPE", "__CF_USER_TEXT_ENCODING"}
    assert env.get("PATH") == os.environ.get("PATH")


def test_stdout_and_stderr_are_appended_to_the_run_log(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    ctx.log("earlier line")
    code = "import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr); sys.exit(1)"
    outcome = run(py_runner(code), ctx).outcome
    assert outcome.error_code == "EXIT_1"
    log = read_log(ctx)
    assert log.startswith("earlier line\n")
    assert "to stdout" in log
    assert "to stderr" in log
    assert "exited with code 1" in log


def test_output_past_the_attempt_cap_is_dropped_and_never_blocks_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner printing far more than the cap: the log keeps the cap's worth and one line
    saying the rest is not kept, the pipe is drained (the runner finishes its writes and then
    leaves its marker), and the outcome is the runner's own."""
    monkeypatch.setattr(capture, "MAX_ATTEMPT_LOG_BYTES", 4096)
    ctx = make_context(tmp_path)
    code = (
        "import pathlib, sys\n"
        "for i in range(2000): sys.stdout.write('x' * 511 + '\\n')\n"  # about 1 MiB through a 64 KiB pipe
        "sys.stdout.flush(); pathlib.Path('finished').write_text('yes')"
    )
    result = run(py_runner(code), ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert (ctx.workdir / "finished").read_text() == "yes"
    log = read_log(ctx)
    kept = log.split("[jobgate] starting runner", 1)[1]
    assert kept.count("x") <= 4096
    assert "this attempt's output passed 4096 bytes; the rest is not kept" in log
    assert log.rstrip().splitlines()[-1].endswith("exited with code 0")


def test_the_attempt_ends_when_the_runner_exits_though_its_child_holds_the_output(tmp_path: Path) -> None:
    """A runner leaving a background process that keeps its stdout open: the attempt does not
    wait for that process (its later output is not the attempt's), and what the runner wrote
    before it exited is in the log."""
    ctx = make_context(tmp_path)
    code = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"  # real time: outlives it
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('runner done', flush=True)"
    )
    started = time.monotonic()
    try:
        result = run(py_runner(code), ctx)
        elapsed = time.monotonic() - started
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int((ctx.workdir / "child.pid").read_text()), signal.SIGKILL)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert elapsed < 30, elapsed  # the background process sleeps 60 s
    assert "runner done" in read_log(ctx)


def test_missing_workdir_and_log_directory_are_created(tmp_path: Path) -> None:
    fresh = tmp_path / "runs" / "run-9"
    payload = make_context(tmp_path).payload
    ctx = ExecutionContext(payload=payload, workdir=fresh / "attempt-1", log_path=fresh / "run.log")
    outcome = run(py_runner("import os; print('cwd', os.getcwd())"), ctx).outcome
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert f"cwd {ctx.workdir.resolve()}" in read_log(ctx)


# -- outputs (a workflow step's declared outputs) ---------------------------------------------

WRITE_OUTPUTS = "import os, pathlib, sys; pathlib.Path(os.environ['JOBGATE_OUTPUTS']).write_text(sys.argv[1])"


def test_a_command_reports_outputs_through_the_outputs_file(tmp_path: Path) -> None:
    result = run(py_runner(WRITE_OUTPUTS, '{"rows": 3, "path": "out.csv", "exit_code": 9}'), make_context(tmp_path))
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    # jobgate's own keys win: a command cannot claim another exit code.
    assert result.result == {"rows": 3, "path": "out.csv", "exit_code": 0, "runner": "py"}


@pytest.mark.parametrize(
    "written",
    [
        "[1, 2]",
        "not json",
        '"text"',
        "x" * (64 * 1024 + 1),
        # found by a review: stored as null, or (a lone surrogate) failing every settlement after
        '{"x": NaN}',
        '{"x": -Infinity}',
        '{"n": 1e999}',
        '{"s": "\\ud800"}',
        '{"a": ' + "[" * 1000 + "]" * 1000 + "}",  # past the parser's recursion: not a retryable error
        '{"a": ' + "[" * 100 + "]" * 100 + "}",  # past a result's nesting
    ],
)
def test_anything_but_a_small_json_object_fails_the_attempt(tmp_path: Path, written: str) -> None:
    result = run(py_runner(WRITE_OUTPUTS, written), make_context(tmp_path))
    assert result.outcome.kind is OutcomeKind.NON_RETRYABLE_FAILURE
    assert result.outcome.error_code == "INVALID_OUTPUTS"


def test_an_outputs_symlink_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "x"}')
    code = f"import os; os.symlink({str(secret)!r}, os.environ['JOBGATE_OUTPUTS'])"
    result = run(py_runner(code), make_context(tmp_path))
    assert result.outcome.error_code == "INVALID_OUTPUTS"


def test_a_runner_runs_when_the_worker_holds_descriptors_past_1024(tmp_path: Path) -> None:
    """Found by a review: select() refuses descriptors numbered 1,024 and above, and a long-lived
    worker (many connections) may hold them: the pipe is polled instead."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this host allows {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        ctx = make_context(tmp_path)
        result = run(py_runner("print('past 1024', flush=True)"), ctx)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.outcome.kind is OutcomeKind.SUCCEEDED and "past 1024" in read_log(ctx)


# -- the approved binary ------------------------------------------------------------------------


def test_the_approved_binary_is_the_one_that_runs_even_when_swapped_after_its_read(tmp_path: Path) -> None:
    """Found by a review: a runner's binary swapped (a rename) between the attempt's gate and
    the process's start ran as approved (120 of 300 runs on SQLite). The executor reads the
    binary once, checks its digest against the approval's, and executes that very file (its
    descriptor): the swapped-in file never runs, and a binary changed before the read is refused."""
    tool, bad = tmp_path / "tool", tmp_path / "bad"
    shutil.copy2(shutil.which("true") or "/bin/true", tool)  # exits 0
    shutil.copy2(shutil.which("false") or "/bin/false", bad)  # exits 1: it must never be what runs
    approved = "sha256:" + hashlib.sha256(tool.read_bytes()).hexdigest()
    runner = RunnerSpec(name="swap", binary=str(tool), args=())

    class SwappedAfterTheRead(CommandExecutor):
        def _verified(self, binary: str) -> int | None:
            fd = super()._verified(binary)
            os.replace(bad, tool)  # the race: the path now names other bytes
            return fd

    done = SwappedAfterTheRead(runner, None, {}, binary_sha256=approved).execute(make_context(tmp_path / "a"))
    assert done.outcome.kind is OutcomeKind.SUCCEEDED, done.outcome
    refused = CommandExecutor(runner, None, {}, binary_sha256=approved).execute(make_context(tmp_path / "b"))
    assert refused.outcome.kind is OutcomeKind.RETRYABLE_FAILURE and refused.outcome.error_code == "RUNNER_CODE_CHANGED"


def test_a_script_is_checked_just_before_it_starts(tmp_path: Path) -> None:
    """A script is started from its path (its interpreter reads it by it, and it may name
    itself by it), its bytes checked just before: a changed script does not start."""
    marker, script = tmp_path / "marker", tmp_path / "job.sh"
    script.write_text(f'#!/bin/sh\necho GOOD >> "{marker}"\n')
    script.chmod(0o755)
    approved = "sha256:" + hashlib.sha256(script.read_bytes()).hexdigest()
    runner = RunnerSpec(name="sh", binary=str(script), args=())
    assert (
        CommandExecutor(runner, None, {}, binary_sha256=approved).execute(make_context(tmp_path / "a")).outcome.kind
        is OutcomeKind.SUCCEEDED
    )
    script.write_text(f'#!/bin/sh\necho BAD >> "{marker}"\n')
    refused = CommandExecutor(runner, None, {}, binary_sha256=approved).execute(make_context(tmp_path / "b"))
    assert refused.outcome.error_code == "RUNNER_CODE_CHANGED" and marker.read_text() == "GOOD\n"


def test_an_approved_python_runner_runs_from_its_descriptor(tmp_path: Path) -> None:
    """The interpreter started through its descriptor finds its own library (argv[0] is kept)."""
    binary = os.path.realpath(sys.executable)
    approved = "sha256:" + hashlib.sha256(Path(binary).read_bytes()).hexdigest()
    runner = RunnerSpec(name="py", binary=binary, args=("-c", WRITE_MARKER, "out.txt", "ok"))
    ctx = make_context(tmp_path)
    result = CommandExecutor(runner, None, {}, binary_sha256=approved).execute(ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED, read_log(ctx)
    assert (ctx.workdir / "out.txt").read_text() == "ok"
