"""WordPiece text data of PoNet's transfer experiments: pre-training pairs, GLUE, long texts.

Tokens: a standard BERT `vocab.txt` read by the `tokenizers` package (BertWordPieceTokenizer,
uncased: lower-cased, accents stripped), id 0 = [PAD]. The [CLS]/[SEP] ids of the vocabulary fill
config.model.cls_id / sep_id (DatasetInfo.model_defaults).

text_pretraining (official run_pretrained.py, StructBERT's SSO): records are documents, each a
  list of sentences. Sources: plain text files (documents = blank-line-separated blocks; a
  sentence per line, or `sentence_split='regex'`) or TFDS `wikipedia` (paragraphs split into
  sentences by the regex). Every chunk of every document, `dupe_factor` times (5, the official
  run_pretrained.py's; each copy draws its own pair and masks; evaluation splits once): a
  document's sentences are grouped greedily into chunks reaching max_length - 3 tokens, each chunk
  is one example, cut at a random sentence boundary into A and B; 10 % of the time
  (short_seq_prob) a random shorter target keeps only the chunk's first sentences reaching it
  (decided here: the official code then re-chunks the rest of the document with the shorter
  target; here the chunks are fixed so that an epoch has a known size). TFDS documents are
  tokenized on read, so their chunks cannot be counted up front: there each record is one
  document (times dupe_factor for training) and draws one of its chunks at random.
    objective 'sso': 1/3 keep (label 0, B follows A), 1/3 swap (1, B precedes A), 1/3 replace B
                     by a chunk of another document (2);
    objective 'nsp': 1/2 keep (0), 1/2 random B (1)  (BERT);   objective 'mlm': keep, no label.
  Truncation removes tokens of the longer side, from its front or back at random (official).
  inputs [2, L]: token ids "[CLS] A [SEP] B [SEP]" and the SMP segment ids of the official code:
  [CLS] 0, then every sentence and every [SEP] its own id, so PoNet's segment max-pooling pools
  sentences. MLM (BERT, DataCollatorForLanguageModeling): each non-special token is chosen with
  probability 0.15; chosen tokens become [MASK] (80 %), a random token (10 %) or stay (10 %).
  Random tokens are drawn from ids 1..V-1 (never [PAD], which the model reads as padding).
  Evaluation examples use a generator seeded by the document index, so they never change.
  Decided here: a chunk of one sentence is cut in the middle (the official code skips it).
glue: TFDS glue/<task>, "[CLS] a [SEP] (b [SEP])", longest-first truncation to max_length (128
  as the official fine-tuning); 'test' reads the labelled dev set (GLUE's test labels are
  hidden), except MNLI: validation = matched, test = mismatched. STS-B is a regression.
text_classification (long texts, official run_long_classification.py): TFDS (imdb_reviews) or
  JSONL / CSV files (HND, Yelp-5, Arxiv-11: a text and a label field; labels sorted as the
  official `label_list`); inputs [2, L] with one SMP segment per sentence (Arxiv: per paragraph).
"""
from __future__ import annotations

import csv
import functools
import glob
import json
import os
import re
from typing import Any, Optional, Sequence

import numpy as np

from poolformers_jax import extras
from poolformers_jax.data import base

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+')


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


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, (bytes, np.bytes_)) else str(value)


# --------------------------------------------------------------------------------------------
# Pre-training documents.

class TokenizedDocuments:
  """Documents of plain text files, tokenized once: flat tokens + sentence / document bounds."""

  def __init__(self, paths: Sequence[str], vocab: Vocab, sentence_split: str):
    sentences, doc_bounds = [], [0]
    for path in paths:
      with open(path, encoding='utf-8') as f:
        blocks = re.split(r'\n\s*\n', f.read())
      for block in blocks:
        block_sentences = split_sentences(block, sentence_split)
        if block_sentences:
          sentences.extend(block_sentences)
          doc_bounds.append(len(sentences))
    ids = vocab.encode(sentences)
    self.tokens = np.concatenate(ids) if ids else np.zeros(0, np.int32)
    self.sentence_bounds = np.cumsum([0] + [len(x) for x in ids])
    self.doc_bounds = np.asarray(doc_bounds)

  def __len__(self):
    return len(self.doc_bounds) - 1

  def sentences(self, index: int) -> list[np.ndarray]:
    first, last = self.doc_bounds[index], self.doc_bounds[index + 1]
    b = self.sentence_bounds
    return [self.tokens[b[i]:b[i + 1]] for i in range(first, last) if b[i + 1] > b[i]]

  def sentence_lengths(self, index: int) -> np.ndarray:
    """Token counts of the (non-empty) sentences of document `index`, without slicing."""
    lengths = np.diff(self.sentence_bounds[self.doc_bounds[index]:self.doc_bounds[index + 1] + 1])
    return lengths[lengths > 0]


