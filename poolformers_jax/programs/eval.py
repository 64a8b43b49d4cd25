r"""Evaluate a checkpoint: prints one JSON line of metrics and writes DIR/eval/<split>.json
(DIR/eval/<split>.data-<hash>.json when the data settings differ from the run's).

python -m poolformers_jax.eval --workdir DIR [--config configs/<task>.py[:words]]
    [--checkpoint best|latest|averaged|STEP] [--split validation|test] [--batch_size N]
    [--config.k=v ...]                       (or `python eval.py ...`, `poolformers-jax eval ...`)
The model is always the run's (DIR/config.json); without --config the run's whole config is
used, and a --config whose model differs is refused naming the differing keys (data settings
may differ: another test file, say).
The checkpoint is verified against its integrity record; a damaged or mismatched one, or any
other bad input, ends with one line `error: ...` and exit code 2 (--verbose_errors: traceback).
Multi-process flags as train (--distributed, --coordinator_address, ...).
"""
import json

from absl import flags

from poolformers_jax.train import cli, evaluate


def _evaluate():
  given = flags.FLAGS['config'].present
  config = cli.config_value(flags.FLAGS['config']) if given else None
  metrics = evaluate(config, flags.FLAGS.workdir, checkpoint=flags.FLAGS.checkpoint,
                     split=flags.FLAGS.split, batch_size=flags.FLAGS.batch_size)
  print(json.dumps(metrics, sort_keys=True), flush=True)


def run(argv=None):
  """The program; its flags are defined here, so importing this module defines none."""
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_string('workdir', None, 'The training run directory.')
  flags.DEFINE_string('checkpoint', 'best', "'best', 'latest', 'averaged' or a step number.")
  flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to evaluate.')
  flags.DEFINE_integer('batch_size', None, 'Global eval batch size (default: config).')
  cli.start(__name__, _evaluate, argv, required=('workdir',))


if __name__ == '__main__':
  run()
