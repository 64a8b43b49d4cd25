"""The dataset registry and the small helpers every dataset file shares.

A dataset is a `DatasetSpec`: its typed settings as defaulted (`defaults`: a frozen dataclass
of its family; `settings(config.data)` makes them from a run's config), how to describe it
(`info`), where its raw records come from (`source`, any random-access sequence grain can read)
and how one raw record becomes one example (`preprocess`, given a numpy Generator at train time
for augmentation and None at eval time); the pipeline does the rest, identically for every
dataset. Whatever else is known by the dataset's name is declared there too (`record`,
`run_files`, `generated`). The dataset files fill `DATASETS` with `register_dataset(name, spec)`.

`DataSettings` holds the fields every dataset has; each family's subclass adds its own.
`get_data_config(name)`, the defaults as a ConfigDict, is not locked; the experiment config that
embeds one locks it.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np
from absl import logging

from poolformers_jax.data import bad_records
from poolformers_jax.errors import ConfigKeyError
from poolformers_jax.registry import DATASETS, register_dataset  # noqa: F401  (re-exported)

Record = Any
Example = dict[str, np.ndarray]

SPLITS = ('train', 'validation', 'test')


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What the trainer and the model need to know about a dataset."""
  name: str
  task: str                      # a registered task: 'classification', ...
  num_classes: int               # classes; for 'lm' the vocabulary size (targets are tokens)
  vocab_size: int | None      # token vocabulary size incl. padding id 0; None for images
  input_shape: tuple[int, ...]   # one example: (L,), (2, L) or (H, W, C)
  split_sizes: Mapping[str, int]
  # Model settings the data decides, filled into config.model where left unset (None), e.g.
  # the [CLS] / [SEP] ids of a WordPiece vocabulary.
  model_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  # Training rows are packed by grain's FirstFitPackIterDataset, which adds `<key>_segment_ids`
  # and `<key>_positions` beside every packed array of the example.
  packed: bool = False


def default_data_dir() -> str:
  return os.environ.get('POOLFORMERS_DATA_DIR', 'data_cache')


def under_data_dir(*parts: str) -> Any:
  """A settings field whose default is a folder under the default data_dir (read when the
  settings are made)."""
  return dataclasses.field(default_factory=lambda: os.path.join(default_data_dir(), *parts))


def mapping(**entries: Any) -> Any:
  """A settings field whose default is a fresh dict of `entries` (TFDS splits, files, ...)."""
  return dataclasses.field(default_factory=lambda: dict(entries))


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The settings every dataset has; each family's subclass adds its own."""
  name: str = ''                 # the dataset (a key of data.DATASETS)
  # where TFDS array_record files live / are generated (env POOLFORMERS_DATA_DIR, else
  # ./data_cache, which git ignores); for enwik8/text8 the folder of the zip file
  data_dir: str = dataclasses.field(default_factory=default_data_dir)
  max_length: int = 0            # tokens examples are padded (with id 0) or cut to; 0 for images
  too_long: str = 'truncate'     # keep the first max_length tokens (LRA) | 'error': raise
  # False: a damaged record of a data file ends the run naming it; True: it is skipped, counted
  # and reported (data/bad_records.py)
  skip_bad_records: bool = False
  repeated_augmentation: int = 1  # each train example shown this many times in a row (DeiT: 3)
  worker_count: int = 0          # grain worker processes; 0 = in-process (no start-up cost)
  read_threads: int = 4          # grain threads reading records ahead in the main process
  # Self-pretraining on the inputs alone (0 / False = the dataset's own task): mask_rate > 0,
  # that share of real tokens masked and predicted; next_tokens, each real token predicted from
  # the ones before it (a causal model).
  mask_rate: float = 0.0
  next_tokens: bool = False


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  info: Callable[[Any], DatasetInfo]                 # settings -> DatasetInfo
  source: Callable[[Any, str], Sequence[Record]]      # (settings, split) -> records
  preprocess: Callable[[Record, Any, np.random.Generator | None], Example]
  defaults: Callable[[], DataSettings]               # the dataset's settings as defaulted
  # Optional (grain IterDataset of examples, settings, rows per batch, seed) -> batches of
  # packed rows; used for training when the settings' `pack` is True (translation).
  pack: Callable[[Any, Any, int, int], Any] | None = None
  # The info from the dataset's known constants, reading no file (split sizes where known, else
  # empty): enough to build the model when the data is absent (the summary tool).
  shapes: Callable[[Any], DatasetInfo] | None = None
  # load_run's raw inputs: (a user's raw input, settings) -> the record `source` would give for
  # it (any valid label). None: the dataset's runs take no raw inputs (a pre-training corpus).
  record: Callable[[Any, Any], Record] | None = None
  # load_run's generate: (generated token ids, settings) -> the text they stand for, the
  # inverse of `record` then `preprocess`. None: the dataset's runs generate no text.
  text: Callable[[Any, Any], str] | None = None
  # settings -> files training writes beside the data that a trained run reads back (a
  # vocabulary it trained).
  run_files: Callable[[Any], Sequence[str]] | None = None
  # settings -> True where the data is made on first use, not read from files: nothing to
  # fetch (reproduce's data check does not make it).
  generated: Callable[[Any], bool] | None = None