class TfdsDocuments:
  """TFDS documents ({'text': ...}, e.g. wikipedia), split into sentences and tokenized on read."""

  def __init__(self, source, vocab: Vocab, sentence_split: str):
    self.source, self.vocab, self.sentence_split = source, vocab, sentence_split

  def __len__(self):
    return len(self.source)

  def sentences(self, index: int) -> list[np.ndarray]:
    text = _text(self.source[index]['text'])
    return [s for s in self.vocab.encode(split_sentences(text, self.sentence_split)) if len(s)]


class DocumentRecords:
  """Record i = (documents, document i mod n, None, i): a chunk drawn at random from the
  document (TFDS); `dupe_factor` passes over the documents. Preprocessing also draws B from
  other documents."""

  def __init__(self, documents, dupe_factor: int = 1):
    self.documents, self.dupe_factor = documents, dupe_factor

  def __len__(self):
    return len(self.documents) * self.dupe_factor

  def __getitem__(self, index):
    return self.documents, int(index) % len(self.documents), None, int(index)


class ChunkRecords:
  """Record i = (documents, document, (first, end) sentences of one chunk, i): every chunk of
  every document (chunks reaching `target` tokens), `dupe_factor` times."""

  def __init__(self, documents, target: int, dupe_factor: int = 1):
    self.documents, self.dupe_factor = documents, dupe_factor
    self.chunks = np.asarray(
        [(d, first, end) for d in range(len(documents))
         for first, end in _chunk_bounds(documents.sentence_lengths(d), target)],
        np.int64).reshape(-1, 3)

  def __len__(self):
    return len(self.chunks) * self.dupe_factor

  def __getitem__(self, index):
    document, first, end = (int(v) for v in self.chunks[int(index) % len(self.chunks)])
    return self.documents, document, (first, end), int(index)


@functools.lru_cache(maxsize=8)
def _text_file_documents(pattern: str, vocab_file: str, lowercase: bool, sentence_split: str):
  paths = sorted(glob.glob(base.expand_path(pattern)))
  if not paths:
    raise base.DataNotFoundError(f'{pattern} matches no file: set config.data.files.<split> to a '
                                 'glob of plain text files (documents separated by blank lines).')
  return TokenizedDocuments(paths, _vocab(vocab_file, lowercase), sentence_split)


@functools.lru_cache(maxsize=4)
def _vocab(vocab_file: str, lowercase: bool) -> Vocab:
  return Vocab(vocab_file, lowercase)


def vocab_of(data_config) -> Vocab:
  return _vocab(data_config.vocab_file, bool(data_config.lowercase))


def pretraining_source(data_config, split):
  base.check_split(split)
  vocab = vocab_of(data_config)
  if int(data_config.dupe_factor) < 1:
    raise ValueError(f'config.data.dupe_factor={data_config.dupe_factor} must be >= 1 (the number '
                     'of passes over every chunk in one epoch; 5 in the official script).')
  dupe = int(data_config.dupe_factor) if split == 'train' else 1
  if data_config.source == 'text_files':
    return ChunkRecords(_text_file_documents(data_config.files[split], data_config.vocab_file,
                                             bool(data_config.lowercase),
                                             data_config.sentence_split),
                        data_config.max_length - 3, dupe)
  if data_config.source == 'tfds':
    if data_config.tfds_name.startswith('wikipedia'):
      _register_tfds_builder('tensorflow_datasets.text.wikipedia')
    return DocumentRecords(TfdsDocuments(
        base.tfds_source(data_config.tfds_name, data_config.tfds_splits[split], data_config.data_dir),
        vocab, data_config.sentence_split), dupe)
  raise ValueError(f"config.data.source={data_config.source!r}; choose 'text_files' or 'tfds'.")


def _chunk_bounds(lengths: Sequence[int], target: int) -> list[tuple[int, int]]:
  """(first, end) of greedy groups of consecutive sentences reaching `target` tokens (the last
  may be shorter)."""
  bounds, first, length = [], 0, 0
  for i, n in enumerate(lengths):
    length += int(n)
    if length >= target:
      bounds.append((first, i + 1))
      first, length = i + 1, 0
  if first < len(lengths):
    bounds.append((first, len(lengths)))
  return bounds


