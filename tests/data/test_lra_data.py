"""LRA Text / Retrieval / Image / Pathfinder loaders on mock TFDS data and tiny generated files."""
import os
import types

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from poolformers_jax import data


def _config(name, batch_size=4, **data_fields):
  config = ml_collections.ConfigDict()
  config.seed, config.batch_size = 0, batch_size
  config.data = data.get_data_config(name)
  config.data.update(data_fields)
  return config


def _all_eval_rows(config, split, batch_size):
  rows, targets = [], []
  for batch in data.make_eval_iterator(data.settings(config.data), split, batch_size=batch_size):
    rows += list(batch['inputs'][batch['mask']])
    targets += list(batch['targets'][batch['mask']])
  return rows, targets


def _bytes_plus_one(text, length):
  raw = text.encode('utf-8') if isinstance(text, str) else bytes(text)
  ids = [b + 1 for b in raw][:length]
  return ids + [0] * (length - len(ids))


def test_lra_text_bytes_on_mock_imdb(tmp_path):
  config = _config('lra_text', data_dir=str(tmp_path), max_length=24)
  with tfds.testing.mock_data(num_examples=5):
    raw = tfds.data_source('imdb_reviews/plain_text', split='test', data_dir=str(tmp_path))
    expected = [(_bytes_plus_one(raw[i]['text'], 24), int(raw[i]['label'])) for i in range(5)]
    info = data.get_dataset_info(data.settings(config.data))
    rows, targets = _all_eval_rows(config, 'validation', 2)  # validation reads the test split
    train = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                          seed=0))
  assert info.task == 'classification' and info.num_classes == 2 and info.vocab_size == 257
  assert info.input_shape == (24,) and info.split_sizes['validation'] == 5
  assert [list(r) for r in rows] == [e[0] for e in expected]
  assert targets == [e[1] for e in expected]
  assert train['inputs'].shape == (4, 24) and train['inputs'].dtype == np.int32


def test_lra_image_grayscale_pixel_tokens_on_mock_cifar(tmp_path):
  config = _config('lra_image', data_dir=str(tmp_path))
  with tfds.testing.mock_data(num_examples=3):
    raw = tfds.data_source('cifar10', split='test', data_dir=str(tmp_path))
    images = [np.asarray(raw[i]['image'], np.float64) for i in range(3)]
    labels = [int(raw[i]['label']) for i in range(3)]
    rows, targets = _all_eval_rows(config, 'test', 2)
  for image, row in zip(images, rows):
    # tf.image.rgb_to_grayscale on uint8, step by step in float32: x * (1/255), dot with the
    # weights, * 255.5, truncate.
    f = image.astype(np.float32) * np.float32(1 / 255)
    w = np.float32([0.2989, 0.5870, 0.1140])
    gray = np.trunc((f[..., 0] * w[0] + f[..., 1] * w[1] + f[..., 2] * w[2]) * np.float32(255.5))
    np.testing.assert_array_equal(row, gray.reshape(-1) + 1)
  assert targets == labels and rows[0].shape == (1024,)
  from poolformers_jax.data import lra
  corners = np.asarray([[[0, 0, 0], [255, 255, 255]]], np.uint8)
  np.testing.assert_array_equal(lra.to_gray(corners), [[0, 255]])  # black -> token 1, not padding


def test_lra_image_gray_levels_truncate_as_tensorflow_does():
  """Hand-computed: gray = floor(luma * 255.5 / 255), luma = 0.2989 r + 0.5870 g + 0.1140 b."""
  from poolformers_jax.data import lra
  pixels = [([0, 255, 0], 149),       # luma 149.685 -> 149.978: 149 (rounding would give 150)
            ([50, 20, 10], 27),       # 14.945 + 11.74 + 1.14 = 27.825 -> 27.880: 27 (not 28)
            ([0, 1, 0], 0),           # 0.587 -> 0.588: 0 (not 1)
            ([100, 150, 200], 141),   # 140.74 -> 141.016: 141
            ([255, 0, 0], 76),        # 76.2195 -> 76.369: 76
            ([255, 255, 255], 255)]   # 254.9745 -> 255.474: 255
  image = np.asarray([[rgb for rgb, _ in pixels]], np.uint8)
  np.testing.assert_array_equal(lra.to_gray(image), [[gray for _, gray in pixels]])


