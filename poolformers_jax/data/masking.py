"""Self-pretraining (SPT) on a task's own inputs: Amos, Berant & Gupta, "Never Train from Scratch"
(ICLR 2024, arXiv 2310.02980). A share `config.data.mask_rate` of each example's real tokens is
replaced by one [MASK] id and the model predicts the originals; only the training split's inputs
are seen, and nothing but the inputs (the labels are dropped).

Where their recipe is fixed (paper Sec. 3, their configs): masked-token prediction for
bidirectional encoders, each real token chosen independently with probability `mask_rate` (10 %
for ListOps, 15 % for text and retrieval, 50 % for the pixel tasks), the loss and accuracy on the
chosen tokens only, the best checkpoint by validation accuracy on them. Our choices where they are
not: the [MASK] id is one past the data's vocabulary (`vocab_size`; id 0 stays padding, so a
masked token is still a real one for the mixer's mask), chosen tokens are always replaced by it
(no BERT 80/10/10), and a retrieval pair is two documents, each masked and predicted on its own.

Training draws the mask from the example's own Generator (the pipeline's: seed and global
position, so a resumed run masks as the original did); evaluation has no Generator and draws it
from the example's tokens (a CRC of them), so every pass over validation scores the same masks.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Optional

import numpy as np

from poolformers_jax.data import base

TASK = 'masked_tokens'   # tasks/masked_tokens.py
NOT_CHOSEN = -1          # a target that is not scored


def enabled(mask_rate: float) -> bool:
  """Whether config.data.mask_rate (the caller reads it) asks for self-pretraining."""
  return float(mask_rate) > 0.0


def check_rate(rate: float) -> float:
  if not 0.0 < rate < 1.0:
    raise ValueError(f'config.data.mask_rate={rate} must be in (0, 1) for self-pretraining (e.g. '
                     '0.1 for ListOps, 0.15 text, 0.5 images), or 0 to train on the task itself.')
  return rate


def mask_tokens(tokens: np.ndarray, rate: float, mask_id: int,
                rng: Optional[np.random.Generator] = None) -> tuple[np.ndarray, np.ndarray]:
  """tokens [..., L] (0 = padding) -> (inputs with the chosen tokens replaced by `mask_id`,
  targets: the original id where chosen, NOT_CHOSEN elsewhere). Padding is never chosen."""
  tokens = np.asarray(tokens)
  if rng is None:   # evaluation: the same mask for the same example, whatever the order
    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(tokens).tobytes()))
  chosen = (tokens != 0) & (rng.random(tokens.shape) < rate)
  inputs = np.where(chosen, mask_id, tokens).astype(np.int32)
  targets = np.where(chosen, tokens, NOT_CHOSEN).astype(np.int32)
  return inputs, targets


def masked_example(example: base.Example, data_config, vocab_size: int,
                   rng: Optional[np.random.Generator] = None) -> base.Example:
  """A task's example -> the self-pretraining example of its inputs (its labels dropped)."""
  inputs, targets = mask_tokens(example['inputs'], check_rate(float(data_config.mask_rate)),
                                vocab_size, rng)
  return {'inputs': inputs, 'targets': targets}


def pretraining_info(info: base.DatasetInfo) -> base.DatasetInfo:
  """The task's DatasetInfo -> the self-pretraining one: the vocabulary grows by [MASK] and the
  model predicts one of its ids per position."""
  if info.vocab_size is None:
    raise ValueError(f'{info.name} has no token vocabulary: self-pretraining (config.data.'
                     'mask_rate > 0) masks token ids; set config.data.mask_rate=0.')
  if info.packed:
    raise ValueError(f'{info.name}: self-pretraining does not support packed rows '
                     '(config.data.pack); set config.data.pack=False.')
  size = info.vocab_size + 1
  return dataclasses.replace(info, task=TASK, vocab_size=size, num_classes=size)
