"""What the Long Range Arena readers (lra_text, lra_retrieval, lra_image, lra_pathfinder: a file
each) and the Pathfinder generator share. ListOps: listops.py.

Tokens are bytes or pixel values shifted by one (id = value + 1), so that id 0 stays padding and
the model's `mask = inputs != 0` is right even for black pixels or NUL bytes; vocabulary 257
(the LRA table's 512 is just the embedding size the configs use).
"""
from __future__ import annotations

import functools

import numpy as np

from poolformers_jax.data import base

GRAY_WEIGHTS = np.asarray([0.2989, 0.5870, 0.1140], np.float32)   # tf.image.rgb_to_grayscale
# Pathfinder's difficulties: the release's folders, each with its target contours' length in
# paddles (the reader's config.data.difficulty, the generator's --difficulty).
PATHFINDER_DIFFICULTIES = {'curv_baseline': 6, 'curv_contour_length_9': 9,
                           'curv_contour_length_14': 14}


def byte_tokens(text, settings, what: str) -> np.ndarray:
  """Byte ids cut to `max_tokens` (0 = max_length), then padded to `max_length`."""
  keep = min(settings.max_tokens or settings.max_length, settings.max_length)
  ids = base.fit_length(base.byte_ids(text), keep, settings.too_long, what)
  return base.fit_length(ids, settings.max_length, 'error', what)


def to_gray(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> [H, W] uint8 gray levels exactly as LRA's int32 cast of
  `tf.image.rgb_to_grayscale` makes them: floor(luma * 511/510) in float32, not luma rounded
  (one level brighter on 25 % of all RGB triples), the three products summed in this order
  (another order, or FMA, changes 48 of the 2^24 triples): docs/results/pathfinder_generator.md.
  """
  if image.shape[-1] == 1:
    return image[..., 0]
  scaled = image.astype(np.float32) * np.float32(1 / 255)
  w = GRAY_WEIGHTS
  luma = (scaled[..., 0] * w[0] + scaled[..., 1] * w[1]) + scaled[..., 2] * w[2]
  return (luma * np.float32(255.5)).astype(np.uint8)   # float -> uint8 cast: truncation


def pixel_tokens(gray: np.ndarray, settings, what: str) -> np.ndarray:
  ids = gray.reshape(-1).astype(np.int32) + 1   # pixel value + 1: black pixels are not padding
  return base.fit_length(ids, settings.max_length, settings.too_long, what)


def spec(name: str, source, preprocess, defaults, record, *, task: str = 'classification',
         num_classes: int = 2, documents: int = 0, **declared) -> base.DatasetSpec:
  """The DatasetSpec of task `name`: vocabulary 257, inputs [max_length] (`documents` > 0:
  [documents, max_length]); `shapes` is its info without split sizes (no file read)."""

  def info(settings, split_sizes=None) -> base.DatasetInfo:
    if split_sizes is None:
      split_sizes = {split: len(source(settings, split)) for split in base.SPLITS}
    shape = (documents, settings.max_length) if documents else (settings.max_length,)
    return base.DatasetInfo(name=name, task=task, num_classes=num_classes,
                            vocab_size=base.BYTE_VOCAB_SIZE, input_shape=shape,
                            split_sizes=split_sizes)

  return base.DatasetSpec(info, source, preprocess, defaults, record=record,
                          shapes=functools.partial(info, split_sizes={}), **declared)
