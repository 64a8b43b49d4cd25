"""PoNet pre-training through the one training loop: the data (pairs, segments, BERT masking) and
a tiny run on the synthetic corpus that learns MLM and SSO from chance."""
import collections

import numpy as np
import pytest
from text_corpus import SPECIALS, WORDS, pretraining_config as _config

from poolformers_jax import config as config_lib, data
from poolformers_jax.data import text_pretraining, wordpiece

CLS, SEP, MASK = 2, 3, 4
FIRST, SECOND = len(SPECIALS) + WORDS.index('first'), len(SPECIALS) + WORDS.index('second')


def _topic(token):
  return (token - len(SPECIALS)) // 8 if len(SPECIALS) <= token < len(SPECIALS) + 48 else None


def test_pairs_segments_and_labels(text_dir):
  config = _config(text_dir, **{'data.mask_probability': 0.0})
  records = data.DATASETS['text_pretraining'].source(data.settings(config.data), 'train')
  labels = collections.Counter()
  for i in range(300):
    ex = text_pretraining.preprocess(records[i % len(records)], data.settings(config.data),
                                          np.random.default_rng(i))
    ids, segments = ex['inputs']
    label = int(ex['targets']['sso'])
    labels[label] += 1
    real = ids[ids != 0]
    seps = np.flatnonzero(ids == SEP)
    a, b = ids[1:seps[0]], ids[seps[0] + 1:seps[1]]
    assert ids[0] == CLS and len(seps) == 2 and seps[1] == len(real) - 1
    assert (ex['targets']['mlm'] == -1).all()                      # nothing chosen at p = 0
    # [CLS] 0, then every sentence and every [SEP] its own id, increasing; padding 0.
    boundaries = np.flatnonzero(np.diff(segments[:len(real)]) != 0) + 1
    starts = set(boundaries)
    assert segments[0] == 0 and (np.diff(segments[:len(real)]) >= 0).all()
    assert {1, seps[0], seps[0] + 1, seps[1]} <= starts
    assert (segments[len(real):] == 0).all()
    topics_a, topics_b = {_topic(t) for t in a} - {None}, {_topic(t) for t in b} - {None}
    if label == 0:      # A = "first ...", B = "second ..." of the same document
      assert a[0] == FIRST and b[0] == SECOND and topics_a == topics_b
    elif label == 1:    # swapped
      assert a[0] == SECOND and b[0] == FIRST and topics_a == topics_b
    else:   # B: another document's chunk (both its sentences), cut at its front or back to fit
      b_segments = segments[seps[0] + 1:seps[1]]
      assert SECOND in b and len(b) == 16 - 3 - len(a) and len(set(b_segments)) == 2
  assert all(70 <= labels[k] <= 130 for k in (0, 1, 2)), labels      # a third each


def test_bert_masking_rates_and_eval_determinism(text_dir):
  config = _config(text_dir)
  records = data.DATASETS['text_pretraining'].source(data.settings(config.data), 'validation')
  vocab = wordpiece.vocab_of(data.settings(config.data))
  no_mask = config_lib.override(config, **{'data.mask_probability': 0.0}).data
  chosen = replaced = randomized = kept = candidates = 0
  for i in range(400):
    clean = text_pretraining.preprocess(records[i % len(records)], no_mask,
                                             np.random.default_rng(i))
    ex = text_pretraining.preprocess(records[i % len(records)], data.settings(config.data),
                                          np.random.default_rng(i))
    original = clean['inputs'][0]
    target = ex['targets']['mlm']
    is_candidate = (original != 0) & (original != CLS) & (original != SEP)
    picked = target >= 0
    assert not (picked & ~is_candidate).any()
    np.testing.assert_array_equal(target[picked], original[picked])
    masked = ex['inputs'][0]
    np.testing.assert_array_equal(masked[~picked], original[~picked])
    candidates += is_candidate.sum()
    chosen += picked.sum()
    replaced += (masked[picked] == MASK).sum()
    kept += (masked[picked] == original[picked]).sum()
    randomized += ((masked[picked] != MASK) & (masked[picked] != original[picked])).sum()
    assert (masked != 0).sum() == (original != 0).sum()      # never a random [PAD]
  assert 0.13 < chosen / candidates < 0.17
  assert 0.75 < replaced / chosen < 0.85 and 0.06 < randomized / chosen < 0.13
  assert 0.06 < kept / chosen < 0.14
  assert vocab.size == len(SPECIALS) + len(WORDS)
  # Evaluation examples (rng None) are the same every time.
  first = text_pretraining.preprocess(records[3], data.settings(config.data), None)
  again = text_pretraining.preprocess(records[3], data.settings(config.data), None)
  np.testing.assert_array_equal(first['inputs'], again['inputs'])
  np.testing.assert_array_equal(first['targets']['mlm'], again['targets']['mlm'])


