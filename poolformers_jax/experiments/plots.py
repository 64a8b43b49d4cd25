"""The runs' validation curves: curves.csv and curves.png."""
from __future__ import annotations

from typing import Any

from poolformers_jax.experiments.papers import PAPER


def validation_curves(results: dict[str, Any]) -> dict[str, dict[str, tuple[list, list]]]:
  """task -> '<family> seed <s>' -> (steps, validation accuracy %) from the runs' metrics."""
  from poolformers_jax.trainer.metrics import read_metrics
  curves: dict[str, dict[str, tuple[list, list]]] = {}
  for task, entry in results['tasks'].items():
    named = [(family, runs) for family, runs in entry.get('families', {}).items()] + [
        (f'{family} SPT', runs) for family, runs in (entry.get('spt') or {}).items()]
    for family, runs in named:   # a fine-tuned run's curve: its own steps, after pre-training
      for run in runs:
        records = read_metrics(run['workdir'], 'validation')
        if records:
          curves.setdefault(task, {})[f'{family} seed {run["seed"]}'] = (
              [r['step'] for r in records], [100.0 * r['accuracy'] for r in records])
  return curves


def write_curves_csv(results: dict[str, Any], path: str) -> None:
  """A row per (task, step), a column per run: the validation accuracy %, blank where absent."""
  curves = validation_curves(results)
  names = sorted({name for runs in curves.values() for name in runs})
  with open(path, 'w') as f:
    f.write(','.join(['task', 'step'] + names) + '\n')
    for task, runs in curves.items():
      by_step: dict[int, dict[str, float]] = {}
      for name, (steps, accuracy) in runs.items():
        for step, value in zip(steps, accuracy):
          by_step.setdefault(step, {})[name] = value
      for step in sorted(by_step):
        f.write(','.join([task, str(step)] + [
            f'{by_step[step][n]:.2f}' if n in by_step[step] else '' for n in names]) + '\n')


def plot_curves(results: dict[str, Any], path: str) -> str | None:
  """One panel per task, one line per run; the papers' numbers as dotted lines. None: no curve."""
  curves = validation_curves(results)
  if not curves:
    return None
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
  for ax, (task, runs) in zip(axes[0], curves.items()):
    # A colour per family (its paper line too), a line style per seed.
    families = sorted({name.split(' seed ')[0] for name in runs})
    seen: dict[str, int] = {}   # family -> its runs drawn so far
    for name, (steps, accuracy) in sorted(runs.items()):
      family = name.split(' seed ')[0]
      color = f'C{families.index(family)}'
      ax.plot(steps, accuracy, label=name, color=color,
              linestyle=('-', '--', '-.', ':')[min(seen.get(family, 0), 3)])
      if family not in seen:
        for number, _ in PAPER.get(task, {}).get(family, [])[:1]:
          ax.axhline(number, color=color, linestyle=':', linewidth=1)
      seen[family] = seen.get(family, 0) + 1
    ax.set(title=f'{task} (dotted: paper test)', xlabel='step', ylabel='validation accuracy %')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
