"""grain pipelines shared by every dataset: the train iterator, the eval iterator, the info.

Train: all records of the split -> shuffle (a global permutation, new every epoch, from the
seed) -> repeat forever -> [repeated augmentation, DeiT] -> preprocess (with a numpy Generator
from the seed and the example's global position) -> chunks of b = batch_size // process_count ->
process p keeps chunks p, p + P, p + 2P, ..., i.e. rows [p*b, (p+1)*b) of every global batch.
So global batch k (and its augmentation) is the same whatever the process count, and each process
reads only its own rows (grain MapDatasets are lazy). Datasets with a `pack` step (translation)
instead give process p the examples p, p + P, ... to pack into its own rows. `get_state()` /
`set_state()` resume exactly.

Eval: every example of the split exactly once across processes (process p reads examples
p, p + P, ...); all processes yield the same number of batches (collectives need that), the last
filled with zero examples whose 'mask' is False. `drop_last=b` keeps the first N - N % b
examples (PyTorch's DataLoader(drop_last=True)). `batch_size` is global, as config.batch_size.

Every function takes the dataset's typed settings (`base.settings(config.data)`).

Eval stream (`make_eval_stream`, config.eval_num_batches > 0): a split read like the training
data (reshuffled every epoch, endless), for validating on a fixed number of batches as the
Nystromformer / PoNet LRA code does; not augmented. `Streams` saves the positions of the train
iterator and this stream as one checkpoint item.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from poolformers_jax import extras

extras.require('train', __name__)   # grain reads the data

# pylint: disable=g-import-not-at-top,wrong-import-position
import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from poolformers_jax.data import bad_records, base  # noqa: E402
from poolformers_jax.data.info import Preprocess  # noqa: E402


def _read_options(settings) -> grain.ReadOptions:
  threads = int(settings.read_threads)
  return grain.ReadOptions(num_threads=threads, prefetch_buffer_size=max(2 * threads, 1))


def _to_iterator(ds: grain.MapDataset, settings) -> grain.DatasetIterator:
  return _start(ds.to_iter_dataset(_read_options(settings)), settings)


def _start(it_ds: grain.IterDataset, settings) -> grain.DatasetIterator:
  workers = int(settings.worker_count)
  if workers > 0:
    it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return iter(it_ds)


def _records(settings: base.DataSettings, split: str):
  """The records of `split`; a bad one met while reading (an image that does not decode) is
  skipped where skip_bad_records asks for it (data/bad_records.py)."""
  records = base.get_spec(settings.name).source(settings, base.check_split(split))
  return bad_records.guarded(records, skip=bool(settings.skip_bad_records))


def _endless(records, seed: int) -> grain.MapDataset:
  """Every record once per epoch, in a new permutation every epoch (from the seed), forever."""
  return grain.MapDataset.source(records).seed(seed).shuffle().repeat()


class RepeatedAugmentation(grain.MapDataset):
  """DeiT's repeated augmentation (RASampler) on the global order: epoch e shows the first
  epoch_length / repeats images of its permutation, each `repeats` times in a row, at different
  positions, so random_map augments each differently; the copies of an image fall in one global
  batch, as DeiT's do across GPUs. (DeiT also rounds the epoch down to a multiple of 256.)"""

  def __init__(self, parent: grain.MapDataset, repeats: int, epoch_length: int):
    super().__init__(parent)
    self._repeats, self._epoch_length = repeats, epoch_length

  def __len__(self) -> int:
    return len(self._parent)

  def __str__(self) -> str:
    return f'RepeatedAugmentation(repeats={self._repeats})'

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    epoch, position = divmod(index, self._epoch_length)
    return self._parent[epoch * self._epoch_length + position // self._repeats]


def make_train_iterator(settings: base.DataSettings, *, batch_size: int, seed: int,
                        process_index: int = 0, process_count: int = 1) -> grain.DatasetIterator:
  """Infinite shuffled iterator of this process's rows of the global training batches of
  `batch_size` (config.batch_size), shuffled from `seed` (config.seed)."""
  batch = base.process_share(batch_size, 'config.batch_size', process_count)
  spec = base.get_spec(settings.name)
  records = _records(settings, 'train')
  if len(records) == 0:
    raise ValueError(f'the train split of {settings.name} is empty.')
  examples = _endless(records, seed)
  repeats = int(settings.repeated_augmentation)
  if repeats > 1:
    examples = RepeatedAugmentation(examples, repeats, len(records))
  examples = examples.random_map(Preprocess(settings))
  if spec.pack is not None and getattr(settings, 'pack', False):
    # Packed rows: each process packs its own examples p, p + P, ... into rows of its batch.
    per_process = examples[process_index::process_count].to_iter_dataset(
        _read_options(settings))
    return _start(spec.pack(per_process, settings, batch, seed), settings)
  # Chunk c of b examples is rows [p*b, (p+1)*b) of global batch c // P, with p = c % P.
  chunks = examples.batch(batch, drop_remainder=True)
  return _to_iterator(chunks[process_index::process_count], settings)


class _EvalExample:
  """Index i of the padded per-process range -> example (mask True) or zeros (mask False); only
  the first `num_examples` records count."""

  def __init__(self, records, settings, process_index: int, process_count: int,
               num_examples: int):
    self.records, self.preprocess = records, Preprocess(settings)
    self.process_index, self.process_count = process_index, process_count
    self.num_examples = num_examples
    self._padding: dict[str, Any] | None = None   # a zero example, made on first use

  def __call__(self, i: int):
    index = self.process_index + i * self.process_count
    record = None
    if index < self.num_examples:   # a bad record skipped is padding: no example counts twice
      skipping = isinstance(self.records, bad_records.SkippingRecords)
      record = self.records.get(index) if skipping else self.records[index]
    if record is not None:
      return dict(self.preprocess(record), mask=np.bool_(True))
    if self._padding is None:
      example = self.preprocess(self.records[0])
      self._padding = jax.tree.map(np.zeros_like, example)   # targets may be a dict
    return dict(self._padding, mask=np.bool_(False))


def eval_num_batches(num_examples: int, batch_size: int, process_count: int) -> int:
  """Batches every process yields for a split of `num_examples` (global batch_size)."""
  per_process = base.process_share(batch_size, 'eval batch_size', process_count)
  return math.ceil(math.ceil(num_examples / process_count) / per_process)


def make_eval_iterator(settings: base.DataSettings, split: str, batch_size: int,
                       process_index: int = 0, process_count: int = 1,
                       drop_last: int = 0) -> Iterator[dict[str, Any]]:
  """One pass over `split` in global batches of `batch_size`: this process's batches, with 'mask'
  (False = padding). `drop_last` > 0: only the first N - N % drop_last examples."""
  per_process = base.process_share(batch_size, 'eval batch_size', process_count)
  records = _records(settings, split)
  num_examples = len(records) - (len(records) % drop_last if drop_last > 0 else 0)
  if num_examples == 0:
    raise ValueError(f'split {split!r} of {settings.name} is empty'
                     + (f' (fewer examples than drop_last={drop_last})' if len(records) else '')
                     + '.')
  num_batches = eval_num_batches(num_examples, batch_size, process_count)
  ds = grain.MapDataset.range(num_batches * per_process).map(
      _EvalExample(records, settings, process_index, process_count, num_examples))
  return _to_iterator(ds.batch(per_process), settings)


class _StreamExample:
  """Picklable record -> example with 'mask' True (no augmentation: rng None)."""

  def __init__(self, settings):
    self.preprocess = Preprocess(settings)

  def __call__(self, record):
    return dict(self.preprocess(record), mask=np.bool_(True))


def make_eval_stream(settings: base.DataSettings, split: str, batch_size: int, seed: int,
                     process_index: int = 0, process_count: int = 1) -> grain.DatasetIterator:
  """Endless reshuffled batches of `split`: this process's rows of each global batch."""
  per_process = base.process_share(batch_size, 'eval batch_size', process_count)
  records = _records(settings, split)
  if len(records) == 0:
    raise ValueError(f'split {split!r} of {settings.name} is empty.')
  chunks = _endless(records, seed).map(_StreamExample(settings)).batch(
      per_process, drop_remainder=True)
  return _to_iterator(chunks[process_index::process_count], settings)


class Streams:
  """Several iterators' positions as one checkpoint item: {name: state}; with one iterator (no
  eval stream), that iterator's own state."""

  def __init__(self, **iterators):
    self.iterators = {name: it for name, it in iterators.items() if it is not None}

  def get_state(self) -> Any:
    states = {name: it.get_state() for name, it in self.iterators.items()}
    return next(iter(states.values())) if len(states) == 1 else states

  def set_state(self, state: Any) -> None:
    if len(self.iterators) == 1:
      state = {next(iter(self.iterators)): state}
    for name, it in self.iterators.items():
      it.set_state(state[name])
