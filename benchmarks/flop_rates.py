"""Achieved FLOP/s of the efficiency sweep's points (benchmarks/efficiency.py): XLA's flop count
of a step over its time, and the fraction of the card's dense bf16 peak (the trainer's table,
trainer/flops.py). The functions work on the points' JSON, so tests import this without
efficiency.py's flags and mixer registrations."""

from poolformers_jax.trainer.flops import (  # noqa: F401  (efficiency.py imports it from here)
  PEAK_BF16_FLOPS,
  peak_bf16_flops,
)


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
