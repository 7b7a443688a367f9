"""A run's files on disk — its log and its artifact — found from the run record, never from a request.

Paths come from the configuration's data folder and the run id stored in the database; the
recorded artifact path is re-checked to lie inside the run's own folder (after resolving
symlinks) before anything is opened, so a tampered row or a symlink left by a job cannot
make the server read another file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobgate.config import JobgateConfig
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.core.models import JobRun

MAX_READ = 1 << 20  # a log read returns at most 1 MiB
MAX_TAIL_LINES = 10_000


@dataclass(frozen=True)
class LogSlice:
    text: str
    offset: int  # where the slice starts in the file (bytes)
    end: int  # where it ends: the next offset to ask for
    size: int  # the file's size when read


def run_folder(config: JobgateConfig, run: JobRun) -> Path:
    return (Path(config.data_dir) / "runs" / run.job_run_id).resolve()


def read_log(
    config: JobgateConfig, run: JobRun, *, tail_lines: int | None = None, offset: int = 0, limit: int = MAX_READ
) -> LogSlice:
    """The last ``tail_lines`` lines, or ``limit`` bytes from ``offset``; 404 when the run has no log."""
    if tail_lines is not None and not 1 <= tail_lines <= MAX_TAIL_LINES:
        raise ValidationError(f"1 to {MAX_TAIL_LINES} lines", field="tail")
    if offset < 0:
        raise ValidationError("a byte offset of 0 or more", field="offset")
    if not 1 <= limit <= MAX_READ:
        raise ValidationError(f"1 to {MAX_READ} bytes", field="limit")
    path = run_folder(config, run) / "run.log"
    if not path.is_file():
        raise NotFoundError("this run has no log (yet)", field="log")
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        if tail_lines is not None:
            start = max(0, size - MAX_READ)
            fh.seek(start)
            data = fh.read()
            lines = data.splitlines(keepends=True)
            if start > 0 and lines:
                lines = lines[1:]  # the first line read may be cut
            kept = b"".join(lines[-tail_lines:])
            return LogSlice(kept.decode("utf-8", "replace"), size - len(kept), size, size)
        fh.seek(min(offset, size))
        data = fh.read(limit)
        return LogSlice(data.decode("utf-8", "replace"), min(offset, size), min(offset, size) + len(data), size)


def artifact_file(config: JobgateConfig, run: JobRun) -> Path:
    """The artifact's file, checked to be a regular file inside the run's folder; 404 otherwise."""
    if run.artifact_path is None:
        raise NotFoundError("this run recorded no artifact", field="artifact")
    folder = run_folder(config, run)
    path = Path(run.artifact_path).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise NotFoundError("the run's artifact is no longer available", field="artifact")
    return path
