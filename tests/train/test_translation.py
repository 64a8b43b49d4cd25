"""Translation end to end, offline: a tiny parallel corpus made here (a fixed invertible word
mapping, target in reverse order) through the wmt14 data layer (SentencePiece trained on it,
packed rows), the one training loop, beam-search decoding and BLEU on held-out sentences."""
import os

import numpy as np
import pytest

from poolformers_jax.train import config_utils, train_and_evaluate
from poolformers_jax.train.cli import load_config_file
from poolformers_jax.train.translation_eval import bleu_scores, split_compounds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE_WORDS = ['zap', 'mib', 'tor', 'kel', 'vun', 'rax', 'dop', 'sil', 'gum', 'fep']
TARGET_WORDS = ['QAL', 'WEN', 'BRO', 'HUT', 'JIX', 'PLO', 'NAK', 'YEV', 'COD', 'DRU']


def translate_rule(words):
  """The corpus' ground truth: word -> its fixed image, sentence reversed."""
  mapping = dict(zip(SOURCE_WORDS, TARGET_WORDS))
  return [mapping[w] for w in reversed(words)]


def write_corpus(folder, seed=0, train=3000, held_out=64):
  rng = np.random.default_rng(seed)
  seen, pairs = set(), []
  while len(pairs) < train + 2 * held_out:
    words = tuple(rng.choice(SOURCE_WORDS, rng.integers(3, 7)))
    if words not in seen:
      seen.add(words)
      pairs.append((' '.join(words), ' '.join(translate_rule(list(words)))))
  splits = {'train': pairs[:train], 'validation': pairs[train:train + held_out],
            'test': pairs[train + held_out:]}
  for split, rows in splits.items():
    with open(os.path.join(folder, f'{split}.tsv'), 'w') as f:
      f.writelines(f'{s}\t{t}\n' for s, t in rows)
  return splits


def tiny_translation_config(folder, **updates):
  config = load_config_file(os.path.join(REPO, 'configs', 'wmt14.py') + ':tiny,cp')
  overrides = {
      'data.source': 'tsv', 'data.tsv_dir': str(folder), 'data.vocab_size': 72,
      'data.spm_hard_vocab_limit': False, 'data.max_length': 32, 'data.read_threads': 1,
      'model.num_layers': 1, 'model.emb_dim': 64, 'model.num_heads': 4, 'model.mlp_dim': 128,
      'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0,
      'optimizer.learning_rate': 3e-3, 'optimizer.warmup_steps': 50,
      'batch_size': 16, 'eval_batch_size': 64, 'num_train_steps': 250,
      'log_every_steps': 250, 'eval_every_steps': 250, 'checkpoint_every_steps': 0,
      'progress_bar': False, 'label_smoothing': 0.0,
      'decode.max_length': 12, 'decode.batch_size': 64, 'decode.max_sentences': 0,
  }
  overrides.update(updates)
  return config_utils.override(config, **overrides)


@pytest.mark.slow
def test_learns_held_out_translations_to_bleu_above_90(tmp_path):
  write_corpus(tmp_path)
  config = tiny_translation_config(tmp_path)
  result = train_and_evaluate(config, str(tmp_path / 'run'))
  test = result.test
  assert test['decoded_sentences'] == 64
  assert test['bleu'] > 90.0, test
  assert test['tokenized_bleu'] > 90.0, test
  assert 'nrefs:1|case:mixed|eff:no|tok:13a' in test['bleu_signature']


def test_bleu_scores_and_compound_splitting():
  assert split_compounds('Ein US-amerikanisch-deutsches Team') == (
      'Ein US ##AT##-##AT## amerikanisch ##AT##-##AT## deutsches Team')
  # One pass of t2t's perl substitution: one-letter parts overlap and stay joined, as there.
  assert split_compounds('a-b-c') == 'a ##AT##-##AT## b-c'
  refs = ['the cat sat on the mat today', 'a dog ran in the big park']
  perfect = bleu_scores(refs, refs, 'en')
  assert perfect['bleu'] == pytest.approx(100.0) and perfect['tokenized_bleu'] == pytest.approx(100.0)
  worse = bleu_scores(['the cat sat on a mat', 'a dog ran in the park'], refs, 'en')
  assert 0.0 < worse['bleu'] < 100.0
  # Compound splitting credits the matching halves of a hyphenated word.
  de = bleu_scores(['das US-Team gewann heute das Spiel'], ['das US-Team gewann gestern das Spiel'],
                   'de')
  assert de['tokenized_bleu'] > de['bleu']
