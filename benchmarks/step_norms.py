r"""What `param_norm` and `update_norm` add to a training step (trainer/step.py computes both in
the step): the trainer's compiled step of a config against the norms alone as their own jitted
program over the same parameters (`global_norm(new)`, `global_norm(new - old)`), one process,
interleaved rounds, medians. Alone, the norms cannot fuse with the update that writes the new
parameters, so their time here bounds what they add inside the step from above.

  python benchmarks/step_norms.py --config lra_listops:transformer,small --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import jax
import jax.numpy as jnp
import optax

from poolformers_jax import config as config_lib
from poolformers_jax.trainer import step as step_lib
from poolformers_jax.trainer.setup import make_setup, param_count

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)


def _median_ms(run, steps: int) -> float:
  return 1e3 * step_runner.interleaved_medians({'run': run}, steps)['run']


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--config', default='lra_listops:transformer,small')
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--steps', type=int, default=10, help='timed steps per round')
  args = parser.parse_args()
  config = config_lib.load(args.config, {'num_devices': 1})
  setup = make_setup(config, need_files=False)
  compiled, state, run = step_runner.trainer_step(setup)
  batch = compiled.put(jax.tree.map(lambda s: jnp.ones(s.shape, s.dtype),
                                    step_lib.batch_spec(setup)))
  step = lambda: run(batch)
  norms = jax.jit(lambda new, old: (optax.global_norm(new), optax.global_norm(
      jax.tree.map(jnp.subtract, new, old))))
  params = jax.tree.map(jnp.array, state.params)   # a copy: the step donates the state
  shifted = jax.tree.map(lambda x: x + 1e-3, params)
  norms_compiled = norms.lower(params, shifted).compile()
  step(), norms_compiled(params, shifted)   # warm
  rounds = [(_median_ms(step, args.steps),
             _median_ms(lambda: norms_compiled(params, shifted), args.steps))
            for _ in range(args.rounds)]
  step_ms = statistics.median(r[0] for r in rounds)
  norms_ms = statistics.median(r[1] for r in rounds)
  print(json.dumps({
      'config': args.config, 'params': param_count(state.params), 'batch_size': setup.batch_size,
      'machine': f'{platform.machine()} {jax.devices()[0].device_kind}, jax {jax.__version__}',
      'step_ms': round(step_ms, 3), 'norms_alone_ms': round(norms_ms, 3),
      'norms_share_bound': round(norms_ms / step_ms, 4),
      'rounds_ms': [[round(a, 3), round(b, 3)] for a, b in rounds],
      'step_flops': compiled.flops, 'norms_flops': step_lib.flops_of(norms_compiled)}))


if __name__ == '__main__':
  main()