def _write_aan(path, rows):
  with open(path, 'w') as f:
    for label, text1, text2 in rows:
      f.write(f'{label}\tid_a\tid_b\t{text1}\t{text2}\n')


def test_lra_retrieval_pairs_from_tsv(tmp_path):
  rows = [('1.0', 'graph neural nets', 'pooling "quotes"'), ('0.0', 'été', 'x' * 30),
          ('1.0', 'abc', 'def')]
  for split in ('train', 'eval', 'test'):
    _write_aan(tmp_path / f'new_aan_pairs.{split}.tsv', rows)
  config = _config('lra_retrieval', tsv_dir=str(tmp_path), max_length=20)
  info = data.get_dataset_info(data.settings(config.data))
  assert info.task == 'retrieval' and info.input_shape == (2, 20)
  assert info.split_sizes == {'train': 3, 'validation': 3, 'test': 3}
  got, targets = _all_eval_rows(config, 'validation', 2)
  assert targets == [1, 0, 1]
  for (_, text1, text2), pair in zip(rows, got):
    assert pair.shape == (2, 20)
    assert list(pair[0]) == _bytes_plus_one(text1, 20)
    assert list(pair[1]) == _bytes_plus_one(text2, 20)
  batch = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                        seed=0))
  assert batch['inputs'].shape == (4, 2, 20)


def test_lra_retrieval_missing_files(tmp_path):
  config = _config('lra_retrieval', tsv_dir=str(tmp_path))
  with pytest.raises(data.DataNotFoundError, match='new_aan_pairs.train.tsv not found') as e:
    data.get_dataset_info(data.settings(config.data))
  assert '\n' not in str(e.value)


def _random_images(seed, n, size):
  return np.random.default_rng(seed).integers(0, 256, (n, size, size), dtype=np.uint8)


def test_lra_pathfinder_npz(tmp_path):
  sizes = {'train': 6, 'validation': 3, 'test': 5}
  saved = {}
  for i, (split, n) in enumerate(sizes.items()):
    images, labels = _random_images(i, n, 8), np.arange(n) % 2
    np.savez(tmp_path / f'{split}.npz', images=images, labels=labels)
    saved[split] = (images, labels)
  config = _config('lra_pathfinder', pathfinder_dir=str(tmp_path), max_length=64)
  assert data.get_dataset_info(data.settings(config.data)).split_sizes == sizes
  rows, targets = _all_eval_rows(config, 'test', 2)
  images, labels = saved['test']
  np.testing.assert_array_equal(np.stack(rows), images.reshape(5, 64).astype(np.int32) + 1)
  assert targets == list(labels)


def test_lra_pathfinder_release_layout(tmp_path):
  """curv_baseline/metadata/*.npy text lines + imgs/<k>/sample_<i>.png, split 80/10/10."""
  folder = tmp_path / 'curv_baseline'
  images = _random_images(7, 20, 8)
  expected = []
  for meta_index in range(2):  # two metadata files of 10 images each
    os.makedirs(folder / 'imgs' / str(meta_index))
    os.makedirs(folder / 'metadata', exist_ok=True)
    lines = []
    for i in range(10):
      image = images[meta_index * 10 + i]
      label = (i * 7 + meta_index) % 2
      Image.fromarray(image).save(folder / 'imgs' / str(meta_index) / f'sample_{i}.png')
      lines.append(f'imgs/{meta_index} sample_{i}.png {i} {label} 0.5 1\n')
      expected.append((image, label))
    (folder / 'metadata' / f'{meta_index}.npy').write_text(''.join(lines))
  config = _config('lra_pathfinder', pathfinder_dir=str(tmp_path), format='lra_release',
                   difficulty='curv_baseline', max_length=64)
  sizes = data.get_dataset_info(data.settings(config.data)).split_sizes
  assert sizes == {'train': 16, 'validation': 2, 'test': 2}
  rows, targets = _all_eval_rows(config, 'test', 2)
  for (image, label), row, target in zip(expected[18:], rows, targets):
    np.testing.assert_array_equal(row, image.reshape(-1).astype(np.int32) + 1)
    assert target == label
  config.data.difficulty = 'curv_contour_length_14'
  with pytest.raises(data.DataNotFoundError, match='curv_contour_length_14/metadata'):
    data.get_dataset_info(data.settings(config.data))


