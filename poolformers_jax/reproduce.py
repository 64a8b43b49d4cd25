r"""Reproduce a Long Range Arena table in one command.

  python -m poolformers_jax.reproduce lra --task listops --families all --workdir runs/repro \
      [--seeds 0,1,2] [--size full|small|tiny] [--set key=value ...]

For every task (`--task all`: every LRA task) and model family it trains the task's config
(configs/lra_<task>.py:<family>,<size>) in its own workdir, WORKDIR/<task>/<family>/seed<s>, with
the one training loop (`train.train_and_evaluate`: resumes from the latest checkpoint, evaluates
the best checkpoint on test). A finished run (its result.json exists) is not trained again. It
then writes WORKDIR/results.json and WORKDIR/results.md: per task and family the test accuracy
(mean ± sample std over seeds), the papers' numbers beside it (PAPER below, the only copy),
steps/s, wall time (summed over every invocation that trained the run, resumptions included),
peak memory, device, seeds and git commit; and WORKDIR/curves.png and curves.csv, the
validation accuracy of every run against its step. A task whose data is missing is reported as such, with the one line
that says how to get it.
"""
from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import resource
import subprocess
import sys
import time
from typing import Any, Optional, Sequence

import numpy as np

# Test accuracy (%) at the paper setting: task -> family -> [(number, where it is from)].
PAPER: dict[str, dict[str, list[tuple[float, str]]]] = {
    'listops': {'transformer': [(36.37, 'LRA'), (37.10, 'Nystromformer setting')],
                'linear': [(37.35, 'AdaMRA T1')], 'ponet': [(37.80, 'PoNet')],
                'adamra': [(40.40, 'AdaMRA')]},
    'text': {'transformer': [(64.27, 'LRA'), (65.02, 'Nystromformer setting')],
             'linear': [(64.15, 'AdaMRA T1')], 'ponet': [(69.82, 'PoNet')],
             'adamra': [(68.44, 'AdaMRA')]},
    'retrieval': {'transformer': [(57.46, 'LRA'), (79.35, 'Nystromformer setting')],
                  'linear': [(81.10, 'AdaMRA T1')], 'ponet': [(80.35, 'PoNet')],
                  'adamra': [(84.83, 'AdaMRA')]},
    'image': {'transformer': [(42.44, 'LRA'), (38.20, 'Nystromformer setting')],
              'linear': [(38.20, 'AdaMRA T1')], 'ponet': [(46.88, 'PoNet')],
              'adamra': [(46.00, 'AdaMRA')]},
    'pathfinder': {'transformer': [(71.40, 'LRA'), (74.16, 'Nystromformer setting')],
                   'linear': [(70.20, 'AdaMRA T1')], 'ponet': [(70.39, 'PoNet')],
                   'adamra': [(75.77, 'AdaMRA')]},
}
TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder')
FAMILIES = ('transformer', 'linear', 'ponet', 'adamra', 'contextpool', 'msac')
CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'configs')

log = logging.getLogger('poolformers_jax.reproduce')


def paper_text(task: str, family: str) -> str:
  numbers = PAPER.get(task, {}).get(family, [])
  return ' / '.join(f'{value:.2f} ({source})' for value, source in numbers) or 'not reported'


def _parse_value(text: str) -> Any:
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text   # a bare word: a string


def load_config(task: str, family: str, size: str, seed: int, overrides: Sequence[str] = (),
                configs_dir: str = CONFIGS_DIR):
  """configs/lra_<task>.py:<family>,<size> with config.seed and `key=value` overrides."""
  from poolformers_jax.train import cli, config_utils
  spec = os.path.join(configs_dir, f'lra_{task}.py') + f':{family},{size}'
  updates = {'seed': seed}
  for item in overrides:
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'--set {item!r}: expected key=value, e.g. --set num_train_steps=100.')
    updates[key] = _parse_value(value)
  return config_utils.override(cli.load_config_file(spec), **updates)


def git_commit() -> str:
  try:
    out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)), check=True, timeout=10)
    dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                           capture_output=True, text=True, timeout=10,
                           cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return out.stdout.strip() + ('-dirty' if dirty else '')
  except (OSError, subprocess.SubprocessError):
    return 'unknown'


def device_name() -> str:
  import jax
  devices = jax.devices()
  return f'{len(devices)}x {devices[0].device_kind} ({devices[0].platform})'


def peak_memory_bytes() -> tuple[int, str]:
  """Peak accelerator memory of this process (device 0), else the process's peak host RSS."""
  import jax
  stats = jax.local_devices()[0].memory_stats() or {}
  if 'peak_bytes_in_use' in stats:
    return int(stats['peak_bytes_in_use']), 'device'
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 'host RSS'


