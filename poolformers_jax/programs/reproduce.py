r"""Reproduce a Long Range Arena table, or PoNet's GLUE table, in one command.

  python -m poolformers_jax.reproduce lra --task listops --families all --workdir runs/repro \
      [--seeds 0,1,2] [--size full|small|tiny] [--set key=value ...] [--spt [--spt_steps N]
      [--finetune_steps N] [--spt_objective masked|causal]]

For every task (`--task all`: every LRA task) and model family it trains the task's config
(configs/lra_<task>.py:<family>,<size>) in its own workdir, WORKDIR/<task>/<family>/seed<s>, with
the one training loop (`train.train_and_evaluate`: resumes from the latest checkpoint, evaluates
the best checkpoint on test). A finished run (its result.json exists) is not trained again. It
then writes WORKDIR/results.json and WORKDIR/results.md: per task and family the test accuracy
(mean ± sample std over seeds), the papers' numbers beside it (PAPER below, the one copy:
tests/test_reproduce.py keeps the configs' docstrings and docs/papers/lra.md equal to it),
steps/s, wall time (summed over every invocation that trained the run, resumptions included),
peak memory, device, seeds and git commit; and WORKDIR/curves.png and curves.csv, the
validation accuracy of every run against its step. A task whose data is missing is reported as such, with the one line
that says how to get it.

`--spt` adds self-pretraining (Amos et al. 2024, data/masking.py) beside every run: the `spt`
config (masked tokens of the task's own training inputs) in WORKDIR/<task>/<family>/spt_seed<s>/
pretrain, then the task's config fine-tuned from its best checkpoint (init_from; the classifier
head new) in .../finetune; results.md then has a second table, scratch and self-pretrained side
by side. --spt_steps / --finetune_steps set each stage's steps (e.g. half the task's each, for
the same total as scratch). `--spt_objective causal` pre-trains by next-token prediction instead
(the `spt_causal` config: the same encoder with causal mixers), in .../spt_causal_seed<s>/.

The GLUE table of PoNet's slides: the paper's grid per task, the best run on dev.

  python -m poolformers_jax.reproduce glue --task all --workdir runs/glue_grid \
      --set init_from=runs/ponet_pretrain [--families ponet|bert] [--batch_sizes 8,16,32,64,128] \
      [--learning_rates 3e-5,5e-5,1e-4,3e-4] [--size full|small|tiny]

Every (batch size, learning rate) of the grid trains configs/glue.py:<task>,<family> in
WORKDIR/glue/<family>/<task>/b<batch>_lr<lr> (4 epochs: the config's steps follow the batch size;
a finished run is not trained again). A run's dev score is its best validation evaluation of the
task's metric (the one its best checkpoint keeps); the task's result is the run with the highest
dev score. MNLI's matched accuracy is that score, its mismatched one the test split (validation
mismatched) of the same best checkpoint. WORKDIR/glue_results.md (one table: ours beside the
slides' PoNet-Base and BERT-Base numbers, GLUE_PAPER below) and glue_results.json (every run).
"""
from __future__ import annotations

import ast
import json
import logging
import os
import resource
import subprocess
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from poolformers_jax import errors
from poolformers_jax.config import files as config_files, lra as lra_configs