def get_spec(name: str) -> DatasetSpec:
  """The registered spec of dataset `name` (config.data.name)."""
  return DATASETS[name]


def get_data_config(name: str) -> ml_collections.ConfigDict:
  """The defaults of `config.data` for the registered dataset `name` (unlocked)."""
  return ml_collections.ConfigDict(dataclasses.asdict(DATASETS[name].defaults()))


def settings(data_config: ml_collections.ConfigDict) -> DataSettings:
  """A run's `config.data` as its dataset's typed settings, what every data function takes; a
  key the dataset does not have is a ConfigKeyError. Keys a config saved by an older version
  lacks keep the dataset's defaults."""
  defaults = get_spec(data_config.name).defaults()
  known = [field.name for field in dataclasses.fields(defaults)]
  given = data_config.to_dict()
  unknown = [key for key in given if key not in known]
  if unknown:
    raise ConfigKeyError(f'config.data.{unknown[0]} is not a setting of dataset '
                         f'{data_config.name!r}; remove it (its settings: {", ".join(known)})')
  return dataclasses.replace(defaults, **given)


class DataNotFoundError(FileNotFoundError):
  """A dataset's files are missing; the message names the path and what to do."""


def require_file(path: str, what_to_do: str) -> str:
  if not os.path.exists(path):
    raise DataNotFoundError(f'{path} not found: {what_to_do}')
  return path


def check_split(split: str) -> str:
  if split not in SPLITS:
    raise ValueError(f'split={split!r} is not one of {SPLITS}.')
  return split


def fit_length(ids: np.ndarray, max_length: int, too_long: str,
               what: str = 'sequence') -> np.ndarray:
  """Pads `ids` (last axis) with 0 to `max_length`; longer inputs are cut or rejected.

  too_long='truncate' keeps the first `max_length` tokens (what the LRA pipelines do);
  too_long='error' raises, for runs that must see every token.
  """
  length = ids.shape[-1]
  if length > max_length:
    if too_long == 'error':
      raise ValueError(f'{what} has {length} tokens > config.data.max_length={max_length}; '
                       "raise max_length or set config.data.too_long='truncate'.")
    if too_long != 'truncate':
      raise ValueError(f"config.data.too_long={too_long!r} must be 'truncate' or 'error'.")
    return np.asarray(ids[..., :max_length], np.int32)
  out = np.zeros(ids.shape[:-1] + (max_length,), np.int32)   # cheaper per call than np.pad
  out[..., :length] = ids
  return out


def process_share(batch_size: int, what: str, process_count: int,
                  devices: int | None = None) -> int:
  """The rows each process holds of a global batch of `batch_size`, checked to split evenly over
  the processes and, with `devices` (the mesh's), over the devices too."""
  if devices is not None:
    if batch_size % devices or batch_size % process_count:
      raise ValueError(f'{what}={batch_size} must be divisible by the number of devices '
                       f'({devices}) and processes ({process_count}); use a multiple of {devices}')
  elif batch_size % process_count:
    raise ValueError(f'{what}={batch_size} is not divisible by process_count={process_count}.')
  if batch_size < process_count:
    raise ValueError(f'{what}={batch_size} is smaller than process_count={process_count}.')
  return batch_size // process_count


def expand_path(path: str) -> str:
  return os.path.abspath(os.path.expanduser(path))


@dataclasses.dataclass(frozen=True)
class LineCheck:
  """How LineFile checks each line as it indexes the file (data/bad_records.py): `problem` (a
  function of the line's bytes) says what is wrong with a bad line, None for a good one; a bad
  line is refused (a DataFault naming the file and line and ending in `todo`, where a good copy
  comes from), or left out and counted with `skip`."""
  problem: Callable[[bytes], str | None]
  todo: str
  skip: bool = False


