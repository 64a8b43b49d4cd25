"""The markdown tables of benchmarks/accelerators_bench.py's JSON records (one file per config and
slice): `python benchmarks/accelerators_bench.py --output_dir DIR --table`."""
from __future__ import annotations

import glob
import json
import os
import re

MIB = 2 ** 20


def _hours(seconds: float) -> str:
  if seconds < 60:
    return f'{seconds:.0f} s'
  if seconds < 3600:
    return f'{seconds / 60:.1f} min'
  return f'{seconds / 3600:.1f} h'


def _refusal(error, retried: bool = True) -> str:
  """The note of a config that did not compile: 'does not fit' with its figures, or the error.
  `retried`: whether the next record is the suggested accumulation's compile."""
  text = ' '.join(error) if isinstance(error, list) else str(error)
  found = re.search(r'HLO temporaries \(([\d.]+G)\) exceeds available HBM', text)
  if found:   # libtpu's own refusal (records made before summary named the accumulation)
    return f'**does not fit**: {found.group(1)} of temporaries per chip (libtpu)'
  found = re.search(r'needs ([\d.]+ GiB) per chip, the chip has ([\d.]+ GiB): try (.*?) \(', text)
  if found:
    if not retried:
      return (f'**does not fit**: {found.group(1)} per chip of {found.group(2)}; to compile '
              f'again with `{found.group(3)}` (not yet compiled)')
    return (f'**does not fit**: {found.group(1)} per chip of {found.group(2)}; compiled again '
            f'with `{found.group(3)}` (next row)')
  return text.removeprefix('error: ')


def row(record: dict, retried: bool = True) -> str:
  spec = ' '.join([record['config'], *record.get('overrides', [])])
  if 'error' in record:
    note = _refusal(record['error'], retried)
    return f'| `{spec}` | {record["topology"]} | — | — | — | — | — | {note} |'
  train = record['train_step']
  memory, roof = train['memory'], train['roofline']
  steps = record['num_train_steps']
  fits = 'yes' if train['fits'] else '**no**'
  reduced = train['collectives'].get('all-reduce', {}).get('bytes', 0)
  return (f'| `{spec}` | {record["topology"]} | {record["per_device_batch"]} | '
          f'{memory["total"] / MIB:,.0f} ({fits}) | {train["flops"] / 1e9:,.1f} / '
          f'{train["bytes_accessed"] / 1e9:,.2f} | '
          f'{roof["seconds"] * 1e3:,.2f} ({roof["bound"]}) | '
          f'{_hours(steps * roof["seconds"])} for {steps:,} | '
          f'{reduced / MIB:,.1f} MiB all-reduce; XLA {train["xla_seconds"] * 1e3:,.2f} ms |')


HEADER = ('| config | slice | batch / chip | memory / chip, MiB (fits) | GFLOP / GB per step and '
          'chip | roofline ms / step (bound) | time to train | notes |\n'
          '|---|---|---|---|---|---|---|---|')


def records(output_dir: str) -> list[dict]:
  found = []
  for path in sorted(glob.glob(os.path.join(output_dir, '*.json'))):
    with open(path) as f:
      found.append(json.load(f))
  return found


def print_tables(output_dir: str) -> None:
  print(HEADER)
  found = records(output_dir)
  for record, after in zip(found, [*found[1:], None]):
    retried = after is not None and (after['config'], after['topology']) == (
        record['config'], record['topology']) and len(after.get('overrides', [])) > 0
    print(row(record, retried))