def _median_steps_per_second(workdir: str) -> Optional[float]:
  """Median train steps/s over the logged windows (robust to the compile in the first one)."""
  rates = []
  path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        record = json.loads(line)
        if record.get('split') == 'train' and 'steps_per_second' in record:
          rates.append(record['steps_per_second'])
  return float(np.median(rates)) if rates else None


class RunStopped(RuntimeError):
  """A run stopped before its end (SIGTERM / preemption): its checkpoint is kept."""


_clock = time.time   # a module attribute so that tests can give the runs a known duration
WALL_FILE = 'wall_time.json'


def _add_wall_time(workdir: str, seconds: float) -> dict[str, float]:
  """Adds one invocation's seconds to WORKDIR/wall_time.json: a resumed run counts them all."""
  path = os.path.join(workdir, WALL_FILE)
  total = {'seconds': 0.0, 'invocations': 0}
  if os.path.exists(path):
    with open(path) as f:
      total = json.load(f)
  total = {'seconds': total['seconds'] + seconds, 'invocations': total['invocations'] + 1}
  os.makedirs(workdir, exist_ok=True)
  with open(path, 'w') as f:
    json.dump(total, f)
  return total


def run_one(task: str, family: str, size: str, seed: int, workdir: str,
            overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR) -> dict[str, Any]:
  """Trains and tests one (task, family, seed) in `workdir` unless its result.json exists."""
  result_path = os.path.join(workdir, 'result.json')
  if os.path.exists(result_path):
    log.info('%s/%s seed %d: finished before (%s), not retrained.', task, family, seed, result_path)
    with open(result_path) as f:
      return {**json.load(f), 'skipped': True}
  from poolformers_jax.train import train_and_evaluate
  config = load_config(task, family, size, seed, overrides, configs_dir)
  log.info('%s/%s seed %d: training in %s', task, family, seed, workdir)
  start = _clock()
  try:
    result = train_and_evaluate(config, workdir)
  finally:   # stopped or crashed, the time it trained counts towards the run's wall time
    wall = _add_wall_time(workdir, _clock() - start)
  if result.status != 'finished' or result.test is None:
    raise RunStopped(f'{task}/{family} seed {seed} stopped at step {result.step} '
                       f'({result.status}); run the same command again to resume.')
  memory, memory_kind = peak_memory_bytes()
  record = dict(task=task, family=family, size=size, seed=seed, workdir=workdir,
                test_accuracy=100.0 * result.test['accuracy'], test=result.test,
                steps=result.step, steps_per_second=_median_steps_per_second(workdir),
                wall_seconds=wall['seconds'], invocations=wall['invocations'],
                peak_memory_bytes=memory, peak_memory_kind=memory_kind,
                device=device_name(), git_commit=git_commit(), overrides=list(overrides))
  with open(result_path, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True, default=str)
  return {**record, 'skipped': False}


def data_status(task: str, size: str, overrides: Sequence[str] = (),
                configs_dir: str = CONFIGS_DIR) -> Optional[str]:
  """None when the task's data can be read (ListOps is generated), else the line saying why."""
  from poolformers_jax import data
  config = load_config(task, 'transformer', size, 0, overrides, configs_dir)
  if config.data.name == 'lra_pathfinder' and config.data.format == 'generated':
    return None    # made on first use
  try:
    data.get_dataset_info(config)
  except data.DataNotFoundError as e:
    return str(e)
  return None


def _mean_std(values: list[float]) -> str:
  if len(values) == 1:
    return f'{values[0]:.2f}'
  return f'{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}'


def markdown(results: dict[str, Any]) -> str:
  overrides = results.get('overrides') or []
  # A run with overrides (fewer steps, other data) is not the paper setting: say so in the title.
  title = f'# LRA results ({results["size"]} setting' + (
      f' with overrides: {", ".join(overrides)})' if overrides else ')')
  lines = [title, '',
           f'Device: {results["device"]}; git commit {results["git_commit"]}; '
           f'command: `{results["command"]}`.', '',
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
  return '\n'.join(lines) + '\n'


def reproduce_lra(tasks: Sequence[str], families: Sequence[str], workdir: str, *,
                  seeds: Sequence[int] = (0,), size: str = 'full', overrides: Sequence[str] = (),
                  configs_dir: str = CONFIGS_DIR, command: str = '') -> dict[str, Any]:
  """Runs what is missing and writes WORKDIR/results.json and results.md; returns the results."""
  results = {'size': size, 'seeds': list(seeds), 'device': device_name(),
             'git_commit': git_commit(), 'command': command, 'overrides': list(overrides),
             'tasks': {}}
  for task in tasks:
    missing = data_status(task, size, overrides, configs_dir)
    if missing:
      log.warning('%s: data missing: %s', task, missing)
      results['tasks'][task] = {'missing': missing}
      continue
    runs = {}
    for family in families:
      runs[family] = [run_one(task, family, size, seed,
                              os.path.join(workdir, task, family, f'seed{seed}'), overrides,
                              configs_dir) for seed in seeds]
    results['tasks'][task] = {'families': runs}
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1, sort_keys=True, default=str)
  with open(os.path.join(workdir, 'results.md'), 'w') as f:
    f.write(markdown(results))
  plot_curves(results, os.path.join(workdir, 'curves.png'))
  write_curves_csv(results, os.path.join(workdir, 'curves.csv'))
  return results


