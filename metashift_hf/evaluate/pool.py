"""Score many tasks at once: an ordered map over a fork-based process pool (results in the jobs' order).

The jobs are closures over loaded objects (the artifact, the task plans, the logits), so they are not
pickled: the pool is forked after they are set, and each worker is given only a job's index. Only the
results (reports) travel back. The first job runs in the calling process before the fork, so what it
loads once per process (WordNet, the hierarchy) is inherited by every worker instead of loaded by each.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Sequence


logger = logging.getLogger(__name__)

MIN_JOBS = 16  # below this, forking costs more than it saves (a task scores in ~0.06 s, docs/evaluate.md)
MAX_PROCESSES = 16
_JOBS: Sequence[Callable[[], Any]] = ()


def _call(index: int) -> Any:
    return _JOBS[index]()


def pool_size(jobs: int) -> int:
    """Worker processes for ``jobs`` scoring jobs: 1 (in process) for few jobs, one core, or no fork; else
    ``min(cores, jobs, MAX_PROCESSES)``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if jobs < MIN_JOBS or cores < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return min(cores, jobs, MAX_PROCESSES)


def ordered_map(jobs: Sequence[Callable[[], Any]], processes: int) -> list[Any]:
    """``[job() for job in jobs]``, the jobs after the first spread over ``processes`` forked workers."""
    if processes <= 1 or len(jobs) < 2:
        return [job() for job in jobs]
    global _JOBS
    first = jobs[0]()
    _JOBS = jobs
    try:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as ex:
            rest = list(ex.map(_call, range(1, len(jobs))))
    finally:
        _JOBS = ()
    logger.debug("scored %d jobs in %d processes", len(jobs), processes)
    return [first, *rest]
