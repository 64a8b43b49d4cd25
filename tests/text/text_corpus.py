"""Helpers of the text tests (imported by name; a module called conftest would collide with
tests/train/conftest.py): a tiny WordPiece vocabulary and a synthetic corpus a tiny model can learn.

Corpus: documents of two sentences; every word of a document comes from its topic (T topics of
disjoint words) and the sentences are fixed in the topic: "first a0 a1 a2 a3" then
"second a4 a5 a6 a7". So a masked word is predictable from its topic (MLM), a swapped pair
starts with "second" (SSO "previous") and a random B comes from another topic (SSO "random"),
except when the other document shares the topic.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'configs'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'train'))

import ponet_pretrain  # noqa: E402
import tiny_runs  # noqa: E402,F401  (the persistent compilation cache of the trainer tests)

from poolformers_jax import config as config_lib  # noqa: E402

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


def pretraining_config(text_dir, objective='sso', **updates):
  """configs/ponet_pretrain.py:<objective>,tiny on the synthetic corpus (16 tokens)."""
  base = {'data.vocab_file': text_dir['vocab'], 'data.files.train': text_dir['train'],
          'data.files.validation': text_dir['validation'],
          'data.files.test': text_dir['validation'],
          'data.max_length': 16, 'data.short_seq_prob': 0.0, 'model.max_length': 16,
          'progress_bar': False}
  base.update(updates)
  return config_lib.override(ponet_pretrain.get_config(f'{objective},tiny'), **base)
