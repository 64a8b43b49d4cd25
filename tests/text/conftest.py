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
