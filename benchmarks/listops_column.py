r"""The ListOps column so far, from run directories DIR/<family> (benchmarks/gpu_run.sh listops):

    python benchmarks/listops_column.py --runs /tmp/listops_runs --families "transformer ponet"

One markdown row per family: the step reached, the best validation accuracy and its step, the
test accuracy of the best-on-validation checkpoint (once the run has finished), the median
training steps/s and the compile time, read from DIR/metrics.jsonl and DIR/eval/test.json.
"""
from __future__ import annotations

import json
import os
import statistics

from poolformers_jax import errors
from poolformers_jax.train.metrics import read_metrics


def row(runs: str, family: str) -> dict:
  workdir = os.path.join(runs, family)
  train, validation = read_metrics(workdir, 'train'), read_metrics(workdir, 'validation')
  test_path = os.path.join(workdir, 'eval', 'test.json')
  test = json.load(open(test_path)) if os.path.exists(test_path) else None
  best = max(validation, key=lambda r: r['accuracy']) if validation else None
  rates = [r['steps_per_second'] for r in train if 'steps_per_second' in r]
  compiles = [r['compile_seconds'] for r in train if 'compile_seconds' in r]
  return {'family': family, 'step': train[-1]['step'] if train else 0,
          'best_validation': best and (best['accuracy'], best['step']),
          'test': test and test['accuracy'],
          'steps_per_second': statistics.median(rates) if rates else None,
          'compile_seconds': compiles[0] if compiles else None}


def markdown(rows: list[dict]) -> str:
  lines = ['| family | step | best validation % (step) | test % | steps/s (median) | compile s |',
           '|---|---|---|---|---|---|']
  for r in rows:
    best = (f'{100 * r["best_validation"][0]:.2f} ({r["best_validation"][1]})'
            if r['best_validation'] else '—')
    test = f'{100 * r["test"]:.2f}' if r['test'] is not None else 'running'
    rate = f'{r["steps_per_second"]:.2f}' if r['steps_per_second'] else '—'
    comp = f'{r["compile_seconds"]:.1f}' if r['compile_seconds'] else '—'
    lines.append(f'| {r["family"]} | {r["step"]} | {best} | {test} | {rate} | {comp} |')
  return '\n'.join(lines)


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True)
  parser.add_argument('--families', default='transformer linear ponet adamra contextpool')
  args = parser.parse_args()
  print(markdown([row(args.runs, family) for family in args.families.split()]))


if __name__ == '__main__':
  main()
