"""What the benchmarks share: the trainer's compiled step (trainer/step.py's `compile_train_step`)
as `batch -> steps taken` (`runner`, `trainer_step`), timing that interleaves what it compares
(`interleaved_medians`), XLA's cost analysis (`cost_of`), the achieved FLOP/s of efficiency.py's
points (`add_flop_rates`, on their JSON) and the absl programs' start (`run_absl`)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable
from typing import Any

import jax

from poolformers_jax.trainer.flops import peak_bf16_flops


def runner(compiled: Any, state: Any, mesh: Any, rng: Any) -> Callable[[Any], jax.Array]:
  """Each call takes one step from the state it carries (the step donates the state and its
  accumulator, so they live here); returns the accumulator's step count (an array: block on it
  to time the step)."""
  carried = [state, compiled.new_accumulator(mesh)]

  def run(batch):
    carried[:] = compiled.run(*carried, batch, rng)
    return carried[1]['steps']
  return run


def trainer_step(setup: Any, step_seed: int = 1) -> tuple[Any, Any, Callable[[Any], jax.Array]]:
  """(the compiled step of `setup`, its train state from PRNGKey(0), `runner` over them with the
  step rng PRNGKey(`step_seed`))."""
  from poolformers_jax.trainer import setup as setup_lib, step as step_lib
  compiled = step_lib.compile_train_step(setup)
  state = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  return compiled, state, runner(compiled, state, setup.mesh, jax.random.PRNGKey(step_seed))


def interleaved_medians(calls: dict[Hashable, Callable[[], Any]], repeats: int) -> dict:
  """Median wall seconds of each call (blocked on its result), the calls taking turns `repeats`
  times, so that a changing load hits them alike."""
  times: dict[Hashable, list[float]] = {name: [] for name in calls}
  for _ in range(repeats):
    for name, call in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(call())
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(t) for name, t in times.items()}


def cost_of(compiled: Any) -> dict[str, float]:
  """`compiled.cost_analysis()` as one dict (jax < 0.4.36 gives one per program)."""
  cost = compiled.cost_analysis()
  return (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}


def run_absl(main: Callable[[list[str]], Any]) -> None:
  """Starts an absl benchmark as the programs start: their settings before the first compile,
  the shared flags (--verbose_errors) and their flag parsing."""
  from absl import app

  from poolformers_jax import cli, runtime
  runtime.configure_program()
  cli.define_flags()
  app.run(main, flags_parser=cli.parse_flags)


def memory_budget_bytes(gb: float) -> float:
  """`gb` GiB in bytes; 0: the device's own limit (none on a CPU)."""
  if gb > 0:
    return gb * 2**30
  return float((jax.devices()[0].memory_stats() or {}).get('bytes_limit', float('inf')))


def counted_flops(point: dict) -> tuple[float, str]:
  """(flops of one step, where the count comes from): the compiled step's count, or 3 x the
  lowered forward's (forward + backward = 3 forwards) where that is larger -- XLA:GPU's compiled
  analysis leaves out the cuBLAS calls its dots become (jax issue 22249)."""
  forward = 3e9 * (point.get('forward_gflops') or 0.0)
  forward = forward if forward == forward else 0.0   # NaN: no count
  return max(((point.get('step_flops') or 0.0), 'compiled step'), (forward, '3 x forward'))


def add_flop_rates(results: dict, device_kind: str) -> None:
  """flops_per_s and peak_fraction of every timed point (`flops_used`, `flops_from`). XLA counts
  no flops inside a custom call, so softmax/cudnn (and auto, which may pick it), when its count
  is below softmax/xla's at the same length (the same arithmetic), takes softmax/xla's."""
  peak = peak_bf16_flops(device_kind)
  for entry, per_length in results.items():
    for length, point in per_length.items():
      if point.get('status', 'ok') != 'ok':   # not run, out of memory, error: no rate
        point.update(flops_used=None, flops_from=None, flops_per_s=None, peak_fraction=None)
        continue
      flops, source = counted_flops(point)
      ref = results.get('softmax/xla', {}).get(length)
      if entry in ('softmax/cudnn', 'softmax/auto') and ref and counted_flops(ref)[0] > flops:
        flops, source = counted_flops(ref)[0], 'softmax/xla'
      rate = flops / (point['step_ms'] / 1e3) if flops and point.get('step_ms') else None
      point.update(flops_used=flops or None, flops_from=source if flops else None,
                   flops_per_s=rate, peak_fraction=rate / peak if rate and peak else None)
