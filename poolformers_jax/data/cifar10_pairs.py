"""cifar10_pairs (MSAC Sec. 6.1's cross-attentive similarity model): CIFAR-10 image pairs
[2, H, W, C], half of them of one class, labelled same (1) / different (0) class; each image read
and augmented as cifar10's (vision.py).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from poolformers_jax.data import base, vision


class ImagePairs:
  """Image pairs of a split: pair i is image i with an image drawn (seeded with (seed, i)) from
  its own class when i is even, from another when odd. Records (image, image, 1 = same class)."""

  def __init__(self, records, seed: int):
    self.records, self.seed = records, seed
    self.labels = np.asarray([int(records[i]['label']) for i in range(len(records))])
    self.by_class = {int(c): np.flatnonzero(self.labels == c) for c in np.unique(self.labels)}

  def __len__(self) -> int:
    return len(self.records)

  def __getitem__(self, index: int):
    rng = np.random.default_rng([self.seed, index])
    label, same = int(self.labels[index]), index % 2 == 0
    others = [c for c in self.by_class if c != label]
    other_class = label if same or not others else others[rng.integers(len(others))]
    partner = rng.choice(self.by_class[other_class])
    return self.records[index], self.records[int(partner)], np.int32(other_class == label)


@dataclasses.dataclass(frozen=True)
class PairSettings(vision.VisionSettings):
  name: str = 'cifar10_pairs'
  pair_seed: int = 0              # which partner each image gets (fixed: the pairs never change)


@functools.lru_cache(maxsize=4)
def _pairs(tfds_name: str, tfds_split: str, data_dir: str, pair_seed: int) -> ImagePairs:
  return ImagePairs(base.tfds_source(tfds_name, tfds_split, data_dir), pair_seed)


def source(settings: PairSettings, split):
  return _pairs(settings.tfds_name, settings.tfds_splits[base.check_split(split)],
                settings.data_dir, int(settings.pair_seed))   # labels are read once


def preprocess(record, settings, rng: np.random.Generator | None = None):
  """inputs [2, H, W, C] (each image augmented on its own at train time), targets same class."""
  first, second, same = record
  images = [vision.preprocess(r, settings, rng)['inputs'] for r in (first, second)]
  return {'inputs': np.stack(images), 'targets': np.int32(same)}


def info(settings, *, from_files: bool = True):
  single = vision.info(settings, from_files=from_files)
  return dataclasses.replace(single, num_classes=2, input_shape=(2,) + single.input_shape)


def record(raw, settings):
  """A user's pair of images (load_run) as a record."""
  return (base.image_record(raw[0], settings), base.image_record(raw[1], settings),
          np.int32(0))


base.register_dataset('cifar10_pairs', base.DatasetSpec(
    info, source, preprocess, PairSettings, record=record,
    shapes=functools.partial(info, from_files=False)))
