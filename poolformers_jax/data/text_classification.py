"""text_classification: long texts (PoNet's run_long_classification.py; WordPiece: wordpiece.py),
from TFDS (imdb_reviews) or JSONL / CSV files (HND, Yelp-5, Arxiv-11: a text and a label field;
labels sorted as the official `label_list`); inputs [2, L] with one SMP segment per sentence
(Arxiv: per paragraph).
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import json
from typing import Any

import numpy as np

from poolformers_jax.data import base, wordpiece


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


def source(settings, split):
  if settings.source == 'tfds':
    return base.tfds_split_source(settings, split)
  if settings.source == 'files':
    return _file_records(base.expand_path(settings.files[base.check_split(split)]))
  raise ValueError(f"config.data.source={settings.source!r}; choose 'tfds' or 'files'.")


def _label_key(value) -> Any:
  """A label as a sortable key: integers (also '7' from CSV) as int, else the string."""
  value = value.item() if isinstance(value, np.generic) else value
  text = wordpiece.as_text(value).strip()
  return int(text) if text.lstrip('-').isdigit() else text


@functools.lru_cache(maxsize=8)
def _file_labels(path: str, label_field: str) -> tuple:
  """The official label_list: the sorted distinct labels of the train split (numbers sort as
  numbers, so Arxiv-11's 0..10 keep their order)."""
  keys = {_label_key(r[label_field]) for r in _file_records(path)}
  return tuple(sorted(keys, key=lambda k: (isinstance(k, str), k)))


def _labels(settings) -> tuple | None:
  if settings.source == 'tfds':
    return None                                   # TFDS labels are class ids already
  return _file_labels(base.expand_path(settings.files['train']), settings.label_field)


def preprocess(record, settings: LongTextSettings, rng: np.random.Generator | None = None):
  del rng
  vocab = wordpiece.vocab_of(settings)
  text = wordpiece.as_text(record[settings.text_field])
  sentences = vocab.encode(wordpiece.split_sentences(text, settings.sentence_split))
  budget, kept = settings.max_length - 2, []
  for sentence in sentences:                     # truncate to max_length, as the tokenizer does
    kept.append(sentence[:max(budget, 0)])
    budget -= len(kept[-1])
  inputs = wordpiece.pair_inputs(kept, None, vocab.cls, vocab.sep, settings.max_length)
  label = record[settings.label_field]
  labels = _labels(settings)
  if labels is not None:
    key = _label_key(label)
    if key not in labels:
      raise ValueError(f'label {key!r} is not among the train labels {list(labels)}.')
    label = labels.index(key)
  return {'inputs': inputs, 'targets': np.int32(label)}


def info(settings, *, from_files: bool = True):
  vocab_size, special = wordpiece.vocab_sizes(settings, from_files)
  labels = _labels(settings) if from_files else None
  return base.DatasetInfo(
      name='text_classification', task='text_classification',
      num_classes=len(labels) if labels is not None else int(settings.num_classes),
      vocab_size=vocab_size, input_shape=(2, settings.max_length),
      split_sizes=wordpiece.split_sizes(source, settings, from_files), model_defaults=special)


@dataclasses.dataclass(frozen=True)
class LongTextSettings(wordpiece.WordPieceSettings):
  name: str = 'text_classification'
  max_length: int = 4096          # PoNet's long-text length
  source: str = 'tfds'            # 'tfds' | 'files' (JSONL / CSV)
  tfds_name: str = 'imdb_reviews/plain_text'
  tfds_splits: dict = base.mapping(   # the official IMDb setting
      train='train', validation='test', test='test')
  num_classes: int = 2            # TFDS only; files: the distinct train labels
  files: dict = base.mapping(train='', validation='', test='')
  text_field: str = 'text'
  label_field: str = 'label'
  sentence_split: str = 'regex'   # SMP segments: sentences ('paragraph' for Arxiv-11)


def record(raw, settings):
  """A user's document (load_run) as a record, with a valid label of the run's files."""
  labels = _labels(settings)
  return {settings.text_field: raw, settings.label_field: labels[0] if labels else 0}


base.register_dataset('text_classification', wordpiece.spec(info, source, preprocess,
                                                            LongTextSettings, record))
