"""The accuracy a self-pretraining run must beat to have learned anything from context: on the
validation tokens its config scores (the same masks as its evaluation), the unigram rate (always
the training split's most frequent token) and the bigram rate (the training split's most frequent
successor of the token just before, as the model sees it; the unigram guess where that is a [MASK]
or there is none). docs/results/lra_spt.md.

    python benchmarks/spt_rates.py --config configs/lra_listops.py:transformer,small,spt
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from poolformers_jax import config as config_lib, data
from poolformers_jax.data.masking import NOT_CHOSEN


def token_rows(config, split: str):
  """Every [..., L] row of `split` as the model reads it (inputs, targets), real rows only."""
  batch_size = int(config.eval_batch_size or config.batch_size)
  for batch in data.make_eval_iterator(data.settings(config.data), split, batch_size):
    real = np.asarray(batch['mask'])
    inputs, targets = np.asarray(batch['inputs'])[real], np.asarray(batch['targets'])[real]
    yield inputs.reshape(-1, inputs.shape[-1]), targets.reshape(-1, targets.shape[-1])


def rates(config) -> dict[str, float]:
  plain = config_lib.override(config, **{'data.mask_rate': 0.0, 'data.next_tokens': False})
  vocab = int(config.model.vocab_size) + 1      # + the [MASK] id of masked pre-training
  unigram, pairs = np.zeros(vocab, np.int64), np.zeros((vocab, vocab), np.int64)
  for inputs, _ in token_rows(plain, 'train'):  # the training split's own tokens
    unigram += np.bincount(inputs[inputs > 0], minlength=vocab)
    before, after = inputs[:, :-1], inputs[:, 1:]
    real = (before > 0) & (after > 0)
    np.add.at(pairs, (before[real], after[real]), 1)
  guess, successor = int(np.argmax(unigram)), np.argmax(pairs, axis=1)
  successor[pairs.sum(1) == 0] = guess          # an unseen token before (the [MASK] id)
  hits = {'unigram': 0, 'bigram': 0}
  count = 0
  for inputs, targets in token_rows(config, 'validation'):
    scored = targets != NOT_CHOSEN
    if config.data.get('next_tokens'):   # target t is token t + 1: its predecessor is input t
      previous = inputs
    else:                                # masked: the token left of the masked one, as seen
      previous = np.pad(inputs[:, :-1], ((0, 0), (1, 0)))
    bigram = np.where(previous > 0, successor[previous], guess)
    hits['unigram'] += int(np.sum(scored & (targets == guess)))
    hits['bigram'] += int(np.sum(scored & (targets == bigram)))
    count += int(scored.sum())
  return {k: v / count for k, v in hits.items()} | {'scored_tokens': count}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--config', required=True, help='a pre-training config (spt / spt_causal)')
  parser.add_argument('--set', action='append', default=[], help='key=value overrides')
  args = parser.parse_args()
  config = config_lib.load(args.config)
  config = config_lib.override(config, **dict(kv.split('=', 1) for kv in args.set))
  config = config_lib.complete(config)
  print(json.dumps(rates(config)))


if __name__ == '__main__':
  main()
