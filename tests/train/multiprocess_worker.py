"""One process of the two-process tests, launched as a user launches train.py: the coordinator
settings come from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID.

    python multiprocess_worker.py DATA_DIR WORKDIR
        train_and_evaluate(..., distributed='auto') (it starts jax.distributed, as the programs do
        from --distributed; a plain library call starts nothing); prints one JSON line.
    python multiprocess_worker.py program DATA_DIR WORKDIR [DIE_AT]
        the train.py program itself, 4 steps with a checkpoint every 2; DIE_AT: this process
        kills itself (SIGKILL, a lost process) as it reads the batch of step DIE_AT.
Both train the tiny ListOps model with FSDP across the two processes (every large parameter is
split between them).
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
from tiny_runs import REPO, tiny_config, tiny_overrides  # noqa: E402

# No persistent compilation cache here: both processes compile the same programs at the same
# moment, and one could read a cache entry while the other is still writing it.
jax.config.update('jax_enable_compilation_cache', False)
FSDP = {'mesh.data': 1, 'mesh.fsdp': 2, 'mesh.fsdp_min_size': 64}


def main(data_dir, workdir):
  from absl import flags

  from poolformers_jax.train import train_and_evaluate
  from poolformers_jax.trainer import sharding
  flags.FLAGS.mark_as_parsed()
  config = tiny_config(data_dir, num_train_steps=3, eval_every_steps=3, checkpoint_every_steps=3,
                       **FSDP)
  result = train_and_evaluate(config, workdir, distributed='auto')
  print(json.dumps({'process_index': jax.process_index(), 'process_count': jax.process_count(),
                    'devices': jax.device_count(), 'validation': result.validation,
                    'test': result.test}), flush=True)
  sharding.shutdown_distributed()


class _KilledAt:
  """Wraps the train iterator; this process SIGKILLs itself as it reads batch `at`."""

  def __init__(self, iterator, at):
    self.iterator, self.at, self.count = iterator, at, 0

  def __iter__(self):
    return self

  def __next__(self):
    self.count += 1
    if self.count == self.at:
      os.kill(os.getpid(), signal.SIGKILL)
    return next(self.iterator)

  def get_state(self):
    return self.iterator.get_state()

  def set_state(self, state):
    self.iterator.set_state(state)


def program(data_dir, workdir, die_at=None):
  from poolformers_jax import data, train
  if die_at is not None:
    real = data.make_train_iterator
    data.make_train_iterator = lambda *a, **k: _KilledAt(real(*a, **k), int(die_at))
  overrides = tiny_overrides(data_dir, num_train_steps=4, eval_every_steps=4,
                             checkpoint_every_steps=2, **FSDP)
  train.main(['train.py', '--config', os.path.join(REPO, 'configs', 'lra_listops.py') +
              ':transformer,tiny', '--workdir', workdir,
              *[f'--config.{k}={v}' for k, v in overrides.items()]])


if __name__ == '__main__':
  if sys.argv[1] == 'program':
    program(*sys.argv[2:5])
  else:
    main(*sys.argv[1:3])
