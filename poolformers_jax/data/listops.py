"""ListOps (Nangia & Bowman 2018, as the Long Range Arena makes it): the reader of its two sources,
'generated' (the default: made from a seed on first use by generators/listops.py and stored as
TFDS array_record) and 'tsv' (the LRA release's files). Tokens: listops_tokens.py.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os

import numpy as np

from poolformers_jax.data import bad_records, base
from poolformers_jax.data.listops_tokens import (
  NUM_CLASSES,
  TOKENIZERS,
  TSV_FILES,
  VOCAB,
  encode,
  encode_text,
  read_ids,
)


class InMemoryRecords:
  """A split's records ({'tokens': uint8 ids, 'label'}) read once, in large batched reads, into
  one flat array (~300 MB for the paper's 96 000 trees); a record is then two slices. Read one
  at a time from array_record, the records capped the training input (docs/data.md). The
  records, and so every batch, are the same."""

  CHUNK = 4096

  def __init__(self, records, name: str):
    self.name = name
    n = len(records)
    read = getattr(records, '__getitems__', None) or (lambda ix: [records[i] for i in ix])
    tokens, labels = [], []
    for start in range(0, n, self.CHUNK):
      for record in read(range(start, min(n, start + self.CHUNK))):
        if record is not None:   # None: a bad line left out (TsvSource, skip_bad_records)
          tokens.append(np.asarray(record['tokens'], np.uint8))
          labels.append(int(record['label']))
    self.labels = np.asarray(labels, np.int32)
    self.offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in tokens], dtype=np.int64)])
    self.tokens = np.concatenate(tokens) if tokens else np.zeros(0, np.uint8)
    self.tokens.flags.writeable = False   # records hand out views of it

  def __len__(self):
    return len(self.labels)

  def __getitem__(self, index):
    index = int(index)
    if not 0 <= index < len(self.labels):
      raise IndexError(f'{self.name}: record {index} of {len(self.labels)}')
    return {'tokens': self.tokens[self.offsets[index]:self.offsets[index + 1]],
            'label': self.labels[index]}

  def __repr__(self):
    return f'InMemoryRecords({self.name!r}, {len(self)} records, {self.tokens.nbytes} token bytes)'


def generated_source(settings, split: str):
  """A split of the generated ListOps (TFDS array_record, made on first use), in memory.

  The reader's one import of the generator is here, inside the function: only `generated` data
  (DatasetSpec.generated) needs it, so TSV files, `info` and a model's build never load it."""
  from poolformers_jax.data.generators import listops as generator
  return _in_memory(generator.prepare(settings.data_dir, **settings.generator), split)


@functools.lru_cache(maxsize=6)
def _in_memory(builder, split: str) -> InMemoryRecords:
  records = bad_records.checked_shards(builder.as_data_source(split=split), 'the generated ListOps',
                                       f'delete {builder.data_dir}: it is generated again on '
                                       'first use')
  return InMemoryRecords(records, f'{builder.info.full_name} {split}')


# Official LRA TSV files (header `Source\tTarget`), read lazily from byte offsets.

RELEASE_TODO = 'download the LRA release again (lra_release.gz, listops-1000/)'


def line_problem(line: bytes) -> str | None:
  """What is wrong with a `Source\tTarget` line (a line cut short has one field), or None."""
  fields = line.rstrip(b'\r\n').split(b'\t')
  if len(fields) != 2:
    return (f'{len(fields)} tab-separated fields where a ListOps line has 2 (Source, Target): '
            'the line is cut short or damaged')
  if not fields[1].strip().isdigit() or int(fields[1]) >= NUM_CLASSES:
    return f'the label {fields[1][:20].decode("utf-8", "replace")!r} is not a class 0-9'
  return None


class TsvSource:
  """Random access over a `Source\tTarget` TSV: records are {'tokens', 'label'}; each line is
  checked as the file is indexed (`skip`: bad lines left out and counted, data/bad_records.py)."""

  def __init__(self, path: str, skip: bool = False):
    self.skip = skip
    self.lines = base.LineFile(path, skip_header=True,
                               check=base.LineCheck(line_problem, RELEASE_TODO, skip))
    header = self.lines.header or ''
    if header.split('\t')[:2] != ['Source', 'Target']:
      raise ValueError(f'{path}: expected the header "Source<TAB>Target", '
                       f'got {header[:40]!r}.')

  def __len__(self):
    return len(self.lines)

  def __getitem__(self, index):
    source, target = self.lines[index].split('\t')[:2]
    try:
      tokens = encode(source.split())
    except ValueError as error:   # a token outside the vocabulary: checked here, where it is read
      raise bad_records.bad_line(self.lines.path, self.lines.line_number(index),
                                 str(error).rstrip('.'), RELEASE_TODO) from None
    return {'tokens': tokens, 'label': int(target)}

  def __getitems__(self, indices):
    """Records `indices`; with `skip`, a line with a token outside the vocabulary is None,
    counted (InMemoryRecords leaves it out, as LineFile leaves out the lines it checks)."""
    return [self._read_or_skip(index) for index in indices]

  def _read_or_skip(self, index):
    try:
      return self[index]
    except bad_records.BadRecord as error:
      if not self.skip:
        raise
      bad_records.count_skipped(self.lines.path)
      logging.warning('skipped a bad record: %s', error)
      return None

  def __repr__(self):
    return f'TsvSource({self.lines.path!r}, {len(self)} examples)'


def tsv_source(settings, split: str):
  path = os.path.join(base.expand_path(settings.tsv_dir), TSV_FILES[split])
  base.require_file(path, 'download the LRA release (lra_release.gz, listops-1000/) and set '
                    "config.data.tsv_dir to its folder, or use config.data.source='generated'.")
  return _cached_tsv(path, settings.skip_bad_records)


@functools.lru_cache(maxsize=6)
def _cached_tsv(path: str, skip: bool) -> InMemoryRecords:
  return InMemoryRecords(TsvSource(path, skip), path)


GENERATOR_DEFAULTS = dict(seed=0, min_tokens=500, max_tokens=2000, max_depth=10, max_args=10,
                          num_train=96000, num_validation=2000, num_test=2000)


@dataclasses.dataclass(frozen=True)
class ListOpsSettings(base.DataSettings):
  name: str = 'listops'
  max_length: int = 2048
  source: str = 'generated'       # 'generated' (seeded, auto-prepared) | 'tsv' (LRA release files)
  tsv_dir: str = base.under_data_dir('lra_release', 'listops-1000')
  keep_parentheses: bool = False  # the official strings' '(' ')' carry nothing beyond ']'
  tokenizer: str = 'brackets'     # | 'alphanumeric': the 2020 LRA pipeline's, no brackets
  # generators/listops.py's keywords (FIELDS)
  generator: dict = base.mapping(**GENERATOR_DEFAULTS)


_SOURCES = {'generated': generated_source, 'tsv': tsv_source}


def _check_source(settings: ListOpsSettings) -> None:
  if settings.source not in _SOURCES:
    raise ValueError(f'config.data.source={settings.source!r} is not a ListOps source; '
                     f'choose one of {sorted(_SOURCES)}.')
  tokenizer = settings.tokenizer
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'config.data.tokenizer={tokenizer!r} is not a ListOps tokenizer; '
                     f'choose one of {list(TOKENIZERS)}.')
  if tokenizer == 'alphanumeric' and settings.keep_parentheses:
    raise ValueError("config.data.tokenizer='alphanumeric' drops '(' ')' but "
                     'config.data.keep_parentheses=True keeps them; set keep_parentheses=False '
                     "or tokenizer='brackets'.")


