"""When a credit loop may run its multi-threaded (``parallel=True``) twin, how that stays safe,
and where the work is cut into chunks.

numba's parallel kernels run on a threading layer: TBB when ``libtbb`` is installed (it is not,
here), else GNU OpenMP, else numba's own workqueue. Two of those have hazards a library must
not pass on to its callers, so every parallel launch goes through :func:`parallel_slot`:

- GNU OpenMP is not fork-safe: a process forked after its parent ran a parallel region is
  killed with SIGTERM on its first one ("Terminating: fork() called from a process already
  using GNU OpenMP, this is unsafe"; seen here with numba 0.68). The first launch records the
  process id; a forked child inherits that record, sees another pid and runs the serial kernel.
- The workqueue layer aborts the process when two threads launch at once. Launches take a
  lock without waiting: a thread that finds it taken runs the serial kernel instead, which
  uses the other core just as well.

Small inputs run serially too: a parallel launch costs tens of microseconds. So does a busy
machine: a parallel region ends only when its slowest thread does, and on oversubscribed cores
a thread waits for a time slice (measured: docs/agents.md, "Fast loops"). Threads are therefore
capped at the cores the 1-minute load average leaves free (plus the calling one).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
from numba import njit

PARALLEL_MIN_ITEMS = 1 << 15
"""Inputs with fewer steps (or nodes) than this run on one thread."""

LOAD_AWARE = True
"""Cap threads by the load average (tests switch it off to run the parallel kernels on demand)."""

_launch_lock = threading.Lock()
_launch_pid: int | None = None


@contextmanager
def parallel_slot(n_items: int) -> Iterator[int]:
    """Yield the number of chunks to split ``n_items`` of work into (the thread count), or 0
    when the serial kernel must run (small input, one thread, forked child, or a launch
    already in flight in another thread)."""
    global _launch_pid
    pid = os.getpid()
    # Order matters: the pid check comes before anything that touches numba's thread pool.
    if n_items < PARALLEL_MIN_ITEMS or _launch_pid not in (None, pid):
        yield 0
        return
    threads = min(numba.get_num_threads(), free_cores()) if LOAD_AWARE else numba.get_num_threads()
    if threads < 2 or not _launch_lock.acquire(blocking=False):
        yield 0
        return
    previous = numba.get_num_threads()
    try:
        _launch_pid = pid
        numba.set_num_threads(threads)  # this thread's launches only
        yield threads
    finally:
        numba.set_num_threads(previous)
        _launch_lock.release()


def free_cores() -> int:
    """Cores that no other runnable thread wants, by the 1-minute load average (which counts
    the calling thread, hence the + 1); every core where the platform has no load average."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, int(cores - load + 1.0)))


@njit(cache=True, nogil=True)
def split_point(offsets, c, n_chunks):  # pragma: no cover - compiled
    """First item of chunk ``c`` when the items ``offsets`` delimits are cut into ``n_chunks``
    runs of about equal total length (``offsets`` non-decreasing, from 0)."""
    n_items = offsets.shape[0] - 1
    if c >= n_chunks:
        return n_items
    k = np.searchsorted(offsets, offsets[n_items] * c // n_chunks)
    return min(k, n_items)
