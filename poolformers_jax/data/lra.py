"""Long Range Arena tasks other than ListOps: Text, Retrieval, Image, Pathfinder.

Tokens are bytes or pixel values shifted by one (id = value + 1), so that id 0 stays padding and
the model's `mask = inputs != 0` is right even for black pixels or NUL bytes; vocabulary 257
(the LRA table's 512 is just the embedding size the configs use).

- lra_text: TFDS 'imdb_reviews/plain_text', UTF-8 bytes, max_length 4096 (PoNet: 4000 bytes +
  96 padding, `max_tokens`; AdaMRA "4K") or 1000 / 1024 (LRA's and Nystromformer's code). IMDB
  has no validation split: as in LRA (text_classification/input_pipeline.py), 'validation' reads
  the test split (config.data.tfds_splits changes that).
- lra_retrieval: the LRA release files new_aan_pairs.{train,eval,test}.tsv in config.data.tsv_dir
  (no header; columns label, id1, id2, text1, text2, split on tabs only, as the LRA code reads
  them); inputs [2, max_length] bytes of the two documents, target the float label as int.
- lra_image: TFDS 'cifar10', gray levels as LRA's `tf.image.rgb_to_grayscale` computes them
  (weights 0.2989, 0.5870, 0.1140 in float32, scaled by 255.5/255 and truncated: `to_gray`),
  flattened row-major to 1024 pixel tokens.
  Splits as LRA's image/input_pipeline.py: train[:90%] / train[90%:] / test.
- lra_pathfinder, three layouts (config.data.format):
  'npz':         {pathfinder_dir}/{train,validation,test}.npz, each with 'images' uint8
                 [N, R, R] (or [N, R, R, 1]) and 'labels' int [N];
  'lra_release': the LRA release folder {pathfinder_dir}/{difficulty}/ with metadata/*.npy
                 (text, one line per image: `imgs/<k> sample_<i>.png <x> <label> ...`) and
                 imgs/<k>/*.png. Missing or empty PNGs are skipped with a warning count (as LRA
                 and Nystromformer do); the rest, ordered by sorted metadata file then line,
                 split 80/10/10 (LRA cuts the same fractions of TFDS's hash order,
                 Nystromformer of an unseeded shuffle: each split's images differ from theirs).
  'generated':   the same layout made offline by our generator (seeded, config.data.generator)
                 under {data_dir}/pathfinder_gen/ on first use.
"""
from __future__ import annotations

import functools
import glob
import os
from typing import Optional

import numpy as np

from poolformers_jax.data import base

GRAY_WEIGHTS = np.asarray([0.2989, 0.5870, 0.1140], np.float32)   # tf.image.rgb_to_grayscale


def _tfds_split(data_config, split: str) -> str:
  return data_config.tfds_splits[base.check_split(split)]


def _split_sizes(data_config, source_fn, known=None):
  if known is not None:
    return known
  return {split: len(source_fn(data_config, split)) for split in base.SPLITS}


# --------------------------------------------------------------------------------------------
# Text classification (IMDB bytes).

def text_source(data_config, split):
  return base.tfds_source(data_config.tfds_name, _tfds_split(data_config, split),
                          data_config.data_dir)


def byte_tokens(text, data_config, what: str) -> np.ndarray:
  """Byte ids cut to `max_tokens` (0 = max_length), then padded to `max_length`."""
  keep = min(data_config.max_tokens or data_config.max_length, data_config.max_length)
  ids = base.fit_length(base.byte_ids(text), keep, data_config.too_long, what)
  return base.fit_length(ids, data_config.max_length, 'error', what)


def text_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  return {'inputs': byte_tokens(record['text'], data_config, 'review'),
          'targets': np.int32(record['label'])}


def text_info(data_config, split_sizes=None):
  return base.DatasetInfo(name='lra_text', task='classification', num_classes=2,
                          vocab_size=base.BYTE_VOCAB_SIZE, input_shape=(data_config.max_length,),
                          split_sizes=_split_sizes(data_config, text_source, split_sizes))


