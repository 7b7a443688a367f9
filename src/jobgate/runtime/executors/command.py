"""Command executor: run a configured runner as a subprocess, never through a shell (seed 004 "Runners").

Why it is shaped this way:

* The binary and the argument shape come from configuration (``RunnerSpec``); a run contributes
  only validated parameter values, each substituted inside one argv element. Argv goes straight
  to ``execve`` (``shell=False``), so a value can at worst be a strange but inert argument.
* Everything that can be refused is refused before a process exists: a template value that is
  missing, an artifact path that leaves the work directory, a binary that is not there. A
  refusal is ``NON_RETRYABLE_FAILURE``: retrying the same input cannot help.
* Each attempt is a session leader with its own process group, so stopping reaches whatever it
  spawned: SIGTERM to the group, SIGKILL after the grace period (seed 004 "Stop"). Stopping works
  from any thread, via ``stop()`` or by the caller setting ``ctx.cancelled`` (execution timeout);
  a process that was signalled ends the attempt as ``STOPPED`` whatever its exit code.
* Its stdout and stderr reach the run's log through a pipe this attempt's thread copies, at most
  ``MAX_ATTEMPT_LOG_BYTES`` an attempt like a Python handler's output (past that one line says
  the rest is not kept, and the pipe is still drained so the process never blocks on it). The
  attempt ends when the runner exits: what its own background processes write later, holding
  the pipe, is not the attempt's (a pump waiting for their end would hold the attempt open).
* The child sees a minimal environment, not the scheduler's (which may hold database URLs and
  tokens): PATH, LANG, HOME, the runner's configured ``env``, the run's identity, and its
  trace context as ``TRACEPARENT``.
* A relative binary path with a slash is resolved against the scheduler's working directory,
  never the run's, so a run cannot plant the program it will be executed with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import select
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from jobgate.context import ExecutionContext
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.errors import ValidationError
from jobgate.core.params import RESERVED, placeholders, render
from jobgate.registry import RunnerSpec
from jobgate.run_log import Interleaving
from jobgate.runtime.executors import capture
from jobgate.runtime.executors.base import Artifact, ExecutionResult, failure, log_best_effort, stopped
from jobgate.runtime.executors.results import NotStorable, loads_strict, storable

INHERITED_ENV = ("PATH", "LANG", "HOME")
_POLL_SECONDS = 0.05
_CHUNK = 1 << 20
_PIPE_CHUNK = 1 << 16
_DRAIN_SECONDS = 0.5  # after the runner exits, what is already in its pipe is still its output


@dataclass(frozen=True)
class _Plan:
    """Everything an attempt needs, computed before any side effect."""

    workdir: Path  # resolved
    argv: list[str]
    env: dict[str, str]
    body: str | None
    tmpfile: Path
    artifact: Path | None  # absolute, lexically and (as far as it exists) physically inside workdir


class _Refused(Exception):
    def __init__(self, kind: OutcomeKind, code: str, message: str) -> None:
        super().__init__(message)
        self.outcome = Outcome(kind, error_code=code, error_message=message)


class _Running:
    """A started process, shared by ``execute`` (which reaps it) and ``stop`` (from another thread).

    ``kill_at`` is the monotonic deadline for SIGKILL once termination began; a later ``stop``
    with a shorter grace may bring it forward, never push it back.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.lock = threading.Lock()
        self.kill_at: float | None = None

    @property
    def signalled(self) -> bool:
        with self.lock:
            return self.kill_at is not None

    def begin_termination(self, grace: timedelta) -> None:
        """SIGTERM the group now (once) and set the SIGKILL deadline; return at once."""
        deadline = time.monotonic() + max(grace.total_seconds(), 0.0)
        with self.lock:
            first = self.kill_at is None
            self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)
        if first:
            self._signal(signal.SIGTERM)

    def kill_if_due(self) -> None:
        """SIGKILL the group once termination's deadline has passed."""
        with self.lock:
            due = self.kill_at is not None and time.monotonic() >= self.kill_at
        if due:
            self._signal(signal.SIGKILL)

    def terminate(self, grace: timedelta) -> None:
        """SIGTERM the group now (once), SIGKILL it at the deadline, return when the leader is gone."""
        self.begin_termination(grace)
        while True:
            with self.lock:
                remaining = (self.kill_at or time.monotonic()) - time.monotonic()
            if remaining <= 0:
                break
            try:
                self.process.wait(timeout=min(remaining, _POLL_SECONDS))
                return
            except subprocess.TimeoutExpired:
                continue
        self._signal(signal.SIGKILL)
        self.process.wait()

    def finish_group(self) -> None:
        """Stopping, once the leader is gone: what it started in its group may ignore SIGTERM.
        They get the rest of the grace period, then SIGKILL. The group's id is signalled only
        while a member holds it (an id with members is never reused)."""
        pgid = self.process.pid
        while _group_alive(pgid):
            with self.lock:
                due = self.kill_at is not None and time.monotonic() >= self.kill_at
            if due:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                return
            time.sleep(_POLL_SECONDS)  # real time: waiting for other processes to leave

    def _signal(self, sig: signal.Signals) -> None:
        # Never signal a reaped leader: its number (the group id) may already belong to someone else.
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except (ProcessLookupError, PermissionError):
                # The leader left its group (setpgid): signal it directly so SIGKILL still ends the wait.
                self.process.send_signal(sig)


