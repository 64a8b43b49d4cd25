"""Pathfinder generator: seeded, core-count independent, balanced, the label in the pixels, the
images those of the generator before it moved to data/generators/; the report benchmark runs.

The connectivity check reads the pixels: ink = pixels >= 32 (below: background and the
resampling filter's ringing); two ink pixels touch when their Chebyshev distance is at most twice
the paddle margin (the gap the official design leaves between consecutive paddles: 2 px at 32 x
32). The markers are the disc centres the generator reports (images compared byte for byte with
the files), each a bright disc in the pixels.
"""
import collections
import hashlib
import math
import os
import random
import re
import sys

import ml_collections
import numpy as np
import pytest
from PIL import Image

from poolformers_jax import data
from poolformers_jax.data.generators import pathfinder

INK = 32   # written out here, not imported: the test's own definition of "connected"
# sha256 of the metadata and decoded pixels of generate(seed=3, 40 images, 20 per file), computed
# with the generator before it moved to data/generators/ (commit 8285ec7).
SEED3_SHA256 = 'ef678d4abcb34337deb6f4d5ff0664fa26011023997e02f2a95552c22f665ce9'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _files(root):
  out = {}
  for folder, _, names in os.walk(root):
    for name in names:
      with open(os.path.join(folder, name), 'rb') as f:
        out[os.path.relpath(os.path.join(folder, name), root)] = f.read()
  return out


def _component(image, start, touch):
  """Ink pixels reachable from `start` through ink pixels at Chebyshev distance <= touch."""
  ink = image >= INK
  h, w = ink.shape
  seen, queue = {start}, collections.deque([start])
  while queue:
    y, x = queue.popleft()
    for dy in range(-touch, touch + 1):
      for dx in range(-touch, touch + 1):
        p = (y + dy, x + dx)
        if 0 <= p[0] < h and 0 <= p[1] < w and ink[p] and p not in seen:
          seen.add(p)
          queue.append(p)
  return seen


def _connected(image, markers, margin):
  """Does a flood fill from the origin disc reach the terminal disc?"""
  starts = []
  for y, x in markers:   # a disc: the 2-4 pixels centred within 1 px of its centre are bright
    disc = [(i, j) for i in range(int(y) - 1, int(y) + 2) for j in range(int(x) - 1, int(x) + 2)
            if math.hypot(i + 0.5 - y, j + 0.5 - x) <= 1]
    assert all(1 <= c <= image.shape[0] - 2 for p in disc for c in p)  # whatever the label
    assert min(image[p] for p in disc) >= 160 and max(image[p] for p in disc) >= 224
    starts.append((int(y), int(x)))
  return starts[1] in _component(image, starts[0], 2 * margin)


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
  kwargs = dict(resolution=32, difficulty='curv_baseline', num_examples=40, images_per_file=20)
  a = pathfinder.generate(str(tmp_path / 'a'), seed=3, workers=1, **kwargs)
  b = pathfinder.generate(str(tmp_path / 'b'), seed=3, workers=2, **kwargs)
  c = pathfinder.generate(str(tmp_path / 'c'), seed=4, workers=1, **kwargs)
  assert a.endswith(os.path.join('pathfinder32', 'curv_baseline'))
  files_a, files_b = _files(a), _files(b)
  assert len(files_a) == 40 + 2 and files_a == files_b           # byte-identical, 1 vs 2 cores
  assert _files(c) != files_a
  examples = _read_release(a)
  assert len(examples) == 40
  digest = hashlib.sha256()
  for batch in (0, 1):
    digest.update(open(os.path.join(a, 'metadata', f'{batch}.npy')).read().encode())
    digest.update(b''.join(image.tobytes() for image, _ in examples[20 * batch:20 * batch + 20]))
  assert digest.hexdigest() == SEED3_SHA256
  for start in range(0, 40, 20):                                  # balanced in every file
    assert sum(label for _, label in examples[start:start + 20]) == 10
  # The release's metadata columns: continuity, length, distractor length, paddle length,
  # thickness, margin, contrasts (an LRA line: `imgs/0 sample_0.png 0 0 1.0 6 2 2 0.5 1 1`).
  metadata = open(os.path.join(a, 'metadata', '1.npy')).read().splitlines()
  assert all(re.fullmatch(rf'imgs/1 sample_{k}.png {k} [01] 1.0 6 2 2 0.5 1 1', line)
             for k, line in enumerate(metadata))
  style = pathfinder.Style.lra(32, 'curv_baseline')
  samples = [s for batch in range(2) for s in pathfinder.batch_samples(3, style, batch, 20)]
  for (image, label), sample in zip(examples, samples):
    assert image.shape == (32, 32) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, sample.image)
    assert sample.label == label and image.max() == 255
    assert _connected(image, sample.markers, sample.margin) == bool(label)
  # The reader serves the generated folder like the release (80/10/10 split, value + 1 tokens).
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 4,
                                      'data': data.get_data_config('lra_pathfinder')})
  config.data.update(format='lra_release', pathfinder_dir=str(tmp_path / 'a' / 'pathfinder32'))
  sizes = data.get_dataset_info(data.settings(config.data)).split_sizes
  assert sizes == {'train': 32, 'validation': 4, 'test': 4}
  batch = next(iter(data.make_eval_iterator(data.settings(config.data), 'test', batch_size=4)))
  for row, target, (image, label) in zip(batch['inputs'], batch['targets'], examples[36:]):
    np.testing.assert_array_equal(row, image.reshape(-1).astype(np.int32) + 1)
    assert target == label


