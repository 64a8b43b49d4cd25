"""lra_image (LRA Image): CIFAR-10 gray levels as pixel tokens (lra.py: tokens are value + 1).

TFDS 'cifar10', gray levels as LRA's `tf.image.rgb_to_grayscale` computes them (weights 0.2989,
0.5870, 0.1140 in float32, scaled by 255.5/255 and truncated: `lra.to_gray`), flattened row-major
to 1024 pixel tokens. Splits as LRA's image/input_pipeline.py: train[:90%] / train[90%:] / test.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poolformers_jax.data import base, lra


@dataclasses.dataclass(frozen=True)
class ImageSettings(base.DataSettings):
  name: str = 'lra_image'
  max_length: int = 1024
  tfds_name: str = 'cifar10'
  tfds_splits: dict = base.mapping(train='train[:90%]', validation='train[90%:]', test='test')


def preprocess(record, settings: ImageSettings, rng: np.random.Generator | None = None):
  del rng
  gray = lra.to_gray(np.asarray(record['image']))
  return {'inputs': lra.pixel_tokens(gray, settings, 'image'),
          'targets': np.int32(record['label'])}


base.register_dataset('lra_image', lra.spec(
    'lra_image', base.tfds_split_source, preprocess, ImageSettings, base.image_record,
    num_classes=10))
