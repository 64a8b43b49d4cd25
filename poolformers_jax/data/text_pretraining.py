"""text_pretraining: the pre-training pairs of PoNet (official run_pretrained.py, StructBERT's SSO);
WordPiece tokens and SMP segments: wordpiece.py.

Records are documents, each a list of sentences, from plain text files (documents =
blank-line-separated blocks; a sentence per line, or `sentence_split='regex'`) or TFDS
`wikipedia` (paragraphs split into sentences by the regex). An example is a chunk of sentences
reaching max_length - 3 tokens, cut at a random sentence boundary into A and B; which chunks, how
often (`dupe_factor`) and with which shorter targets (`short_seq_prob`): docs/papers/ponet.md
('Pre-training sampling'), where the official run_pretrained.py differs.
  objective 'sso': 1/3 keep (label 0, B follows A), 1/3 swap (1, B precedes A), 1/3 replace B by
                   a chunk of another document (2);
  objective 'nsp': 1/2 keep (0), 1/2 random B (1)  (BERT);   objective 'mlm': keep, no label.
Truncation removes tokens of the longer side, from its front or back at random (official).
inputs [2, L]: token ids "[CLS] A [SEP] B [SEP]" and the SMP segment ids. MLM (BERT,
DataCollatorForLanguageModeling): each non-special token is chosen with probability 0.15; chosen
tokens become [MASK] (80 %), a random token (10 %) or stay (10 %). Random tokens are drawn from
ids 1..V-1 (never [PAD], which the model reads as padding). Evaluation examples use a generator
seeded by the document index, so they never change. Decided here: a chunk of one sentence is cut
in the middle (the official code skips it).
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
from collections.abc import Sequence

import numpy as np

from poolformers_jax.data import base, wordpiece


class TokenizedDocuments:
  """Documents of plain text files, tokenized once: flat tokens + sentence / document bounds."""

  def __init__(self, paths: Sequence[str], vocab: wordpiece.Vocab, sentence_split: str):
    sentences, doc_bounds = [], [0]
    for path in paths:
      with open(path, encoding='utf-8') as f:
        blocks = re.split(r'\n\s*\n', f.read())
      for block in blocks:
        block_sentences = wordpiece.split_sentences(block, sentence_split)
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

  def __init__(self, source, vocab: wordpiece.Vocab, sentence_split: str):
    self.source, self.vocab, self.sentence_split = source, vocab, sentence_split

  def __len__(self):
    return len(self.source)

  def sentences(self, index: int) -> list[np.ndarray]:
    text = wordpiece.as_text(self.source[index]['text'])
    sentences = wordpiece.split_sentences(text, self.sentence_split)
    return [s for s in self.vocab.encode(sentences) if len(s)]


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
  return TokenizedDocuments(paths, wordpiece.load_vocab(vocab_file, lowercase), sentence_split)


def source(settings: PretrainingSettings, split):
  base.check_split(split)
  vocab = wordpiece.vocab_of(settings)
  if int(settings.dupe_factor) < 1:
    raise ValueError(f'config.data.dupe_factor={settings.dupe_factor} must be >= 1 (the number '
                     'of passes over every chunk in one epoch; 5 in the official script).')
  dupe = int(settings.dupe_factor) if split == 'train' else 1
  if settings.source == 'text_files':
    return ChunkRecords(_text_file_documents(settings.files[split], settings.vocab_file,
                                             bool(settings.lowercase),
                                             settings.sentence_split),
                        settings.max_length - 3, dupe)
  if settings.source == 'tfds':
    if settings.tfds_name.startswith('wikipedia'):
      import tensorflow_datasets.text.wikipedia  # noqa: F401  registers wikipedia (no TF needed)
    return DocumentRecords(TfdsDocuments(base.tfds_split_source(settings, split), vocab,
                                         settings.sentence_split), dupe)
  raise ValueError(f"config.data.source={settings.source!r}; choose 'text_files' or 'tfds'.")


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


def sentence_pair(documents, index: int, settings, rng,
                  span: tuple[int, int] | None = None) -> tuple[list, list, int]:
  """(sentences of A, sentences of B, label) for the configured objective, from the chunk
  `span` (first, end sentences) of document `index`, or (None) a chunk drawn at random."""
  max_tokens = settings.max_length - 3
  target = max_tokens
  if rng.random() < settings.short_seq_prob:
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
  objective, other_docs = settings.objective, len(documents) > 1
  draw = rng.random()
  random_b = (objective == 'sso' and 1 / 3 <= draw < 2 / 3) or (objective == 'nsp' and draw < 0.5)
  if objective == 'sso' and draw < 1 / 3:
    a, b, label = b, a, 1
  elif random_b and other_docs:
    other = (index + 1 + int(rng.integers(len(documents) - 1))) % len(documents)
    b, label = list(_draw_chunk(documents, other, target, rng)), (2 if objective == 'sso' else 1)
  _truncate_pair(a, b, max_tokens, rng)
  return a, b, label


def mask_tokens(ids: np.ndarray, vocab: wordpiece.Vocab, probability: float,
                rng) -> tuple[np.ndarray, np.ndarray]:
  """BERT masking of non-special tokens: (masked ids, targets with -1 where not chosen)."""
  candidates = (ids != 0) & (ids != vocab.cls) & (ids != vocab.sep)
  chosen = candidates & (rng.random(ids.shape) < probability)
  action = rng.random(ids.shape)
  random_ids = rng.integers(1, vocab.size, ids.shape)
  masked = np.where(chosen & (action < 0.8), vocab.mask, ids)
  masked = np.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, masked)
  return masked.astype(np.int32), np.where(chosen, ids, -1).astype(np.int32)


def preprocess(record, settings: PretrainingSettings, rng: np.random.Generator | None = None):
  documents, index, span, position = record
  if rng is None:      # evaluation: the same example every time
    rng = np.random.default_rng([int(settings.eval_seed), position])
  vocab = wordpiece.vocab_of(settings)
  a, b, label = sentence_pair(documents, index, settings, rng, span)
  inputs = wordpiece.pair_inputs(a, b, vocab.cls, vocab.sep, settings.max_length)
  inputs[0], mlm = mask_tokens(inputs[0], vocab, settings.mask_probability, rng)
  return {'inputs': inputs, 'targets': {'mlm': mlm, 'sso': np.int32(label)}}


SENTENCE_CLASSES = {'sso': 3, 'nsp': 2, 'mlm': 0}


def info(settings, *, from_files: bool = True):
  if settings.objective not in SENTENCE_CLASSES:
    raise ValueError(f'config.data.objective={settings.objective!r}; choose one of '
                     f'{sorted(SENTENCE_CLASSES)}.')
  vocab_size, special = wordpiece.vocab_sizes(settings, from_files)
  return base.DatasetInfo(
      name='text_pretraining', task='pretraining',
      num_classes=SENTENCE_CLASSES[settings.objective], vocab_size=vocab_size,
      input_shape=(2, settings.max_length),
      split_sizes=wordpiece.split_sizes(source, settings, from_files),
      model_defaults=dict(special, sentence_classes=SENTENCE_CLASSES[settings.objective]))


@dataclasses.dataclass(frozen=True)
class PretrainingSettings(wordpiece.WordPieceSettings):
  """MLM + SSO / NSP pairs; source 'text_files' or 'tfds' (wikipedia)."""
  name: str = 'text_pretraining'
  max_length: int = 512
  objective: str = 'sso'          # 'sso' (StructBERT, the paper) | 'nsp' (BERT) | 'mlm' (only)
  source: str = 'text_files'
  # Globs of plain text files: documents separated by blank lines, a sentence per line.
  files: dict = dataclasses.field(default_factory=lambda: {
      split: os.path.join(base.default_data_dir(), 'corpus', folder, '*.txt')
      for split, folder in (('train', 'train'), ('validation', 'validation'),
                            ('test', 'validation'))})
  sentence_split: str = 'line'    # 'line' | 'regex' (split after . ! ?) | 'paragraph'
  tfds_name: str = 'wikipedia/20230601.en'   # source='tfds': TFDS wikipedia (has only 'train')
  tfds_splits: dict = base.mapping(train='train[20000:]', validation='train[:10000]',
                                   test='train[10000:20000]')
  mask_probability: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 5            # training passes over every chunk per epoch (official: 5)
  eval_seed: int = 0


base.register_dataset('text_pretraining', wordpiece.spec(info, source, preprocess,
                                                         PretrainingSettings))
