"""Fine-tuning from a pre-training run through the one loop (config.init_from): every encoder
and pooler weight restored, only the classifier new, the 16 learned positions tiled to 32 by the
official long-text rule; and the long-text JSONL pipeline (labels, sentence segments)."""
import json
import os

import flax
import jax
import long_text
import numpy as np
import pytest
from text_corpus import SPECIALS, WORDS, document

from poolformers_jax import config as config_lib, data
from poolformers_jax.data import text_classification
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import init_from, setup as setup_lib

CLS, SEP = 2, 3


def official_tiling(old, max_pos):
  """run_long_classification.py: copy the table over and over (k = 0, step, 2 step, ...)."""
  new = np.full((max_pos, old.shape[1]), np.nan)
  k, step = 0, old.shape[0]
  while k < max_pos - 1:
    new[k:k + step] = old
    k += step
  return new


def test_tiling_equals_the_official_rule():
  old = np.arange(12.0).reshape(4, 3)
  np.testing.assert_array_equal(init_from.tile_positions('position_embed/embedding', old, (12, 3)),
                                official_tiling(old, 12))
  np.testing.assert_array_equal(init_from.tile_positions('position_embed/embedding', old, (3, 3)),
                                old[:3])


def _write_jsonl(folder, n, seed):
  """HND-like files: {'text': ..., 'label': 'true' | 'false'} (true = even topic)."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f'split{seed}.jsonl')
  with open(path, 'w') as f:
    for i in range(n):
      topic = (seed + i) % 6
      text = document(topic).replace('\n', '. ') + '. the cat'
      f.write(json.dumps({'text': text, 'label': 'true' if topic % 2 == 0 else 'false'}) + '\n')
  return path


def _finetune_config(text_dir, pretrained_dir, files):
  return config_lib.override(long_text.get_config('hnd,tiny'), **{
      'data.vocab_file': text_dir['vocab'], 'data.files.train': files[0],
      'data.files.validation': files[1], 'data.files.test': files[1],
      'data.max_length': 32, 'model.max_length': 32, 'init_from': pretrained_dir,
      'num_train_steps': 1, 'optimizer.learning_rate': 0.0, 'optimizer.warmup_steps': 0,
      'eval_every_steps': 1, 'checkpoint_every_steps': 1, 'batch_size': 8, 'eval_batch_size': 8,
      'final_test': False, 'progress_bar': False, 'num_devices': 1})


def test_long_text_jsonl_records(text_dir):
  files = [_write_jsonl(os.path.join(text_dir['root'], 'hnd'), n, s) for n, s in ((24, 0), (10, 1))]
  config = _finetune_config(text_dir, '', files)
  record = {'text': 'first tp0w0 tp0w1. second tp0w4 tp0w5 tp0w6! the', 'label': 'true'}
  ex = text_classification.preprocess(record, data.settings(config.data))
  word = lambda w: len(SPECIALS) + WORDS.index(w)
  np.testing.assert_array_equal(ex['inputs'][0][:6], [CLS, word('first'), word('tp0w0'),
                                                      word('tp0w1'), 1, word('second')])  # '.' UNK
  # Sentences: [CLS] 0, "first tp0w0 tp0w1 ." 1, "second ... !" 2, "the" 3, [SEP] 4.
  np.testing.assert_array_equal(ex['inputs'][1][:12], [0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 4])
  assert ex['inputs'][0][11] == SEP and (ex['inputs'][:, 12:] == 0).all()
  assert int(ex['targets']) == 1            # sorted labels ['false', 'true'] (official label_list)


@pytest.mark.slow
def test_finetune_restores_encoder_only_head_new(pretrained, text_dir, tmp_path):
  files = [_write_jsonl(str(tmp_path / 'hnd'), n, s) for n, s in ((24, 0), (10, 1))]
  config = _finetune_config(text_dir, pretrained['workdir'], files)
  result = train_and_evaluate(config, str(tmp_path / 'finetune'))   # one step at lr 0
  flat = lambda tree: {'/'.join(k): np.asarray(v) for k, v in
                       flax.traverse_util.flatten_dict(flax.core.unfreeze(tree)).items()}
  tuned = flat(result.state.params)
  pre = flat(init_from.read_variables(pretrained['workdir'])['params'])
  assert sorted(set(tuned) - set(pre)) == ['classifier/bias', 'classifier/kernel']
  assert sorted({k.split('/')[0] for k in set(pre) - set(tuned)}) == [
      'mlm_bias', 'mlm_norm', 'mlm_transform', 'sso_head']
  for name, value in tuned.items():
    if name == 'position_embed/embedding':
      assert pre[name].shape == (16, 32) and value.shape == (32, 32)
      np.testing.assert_array_equal(value, official_tiling(pre[name], 32))
    elif name in pre:
      np.testing.assert_array_equal(value, pre[name], err_msg=name)
  # The head is the fresh initialisation of this run (seed), not anything pre-trained.
  setup = setup_lib.make_setup(config)
  init_rng, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  fresh = setup_lib.create_train_state(setup, init_rng)
  np.testing.assert_array_equal(tuned['classifier/kernel'],
                                np.asarray(fresh.params['classifier']['kernel']))
  assert set(result.validation) >= {'accuracy', 'f1', 'macro_f1', 'matthews_corrcoef'}


def test_long_text_csv_labels_sort_as_numbers(text_dir, tmp_path):
  path = tmp_path / 'train.csv'
  labels = [10, 2, 0, 1, 2, 10]
  with open(path, 'w') as f:
    f.write('label,text\n' + ''.join(f'{y},"the cat, tp0w{y % 8}. first"\n' for y in labels))
  config = config_lib.override(long_text.get_config('arxiv11,tiny'), **{
      'data.vocab_file': text_dir['vocab'], 'data.files.train': str(path),
      'data.files.validation': str(path), 'data.files.test': str(path)})
  info = data.get_dataset_info(data.settings(config.data))
  assert info.num_classes == 4 and info.split_sizes['train'] == 6
  settings = data.settings(config.data)
  records = text_classification.source(settings, 'train')
  targets = [int(text_classification.preprocess(r, settings)['targets']) for r in records]
  assert targets == [3, 2, 0, 1, 2, 3]        # label_list [0, 1, 2, 10], not '10' < '2'
