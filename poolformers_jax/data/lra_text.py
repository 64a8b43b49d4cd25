"""lra_text (LRA Text): IMDB reviews as UTF-8 bytes (lra.py: tokens are byte + 1).

TFDS 'imdb_reviews/plain_text', max_length 4096 (PoNet: 4000 bytes + 96 padding, `max_tokens`;
AdaMRA "4K") or 1000 / 1024 (LRA's and Nystromformer's code). IMDB has no validation split: as in
LRA (text_classification/input_pipeline.py), 'validation' reads the test split
(config.data.tfds_splits changes that).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poolformers_jax.data import base, lra


@dataclasses.dataclass(frozen=True)
class TextSettings(base.DataSettings):
  name: str = 'lra_text'
  max_length: int = 4096
  max_tokens: int = 0             # bytes kept before padding to max_length; 0 = max_length
  tfds_name: str = 'imdb_reviews/plain_text'
  tfds_splits: dict = base.mapping(train='train', validation='test', test='test')


def preprocess(record, settings: TextSettings, rng: np.random.Generator | None = None):
  del rng
  return {'inputs': lra.byte_tokens(record['text'], settings, 'review'),
          'targets': np.int32(record['label'])}


base.register_dataset('lra_text', lra.spec(
    'lra_text', base.tfds_split_source, preprocess, TextSettings,
    lambda raw, _: {'text': raw, 'label': 0}))
