r"""Length-grouped micro-batches (config.length_buckets) against the plain step, in one process,
at the ListOps paper setting (length 2048, batch 32):

  taskset -c 0 nice -n 10 .venv/bin/python benchmarks/length_buckets_bench.py --output /tmp/lb.json

For each family (`--families`) and protocol word (`--protocols`: ours, reference) the trainer's
compiled step of configs/lra_listops.py:<family>[,reference] (dropout included) runs on the same
real ListOps batches (the generator's trees at the paper setting's bounds, 500 < tokens < 2000,
preprocessed as training does). The plain step and the bucketed one (`--multiple`,
`--micro_batch_size`) take turns batch by batch, so load changes hit both alike. Reported per
configuration, after a warm-up pass that compiles every bucket length: the median seconds per
step of the wall clock and of this process's CPU time, the speed-up, XLA's compiled memory
(`memory_analysis()`, per device; bucketed: the largest micro step), the cut lengths seen, and
the load average before and after. `--quick`: a tiny model on short trees (64 tokens, buckets
of 16).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'configs'))

import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import lra_listops  # noqa: E402
import numpy as np  # noqa: E402

from poolformers_jax import config as config_lib, data as data_lib, errors  # noqa: E402
from poolformers_jax.data import listops  # noqa: E402
from poolformers_jax.data.generators import listops as listops_generator  # noqa: E402
from poolformers_jax.trainer import host_memory, length_buckets, step as step_lib  # noqa: E402
from poolformers_jax.trainer.setup import make_setup  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)


def listops_batches(config, num_batches: int, seed: int) -> list[dict[str, np.ndarray]]:
  """`num_batches` host batches of generated trees, as the training pipeline makes them."""
  g, settings = config.data.generator, data_lib.settings(config.data)
  (trees,) = listops_generator.generate_splits(seed, [num_batches * config.batch_size],
                                               g.min_tokens, g.max_tokens, g.max_depth, g.max_args)
  examples = [listops.preprocess({'tokens': ids, 'label': label}, settings)
              for ids, label in trees]
  stack = lambda key, rows: np.stack([e[key] for e in rows])
  return [{key: stack(key, examples[i:i + config.batch_size]) for key in ('inputs', 'targets')}
          for i in range(0, len(examples), config.batch_size)]


def measure(config, batches, passes: int) -> dict:
  """Plain and bucketed steps of `config` (length_buckets set) on `batches`, interleaved."""
  plain_config = config_lib.override(config, **{'length_buckets.multiple': 0})
  runs, report = {}, {}
  for name, cfg in (('plain', plain_config), ('bucketed', config)):
    setup = make_setup(cfg, need_files=False)
    started = time.time()
    compiled, _, run = step_runner.trainer_step(setup)
    report[name] = {'compile_s': time.time() - started, 'memory': compiled.memory}
    runs[name] = (run, compiled)
  cuts = sorted({int(m['inputs'].shape[1]) for b in batches
                 for m in runs['bucketed'][1].put(b)})
  warm = time.time()
  for b in batches:                               # compiles every bucket length that occurs
    for run, compiled in runs.values():
      jax.block_until_ready(run(compiled.put(b)))
  report['warmup_s'] = time.time() - warm
  step = runs['bucketed'][1].run
  memories = {cut: step_lib.memory_of(step.compile_micro(cut, None, None)) for cut in cuts}
  report['bucketed']['memory_by_cut'] = memories
  report['cuts'] = cuts
  times = {name: {'wall': [], 'cpu': []} for name in runs}
  for _ in range(passes):
    for b in batches:
      for name, (run, compiled) in runs.items():
        put = compiled.put(b)
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(run(put))
        times[name]['wall'].append(time.perf_counter() - wall)
        times[name]['cpu'].append(time.process_time() - cpu)
  for name, t in times.items():
    report[name].update({f'{k}_s_median': statistics.median(v) for k, v in t.items()},
                        steps_timed=len(t['wall']), seconds=t)
  for clock in ('wall', 'cpu'):
    report[f'speedup_{clock}'] = (report['plain'][f'{clock}_s_median']
                                  / report['bucketed'][f'{clock}_s_median'])
  return report


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--families', default='transformer,contextpool')
  parser.add_argument('--protocols', default='ours,reference')
  parser.add_argument('--multiple', type=int, default=None,
                      help='bucket multiple (default 256; --quick: 16, so its 64-token batches '
                      'are cut)')
  parser.add_argument('--micro_batch_size', type=int, default=8)
  parser.add_argument('--batches', type=int, default=3, help='distinct generated batches')
  parser.add_argument('--passes', type=int, default=2, help='timed passes over the batches')
  parser.add_argument('--seed', type=int, default=7)
  parser.add_argument('--output', default=None, help='JSON file for the results')
  parser.add_argument('--quick', action='store_true', help='tiny model, short trees')
  args = parser.parse_args()
  if args.multiple is None:
    args.multiple = 16 if args.quick else 256
  host_memory.keep_freed_memory()   # as train.py does
  results = {'devices': str(jax.devices()), 'cpus_allowed': sorted(os.sched_getaffinity(0)),
             'loadavg_before': os.getloadavg(), 'args': vars(args), 'runs': []}
  for family in args.families.split(','):
    for protocol in args.protocols.split(','):
      word = f'{family},tiny' if args.quick else family
      config = lra_listops.get_config(word + (',reference' if protocol == 'reference' else ''))
      updates = {'num_devices': 1, 'length_buckets.multiple': args.multiple,
                 'length_buckets.micro_batch_size': args.micro_batch_size}
      if args.quick:
        updates.update({'data.max_length': 64, 'data.generator.min_tokens': 10,
                        'data.generator.max_tokens': 60, 'batch_size': 8})
      config = config_lib.override(config, **updates)
      batches = listops_batches(config, args.batches, args.seed)
      lengths = length_buckets.real_lengths(np.concatenate([b['inputs'] for b in batches]))
      report = measure(config, batches, args.passes)
      report.update(family=family, protocol=protocol,
                    real_length_median=float(np.median(lengths)),
                    real_length_range=[int(lengths.min()), int(lengths.max())])
      results['runs'].append(report)
      results['loadavg_after'] = os.getloadavg()
      print(json.dumps({k: report[k] for k in ('family', 'protocol', 'speedup_wall',
                                                'speedup_cpu', 'cuts')}), flush=True)
      if args.output:                             # after every run: a later one may not finish
        with open(args.output, 'w') as f:
          f.write(json.dumps(results, indent=1, default=str) + '\n')
  print(json.dumps(results, indent=1, default=str))


if __name__ == '__main__':
  from poolformers_jax import runtime  # before the first compile
  runtime.configure_program()
  main()
