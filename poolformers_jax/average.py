r"""Checkpoint averaging (Vaswani et al. 2017: the last 5 checkpoints for Base, 20 for Big).

  python -m poolformers_jax.average --workdir DIR [--last N]

Averages the parameters of the last N checkpoints of DIR/checkpoints (default: all kept) into
DIR/averaged/<step> (the newest one's step and optimizer state), with its integrity record;
eval.py and translate load it with `--checkpoint averaged`. Every checkpoint read is verified.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from absl import flags

from poolformers_jax import cli, config as config_lib
from poolformers_jax.trainer import checkpoint as checkpoint_lib
from poolformers_jax.trainer.setup import make_setup


def average_checkpoints(workdir: str, last: int | None = None, config=None, *,
                        trust_imports: bool = False) -> dict:
  """Writes DIR/averaged/<step>: the mean parameters of the last `last` checkpoints (None: all
  kept). Returns {'step': <step>, 'averaged_steps': [...]}. `config`: the run's by default (its
  `config.imports` imported only with `trust_imports`)."""
  config = config_lib.with_run_model(config, workdir, trust_imports=trust_imports)
  setup = make_setup(config)
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=int(config.keep_checkpoints),
                                             best_metric=config.best_metric,
                                             best_mode=config.best_mode,
                                             config_sha256=config_lib.config_hash(config))
  try:
    kept = checkpointer.latest.steps()
    if last is not None and (last < 1 or last > len(kept)):
      raise checkpoint_lib.CheckpointError(
          f'--last={last}: DIR/checkpoints holds {len(kept)} checkpoints ({kept}); pass 1..'
          f'{len(kept)} (config.keep_checkpoints sets how many training keeps)')
    if not kept:
      raise checkpoint_lib.CheckpointError(f'no checkpoint in {workdir}/checkpoints: train first')
    steps = kept[-last:] if last else kept
    total, newest = None, None
    # One checkpoint in memory at a time; the sum in float32 (the parameters' dtype).
    for _, state in checkpointer.restore_latest_steps(steps, setup.abstract_state):
      params = jax.tree.map(lambda p: p.astype(jnp.float32), state.params)
      total = params if total is None else jax.tree.map(jnp.add, total, params)
      newest = state
    assert newest is not None   # `steps` is not empty (checked above)
    mean = jax.tree.map(lambda t, p: (t / len(steps)).astype(p.dtype), total, newest.params)
    checkpointer.save_averaged(steps[-1], newest.replace(params=mean), steps)
    checkpointer.wait()
  finally:
    checkpointer.close()
  logging.info('averaged checkpoints %s -> %s/averaged/%d', steps, workdir, steps[-1])
  return {'step': int(steps[-1]), 'averaged_steps': [int(s) for s in steps]}


def _average() -> None:
  print(json.dumps(average_checkpoints(flags.FLAGS.workdir, flags.FLAGS.last,
                                      trust_imports=flags.FLAGS.trust_imports)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  flags.DEFINE_string('workdir', None, 'The training run directory.')
  flags.DEFINE_integer('last', None, 'Average the last N checkpoints (default: all kept).')
  cli.define_trust_imports_flag()
  cli.start(__name__, _average, argv, required=('workdir',))


if __name__ == '__main__':
  main()
