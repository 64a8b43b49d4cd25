"""A damaged or truncated data file: each fault is an errors.DataFault (exit code 3) whose line
names the file and the record and says where a good copy comes from, raised at the first read
where the format lets it be checked cheaply (each format's check and line: docs/data.md): TSV
lines as base.LineFile indexes them, array_record shards at open (`checked_shards`), records
that do not read when read (`ShardRecords`). With `config.data.skip_bad_records=True` bad lines
and records are skipped instead (`guarded`), each counted (`skipped`) and logged; a zip or a
shard that fails its check at open is refused either way.
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

from absl import logging

from poolformers_jax import errors

SKIP_HINT = 'or set --config.data.skip_bad_records=True to skip such records (counted)'

_lock = threading.Lock()
_skipped: collections.Counter[str] = collections.Counter()
_seen: set[tuple[str, int]] = set()   # (file, position in its split) of the records skipped


class BadRecord(errors.DataFault):
  """One record of a file cannot be read (a line, an image); the rest of the file can.
  `where`: the file, as the count of skipped records names it."""

  def __init__(self, message: str, where: str = ''):
    super().__init__(message)
    self.where = where

  def __reduce__(self):   # grain's worker processes send it back pickled
    return type(self), (str(self), self.where)


def bad_line(path: str, line: int, problem: str, todo: str) -> BadRecord:
  """The error of line `line` (1-based, as editors count) of `path`."""
  return BadRecord(f'{path}:{line}: {problem}; {todo}, {SKIP_HINT}', path)


def count_skipped(where: str, count: int = 1) -> None:
  """Counts `count` records of `where` (a file) as skipped."""
  with _lock:
    _skipped[where] += count


def skipped() -> dict[str, int]:
  """Records skipped in this process so far, by file."""
  with _lock:
    return dict(_skipped)


def report() -> str:
  """How many records were skipped, and from which files (the trainer logs it)."""
  counts = skipped()
  files = ', '.join(f'{where}: {count}' for where, count in sorted(counts.items()))
  return (f'skipped {sum(counts.values())} bad records (config.data.skip_bad_records)'
          + (f': {files}' if files else ''))


class SkippingRecords:
  """`records` whose bad records (BadRecord) are replaced by the next good one: the split keeps
  its length, so batches and the positions a resume restores stay as they were. Each bad record
  is counted and logged once per process, however often it is read."""

  def __init__(self, records: Sequence[Any]):
    self.records = records

  def __len__(self) -> int:
    return len(self.records)

  def __getitem__(self, index: int) -> Any:
    count = len(self.records)
    for step in range(count):
      record = self.get((int(index) + step) % count)
      if record is not None:
        return record
    raise BadRecord(f'every record of {self.records!r} is bad; replace the files')

  def get(self, index: int) -> Any | None:
    """Record `index`, or None where it is bad (what a one-pass evaluation leaves out)."""
    try:
      return self.records[index]
    except BadRecord as error:
      where = error.where or repr(self.records)
      with _lock:
        first = (where, index) not in _seen
        _seen.add((where, index))
      if first:
        count_skipped(where)
        logging.warning('skipped a bad record: %s', error)
      return None

  def __repr__(self) -> str:
    return f'SkippingRecords({self.records!r})'


def guarded(records: Sequence[Any], skip: bool) -> Sequence[Any] | SkippingRecords:
  """`records` as the pipeline reads them: bad ones skipped where the user asked for it
  (`skip`: config.data.skip_bad_records)."""
  return SkippingRecords(records) if skip else records


class ShardRecords:
  """The records of a `tfds.data_source` split, each read as the source reads it; one that does
  not read (a damaged chunk of its shard, a feature that does not decode) raises BadRecord
  naming the shard file, the record's position in it and in the split."""

  def __init__(self, source, what: str, todo: str):
    self.source, self.what, self.todo = source, what, todo
    self.shards = [(shard.filename, shard.skip, shard.take) for shard in _shards(source)]
    self.length = len(source)

  def __len__(self) -> int:
    return self.length

  def _bad(self, index: int, error: Exception) -> BadRecord:
    start = 0
    for filename, skip, take in self.shards:
      if index < start + take:
        return BadRecord(
            f'{filename}: record {skip + index - start} of the array_record shard (record '
            f'{index} of {self.what} split {self.source.split!r}) does not read '
            f'({errors.one_line(str(error))}); {self.todo}, {SKIP_HINT}', filename)
      start += take
    return BadRecord(f'record {index} of {self.what} split {self.source.split!r} does not read '
                     f'({errors.one_line(str(error))}); {self.todo}, {SKIP_HINT}')

  def __getitem__(self, index: int) -> Any:
    index = int(index)
    if not 0 <= index < self.length:
      raise IndexError(f'record {index} of {self.length}')
    try:
      return self.source[index]
    except (OSError, RuntimeError, SyntaxError, ValueError) as error:
      raise self._bad(index, error) from error

  def __getitems__(self, indices: Sequence[int]) -> list[Any]:
    try:
      return self.source.__getitems__(indices)
    except (OSError, RuntimeError, SyntaxError, ValueError):
      return [self[index] for index in indices]   # names the record that does not read

  def __repr__(self) -> str:
    return f'ShardRecords({self.what} {self.source.split!r}, {len(self)} records)'


def _shards(source) -> list[Any]:
  """The file instructions (filename, skip, take, examples_in_shard) of a `tfds.data_source`
  split; none for other sources (tfds.testing.mock_data's: no split in their dataset_info)."""
  from tensorflow_datasets.core.data_sources import array_record
  if not isinstance(source, array_record.ArrayRecordDataSource):
    return []
  try:
    return list(source.dataset_info.splits[source.split].file_instructions)
  except KeyError:
    return []


def checked_shards(source, what: str, todo: str):
  """`source` (a `tfds.data_source` split of `what`) as ShardRecords, after each array_record
  shard's footer and record count are checked against the split's shard lengths in
  dataset_info.json: a shard whose footer does not read (a file cut short has none) or whose
  count differs raises DataFault naming it. Opening a shard reads its footer and index only.
  Other sources are returned as they are."""
  from array_record.python import array_record_module
  shards = _shards(source)
  for shard in shards:
    try:
      reader = array_record_module.ArrayRecordReader(shard.filename, 'readahead_buffer_size:0')
      found = reader.num_records() if reader.ok() else None
      reader.close()
    except (OSError, RuntimeError, ValueError) as error:
      found, problem = None, f'is cut short or damaged ({errors.one_line(str(error))})'
    else:
      problem = ('is cut short or damaged: its footer does not read' if found is None else
                 f'holds {found} records where dataset_info.json says {shard.examples_in_shard}')
    if found != shard.examples_in_shard:
      raise errors.DataFault(f'{shard.filename}: the array_record shard of {what} split '
                             f'{source.split!r} {problem}; {todo}')
  return ShardRecords(source, what, todo) if shards else source
