r"""What checking a data file at open costs (data/bad_records.py), in one process:

- a ListOps TSV of the paper's size (`--rows` rows of the official trees' lengths, the rows of a
  generated file repeated) indexed by base.LineFile without and with the line check, rounds
  interleaved, and the whole split read into memory as training reads it;
- an array_record shard of `--shard_mb` MiB: its footer and record count read (what
  `check_shards` does per shard) against reading every record.

    python benchmarks/bad_records_cost.py --rows 96000 --shard_mb 256
"""
from __future__ import annotations

import os
import sys
import tempfile

from poolformers_jax import errors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)


def _seconds(function, rounds: int) -> float:
  """Median wall seconds of `rounds` calls."""
  return step_runner.interleaved_medians({'call': function}, rounds)['call']


def tsv_costs(folder: str, rows: int, rounds: int) -> dict[str, float]:
  from poolformers_jax.data import base, listops
  from poolformers_jax.data.generators import listops as generator
  sample = os.path.join(folder, 'sample')
  generator.write_tsv(sample, seed=0, sizes={'train': 200, 'validation': 1, 'test': 1},
                      min_tokens=500, max_tokens=2000)
  with open(os.path.join(sample, 'basic_train.tsv')) as f:
    header, *lines = f.readlines()
  path = os.path.join(folder, 'basic_train.tsv')
  with open(path, 'w') as f:
    f.write(header)
    f.writelines(lines[i % len(lines)] for i in range(rows))
  check = base.LineCheck(listops.line_problem, listops.RELEASE_TODO)
  index = step_runner.interleaved_medians(   # the machine's load falls on both alike
      {'index_s': lambda: base.LineFile(path, skip_header=True),
       'index_checked_s': lambda: base.LineFile(path, skip_header=True, check=check)}, rounds)
  in_memory = _seconds(lambda: listops.InMemoryRecords(listops.TsvSource(path), path), 1)
  return {'tsv_mib': os.path.getsize(path) / 2**20, **index, 'read_into_memory_s': in_memory}


def shard_costs(folder: str, shard_mb: int, rounds: int) -> dict[str, float]:
  from array_record.python import array_record_module
  path = os.path.join(folder, 'shard.array_record')
  record = os.urandom(3000)
  count = shard_mb * 2**20 // len(record)
  writer = array_record_module.ArrayRecordWriter(path, 'group_size:1')
  for _ in range(count):
    writer.write(record)
  writer.close()

  def footer():
    reader = array_record_module.ArrayRecordReader(path, 'readahead_buffer_size:0')
    assert reader.ok() and reader.num_records() == count
    reader.close()

  def every_record():
    reader = array_record_module.ArrayRecordReader(path)
    reader.read_all()
    reader.close()

  return {'shard_mib': os.path.getsize(path) / 2**20, 'records': count,
          'footer_s': _seconds(footer, rounds), 'read_all_s': _seconds(every_record, 1)}


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', type=int, default=96000)
  parser.add_argument('--shard_mb', type=int, default=256)
  parser.add_argument('--rounds', type=int, default=5)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as folder:
    tsv = tsv_costs(folder, args.rows, args.rounds)
    print(f"ListOps TSV, {args.rows} rows, {tsv['tsv_mib']:.0f} MiB: indexed "
          f"{tsv['index_s']:.2f} s, with the line check {tsv['index_checked_s']:.2f} s "
          f"({tsv['index_checked_s'] / tsv['index_s']:.2f}x); the split read into memory "
          f"{tsv['read_into_memory_s']:.1f} s")
    shard = shard_costs(folder, args.shard_mb, args.rounds)
    print(f"array_record shard, {shard['shard_mib']:.0f} MiB, {shard['records']} records: footer "
          f"and count {shard['footer_s'] * 1e3:.2f} ms; every record read "
          f"{shard['read_all_s']:.2f} s")


if __name__ == '__main__':
  main()