def source(settings: ListOpsSettings, split: str):
  base.check_split(split)
  _check_source(settings)
  return _SOURCES[settings.source](settings, split)


def preprocess(record, settings: ListOpsSettings, rng: np.random.Generator | None = None):
  del rng  # no augmentation
  ids = read_ids(np.asarray(record['tokens']), settings.tokenizer,
                 settings.keep_parentheses)
  inputs = base.fit_length(ids, settings.max_length, settings.too_long, 'ListOps example')
  return {'inputs': inputs, 'targets': np.int32(record['label'])}


def info(settings: ListOpsSettings, *, from_files: bool = True) -> base.DatasetInfo:
  """from_files=False (`shapes`): no split sizes and no file read, what a trained run's model
  needs where its TSV files are absent (load_run, summary)."""
  _check_source(settings)
  g, sizes = settings.generator, {}
  if from_files and settings.source == 'generated':
    sizes = {'train': g['num_train'], 'validation': g['num_validation'], 'test': g['num_test']}
  elif from_files:
    sizes = {split: len(tsv_source(settings, split)) for split in base.SPLITS}
  return base.DatasetInfo(name='listops', task='classification', num_classes=NUM_CLASSES,
                          vocab_size=len(VOCAB), input_shape=(settings.max_length,),
                          split_sizes=sizes)


def record(raw, settings: ListOpsSettings):
  """A user's ListOps string (with or without parentheses) or token list, as a record."""
  text = raw if isinstance(raw, str) else ' '.join(raw)
  return {'tokens': encode_text(text, settings.tokenizer), 'label': 0}


base.register_dataset('listops', base.DatasetSpec(
    info=info, source=source, preprocess=preprocess, defaults=ListOpsSettings, record=record,
    shapes=functools.partial(info, from_files=False),
    generated=lambda settings: settings.source == 'generated'))
