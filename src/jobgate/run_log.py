"""Who wrote what in a run's log: the attempts of a run share one file (``runs/<id>/run.log``).

An attempt whose lease was taken back (its worker paused, then resumed) may still write after
the next attempt has written; a review found its lines read as the next attempt's. So every
writer of an attempt (its captured output, ``ctx.log``, a command runner's output) notes the
file's size after each write, and output that follows another attempt's is headed again,
``[jobgate] attempt N, continued``. A header always starts a line of its own: one written after
another attempt's unfinished line begins with a line break.
"""

from __future__ import annotations

import os


class Interleaving:
    """One attempt's place in the run's log (shared by all of that attempt's writers)."""

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self._end: int | None = None  # the log's size after this attempt's last write

    def heading(self, fd: int, *, own_line: bool = False) -> str:
        """What to write before this attempt's next output: '' when it follows its own, the
        continued header when another attempt wrote since, a line break first when the file
        ends mid-line (another writer's unfinished line; or its own, before ``own_line`` text:
        a runner's exit line after its output's unfinished last line)."""
        size = os.fstat(fd).st_size
        broken = "\n" if size and os.pread(fd, 1, size - 1) != b"\n" else ""
        if size == self._end:
            return broken if own_line else ""
        if self._end is None:
            return broken  # its first write: its own header (if any) follows
        return f"{broken}[jobgate] attempt {self.attempt}, continued\n"

    def wrote(self, fd: int) -> None:
        self._end = os.fstat(fd).st_size


def append_line(path: os.PathLike[str] | str, text: str, interleaving: Interleaving) -> None:
    """Append ``text`` to the run's log at ``path`` for this attempt (``ctx.log`` outside a
    captured handler: a command runner's own lines)."""
    with open(path, "a+", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(interleaving.heading(fh.fileno(), own_line=True) + text)
        fh.flush()
        interleaving.wrote(fh.fileno())
