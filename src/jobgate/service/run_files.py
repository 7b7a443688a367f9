"""A run's files on disk — its log and its artifact — found from the run record, never from a request.

Paths come from the configuration's data folder and the run id stored in the database. A
job runs inside that folder and can leave symlinks there, and a row could be tampered with,
so every file is opened the same careful way: resolved, checked to lie inside the run's own
folder (itself inside the data folder's ``runs``), opened without following a final symlink,
checked to be a regular file, and — where ``/proc`` shows it — checked again through the
open descriptor, so swapping a path between the check and the open gains nothing.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
    root = (Path(config.data_dir) / "runs").resolve()
    folder = (root / run.job_run_id).resolve()
    if folder.parent != root or folder.name != run.job_run_id:  # the run folder itself was swapped
        raise NotFoundError("the run's files are not available", field="job_run_id")
    return folder


def open_inside(folder: Path, path: Path, *, what: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file inside ``folder``; else a 404."""
    missing = NotFoundError(f"this run has no {what}", field=what)
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise missing from None
    if not resolved.is_relative_to(folder):
        raise missing
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise missing from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise missing
        proc = Path(f"/proc/self/fd/{fd}")
        if proc.exists() and not Path(os.readlink(proc)).is_relative_to(folder):
            raise missing
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


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
    folder = run_folder(config, run)
    with open_inside(folder, folder / "run.log", what="log") as fh:
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
        if min(offset, size) + len(data) < size:
            data = _whole_characters(data)  # the next slice starts where this one's last character ended
        return LogSlice(data.decode("utf-8", "replace"), min(offset, size), min(offset, size) + len(data), size)


_LEADS = ((5, 0b110), (4, 0b1110), (3, 0b11110))  # the lead bytes of 2, 3 and 4-byte characters


def _whole_characters(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut at its end (a review's '€' at a 1 MiB boundary was
    read as two replacement characters by a pager reading slice after slice)."""
    lead = len(data) - 1
    while lead >= 0 and len(data) - lead <= 4 and data[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead < 0 or len(data) - lead > 4:
        return data  # not UTF-8 here: kept as it is (replacement characters)
    first = data[lead]
    width = next((n for n, (shift, mark) in enumerate(_LEADS, start=2) if first >> shift == mark), 1)
    return data[:lead] if lead + width > len(data) else data


def open_artifact(config: JobgateConfig, run: JobRun) -> tuple[BinaryIO, int, str]:
    """The artifact opened for reading, its size and file name; 404 when there is none (or
    it is no longer a regular file inside the run's folder)."""
    if run.artifact_path is None:
        raise NotFoundError("this run recorded no artifact", field="artifact")
    path = Path(run.artifact_path)
    fh = open_inside(run_folder(config, run), path, what="artifact")
    return fh, os.fstat(fh.fileno()).st_size, path.name
