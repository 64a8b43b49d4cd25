"""Self-pretraining (SPT) on a task's own inputs: Amos, Berant & Gupta, "Never Train from Scratch"
(ICLR 2024, arXiv 2310.02980). Two objectives, only the training split's inputs seen and nothing
but the inputs (the labels are dropped):
- masked tokens (`config.data.mask_rate` > 0): that share of each example's real tokens is
  replaced by one [MASK] id and the model predicts the originals (bidirectional encoders);
- next tokens (`config.data.next_tokens`): the inputs unchanged, the target at position t the
  real token at t + 1 (the mixers causal, `lra_causal_lm`); padding and the last real token's
  successor are NOT_CHOSEN.

Their recipe (paper Sec. 3, their configs): each real token chosen independently with probability
`mask_rate` (10 % for ListOps, 15 % for text and retrieval, 50 % for the pixel tasks), the loss and
accuracy on the chosen tokens only, the best checkpoint by validation accuracy on them. Our
choices where it is silent: the [MASK] id is one past the data's vocabulary (id 0 stays padding,
so a masked token is still real for the mixer's mask), chosen tokens are always replaced (no BERT
80/10/10), and a retrieval pair's two documents are each masked or shifted on their own.

Training draws the mask from the example's own Generator (seed and global position: a resumed run
masks as the original did); evaluation draws it from a CRC of the example's tokens, so every pass
over validation scores the same masks.
"""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from poolformers_jax.data import base

TASK = 'masked_tokens'      # the registered task that scores it
NEXT_TASK = 'next_tokens'   # the same token sums
NOT_CHOSEN = -1             # a target that is not scored


def objective(mask_rate: float = 0.0, next_tokens: bool = False) -> str | None:
  """config.data's `mask_rate` and `next_tokens` -> the self-pretraining objective, TASK (masked
  tokens) or NEXT_TASK, or None: the dataset's own task."""
  if next_tokens and float(mask_rate) > 0.0:
    raise ValueError(f'config.data.next_tokens=True and config.data.mask_rate={mask_rate}: pick '
                     'one self-pretraining objective (set mask_rate=0 for next tokens, '
                     'next_tokens=False for masked tokens).')
  if next_tokens:
    return NEXT_TASK
  return TASK if float(mask_rate) > 0.0 else None


def check_rate(rate: float) -> float:
  if not 0.0 < rate < 1.0:
    raise ValueError(f'config.data.mask_rate={rate} must be in (0, 1) for self-pretraining (e.g. '
                     '0.1 for ListOps, 0.15 text, 0.5 images), or 0 to train on the task itself.')
  return rate


def mask_tokens(tokens: np.ndarray, rate: float, mask_id: int,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
  """tokens [..., L] (0 = padding) -> (inputs with the chosen tokens replaced by `mask_id`,
  targets: the original id where chosen, NOT_CHOSEN elsewhere). Padding is never chosen."""
  tokens = np.asarray(tokens)
  if rng is None:   # evaluation: the same mask for the same example, whatever the order
    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(tokens).tobytes()))
  chosen = (tokens != 0) & (rng.random(tokens.shape) < rate)
  inputs = np.where(chosen, mask_id, tokens).astype(np.int32)
  targets = np.where(chosen, tokens, NOT_CHOSEN).astype(np.int32)
  return inputs, targets


def next_tokens(tokens: np.ndarray) -> np.ndarray:
  """tokens [..., L] (0 = padding) -> targets [..., L]: the token at t + 1 where it is real,
  NOT_CHOSEN where it is padding or past the end (each row of the last axis on its own)."""
  tokens = np.asarray(tokens)
  following = np.concatenate([tokens[..., 1:], np.zeros_like(tokens[..., :1])], axis=-1)
  return np.where(following != 0, following, NOT_CHOSEN).astype(np.int32)


def pretraining_example(example: base.Example, objective_: str, mask_rate: float,
                        vocab_size: int, rng: np.random.Generator | None = None) -> base.Example:
  """A task's example -> the self-pretraining example of its inputs (its labels dropped):
  masked at `mask_rate` (the [MASK] id is `vocab_size`, the data's) or, for NEXT_TASK, next
  tokens (inputs unchanged)."""
  if objective_ == NEXT_TASK:
    tokens = np.asarray(example['inputs'], np.int32)
    return {'inputs': tokens, 'targets': next_tokens(tokens)}
  inputs, targets = mask_tokens(example['inputs'], check_rate(float(mask_rate)), vocab_size, rng)
  return {'inputs': inputs, 'targets': targets}


def pretraining_info(info: base.DatasetInfo, objective_: str = TASK) -> base.DatasetInfo:
  """The task's DatasetInfo -> the self-pretraining one: the model predicts one token id per
  position; for masked tokens the vocabulary grows by [MASK], for next tokens it is the task's
  (the encoder's parameters are then the classifier's, shape for shape)."""
  next_ = objective_ == NEXT_TASK
  on, off = ('next_tokens=True', 'next_tokens=False') if next_ else ('mask_rate > 0', 'mask_rate=0')
  if info.vocab_size is None:
    raise ValueError(f'{info.name} has no token vocabulary: self-pretraining (config.data.{on}) '
                     f'predicts token ids; set config.data.{off}.')
  if info.packed:
    raise ValueError(f'{info.name}: self-pretraining does not support packed rows '
                     '(config.data.pack); set config.data.pack=False.')
  if next_:
    return dataclasses.replace(info, task=NEXT_TASK, num_classes=info.vocab_size)
  size = info.vocab_size + 1
  return dataclasses.replace(info, task=TASK, vocab_size=size, num_classes=size)
