"""What a run started from another run's parameters (`config.init_from`) checks of that run before
anything compiles:

- the same `model.positions` (a parameter tree cannot tell sinusoidal, rotary and no positions
  apart: the same weights would load silently and compute another function);
- with `config.init_from_refuse_unlearned` (the LRA `finetune` stages): a self-pretraining run
  whose best validation accuracy is still within `UNLEARNED_MARGIN` of its data's unigram rate
  (always guessing the most frequent target) learned nothing to start from
  (docs/results/lra_spt.md).
"""
from __future__ import annotations

import os

import numpy as np

from poolformers_jax import data
from poolformers_jax.config import run_file
from poolformers_jax.data.masking import NOT_CHOSEN
from poolformers_jax.trainer.metrics import read_metrics

# Pre-training accuracy must beat the unigram rate by this much (a 2 000-tree validation split's
# standard error on ~14 % is ~0.1 point of the masked tokens' share; one point is a clear margin).
UNLEARNED_MARGIN = 0.01
PRETRAINING_MODELS = ('lra_masked_lm', 'lra_causal_lm')


def source_run(path: str) -> str | None:
  """The directory with the config.json behind `path` (itself, or DIR of DIR/checkpoints/<step>);
  None if neither has one."""
  path = os.path.abspath(os.path.expanduser(path))
  for candidate in (path, os.path.dirname(os.path.dirname(path))):
    if os.path.exists(os.path.join(candidate, 'config.json')):
      return candidate
  return None


def _positions(model) -> str | None:
  """A run's model.positions: its config's, else (a run older than the option) its default."""
  if 'positions' in model:
    return model['positions']
  return run_file._built_fields(model).get('positions')


def unigram_rate(config) -> float:
  """The accuracy of always guessing the most frequent scored target of `config`'s validation
  split (masked tokens or next tokens, as the pre-training scored them)."""
  scored = []
  batch_size = int(config.eval_batch_size or config.batch_size)
  for batch in data.make_eval_iterator(data.settings(config.data), 'validation', batch_size):
    targets = np.asarray(batch['targets'])
    real = np.asarray(batch['mask']).reshape((-1,) + (1,) * (targets.ndim - 1))   # not filler
    scored.append(targets[real & (targets != NOT_CHOSEN)])
  counts = np.bincount(np.concatenate(scored))
  return float(counts.max() / counts.sum())


def check_init_source(config) -> None:
  """ValueError when `config.init_from` is a run this run must not start from."""
  run = source_run(config.init_from)
  if run is None:
    return   # a bare checkpoint or a Hugging Face folder: nothing says what trained it
  source = run_file.load_saved_config(run)
  if 'model' not in source:
    return   # not a train.py run's config.json (a Hugging Face folder's)
  theirs, ours = _positions(source.model), config.model.get('positions')
  if ours is not None and theirs is not None and theirs != ours:
    raise ValueError(f'config.init_from={config.init_from!r} trained with model.positions='
                     f'{theirs!r}, this run has {ours!r}: the same parameters would compute '
                     f'another function; set --config.model.positions={theirs} or start from a '
                     f'run with {ours!r} positions.')
  if not config.get('init_from_refuse_unlearned', False):
    return
  if source.model.name not in PRETRAINING_MODELS:
    return
  scores = [r['accuracy'] for r in read_metrics(run, 'validation') if 'accuracy' in r]
  best = max(scores) if scores else float('nan')
  rate = unigram_rate(source)
  if not best >= rate + UNLEARNED_MARGIN:
    raise ValueError(f'config.init_from={config.init_from!r} is a pre-training run whose best '
                     f'validation accuracy {100 * best:.2f} % is not {100 * UNLEARNED_MARGIN:g} '
                     f'point above its data\'s unigram rate {100 * rate:.2f} % (it learned '
                     'nothing to start from); pre-train longer or at another learning rate, or set '
                     '--config.init_from_refuse_unlearned=False to fine-tune from it anyway.')