def _chunks(sentences: list[np.ndarray], target: int) -> list[list[np.ndarray]]:
  """Greedy groups of consecutive sentences reaching `target` tokens (the last may be shorter)."""
  return [sentences[a:b] for a, b in _chunk_bounds([len(x) for x in sentences], target)]


def _draw_chunk(documents, index: int, target: int, rng) -> list[np.ndarray]:
  for offset in range(len(documents)):          # skip documents without any token
    sentences = documents.sentences((index + offset) % len(documents))
    if sentences:
      chunks = _chunks(sentences, target)
      return chunks[rng.integers(len(chunks))]
  raise ValueError('the pre-training documents hold no token; check the corpus files.')


def _truncate_pair(a: list, b: list, max_tokens: int, rng) -> None:
  """Official truncate_seq_pair on lists of sentences: drop a token of the longer side, from
  its first sentence's front or its last sentence's back at random, until both fit."""
  while sum(map(len, a)) + sum(map(len, b)) > max_tokens:
    side = a if sum(map(len, a)) > sum(map(len, b)) else b
    if rng.random() < 0.5:
      side[0] = side[0][1:]
    else:
      side[-1] = side[-1][:-1]
    side[:] = [s for s in side if len(s)] or [side[0][:0]]


def sentence_pair(documents, index: int, data_config, rng,
                  span: Optional[tuple[int, int]] = None) -> tuple[list, list, int]:
  """(sentences of A, sentences of B, label) for the configured objective, from the chunk
  `span` (first, end sentences) of document `index`, or (None) a chunk drawn at random."""
  max_tokens = data_config.max_length - 3
  target = max_tokens
  if rng.random() < data_config.short_seq_prob:
    target = int(rng.integers(2, max_tokens + 1))
  if span is None:
    chunk = _draw_chunk(documents, index, target, rng)
  else:   # the chunk's first sentences reaching the (possibly shorter) target
    chunk = _chunks(documents.sentences(index)[span[0]:span[1]], target)[0]
  if len(chunk) == 1:                              # one sentence: cut it in the middle
    half = max(len(chunk[0]) // 2, 1)
    chunk = [chunk[0][:half], chunk[0][half:]]
  cut = int(rng.integers(1, len(chunk)))          # A = the first 1..n-1 sentences
  a, b, label = chunk[:cut], chunk[cut:], 0
  objective, other_docs = data_config.objective, len(documents) > 1
  draw = rng.random()
  random_b = (objective == 'sso' and 1 / 3 <= draw < 2 / 3) or (objective == 'nsp' and draw < 0.5)
  if objective == 'sso' and draw < 1 / 3:
    a, b, label = b, a, 1
  elif random_b and other_docs:
    other = (index + 1 + int(rng.integers(len(documents) - 1))) % len(documents)
    b, label = list(_draw_chunk(documents, other, target, rng)), (2 if objective == 'sso' else 1)
  _truncate_pair(a, b, max_tokens, rng)
  return a, b, label


def pair_inputs(a: list, b: Optional[list], cls: int, sep: int, length: int) -> np.ndarray:
  """[2, length]: "[CLS] A [SEP] (B [SEP])" and SMP segment ids ([CLS] 0, then one id per
  sentence and per [SEP]); padding 0 in both rows."""
  ids, segments = [np.asarray([cls])], [np.asarray([0])]
  for part in (a, b) if b is not None else (a,):
    for sentence in filter(len, part):   # empty sentences get no id (ids stay < length)
      ids.append(sentence)
      segments.append(np.full(len(sentence), len(segments)))
    ids.append(np.asarray([sep]))
    segments.append(np.asarray([len(segments)]))
  ids, segments = np.concatenate(ids).astype(np.int32), np.concatenate(segments).astype(np.int32)
  if len(ids) > length:
    raise ValueError(f'{len(ids)} tokens > config.data.max_length={length}.')
  return np.stack([np.pad(ids, (0, length - len(ids))), np.pad(segments, (0, length - len(ids)))])


def mask_tokens(ids: np.ndarray, vocab: Vocab, probability: float, rng) -> tuple[np.ndarray, np.ndarray]:
  """BERT masking of non-special tokens: (masked ids, targets with -1 where not chosen)."""
  candidates = (ids != 0) & (ids != vocab.cls) & (ids != vocab.sep)
  chosen = candidates & (rng.random(ids.shape) < probability)
  action = rng.random(ids.shape)
  random_ids = rng.integers(1, vocab.size, ids.shape)
  masked = np.where(chosen & (action < 0.8), vocab.mask, ids)
  masked = np.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, masked)
  return masked.astype(np.int32), np.where(chosen, ids, -1).astype(np.int32)


