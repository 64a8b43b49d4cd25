"""The results as markdown: the LRA table (mean ± std over seeds beside the papers' numbers),
self-pretraining beside scratch, and the GLUE table."""
from __future__ import annotations

from typing import Any

import numpy as np

from poolformers_jax.experiments.papers import GLUE_PAPER, GLUE_PAPER_AVERAGE, paper_text
from poolformers_jax.experiments.runs import SPT_OBJECTIVES


def _mean_std(values: list[float]) -> str:
  if len(values) == 1:
    return f'{values[0]:.2f}'
  return f'{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}'


def _heading(what: str, results: dict[str, Any]) -> list[str]:
  """Title, device, commit and command of a results table."""
  overrides = results.get('overrides') or []
  # A run with overrides (fewer steps, other data) is not the paper setting: say so in the title.
  title = f'# {what} ({results["size"]} setting' + (
      f' with overrides: {", ".join(overrides)})' if overrides else ')')
  return [title, '', f'Device: {results["device"]}; git commit {results["git_commit"]}; '
          f'command: `{results["command"]}`.', '']


def markdown(results: dict[str, Any]) -> str:
  lines = _heading('LRA results', results) + [
      'Validation curves: [curves.png](curves.png).', '',
      '| task | family | test acc. % (mean ± std) | paper % | seeds | steps/s | wall time '
      '| peak memory | device | commit |',
      '|---|---|---|---|---|---|---|---|---|---|']
  for task, entry in results['tasks'].items():
    if entry.get('missing'):
      lines.append(f'| {task} | all | data missing: {entry["missing"]} | | | | | | | |')
      continue
    for family, runs in entry['families'].items():
      acc = [r['test_accuracy'] for r in runs]
      rate = [r['steps_per_second'] for r in runs if r.get('steps_per_second')]
      wall = sum(r['wall_seconds'] for r in runs)
      memory = max(r['peak_memory_bytes'] for r in runs)
      lines.append(
          f'| {task} | {family} | {_mean_std(acc)} | {paper_text(task, family)} | '
          f'{",".join(str(r["seed"]) for r in runs)} | '
          f'{f"{np.mean(rate):.2f}" if rate else "n/a"} | {wall / 60:.1f} min | '
          f'{memory / 2**30:.2f} GiB ({runs[0]["peak_memory_kind"]}) | {runs[0]["device"]} | '
          f'{runs[0]["git_commit"]} |')
  if any(entry.get('spt') for entry in results['tasks'].values()):
    lines += ['', spt_markdown(results)]
  return '\n'.join(lines) + '\n'


def spt_markdown(results: dict[str, Any]) -> str:
  """Scratch and self-pretrained side by side, per task and family (mean ± std over seeds)."""
  what = SPT_OBJECTIVES[results.get('spt_objective', 'masked')][1]   # 'masked tokens'
  lines = [f'## Self-pretraining ({what} of the task\'s own inputs, then fine-tuning)', '',
           f'| task | family | scratch test % | self-pretrained test % | '
           f'{what[:-1].replace(" ", "-")} validation % '
           '| pre-training steps | fine-tuning steps | seeds | wall time | device | commit |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
  for task, entry in results['tasks'].items():
    for family, runs in (entry.get('spt') or {}).items():
      scratch = [r['test_accuracy'] for r in entry.get('families', {}).get(family, [])]
      masked = [r['pretrain']['best_validation_accuracy'] for r in runs]
      lines.append(
          f'| {task} | {family} | {_mean_std(scratch) if scratch else "not run"} | '
          f'{_mean_std([r["test_accuracy"] for r in runs])} | '
          f'{_mean_std(masked) if None not in masked else "n/a"} | '
          f'{runs[0]["pretrain"]["steps"]} | {runs[0]["steps"]} | '
          f'{",".join(str(r["seed"]) for r in runs)} | '
          f'{sum(r["wall_seconds"] for r in runs) / 60:.1f} min | {runs[0]["device"]} | '
          f'{runs[0]["git_commit"]} |')
  return '\n'.join(lines)


def _dev_text(run: dict[str, Any]) -> str:
  if 'dev_mismatched' in run:
    return f'{run["dev"]:.2f}/{run["dev_mismatched"]:.2f}'
  return f'{run["dev"]:.2f}'


def glue_markdown(results: dict[str, Any]) -> str:
  lines = _heading('GLUE dev results', results) + [
      f'Grid per task: batch sizes {results["batch_sizes"]} x learning rates '
      f'{results["learning_rates"]}; the run with the best dev score (%) is reported. '
      'MNLI: matched/mismatched of the same checkpoint. Paper: PoNet\'s slides (pre-trained '
      '340K steps on 5 GB).', '',
      '| task | metric | family | ours (best on dev) | batch | lr | paper PoNet-Base | '
      'paper BERT-Base | runs |', '|---|---|---|---|---|---|---|---|---|']
  numbers: dict[str, list[float]] = {}
  for family, tasks in results['families'].items():
    for task, entry in tasks.items():
      ponet, bert = ('/'.join(f'{v:.2f}' for v in x) for x in GLUE_PAPER[task])
      if entry.get('missing'):
        lines.append(f'| {task} | | {family} | data missing: {entry["missing"]} | | | {ponet} | '
                     f'{bert} | 0 |')
        continue
      best = entry['best']
      numbers.setdefault(family, []).extend(
          [best['dev']] + ([best['dev_mismatched']] if 'dev_mismatched' in best else []))
      lines.append(f'| {task} | {best["metric"]} | {family} | {_dev_text(best)} | '
                   f'{best["batch_size"]} | {best["learning_rate"]:g} | {ponet} | {bert} | '
                   f'{len(entry["runs"])} |')
    if len(numbers.get(family, [])) == 9:     # every task: the slides' average
      lines.append(f'| average | | {family} | {np.mean(numbers[family]):.2f} | | | '
                   f'{GLUE_PAPER_AVERAGE[0]:.2f} | {GLUE_PAPER_AVERAGE[1]:.2f} | |')
  return '\n'.join(lines) + '\n'
