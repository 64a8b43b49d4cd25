r"""AdaMRA's router load: the fraction of real tokens each layer's router sends to each resolution
head (Eq. 6's argmax). The router has no load-balancing term, so it may send (nearly) every token
to one head; the paper's "Rand" / single-resolution ablations (Table 5) cost 3-7 points.

    python -m poolformers_jax.router_load --workdir DIR [--checkpoint best] [--split test]
                                           [--num_batches N] [--batch_size N]

Prints one JSON object: per AdaMRA layer (its module path) the heads' compression rates, the
real tokens counted and `load`, the fraction routed to each head; `split`, `step`, `checkpoint`.
Real tokens are the non-pad ids of `split`'s examples, read as evaluation reads them. In Python:
`router_load(load_run(DIR))`, or `count_routes` on the 'intermediates' of any
`model.apply(..., mutable=['intermediates'])`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from absl import flags

from poolformers_jax import cli


def count_routes(intermediates: Any, mask: np.ndarray, num_heads: int) -> dict[str, np.ndarray]:
  """{layer path: tokens routed to each head [num_heads]} from the sown 'routed_head' [B, n] of
  every AdaMRA layer, counting positions where `mask` [B, n] is True (a prepended [CLS] counts)."""
  mask = np.asarray(mask, bool)
  flat = jax.tree_util.tree_flatten_with_path(intermediates)[0]
  counts: dict[str, np.ndarray] = {}
  for path, value in flat:
    keys = [str(getattr(k, 'key', getattr(k, 'idx', k))) for k in path]
    if 'routed_head' not in keys:
      continue
    layer = '/'.join(keys[:keys.index('routed_head')])
    chosen = np.asarray(value)
    real = mask
    if chosen.shape[1] == mask.shape[1] + 1:   # pooling='cls': the [CLS] token first
      real = np.concatenate([np.ones((mask.shape[0], 1), bool), mask], axis=1)
    if chosen.shape != real.shape:
      raise ValueError(f'{layer}: routed_head has shape {chosen.shape}, the real-token mask '
                       f'{real.shape}; router_load counts models whose mixers see the input tokens')
    counts[layer] = counts.get(layer, 0) + np.bincount(chosen[real], minlength=num_heads)
  return counts


def _rates(model_config) -> Sequence[float]:
  from poolformers_jax.layers.adamra import AdaMRA
  kwargs = model_config.get('mixer_kwargs') or {}
  return tuple(float(r) for r in kwargs.get('compression_rates', AdaMRA.compression_rates))


def router_load(run, split: str = 'test', num_batches: int | None = None,
                batch_size: int | None = None) -> dict[str, Any]:
  """The router load of the AdaMRA layers of `run` (a `load_run` Run) over `split` (its first
  `num_batches` batches; None: all), as the module docstring's JSON object."""
  from poolformers_jax import data
  from poolformers_jax.trainer import sharding
  model_config = run.config.model
  if model_config.get('mixer') != 'adamra':
    raise ValueError(f"{run.workdir}: model.mixer is {model_config.get('mixer')!r}; the router "
                     "load is AdaMRA's (model.mixer='adamra')")
  rates = _rates(model_config)
  setup, model = run.setup, run.model
  apply = jax.jit(lambda variables, inputs: model.apply(variables, inputs, deterministic=True,
                                                        mutable=['intermediates'])[1])
  totals: dict[str, np.ndarray] = {}
  batches = data.make_eval_iterator(setup.data, split, run.batch_size_for(batch_size))
  for index, batch in enumerate(batches):
    if num_batches is not None and index >= num_batches:
      break
    if 'inputs' not in batch or np.asarray(batch['inputs']).ndim != 2:
      raise ValueError(f'{run.workdir}: router_load reads token inputs [batch, length]; this '
                       f"run's batches have {sorted(batch)}")
    mask = (np.asarray(batch['inputs']) != 0) & np.asarray(batch['mask'], bool)[:, None]
    inputs = setup.task.model_inputs(sharding.global_batch(batch, setup.mesh))
    state = jax.device_get(apply(run.variables, inputs))
    for layer, count in count_routes(state['intermediates'], mask, len(rates)).items():
      totals[layer] = totals.get(layer, 0) + count
  if not totals:
    raise ValueError(f'{run.workdir}: no AdaMRA layer sowed a route (routing "none" has no '
                     'router)')
  layers = {layer: {'rates': list(rates), 'tokens': int(count.sum()),
                    'load': [round(float(c) / max(int(count.sum()), 1), 6) for c in count]}
            for layer, count in sorted(totals.items())}
  return {'layers': layers, 'split': split, 'step': run.step, 'checkpoint': run.checkpoint}


def _print_load() -> None:
  from poolformers_jax.run import load_run  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  run = load_run(f.workdir, f.checkpoint, trust_imports=f.trust_imports)
  print(json.dumps(router_load(run, f.split, f.num_batches, f.batch_size)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  flags.DEFINE_string('workdir', None, 'The training run directory (an AdaMRA run).')
  flags.DEFINE_string('checkpoint', 'best', "'best', 'latest', 'averaged' or a step number.")
  flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to count on.')
  flags.DEFINE_integer('num_batches', None, 'Count on the first N batches only (default: all).')
  flags.DEFINE_integer('batch_size', None, "Global batch size (default: the run's eval batch).")
  cli.define_trust_imports_flag()
  cli.start(__name__, _print_load, argv, required=('workdir',))


if __name__ == '__main__':
  main()