# --------------------------------------------------------------------------------------------
# Retrieval (AAN document pairs, bytes).

RETRIEVAL_FILES = {'train': 'new_aan_pairs.train.tsv', 'validation': 'new_aan_pairs.eval.tsv',
                   'test': 'new_aan_pairs.test.tsv'}


def retrieval_record(line: str) -> dict:
  """{'label', 'text1', 'text2'} of a line `label id1 id2 text1 text2` of the headerless TSV."""
  fields = line.split('\t')
  if len(fields) < 5:
    raise ValueError(f'expected 5 tab-separated fields (label, id1, id2, text1, text2), got '
                     f'{len(fields)}.')
  return {'label': int(float(fields[0])), 'text1': fields[3], 'text2': fields[4]}


@functools.lru_cache(maxsize=8)
def retrieval_file(path: str) -> base.LineFile:
  """The records of one retrieval TSV file (indexed once per process)."""
  return base.LineFile(path, parse=retrieval_record)


def retrieval_source(data_config, split):
  path = os.path.join(base.expand_path(data_config.tsv_dir),
                      RETRIEVAL_FILES[base.check_split(split)])
  base.require_file(path, 'download the LRA release (lra_release.gz, tsv_data/) and set '
                    'config.data.tsv_dir to the folder holding new_aan_pairs.*.tsv.')
  return retrieval_file(path)


def retrieval_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  docs = [byte_tokens(record[k], data_config, 'document') for k in ('text1', 'text2')]
  return {'inputs': np.stack(docs), 'targets': np.int32(record['label'])}


def retrieval_info(data_config, split_sizes=None):
  return base.DatasetInfo(name='lra_retrieval', task='retrieval', num_classes=2,
                          vocab_size=base.BYTE_VOCAB_SIZE,
                          input_shape=(2, data_config.max_length),
                          split_sizes=_split_sizes(data_config, retrieval_source, split_sizes))


# --------------------------------------------------------------------------------------------
# Image (CIFAR-10 grayscale pixels as tokens).

def to_gray(image: np.ndarray) -> np.ndarray:
  """[H, W, 3] uint8 -> [H, W] uint8 gray levels exactly as LRA's pipeline makes them.

  LRA casts `tf.image.rgb_to_grayscale(x['image'])` to int32. On uint8 that op runs
  `convert_image_dtype` to float32 (x * float32(1/255)), a dot product with the float32 weights,
  and `convert_image_dtype` back (* 255.5, then a truncating cast), so, in float32:
      gray = floor((0.2989 r/255 + 0.5870 g/255 + 0.1140 b/255) * 255.5) = floor(luma * 511/510).
  Not luma rounded half up: that is one level brighter on 25 % of all RGB triples (pure green
  (0, 255, 0): luma 149.685, TF 149, rounded 150). Summing the three products in float32 in
  another order (or with FMA) changes 48 of the 2^24 triples.
  """
  if image.shape[-1] == 1:
    return image[..., 0]
  scaled = image.astype(np.float32) * np.float32(1 / 255)
  w = GRAY_WEIGHTS
  luma = (scaled[..., 0] * w[0] + scaled[..., 1] * w[1]) + scaled[..., 2] * w[2]
  return (luma * np.float32(255.5)).astype(np.uint8)   # float -> uint8 cast: truncation


def pixel_tokens(gray: np.ndarray, data_config, what: str) -> np.ndarray:
  ids = gray.reshape(-1).astype(np.int32) + 1   # pixel value + 1: black pixels are not padding
  return base.fit_length(ids, data_config.max_length, data_config.too_long, what)


def image_source(data_config, split):
  return base.tfds_source(data_config.tfds_name, _tfds_split(data_config, split),
                          data_config.data_dir)


def image_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  gray = to_gray(np.asarray(record['image']))
  return {'inputs': pixel_tokens(gray, data_config, 'image'), 'targets': np.int32(record['label'])}


