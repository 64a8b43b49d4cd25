r"""Evaluate a run's checkpoint: `evaluate(config, workdir)`, and the program that runs it.

    python -m poolformers_jax.eval --workdir DIR [--config configs/<task>.py[:words]]
        [--checkpoint best|latest|averaged|STEP] [--split validation|test] [--batch_size N]
        [--config.k=v ...] [--trust_imports] (or `python eval.py ...`, `poolformers-jax eval ...`)

prints one JSON line of metrics and writes DIR/eval/<split>.json (DIR/eval/<split>.data-<hash>.json
when the data settings differ from the run's). The model is always the run's (DIR/config.json):
without --config the run's whole config is used (its config.imports imported only with
--trust_imports), and a --config whose model differs is refused naming the differing keys (data
settings may differ: another test file, say). Errors and multi-process flags as train's.

Evaluation is exact: the last batch is padded with examples whose `mask` is False, weighted 0 in
the task's sums, and the sums (float64 on the host) are divided once at the end, so the metrics
depend neither on the batch size nor on the number of devices or processes (the loss to the
float32 rounding of each batch's sum). `config.test_drop_last` evaluates test on the first
N - N % (eval batch size) examples only (the LRA reference protocol's DataLoader); with
config.length_buckets the examples are evaluated length-sorted (trainer/length_buckets.py).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from poolformers_jax import extras

extras.require('train', __name__)   # first: a missing extra names itself

import jax
import ml_collections
import numpy as np
from absl import flags
from flax import traverse_util

from poolformers_jax import cli, config as config_lib, data, errors
from poolformers_jax.config.validate import check_batch_size, check_eval_batch_size
from poolformers_jax.trainer import (
  checkpoint as checkpoint_lib,
  length_buckets,
  sharding,
  step as step_lib,
)
from poolformers_jax.trainer.metrics import format_metrics
from poolformers_jax.trainer.setup import Setup, process_slice, setup_with_config


def evaluate_state(config: ml_collections.ConfigDict, setup: Setup, state: Any, split: str, *,
                   batch_size: int | None = None, eval_step=None, outputs_path: str | None = None,
                   batches: Iterable[dict[str, Any]] | None = None) -> dict[str, float]:
  """Metrics of `state` on every example of `split` of `config`'s data (exact; see the module
  docstring), or on `batches` when given (this process's rows of global batches with a 'mask').
  `outputs_path`: where generated outputs (translations) go, one line per example."""
  batch_size = setup.eval_batch_size if batch_size is None else batch_size
  check_batch_size(batch_size, 'eval batch_size', devices=sharding.batch_devices(setup.mesh),
                   processes=jax.process_count())
  eval_step = eval_step or step_lib.make_eval_step(setup)
  totals: dict[str, Any] = {}
  rows: dict[str, list] = {}
  if batches is None:
    # batch_size is global; each process yields its batch_size // process_count share.
    drop_last = setup.eval_batch_size if split == 'test' and config.test_drop_last else 0
    batches = data.make_eval_iterator(setup.data, split, batch_size=batch_size,
                                      drop_last=drop_last, **process_slice())
  if setup.bucket_multiple:   # one process (config/validate.py): sorted by length, cut
    batches = length_buckets.sorted_batches(batches, batch_size, setup.bucket_multiple)
  for batch in batches:
    sums, batch_rows = jax.device_get(eval_step(state, sharding.global_batch(batch, setup.mesh)))
    for key, value in sums.items():
      totals[key] = totals.get(key, 0.0) + np.asarray(value, np.float64)
    real = batch_rows.pop('weight', None)
    for key, value in batch_rows.items():   # per-example rows of real examples only
      rows.setdefault(key, []).append(np.asarray(value)[real > 0])
  if not totals:
    raise ValueError(f'split {split!r} of {setup.data.name!r} is empty.')
  if setup.task.rows is None:
    metrics = setup.task.summary(totals)
  else:
    metrics = setup.task.summary(totals, rows={k: np.concatenate(v) for k, v in rows.items()})
  if setup.decoder is not None:   # e.g. BLEU of beam-search translations
    metrics.update(setup.decoder.metrics(state.params, split, outputs_path))
  return metrics


def hypotheses_path(workdir: str, split: str) -> str:
  return os.path.join(workdir, 'eval', f'{split}.hyp.txt')


def write_eval_json(workdir: str, split: str, metrics: dict[str, Any]) -> str:
  """DIR/eval/<split>.json, whole or not at all (errors.DiskFull on a full disk)."""
  path = os.path.join(workdir, 'eval', f'{split}.json')
  if jax.process_index() == 0:
    with errors.writing(path, workdir):
      os.makedirs(os.path.dirname(path), exist_ok=True)
      try:
        with open(path + '.tmp', 'w') as f:
          f.write(json.dumps(metrics, sort_keys=True) + '\n')
      except OSError:
        os.remove(path + '.tmp')
        raise
      os.replace(path + '.tmp', path)
  return path


def data_changes(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """The data settings of `config` that differ from the run's own (DIR/config.json), e.g. another
  test file: {dotted key: value}, empty for the run's own data."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    saved = json.load(f).get('data', {})

  flat = lambda d: traverse_util.flatten_dict(d, sep='.')
  ours, theirs = flat(json.loads(config_lib.to_json(config.data))), flat(saved)
  return {f'data.{k}': v for k, v in sorted(ours.items()) if k in theirs and theirs[k] != v}


def record_name(split: str, changes: dict[str, Any]) -> str:
  """`split` for the run's own data, else `split` + a short hash of the changed data settings,
  so evaluating on other data never writes over the run's own record."""
  if not changes:
    return split
  digest = hashlib.sha1(json.dumps(changes, sort_keys=True).encode()).hexdigest()[:8]
  return f'{split}.data-{digest}'


def evaluate(config: ml_collections.ConfigDict | None, workdir: str, *,
             checkpoint: str | int = 'best', split: str = 'test',
             batch_size: int | None = None, trust_imports: bool = False) -> dict[str, Any]:
  """Restores `checkpoint` ('best' | 'latest' | 'averaged' | step) from `workdir` and evaluates
  on `split` as the module docstring says (`config` None: the run's own). Returns the metrics
  (plus 'step', 'checkpoint', 'split', and 'data_changes' for other data settings), written to
  DIR/eval/<split>.json (translation: the hypotheses to DIR/eval/<split>.hyp.txt)."""
  if config is None:
    config = config_lib.run_config(workdir, trust_imports=trust_imports)
  config, setup = setup_with_config(config, run_dir=workdir)
  check_eval_batch_size(batch_size, devices=sharding.batch_devices(setup.mesh),
                        processes=jax.process_count())
  data.base.check_split(split)
  state, step = checkpoint_lib.restore_state_for_reading(workdir, config, checkpoint,
                                                         setup.abstract_state)
  changes = data_changes(config, workdir)
  name = record_name(split, changes)
  metrics: dict[str, Any] = evaluate_state(config, setup, state, split, batch_size=batch_size,
                                           outputs_path=hypotheses_path(workdir, name))
  metrics = {**metrics, 'step': int(step), 'checkpoint': str(checkpoint), 'split': split}
  if changes:
    metrics['data_changes'] = changes
  try:
    write_eval_json(workdir, name, metrics)
  except errors.DiskFull as error:   # the metrics stand: the program prints them anyway
    raise errors.DiskFull(error.what, workdir, 'the metrics were computed (eval.py prints them '
                          'above this line); free space and run the same command again to save '
                          'them', results=metrics) from error
  return metrics


def _evaluate() -> None:
  given = flags.FLAGS['config'].present
  config = cli.config_value(flags.FLAGS['config']) if given else None
  try:
    metrics = evaluate(config, flags.FLAGS.workdir, checkpoint=flags.FLAGS.checkpoint,
                       split=flags.FLAGS.split, batch_size=flags.FLAGS.batch_size,
                       trust_imports=flags.FLAGS.trust_imports)
  except errors.DiskFull as error:
    if error.results is not None:   # computed, not saved: printed all the same
      print(json.dumps(error.results, sort_keys=True), flush=True)
    raise
  print(json.dumps(metrics, sort_keys=True), flush=True)
  logging.info('%s: %s', flags.FLAGS.split, format_metrics(metrics))   # the same, for people


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_string('workdir', None, 'The training run directory.')
  flags.DEFINE_string('checkpoint', 'best', "'best', 'latest', 'averaged' or a step number.")
  flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to evaluate.')
  flags.DEFINE_integer('batch_size', None, 'Global eval batch size (default: config).')
  cli.define_trust_imports_flag()
  cli.start(__name__, _evaluate, argv, required=('workdir',))


if __name__ == '__main__':
  main()
