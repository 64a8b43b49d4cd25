"""Data made offline from a seed: ListOps (`listops.py`) and Pathfinder (`pathfinder.py`).

A generator's output depends on its seed and settings only, never on how many processes made it
(`parallel_map`); each is also a program, `python -m poolformers_jax.data.generators.<name>`.
The readers (data/listops.py, data/lra_pathfinder.py) import a generator only inside the
function that makes their `generated` data on first use (`DatasetSpec.generated`), so reading
data never loads one. Reports on generated data (statistics, sample grids) are benchmarks
(benchmarks/pathfinder_report.py), which nothing here imports.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence


def parallel_map(fn: Callable, tasks: Sequence, workers: int | None = None,
                 min_tasks: int = 2) -> list:
  """[fn(task) for task in tasks], in `workers` processes (default: all cores) when there are at
  least `min_tasks` tasks (fewer do not pay for the processes' start). spawn, not fork: the
  caller may hold JAX's threads."""
  if workers is None:
    workers = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
               else os.cpu_count() or 1)
  if workers > 1 and len(tasks) >= min_tasks:
    import multiprocessing
    with multiprocessing.get_context('spawn').Pool(min(workers, len(tasks))) as pool:
      return pool.map(fn, tasks, chunksize=1)
  return [fn(task) for task in tasks]