@pytest.mark.parametrize('resolution, length, count', [(32, 9, 4), (32, 14, 2), (128, 14, 2)])
def test_longer_contours_and_path_x_are_connected_exactly_when_positive(resolution, length, count):
  style = pathfinder.Style.lra(resolution, f'curv_contour_length_{length}')
  assert style.contour_length == length
  rng = random.Random(f'test/{resolution}/{length}')
  for i in range(count):
    sample = pathfinder.render(rng, style, i % 2)
    assert sample.image.shape == (resolution, resolution) and sample.margin in style.margins
    assert _connected(sample.image, sample.markers, sample.margin) == bool(i % 2)


def test_ink_components_link_pixels_within_the_chebyshev_distance():
  """The generator's own check (boxes + 8-connected labels) against the flood fill above."""
  rng = np.random.default_rng(0)
  for link in (2, 4, 6):
    image = (rng.random((40, 40)) < 0.03) * 255
    ids = pathfinder.ink_components(image, link)
    for y, x in zip(*np.nonzero(image)):
      component = _component(image, (y, x), link)
      assert {tuple(p) for p in zip(*np.nonzero(ids == ids[y, x]))} == component


def test_generated_format_makes_the_data_once(tmp_path):
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 4,
                                      'data': data.get_data_config('lra_pathfinder')})
  config.data.update(format='generated', data_dir=str(tmp_path))
  config.data.generator.update(seed=1, num_examples=20, images_per_file=20)
  sizes = data.get_dataset_info(data.settings(config.data)).split_sizes
  assert sizes == {'train': 16, 'validation': 2, 'test': 2}
  folder = (tmp_path / 'pathfinder_gen' / f'v{pathfinder.VERSION}_seed1_n20_f20' / 'pathfinder32'
            / 'curv_baseline')
  metadata = (folder / 'metadata' / '0.npy').read_text().splitlines()
  assert len(metadata) == 20 and metadata[0].startswith('imgs/0 sample_0.png 0 ')
  with pytest.raises(ValueError, match='difficulty'):
    pathfinder.generate(str(tmp_path), difficulty='curv_contour_length_7')
  with pytest.raises(ValueError, match='resolution=64'):
    pathfinder.generate(str(tmp_path), resolution=64)


def test_the_report_benchmark_measures_the_images_and_draws_the_docs_grid(tmp_path):
  """benchmarks/pathfinder_report.py: statistics of the images `generate` makes, and the sample
  grid of docs/data.md, pixel for pixel."""
  sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
  try:
    import pathfinder_report  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  text = pathfinder_report.report(20, seed=12345, workers=1, images_per_file=20)
  assert text.startswith('Pathfinder-32 curv_baseline, 20 images (seed 12345), generator v2')
  assert 'label balance: 0.500 positive' in text and 'distance-only classifier' in text
  lines = text.splitlines()
  rows = lines[lines.index('  histogram of the marker distance (px): label 1 | label 0') + 1:]
  counts = np.asarray([row.split(':')[1].split('|') for row in rows], int)
  assert counts.shape == (12, 2) and counts.sum(0).tolist() == [10, 10]
  pathfinder_report.sample_grid(str(tmp_path / 'grid.png'))
  with Image.open(tmp_path / 'grid.png') as drawn, \
       Image.open(os.path.join(ROOT, 'docs', 'pathfinder_samples.png')) as shown:
    np.testing.assert_array_equal(np.asarray(drawn), np.asarray(shown))