# Test accuracy (%) at the paper setting: task -> family -> [(number, where it is from)].
PAPER: dict[str, dict[str, list[tuple[float, str]]]] = {
    'listops': {'transformer': [(36.37, 'LRA'), (37.10, 'Nystromformer setting')],
                'linear': [(37.35, 'AdaMRA T1'), (16.13, 'LRA')], 'ponet': [(37.80, 'PoNet')],
                'adamra': [(40.40, 'AdaMRA')]},
    'text': {'transformer': [(64.27, 'LRA'), (65.02, 'Nystromformer setting')],
             'linear': [(64.15, 'AdaMRA T1'), (65.90, 'LRA')], 'ponet': [(69.82, 'PoNet')],
             'adamra': [(68.44, 'AdaMRA')]},
    'retrieval': {'transformer': [(57.46, 'LRA'), (79.35, 'Nystromformer setting')],
                  'linear': [(81.10, 'AdaMRA T1'), (53.09, 'LRA')], 'ponet': [(80.35, 'PoNet')],
                  'adamra': [(84.83, 'AdaMRA')]},
    'image': {'transformer': [(42.44, 'LRA'), (38.20, 'Nystromformer setting')],
              'linear': [(38.20, 'AdaMRA T1'), (42.34, 'LRA')], 'ponet': [(46.88, 'PoNet')],
              'adamra': [(46.00, 'AdaMRA')]},
    'pathfinder': {'transformer': [(71.40, 'LRA'), (74.16, 'Nystromformer setting')],
                   'linear': [(70.20, 'AdaMRA T1'), (75.30, 'LRA')], 'ponet': [(70.39, 'PoNet')],
                   'adamra': [(75.77, 'AdaMRA')]},
}
TASKS = ('listops', 'text', 'retrieval', 'image', 'pathfinder')
# The LRA configs' model families (config/lra.py's FAMILIES) but the variants of one: the `_reference`
# ones, which only make sense with the reference protocol (configs/lra_<task>.py:linear_reference,
# reference), and AdaMRA with Eq. 8's gate (train.py --config configs/lra_<task>.py:adamra_eq8).
VARIANTS = ('linear_reference', 'adamra_eq8')
FAMILIES = tuple(f for f in lra_configs.FAMILIES if f not in VARIANTS)
# GLUE dev (%) of the slides (pre-trained 340K steps on 5 GB): task -> (PoNet-Base, BERT-Base);
# MNLI matched / mismatched. QQP / MRPC: mean of accuracy and F1, CoLA: Matthews, STS-B: Spearman.
GLUE_PAPER: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    'mnli': ((76.99, 77.21), (81.35, 80.98)), 'qqp': ((87.55,), (88.89,)),
    'qnli': ((84.33,), (88.01,)), 'sst2': ((89.22,), (91.17,)), 'cola': ((45.36,), (47.66,)),
    'stsb': ((84.57,), (87.83,)), 'mrpc': ((81.76,), (86.66,)), 'rte': ((64.26,), (69.31,)),
}
GLUE_PAPER_AVERAGE = (76.80, 80.21)       # over the nine numbers above
GLUE_TASKS = tuple(GLUE_PAPER)            # WNLI: not in the slides
GLUE_FAMILIES = ('ponet', 'bert')
# The official grid (run_shell/2-GLUE.sh; "20 sets of hyperparameter configurations").
GLUE_BATCH_SIZES = (8, 16, 32, 64, 128)
GLUE_LEARNING_RATES = (3e-5, 5e-5, 1e-4, 3e-4)
# The shipped configs (config.files: poolformers_jax/configs in a wheel, configs/ in a checkout).
CONFIGS_DIR = config_files.CONFIGS_DIR

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
  spec = os.path.join(configs_dir, f'lra_{task}.py') + f':{family},{size}'
  return _config_with(spec, {'seed': seed}, overrides)


def _config_with(spec: str, updates: dict[str, Any], overrides: Sequence[str]):
  """The config file `spec` with `updates`, then the `--set key=value` overrides."""
  from poolformers_jax import config as config_lib
  from poolformers_jax.train import cli
  updates = dict(updates)
  for item in overrides:
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'--set {item!r}: expected key=value, e.g. --set num_train_steps=100.')
    updates[key] = _parse_value(value)
  try:
    config = config_lib.override(cli.load_config_file(spec), **updates)
    if 'mixer' in config.model and config.model.get('mixer_kwargs'):   # open: any key passes
      from poolformers_jax import registry
      registry.import_modules(config.get('imports', ''))
      from poolformers_jax.layers.registry import check_options
      check_options(config.model.mixer, config.model.mixer_kwargs)
    return config
  except (config_lib.ConfigKeyError, ValueError) as error:   # name the config: --set is for all
    raise type(error)(
        f'--set for configs/{os.path.basename(spec)}: {str(error).rstrip(".")}; pass only --families whose config has '
        'that key (or mixer option)') from None


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


def _best_validation(workdir: str) -> Optional[float]:
  """The best validation accuracy (%) the run evaluated (what its best checkpoint kept)."""
  from poolformers_jax.train.metrics import read_metrics
  accuracy = [r['accuracy'] for r in read_metrics(workdir, 'validation') if 'accuracy' in r]
  return 100.0 * max(accuracy) if accuracy else None


