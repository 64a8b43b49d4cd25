r"""Evaluate a checkpoint: prints one JSON line of metrics and writes DIR/eval/<split>.json
(DIR/eval/<split>.data-<hash>.json when the data settings differ from the run's).

python eval.py --config configs/<task>.py[:arg] --workdir DIR [--checkpoint best|latest|averaged|STEP]
               [--split validation|test] [--batch_size N] [--config.k=v ...]
The checkpoint is verified against its integrity record; a damaged or mismatched one, or any
other bad input, ends with one line `error: ...` and exit code 2 (--verbose_errors: traceback).
Multi-process flags as train.py (--distributed, --coordinator_address, ...).
"""
import json

from absl import app, flags
from ml_collections import config_flags

from poolformers_jax import errors
from poolformers_jax.train import cli, evaluate

_CONFIG = config_flags.DEFINE_config_file('config', None, 'configs/<task>.py[:arg]', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'The training run directory.')
_CHECKPOINT = flags.DEFINE_string('checkpoint', 'best',
                                  "'best', 'latest', 'averaged' or a step number.")
_SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to evaluate.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', None, 'Global eval batch size (default: config).')
flags.mark_flags_as_required(['config', 'workdir'])


def _evaluate():
  metrics = evaluate(cli.config_value(_CONFIG), _WORKDIR.value, checkpoint=_CHECKPOINT.value,
                     split=_SPLIT.value, batch_size=_BATCH_SIZE.value)
  print(json.dumps(metrics, sort_keys=True), flush=True)


@errors.one_line_errors
def main(argv):
  cli.run(argv, _evaluate)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
