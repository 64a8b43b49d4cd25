"""One process of the two-process test: python multiprocess_worker.py DATA_DIR WORKDIR.

The coordinator settings come from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID,
exactly as a user would launch train.py; train_and_evaluate(..., distributed='auto') starts
jax.distributed (as the programs do from --distributed; a plain library call starts nothing).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from absl import flags  # noqa: E402

flags.FLAGS.mark_as_parsed()

import jax  # noqa: E402

from tiny_runs import tiny_config  # noqa: E402
from poolformers_jax.trainer import sharding
from poolformers_jax.train import train_and_evaluate  # noqa: E402

# No persistent compilation cache here: both processes compile the same programs at the same
# moment, and one could read a cache entry while the other is still writing it.
jax.config.update('jax_enable_compilation_cache', False)


def main(data_dir, workdir):
  # FSDP across the two processes: every large parameter is split between them.
  config = tiny_config(data_dir, num_train_steps=3, eval_every_steps=3, checkpoint_every_steps=3,
                       **{'mesh.data': 1, 'mesh.fsdp': 2, 'mesh.fsdp_min_size': 64})
  result = train_and_evaluate(config, workdir, distributed='auto')
  print(json.dumps({'process_index': jax.process_index(), 'process_count': jax.process_count(),
                    'devices': jax.device_count(), 'validation': result.validation,
                    'test': result.test}), flush=True)
  sharding.shutdown_distributed()


if __name__ == '__main__':
  main(*sys.argv[1:3])
