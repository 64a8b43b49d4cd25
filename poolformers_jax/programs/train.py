r"""Train a model: `python -m poolformers_jax.train --config configs/<task>.py[:words] --workdir DIR
[--config.k=v]` (or `python train.py ...` in a checkout, `poolformers-jax train ...`).

--config is a config file, or a shipped one by name (`configs/lra_listops.py:ponet,tiny`,
`lra_listops:ponet,tiny`): `poolformers_jax.config.resolve`.
Resumes from the newest checkpoint in DIR that verifies (damaged ones are moved to DIR/rejected).
A bad config, dataset or checkpoint ends with one line `error: ...` and exit code 2
(--verbose_errors for the traceback); a diverged run (non-finite loss) with exit code 1.
Multi-process (--distributed=auto, the default): under SLURM, Open MPI, a Cloud TPU pod or
Kubernetes jax finds the processes itself; elsewhere set JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID (or --coordinator_address, --num_processes, --process_id) on
every process. --distributed=off forces one process.
"""
from absl import flags, logging

from poolformers_jax.train import cli, train_and_evaluate


def _train():
  result = train_and_evaluate(cli.config_value(flags.FLAGS['config']), flags.FLAGS.workdir,
                              start_over=flags.FLAGS.start_over)
  logging.info('%s at step %d; validation %s; test %s', result.status, result.step,
               result.validation, result.test)


def run(argv=None):
  """The program; its flags are defined here, so importing this module defines none."""
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and config.json.')
  flags.DEFINE_bool('start_over', False, 'When no checkpoint of DIR verifies (all damaged), '
                    'train from step 0 instead of stopping.')
  cli.start(__name__, _train, argv, required=('config', 'workdir'))


if __name__ == '__main__':
  run()