def validation_curves(results: dict[str, Any]) -> dict[str, dict[str, tuple[list, list]]]:
  """task -> '<family> seed <s>' -> (steps, validation accuracy %) from each run's metrics.jsonl."""
  from poolformers_jax.train.metrics import read_metrics
  curves = {}
  for task, entry in results['tasks'].items():
    for family, runs in entry.get('families', {}).items():
      for run in runs:
        records = read_metrics(run['workdir'], 'validation')
        if records:
          curves.setdefault(task, {})[f'{family} seed {run["seed"]}'] = (
              [r['step'] for r in records], [100.0 * r['accuracy'] for r in records])
  return curves


def write_curves_csv(results: dict[str, Any], path: str) -> None:
  """One row per (task, step), one column per run: the validation accuracy %, blank where absent."""
  curves = validation_curves(results)
  names = sorted({name for runs in curves.values() for name in runs})
  with open(path, 'w') as f:
    f.write(','.join(['task', 'step'] + names) + '\n')
    for task, runs in curves.items():
      by_step = {}
      for name, (steps, accuracy) in runs.items():
        for step, value in zip(steps, accuracy):
          by_step.setdefault(step, {})[name] = value
      for step in sorted(by_step):
        f.write(','.join([task, str(step)] + [
            f'{by_step[step][n]:.2f}' if n in by_step[step] else '' for n in names]) + '\n')


def plot_curves(results: dict[str, Any], path: str) -> Optional[str]:
  """One panel per task, one line per run; the papers' numbers as dotted lines. None: no curve."""
  curves = validation_curves(results)
  if not curves:
    return None
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
  for ax, (task, runs) in zip(axes[0], curves.items()):
    for i, (name, (steps, accuracy)) in enumerate(sorted(runs.items())):
      line, = ax.plot(steps, accuracy, label=name, color=f'C{i}')
      family = name.split(' seed ')[0]
      for number, _ in PAPER.get(task, {}).get(family, [])[:1]:
        ax.axhline(number, color=line.get_color(), linestyle=':', linewidth=1)
    ax.set(title=f'{task} (dotted: paper test)', xlabel='step', ylabel='validation accuracy %')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def _names(text: str, valid: Sequence[str], what: str) -> list[str]:
  names = list(valid) if text == 'all' else [n for n in text.replace(' ', '').split(',') if n]
  unknown = [n for n in names if n not in valid]
  if unknown or not names:
    raise SystemExit(f'--{what} {text!r}: unknown {unknown}; choose from {list(valid)} or all.')
  return names


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
  from poolformers_jax.configs_lib import SIZES
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = argparse.ArgumentParser(prog='python -m poolformers_jax.reproduce',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('benchmark', choices=['lra'])
  parser.add_argument('--task', default='all', help=f'{",".join(TASKS)} or all')
  parser.add_argument('--families', default='all', help=f'{",".join(FAMILIES)} or all')
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--seeds', default='0', help='comma-separated, e.g. 0,1,2')
  parser.add_argument('--size', default='full', choices=SIZES,
                      help='full: the paper setting; small: CPU-sized; tiny: a smoke test')
  parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='config override for every run, e.g. --set data.format=generated')
  parser.add_argument('--configs_dir', default=CONFIGS_DIR)
  args = parser.parse_args(argv)
  try:
    seeds = [int(s) for s in args.seeds.split(',') if s.strip()]
  except ValueError:
    raise SystemExit(f'--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1,2.')
  tasks = _names(args.task, TASKS, 'task')
  families = _names(args.families, FAMILIES, 'families')
  logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(message)s')
  from poolformers_jax.train import cli, host_memory
  cli.quiet_library_logs()
  host_memory.keep_freed_memory()
  try:
    results = reproduce_lra(tasks, families, args.workdir, seeds=seeds, size=args.size,
                            overrides=args.set, configs_dir=args.configs_dir,
                            command='python -m poolformers_jax.reproduce ' + ' '.join(argv))
  except RunStopped as stopped:   # one line, not a traceback: nothing went wrong
    raise SystemExit(f'stopped: {stopped}') from None
  print(markdown(results))
  return results


if __name__ == '__main__':
  main()
