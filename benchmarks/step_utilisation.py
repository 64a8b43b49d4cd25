r"""MFU and data wait of a few dozen training steps per run, read from the trainer's own
DIR/metrics.jsonl (docs/training.md), beside `summary`'s prediction for the same config on the
same device: the queue's `util` job (benchmarks/gpu_run.sh, mode 5).

    python benchmarks/step_utilisation.py --output_dir runs/util --work /tmp/util \
        [--runs 'listops:ponet mlm'] [--size full] [--steps 60 --log_every 20] [--deadline_s 400]

Runs: `listops:<family>` is configs/lra_listops.py:<family> (the ListOps paper step; its data
generated once into --data_dir); `mlm` is configs/ponet_pretrain.py:mlm in bfloat16 (PoNet-Base
MLM) on a generated corpus: a vocabulary of --vocab_size words (30 522, BERT's) and random
sentences of them, so the step has the paper's shapes and no download is needed. Each run is
train.py on one device for --steps steps, logged every --log_every; the first window holds the
readers' start, so the figures are the medians of the later windows. Then `summary` of the same
config, whose step comes from the run's compilation cache: its `train_step_memory_bytes` is the
prediction the run's `compiled_memory_bytes` and peak memory are held against, and 6 x `macs` x
batch the model FLOPs of a step. Per run, run_<run>.json in --output_dir; a run with one is
skipped, and a run the deadline cuts leaves none. util.md and util.json: every run so far.
"""
from __future__ import annotations

import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time

from poolformers_jax import errors
from poolformers_jax.trainer.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = ('listops:transformer listops:linear listops:ponet listops:adamra listops:contextpool mlm')
WINDOW_FIGURES = ('steps_per_second', 'flops_per_second_per_device', 'mfu', 'data_wait_fraction',
                  'memory_peak_bytes_in_use')
ONCE_FIGURES = ('compile_seconds', 'compiled_memory_bytes', 'xla_step_flops_per_device',
                'model_step_flops_per_device')
SPECIALS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')


def write_corpus(folder: str, vocab_size: int, documents: int, seed: int = 0) -> dict:
  """A WordPiece vocabulary of `vocab_size` entries and a corpus of random sentences of its
  words (documents apart by a blank line, a sentence a line): {'vocab', 'train', 'validation'}."""
  os.makedirs(folder, exist_ok=True)
  words = [f'w{i}' for i in range(vocab_size - len(SPECIALS))]
  with open(os.path.join(folder, 'vocab.txt'), 'w') as f:
    f.write('\n'.join(SPECIALS + tuple(words)) + '\n')
  rng = random.Random(seed)
  paths = {'vocab': os.path.join(folder, 'vocab.txt')}
  for split, count in (('train', documents), ('validation', max(documents // 10, 2))):
    docs = ['\n'.join(' '.join(rng.choices(words, k=12)) for _ in range(40)) for _ in range(count)]
    paths[split] = os.path.join(folder, f'{split}.txt')
    with open(paths[split], 'w') as f:
      f.write('\n\n'.join(docs) + '\n')
  return paths


def config_of(run: str, args) -> tuple[str, list[str]]:
  """(config spec, the --config.* flags of its data) of a run."""
  suffix = '' if args.size == 'full' else f',{args.size}'
  if run.startswith('listops:'):
    return (f'configs/lra_listops.py:{run.split(":", 1)[1]}{suffix}',
            [f'--config.data.data_dir={args.data_dir}'] if args.data_dir else [])
  corpus = os.path.join(args.work, 'corpus')
  if not os.path.exists(os.path.join(corpus, 'validation.txt')):
    write_corpus(corpus, args.vocab_size, documents=400)
  files = {'train': 'train.txt', 'validation': 'validation.txt', 'test': 'validation.txt'}
  return (f'configs/ponet_pretrain.py:mlm{suffix}',
          [f'--config.data.vocab_file={os.path.join(corpus, "vocab.txt")}',
           '--config.model.dtype=bfloat16']
          + [f'--config.data.files.{s}={os.path.join(corpus, f)}' for s, f in files.items()])


def figures(workdir: str) -> dict:
  """The run's figures: medians over the windows after the first, and what is logged once."""
  records = read_metrics(workdir, 'train')
  if not records:
    raise ValueError(f'{workdir}/metrics.jsonl has no train record')
  later = records[1:] or records
  out: dict = {'windows': len(later), 'last_step': records[-1]['step']}
  for key in WINDOW_FIGURES:
    values = [r[key] for r in later if key in r]
    out[key] = statistics.median(values) if values else None
  out.update({key: records[0].get(key) for key in ONCE_FIGURES})
  return out


def measure(run: str, args, deadline: float) -> dict | None:
  """train.py then summary for one run; None if the deadline cut it."""
  spec, data_flags = config_of(run, args)
  workdir = os.path.join(args.work, run.replace(':', '_'))
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(args.work, 'cache'))
  steps = [f'--config.num_train_steps={args.steps}', f'--config.log_every_steps={args.log_every}',
           f'--config.eval_every_steps={args.steps}',
           f'--config.checkpoint_every_steps={args.steps}', '--config.final_test=False',
           '--config.eval_num_batches=1', '--config.writers=',
           '--config.progress_bar=False', '--config.num_devices=1']
  commands = {'train': [sys.executable, os.path.join(ROOT, 'train.py'), '--config', spec,
                        '--workdir', workdir, *data_flags, *steps],
              'summary': [sys.executable, '-m', 'poolformers_jax.summary', '--config', spec,
                          *data_flags]}
  outputs = {}
  for name, command in commands.items():
    left = max(deadline - time.time(), 1) if deadline < float('inf') else None
    try:
      proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=left)
    except subprocess.TimeoutExpired:
      return None
    if proc.returncode:
      raise RuntimeError(f'{run}: {name} failed: {proc.stderr.strip().splitlines()[-1:]}')
    outputs[name] = proc.stdout
  summary = json.loads([l for l in outputs['summary'].splitlines() if l.startswith('{')][-1])
  record = {'run': run, 'config': spec, 'steps': args.steps, 'log_every': args.log_every,
            **figures(workdir),
            'summary': {k: summary[k] for k in ('params', 'macs', 'batch_size',
                                                'train_step_memory_bytes')}}
  record['summary']['model_step_flops'] = 6 * summary['macs'] * summary['batch_size']
  config = json.load(open(os.path.join(workdir, 'config.json')))
  record['dtype'] = config['model'].get('dtype', 'float32')
  record['device'] = device_name()
  return record


def device_name() -> str:
  """The first device, asked in a process of its own (this one leaves the device to the runs)."""
  code = 'import jax; print(jax.default_backend(), jax.devices()[0].device_kind)'
  return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                        check=True).stdout.strip()


