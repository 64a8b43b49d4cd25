"""lra_text (LRA Text): IMDB reviews as UTF-8 bytes (lra.py: tokens are byte + 1).

TFDS 'imdb_reviews/plain_text', max_length 4096 (PoNet: 4000 bytes + 96 padding, `max_tokens`;
AdaMRA "4K") or 1000 / 1024 (LRA's and Nystromformer's code). IMDB has no validation split: as in
LRA (text_classification/input_pipeline.py), 'validation' reads the test split
(config.data.tfds_splits changes that).
"""
from __future__ import annotations

import numpy as np

from poolformers_jax.data import base, lra


def config():
  c = base.common_config('lra_text', 4096)
  c.max_tokens = 0                # bytes kept before padding to max_length; 0 = max_length
  c.tfds_name = 'imdb_reviews/plain_text'
  c.tfds_splits = dict(train='train', validation='test', test='test')
  return c


def preprocess(record, data_config, rng: np.random.Generator | None = None):
  del rng
  return {'inputs': lra.byte_tokens(record['text'], data_config, 'review'),
          'targets': np.int32(record['label'])}


base.register_dataset('lra_text', lra.spec(
    'lra_text', base.tfds_split_source, preprocess, config,
    lambda raw, _: {'text': raw, 'label': 0}))
