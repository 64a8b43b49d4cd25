"""lra_pathfinder (LRA Pathfinder, Path-X): are the two markers of an image on one contour? Gray
pixels as tokens (lra.py: value + 1), in three layouts (config.data.format):

  'npz':         {pathfinder_dir}/{train,validation,test}.npz, each with 'images' uint8
                 [N, R, R] (or [N, R, R, 1]) and 'labels' int [N];
  'lra_release': the LRA release folder {pathfinder_dir}/{difficulty}/ with metadata/*.npy
                 (text, one line per image: `imgs/<k> sample_<i>.png <x> <label> ...`) and
                 imgs/<k>/*.png. Missing or empty PNGs are skipped with a warning count (as LRA
                 and Nystromformer do); the rest, ordered by sorted metadata file then line,
                 split 80/10/10 (LRA cuts the same fractions of TFDS's hash order,
                 Nystromformer of an unseeded shuffle: each split's images differ from theirs).
  'generated':   the same layout made offline by data/generators/pathfinder.py (seeded,
                 config.data.generator) under {data_dir}/pathfinder_gen/ on first use.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import bad_records, base, lra


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
    try:
      with Image.open(path) as image:
        return {'image': np.asarray(image.convert('L'), np.uint8), 'label': label}
    except (OSError, SyntaxError, ValueError) as error:   # PIL's errors of a damaged file
      raise bad_records.BadRecord(
          f'{path} (record {index} of {len(self)}) does not decode as an image '
          f'({errors.one_line(str(error))}); copy the image again (the LRA release, or delete '
          f'the generated folder to make it again), {bad_records.SKIP_HINT}', path) from error


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
  """format='generated': the folder the generator writes once. The reader's one import of the
  generator is here, inside the function: only `generated` data (DatasetSpec.generated) needs it,
  so the other formats never load it."""
  from poolformers_jax.data.generators import pathfinder as generator
  # The drawing's version in the name: images of an older generator are not reused.
  out_dir = os.path.join(data_dir, 'pathfinder_gen', f'v{generator.VERSION}_seed{seed}_'
                         f'n{num_examples}_f{images_per_file}')
  return generator.generate(out_dir, seed=seed, resolution=resolution, difficulty=difficulty,
                            num_examples=num_examples, images_per_file=images_per_file)


def source(settings: PathfinderSettings, split):
  base.check_split(split)
  root = base.expand_path(settings.pathfinder_dir)
  if settings.format == 'npz':
    path = os.path.join(root, f'{split}.npz')
    base.require_file(path, "write train/validation/test .npz files ('images' uint8 [N, R, R], "
                      "'labels' [N]) there or use config.data.format='lra_release'.")
    return _npz(path)
  if settings.format == 'lra_release':
    return PngSource(_release_entries(os.path.join(root, settings.difficulty))[split])
  if settings.format == 'generated':   # made once, then read as the release layout
    g = settings.generator
    folder = _generated_folder(base.expand_path(settings.data_dir), int(g['seed']),
                               int(g['num_examples']), int(g['images_per_file']),
                               int(settings.resolution), settings.difficulty)
    return PngSource(_release_entries(folder)[split])
  raise ValueError(f"config.data.format={settings.format!r}; choose 'npz', 'lra_release' or "
                   "'generated'.")


def preprocess(record, settings: PathfinderSettings, rng: np.random.Generator | None = None):
  del rng
  image = np.asarray(record['image'])
  gray = lra.to_gray(image) if image.ndim == 3 else image
  return {'inputs': lra.pixel_tokens(gray, settings, 'pathfinder image'),
          'targets': np.int32(record['label'])}


@dataclasses.dataclass(frozen=True)
class PathfinderSettings(base.DataSettings):
  name: str = 'lra_pathfinder'
  max_length: int = 1024
  format: str = 'npz'             # 'npz' | 'lra_release' (PNGs) | 'generated' (our generator)
  resolution: int = 32            # 'generated': 32 (Pathfinder) or 128 (Path-X, max_length 16384)
  difficulty: str = 'curv_baseline'   # curv_baseline | curv_contour_length_9 | ..._14
  pathfinder_dir: str = base.under_data_dir('lra_release', 'pathfinder32')
  generator: dict = base.mapping(seed=0, num_examples=200000, images_per_file=1000)


base.register_dataset('lra_pathfinder', lra.spec(
    'lra_pathfinder', source, preprocess, PathfinderSettings, base.image_record,
    generated=lambda settings: settings.format == 'generated'))
