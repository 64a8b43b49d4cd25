"""glue: TFDS glue/<task> (WordPiece: wordpiece.py), "[CLS] a [SEP] (b [SEP])", longest-first
truncation to max_length (128 as the official fine-tuning); 'test' reads the labelled dev set
(GLUE's test labels are hidden), except MNLI: validation = matched, test = mismatched. STS-B is a
regression.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poolformers_jax.data import base, wordpiece

# task -> (text keys, number of classes; 1 = regression)
TASKS = {
    'cola': (('sentence',), 2), 'sst2': (('sentence',), 2), 'mrpc': (('sentence1', 'sentence2'), 2),
    'qqp': (('question1', 'question2'), 2), 'stsb': (('sentence1', 'sentence2'), 1),
    'mnli': (('premise', 'hypothesis'), 3), 'qnli': (('question', 'sentence'), 2),
    'rte': (('sentence1', 'sentence2'), 2), 'wnli': (('sentence1', 'sentence2'), 2),
}


def _task(settings):
  if settings.task not in TASKS:
    raise ValueError(f'config.data.task={settings.task!r}; choose one of {sorted(TASKS)}.')
  return TASKS[settings.task]


def source(settings, split):
  _task(settings)
  import tensorflow_datasets.text.glue  # noqa: F401  registers glue/<task> (no TF needed)
  return base.tfds_split_source(settings, split, f'glue/{settings.task}')


def truncate_longest_first(a: np.ndarray, b: np.ndarray | None, max_tokens: int):
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


def preprocess(record, settings: GlueSettings, rng: np.random.Generator | None = None):
  del rng
  keys, num_classes = _task(settings)
  vocab = wordpiece.vocab_of(settings)
  texts = vocab.encode([wordpiece.as_text(record[k]) for k in keys])
  a, b = texts[0], texts[1] if len(texts) > 1 else None
  a, b = truncate_longest_first(a, b, settings.max_length - len(texts) - 1)
  inputs = wordpiece.pair_inputs([a], None if b is None else [b], vocab.cls, vocab.sep,
                                  settings.max_length)
  label = record['label']
  target = np.float32(label) if num_classes == 1 else np.int32(label)
  return {'inputs': inputs[0], 'targets': target}


def info(settings, *, from_files: bool = True):
  _, num_classes = _task(settings)
  vocab_size, special = wordpiece.vocab_sizes(settings, from_files)
  return base.DatasetInfo(
      name='glue', task='regression' if num_classes == 1 else 'text_classification',
      num_classes=num_classes, vocab_size=vocab_size, input_shape=(settings.max_length,),
      split_sizes=wordpiece.split_sizes(source, settings, from_files), model_defaults=special)


@dataclasses.dataclass(frozen=True)
class GlueSettings(wordpiece.WordPieceSettings):
  name: str = 'glue'
  max_length: int = 128           # the official fine-tuning length
  task: str = 'cola'              # cola sst2 mrpc qqp stsb mnli qnli rte wnli
  # GLUE's test labels are hidden: 'test' = the dev set (MNLI: validation matched, test mismatched).
  tfds_splits: dict = base.mapping(train='train', validation='validation', test='validation')


def record(raw, settings):
  """A user's sentence, or pair of sentences for the pair tasks (load_run), as a record."""
  keys, _ = TASKS[settings.task]
  texts = (raw,) if isinstance(raw, str) else tuple(raw)
  if len(texts) != len(keys):
    raise ValueError(f'GLUE {settings.task} reads {len(keys)} text(s) {keys} per input; got '
                     f'{len(texts)}')
  return {**dict(zip(keys, texts)), 'label': 0}


base.register_dataset('glue', wordpiece.spec(info, source, preprocess, GlueSettings, record))