def table(records: list[dict]) -> str:
  num = lambda v, f='{:.3g}': '-' if v is None else f.format(v)
  mib = lambda v: '-' if v is None else f'{v / 2**20:.0f}'
  lines = ['| run | dtype | steps/s | data wait | XLA FLOP/s per device | MFU | model FLOPs per '
           'step: run / summary | compiled MiB: run / summary | peak MiB | compile s | device |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
  for r in records:
    s = r['summary']
    lines.append(
        f'| {r["run"]} | {r["dtype"]} | {num(r["steps_per_second"])} | '
        f'{num(r["data_wait_fraction"], "{:.1%}")} | {num(r["flops_per_second_per_device"])} | '
        f'{num(r["mfu"], "{:.1%}")} | {num(r["model_step_flops_per_device"])} / '
        f'{num(s["model_step_flops"])} | {mib(r["compiled_memory_bytes"])} / '
        f'{mib(s["train_step_memory_bytes"])} | {mib(r["memory_peak_bytes_in_use"])} | '
        f'{num(r["compile_seconds"], "{:.1f}")} | {r["device"]} |')
  return '\n'.join(lines)


def write_table(output_dir: str) -> list[dict]:
  records = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(output_dir, 'run_*.json')))]
  with open(os.path.join(output_dir, 'util.json'), 'w') as f:
    json.dump(records, f, indent=1)
  with open(os.path.join(output_dir, 'util.md'), 'w') as f:
    f.write(table(records) + '\n')
  return records


def result_path(output_dir: str, run: str) -> str:
  return os.path.join(output_dir, f'run_{run.replace(":", "_")}.json')


@errors.one_line_errors
def main(argv: list[str] | None = None) -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output_dir', required=True, help='RUN.json per run, util.md, util.json')
  parser.add_argument('--work', default='/tmp/utilisation', help='run directories, data, cache')
  parser.add_argument('--runs', default=RUNS, help='listops:<family> and mlm, space-separated')
  parser.add_argument('--size', default='full', help='the configs\' size word: full, small, tiny')
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--log_every', type=int, default=20)
  parser.add_argument('--vocab_size', type=int, default=30522, help='mlm: generated vocabulary')
  parser.add_argument('--data_dir', default='', help='listops: the data\'s folder (default: the '
                      'config\'s, where the queue\'s ListOps runs generate it)')
  parser.add_argument('--deadline_s', type=float, default=0, help='0: none')
  args = parser.parse_args(argv)
  if args.steps < 2 * args.log_every:
    raise ValueError(f'--steps {args.steps} < 2 x --log_every {args.log_every}: a run needs a '
                     'window after the first; raise --steps or lower --log_every')
  unknown = [r for r in args.runs.split() if r != 'mlm' and not r.startswith('listops:')]
  if unknown:
    raise ValueError(f'--runs: unknown {unknown}; use listops:<family> or mlm')
  deadline = time.time() + (args.deadline_s or float('inf'))
  os.makedirs(args.output_dir, exist_ok=True)
  for run in args.runs.split():
    path = result_path(args.output_dir, run)
    if os.path.exists(path):
      continue
    record = measure(run, args, deadline)
    if record is None:
      print(f'utilisation: {run} not finished before the deadline', flush=True)
      break
    with open(path, 'w') as f:
      json.dump(record, f, indent=1)
  print(table(write_table(args.output_dir)))


if __name__ == '__main__':
  main()