class LineFile:
  """Random access to the non-empty lines of a large text file, each turned into a record by
  `parse` (a picklable function of the line; no `parse`: the line itself). Picklable, thread-safe
  (every read opens the file), 16 bytes of memory per line: the LRA TSV files are ~1 GB.
  `check`: each line checked as the file is indexed."""

  def __init__(self, path: str, skip_header: bool = False,
               parse: Callable[[str], Any] | None = None, check: LineCheck | None = None):
    self.path, self.parse = path, parse
    offsets, bad = [], 0
    with open(path, 'rb') as f:
      self.header = f.readline().rstrip(b'\r\n').decode('utf-8') if skip_header else None
      position = f.tell()
      for number, line in enumerate(f, 2 if skip_header else 1):
        problem = check.problem(line) if check is not None and line.strip() else None
        if problem is not None and check is not None:
          if not check.skip:
            raise bad_records.bad_line(path, number, problem, check.todo)
          bad += 1
        elif line.strip():
          offsets.append((position, len(line)))
        position += len(line)
    self._offsets = np.asarray(offsets, np.int64).reshape(-1, 2)
    if bad:
      bad_records.count_skipped(path, bad)
      logging.warning('%s: skipped %d bad lines (config.data.skip_bad_records)', path, bad)

  def __len__(self) -> int:
    return len(self._offsets)

  def line_number(self, index: int) -> int:
    """The line (1-based, as editors count) of record `index`, for an error that names it."""
    with open(self.path, 'rb') as f:
      return f.read(int(self._offsets[index][0])).count(b'\n') + 1

  def __getitem__(self, index: int) -> Any:
    start, size = self._offsets[index]
    with open(self.path, 'rb') as f:
      f.seek(int(start))
      line = f.read(int(size)).decode('utf-8').rstrip('\r\n')
    if self.parse is None:
      return line
    try:
      return self.parse(line)
    except ValueError as error:
      raise ValueError(f'{self.path} line {index}: {error}') from None

  def __repr__(self) -> str:
    return f'LineFile({self.path!r}, {len(self)} lines)'


def image_record(raw, settings) -> dict:
  """A user's image as the record of the image datasets (their `record`, load_run): uint8
  [H, W, 3], or [H, W] made [H, W, 1]."""
  del settings
  image = np.asarray(raw)
  if image.dtype != np.uint8:
    raise ValueError(f'images are uint8 arrays [H, W, 3] or [H, W]; got {image.dtype} '
                     f'{tuple(image.shape)}')
  return {'image': image[..., None] if image.ndim == 2 else image, 'label': 0}


def byte_ids(text) -> np.ndarray:
  """Byte-level tokens: UTF-8 byte + 1, so that id 0 stays padding (vocabulary 257)."""
  if isinstance(text, str):
    text = text.encode('utf-8')
  return np.frombuffer(bytes(text), np.uint8).astype(np.int32) + 1


BYTE_VOCAB_SIZE = 257


def build_command(name: str, data_dir: str) -> str:
  """The command that prepares TFDS dataset `name` as array_record (docs/data.md)."""
  return f'.venv-data/bin/python poolformers_jax/data/build_tfds.py {name} --data_dir={data_dir}'


def tfds_source(name: str, split: str, data_dir: str):
  """`tfds.data_source` of a prepared array_record dataset (DataNotFoundError if missing)."""
  import tensorflow_datasets as tfds
  data_dir = expand_path(data_dir)
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except (AssertionError, FileNotFoundError, NotImplementedError, ValueError) as e:
    raise DataNotFoundError(
        f'{data_dir}/{name} is not prepared as array_record ({type(e).__name__}); run '
        f'`{build_command(name, data_dir)}` (network needed; `make data-env` makes .venv-data), '
        'or copy a folder prepared elsewhere here.') from e
  todo = f'run `{build_command(name, data_dir)}` again, or copy a folder prepared elsewhere here'
  return bad_records.checked_shards(source, f'TFDS {name}', todo + ' again')


def tfds_split_source(settings, split: str, name: str | None = None):
  """`tfds_source` of the TFDS split config.data.tfds_splits names for `split`, of dataset `name`
  (default config.data.tfds_name)."""
  return tfds_source(name or settings.tfds_name, settings.tfds_splits[check_split(split)],
                     settings.data_dir)
