"""Length-grouped micro-batches (config.length_buckets): the host side of the bucketed step.

A global batch of LRA token sequences is sorted by real length and split into micro-batches of
`micro_batch_size` examples (rounded up to the device count; the last filled with zero-weight
copies of a real example); each is cut to the next multiple of `multiple` tokens above its
longest example, at most the data's padded length, so a run compiles at most
max_length / multiple shapes.

The result is the whole batch's to float rounding: the mask is `tokens != 0`, so the cut drops
only padding; masked softmax gives padded keys exactly zero weight, ContextPool counts only real
tokens, learned position embeddings are sliced from the left, 'mean' pooling counts real tokens
and 'mean_padded' keeps dividing by the data's length (`padded_length_model`). Dropout masks
follow the micro-batch shape, so with dropout it is an equally valid draw. Mixers whose traits
say the amount of padding changes their outputs (PoNet, AdaMRA) are refused by the config check.
Evaluation (`sorted_batches`) sorts, re-batches and cuts the split's real examples the same way.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np


def real_lengths(inputs: np.ndarray) -> np.ndarray:
  """[B, L] token ids -> [B]: the position after the last non-padding (non-zero) token."""
  nonzero = np.asarray(inputs) != 0
  last = nonzero.shape[-1] - np.argmax(nonzero[:, ::-1], axis=-1)
  return np.where(nonzero.any(-1), last, 0)


def bucket_length(longest: int, multiple: int, max_length: int) -> int:
  """The cut of a micro-batch whose longest example has `longest` tokens."""
  return min(max(-(-int(longest) // multiple), 1) * multiple, max_length)


def micro_batches(batch: dict[str, np.ndarray], micro_batch_size: int, devices: int,
                  multiple: int) -> list[dict[str, np.ndarray]]:
  """A host batch {'inputs': [B, L], 'targets': [B], ...} -> micro-batches, shortest first, each
  with 'weights' [M] (1 real, 0 filler) and 'inputs' cut to its bucket length."""
  inputs = np.asarray(batch['inputs'])
  lengths = real_lengths(inputs)
  order = np.argsort(lengths, kind='stable')
  size = -(-min(micro_batch_size, len(order)) // devices) * devices
  out = []
  for start in range(0, len(order), size):
    rows = order[start:start + size]
    weights = np.ones(size, np.float32)
    weights[len(rows):] = 0.0                     # fillers: copies of a real row, weight 0
    rows = np.concatenate([rows, np.full(size - len(rows), rows[0])])
    cut = bucket_length(lengths[rows].max(), multiple, inputs.shape[-1])
    micro = {k: np.asarray(v)[rows] for k, v in batch.items() if k != 'inputs'}
    out.append({**micro, 'inputs': inputs[rows, :cut], 'weights': weights})
  return out


def sorted_batches(batches: Iterable[dict[str, Any]], batch_size: int,
                   multiple: int) -> Iterator[dict[str, np.ndarray]]:
  """Eval batches (with 'mask') -> the same real examples sorted by length, `batch_size` per
  batch (the last filled with masked-out copies), each cut to its bucket length. Reads all of
  `batches` first (an LRA eval split is a few MB)."""
  parts = [{k: np.asarray(v) for k, v in b.items()} for b in batches]
  if not parts:
    return
  real = {k: np.concatenate([p[k][p['mask']] for p in parts]) for k in parts[0]}
  if not len(real['mask']):
    yield parts[0]                                # nothing real: one all-masked batch
    return
  lengths = real_lengths(real['inputs'])
  order = np.argsort(lengths, kind='stable')
  max_length = real['inputs'].shape[-1]
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    mask = np.arange(batch_size) < len(rows)
    rows = np.concatenate([rows, np.full(batch_size - len(rows), rows[0])])
    cut = bucket_length(lengths[rows].max(), multiple, max_length)
    batch = {k: v[rows] for k, v in real.items()}
    yield {**batch, 'inputs': batch['inputs'][:, :cut], 'mask': mask}


def padded_length_model(model: Any, info: Any) -> Any:
  """`model` with 'mean_padded' pooling dividing by the data's padded length, not by the cut."""
  return model.clone(pool_length=int(info.input_shape[-1]))