def pretraining_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  documents, index, span, position = record
  if rng is None:      # evaluation: the same example every time
    rng = np.random.default_rng([int(data_config.eval_seed), position])
  vocab = vocab_of(data_config)
  a, b, label = sentence_pair(documents, index, data_config, rng, span)
  inputs = pair_inputs(a, b, vocab.cls, vocab.sep, data_config.max_length)
  inputs[0], mlm = mask_tokens(inputs[0], vocab, data_config.mask_probability, rng)
  return {'inputs': inputs, 'targets': {'mlm': mlm, 'sso': np.int32(label)}}


SENTENCE_CLASSES = {'sso': 3, 'nsp': 2, 'mlm': 0}


# The uncased BERT vocabulary of PoNet-Base (chtan/ponet-base-uncased): its size and [CLS] /
# [SEP] ids, what `DatasetSpec.shapes` assumes when no vocab.txt is at hand.
BERT_UNCASED = dict(size=30522, cls=101, sep=102)


def _vocab_sizes(data_config, from_files: bool) -> tuple[int, dict[str, int]]:
  """(vocabulary size, model defaults [CLS] / [SEP] ids) of the vocab.txt, or BERT_UNCASED's."""
  vocab = vocab_of(data_config) if from_files else None
  size, cls, sep = ((vocab.size, vocab.cls, vocab.sep) if vocab else
                    (BERT_UNCASED['size'], BERT_UNCASED['cls'], BERT_UNCASED['sep']))
  return size, dict(cls_id=cls, sep_id=sep)


def _split_sizes(source, data_config, from_files: bool) -> dict[str, int]:
  return {s: len(source(data_config, s)) for s in base.SPLITS} if from_files else {}


def pretraining_info(data_config, *, from_files: bool = True):
  if data_config.objective not in SENTENCE_CLASSES:
    raise ValueError(f'config.data.objective={data_config.objective!r}; choose one of '
                     f'{sorted(SENTENCE_CLASSES)}.')
  vocab_size, special = _vocab_sizes(data_config, from_files)
  return base.DatasetInfo(
      name='text_pretraining', task='pretraining',
      num_classes=SENTENCE_CLASSES[data_config.objective], vocab_size=vocab_size,
      input_shape=(2, data_config.max_length),
      split_sizes=_split_sizes(pretraining_source, data_config, from_files),
      model_defaults=dict(special, sentence_classes=SENTENCE_CLASSES[data_config.objective]))


# --------------------------------------------------------------------------------------------
# GLUE (TFDS glue/<task>).

# task -> (text keys, number of classes; 1 = regression)
GLUE_TASKS = {
    'cola': (('sentence',), 2), 'sst2': (('sentence',), 2), 'mrpc': (('sentence1', 'sentence2'), 2),
    'qqp': (('question1', 'question2'), 2), 'stsb': (('sentence1', 'sentence2'), 1),
    'mnli': (('premise', 'hypothesis'), 3), 'qnli': (('question', 'sentence'), 2),
    'rte': (('sentence1', 'sentence2'), 2), 'wnli': (('sentence1', 'sentence2'), 2),
}


def _glue_task(data_config):
  if data_config.task not in GLUE_TASKS:
    raise ValueError(f'config.data.task={data_config.task!r}; choose one of {sorted(GLUE_TASKS)}.')
  return GLUE_TASKS[data_config.task]


def _register_tfds_builder(module: str) -> None:
  """Old-style TFDS builders (glue, wikipedia) register on import of their module only."""
  import importlib
  importlib.import_module(module)


def glue_source(data_config, split):
  _glue_task(data_config)
  _register_tfds_builder('tensorflow_datasets.text.glue')
  return base.tfds_source(f'glue/{data_config.task}', data_config.tfds_splits[base.check_split(split)],
                          data_config.data_dir)