class RunStopped(RuntimeError):
  """A run stopped before its end (SIGTERM / preemption): its checkpoint is kept."""


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
            overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
            clock: Callable[[], float] = time.time) -> dict[str, Any]:
  """Trains and tests one (task, family, seed) in `workdir` unless its result.json exists.
  `family` may carry more config words: 'ponet,spt' is the self-pretraining run, which has no
  test (its record has the best validation accuracy of the masked tokens instead). `clock`
  times the invocation for the run's wall time."""
  result_path = os.path.join(workdir, 'result.json')
  if os.path.exists(result_path):
    log.info('%s/%s seed %d: finished before (%s), not retrained.', task, family, seed, result_path)
    with open(result_path) as f:
      return {**json.load(f), 'skipped': True}
  from poolformers_jax.train import train_and_evaluate
  config = load_config(task, family, size, seed, overrides, configs_dir)
  log.info('%s/%s seed %d: training in %s', task, family, seed, workdir)
  start = clock()
  try:
    result = train_and_evaluate(config, workdir)
  finally:   # stopped or crashed, the time it trained counts towards the run's wall time
    wall = _add_wall_time(workdir, clock() - start)
  if result.status != 'finished' or (result.test is None and config.final_test):
    raise RunStopped(f'{task}/{family} seed {seed} stopped at step {result.step} '
                       f'({result.status}); run the same command again to resume.')
  memory, memory_kind = peak_memory_bytes()
  record = dict(task=task, family=family, size=size, seed=seed, workdir=workdir,
                test_accuracy=100.0 * result.test['accuracy'] if result.test else None,
                test=result.test, best_validation_accuracy=_best_validation(workdir),
                steps=result.step, steps_per_second=_median_steps_per_second(workdir),
                wall_seconds=wall['seconds'], invocations=wall['invocations'],
                peak_memory_bytes=memory, peak_memory_kind=memory_kind,
                device=device_name(), git_commit=git_commit(), overrides=list(overrides))
  with open(result_path, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True, default=str)
  return {**record, 'skipped': False}


# ------------------------------------------------------------------------- self-pretraining

# Fine-tuning reads the pre-trained encoder; the classifier's head (absent there) starts fresh.
FINETUNE_FROM = 'init_from_allow_missing=^head/'
# --spt_objective -> the pre-training's config word (config/lra.py STAGES) and what it predicts
SPT_OBJECTIVES = {'masked': ('spt', 'masked tokens'), 'causal': ('spt_causal', 'next tokens')}


def spt_dir(workdir: str, task: str, family: str, seed: int, objective: str = 'masked') -> str:
  return os.path.join(workdir, task, family, f'{SPT_OBJECTIVES[objective][0]}_seed{seed}')


def _steps(steps: Optional[int]) -> list[str]:
  return [] if steps is None else [f'num_train_steps={steps}']


def spt_stages(task: str, family: str, size: str, seed: int, workdir: str,
               overrides: Sequence[str] = (), pretrain_steps: Optional[int] = None,
               finetune_steps: Optional[int] = None,
               objective: str = 'masked') -> list[tuple[str, str, list[str]]]:
  """The two runs of self-pretraining as (config words, workdir, overrides): the `spt` run on
  the task's own inputs (`spt_causal` for objective 'causal'), then the task itself from its
  best checkpoint (init_from)."""
  pretrain, finetune = os.path.join(workdir, 'pretrain'), os.path.join(workdir, 'finetune')
  word = SPT_OBJECTIVES[objective][0]
  return [(f'{family},{word}', pretrain, [*overrides, *_steps(pretrain_steps)]),
          (family, finetune, [*overrides, *_steps(finetune_steps), f'init_from={pretrain}',
                              FINETUNE_FROM])]


def run_spt(task: str, family: str, size: str, seed: int, workdir: str,
            overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
            pretrain_steps: Optional[int] = None, finetune_steps: Optional[int] = None,
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
                configs_dir: str = CONFIGS_DIR, family: str = 'transformer') -> Optional[str]:
  """None when the task's data can be read (ListOps is generated), else the line saying why.
  Read with `family`'s config: the --set overrides may name keys only that family has."""
  from poolformers_jax import data
  config = load_config(task, family, size, 0, overrides, configs_dir)
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


def check_configs(tasks: Sequence[str], families: Sequence[str], size: str,
                  overrides: Sequence[str], configs_dir: str = CONFIGS_DIR,
                  spt: bool = False, objective: str = 'masked') -> None:
  """Loads every (task, family) config with the overrides before anything trains, so that a bad
  --set (or a mixer without the causal form `objective` 'causal' needs) fails at once in one
  line, not after the first family's run."""
  word = SPT_OBJECTIVES[objective][0]
  for task in tasks:
    for family in families:
      for words in (family, f'{family},{word}') if spt else (family,):
        config = load_config(task, words, size, 0, overrides, configs_dir)
        if words != family and objective == 'causal':   # before anything trains, in one line
          from poolformers_jax.layers.registry import check_causal
          check_causal(config.model.mixer)


def _state(run_dir: str, steps: int) -> str:
  return ('finished' if os.path.exists(os.path.join(run_dir, 'result.json'))
          else f'to train ({steps} steps)')


