r"""What every paper setting costs on a TPU slice: each config's training and eval steps compiled
for the slice (`python -m poolformers_jax.summary --topology`, one process per config), as JSON
files, then one markdown table (docs/accelerators.md). Resumable: finished configs are skipped.

    python benchmarks/accelerators_bench.py --output_dir runs/accelerators \
        --topologies v5e:2x2,v5e:2x4
    python benchmarks/accelerators_bench.py --output_dir runs/accelerators --table
    python benchmarks/accelerators_bench.py --output_dir runs/accelerators \
        --only 'lra_listops.py:ponet wmt14.py:base,cp'

A config that does not fit (summary ends with "try --config.batch_size=... grad_accum_steps=...")
is compiled again with the suggested gradient accumulation, as a second record (`__fit`); if
that too is refused, or compiles above the chip's memory, with a suggestion (summary's estimate
fell short), the next one (`__fit2`).

The mixers against softmax and the no-mixing model at 1K-16K tokens on the same cost model:
`python benchmarks/efficiency.py --topology v5e:2x2`.

Needs libtpu (pip install libtpu==0.0.42.1); compiling runs on the CPU (JAX_PLATFORMS=cpu).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

from poolformers_jax import errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LRA_TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder')
LRA_FAMILIES = ('transformer', 'linear', 'ponet', 'adamra', 'contextpool', 'msac')

# Every paper setting the library has: (config spec, what it reproduces).
PAPER_SETTINGS = [
    *[(f'lra_listops.py:{family}', f'LRA listops, {family}') for family in LRA_FAMILIES],
    ('imagenet.py:deit_s', 'ImageNet DeiT-S (HVT baseline)'),
    ('imagenet.py:hvt_s_1', 'ImageNet HVT-S-1'),
    ('imagenet.py:hvt_s_4', 'ImageNet Scale HVT-Ti-4'),
    ('imagenet.py:vit_b16', 'ImageNet ViT-B/16 at 384 (ContextPool baseline)'),
    ('imagenet.py:cp_vit_b16', 'ImageNet CP-ViT-B/16 at 384'),
    ('imagenet.py:cp_swin_b', 'ImageNet CP-Swin-B'),
    ('cifar.py:hvt_s_4', 'CIFAR-100 HVT-S-4'),
    ('cifar.py:cp_convnet', 'CIFAR-10 ConvNet with ContextPool'),
    ('cifar.py:msac_resnet', 'CIFAR-10 MSAC ResNet'),
    ('cifar.py:cross_attentive_similarity', 'CIFAR-10 cross-attentive similarity (MSAC)'),
    ('enwik8.py:transformer_l12', 'enwik8 Transformer (12 layers), stage 1'),
    ('enwik8.py:cp_transformer_l12', 'enwik8 CP-Transformer (12 layers), stage 1'),
    ('wmt14.py:base', 'WMT14 EN-DE Transformer Base'),
    ('wmt14.py:base,cp', 'WMT14 EN-DE CP-Transformer Base'),
    ('wmt14.py:big', 'WMT14 EN-DE Transformer Big'),
    ('wmt14.py:big,cp', 'WMT14 EN-DE CP-Transformer Big'),
    ('ponet_pretrain.py:sso', 'PoNet-Base pre-training (MLM + SSO)'),
    ('glue.py:mnli', 'GLUE MNLI fine-tuning, PoNet-Base'),
    ('long_text.py:arxiv11', 'Long text (4096 tokens) Arxiv-11, PoNet-Base'),
    *[(f'lra_{task}.py:{family}', f'LRA {task}, {family}') for task in LRA_TASKS[1:]
      for family in LRA_FAMILIES],
]

# A refused accumulation is compiled again with the accumulation its refusal names (`__fit2`).
MAX_FIT_ATTEMPTS = 3


def _name(spec: str, topology: str) -> str:
  tag = spec.replace('.py:', '__').replace(',', '_').replace('.py', '')
  return f'{tag}__{topology.replace(":", "_")}.json'


def fit_overrides(record: dict) -> tuple[str, ...]:
  """The accumulation summary suggests for a step that does not fit (libtpu refused it, or it
  compiled above the chip's memory: 'fit_advice'), or () if none."""
  advice = record.get('error') or record.get('fit_advice')
  if not isinstance(advice, str) or ': try ' not in advice:
    return ()
  suggestion = advice.split(': try ', 1)[1].split(' (', 1)[0]
  return tuple(word for word in suggestion.split() if word.startswith('--config.'))


def run_one(spec: str, topology: str, out_path: str, overrides: tuple[str, ...] = ()) -> dict:
  """One config compiled for one slice, in its own process (the compile's memory is freed)."""
  command = [sys.executable, '-m', 'poolformers_jax.summary', '--config',
             os.path.join('configs', spec), '--topology', topology, *overrides]
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  start = time.time()
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
  record = {'config': spec, 'overrides': list(overrides), 'topology': topology,
            'compile_seconds': round(time.time() - start, 1),
            'command': 'python -m poolformers_jax.summary ' + ' '.join(command[3:])}
  lines = [line for line in result.stdout.splitlines() if line.startswith('{')]
  if result.returncode == 0 and lines:
    record.update(json.loads(lines[-1]))
  else:
    errors = [line for line in result.stderr.splitlines() if line.startswith('error:')]
    record['error'] = errors[-1] if errors else result.stderr.strip().splitlines()[-1:]
  with open(out_path, 'w') as f:
    json.dump(record, f)
  return record


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--topologies', default='v5e:2x2,v5e:2x4')
  parser.add_argument('--only', default='',
                      help='space-separated config specs (default: all); specs may hold commas')
  parser.add_argument('--table', action='store_true', help='print the markdown tables and exit')
  args = parser.parse_args()
  os.makedirs(args.output_dir, exist_ok=True)
  if args.table:
    print_tables(args.output_dir)
    return
  topologies = args.topologies.split(',')
  only = set(args.only.split())
  for topology in topologies:
    for spec, _ in PAPER_SETTINGS:
      if only and spec not in only:
        continue
      path = os.path.join(args.output_dir, _name(spec, topology))
      record = _saved_or_run(spec, topology, path)
      for attempt in range(1, MAX_FIT_ATTEMPTS + 1):   # summary's estimate may fall short
        overrides = fit_overrides(record)
        if not overrides:
          break
        fit_path = path[:-len('.json')] + f'__fit{attempt if attempt > 1 else ""}.json'
        record = _saved_or_run(spec, topology, fit_path, overrides)


def _saved_or_run(spec: str, topology: str, path: str, overrides: tuple[str, ...] = ()) -> dict:
  """The record at `path` (resuming), else `run_one`'s, reported."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  return _report(run_one(spec, topology, path, overrides))


def _report(record: dict) -> dict:
  status = record.get('error') or (
      f"{record['train_step']['memory']['total'] / 2**20:.0f} MiB/device, "
      f"{record['train_step']['roofline']['seconds'] * 1e3:.2f} ms/step")
  print(f"{' '.join([record['config'], *record['overrides']])} {record['topology']}: {status} "
        f"({record['compile_seconds']} s)", flush=True)
  return record


# ---- the markdown tables of the JSON records (--table) --------------------------------------

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


if __name__ == '__main__':
  main()
