"""Translation end to end, offline: a tiny parallel corpus made here (a fixed invertible word
mapping, target in reverse order) through the wmt14 data layer (SentencePiece trained on it,
packed rows), the one training loop, beam-search decoding and BLEU on held-out sentences;
checkpoint averaging and the translate command on the same run."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from poolformers_jax import config as config_lib
from poolformers_jax.average import average_checkpoints
from poolformers_jax.eval import evaluate
from poolformers_jax.tasks.translation import (
  BUCKETS,
  bleu_scores,
  bucket_length,
  length_batches,
  split_compounds,
  tokenize_for_bleu,
)
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import checkpoint as checkpoint_lib
from poolformers_jax.trainer.setup import make_setup

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
  config = config_lib.load_file(os.path.join(REPO, 'configs', 'wmt14.py') + ':tiny,cp')
  overrides = {
      'data.source': 'tsv', 'data.tsv_dir': str(folder), 'data.vocab_size': 72,
      'data.spm_hard_vocab_limit': False, 'data.max_length': 32, 'data.read_threads': 1,
      'model.num_layers': 1, 'model.emb_dim': 64, 'model.num_heads': 4, 'model.mlp_dim': 128,
      'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0,
      'optimizer.learning_rate': 3e-3, 'optimizer.warmup_steps': 50,
      'batch_size': 16, 'eval_batch_size': 64, 'num_train_steps': 250,
      'log_every_steps': 250, 'eval_every_steps': 250, 'checkpoint_every_steps': 0,
      'progress_bar': False, 'label_smoothing': 0.0,
      'decode.batch_tokens': 1024, 'decode.max_sentences': 0,
  }
  overrides.update(updates)
  return config_lib.override(config, **overrides)


@pytest.mark.slow
def test_learns_held_out_translations_and_the_averaged_checkpoint_translates_as_eval(tmp_path):
  """One training run (the suite's slowest to make, so shared): held-out BLEU above 90; then the
  last two checkpoints averaged (parameters = their mean, integrity record written), the average
  evaluated, and the test sources translated with `python -m poolformers_jax.translate`: the
  same lines as eval's hypotheses file, the same BLEU."""
  splits = write_corpus(tmp_path)
  config = tiny_translation_config(tmp_path, checkpoint_every_steps=125)
  workdir = str(tmp_path / 'run')
  test = train_and_evaluate(config, workdir).test
  assert test['decoded_sentences'] == 64
  assert test['bleu'] > 90.0, test
  assert test['tokenized_bleu'] > 90.0, test
  assert 'nrefs:1|case:mixed|eff:no|tok:13a' in test['bleu_signature']

  assert average_checkpoints(workdir, last=2) == {'step': 250, 'averaged_steps': [125, 250]}

  setup = make_setup(config_lib.load_saved_config(workdir))
  checkpointer = checkpoint_lib.Checkpointer(workdir, read_only=True)
  try:
    states = dict(checkpointer.restore_latest_steps([125, 250], setup.abstract_state))
    averaged, step = checkpointer.restore_state('averaged', setup.abstract_state)  # verified
  finally:
    checkpointer.close()
  assert step == 250
  mean = jax.tree.map(lambda a, b: (np.asarray(a) + np.asarray(b)) / 2, states[125].params,
                      states[250].params)
  jax.tree.map(lambda m, p: np.testing.assert_allclose(np.asarray(p), m, rtol=1e-6, atol=1e-7),
               mean, averaged.params)
  differs = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                         states[125].params, states[250].params)
  assert max(jax.tree.leaves(differs)) > 1e-3        # the two checkpoints do differ

  metrics = evaluate(config_lib.load_saved_config(workdir), workdir, checkpoint='averaged',
                     split='test')
  assert metrics['decoded_sentences'] == 64 and metrics['checkpoint'] == 'averaged'
  with open(os.path.join(workdir, 'eval', 'test.hyp.txt')) as f:
    eval_lines = f.read().splitlines()

  sources = tmp_path / 'test.src'
  sources.write_text(''.join(src + '\n' for src, _ in splits['test']))
  output = tmp_path / 'test.out'
  subprocess.run([sys.executable, '-m', 'poolformers_jax.translate', '--workdir', workdir,
                  '--checkpoint', 'averaged', '--input', str(sources), '--output', str(output)],
                 check=True, cwd=REPO, env={**os.environ, 'PYTHONPATH': REPO})
  lines = output.read_text().splitlines()
  assert lines == eval_lines and len(lines) == 64
  scores = bleu_scores(lines, [tgt for _, tgt in splits['test']], 'de')
  assert scores['bleu'] == metrics['bleu'] and scores['tokenized_bleu'] == metrics['tokenized_bleu']
  assert metrics['bleu'] > 5.0, metrics      # a translation, not an empty or constant output