def image_info(data_config, split_sizes=None):
  return base.DatasetInfo(name='lra_image', task='classification', num_classes=10,
                          vocab_size=base.BYTE_VOCAB_SIZE, input_shape=(data_config.max_length,),
                          split_sizes=_split_sizes(data_config, image_source, split_sizes))


# --------------------------------------------------------------------------------------------
# Pathfinder.

class NpzSource:
  def __init__(self, path: str):
    with np.load(path) as f:
      self.images, self.labels = np.asarray(f['images'], np.uint8), np.asarray(f['labels'])
    if len(self.images) != len(self.labels):
      raise ValueError(f'{path}: {len(self.images)} images but {len(self.labels)} labels.')

  def __len__(self):
    return len(self.labels)

  def __getitem__(self, index):
    return {'image': self.images[index], 'label': int(self.labels[index])}


class PngSource:
  """(png path, label) list from the LRA release metadata; images decoded on read (PIL)."""

  def __init__(self, entries):
    self.entries = entries

  def __len__(self):
    return len(self.entries)

  def __getitem__(self, index):
    from PIL import Image
    path, label = self.entries[index]
    with Image.open(path) as image:
      return {'image': np.asarray(image.convert('L'), np.uint8), 'label': label}


@functools.lru_cache(maxsize=8)
def _npz(path: str) -> NpzSource:
  return NpzSource(path)


def release_images(folder: str) -> tuple[list[tuple[str, int]], int]:
  """(png path, label) of every readable image listed in folder/metadata/*.npy, and how many
  were skipped as missing or empty (the LRA release has one empty PNG:
  pathfinder32/curv_baseline/imgs/0/sample_172.png)."""
  metadata = sorted(glob.glob(os.path.join(folder, 'metadata', '*.npy')))
  if not metadata:
    raise base.DataNotFoundError(
        f'{folder}/metadata/*.npy not found: point config.data.pathfinder_dir at the LRA release '
        "pathfinder32 folder (holding curv_baseline/ ...), or use config.data.format='generated' "
        "or 'npz'.")
  entries, skipped = [], 0
  for meta in metadata:
    with open(meta) as f:
      for line in f:
        fields = line.split()
        if fields:
          path = os.path.join(folder, fields[0], fields[1])
          if os.path.isfile(path) and os.path.getsize(path) > 0:
            entries.append((path, int(fields[3])))
          else:
            skipped += 1
  return entries, skipped


@functools.lru_cache(maxsize=8)
def _release_entries(folder: str):
  entries, skipped = release_images(folder)
  if skipped:
    from absl import logging
    logging.warning('Pathfinder: skipped %d missing or empty images listed in %s/metadata.',
                    skipped, folder)
  n = len(entries)
  train_end, validation_end = int(0.8 * n), int(0.9 * n)
  return {'train': entries[:train_end], 'validation': entries[train_end:validation_end],
          'test': entries[validation_end:]}


@functools.lru_cache(maxsize=8)
def _generated_folder(data_dir: str, seed: int, num_examples: int, images_per_file: int,
                      resolution: int, difficulty: str) -> str:
  from poolformers_jax.data import pathfinder_gen
  # The drawing's version in the name: images of an older generator are not reused.
  out_dir = os.path.join(data_dir, 'pathfinder_gen', f'v{pathfinder_gen.VERSION}_seed{seed}_'
                         f'n{num_examples}_f{images_per_file}')
  return pathfinder_gen.generate(out_dir, seed=seed, resolution=resolution, difficulty=difficulty,
                                 num_examples=num_examples, images_per_file=images_per_file)


