"""What the WordPiece datasets of PoNet's transfer experiments share (text_pretraining, glue,
text_classification: a file each).

Tokens: a standard BERT `vocab.txt` read by the `tokenizers` package (BertWordPieceTokenizer,
uncased: lower-cased, accents stripped), id 0 = [PAD]. The [CLS]/[SEP] ids of the vocabulary fill
config.model.cls_id / sep_id (DatasetInfo.model_defaults). Inputs carry, beside the token ids,
the SMP segment ids of the official code (`pair_inputs`): [CLS] 0, then every sentence and every
[SEP] its own id, so PoNet's segment max-pooling pools sentences.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

import numpy as np

from poolformers_jax import extras
from poolformers_jax.data import base

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+')
# The uncased BERT vocabulary of PoNet-Base (chtan/ponet-base-uncased): its size and [CLS] /
# [SEP] ids, what `DatasetSpec.shapes` assumes when no vocab.txt is at hand.
BERT_UNCASED = dict(size=30522, cls=101, sep=102)


@functools.lru_cache(maxsize=4)
def load_tokenizer(vocab_file: str, lowercase: bool = True):
  """BertWordPieceTokenizer of a BERT vocab.txt ([PAD] must be id 0)."""
  extras.require('text', 'BERT WordPiece data')
  from tokenizers import BertWordPieceTokenizer
  path = base.require_file(base.expand_path(vocab_file),
                           'point config.data.vocab_file at a BERT vocab.txt (e.g. the one of '
                           'chtan/ponet-base-uncased or bert-base-uncased).')
  tokenizer = BertWordPieceTokenizer(path, lowercase=lowercase)
  if tokenizer.token_to_id('[PAD]') != 0:
    raise ValueError(f'{path}: [PAD] must be token 0 (the models read id 0 as padding).')
  missing = [t for t in ('[CLS]', '[SEP]', '[MASK]', '[UNK]') if tokenizer.token_to_id(t) is None]
  if missing:
    raise ValueError(f'{path}: the vocabulary lacks {missing}; use a BERT vocab.txt.')
  return tokenizer


class Vocab:
  """A vocab.txt's tokenizer and special ids; picklable (the tokenizer reloads by path)."""

  def __init__(self, vocab_file: str, lowercase: bool = True):
    self.path, self.lowercase = vocab_file, lowercase
    t = self.tokenizer
    self.size = t.get_vocab_size()
    self.cls, self.sep, self.mask = (t.token_to_id(x) for x in ('[CLS]', '[SEP]', '[MASK]'))

  @property
  def tokenizer(self):
    return load_tokenizer(self.path, self.lowercase)

  def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
    encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [np.asarray(e.ids, np.int32) for e in encodings]


def split_sentences(text: str, how: str) -> list[str]:
  """'line': one sentence per line; 'regex': split after . ! ? (per line); 'paragraph': blocks."""
  if how == 'paragraph':
    parts = text.split('\n\n')
  elif how == 'line':
    parts = text.split('\n')
  elif how == 'regex':
    parts = [s for line in text.split('\n') for s in _SENTENCE_END.split(line)]
  else:
    raise ValueError(f"config.data.sentence_split={how!r}; choose 'line', 'regex' or 'paragraph'.")
  return [p.strip() for p in parts if p.strip()]


def as_text(value) -> str:
  """A TFDS text feature (bytes) or a file's field as str."""
  return value.decode('utf-8') if isinstance(value, (bytes, np.bytes_)) else str(value)


@functools.lru_cache(maxsize=4)
def load_vocab(vocab_file: str, lowercase: bool) -> Vocab:
  return Vocab(vocab_file, lowercase)


def vocab_of(settings: WordPieceSettings) -> Vocab:
  return load_vocab(settings.vocab_file, bool(settings.lowercase))


def pair_inputs(a: list, b: list | None, cls: int, sep: int, length: int) -> np.ndarray:
  """[2, length]: "[CLS] A [SEP] (B [SEP])" and SMP segment ids ([CLS] 0, then one id per
  sentence and per [SEP]); padding 0 in both rows."""
  ids, segments = [np.asarray([cls])], [np.asarray([0])]
  for part in (a, b) if b is not None else (a,):
    for sentence in filter(len, part):   # empty sentences get no id (ids stay < length)
      ids.append(sentence)
      segments.append(np.full(len(sentence), len(segments)))
    ids.append(np.asarray([sep]))
    segments.append(np.asarray([len(segments)]))
  row = np.concatenate(ids).astype(np.int32)
  if len(row) > length:
    raise ValueError(f'{len(row)} tokens > config.data.max_length={length}.')
  return np.stack([np.pad(row, (0, length - len(row))),
                   np.pad(np.concatenate(segments).astype(np.int32), (0, length - len(row)))])


def vocab_sizes(settings, from_files: bool) -> tuple[int, dict[str, int]]:
  """(vocabulary size, model defaults [CLS] / [SEP] ids) of the vocab.txt, or BERT_UNCASED's."""
  vocab = vocab_of(settings) if from_files else None
  size, cls, sep = ((vocab.size, vocab.cls, vocab.sep) if vocab else
                    (BERT_UNCASED['size'], BERT_UNCASED['cls'], BERT_UNCASED['sep']))
  return size, dict(cls_id=cls, sep_id=sep)


def split_sizes(source, settings, from_files: bool) -> dict[str, int]:
  """The sizes of `source`'s splits; from_files=False (`shapes`): none, nothing read."""
  return {s: len(source(settings, s)) for s in base.SPLITS} if from_files else {}


@dataclasses.dataclass(frozen=True)
class WordPieceSettings(base.DataSettings):
  """The settings every WordPiece dataset has: its vocabulary."""
  # A BERT vocab.txt, e.g. chtan/ponet-base-uncased's.
  vocab_file: str = base.under_data_dir('ponet-base-uncased', 'vocab.txt')
  lowercase: bool = True          # uncased, as PoNet-Base


def spec(info, source, preprocess, defaults, record=None) -> base.DatasetSpec:
  """`shapes`: the info without files (BERT_UNCASED's vocabulary, no split sizes)."""
  return base.DatasetSpec(info, source, preprocess, defaults, record=record,
                          shapes=functools.partial(info, from_files=False))