def test_missing_tfds_dataset_is_one_clear_line(tmp_path):
  config = _config('lra_text', data_dir=str(tmp_path / 'empty'))
  with pytest.raises(data.DataNotFoundError, match='build_tfds.py imdb_reviews') as e:
    data.get_dataset_info(data.settings(config.data))
  assert '\n' not in str(e.value) and str(tmp_path / 'empty') in str(e.value)


def _tfds_range(spec, sizes):
  """(split, first, end) that TFDS's own slicing resolves `spec` to, for split sizes `sizes`."""
  infos = {name: types.SimpleNamespace(num_examples=n) for name, n in sizes.items()}
  (instruction,) = tfds.core.ReadInstruction.from_spec(spec).to_absolute(infos)
  end = sizes[instruction.splitname] if instruction.to is None else instruction.to
  return instruction.splitname, instruction.from_ or 0, end


def test_lra_image_and_text_splits_are_the_lra_codes(monkeypatch):
  """Image: train[:90%] / train[90%:] / test = 45k / 5k / 10k (lra_benchmarks/image/
  input_pipeline.py), so checkpoints are never chosen on test. Text: IMDB has no validation
  split and LRA validates on test (lra_benchmarks/text_classification/input_pipeline.py)."""
  from poolformers_jax.data import base
  monkeypatch.setattr(base, 'tfds_source', lambda name, split, data_dir: (name, split))
  cifar = {'train': 50_000, 'test': 10_000}
  image = _config('lra_image').data
  ranges = {s: _tfds_range(base.tfds_split_source(image, s)[1], cifar) for s in base.SPLITS}
  assert ranges == {'train': ('train', 0, 45_000), 'validation': ('train', 45_000, 50_000),
                    'test': ('test', 0, 10_000)}
  text = _config('lra_text').data
  assert {s: base.tfds_split_source(text, s) for s in base.SPLITS} == {
      'train': ('imdb_reviews/plain_text', 'train'),
      'validation': ('imdb_reviews/plain_text', 'test'),
      'test': ('imdb_reviews/plain_text', 'test')}


def test_lra_pathfinder_release_skips_empty_images(tmp_path):
  """The LRA release holds some empty PNGs; LRA's TFDS pipeline and Nystromformer skip them."""
  folder = tmp_path / 'curv_baseline'
  os.makedirs(folder / 'imgs' / '0')
  os.makedirs(folder / 'metadata')
  lines = []
  for i, image in enumerate(_random_images(3, 10, 8)):
    path = folder / 'imgs' / '0' / f'sample_{i}.png'
    if i == 4:
      path.write_bytes(b'')
    else:
      Image.fromarray(image).save(path)
    lines.append(f'imgs/0 sample_{i}.png {i} {i % 2} 0.5 1\n')
  (folder / 'metadata' / '0.npy').write_text(''.join(lines))
  config = _config('lra_pathfinder', pathfinder_dir=str(tmp_path), format='lra_release',
                   difficulty='curv_baseline', max_length=64)
  sizes = data.get_dataset_info(data.settings(config.data)).split_sizes
  assert sizes == {'train': 7, 'validation': 1, 'test': 1}       # 9 images, 80/10/10
  rows, _ = _all_eval_rows(config, 'train', 1)
  assert len(rows) == 7
