"""enwik8 / text8 from (tiny, test-written) official zip files: splits, windows, shifted targets."""
import zipfile

import ml_collections
import numpy as np
import pytest

from poolformers_jax import data


def _config(name, data_dir, max_length, split_sizes):
  config = ml_collections.ConfigDict()
  config.seed, config.batch_size = 0, 4
  config.data = data.get_data_config(name)
  config.data.update(data_dir=str(data_dir), max_length=max_length, split_sizes=split_sizes)
  return config


def _write_zip(path, member, payload):
  with zipfile.ZipFile(path, 'w') as archive:
    archive.writestr(member, payload)


def test_text8_splits_windows_and_vocabulary(tmp_path):
  rng = np.random.default_rng(0)
  text = ''.join(rng.choice(list('abcdefghijklmnopqrstuvwxyz '), 400))
  _write_zip(tmp_path / 'text8.zip', 'text8', text)
  config = _config('text8', tmp_path, 8, (300, 50, 50))
  info = data.get_dataset_info(data.settings(config.data))
  assert info.task == 'lm' and info.vocab_size == 28 and info.num_classes == 28
  assert info.split_sizes == {'train': 37, 'validation': 6, 'test': 6}  # (n - 1) // 8 windows
  batches = list(data.make_eval_iterator(data.settings(config.data), 'validation', batch_size=4))
  inputs = np.concatenate([b['inputs'][b['mask']] for b in batches])
  targets = np.concatenate([b['targets'][b['mask']] for b in batches])
  ids = {' ': 1, **{c: i + 2 for i, c in enumerate('abcdefghijklmnopqrstuvwxyz')}}
  expected = np.asarray([ids[c] for c in text[300:350]])
  # Windows tile the split in order; targets are the inputs shifted by one.
  np.testing.assert_array_equal(inputs.reshape(-1), expected[:48])
  np.testing.assert_array_equal(targets.reshape(-1), expected[1:49])
  assert inputs.shape == (6, 8) and inputs.dtype == np.int32


def test_enwik8_bytes_and_train_iterator(tmp_path):
  payload = bytes(np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8))
  _write_zip(tmp_path / 'enwik8.zip', 'enwik8', payload)
  config = _config('enwik8', tmp_path, 16, (200, 50, 50))
  assert data.get_dataset_info(data.settings(config.data)).vocab_size == 257
  batch = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                        seed=0))
  assert batch['inputs'].shape == batch['targets'].shape == (4, 16)
  train = np.frombuffer(payload[:200], np.uint8).astype(np.int32) + 1
  for x, y in zip(batch['inputs'], batch['targets']):
    start = [s for s in range(0, 200 - 16, 16) if np.array_equal(train[s:s + 16], x)]
    assert len(start) == 1  # an aligned window of the train split ...
    np.testing.assert_array_equal(y, train[start[0] + 1:start[0] + 17])  # ... and its next symbols


def test_lm_errors(tmp_path):
  config = _config('text8', tmp_path, 8, (300, 50, 50))
  with pytest.raises(data.DataNotFoundError, match='text8.zip not found'):
    data.get_dataset_info(data.settings(config.data))
  _write_zip(tmp_path / 'text8.zip', 'text8', 'hello World ' * 40)
  with pytest.raises(ValueError, match="'W' is outside"):
    next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size, seed=0))
  config.data.split_sizes = (1000, 50, 50)
  with pytest.raises(ValueError, match='need 1100 symbols'):
    data.get_dataset_info(data.settings(config.data))


def test_generated_ids_read_back_as_the_text_they_encode():
  """`DatasetSpec.text` inverts record + preprocess: text8's 27 symbols; enwik8's UTF-8 bytes, a
  two-byte character included, and a character cut after its first byte read as U+FFFD."""
  from poolformers_jax.data import base
  encoded = {}
  for name, text in (('text8', 'the cat sat'), ('enwik8', 'Zo\u00eb <b>\n')):
    spec, config = base.get_spec(name), data.get_data_config(name)
    ids = spec.preprocess(spec.record(text, config), config, None)['inputs']
    assert len(ids) == len(text.encode()) and spec.text(ids, config) == text
    encoded[name] = (spec, config, ids)
  spec, config, _ = encoded['text8']
  assert spec.text(np.arange(1, 28), config) == ' abcdefghijklmnopqrstuvwxyz'
  spec, config, ids = encoded['enwik8']
  assert spec.text(ids[:3], config) == 'Zo\ufffd'