def pathfinder_source(data_config, split):
  base.check_split(split)
  root = base.expand_path(data_config.pathfinder_dir)
  if data_config.format == 'npz':
    path = os.path.join(root, f'{split}.npz')
    base.require_file(path, "write train/validation/test .npz files ('images' uint8 [N, R, R], "
                      "'labels' [N]) there or use config.data.format='lra_release'.")
    return _npz(path)
  if data_config.format == 'lra_release':
    return PngSource(_release_entries(os.path.join(root, data_config.difficulty))[split])
  if data_config.format == 'generated':   # made once, then read as the release layout
    g = data_config.generator
    folder = _generated_folder(base.expand_path(data_config.data_dir), int(g.seed),
                               int(g.num_examples), int(g.images_per_file),
                               int(data_config.resolution), data_config.difficulty)
    return PngSource(_release_entries(folder)[split])
  raise ValueError(f"config.data.format={data_config.format!r}; choose 'npz', 'lra_release' or "
                   "'generated'.")


def pathfinder_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  image = np.asarray(record['image'])
  gray = to_gray(image) if image.ndim == 3 else image
  return {'inputs': pixel_tokens(gray, data_config, 'pathfinder image'),
          'targets': np.int32(record['label'])}


def pathfinder_info(data_config, split_sizes=None):
  return base.DatasetInfo(name='lra_pathfinder', task='classification', num_classes=2,
                          vocab_size=base.BYTE_VOCAB_SIZE, input_shape=(data_config.max_length,),
                          split_sizes=_split_sizes(data_config, pathfinder_source, split_sizes))


# ----------------------------------------------------------------------- config.data defaults

def text_config():
  c = base.common_config('lra_text', 4096)
  c.max_tokens = 0                # bytes kept before padding to max_length; 0 = max_length
  c.tfds_name = 'imdb_reviews/plain_text'
  c.tfds_splits = dict(train='train', validation='test', test='test')
  return c


def retrieval_config():
  c = base.common_config('lra_retrieval', 4096)   # per document
  c.max_tokens = 0                # bytes kept per document; 0 = max_length
  c.tsv_dir = os.path.join(base.default_data_dir(), 'lra_release', 'tsv_data')
  return c


def image_config():
  c = base.common_config('lra_image', 1024)
  c.tfds_name = 'cifar10'
  c.tfds_splits = dict(train='train[:90%]', validation='train[90%:]', test='test')
  return c


def pathfinder_config():
  c = base.common_config('lra_pathfinder', 1024)
  c.format = 'npz'                # 'npz' | 'lra_release' (PNGs) | 'generated' (our generator)
  c.resolution = 32               # 'generated': 32 (Pathfinder) or 128 (Path-X, max_length 16384)
  c.difficulty = 'curv_baseline'  # curv_baseline | curv_contour_length_9 | ..._14
  c.pathfinder_dir = os.path.join(base.default_data_dir(), 'lra_release', 'pathfinder32')
  c.generator = dict(seed=0, num_examples=200000, images_per_file=1000)
  return c


def _spec(info, source, preprocess, config, record, **declared) -> base.DatasetSpec:
  """`shapes`: the same info without files (vocabulary, classes and lengths are constants)."""
  return base.DatasetSpec(info, source, preprocess, config, record=record,
                          shapes=functools.partial(info, split_sizes={}), **declared)


# A user's raw input (load_run) as a record: a text, a pair of documents, an image.
def _image_record(raw, data_config):
  return {'image': base.image_input(raw), 'label': 0}


base.register_dataset('lra_text', _spec(text_info, text_source, text_preprocess, text_config,
                                        lambda raw, _: {'text': raw, 'label': 0}))
base.register_dataset('lra_retrieval', _spec(
    retrieval_info, retrieval_source, retrieval_preprocess, retrieval_config,
    lambda raw, _: {'text1': raw[0], 'text2': raw[1], 'label': 0}))
base.register_dataset('lra_image', _spec(image_info, image_source, image_preprocess, image_config,
                                         _image_record))
base.register_dataset('lra_pathfinder', _spec(
    pathfinder_info, pathfinder_source, pathfinder_preprocess, pathfinder_config, _image_record,
    generated=lambda data_config: data_config.format == 'generated'))