def plan(tasks: Sequence[str], families: Sequence[str], workdir: str, *, seeds: Sequence[int],
         size: str, overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR,
         spt: bool = False, pretrain_steps: Optional[int] = None,
         finetune_steps: Optional[int] = None, objective: str = 'masked') -> list[str]:
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
                  pretrain_steps: Optional[int] = None, finetune_steps: Optional[int] = None,
                  clock: Callable[[], float] = time.time,
                  objective: str = 'masked') -> dict[str, Any]:
  """Runs what is missing and writes WORKDIR/results.json and results.md; returns the results.
  `clock` times each invocation (the runs' wall times).
  With `spt`, every (task, family, seed) also self-pretrains (`objective`: 'masked' or 'causal')
  and fine-tunes (run_spt) in WORKDIR/<task>/<family>/spt_seed<s> (spt_causal_seed<s>), beside
  the run from scratch."""
  check_configs(tasks, families, size, overrides, configs_dir, spt, objective)
  results = {'size': size, 'seeds': list(seeds), 'device': device_name(),
             'git_commit': git_commit(), 'command': command, 'overrides': list(overrides),
             'tasks': {}, **({'spt_objective': objective} if spt else {})}
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
    f.write(markdown(results))
  plot_curves(results, os.path.join(workdir, 'curves.png'))
  write_curves_csv(results, os.path.join(workdir, 'curves.csv'))
  return results


def validation_curves(results: dict[str, Any]) -> dict[str, dict[str, tuple[list, list]]]:
  """task -> '<family> seed <s>' -> (steps, validation accuracy %) from each run's metrics.jsonl."""
  from poolformers_jax.train.metrics import read_metrics
  curves = {}
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
    # One colour per family (its paper line too), one line style per seed.
    families = sorted({name.split(' seed ')[0] for name in runs})
    seen = {}
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


# ------------------------------------------------------------------------------------------ GLUE