def test_bleu_scores_and_compound_splitting():
  assert split_compounds('Ein US-amerikanisch-deutsches Team') == (
      'Ein US ##AT##-##AT## amerikanisch ##AT##-##AT## deutsches Team')
  # One pass of t2t's perl substitution: one-letter parts overlap and stay joined, as there.
  assert split_compounds('a-b-c') == 'a ##AT##-##AT## b-c'
  refs = ['the cat sat on the mat today', 'a dog ran in the big park']
  perfect = bleu_scores(refs, refs, 'en')
  assert perfect['bleu'] == pytest.approx(100.0)
  assert perfect['tokenized_bleu'] == pytest.approx(100.0)
  worse = bleu_scores(['the cat sat on a mat', 'a dog ran in the park'], refs, 'en')
  assert 0.0 < worse['bleu'] < 100.0
  # Compound splitting credits the matching halves of a hyphenated word.
  de = bleu_scores(['das US-Team gewann heute das Spiel'], ['das US-Team gewann gestern das Spiel'],
                   'de')
  assert de['tokenized_bleu'] > de['bleu']


def test_tokenized_bleu_is_moses_with_compound_splitting():
  """get_ende_bleu.sh: tokenizer.perl -l de (escaping on), then ##AT## compound splitting. The
  13a stand-in differs: it splits digits at a hyphen and keeps quotes unescaped."""
  text = 'Die Saison 2013-2014 des US-Teams war "gut".'
  assert tokenize_for_bleu(text, 'de') == (
      'Die Saison 2013 ##AT##-##AT## 2014 des US ##AT##-##AT## Teams war &quot; gut &quot; .')
  assert tokenize_for_bleu(text, 'de', '13a') == (
      'Die Saison 2013 - 2014 des US ##AT##-##AT## Teams war " gut " .')
  assert tokenize_for_bleu('Le 3,5 Mio. est-ce "bon"?', 'fr') == (
      'Le 3,5 Mio. est-ce &quot; bon &quot; ?')        # no compound splitting outside German
  # The two tokenizations give different BLEU on the same pair.
  hyp, ref = ['Die Saison 2013-2014 war gut .'], ['Die Saison 2013 - 2014 war gut .']
  moses, t13a = bleu_scores(hyp, ref, 'de'), bleu_scores(hyp, ref, 'de', '13a')
  assert t13a['tokenized_bleu'] == pytest.approx(100.0) and moses['tokenized_bleu'] < 70.0
  assert moses['tokenized_bleu_tokenizer'] == 'moses'
  with pytest.raises(ValueError, match='tokenized_bleu'):
    bleu_scores(hyp, ref, 'de', 'perl')


@pytest.mark.parametrize('key,value,message', [
    ('decode.tokenized_bleu', 'perl', r"config.decode.tokenized_bleu='perl' is unknown"),
    ('decode.batch_tokens', 0, r'config.decode.batch_tokens=0 must be a positive integer'),
    ('decode.beam_size', 0, r'config.decode.beam_size=0 must be a positive integer')])
def test_bad_decode_settings_fail_before_compiling(tmp_path, key, value, message):
  write_corpus(tmp_path, train=50, held_out=4)
  with pytest.raises(ValueError, match=message):
    make_setup(tiny_translation_config(tmp_path, **{key: value}))


@pytest.mark.parametrize('batch_tokens,multiple', [(4096, 1), (512, 1), (512, 8), (40, 2)])
def test_length_batches_hold_every_source_once_within_the_token_budget(batch_tokens, multiple):
  rng = np.random.default_rng(0)
  sources = [rng.integers(3, 100, n).astype(np.int32) for n in rng.integers(1, 300, 57)]
  seen, batches = [], list(length_batches(sources, batch_tokens, multiple))
  for indices, ids in batches:
    rows, length = ids.shape
    assert length in BUCKETS or length % 128 == 0
    assert length == bucket_length(max(len(sources[i]) for i in indices))
    assert rows % multiple == 0 and rows >= len(indices)
    assert rows * length <= batch_tokens or rows == multiple   # the budget, or one row per device
    full = max(multiple, batch_tokens // length // multiple * multiple)
    pow2 = (rows // multiple) & (rows // multiple - 1) == 0
    assert rows == full or pow2   # a full batch, or a power of two: few shapes
    for row, i in enumerate(indices):
      np.testing.assert_array_equal(ids[row, :len(sources[i])], sources[i])
      assert not ids[row, len(sources[i]):].any()
    assert not ids[len(indices):].any()
    seen += indices
  assert sorted(seen) == list(range(57))
  lengths = [len(sources[i]) for i in seen]
  assert lengths == sorted(lengths)   # sorted by length, so a batch's padding is small
