"""A Python handler's output is its run's log: what it prints (stdout, stderr) and what it logs
through ``logging`` while its attempt runs, in the attempt's own thread.

Handlers run in the worker's thread pool, several at once, and ``sys.stdout`` is one object for
the whole process. So the process's streams are replaced once by ``_RoutedStream``s that send
each write to the log of the attempt the writing thread is executing (``attempt_output``), or,
outside any attempt, to the stream they replaced; and one ``logging`` handler on the root logger
writes the records emitted in an attempt's thread to that attempt's log. Each attempt starts
with a header line and may write at most ``MAX_ATTEMPT_LOG_BYTES``; past that one line says the
rest was dropped (a chatty handler cannot fill the disk). What a handler's own threads write is
not the attempt's: it goes where it went before.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from jobgate.context import ExecutionContext
from jobgate.run_log import Interleaving

MAX_ATTEMPT_LOG_BYTES = 10 << 20
# An unfinished line is written once it is this long (characters): what never ends a line (a
# progress bar) still reaches the log as it grows, and is never rebuilt whole at every write.
PENDING_LIMIT = 64 << 10


def dropped_note(limit: int) -> str:
    """The line that ends an attempt's log once its output passed ``limit`` bytes (a Python
    handler's and a command runner's alike)."""
    return f"\n[jobgate] this attempt's output passed {limit} bytes; the rest is not kept\n"


_local = threading.local()
_install_lock = threading.Lock()


class AttemptLog:
    """One attempt's share of the run log: opened at its first write (a silent handler costs no
    file), headed by the attempt's number, capped at ``limit`` bytes. Whole lines are written as
    they end (an unfinished one waits for its end, or the close), each after its heading
    (``run_log.Interleaving``), so output that another attempt's lines interrupted is headed
    again and never joins their lines."""

    def __init__(
        self,
        path: Callable[[], Path],
        attempt: int,
        limit: int | None = None,
        interleaving: Interleaving | None = None,
    ) -> None:
        self._path = path  # asked at the first write: finding it creates the run's folder
        self._attempt = attempt
        self._file: IO[str] | None = None
        self._limit = MAX_ATTEMPT_LOG_BYTES if limit is None else limit
        self.written = 0
        self.dropped = False
        self._line_start = True  # what was written last ended a line (or nothing was)
        self._pending: list[str] = []  # an unfinished line, in pieces: written when it ends, or at the close
        self._pending_size = 0
        self._interleaving = interleaving if interleaving is not None else Interleaving(attempt)

    def _open(self) -> IO[str]:
        if self._file is None:
            path = self._path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a+", encoding="utf-8", errors="backslashreplace")  # read: its last byte
            self._emit(f"[jobgate] attempt {self._attempt}\n")
        return self._file

    def _emit(self, text: str) -> None:
        assert self._file is not None
        fd = self._file.fileno()
        self._file.write(self._interleaving.heading(fd) + text)
        self._file.flush()
        self._interleaving.wrote(fd)

    def write(self, text: str) -> None:
        if self.dropped or not text:
            return
        self._open()
        size = len(text.encode("utf-8", errors="backslashreplace"))  # as the file will hold it
        if self.written + size > self._limit:
            self.dropped = True
            self._emit("".join(self._pending) + dropped_note(self._limit))
            self._pending, self._pending_size = [], 0
            return
        self.written += size
        self._line_start = text.endswith("\n")
        cut = text.rfind("\n") + 1  # only the new text is searched: a long unfinished line stays linear
        if cut:
            self._emit("".join(self._pending) + text[:cut])
            self._pending, self._pending_size = ([text[cut:]], len(text) - cut) if cut < len(text) else ([], 0)
            return
        self._pending.append(text)
        self._pending_size += len(text)
        if self._pending_size >= PENDING_LIMIT:  # a progress bar without line breaks: shown as it grows
            self._emit("".join(self._pending))
            self._pending, self._pending_size = [], 0

    def line(self, text: str) -> None:
        """``text`` as a line of its own: on a new line even after output that did not end one
        (a handler that printed without a newline, then failed)."""
        self.write(("" if self._line_start else "\n") + text.rstrip("\n") + "\n")

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                if self._pending:
                    self._emit("".join(self._pending))
                    self._pending, self._pending_size = [], 0
                self._file.close()


def _sink() -> AttemptLog | None:
    found: AttemptLog | None = getattr(_local, "log", None)
    return found


class _RoutedStream:
    """Writes of a thread inside an attempt go to its log; every other write, and everything
    else a stream offers, to the stream this one replaced."""

    def __init__(self, original: IO[str]) -> None:
        self._original = original

    def write(self, text: str) -> int:
        sink = _sink()
        if sink is None:
            return self._original.write(text)
        with contextlib.suppress(OSError):
            sink.write(text)
        return len(text)

    def flush(self) -> None:
        if _sink() is None:
            self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


# Anyone allowed to read a run may read its log, so a URL in a log record keeps its scheme, host
# and path only: credentials (``user:password@``) and the query (``?token=…``) are cut, and the
# HTTP clients' own request lines (every URL they call, at info) are not the attempt's output.
_URL_SECRETS = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^/@\s]*@)?(?P<rest>[^\s?#\"']*)(?:[?#][^\s\"']*)?"
)
_TRANSPORT_LOGGERS = ("httpx", "httpcore", "urllib3", "requests")


def without_url_secrets(text: str) -> str:
    """``text`` with every URL's user, password and query removed."""
    return _URL_SECRETS.sub(lambda m: m.group("scheme") + m.group("rest"), text)


class _AttemptRecords(logging.Handler):
    """Records emitted in an attempt's thread, written to that attempt's log (URLs without their
    credentials or query; the HTTP clients' request lines below warnings not at all)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        sink = _sink()
        if sink is None:
            return
        if record.levelno < logging.WARNING and record.name.split(".", 1)[0] in _TRANSPORT_LOGGERS:
            return
        try:
            sink.write(without_url_secrets(self.format(record)) + "\n")
        except Exception:  # a record that cannot be formatted must not fail the handler's attempt
            self.handleError(record)


def install() -> None:
    """Route the process's output by attempt. Idempotent, and checked at every attempt: whoever
    replaced a stream since (a test runner's capture) gets wrapped in turn."""
    with _install_lock:
        if not isinstance(sys.stdout, _RoutedStream):
            sys.stdout = _RoutedStream(sys.stdout)
        if not isinstance(sys.stderr, _RoutedStream):
            sys.stderr = _RoutedStream(sys.stderr)
        root = logging.getLogger()
        if not any(isinstance(h, _AttemptRecords) for h in root.handlers):
            root.addHandler(_AttemptRecords())


@contextlib.contextmanager
def attempt_output(ctx: ExecutionContext) -> Iterator[AttemptLog]:
    """While the body runs, this thread's prints and log records are the attempt's log."""
    install()
    # not read before a write: it makes a folder
    log = AttemptLog(lambda: ctx.log_path, ctx.payload.attempt, interleaving=ctx.run_log)
    _local.log = log
    ctx._log_sink = log
    try:
        yield log
    finally:
        _local.log = None
        ctx._log_sink = None
        log.close()
