"""The LRA table: every (task, family, seed) trained from configs/lra_<task>.py in its own
workdir, with self-pretraining beside it (--spt); WORKDIR/results.json, results.md and curves."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from poolformers_jax.config import lra as lra_configs
from poolformers_jax.experiments import plots, tables
from poolformers_jax.experiments.runs import (
  CONFIGS_DIR,
  SPT_OBJECTIVES,
  RunStopped,
  add_wall_time,
  best_validation,
  config_with,
  device_name,
  git_commit,
  log,
  median_steps_per_second,
  peak_memory_bytes,
)

# The tasks of the table, in its order (configs/lra_<task>.py).
TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder')
# config/lra.py's FAMILIES but the variants: linear_reference (only with the reference protocol)
# and AdaMRA with Eq. 8's gate (both trained by train.py --config configs/lra_<task>.py:<family>).
VARIANTS = ('linear_reference', 'adamra_eq8')
FAMILIES = tuple(f for f in lra_configs.FAMILIES if f not in VARIANTS)


def load_config(task: str, family: str, size: str, seed: int, overrides: Sequence[str] = (),
                configs_dir: str = CONFIGS_DIR):
  """configs/lra_<task>.py:<family>,<size> with config.seed and `key=value` overrides."""
  spec = os.path.join(configs_dir, f'lra_{task}.py') + f':{family},{size}'
  return config_with(spec, {'seed': seed}, overrides)


def run_one(task: str, family: str, size: str, seed: int, workdir: str,
            overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
            clock: Callable[[], float] = time.time) -> dict[str, Any]:
  """Trains and tests one (task, family, seed) in `workdir` unless its result.json exists.
  `family` may carry more config words ('ponet,spt': the self-pretraining run, without test).
  `clock` times the invocation for the run's wall time."""
  result_path = os.path.join(workdir, 'result.json')
  if os.path.exists(result_path):
    log.info('%s/%s seed %d: finished before (%s), not retrained.', task, family, seed,
             result_path)
    with open(result_path) as f:
      return {**json.load(f), 'skipped': True}
  from poolformers_jax.train import train_and_evaluate
  config = load_config(task, family, size, seed, overrides, configs_dir)
  log.info('%s/%s seed %d: training in %s', task, family, seed, workdir)
  start = clock()
  try:
    result = train_and_evaluate(config, workdir)
  finally:   # stopped or crashed, the time it trained counts towards the run's wall time
    wall = add_wall_time(workdir, clock() - start)
  if result.status != 'finished' or (result.test is None and config.final_test):
    raise RunStopped(f'{task}/{family} seed {seed} stopped at step {result.step} '
                       f'({result.status}); run the same command again to resume.')
  memory, memory_kind = peak_memory_bytes()
  record = dict(task=task, family=family, size=size, seed=seed, workdir=workdir,
                test_accuracy=100.0 * result.test['accuracy'] if result.test else None,
                test=result.test, best_validation_accuracy=best_validation(workdir),
                steps=result.step, steps_per_second=median_steps_per_second(workdir),
                wall_seconds=wall['seconds'], invocations=wall['invocations'],
                peak_memory_bytes=memory, peak_memory_kind=memory_kind,
                device=device_name(), git_commit=git_commit(), overrides=list(overrides))
  with open(result_path, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True, default=str)
  return {**record, 'skipped': False}


# ------------------------------------------------------------------------- self-pretraining

# Fine-tuning reads the pre-trained encoder; the classifier's head (absent there) starts fresh.
FINETUNE_FROM = 'init_from_allow_missing=^head/'


def spt_dir(workdir: str, task: str, family: str, seed: int, objective: str = 'masked') -> str:
  return os.path.join(workdir, task, family, f'{SPT_OBJECTIVES[objective][0]}_seed{seed}')


def _steps(steps: int | None) -> list[str]:
  return [] if steps is None else [f'num_train_steps={steps}']


def spt_stages(task: str, family: str, size: str, seed: int, workdir: str,
               overrides: Sequence[str] = (), pretrain_steps: int | None = None,
               finetune_steps: int | None = None,
               objective: str = 'masked') -> list[tuple[str, str, list[str]]]:
  """The two runs of self-pretraining as (config words, workdir, overrides): the `spt` (or
  `spt_causal`) run, then the task itself from its best checkpoint (init_from)."""
  pretrain, finetune = os.path.join(workdir, 'pretrain'), os.path.join(workdir, 'finetune')
  word = SPT_OBJECTIVES[objective][0]
  return [(f'{family},{word}', pretrain, [*overrides, *_steps(pretrain_steps)]),
          (family, finetune, [*overrides, *_steps(finetune_steps), f'init_from={pretrain}',
                              FINETUNE_FROM])]


def run_spt(task: str, family: str, size: str, seed: int, workdir: str,
            overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
            pretrain_steps: int | None = None, finetune_steps: int | None = None,
            clock: Callable[[], float] = time.time, objective: str = 'masked') -> dict[str, Any]:
  """Self-pretraining (`objective`: 'masked' or 'causal') then fine-tuning of one (task, family,
  seed) in `workdir`/{pretrain, finetune}; each stage resumes or is skipped like any run_one.
  The fine-tuned run's record, with the pre-training's under 'pretrain'."""
  (pre_words, pre_dir, pre_set), (words, ft_dir, ft_set) = spt_stages(
      task, family, size, seed, workdir, overrides, pretrain_steps, finetune_steps, objective)
  pretrain = run_one(task, pre_words, size, seed, pre_dir, pre_set, configs_dir, clock)
  finetuned = run_one(task, words, size, seed, ft_dir, ft_set, configs_dir, clock)
  return {**finetuned, 'pretrain': pretrain,
          'wall_seconds': finetuned['wall_seconds'] + pretrain['wall_seconds']}