def truncate_longest_first(a: np.ndarray, b: Optional[np.ndarray], max_tokens: int):
  """Drops tokens from the end of the longer text (b on ties), as the tokenizers do."""
  if b is None:
    return a[:max_tokens], None
  la, lb = len(a), len(b)
  while la + lb > max_tokens:
    if la > lb:
      la -= 1
    else:
      lb -= 1
  return a[:la], b[:lb]


def glue_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  keys, num_classes = _glue_task(data_config)
  vocab = vocab_of(data_config)
  texts = vocab.encode([_text(record[k]) for k in keys])
  a, b = texts[0], texts[1] if len(texts) > 1 else None
  a, b = truncate_longest_first(a, b, data_config.max_length - len(texts) - 1)
  inputs = pair_inputs([a], None if b is None else [b], vocab.cls, vocab.sep, data_config.max_length)
  label = record['label']
  target = np.float32(label) if num_classes == 1 else np.int32(label)
  return {'inputs': inputs[0], 'targets': target}


def glue_info(data_config, *, from_files: bool = True):
  _, num_classes = _glue_task(data_config)
  vocab_size, special = _vocab_sizes(data_config, from_files)
  return base.DatasetInfo(
      name='glue', task='regression' if num_classes == 1 else 'text_classification',
      num_classes=num_classes, vocab_size=vocab_size, input_shape=(data_config.max_length,),
      split_sizes=_split_sizes(glue_source, data_config, from_files), model_defaults=special)


# --------------------------------------------------------------------------------------------
# Long-text classification (IMDb from TFDS; HND, Yelp-5, Arxiv-11 from JSONL / CSV files).

@functools.lru_cache(maxsize=8)
def _file_records(path: str):
  base.require_file(path, 'set config.data.files.<split> to a .jsonl or .csv file with a text '
                    'and a label field (config.data.text_field, config.data.label_field).')
  if path.endswith('.jsonl') or path.endswith('.json'):
    return base.LineFile(path, parse=json.loads)
  if path.endswith('.csv'):
    with open(path, newline='', encoding='utf-8') as f:
      return list(csv.DictReader(f))
  raise ValueError(f'{path}: expected a .jsonl or .csv file.')


def long_text_source(data_config, split):
  base.check_split(split)
  if data_config.source == 'tfds':
    return base.tfds_source(data_config.tfds_name, data_config.tfds_splits[split],
                            data_config.data_dir)
  if data_config.source == 'files':
    return _file_records(base.expand_path(data_config.files[split]))
  raise ValueError(f"config.data.source={data_config.source!r}; choose 'tfds' or 'files'.")


def _label_key(value) -> Any:
  """A label as a sortable key: integers (also '7' from CSV) as int, else the string."""
  value = value.item() if isinstance(value, np.generic) else value
  text = _text(value).strip()
  return int(text) if text.lstrip('-').isdigit() else text


@functools.lru_cache(maxsize=8)
def _file_labels(path: str, label_field: str) -> tuple:
  """The official label_list: the sorted distinct labels of the train split (numbers sort as
  numbers, so Arxiv-11's 0..10 keep their order)."""
  keys = {_label_key(r[label_field]) for r in _file_records(path)}
  return tuple(sorted(keys, key=lambda k: (isinstance(k, str), k)))


def _labels(data_config) -> Optional[tuple]:
  if data_config.source == 'tfds':
    return None                                   # TFDS labels are class ids already
  return _file_labels(base.expand_path(data_config.files.train), data_config.label_field)


def long_text_preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng
  vocab = vocab_of(data_config)
  sentences = vocab.encode(split_sentences(_text(record[data_config.text_field]),
                                           data_config.sentence_split))
  budget, kept = data_config.max_length - 2, []
  for sentence in sentences:                     # truncate to max_length, as the tokenizer does
    kept.append(sentence[:max(budget, 0)])
    budget -= len(kept[-1])
  inputs = pair_inputs(kept, None, vocab.cls, vocab.sep, data_config.max_length)
  label = record[data_config.label_field]
  labels = _labels(data_config)
  if labels is not None:
    key = _label_key(label)
    if key not in labels:
      raise ValueError(f'label {key!r} is not among the train labels {list(labels)}.')
    label = labels.index(key)
  return {'inputs': inputs, 'targets': np.int32(label)}