def load_glue_config(task: str, family: str, size: str, batch_size: int, learning_rate: float,
                     overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR):
  """configs/glue.py:<task>,<family>,<size> at one grid point, then `key=value` overrides."""
  spec = os.path.join(configs_dir, 'glue.py') + f':{task},{family},{size}'
  return _config_with(spec, {'batch_size': batch_size, 'optimizer.learning_rate': learning_rate},
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
  from poolformers_jax.train.metrics import read_metrics
  config = load_glue_config(task, family, size, batch_size, learning_rate, overrides, configs_dir)
  log.info('glue %s b%d lr%g: training %d steps in %s', task, batch_size, learning_rate,
           config.num_train_steps, workdir)
  start = time.time()
  try:
    result = train_and_evaluate(config, workdir)
  finally:
    wall = _add_wall_time(workdir, time.time() - start)
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


def glue_data_status(task: str, family: str, size: str, overrides: Sequence[str],
                     configs_dir: str) -> Optional[str]:
  from poolformers_jax import data
  config = load_glue_config(task, family, size, 8, 3e-5, overrides, configs_dir)
  try:
    data.get_dataset_info(config)
  except data.DataNotFoundError as e:
    return str(e)
  return None


def glue_plan(tasks: Sequence[str], families: Sequence[str], workdir: str, *,
              batch_sizes: Sequence[int], learning_rates: Sequence[float], size: str,
              overrides: Sequence[str] = (), configs_dir: str = CONFIGS_DIR) -> list[str]:
  """--dry_run: per family and task, how many grid runs are finished, or why its data is missing."""
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
  results = {'size': size, 'device': device_name(), 'git_commit': git_commit(),
             'command': command, 'overrides': list(overrides), 'batch_sizes': list(batch_sizes),
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
    f.write(glue_markdown(results))
  return results


def _names(text: str, valid: Sequence[str], what: str) -> list[str]:
  names = list(valid) if text == 'all' else [n for n in text.replace(' ', '').split(',') if n]
  unknown = [n for n in names if n not in valid]
  if unknown or not names:
    raise ValueError(f'--{what} {text!r}: unknown {unknown}; choose from {",".join(valid)} or '
                     'all (comma-separated)')
  return names


def _numbers(text: str, kind: type, what: str) -> list:
  try:
    return [kind(v) for v in text.split(',') if v.strip()]
  except ValueError:
    raise ValueError(f'--{what} {text!r}: expected comma-separated numbers, e.g. '
                     f'--{what} 0,1,2') from None


@errors.one_line_errors
def main(argv: Optional[Sequence[str]] = None) -> Optional[dict[str, Any]]:
  from poolformers_jax.config import SIZES
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = errors.ArgumentParser(prog='python -m poolformers_jax.reproduce',
                                 description=__doc__.split('\n\n')[0])
  parser.add_argument('benchmark', choices=['lra', 'glue'])
  parser.add_argument('--task', default='all',
                      help=f'lra: {",".join(TASKS)}; glue: {",".join(GLUE_TASKS)}; or all')
  parser.add_argument('--families', default=None,
                      help=f'lra: {",".join(FAMILIES)} or all (default); glue: '
                      f'{",".join(GLUE_FAMILIES)} or all (default ponet)')
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--seeds', default='0', help='lra: comma-separated, e.g. 0,1,2')
  parser.add_argument('--batch_sizes', default=','.join(map(str, GLUE_BATCH_SIZES)),
                      help='glue: the grid\'s batch sizes')
  parser.add_argument('--learning_rates', default=','.join(f'{x:g}' for x in GLUE_LEARNING_RATES),
                      help='glue: the grid\'s learning rates')
  parser.add_argument('--size', default='full', choices=SIZES,
                      help='full: the paper setting; small: CPU-sized; tiny: a smoke test')
  parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='config override for every run, e.g. --set data.format=generated')
  parser.add_argument('--configs_dir', default=CONFIGS_DIR)
  parser.add_argument('--spt', action='store_true',
                      help='lra: also self-pretrain on the task\'s own inputs (config word spt) '
                      'and fine-tune from it, beside each run from scratch')
  parser.add_argument('--spt_steps', type=int, default=None,
                      help='lra --spt: pre-training steps (default: the spt config\'s)')
  parser.add_argument('--finetune_steps', type=int, default=None,
                      help='lra --spt: fine-tuning steps (default: the task config\'s)')
  parser.add_argument('--spt_objective', default='masked', choices=sorted(SPT_OBJECTIVES),
                      help='lra --spt: masked tokens (config word spt, the default) or next '
                      'tokens (spt_causal: causal mixers; not for ponet or adamra)')
  parser.add_argument('--dry_run', action='store_true',
                      help='load every config with --set, check the data, print what would run; '
                      'train nothing')
  args = parser.parse_args(argv)
  seeds = _numbers(args.seeds, int, 'seeds')
  if args.benchmark == 'glue':
    tasks = _names(args.task, GLUE_TASKS, 'task')
    families = _names(args.families or 'ponet', GLUE_FAMILIES, 'families')
  else:
    tasks = _names(args.task, TASKS, 'task')
    families = _names(args.families or 'all', FAMILIES, 'families')
  if args.dry_run:
    lines = (glue_plan(tasks, families, args.workdir,
                       batch_sizes=_numbers(args.batch_sizes, int, 'batch_sizes'),
                       learning_rates=_numbers(args.learning_rates, float, 'learning_rates'),
                       size=args.size, overrides=args.set, configs_dir=args.configs_dir)
             if args.benchmark == 'glue' else
             plan(tasks, families, args.workdir, seeds=seeds, size=args.size, overrides=args.set,
                  configs_dir=args.configs_dir, spt=args.spt, pretrain_steps=args.spt_steps,
                  finetune_steps=args.finetune_steps, objective=args.spt_objective))
    print('\n'.join(lines))
    return None
  logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(message)s')
  from poolformers_jax.train import cli, host_memory, sharding
  cli.quiet_library_logs()
  host_memory.keep_freed_memory()
  sharding.maybe_initialize_distributed('auto')   # as train's --distributed=auto
  command = 'python -m poolformers_jax.reproduce ' + ' '.join(argv)
  try:
    if args.benchmark == 'glue':
      results = reproduce_glue(tasks, families, args.workdir,
                               batch_sizes=_numbers(args.batch_sizes, int, 'batch_sizes'),
                               learning_rates=_numbers(args.learning_rates, float,
                                                       'learning_rates'),
                               size=args.size, overrides=args.set, configs_dir=args.configs_dir,
                               command=command)
      print(glue_markdown(results))
      return results
    results = reproduce_lra(tasks, families, args.workdir, seeds=seeds, size=args.size,
                            overrides=args.set, configs_dir=args.configs_dir, command=command,
                            spt=args.spt, pretrain_steps=args.spt_steps,
                            finetune_steps=args.finetune_steps, objective=args.spt_objective)
  except RunStopped as stopped:   # one line, not a traceback: nothing went wrong
    raise SystemExit(f'stopped: {stopped}') from None
  print(markdown(results))
  return results


def run(argv: Optional[Sequence[str]] = None):
  """The program (`python -m poolformers_jax.reproduce`, `poolformers-jax reproduce`)."""
  from poolformers_jax import runtime  # pylint: disable=g-import-not-at-top
  runtime.configure_program()
  main(None if argv is None else list(argv)[1:])


if __name__ == '__main__':
  run()
