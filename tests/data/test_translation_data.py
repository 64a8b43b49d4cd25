"""WMT14 data layer on tfds.testing.mock_data: SentencePiece beside the data, EOS-terminated
ids, packed training rows that keep every pair intact, one clear line for missing data."""
import os

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
import tensorflow_datasets.translate.wmt14  # noqa: F401  registers the builder for mock_data

from poolformers_jax import config as config_lib, data
from poolformers_jax.data import translation


def _config(data_dir, **updates):
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 4, 'eval_batch_size': 4})
  config.data = data.get_data_config('wmt14')
  config.data.update(dict(data_dir=str(data_dir), vocab_size=60, spm_hard_vocab_limit=False,
                          max_length=48, read_threads=1, **updates))
  return config


def test_wmt14_pipeline_on_mock_data(tmp_path):
  config = _config(tmp_path)
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    raw = tfds.data_source('wmt14_translate/de-en', split='train', data_dir=str(tmp_path))
    pairs = {raw[i]['en']: raw[i]['de'] for i in range(len(raw))}
    settings = data.settings(config.data)
    info = data.get_dataset_info(settings)
    tokenizer = translation.get_tokenizer(settings)
    eval_batch = next(iter(data.make_eval_iterator(settings, 'test', batch_size=4)))
    test = tfds.data_source('wmt14_translate/de-en', split='test', data_dir=str(tmp_path))
    rows = [next(data.make_train_iterator(settings, batch_size=config.batch_size, seed=0))]
  as_text = lambda t: t.decode() if isinstance(t, bytes) else t
  ids = lambda text: tuple(tokenizer.encode(as_text(text)) + [translation.EOS_ID])
  by_ids = {ids(k): ids(v) for k, v in pairs.items()}
  # The shared vocabulary was trained once and stored beside the data.
  assert os.path.exists(tmp_path / 'wmt14_translate' / 'de-en' / 'spm_60_deen.model')
  assert info.task == 'seq2seq' and info.vocab_size == tokenizer.get_piece_size()
  assert info.split_sizes == {'train': 12, 'validation': 12, 'test': 12}
  # The model's end of sentence is the vocabulary's, handed over by the info as BERT's ids.
  model_config = ml_collections.ConfigDict({'vocab_size': None, 'eos_id': None})
  completed = config_lib.complete(
      ml_collections.ConfigDict({'model': model_config, 'data': config.data}), info=info)
  assert translation.EOS_ID == tokenizer.eos_id() == completed.model.eos_id == 1
  # Eval rows: source / target ids with EOS, zero padded; every row real (12 % 4 == 0).
  for row in range(4):
    src, tgt = as_text(test[row]['en']), as_text(test[row]['de'])
    for key, text in (('inputs', src), ('targets', tgt)):
      ids = tokenizer.encode(text) + [translation.EOS_ID]
      np.testing.assert_array_equal(eval_batch[key][row, :len(ids)], ids)
      assert not eval_batch[key][row, len(ids):].any()
  assert eval_batch['mask'].all()
  # Packed train rows: every segment is a whole training pair, positions restart per segment.
  batch = rows[0]
  assert batch['inputs'].shape == (4, 48) and batch['targets_segment_ids'].shape == (4, 48)
  segments = 0
  for r in range(4):
    for key in ('inputs', 'targets'):
      seg = batch[f'{key}_segment_ids'][r]
      assert not batch[key][r][seg == 0].any()
    for s in set(batch['inputs_segment_ids'][r]) - {0}:
      src_ids = batch['inputs'][r][batch['inputs_segment_ids'][r] == s]
      tgt_ids = batch['targets'][r][batch['targets_segment_ids'][r] == s]
      assert src_ids[-1] == translation.EOS_ID and tgt_ids[-1] == translation.EOS_ID
      in_segment = batch['inputs_segment_ids'][r] == s
      np.testing.assert_array_equal(batch['inputs_positions'][r][in_segment],
                                    np.arange(len(src_ids)))
      assert by_ids[tuple(src_ids)] == tuple(tgt_ids)   # the segment's own pair
      segments += 1
  assert segments > 4   # rows really hold several pairs


def test_missing_wmt14_says_how_to_prepare_it(tmp_path):
  config = _config(tmp_path / 'nothing')
  with pytest.raises(data.DataNotFoundError, match='build_tfds.py wmt14_translate/de-en'):
    data.get_dataset_info(data.settings(config.data))
