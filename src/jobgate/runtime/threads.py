"""A fixed set of executor threads fed from one queue.

``concurrent.futures.ThreadPoolExecutor`` builds a ``Future`` (with its own condition
variable) for every task; the worker never reads it, since results come back on the worker's
own queue. At thousands of short jobs a second that bookkeeping was a measurable share of a
worker's CPU, so the worker hands tasks to these threads directly.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("jobgate.worker")


class TaskThreads(Generic[T]):
    """``size`` daemon threads that call ``handle(task)`` for each submitted task, in order.

    Threads start on first use. ``handle`` must not raise (the worker's wraps every executor);
    if it does, the error is logged and the thread carries on.
    """

    def __init__(self, size: int, handle: Callable[[T], None], *, name: str) -> None:
        self._size = size
        self._handle = handle
        self._name = name
        self._tasks: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, task: T) -> None:
        if self._closed:
            raise RuntimeError("task threads are shut down")
        if len(self._threads) < self._size:
            self._start_one()
        self._tasks.put(task)

    def _start_one(self) -> None:
        with self._lock:
            if len(self._threads) >= self._size:
                return
            t = threading.Thread(target=self._loop, name=f"{self._name}_{len(self._threads)}", daemon=True)
            t.start()
            self._threads.append(t)

    def _loop(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            try:
                self._handle(task)
            except Exception:
                log.exception("task thread %s: task failed", threading.current_thread().name)

    def shutdown(self) -> None:
        """Let each thread finish its current task and exit; tasks not yet taken are dropped."""
        self._closed = True
        while True:
            try:
                self._tasks.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._tasks.put(None)
