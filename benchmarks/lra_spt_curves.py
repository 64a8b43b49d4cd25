r"""The self-pretraining record's curves: fine-tuned runs beside the runs from scratch.

    python benchmarks/lra_spt_curves.py --runs /tmp/listops_runs \
        --scratch docs/results/lra_listops_curves.csv --out docs/results/lra_spt_curves

Reads each `<family>-spt` run directory of `benchmarks/gpu_run.sh listops` (its pre-training in
DIR/pretrain) and writes OUT.csv (a row per step of training in all, fine-tuning offset by the
pre-training; columns: each run's validation accuracy %, the pre-training's masked-token accuracy
%) and OUT.png (a panel per family: the run from scratch, --scratch's column '<family> seed 0
...', and the self-pretrained run on the same axis of total steps).
"""
from __future__ import annotations

import argparse
import csv
import os

from poolformers_jax.trainer.metrics import read_metrics


def spt_curves(runs: str, family: str) -> dict[str, dict[int, float]]:
  """'<family> SPT masked tokens' and '<family> SPT fine-tuned' -> {total step: accuracy %}."""
  workdir = os.path.join(runs, f'{family}-spt')
  pre = read_metrics(os.path.join(workdir, 'pretrain'), 'validation')
  offset = max((r['step'] for r in read_metrics(os.path.join(workdir, 'pretrain'), 'train')),
               default=0)
  fine = read_metrics(workdir, 'validation')
  return {f'{family} SPT masked tokens': {r['step']: 100 * r['accuracy'] for r in pre},
          f'{family} SPT fine-tuned': {offset + r['step']: 100 * r['accuracy'] for r in fine}}


def scratch_curve(path: str, family: str) -> tuple[str, dict[int, float]]:
  with open(path) as f:
    rows = list(csv.DictReader(f))
  column = next(c for c in rows[0] if c.startswith(f'{family} seed 0'))
  return column, {int(r['step']): float(r[column]) for r in rows if r[column]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True)
  parser.add_argument('--scratch', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--families', default='transformer linear ponet adamra contextpool')
  args = parser.parse_args()
  families = args.families.split()
  curves, panels = {}, []
  for family in families:
    name, scratch = scratch_curve(args.scratch, family)
    spt = spt_curves(args.runs, family)
    curves.update({f'{name} (scratch)': scratch, **spt})
    panels.append((family, f'{name} (scratch)', list(spt)))
  names = list(curves)
  steps = sorted({s for c in curves.values() for s in c})
  with open(args.out + '.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['total_step'] + names)
    for step in steps:
      writer.writerow([step] + [f'{curves[n][step]:.2f}' if step in curves[n] else ''
                                for n in names])
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
  for ax, (family, scratch, spt) in zip(axes[0], panels):
    for name, style in zip([scratch] + spt, ('-', ':', '-')):
      xs = sorted(curves[name])
      ax.plot(xs, [curves[name][x] for x in xs], style, label=name.split(' ', 1)[1])
    ax.set(title=family, xlabel='training steps in all', ylabel='validation %', ylim=(0, 45))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(args.out + '.png', dpi=100)


if __name__ == '__main__':
  main()