def data_status(task: str, size: str, overrides: Sequence[str] = (),
                configs_dir: str = CONFIGS_DIR, family: str = 'transformer') -> str | None:
  """None when the task's data can be read or is made on first use (`generated`), else why not.
  Read with `family`'s config: the --set overrides may name keys only that family has."""
  from poolformers_jax import data
  settings = data.settings(load_config(task, family, size, 0, overrides, configs_dir).data)
  generated = data.DATASETS[settings.name].generated
  if generated and generated(settings):
    return None    # made on first use, not here
  try:
    data.get_dataset_info(settings)
  except data.DataNotFoundError as e:
    return str(e)
  return None


def check_configs(tasks: Sequence[str], families: Sequence[str], size: str,
                  overrides: Sequence[str], configs_dir: str = CONFIGS_DIR,
                  spt: bool = False, objective: str = 'masked') -> None:
  """Loads every (task, family) config with the overrides before anything trains, so that a bad
  --set (or a mixer without a causal form) fails at once, not after the first family's run."""
  word = SPT_OBJECTIVES[objective][0]
  for task in tasks:
    for family in families:
      for words in (family, f'{family},{word}') if spt else (family,):
        config = load_config(task, words, size, 0, overrides, configs_dir)
        if words != family and objective == 'causal':
          from poolformers_jax.layers.registry import check_causal
          check_causal(config.model.mixer)


def _state(run_dir: str, steps: int) -> str:
  return ('finished' if os.path.exists(os.path.join(run_dir, 'result.json'))
          else f'to train ({steps} steps)')


def plan(tasks: Sequence[str], families: Sequence[str], workdir: str, *, seeds: Sequence[int],
         size: str, overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
         spt: bool = False, pretrain_steps: int | None = None,
         finetune_steps: int | None = None, objective: str = 'masked') -> list[str]:
  """--dry_run: one line per run (finished / to train, its steps) or per task whose data is
  missing; with `spt`, also both stages of self-pretraining (`objective`'s); every config is
  loaded with the overrides, nothing is written or compiled."""
  check_configs(tasks, families, size, overrides, configs_dir, spt, objective)
  lines = []
  for task in tasks:
    missing = data_status(task, size, overrides, configs_dir, families[0])
    if missing:
      lines.append(f'{task}: data missing: {missing}')
      continue
    for family in families:
      for seed in seeds:
        run_dir = os.path.join(workdir, task, family, f'seed{seed}')
        steps = load_config(task, family, size, seed, overrides, configs_dir).num_train_steps
        lines.append(f'{task}/{family} seed {seed}: {_state(run_dir, steps)} in {run_dir}')
        if not spt:
          continue
        stages = (f'self-pretraining ({SPT_OBJECTIVES[objective][1]})', 'fine-tuning')
        for stage, (words, stage_dir, stage_set) in zip(stages, spt_stages(
            task, family, size, seed, spt_dir(workdir, task, family, seed, objective), overrides,
            pretrain_steps, finetune_steps, objective)):
          steps = load_config(task, words, size, seed, stage_set, configs_dir).num_train_steps
          lines.append(f'{task}/{family} seed {seed} {stage}: {_state(stage_dir, steps)} in '
                       f'{stage_dir}')
  return lines


def reproduce_lra(tasks: Sequence[str], families: Sequence[str], workdir: str, *,
                  seeds: Sequence[int] = (0,), size: str = 'full', overrides: Sequence[str] = (),
                  configs_dir: str = CONFIGS_DIR, command: str = '', spt: bool = False,
                  pretrain_steps: int | None = None, finetune_steps: int | None = None,
                  clock: Callable[[], float] = time.time,
                  objective: str = 'masked') -> dict[str, Any]:
  """Runs what is missing and writes WORKDIR/results.json and results.md; returns the results.
  With `spt`, every (task, family, seed) also self-pretrains and fine-tunes (run_spt) in
  WORKDIR/<task>/<family>/spt_seed<s> (spt_causal_seed<s>)."""
  check_configs(tasks, families, size, overrides, configs_dir, spt, objective)
  results: dict[str, Any] = {
      'size': size, 'seeds': list(seeds), 'device': device_name(), 'git_commit': git_commit(),
      'command': command, 'overrides': list(overrides), 'tasks': {},
      **({'spt_objective': objective} if spt else {})}
  for task in tasks:
    missing = data_status(task, size, overrides, configs_dir, families[0])
    if missing:
      log.warning('%s: data missing: %s', task, missing)
      results['tasks'][task] = {'missing': missing}
      continue
    runs, spt_runs = {}, {}
    for family in families:
      runs[family] = [run_one(task, family, size, seed,
                              os.path.join(workdir, task, family, f'seed{seed}'), overrides,
                              configs_dir, clock) for seed in seeds]
      if spt:
        spt_runs[family] = [run_spt(task, family, size, seed,
                                    spt_dir(workdir, task, family, seed, objective), overrides,
                                    configs_dir, pretrain_steps, finetune_steps, clock, objective)
                            for seed in seeds]
    results['tasks'][task] = {'families': runs, **({'spt': spt_runs} if spt else {})}
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1, sort_keys=True, default=str)
  with open(os.path.join(workdir, 'results.md'), 'w') as f:
    f.write(tables.markdown(results))
  plots.plot_curves(results, os.path.join(workdir, 'curves.png'))
  plots.write_curves_csv(results, os.path.join(workdir, 'curves.csv'))
  return results
