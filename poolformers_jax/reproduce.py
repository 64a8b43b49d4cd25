r"""Reproduce a Long Range Arena table, or PoNet's GLUE table, in one command.

  python -m poolformers_jax.reproduce lra --task listops --families all --workdir runs/repro \
      [--seeds 0,1,2] [--size full|small|tiny] [--set key=value ...] [--spt [--spt_steps N]
      [--finetune_steps N] [--spt_objective masked|causal]]

For every task and model family it trains configs/lra_<task>.py:<family>,<size> in
WORKDIR/<task>/<family>/seed<s> with `train.train_and_evaluate` (resuming; a run whose result.json
exists is not trained again), then writes WORKDIR/results.json and results.md (per task and
family: test accuracy, mean ± sample std over seeds, beside the papers' numbers; steps/s, wall
time over every invocation, peak memory, device, seeds, git commit) and curves.png / curves.csv
(validation accuracy against step). A task whose data is missing is reported with what to do.

`--spt` adds self-pretraining (Amos et al. 2024, data/masking.py) beside every run: the `spt`
config (masked tokens of the task's own inputs; `--spt_objective causal`: next tokens, the
`spt_causal` config) in WORKDIR/<task>/<family>/spt_seed<s>/pretrain, then the task's config
fine-tuned from its best checkpoint in .../finetune; results.md then has a second table.

The GLUE table of PoNet's slides: the paper's grid per task, the best run on dev.

  python -m poolformers_jax.reproduce glue --task all --workdir runs/glue_grid \
      --set init_from=runs/ponet_pretrain [--families ponet|bert] [--batch_sizes 8,16,32,64,128] \
      [--learning_rates 3e-5,5e-5,1e-4,3e-4] [--size full|small|tiny]

Every (batch size, learning rate) trains configs/glue.py:<task>,<family> in
WORKDIR/glue/<family>/<task>/b<batch>_lr<lr>; the task's result is the run with the best dev score
(MNLI's mismatched accuracy: the test split of the same checkpoint), in WORKDIR/glue_results.md
(beside the slides' PoNet-Base and BERT-Base) and glue_results.json.

The work is done in poolformers_jax/experiments/; this module is the program's arguments.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from poolformers_jax import errors
from poolformers_jax.experiments import tables
from poolformers_jax.experiments.glue import (
  GLUE_BATCH_SIZES,
  GLUE_FAMILIES,
  GLUE_LEARNING_RATES,
  GLUE_TASKS,
  glue_plan,
  reproduce_glue,
)
from poolformers_jax.experiments.lra import FAMILIES, TASKS, plan, reproduce_lra
from poolformers_jax.experiments.runs import CONFIGS_DIR, SPT_OBJECTIVES, RunStopped


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
def command(argv: Sequence[str]) -> dict[str, Any] | None:
  """The command line without the program's name (`lra --task listops ...`): its runs' results,
  or None for --dry_run."""
  from poolformers_jax.config import SIZES  # pylint: disable=g-import-not-at-top
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
  lra = args.benchmark == 'lra'
  settings: dict[str, Any] = dict(size=args.size, overrides=args.set, configs_dir=args.configs_dir)
  if lra:
    tasks = _names(args.task, TASKS, 'task')
    families = _names(args.families or 'all', FAMILIES, 'families')
    settings.update(seeds=seeds, spt=args.spt, pretrain_steps=args.spt_steps,
                    finetune_steps=args.finetune_steps, objective=args.spt_objective)
  else:
    tasks = _names(args.task, GLUE_TASKS, 'task')
    families = _names(args.families or 'ponet', GLUE_FAMILIES, 'families')
    settings.update(batch_sizes=_numbers(args.batch_sizes, int, 'batch_sizes'),
                    learning_rates=_numbers(args.learning_rates, float, 'learning_rates'))
  if args.dry_run:
    print('\n'.join((plan if lra else glue_plan)(tasks, families, args.workdir, **settings)))
    return None
  logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(message)s')
  from poolformers_jax import cli
  from poolformers_jax.trainer import host_memory, sharding
  cli.quiet_library_logs()
  host_memory.keep_freed_memory()
  sharding.maybe_initialize_distributed('auto')   # as train's --distributed=auto
  command_line = 'python -m poolformers_jax.reproduce ' + ' '.join(argv)
  try:
    if not lra:
      results = reproduce_glue(tasks, families, args.workdir, command=command_line, **settings)
      print(tables.glue_markdown(results))
      return results
    results = reproduce_lra(tasks, families, args.workdir, command=command_line, **settings)
  except RunStopped as stopped:   # not a traceback: nothing went wrong
    raise SystemExit(f'stopped: {stopped}') from None
  print(tables.markdown(results))
  return results


def main(argv: Sequence[str] | None = None) -> None:
  """The program: `command` on sys.argv (or argv) after the process settings."""
  from poolformers_jax import runtime  # pylint: disable=g-import-not-at-top
  runtime.configure_program()
  command(list(sys.argv if argv is None else argv)[1:])


if __name__ == '__main__':
  main()