def long_text_info(data_config, *, from_files: bool = True):
  vocab_size, special = _vocab_sizes(data_config, from_files)
  labels = _labels(data_config) if from_files else None
  return base.DatasetInfo(
      name='text_classification', task='text_classification',
      num_classes=len(labels) if labels is not None else int(data_config.num_classes),
      vocab_size=vocab_size, input_shape=(2, data_config.max_length),
      split_sizes=_split_sizes(long_text_source, data_config, from_files), model_defaults=special)


# --------------------------------------------------------------------------------------------
# config.data defaults.

def _wordpiece(name: str, max_length: int):
  c = base.common_config(name, max_length)
  # A BERT vocab.txt, e.g. the one shipped with chtan/ponet-base-uncased.
  c.vocab_file = os.path.join(base.default_data_dir(), 'ponet-base-uncased', 'vocab.txt')
  c.lowercase = True               # uncased, as PoNet-Base
  return c


def pretraining_config():
  """MLM + SSO / NSP pairs; source 'text_files' or 'tfds' (wikipedia)."""
  c = _wordpiece('text_pretraining', 512)
  c.objective = 'sso'              # 'sso' (StructBERT, the paper) | 'nsp' (BERT) | 'mlm' (only)
  c.source = 'text_files'
  # Globs of plain text files: documents separated by blank lines, a sentence per line.
  corpus = os.path.join(base.default_data_dir(), 'corpus')
  c.files = dict(train=os.path.join(corpus, 'train', '*.txt'),
                 validation=os.path.join(corpus, 'validation', '*.txt'),
                 test=os.path.join(corpus, 'validation', '*.txt'))
  c.sentence_split = 'line'        # 'line' | 'regex' (split after . ! ?) | 'paragraph'
  c.tfds_name = 'wikipedia/20230601.en'    # source='tfds': TFDS wikipedia (has only 'train')
  c.tfds_splits = dict(train='train[20000:]', validation='train[:10000]', test='train[10000:20000]')
  c.mask_probability = 0.15
  c.short_seq_prob = 0.1
  c.dupe_factor = 5                # training passes over every chunk per epoch (official: 5)
  c.eval_seed = 0
  return c


def glue_config():
  c = _wordpiece('glue', 128)      # the official fine-tuning length
  c.task = 'cola'                  # cola sst2 mrpc qqp stsb mnli qnli rte wnli
  # GLUE's test labels are hidden: 'test' = the dev set (MNLI: validation matched, test mismatched).
  c.tfds_splits = dict(train='train', validation='validation', test='validation')
  return c


def long_text_config():
  c = _wordpiece('text_classification', 4096)   # PoNet's long-text length
  c.source = 'tfds'                # 'tfds' | 'files' (JSONL / CSV)
  c.tfds_name = 'imdb_reviews/plain_text'
  c.tfds_splits = dict(train='train', validation='test', test='test')   # official IMDb setting
  c.num_classes = 2                # TFDS only; files: the distinct train labels
  c.files = dict(train='', validation='', test='')
  c.text_field = 'text'
  c.label_field = 'label'
  c.sentence_split = 'regex'       # SMP segments: sentences ('paragraph' for Arxiv-11)
  return c


def glue_record(raw, data_config):
  """A user's sentence, or pair of sentences for the pair tasks (load_run), as a record."""
  keys, _ = GLUE_TASKS[data_config.task]
  texts = (raw,) if isinstance(raw, str) else tuple(raw)
  if len(texts) != len(keys):
    raise ValueError(f'GLUE {data_config.task} reads {len(keys)} text(s) {keys} per input; got '
                     f'{len(texts)}')
  return {**dict(zip(keys, texts)), 'label': 0}


def long_text_record(raw, data_config):
  """A user's document (load_run) as a record, with a valid label of the run's files."""
  labels = _labels(data_config)
  return {data_config.text_field: raw, data_config.label_field: labels[0] if labels else 0}


def _spec(info, source, preprocess, config, record=None) -> base.DatasetSpec:
  """`shapes`: the info without files (BERT_UNCASED's vocabulary, no split sizes)."""
  return base.DatasetSpec(info, source, preprocess, config, record=record,
                          shapes=functools.partial(info, from_files=False))


base.register_dataset('text_pretraining', _spec(pretraining_info, pretraining_source,
                                                pretraining_preprocess, pretraining_config))
base.register_dataset('glue', _spec(glue_info, glue_source, glue_preprocess, glue_config,
                                    glue_record))
base.register_dataset('text_classification', _spec(long_text_info, long_text_source,
                                                   long_text_preprocess, long_text_config,
                                                   long_text_record))