def test_nsp_and_mlm_only_objectives(text_dir):
  nsp = _config(text_dir, 'nsp')
  records = data.DATASETS['text_pretraining'].source(data.settings(nsp.data), 'train')
  labels = [int(text_pretraining.preprocess(records[i], data.settings(nsp.data),
                                            np.random.default_rng(i))
                ['targets']['sso']) for i in range(100)]
  assert set(labels) == {0, 1} and 30 <= sum(labels) <= 70
  info = data.get_dataset_info(data.settings(_config(text_dir, 'mlm').data))
  assert info.num_classes == 0 and info.model_defaults['sentence_classes'] == 0
  assert info.model_defaults['cls_id'] == CLS and info.input_shape == (2, 16)
  with pytest.raises(ValueError, match='objective'):
    data.get_dataset_info(data.settings(config_lib.override(nsp, **{'data.objective': 'sop'}).data))


def test_pretraining_learns_mlm_and_sso(pretrained):
  before, after = pretrained['before'], pretrained['result'].validation
  vocab_chance = 1 / pretrained['vocab_size']
  assert pretrained['result'].status == 'finished' and pretrained['result'].step == 240
  assert before['count'] == after['count'] == 96
  assert before['mlm_accuracy'] < 5 * vocab_chance and 0.2 < before['sso_accuracy'] < 0.47
  assert after['mlm_accuracy'] > 0.3, after          # chance 1/57
  assert after['sso_accuracy'] > 0.7, after          # chance 1/3
  assert after['loss'] < before['loss'] - 1.0


def test_wikipedia_through_tfds_data_source(text_dir, tmp_path):
  import tensorflow_datasets as tfds
  from text_corpus import document
  articles = [{'title': f'a{i}'.encode(),
               'text': document(i % 6).replace('\n', '. ').encode() + b'. the cat.'}
              for i in range(5)]

  def as_data_source(builder, split, **kwargs):
    del builder, kwargs
    assert split in ('train[20000:]', 'train[:10000]')
    return articles

  config = _config(text_dir, **{'data.source': 'tfds', 'data.sentence_split': 'regex',
                                'data.data_dir': str(tmp_path), 'data.max_length': 32,
                                'data.mask_probability': 0.0})
  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    records = data.DATASETS['text_pretraining'].source(data.settings(config.data), 'train')
    assert len(records) == 5 * config.data.dupe_factor == 25   # 5 passes per epoch
    # Article 0: "first ... ." / "second ... ." / "the cat ." are three sentences.
    assert [len(s) for s in records.documents.sentences(0)] == [6, 6, 3]
    ex = text_pretraining.preprocess(records[0], data.settings(config.data),
                                     np.random.default_rng(0))
  ids, segments = ex['inputs']
  assert ids[0] == CLS and (ids == SEP).sum() == 2 and segments.max() >= 4


def test_every_chunk_of_every_document_dupe_factor_times(text_dir, tmp_path):
  """The official sampling: a document of 10 five-token sentences at 20 tokens per chunk gives
  3 examples (sentences 0-3, 4-7, 8-9), a two-sentence one 1; each is in an epoch 5 times
  (dupe_factor), with exactly its chunk's tokens; evaluation splits pass once."""
  from text_corpus import document
  long_doc = '\n'.join(f'first tp{k % 6}w0 tp{k % 6}w1 tp{k % 6}w2 tp{k % 6}w3' for k in range(10))
  (tmp_path / 'corpus').mkdir()
  (tmp_path / 'corpus' / 'a.txt').write_text(long_doc + '\n\n' + document(1) + '\n')
  config = _config(text_dir, 'mlm', **{'data.files.train': str(tmp_path / 'corpus' / '*.txt'),
                                       'data.files.validation': str(tmp_path / 'corpus' / '*.txt'),
                                       'data.max_length': 23, 'model.max_length': 23,
                                       'data.mask_probability': 0.0})
  records = data.DATASETS['text_pretraining'].source(data.settings(config.data), 'train')
  documents = records.documents
  assert config.data.dupe_factor == 5 and len(records) == 4 * 5
  seen = collections.Counter()
  for i in range(len(records)):
    _, doc, span, _ = records[i]
    seen[(doc, span)] += 1
    ids = text_pretraining.preprocess(records[i], data.settings(config.data),
                                           np.random.default_rng(i))['inputs'][0]
    np.testing.assert_array_equal(ids[(ids != 0) & (ids != CLS) & (ids != SEP)],
                                  np.concatenate(documents.sentences(doc)[span[0]:span[1]]))
  assert seen == {(0, (0, 4)): 5, (0, (4, 8)): 5, (0, (8, 10)): 5, (1, (0, 2)): 5}
  assert len(data.DATASETS['text_pretraining'].source(data.settings(config.data),
                                                      'validation')) == 4
  with pytest.raises(ValueError, match='dupe_factor=0 must be >= 1'):
    data.DATASETS['text_pretraining'].source(
        data.settings(config_lib.override(config, **{'data.dupe_factor': 0}).data), 'train')
