r"""Evaluate a checkpoint: prints one JSON line of metrics and writes DIR/eval/<split>.json
(DIR/eval/<split>.data-<hash>.json when the data settings differ from the run's).

python eval.py --workdir DIR [--config configs/<task>.py[:arg]] [--checkpoint best|latest|averaged|STEP]
               [--split validation|test] [--batch_size N] [--config.k=v ...]
The model is always the run's (DIR/config.json); without --config the run's whole config is
used, and a --config whose model differs is refused naming the differing keys (data settings
may differ: another test file, say).
The checkpoint is verified against its integrity record; a damaged or mismatched one, or any
other bad input, ends with one line `error: ...` and exit code 2 (--verbose_errors: traceback).
Multi-process flags as train.py (--distributed, --coordinator_address, ...).
"""
import json

from absl import app, flags
from ml_collections import config_flags

from poolformers_jax import errors, runtime
from poolformers_jax.train import cli, evaluate

_CONFIG = config_flags.DEFINE_config_file('config', None, 'configs/<task>.py[:arg]', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'The training run directory.')
_CHECKPOINT = flags.DEFINE_string('checkpoint', 'best',
                                  "'best', 'latest', 'averaged' or a step number.")
_SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to evaluate.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', None, 'Global eval batch size (default: config).')
flags.mark_flags_as_required(['workdir'])


def _evaluate():
  config = cli.config_value(_CONFIG) if flags.FLAGS['config'].present else None
  metrics = evaluate(config, _WORKDIR.value, checkpoint=_CHECKPOINT.value,
                     split=_SPLIT.value, batch_size=_BATCH_SIZE.value)
  print(json.dumps(metrics, sort_keys=True), flush=True)


@errors.one_line_errors
def main(argv):
  cli.run(argv, _evaluate)


if __name__ == '__main__':
  runtime.configure_program()
  app.run(main, flags_parser=cli.parse_flags)
