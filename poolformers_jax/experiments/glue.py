"""PoNet's GLUE table: the paper's grid (batch size x learning rate) per task from
configs/glue.py, the best run on dev; WORKDIR/glue_results.json and glue_results.md."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from poolformers_jax.experiments import tables
from poolformers_jax.experiments.papers import GLUE_PAPER
from poolformers_jax.experiments.runs import (
  CONFIGS_DIR,
  RunStopped,
  add_wall_time,
  config_with,
  device_name,
  git_commit,
  log,
)

GLUE_TASKS = tuple(GLUE_PAPER)            # WNLI: not in the slides
GLUE_FAMILIES = ('ponet', 'bert')
# The official grid (run_shell/2-GLUE.sh; "20 sets of hyperparameter configurations").
GLUE_BATCH_SIZES = (8, 16, 32, 64, 128)
GLUE_LEARNING_RATES = (3e-5, 5e-5, 1e-4, 3e-4)


def load_glue_config(task: str, family: str, size: str, batch_size: int, learning_rate: float,
                     overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR):
  """configs/glue.py:<task>,<family>,<size> at one grid point, then `key=value` overrides."""
  spec = os.path.join(configs_dir, 'glue.py') + f':{task},{family},{size}'
  return config_with(spec, {'batch_size': batch_size, 'optimizer.learning_rate': learning_rate},
                     overrides)


def run_glue_point(task: str, family: str, size: str, batch_size: int, learning_rate: float,
                   workdir: str, overrides: Sequence[str] = (),
                   configs_dir: str = CONFIGS_DIR) -> dict[str, Any]:
  """Trains one grid point unless its result.json exists; its dev score is the best validation
  value of the task's metric over the run (the best checkpoint), in %."""
  result_path = os.path.join(workdir, 'result.json')
  if os.path.exists(result_path):
    log.info('glue %s b%d lr%g: finished before (%s), not retrained.', task, batch_size,
             learning_rate, result_path)
    with open(result_path) as f:
      return {**json.load(f), 'skipped': True}
  from poolformers_jax.train import train_and_evaluate
  from poolformers_jax.trainer.metrics import read_metrics
  config = load_glue_config(task, family, size, batch_size, learning_rate, overrides, configs_dir)
  log.info('glue %s b%d lr%g: training %d steps in %s', task, batch_size, learning_rate,
           config.num_train_steps, workdir)
  start = time.time()
  try:
    result = train_and_evaluate(config, workdir)
  finally:
    wall = add_wall_time(workdir, time.time() - start)
  if result.status != 'finished' or result.test is None:
    raise RunStopped(f'glue {task} b{batch_size} lr{learning_rate:g} stopped at step '
                     f'{result.step} ({result.status}); run the same command again to resume.')
  metric = config.best_metric
  evaluations = read_metrics(workdir, 'validation')
  best = max(evaluations, key=lambda r: r[metric])   # the first of equals, as the checkpointer
  record = dict(task=task, family=family, size=size, batch_size=batch_size,
                learning_rate=learning_rate, workdir=workdir, metric=metric, steps=result.step,
                dev=100.0 * best[metric], dev_step=best['step'],
                test={k: v for k, v in result.test.items() if isinstance(v, (int, float))},
                wall_seconds=wall['seconds'], device=device_name(), git_commit=git_commit(),
                overrides=list(overrides))
  if task == 'mnli':   # the best (matched) checkpoint on validation mismatched
    record['dev_mismatched'] = 100.0 * result.test['accuracy']
  with open(result_path, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True, default=str)
  return {**record, 'skipped': False}


def glue_data_status(task: str, family: str, size: str, overrides: Sequence[str],
                     configs_dir: str) -> str | None:
  from poolformers_jax import data
  config = load_glue_config(task, family, size, 8, 3e-5, overrides, configs_dir)
  try:
    data.get_dataset_info(data.settings(config.data))
  except data.DataNotFoundError as e:
    return str(e)
  return None


def glue_plan(tasks: Sequence[str], families: Sequence[str], workdir: str, *,
              batch_sizes: Sequence[int], learning_rates: Sequence[float], size: str,
              overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR) -> list[str]:
  """--dry_run: per family and task, the grid runs finished, or why its data is missing."""
  lines = []
  for family in families:
    for task in tasks:
      missing = glue_data_status(task, family, size, overrides, configs_dir)
      if missing:
        lines.append(f'glue {family}/{task}: data missing: {missing}')
        continue
      grid = [os.path.join(workdir, 'glue', family, task, f'b{b}_lr{lr:g}')
              for b in batch_sizes for lr in learning_rates]
      done = sum(os.path.exists(os.path.join(run, 'result.json')) for run in grid)
      lines.append(f'glue {family}/{task}: {done} of {len(grid)} grid runs finished in '
                   f'{os.path.join(workdir, "glue", family, task)}')
  return lines


def reproduce_glue(tasks: Sequence[str], families: Sequence[str], workdir: str, *,
                   batch_sizes: Sequence[int] = GLUE_BATCH_SIZES,
                   learning_rates: Sequence[float] = GLUE_LEARNING_RATES, size: str = 'full',
                   overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
                   command: str = '') -> dict[str, Any]:
  """Runs what is missing of the grid, picks the best run on dev per task, writes
  WORKDIR/glue_results.json and glue_results.md; returns the results."""
  results: dict[str, Any] = {
      'size': size, 'device': device_name(), 'git_commit': git_commit(), 'command': command,
      'overrides': list(overrides), 'batch_sizes': list(batch_sizes),
      'learning_rates': list(learning_rates), 'families': {}}
  for family in families:
    for task in tasks:
      missing = glue_data_status(task, family, size, overrides, configs_dir)
      if missing:
        log.warning('glue %s: data missing: %s', task, missing)
        results['families'].setdefault(family, {})[task] = {'missing': missing}
        continue
      runs = [run_glue_point(task, family, size, b, lr,
                             os.path.join(workdir, 'glue', family, task, f'b{b}_lr{lr:g}'),
                             overrides, configs_dir)
              for b in batch_sizes for lr in learning_rates]
      best = max(runs, key=lambda r: r['dev'])   # the first of equals, in grid order
      results['families'].setdefault(family, {})[task] = {'runs': runs, 'best': best}
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'glue_results.json'), 'w') as f:
    json.dump(results, f, indent=1, sort_keys=True, default=str)
  with open(os.path.join(workdir, 'glue_results.md'), 'w') as f:
    f.write(tables.glue_markdown(results))
  return results
