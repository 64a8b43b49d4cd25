r"""Train a model: `python train.py --config configs/<task>.py[:arg] --workdir DIR [--config.k=v]`.

Resumes from the newest checkpoint in DIR that verifies (damaged ones are moved to DIR/rejected).
A bad config, dataset or checkpoint ends with one line `error: ...` and exit code 2
(--verbose_errors for the traceback); a diverged run (non-finite loss) with exit code 1.
Multi-process: set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID (or the flags below) on every process, or run under SLURM.
"""
from absl import app, flags, logging
from ml_collections import config_flags

from poolformers_jax.train import cli, sharding, train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file('config', None, 'configs/<task>.py[:arg]', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and config.json.')
_COORDINATOR = flags.DEFINE_string('coordinator_address', None, 'host:port of process 0.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'Number of processes.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'This process, 0..num_processes-1.')
_START_OVER = flags.DEFINE_bool('start_over', False, 'When no checkpoint of DIR verifies (all '
                                'damaged), train from step 0 instead of stopping.')
flags.mark_flags_as_required(['config', 'workdir'])


@cli.one_line_errors
def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  cli.quiet_library_logs()
  sharding.maybe_initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  result = train_and_evaluate(cli.config_value(_CONFIG), _WORKDIR.value, start_over=_START_OVER.value)
  logging.info('%s at step %d; validation %s; test %s', result.status, result.step,
               result.validation, result.test)
  sharding.shutdown_distributed()


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
