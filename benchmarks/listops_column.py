r"""The ListOps column so far, from run directories DIR/<run> (benchmarks/gpu_run.sh listops):

    python benchmarks/listops_column.py --runs /tmp/listops_runs \
        --families "transformer ponet,reference"

A family is config words (`ponet`, `ponet,reference`, `adamra_eq8,reference`); its run directory
is the words joined by '-' (`ponet-reference`). One markdown row per family: the step reached,
the best validation accuracy and its step, the test accuracy of the best-on-validation checkpoint
(once the run has finished) and on the held-out trees (DIR/heldout.json, eval.py's output), the
median training steps/s and the compile time, read from DIR/metrics.jsonl and DIR/eval/test.json.
A run whose ListOps tokenizer is not `brackets` (DIR/config.json) says so after its family.
A self-pretrained family (word `spt`, e.g. `ponet,spt`, or `spt_causal`) also shows its
pre-training in DIR/pretrain: its steps and best masked- (next-) token validation accuracy.

`--prepare SIZE [--set key=value ...]` generates the ListOps data of that size once (before the
runs start side by side); `--pack OUT` writes the run directories into OUT/listops_<k>.tar files
of at most 15 MiB each (a device call returns 8 files of 16 MiB), without TensorBoard logs, and
for finished runs without the resume checkpoints (`best/`, metrics, evaluations and logs stay).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tarfile

from poolformers_jax import errors
from poolformers_jax.trainer.metrics import read_metrics

PACK_LIMIT = 15 * 2**20
PRETRAIN = 'pretrain'   # a self-pretrained family's (config word `spt`) pre-training run, in DIR


def run_dir(family: str) -> str:
  return family.replace(',', '-')


def row(runs: str, family: str) -> dict:
  workdir = os.path.join(runs, run_dir(family))
  train, validation = read_metrics(workdir, 'train'), read_metrics(workdir, 'validation')
  test_path = os.path.join(workdir, 'eval', 'test.json')
  test = json.load(open(test_path)) if os.path.exists(test_path) else None
  heldout_path = os.path.join(workdir, 'heldout.json')
  heldout = None
  if os.path.exists(heldout_path) and os.path.getsize(heldout_path):
    heldout = json.load(open(heldout_path))['accuracy']
  best = max(validation, key=lambda r: r['accuracy']) if validation else None
  rates = [r['steps_per_second'] for r in train if 'steps_per_second' in r]
  compiles = [r['compile_seconds'] for r in train if 'compile_seconds' in r]
  pretrain = None
  if os.path.isdir(os.path.join(workdir, PRETRAIN)):   # masked-token accuracy of the pre-training
    pre_train = read_metrics(os.path.join(workdir, PRETRAIN), 'train')
    pre_val = read_metrics(os.path.join(workdir, PRETRAIN), 'validation')
    pre_best = max(pre_val, key=lambda r: r['accuracy']) if pre_val else None
    pretrain = {'step': pre_train[-1]['step'] if pre_train else 0,
                'best_validation': pre_best and (pre_best['accuracy'], pre_best['step'])}
  config_path = os.path.join(workdir, 'config.json')
  tokenizer = 'brackets'   # config.data.tokenizer of the run; runs from before it had brackets
  if os.path.exists(config_path):
    tokenizer = json.load(open(config_path)).get('data', {}).get('tokenizer', 'brackets')
  return {'family': family, 'step': train[-1]['step'] if train else 0, 'pretrain': pretrain,
          'tokenizer': tokenizer,
          'best_validation': best and (best['accuracy'], best['step']),
          'test': test and test['accuracy'], 'heldout': heldout,
          'steps_per_second': statistics.median(rates) if rates else None,
          'compile_seconds': compiles[0] if compiles else None}


def markdown(rows: list[dict]) -> str:
  lines = ['| family | step | best validation % (step) | test % | held-out test % | '
           'steps/s (median) | compile s |',
           '|---|---|---|---|---|---|---|']
  for r in rows:
    best = (f'{100 * r["best_validation"][0]:.2f} ({r["best_validation"][1]})'
            if r['best_validation'] else '—')
    test = f'{100 * r["test"]:.2f}' if r['test'] is not None else 'running'
    rate = f'{r["steps_per_second"]:.2f}' if r['steps_per_second'] else '—'
    comp = f'{r["compile_seconds"]:.1f}' if r['compile_seconds'] else '—'
    heldout = f'{100 * r["heldout"]:.2f}' if r['heldout'] is not None else '—'
    name = r['family']
    if r.get('tokenizer', 'brackets') != 'brackets':
      name += f' (tokenizer {r["tokenizer"]})'
    if r.get('pretrain'):
      masked = r['pretrain']['best_validation']
      objective = 'next tokens' if ',spt_causal' in r['family'] else 'masked tokens'
      name += (f' (pre-trained {r["pretrain"]["step"]} steps, {objective} '
               + (f'{100 * masked[0]:.2f} % at {masked[1]})' if masked else '—)'))
    lines.append(f'| {name} | {r["step"]} | {best} | {test} | {heldout} | {rate} | {comp} |')
  return '\n'.join(lines)


def _packed_files(runs: str, name: str) -> list[tuple[str, int]]:
  """(path relative to runs, size) of what run `name` carries back. A self-pretrained run's
  DIR/pretrain keeps its resume checkpoints only until fine-tuning has started (DIR/config.json),
  its best checkpoint always (another fine-tuning can start from it)."""
  top = os.path.join(runs, name)
  finished = os.path.exists(os.path.join(top, 'eval', 'test.json'))
  skip = {'tensorboard'} | ({'checkpoints', 'averaged'} if finished else set())
  pretrain = os.path.join(top, PRETRAIN)
  pretrain_skip = {'tensorboard'} | (
      {'checkpoints', 'averaged'} if os.path.exists(os.path.join(top, 'config.json')) else set())
  files = []
  for root, dirs, names in os.walk(top):
    if root == top:
      dirs[:] = [d for d in dirs if d not in skip]
    elif root == pretrain:
      dirs[:] = [d for d in dirs if d not in pretrain_skip]
    for n in names:
      path = os.path.join(root, n)
      files.append((os.path.relpath(path, runs), os.path.getsize(path)))
  return sorted(files)


def pack(runs: str, families: list[str], out: str, limit: int = PACK_LIMIT,
         name: str = 'listops') -> list[str]:
  """Packs the runs, whole, into as few tars of at most `limit` bytes as fit (`name`_k.tar);
  returns their paths."""
  groups, sizes = [], []
  for family in families:
    run = run_dir(family)
    if not os.path.isdir(os.path.join(runs, run)):
      continue
    files = _packed_files(runs, run)
    size = sum(s for _, s in files) + 1024 * (len(files) + 2)   # tar headers
    if size > limit:
      raise ValueError(f'run {run} needs {size / 2**20:.1f} MiB packed, over {limit / 2**20:.0f} '
                       'MiB: keep fewer checkpoints (--config.keep_checkpoints).')
    target = next((i for i, s in enumerate(sizes) if s + size <= limit), None)
    if target is None:
      groups.append([]), sizes.append(0)
      target = len(groups) - 1
    groups[target].extend(files)
    sizes[target] += size
  os.makedirs(out, exist_ok=True)
  paths = []
  for k, files in enumerate(groups):
    path = os.path.join(out, f'{name}_{k}.tar')
    with tarfile.open(path, 'w') as tar:
      for rel, _ in files:
        tar.add(os.path.join(runs, rel), arcname=rel, recursive=False)
    paths.append(path)
  return paths


def prepare(size: str, overrides: list[str]) -> str:
  """Generates the ListOps splits of `size` (the same for every family) unless they exist."""
  from poolformers_jax.data.generators import listops  # pylint: disable=g-import-not-at-top
  from poolformers_jax.experiments import lra  # pylint: disable=g-import-not-at-top
  config = lra.load_config('listops', 'transformer', size, 0, overrides)
  return listops.prepare(config.data.data_dir, **config.data.generator).info.full_name


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs')
  parser.add_argument('--families', default='transformer linear ponet adamra contextpool')
  parser.add_argument('--prepare', metavar='SIZE', help='generate the data of this size and stop')
  parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='config override for --prepare, e.g. --set data.data_dir=/tmp/d')
  parser.add_argument('--pack', metavar='OUT', help='also pack the run directories into OUT')
  parser.add_argument('--pack_name', default='listops', help='the packs are NAME_<k>.tar')
  args = parser.parse_args()
  if args.prepare:
    print('ListOps data ready:', prepare(args.prepare, args.set))
    return
  if not args.runs:
    parser.error('--runs is required (or --prepare SIZE)')
  families = args.families.split()
  if args.pack:
    for path in pack(args.runs, families, args.pack, name=args.pack_name):
      print(f'packed {path} ({os.path.getsize(path) / 2**20:.1f} MiB)', file=sys.stderr)
  print(markdown([row(args.runs, family) for family in families]))


if __name__ == '__main__':
  from poolformers_jax import runtime  # before the first compile
  runtime.configure_program()
  main()
