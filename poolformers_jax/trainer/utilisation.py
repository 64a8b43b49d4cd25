"""How well a run uses the machine, per logging window: FLOP/s per device and MFU, the share of
the time the loop waited for data, the devices' memory in use (docs/training.md#what-a-run-writes).

    flops_per_second_per_device = XLA's flops of the compiled step (per device) x steps / second
    mfu = flops_per_second_per_device / the device's peak for the compute dtype (flops.peak_flops)
    data_wait_fraction = seconds spent in next(train iterator) / the window's seconds

A figure the machine cannot give is left out, never invented: no mfu without a published peak (a
CPU), no memory_bytes_in_use where `device.memory_stats()` is None (a CPU).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import jax

from poolformers_jax.trainer import flops

DATA_WAIT_WARNING = 0.2   # a window waiting longer than this share of its time for data warns
# The train record's keys that measure the machine, not the training: they differ between a
# resumed run and one never stopped (the once-only ones are in the first record of each start).
MACHINE_KEYS = ('time', 'steps_per_second', 'examples_per_second', 'tokens_per_second',
                'flops_per_second_per_device', 'mfu', 'data_wait_fraction', 'memory_bytes_in_use',
                'memory_peak_bytes_in_use', 'compile_seconds', 'compiled_memory_bytes',
                'xla_step_flops_per_device', 'model_step_flops_per_device',
                'model_6nd_step_flops_per_device')


class DataWait:
  """The train iterator, timed: `next()` returns its next batch and adds the seconds it took.
  `fraction(window_seconds, step)` reports that share of the window and starts a new one; the
  first window past DATA_WAIT_WARNING logs one warning saying what to change (once a run). The
  first window of a start never warns: it holds the readers' start-up (grain's workers, the first
  reads), which later windows do not pay."""

  def __init__(self, source: Iterator[Any], *, worker_count: int, read_threads: int):
    self.source = source
    self.worker_count, self.read_threads = int(worker_count), int(read_threads)   # config.data's
    self.seconds = 0.0
    self.warned = False
    self.windows = 0

  def next(self) -> Any:
    started = time.perf_counter()
    batch = next(self.source)
    self.seconds += time.perf_counter() - started
    return batch

  def fraction(self, window_seconds: float, step: int) -> float:
    share = min(self.seconds / max(window_seconds, 1e-9), 1.0)
    self.seconds = 0.0
    self.windows += 1
    if share > DATA_WAIT_WARNING and not self.warned and self.windows > 1:
      self.warned = True
      logging.warning(
          'data_wait_fraction %.2f > %.1f at step %d: the loop waited for input %.0f %% of the '
          'time; read ahead with more workers (--config.data.worker_count=%d, now %d: grain '
          'processes; --config.data.read_threads=%d, now %d), or make the preprocessing cheaper',
          share, DATA_WAIT_WARNING, step, 100 * share, max(2 * self.worker_count, 2),
          self.worker_count, 2 * self.read_threads, self.read_threads)
    return share


def device_memory() -> dict[str, int]:
  """{'memory_bytes_in_use', 'memory_peak_bytes_in_use'}: the largest over this process's
  devices, from `memory_stats()`; {} where the backend keeps none (CPU)."""
  stats = [d.memory_stats() for d in jax.local_devices()]
  if not stats or any(s is None or 'bytes_in_use' not in s for s in stats):
    return {}
  return {'memory_bytes_in_use': max(int(s['bytes_in_use']) for s in stats),
          'memory_peak_bytes_in_use': max(int(s.get('peak_bytes_in_use', s['bytes_in_use']))
                                           for s in stats)}


def rates(steps_per_second: float, step_flops: float | None,
          peak: float | None) -> dict[str, float]:
  """{'flops_per_second_per_device', 'mfu'} of a window ({} without XLA's count; no mfu without
  a peak)."""
  if step_flops is None:
    return {}
  out = {'flops_per_second_per_device': step_flops * steps_per_second}
  if peak:
    out['mfu'] = out['flops_per_second_per_device'] / peak
  return out


class Utilisation:
  """The machine-use metrics of a run's train records: `window(...)` for every record; the
  first also carries the once-only figures of `compiled(...)` (compilation, the compiled
  memory estimate, the three step FLOP counts per device)."""

  def __init__(self, train_iter: Iterator[Any], *, worker_count: int, read_threads: int):
    self.data = DataWait(train_iter, worker_count=worker_count, read_threads=read_threads)
    self.step_flops: float | None = None
    self.peak: float | None = None
    self._once: dict[str, float] = {}

  def compiled(self, setup: Any, compiled_step: Any, compile_seconds: float) -> None:
    """Reads the compiled step once: XLA's count, the device's peak, the model's counts."""
    devices = setup.mesh.devices.size
    self.step_flops = compiled_step.flops
    self.peak = flops.peak_flops(setup.mesh.devices.flat[0].device_kind, setup.compute_dtype)
    self._once = {'compile_seconds': compile_seconds,
                  'compiled_memory_bytes': compiled_step.memory['total'],
                  **{f'{name}_per_device': value / devices
                     for name, value in flops.setup_model_flops(setup).items()}}
    if self.step_flops is not None:
      self._once['xla_step_flops_per_device'] = self.step_flops

  def window(self, steps_per_second: float, seconds: float, step: int) -> dict[str, float]:
    out = {**self._once, **rates(steps_per_second, self.step_flops, self.peak),
           'data_wait_fraction': self.data.fraction(seconds, step), **device_memory()}
    self._once = {}
    return out
