"""`runner(compiled, state, mesh, rng)`: the trainer's compiled step (trainer/step.py's
`compile_train_step`) as `batch -> steps taken`, for the benchmarks that time it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def runner(compiled: Any, state: Any, mesh: Any, rng: Any) -> Callable[[Any], jax.Array]:
  """Each call takes one step from the state it carries (the step donates the state and its
  accumulator, so they live here); returns the accumulator's step count (an array: block on it
  to time the step)."""
  carried = [state, compiled.new_accumulator(mesh)]

  def run(batch):
    carried[:] = compiled.run(*carried, batch, rng)
    return carried[1]['steps']
  return run
