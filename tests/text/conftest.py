"""A tiny WordPiece vocabulary and a synthetic corpus whose structure a tiny model can learn.

Corpus: documents of two sentences; every word of a document comes from its topic (T topics of
disjoint words) and the sentences are fixed in the topic: "first a0 a1 a2 a3" then
"second a4 a5 a6 a7". So a masked word is predictable from its topic (MLM), a swapped pair
starts with "second" (SSO "previous") and a random B comes from another topic (SSO "random"),
except when the other document shares the topic.
"""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'configs'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'train'))

import tiny_runs  # noqa: E402,F401  (the persistent compilation cache of the trainer tests)
import jax  # noqa: E402

import ponet_pretrain  # noqa: E402
from poolformers_jax.train import config_utils, setup as setup_lib, state as state_lib  # noqa: E402
from poolformers_jax.train import train_and_evaluate  # noqa: E402
from poolformers_jax.train.evaluate import evaluate_state  # noqa: E402

SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
TOPICS = 6
WORDS = [f'tp{t}w{j}' for t in range(TOPICS) for j in range(8)] + ['first', 'second', 'the', 'cat']


def write_vocab(path):
  with open(path, 'w') as f:
    f.write('\n'.join(SPECIALS + WORDS) + '\n')
  return str(path)


def document(topic: int) -> str:
  words = [f'tp{topic}w{j}' for j in range(8)]
  return f'first {" ".join(words[:4])}\nsecond {" ".join(words[4:])}'


def write_corpus(folder, num_docs: int, seed: int):
  os.makedirs(folder, exist_ok=True)
  docs = [document((seed + 7 * i) % TOPICS) for i in range(num_docs)]
  with open(os.path.join(folder, 'part0.txt'), 'w') as f:
    f.write('\n\n'.join(docs) + '\n')
  return os.path.join(folder, '*.txt')


@pytest.fixture(scope='session')
def text_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('text')
  vocab = write_vocab(root / 'vocab.txt')
  return {'root': str(root), 'vocab': vocab,
          'train': write_corpus(str(root / 'train'), 240, 0),
          'validation': write_corpus(str(root / 'validation'), 96, 1)}


def pretraining_config(text_dir, objective='sso', **updates):
  """configs/ponet_pretrain.py:<objective>,tiny on the synthetic corpus (16 tokens)."""
  base = {'data.vocab_file': text_dir['vocab'], 'data.files.train': text_dir['train'],
          'data.files.validation': text_dir['validation'], 'data.files.test': text_dir['validation'],
          'data.max_length': 16, 'data.short_seq_prob': 0.0, 'model.max_length': 16,
          'progress_bar': False}
  base.update(updates)
  return config_utils.override(ponet_pretrain.get_config(f'{objective},tiny'), **base)


@pytest.fixture(scope='session')
def pretrained(text_dir):
  """One tiny MLM + SSO pre-training run (train_and_evaluate), and its untrained metrics."""
  config = pretraining_config(text_dir, **{
      'num_train_steps': 120, 'eval_every_steps': 120, 'checkpoint_every_steps': 120,
      'log_every_steps': 40, 'batch_size': 16, 'eval_batch_size': 32, 'final_test': False,
      'optimizer.learning_rate': 3e-3, 'optimizer.warmup_steps': 10, 'model.dropout_rate': 0.0,
      'num_devices': 1})
  setup = setup_lib.make_setup(config)
  untrained = state_lib.create_train_state(setup.model, setup.tx, setup.info,
                                           jax.random.PRNGKey(0), setup.mesh)
  before = evaluate_state(setup, untrained, 'validation')
  workdir = os.path.join(text_dir['root'], 'pretrain')
  return {'before': before, 'result': train_and_evaluate(config, workdir), 'workdir': workdir,
          'vocab_size': setup.info.vocab_size}