class CommandExecutor:
    """Runs one ``RunnerSpec`` with one run's validated parameters; safe to share between threads.

    ``param_values`` must already have passed ``jobgate.core.params.validate_params``; this class
    renders them, it does not judge them. Static mismatches between the runner and the definition
    (a reserved name used as a parameter, ``{{tmpfile}}`` without a body) raise ``ValidationError``
    here, when the executor is built, rather than failing each attempt. The work directory and
    the log's directory are created if missing, since the process must start in one.
    """

    def __init__(
        self,
        runner: RunnerSpec,
        body_template: str | None,
        param_values: dict[str, str],
        *,
        binary_sha256: str | None = None,
    ) -> None:
        """``binary_sha256``: the binary's digest the run's approval holds; the process then
        executes the very file whose bytes were read and found to be it (``_verified``)."""
        clash = sorted(RESERVED & param_values.keys())
        if clash:
            raise ValidationError("is a reserved template name", field=f"params.{clash[0]}", source=runner.name)
        if body_template is None:
            for i, arg in enumerate(runner.args):
                if "tmpfile" in placeholders(arg):
                    raise ValidationError(
                        "references {{tmpfile}} but the definition has no body to write to it",
                        field=f"args[{i}]",
                        source=f"runner {runner.name}",
                    )
        self.runner = runner
        self.body_template = body_template
        self.param_values = dict(param_values)
        self.binary_sha256 = binary_sha256
        self._lock = threading.Lock()
        self._running: dict[int, tuple[ExecutionContext, _Running]] = {}

    def execute(self, ctx: ExecutionContext) -> ExecutionResult:
        if ctx.is_cancelled():
            return stopped("stopped before the runner started")
        try:
            plan = self._plan(ctx)
        except _Refused as refused:
            log_best_effort(ctx, f"[jobgate] runner {self.runner.name} refused: {refused}")
            return ExecutionResult(refused.outcome)
        try:
            return self._run(ctx, plan)
        finally:
            with contextlib.suppress(FileNotFoundError):
                plan.tmpfile.unlink()

    def stop(self, ctx: ExecutionContext, grace: timedelta) -> None:
        """Mark the attempt cancelled, SIGTERM its process group, SIGKILL it after ``grace``.

        Blocks until the process is gone (at most about ``grace``). If the process has not
        started yet, ``execute`` sees the flag and either does not start it or terminates it
        right after starting it, with the runner's ``stop_grace``.
        """
        ctx.cancelled.set()
        with self._lock:
            entry = self._running.get(id(ctx))
        if entry is not None and entry[0] is ctx:
            entry[1].terminate(grace)

    # -- steps ---------------------------------------------------------------------------------

    def _plan(self, ctx: ExecutionContext) -> _Plan:
        runner = self.runner
        workdir = ctx.workdir.resolve()  # may not exist yet: _run creates it
        tmpfile = workdir / f".jobgate-body-{secrets.token_hex(8)}"
        values = {
            **self.param_values,
            "tmpfile": str(tmpfile),
            "workdir": str(workdir),
            "run_id": ctx.job_run_id,
            "attempt": str(ctx.attempt),
        }
        if self.body_template is None:
            del values["tmpfile"]
        try:
            body = None if self.body_template is None else render(self.body_template, values, source="body")
            args = [render(arg, values, source=f"runner {runner.name} args[{i}]") for i, arg in enumerate(runner.args)]
            artifact = None if runner.artifact is None else render(runner.artifact, values, source="artifact")
        except ValidationError as exc:
            raise _Refused(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_PARAMS", str(exc)) from None
        env = _child_env(runner, ctx)
        # A command reports outputs (a workflow step's declared outputs) by writing one JSON
        # object to this file, like CI systems' output files; jobgate picks the path.
        env[OUTPUTS_ENV] = str(workdir / OUTPUTS_FILE)
        binary = _resolve_binary(runner)
        artifact_path = None if artifact is None else _inside(workdir, artifact)
        return _Plan(workdir, [binary, *args], env, body, tmpfile, artifact_path)

    def _verified(self, binary: str) -> int | None:
        """A descriptor of ``binary`` whose bytes, read through it, are the approved ones (a
        compiled binary; None for a script, checked and started from its path; None when no
        digest is bound). A binary swapped by a rename after this read is not the file the
        descriptor names; one found changed is a retryable failure, and the next attempt's gate
        holds the run as ``code_changed``."""
        if self.binary_sha256 is None:
            return None
        fd = os.open(binary, os.O_RDONLY | os.O_CLOEXEC)
        try:
            h = hashlib.sha256()
            first = b""
            while block := os.read(fd, 1 << 20):
                first = first or block[:2]
                h.update(block)
        except OSError:
            os.close(fd)
            raise
        if "sha256:" + h.hexdigest() != self.binary_sha256:
            os.close(fd)
            raise _Refused(
                OutcomeKind.RETRYABLE_FAILURE,
                "RUNNER_CODE_CHANGED",
                f"runner {self.runner.name}: {binary} is not the binary its approval names (changed since the gate)",
            )
        if first == b"#!":
            # A script is read again by its interpreter, by the path it is started from, and
            # scripts name themselves by it ($0: a pyenv shim picks its program so): started
            # from its path, checked just before (the window is this function's return).
            os.close(fd)
            return None
        return fd

    def _run(self, ctx: ExecutionContext, plan: _Plan) -> ExecutionResult:
        try:
            plan.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
            if plan.body is not None:
                _write_private(plan.tmpfile, plan.body)
            log = ctx.log_path.open("ab+", buffering=0)  # each chunk as it comes; read: its last byte
        except OSError as exc:
            return failure(OutcomeKind.RETRYABLE_FAILURE, "WORKDIR_UNAVAILABLE", f"cannot prepare the attempt: {exc}")
        if ctx.is_cancelled():
            log.close()
            return stopped("stopped before the runner started")
        log_best_effort(
            ctx, f"[jobgate] starting runner {self.runner.name} (run {ctx.job_run_id}, attempt {ctx.attempt})"
        )
        verified: int | None = None
        try:
            verified = self._verified(plan.argv[0])
            process = subprocess.Popen(
                plan.argv,
                # The file the digest was read from, not its path again: a binary swapped since
                # the attempt's gate (or since the read) is not what runs (found by a review).
                executable=None if verified is None else f"/proc/self/fd/{verified}",
                pass_fds=() if verified is None else (verified,),
                shell=False,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=plan.workdir,
                env=plan.env,
            )
        except _Refused as refused:
            log.close()
            log_best_effort(ctx, f"[jobgate] runner refused: {refused}")
            return ExecutionResult(refused.outcome)
        except FileNotFoundError:
            log.close()
            return failure(OutcomeKind.NON_RETRYABLE_FAILURE, "RUNNER_BINARY_NOT_FOUND", f"{plan.argv[0]} not found")
        except PermissionError as exc:
            log.close()
            return failure(OutcomeKind.NON_RETRYABLE_FAILURE, "RUNNER_NOT_EXECUTABLE", f"{plan.argv[0]}: {exc}")
        except OSError as exc:  # fork/exec resource limits: worth another try later
            log.close()
            return failure(OutcomeKind.RETRYABLE_FAILURE, "RUNNER_START_FAILED", f"{plan.argv[0]}: {exc}")
        finally:
            if verified is not None:
                os.close(verified)  # the child has its own copy of the descriptor
        assert process.stdout is not None  # stdout=PIPE
        running = _Running(process)
        output = _Output(process.stdout, log, capture.MAX_ATTEMPT_LOG_BYTES, ctx.run_log)
        with self._lock:
            self._running[id(ctx)] = (ctx, running)
        try:
            code = self._wait(ctx, running, output)
        finally:
            output.close()
            with self._lock:
                self._running.pop(id(ctx), None)
        log_best_effort(ctx, f"[jobgate] runner {self.runner.name} exited with {_describe(code)}")
        if running.signalled:
            return stopped(f"stopped; runner {self.runner.name} exited with {_describe(code)}")
        outcome = _exit_outcome(self.runner, code)
        if outcome.kind is not OutcomeKind.SUCCEEDED:
            return ExecutionResult(outcome)
        try:
            artifact = None if plan.artifact is None else _record_artifact(plan.workdir, plan.artifact)
        except _Refused as refused:
            log_best_effort(ctx, f"[jobgate] artifact refused: {refused}")
            return ExecutionResult(refused.outcome)
        try:
            outputs = _read_outputs(plan.workdir / OUTPUTS_FILE)
        except _Refused as refused:
            log_best_effort(ctx, f"[jobgate] outputs refused: {refused}")
            return ExecutionResult(refused.outcome)
        result = {**outputs, "exit_code": 0, "runner": self.runner.name}
        return ExecutionResult(outcome, result=result, artifact=artifact)

    def _wait(self, ctx: ExecutionContext, running: _Running, output: _Output) -> int:
        """Copy the runner's output to the log until it exits, then what its pipe still holds;
        if the attempt gets cancelled meanwhile (by ``stop`` or by the caller setting
        ``ctx.cancelled``), terminate it with the runner's configured grace, still copying."""
        while True:
            output.copy(_POLL_SECONDS)
            code = running.process.poll()
            if code is not None:
                output.drain(_DRAIN_SECONDS)
                if running.signalled:
                    running.finish_group()
                return code
            if ctx.is_cancelled():
                running.begin_termination(self.runner.stop_grace)
            running.kill_if_due()


class _Output:
    """A runner's stdout and stderr, copied from their pipe into the run's log by the attempt's
    own thread: at most ``limit`` bytes an attempt, then one line saying the rest is not kept,
    the pipe drained all the same so the runner never blocks writing to it."""

    def __init__(self, pipe: IO[bytes], log: IO[bytes], limit: int, interleaving: Interleaving) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        self._poll = select.poll()  # not select(): a worker may hold descriptors past 1,024
        self._poll.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._log = log
        self._limit = limit
        self._written = 0
        self._dropped = False
        self._ended = False  # every writer closed the pipe
        self._interleaving = interleaving  # the attempt's, shared with its ctx.log lines

    def copy(self, timeout: float) -> None:
        """Copy what arrives within ``timeout`` seconds (wait that long when nothing does)."""
        if self._ended:
            time.sleep(timeout)  # real time: the runner closed its output and is still running
            return
        if self._readable(timeout):
            self._read_once()

    def drain(self, seconds: float) -> None:
        """After the runner exited: what its pipe holds already, for at most ``seconds`` (a
        process it left behind may hold the pipe open and keep writing)."""
        deadline = time.monotonic() + seconds
        while not self._ended and time.monotonic() < deadline:
            if not self._readable(0):
                return
            self._read_once()

    def _readable(self, timeout: float) -> bool:
        return bool(self._poll.poll(timeout * 1000))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._pipe.close()
        with contextlib.suppress(OSError):
            self._log.close()

    def _read_once(self) -> None:
        chunk = os.read(self._fd, _PIPE_CHUNK)
        if not chunk:
            self._ended = True
            return
        if self._dropped:
            return
        room = self._limit - self._written
        try:
            heading = self._interleaving.heading(self._log.fileno()).encode()
            if len(chunk) <= room:
                self._log.write(heading + chunk)
                self._written += len(chunk)
            else:
                self._dropped = True
                self._log.write(heading + chunk[:room] + capture.dropped_note(self._limit).encode())
                self._written = self._limit
            self._interleaving.wrote(self._log.fileno())
        except OSError:
            self._dropped = True  # a log that cannot be written: the attempt goes on, its output is lost


# -- helpers -----------------------------------------------------------------------------------


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member this process may signal."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _child_env(runner: RunnerSpec, ctx: ExecutionContext) -> dict[str, str]:
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    env.update(runner.env)
    env.update(
        JOBGATE_RUN_ID=ctx.job_run_id,
        JOBGATE_ATTEMPT=str(ctx.attempt),
        JOBGATE_IDEMPOTENCY_KEY=ctx.idempotency_key,
    )
    traceparent = ctx.traceparent
    if traceparent:
        env["TRACEPARENT"] = traceparent  # the name OpenTelemetry's environment carriers read
    return env


def _resolve_binary(runner: RunnerSpec) -> str:
    """The file to execute, found as the approval's code identity finds it (``located_binary``):
    a bare name on the child's PATH, a path against our own cwd, never the run's."""
    found = runner.located_binary()
    if found is None:
        where = "on PATH" if "/" not in runner.binary else "here"
        raise _Refused(
            OutcomeKind.NON_RETRYABLE_FAILURE, "RUNNER_BINARY_NOT_FOUND", f"{runner.binary!r} is not found {where}"
        )
    return found


def _inside(workdir: Path, relative: str) -> Path:
    """``relative`` resolved under ``workdir``; refused if it, or a symlink on the way, leaves it."""
    resolved = (workdir / relative).resolve()
    if not resolved.is_relative_to(workdir):
        raise _Refused(
            OutcomeKind.NON_RETRYABLE_FAILURE,
            "ARTIFACT_OUTSIDE_WORKDIR",
            f"artifact {relative!r} resolves to {resolved}, outside the work directory",
        )
    return resolved


def _record_artifact(workdir: Path, planned: Path) -> Artifact | None:
    """Hash the artifact the process left; resolved again because the process may have made it a symlink."""
    path = _inside(workdir, str(planned))
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return Artifact(path=str(path), sha256="sha256:" + digest.hexdigest(), size=size)


def _write_private(path: Path, text: str) -> None:
    """Create the body file 0600 and exclusively: it may hold rendered secrets, and must be ours."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _exit_outcome(runner: RunnerSpec, code: int) -> Outcome:
    if code == 0:
        return Outcome(OutcomeKind.SUCCEEDED)
    if code < 0:
        name = _signal_name(-code)
        return Outcome(OutcomeKind.RETRYABLE_FAILURE, f"SIGNAL_{name}", f"runner {runner.name} was killed by {name}")
    kind = (
        OutcomeKind.NON_RETRYABLE_FAILURE if code in runner.non_retryable_exit_codes else OutcomeKind.RETRYABLE_FAILURE
    )
    return Outcome(kind, f"EXIT_{code}", f"runner {runner.name} exited with code {code}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _describe(code: int) -> str:
    return f"signal {_signal_name(-code)}" if code < 0 else f"code {code}"


OUTPUTS_ENV = "JOBGATE_OUTPUTS"
OUTPUTS_FILE = "jobgate-outputs.json"
MAX_OUTPUTS_BYTES = 64 * 1024


def _read_outputs(path: Path) -> dict[str, Any]:
    """The JSON object a command wrote to ``$JOBGATE_OUTPUTS`` (none written: no outputs).

    Bounded and checked: a symlink, an oversized file or anything but a JSON object fails the
    attempt (non-retryable) rather than recording something the step did not mean."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return {}
    if not stat.S_ISREG(info.st_mode):
        raise _Refused(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_OUTPUTS", f"{path.name} is not a regular file")
    if info.st_size > MAX_OUTPUTS_BYTES:
        raise _Refused(
            OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_OUTPUTS", f"{path.name} is over {MAX_OUTPUTS_BYTES} bytes"
        )
    try:
        value = loads_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _Refused(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_OUTPUTS", f"{path.name}: {exc}") from None
    if not isinstance(value, dict):
        raise _Refused(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_OUTPUTS", f"{path.name} must hold a JSON object")
    try:
        return storable(value, what=path.name)  # a lone surrogate escaped as \ud800, say
    except NotStorable as refused:
        raise _Refused(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_OUTPUTS", str(refused)) from None
