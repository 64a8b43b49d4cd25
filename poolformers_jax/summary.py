"""Parameters, MACs, training-step memory and stage lengths of a config, as one JSON object.

    python -m poolformers_jax.summary --config configs/imagenet.py:hvt_s_4 [--batch_size 2]

Fields:
- params: number of trainable parameters (the `params` collection; no batch statistics).
- macs: multiply-accumulates of one example's deterministic forward pass, counted as the papers
  count "FLOPs" (HVT Appendix S2: phi_BLK = 12 n d^2 + 2 n^2 d): every matrix product and
  convolution of the traced jaxpr, attention products included, nothing else. Exact from shapes:
  a dot_general costs prod(lhs shape) * prod(rhs free dims); a convolution
  prod(output shape) * prod(kernel window) * in_channels / groups.
- xla_flops: XLA's cost_analysis() flops of the same forward (elementwise work too, a
  multiply-add as 2); for reference.
- train_step_memory_bytes: `memory_analysis()` of train.py's training step compiled at
  --batch_size on one device: arguments + outputs + temporaries - aliased; `train_step_memory`
  has the parts.
- stage_lengths: the sequence length of every stage (the model's `stage_lengths()`, else the
  input length or H * W).
The dataset's files are not needed (sizes from `DatasetSpec.shapes`).

On accelerators this machine does not have (docs/accelerators.md): --topology v5e:2x2 compiles
the steps for that TPU slice (needs libtpu) and reports them per chip; --export_cuda FILE writes
the training step lowered for CUDA by `jax.export` (StableHLO text).
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import jax
from absl import flags

from poolformers_jax import cli, config as config_lib
from poolformers_jax.trainer import accelerators, step as step_lib
from poolformers_jax.trainer.flops import (  # noqa: F401  (count_macs: this module's name too)
  abstract_variables,
  count_macs,
  forward_macs,
)
from poolformers_jax.trainer.setup import make_setup, param_count, variables_of


def xla_forward_flops(model, variables, inputs) -> float:
  """XLA's cost_analysis() flops of one forward (lowered, not compiled)."""
  forward = lambda v, x: model.apply(v, x, deterministic=True)
  cost = jax.jit(forward).lower(variables, inputs).cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float('nan') if cost is None else float(cost.get('flops', float('nan')))


def stage_lengths(model, info) -> list[int]:
  if hasattr(model, 'stage_lengths'):
    return [int(n) for n in model.stage_lengths()]
  if info.vocab_size is not None:
    return [int(info.input_shape[-1])]              # tokens: (L,) or (2, L)
  return [int(math.prod(info.input_shape[:-1]))]     # images: H * W positions


def summarize(config, batch_size: int | None = None) -> dict[str, Any]:
  """The summary dict of `config` on one device; `batch_size` defaults to config.batch_size."""
  updates = {'num_devices': 1}
  if batch_size:
    updates['batch_size'] = int(batch_size)
  setup = make_setup(config_lib.override(config, **updates), need_files=False)
  memory = step_lib.compile_train_step(setup).memory
  one = setup.task.model_inputs(step_lib.batch_spec(setup, 1))   # one example as the model reads it
  variables = variables_of(setup.abstract_state)
  macs = forward_macs(setup.model, one, variables)
  return {
      'model': config.model.name,
      'params': param_count(setup.abstract_state.params),
      'macs': int(macs),
      'gmacs': round(macs / 1e9, 3),
      'xla_flops': xla_forward_flops(setup.model, variables, one),
      'batch_size': setup.batch_size,
      'input_shape': list(setup.info.input_shape),
      'train_step_memory_bytes': memory['total'],
      'train_step_memory': memory,
      'stage_lengths': stage_lengths(setup.model, setup.info),
      'macs_counting': 'matmul + conv MACs of one example (jaxpr), attention products included',
  }


def _summary() -> None:
  config = cli.config_value(flags.FLAGS['config'])
  if flags.FLAGS.batch_size:
    config = config_lib.override(config, batch_size=int(flags.FLAGS.batch_size))
  if flags.FLAGS.topology:
    out = accelerators.topology_report(config, flags.FLAGS.topology)
    train = out['train_step']
    if not train['fits']:   # compiled, but arguments + outputs + temporaries exceed the chip
      memory = train['memory']
      out['fit_advice'] = accelerators.fit_advice(
          flags.FLAGS.topology, config, devices=out['devices'], temp=memory['temp'],
          fixed=memory['total'] - memory['temp'], hbm=train['hbm_bytes'])
      print('warning: ' + out['fit_advice'], file=sys.stderr)
  elif flags.FLAGS.export_cuda:
    setup = make_setup(config_lib.override(config, num_devices=1), need_files=False)
    exported = accelerators.export_for_cuda(setup)
    text = exported.mlir_module()
    with open(flags.FLAGS.export_cuda, 'w') as f:
      f.write(text)
    out = {'export_cuda': flags.FLAGS.export_cuda, 'platforms': list(exported.platforms),
           'devices': exported.nr_devices, 'stablehlo_lines': text.count('\n')}
  else:
    out = summarize(config)
  print(json.dumps(out))


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_integer('batch_size', None, 'global batch size of the measured training step '
                       '(default: config.batch_size).')
  flags.DEFINE_string('topology', None, 'compile for this TPU slice instead of this machine, e.g. '
                      + ', '.join(accelerators.TOPOLOGY_EXAMPLES) + ' (needs libtpu).')
  flags.DEFINE_string('export_cuda', None, 'write the training step exported for CUDA (StableHLO '
                      'text) to this file.')
  cli.start(__name__, _summary, argv, required=('config',))


if __name__ == '__main__':
  main()
