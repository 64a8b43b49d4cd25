"""Pathfinder generator: seeded, core-count independent, balanced, and the label is in the pixels.

The connectivity check reads only the PNG: ink = pixels > 0; two ink pixels touch when their
Chebyshev distance is <= 2 (a dash gap of up to two pixels); the discs are the only places
with a fully inked 3x3 block.
"""
import collections
import os
import random

import ml_collections
import numpy as np
import pytest
from PIL import Image

from poolformers_jax import data
from poolformers_jax.data import pathfinder_gen

TOUCH = 2   # written out here, not imported: the test's own definition of "connected"


def _files(root):
  out = {}
  for folder, _, names in os.walk(root):
    for name in names:
      with open(os.path.join(folder, name), 'rb') as f:
        out[os.path.relpath(os.path.join(folder, name), root)] = f.read()
  return out


def _discs(image):
  """Centres of the fully inked 3x3 blocks, grouped into blobs (lists of pixels)."""
  ink = image > 0
  h, w = ink.shape
  core = {(y, x) for y in range(1, h - 1) for x in range(1, w - 1) if ink[y - 1:y + 2, x - 1:x + 2].all()}
  blobs = []
  while core:
    stack, blob = [core.pop()], []
    while stack:
      y, x = stack.pop()
      blob.append((y, x))
      for p in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
        if p in core:
          core.remove(p)
          stack.append(p)
    blobs.append(blob)
  return blobs


def _component(image, start):
  """Ink pixels reachable from `start` through ink pixels at Chebyshev distance <= TOUCH."""
  ink = image > 0
  h, w = ink.shape
  seen, queue = {start}, collections.deque([start])
  while queue:
    y, x = queue.popleft()
    for dy in range(-TOUCH, TOUCH + 1):
      for dx in range(-TOUCH, TOUCH + 1):
        p = (y + dy, x + dx)
        if 0 <= p[0] < h and 0 <= p[1] < w and ink[p] and p not in seen:
          seen.add(p)
          queue.append(p)
  return seen


def _connected(image):
  discs = _discs(image)
  assert len(discs) == 2, f'expected 2 marker discs, found {len(discs)}'
  for blob in discs:   # a disc (3x3 core + rim) never touches the border, whatever the label
    assert all(2 <= c <= image.shape[0] - 3 for pixel in blob for c in pixel)
  return discs[1][0] in _component(image, discs[0][0])


def _read_release(folder):
  """(image, label) per metadata line, read as the LRA release is read (text lines)."""
  out = []
  for meta in sorted(os.listdir(os.path.join(folder, 'metadata'))):
    with open(os.path.join(folder, 'metadata', meta)) as f:
      for line in f:
        subdir, name, _, label = line.split()[:4]
        with Image.open(os.path.join(folder, subdir, name)) as image:
          out.append((np.asarray(image), int(label)))
  return out


def test_generator_seeded_core_count_independent_balanced_and_connected(tmp_path):
  kwargs = dict(resolution=32, difficulty='curv_baseline', num_examples=60, images_per_file=20)
  a = pathfinder_gen.generate(str(tmp_path / 'a'), seed=3, workers=1, **kwargs)
  b = pathfinder_gen.generate(str(tmp_path / 'b'), seed=3, workers=2, **kwargs)
  c = pathfinder_gen.generate(str(tmp_path / 'c'), seed=4, workers=1, **kwargs)
  assert a.endswith(os.path.join('pathfinder32', 'curv_baseline'))
  files_a, files_b = _files(a), _files(b)
  assert len(files_a) == 60 + 3 and files_a == files_b           # byte-identical, 1 vs 2 cores
  assert _files(c) != files_a
  examples = _read_release(a)
  assert len(examples) == 60
  for start in range(0, 60, 20):                                  # balanced in every file
    assert sum(label for _, label in examples[start:start + 20]) == 10
  for image, label in examples:
    assert image.shape == (32, 32) and image.dtype == np.uint8
    assert _connected(image) == bool(label)
  # The reader serves the generated folder like the release (80/10/10 split, value + 1 tokens).
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 4,
                                      'data': data.get_data_config('lra_pathfinder')})
  config.data.update(format='lra_release', pathfinder_dir=str(tmp_path / 'a' / 'pathfinder32'))
  assert data.get_dataset_info(config).split_sizes == {'train': 48, 'validation': 6, 'test': 6}
  batch = next(iter(data.make_eval_iterator(config, 'test', batch_size=6)))
  for row, target, (image, label) in zip(batch['inputs'], batch['targets'], examples[54:]):
    np.testing.assert_array_equal(row, image.reshape(-1).astype(np.int32) + 1)
    assert target == label


@pytest.mark.parametrize('resolution, length, count', [(32, 9, 6), (32, 14, 4), (128, 14, 2)])
def test_longer_contours_and_path_x_are_connected_exactly_when_positive(resolution, length, count):
  style = pathfinder_gen.Style(resolution=resolution, contour_length=length)
  rng = random.Random(f'test/{resolution}/{length}')
  for i in range(count):
    image = pathfinder_gen.render(rng, style, i % 2)
    assert image.shape == (resolution, resolution)
    assert _connected(image) == bool(i % 2)


def test_generated_format_makes_the_data_once(tmp_path):
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 4,
                                      'data': data.get_data_config('lra_pathfinder')})
  config.data.update(format='generated', data_dir=str(tmp_path))
  config.data.generator.update(seed=1, num_examples=20, images_per_file=20)
  assert data.get_dataset_info(config).split_sizes == {'train': 16, 'validation': 2, 'test': 2}
  folder = tmp_path / 'pathfinder_gen' / 'seed1_n20_f20' / 'pathfinder32' / 'curv_baseline'
  metadata = (folder / 'metadata' / '0.npy').read_text().splitlines()
  assert len(metadata) == 20 and metadata[0].startswith('imgs/0 sample_0.png 0 ')
  with pytest.raises(ValueError, match='difficulty'):
    pathfinder_gen.generate(str(tmp_path), difficulty='curv_contour_length_7')
