r"""Our whole training step against the official PyTorch LRA text step of PoNet's authors, same CPU.

Official side: lxchtan/PoNet `examples/LRA/code` -- its `model_wrapper.ModelForSC` built from its
`lra_config.py` ('text' task, the `--models` attention) the way its `run_tasks.py` builds it
(positions rounded up to a power of two: 4096), trained by run_tasks.py's step: zero_grad,
forward with dropout, mean loss, backward, AdamW (betas 0.9 / 0.999, eps 1e-6, the config's lr and
weight decay), OneCycleLR. Its code is imported from `--official_dir` (your checkout of that
folder; nothing of it is copied into this repository) and runs under `--torch_python`, an
interpreter with torch and numpy (torch is not a dependency of this project). One difference,
on purpose: `mixed_precision` is off -- their amp is CUDA autocast and a GradScaler, which do
nothing on a CPU; both sides run float32.

Our side: the training step train.py runs (train/step.py, built as benchmarks/efficiency.py builds
it) of `configs/lra_text.py:ponet` / `:transformer`, with the official vocabulary size (512, so the
parameter counts are equal; the byte data needs 257: `--our_vocab_size=0` keeps 257). Each
`--our_xla_flags` value is one variant of our side: the XLA_FLAGS its processes get ('unset'
removes the variable, 'inherit' keeps this process's environment); every process records the
XLA_FLAGS it saw after the library was imported and jax started.

Same batch on both sides: `--batch` rows of `--length` tokens, the first `--real_tokens` random
bytes 1..256 and the rest 0 = padding (LRA text as both codes train it: 4000 bytes padded to 4096).
Our position table keeps their 4096 rows at any `--length`; PoNet's segments match only at 4096
(theirs fixes segment_num 4096: one-token segments below 4096; ours scales it with the length).

Processes alternate, one at a time: per round, per model, the official step, then each variant
of ours (A B C A B C ...). Each process takes `--warmup` steps, then times `--steps` steps by wall
clock and by the CPU time of the process (all threads). Reported: medians over all timed steps of
all rounds, per side; the per-round medians are in the JSON. Threads: torch gets
`torch.set_num_threads(cores this process may use)`; XLA uses the cores it is given. Pin the whole
run with taskset on a shared machine; CPU time is then the load-robust clock.

  taskset -c 0 python benchmarks/official_torch.py --official_dir /path/PoNet/examples/LRA/code \
      --torch_python /path/torchvenv/bin/python --output_dir /tmp/official_torch

Writes official_torch.json (every step time, versions, XLA_FLAGS, parameter counts and both sides'
model dims) and official_torch.md (the table); a later run with other --models keeps the earlier
models' results in the same files.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REDUCE_FLAG = '--xla_cpu_experimental_ynn_fusion_type=-reduce'
OFFICIAL_VOCAB = 512
OFFICIAL_POSITIONS = 4096   # lra_config text max_seq_len 4000, rounded up by run_tasks.py
# --models name -> (the official attn_type, our configs/lra_text.py family's efficiency.py entry)
MODELS = {'ponet': ('ponet', 'ponet'), 'softmax': ('softmax', 'softmax')}
OFFICIAL_FILES = ('lra_config.py', 'model.py', 'model_wrapper.py', 'attention.py',
                  'attention_ponet.py')
RESULT = 'RESULT '   # a child's JSON line on stdout


def example_batch(batch: int, length: int, real_tokens: int):
  """(token ids [batch, length] with 0 = padding after `real_tokens`, labels [batch]), numpy."""
  import numpy as np  # pylint: disable=g-import-not-at-top  (both interpreters have numpy)
  ids = np.random.default_rng(0).integers(1, 257, (batch, length)).astype(np.int64)
  ids[:, real_tokens:] = 0
  return ids, np.arange(batch) % 2


def official_param_count(dims: dict, attn_type: str) -> int:
  """The official ModelForSC's parameter count from its lra_config dims (model.py,
  model_wrapper.py, attention.py): embeddings, per layer two LayerNorms, attention's W_q, W_k,
  W_v and ff (PoNet: also W_local and W_segment) and the FFN, the final LayerNorm, the head."""
  d, hidden, classes = dims['transformer_dim'], dims['transformer_hidden_dim'], dims['num_classes']
  positions = 2 ** math.ceil(math.log2(dims['max_seq_len']))   # run_tasks.py rounds it up
  linear = lambda n_in, n_out: n_in * n_out + n_out
  projections = {'softmax': 4, 'ponet': 6}[attn_type]
  layer = 2 * 2 * d + projections * linear(d, d) + linear(d, hidden) + linear(hidden, d)
  return ((dims['vocab_size'] + positions) * d + dims['num_layers'] * layer + 2 * d
          + linear(d, hidden) + linear(hidden, classes))


def time_steps(step, warmup: int, steps: int, sync=lambda r: r) -> dict:
  """Runs `warmup` untimed steps, then `steps` timed ones (wall and process CPU time, ms)."""
  start = time.perf_counter()
  for _ in range(warmup):
    sync(step())
  warm_s = time.perf_counter() - start
  wall, cpu = [], []
  for _ in range(steps):
    w0, c0 = time.perf_counter(), time.process_time()
    sync(step())
    wall.append((time.perf_counter() - w0) * 1e3)
    cpu.append((time.process_time() - c0) * 1e3)
  return dict(warmup_s=round(warm_s, 3), wall_ms=wall, cpu_ms=cpu)


# ---- the official side (runs under --torch_python) -----------------------------------------

def official_config(lra_config, attn_type: str) -> tuple[dict, dict]:
  """(model config, training config) as run_tasks.py builds them for the 'text' task."""
  task = lra_config.config['text']
  model = dict(task['model'])
  model.update(task['extra_attn_config'][attn_type])
  model['mixed_precision'] = False   # CUDA autocast + GradScaler in theirs: nothing on a CPU
  model['attn_type'] = attn_type
  model['max_seq_len'] = int(2 ** math.ceil(math.log2(model['max_seq_len'])))
  return model, dict(task['training'])


def run_official(args) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  threads = len(os.sched_getaffinity(0))
  torch.set_num_threads(threads)
  sys.path.insert(0, os.path.abspath(args.official_dir))
  import lra_config  # pylint: disable=g-import-not-at-top
  from model_wrapper import ModelForSC  # pylint: disable=g-import-not-at-top
  attn_type = MODELS[args.model][0]
  config, training = official_config(lra_config, attn_type)
  torch.manual_seed(0)
  build = time.perf_counter()
  model = ModelForSC(config)
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=training['learning_rate'],
                                betas=(0.9, 0.999), eps=1e-6,
                                weight_decay=training['weight_decay'])
  scheduler = torch.optim.lr_scheduler.OneCycleLR(
      optimizer=optimizer, max_lr=training['learning_rate'],
      pct_start=training['warmup'] / training['num_train_steps'],
      anneal_strategy=training['lr_decay'], total_steps=training['num_train_steps'])
  ids, labels = example_batch(args.batch, args.length, args.real_tokens)
  ids = torch.tensor(ids, dtype=torch.long)
  batch = dict(input_ids_0=ids, mask_0=(ids != 0).float(),   # dataset.py's mask
               label=torch.tensor(labels, dtype=torch.long))
  build_s = time.perf_counter() - build

  def step():   # run_tasks.py's training step (accumu_steps = 1), float32
    optimizer.zero_grad()
    outputs = model(**batch)
    loss = outputs['loss'].mean()
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()

  result = time_steps(step, args.warmup, args.steps)
  return dict(result, side='official', torch=torch.__version__, threads=threads,
              torch_threads=torch.get_num_threads(), build_s=round(build_s, 3),
              param_count=int(sum(p.numel() for p in model.parameters())),
              dims=config,
              loss_after=step())


# ---- our side (runs under this project's interpreter) --------------------------------------

def efficiency_module():
  """benchmarks/efficiency.py (its training-step builder): it leaves XLA_FLAGS as given, so this
  runner times the flags it is given."""
  sys.path.insert(0, HERE)
  import efficiency  # pylint: disable=g-import-not-at-top
  return efficiency


def our_config(model: str, length: int, batch: int, vocab_size: int):
  """configs/lra_text.py's config of `model`'s family at `length` and `batch`, float32 (as
  benchmarks/efficiency.py sizes it), with `vocab_size` (0: the dataset's)."""
  config = efficiency_module().lra_text_config(MODELS[model][1], length, batch, 'float32')
  config.model.max_length = OFFICIAL_POSITIONS   # = the data's length at the default 4096
  if vocab_size:
    config.model.vocab_size = vocab_size
  return config


def our_dims(config) -> dict:
  from poolformers_jax.train.setup import completed_config  # pylint: disable=g-import-not-at-top
  m = completed_config(config, need_files=False)[0].model
  dims = dict(mixer=m.mixer, dim=m.dim, mlp_dim=m.mlp_dim, head_hidden_dim=m.head_hidden_dim,
              num_heads=m.num_heads, num_layers=m.num_layers, vocab_size=m.vocab_size,
              max_length=m.max_length, num_classes=m.num_classes, dropout_rate=m.dropout_rate,
              attention_dropout_rate=m.attention_dropout_rate, pooling=m.pooling,
              activation=m.activation, layer_norm_epsilon=m.layer_norm_epsilon)
  dims.update({f'mixer_kwargs.{k}': v for k, v in m.mixer_kwargs.items()})
  return dims


def run_ours(args) -> dict:
  from poolformers_jax.train import host_memory  # pylint: disable=g-import-not-at-top
  host_memory.keep_freed_memory()   # as train.py (cli.run) does, before XLA allocates
  efficiency = efficiency_module()
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  jax.devices()   # the backend starts here, with the XLA_FLAGS recorded below
  config = our_config(args.model, args.length, args.batch, args.our_vocab_size)
  build = time.perf_counter()
  (run, _), variables, _, _ = efficiency.build_step(
      MODELS[args.model][1], args.length, args.batch, 'float32', config=config)
  ids, labels = example_batch(args.batch, args.length, args.real_tokens)
  data = {'inputs': jnp.asarray(ids, jnp.int32), 'targets': jnp.asarray(labels, jnp.int32)}
  build_s = time.perf_counter() - build
  result = time_steps(lambda: run(None, data)[1], args.warmup, args.steps,
                      sync=jax.block_until_ready)
  return dict(result, side='ours', jax=jax.__version__, xla_flags=os.environ.get('XLA_FLAGS'),
              threads=len(os.sched_getaffinity(0)), build_s=round(build_s, 3),
              param_count=int(sum(x.size for x in jax.tree_util.tree_leaves(variables['params']))),
              dims=our_dims(config))


# ---- the driver ----------------------------------------------------------------------------

def child_argv(args, python: str, side: str, model: str) -> list[str]:
  return [python, os.path.abspath(__file__), f'--child={side}', f'--model={model}',
          f'--official_dir={args.official_dir}', f'--batch={args.batch}',
          f'--length={args.length}', f'--real_tokens={args.real_tokens}',
          f'--warmup={args.warmup}', f'--steps={args.steps}',
          f'--our_vocab_size={args.our_vocab_size}']


def variant_env(value: str) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
  if value == 'unset':
    env.pop('XLA_FLAGS', None)
  elif value != 'inherit':
    env['XLA_FLAGS'] = value
  return env


def run_child(argv: list[str], env: dict) -> dict:
  load = os.getloadavg()[0]
  proc = subprocess.run(argv, env=env, capture_output=True, text=True)
  lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT)]
  if proc.returncode != 0 or not lines:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['no output']
    return {'status': f'error (exit {proc.returncode}): {tail[0][:400]}'}
  result = json.loads(lines[-1][len(RESULT):])
  result.update(status='ok', load_average=[round(load, 2), round(os.getloadavg()[0], 2)])
  return result


def summarize(runs: list[dict]) -> dict:
  ok = [r for r in runs if r['status'] == 'ok']
  out = {'runs': len(runs), 'failed': len(runs) - len(ok)}
  for clock in ('wall_ms', 'cpu_ms'):
    steps = [t for r in ok for t in r[clock]]
    out[clock] = statistics.median(steps) if steps else None
    out[f'round_medians_{clock}'] = [statistics.median(r[clock]) for r in ok]
  first = ok[0] if ok else {}
  out.update(param_count=first.get('param_count'), xla_flags=first.get('xla_flags'))
  return out


def variant_name(value: str) -> str:
  return {'unset': 'ours, XLA_FLAGS unset', 'inherit': 'ours, XLA_FLAGS inherited',
          REDUCE_FLAG: 'ours, XLA_FLAGS=-reduce'}.get(value, f'ours, XLA_FLAGS={value}')


def measure_model(args, model: str) -> dict:
  sides = {'official': (child_argv(args, args.torch_python, 'official', model), dict(os.environ))}
  for value in args.our_xla_flags:
    sides[variant_name(value)] = (child_argv(args, sys.executable, 'ours', model),
                                  variant_env(value))
  runs = {name: [] for name in sides}
  for round_index in range(args.rounds):
    for name, (argv, env) in sides.items():
      result = run_child(argv, env)
      runs[name].append(result)
      print(f'[{model} round {round_index + 1}/{args.rounds}] {name:28s} {result["status"]:4s} '
            f'wall {summarize([result]).get("wall_ms")} ms, cpu {summarize([result]).get("cpu_ms")} '
            'ms', flush=True)
  summary = {name: summarize(r) for name, r in runs.items()}
  official = summary['official']
  for name, s in summary.items():
    for clock in ('wall_ms', 'cpu_ms'):
      s[f'official_over_this_{clock}'] = (official[clock] / s[clock]
                                          if official[clock] and s[clock] else None)
  counts = {name: s['param_count'] for name, s in summary.items()}
  first_ok = lambda name: next((r for r in runs[name] if r['status'] == 'ok'), {})
  official_dims = first_ok('official').get('dims')
  record = dict(summary=summary, runs=runs, param_counts=counts,
                param_counts_equal=len(set(counts.values())) == 1,
                official_dims=official_dims,
                our_dims=first_ok(list(sides)[1]).get('dims') if len(sides) > 1 else None)
  if official_dims:
    record['official_param_count_by_formula'] = official_param_count(official_dims,
                                                                     MODELS[model][0])
  if not record['param_counts_equal']:
    record['param_count_difference'] = param_count_note(record, counts)
  return record


def param_count_note(record: dict, counts: dict) -> str:
  theirs, ours = record['official_dims'] or {}, record['our_dims'] or {}
  pairs = (('transformer_dim', 'dim'), ('transformer_hidden_dim', 'mlp_dim'),
           ('num_layers', 'num_layers'), ('vocab_size', 'vocab_size'),
           ('max_seq_len', 'max_length'), ('num_classes', 'num_classes'))
  differ = [f'{a} {theirs.get(a)} vs our {b} {ours.get(b)}' for a, b in pairs
            if theirs.get(a) != ours.get(b)]
  return (f'counts {counts}; dims that differ (official vs ours): {differ or "none"}'
          + ('; vocab: our byte data needs 257 rows, the official table has 512'
             if theirs.get('vocab_size') != ours.get('vocab_size') else ''))


def official_commit(official_dir: str):
  """The commit of the --official_dir checkout (None when it is not a git checkout)."""
  try:
    proc = subprocess.run(['git', '-C', official_dir, 'rev-parse', 'HEAD'], capture_output=True,
                          text=True)
  except OSError:   # no git
    return None
  return proc.stdout.strip() if proc.returncode == 0 else None


def machine() -> dict:
  model_name = platform.processor()
  try:
    with open('/proc/cpuinfo') as f:
      model_name = next(l.split(':', 1)[1].strip() for l in f if l.startswith('model name'))
  except (OSError, StopIteration):
    pass
  return dict(cpu=model_name, cpu_count=os.cpu_count(),
              cpus_allowed=sorted(os.sched_getaffinity(0)), platform=platform.platform())


def write_markdown(report: dict, path: str) -> None:
  lines = []
  for model, rec in report['models'].items():
    s = rec['setup']
    lines += [f'**{model}**: batch {s["batch"]} x {s["length"]} tokens ({s["real_tokens"]} real), '
              f'float32, {s["rounds"]} rounds x {s["steps"]} timed steps after {s["warmup"]} '
              f'warm-up, CPUs {s["machine"]["cpus_allowed"]} of {s["machine"]["cpu_count"]} '
              f'({s["machine"]["cpu"]}); torch {official_version(rec, "torch")}, jax '
              f'{official_version(rec, "jax")}; `{s["command"]}`', '',
              '| side | XLA_FLAGS seen | params | wall ms | CPU ms | official / this (wall, CPU) |',
              '|---|---|---|---|---|---|']
    for name, sm in rec['summary'].items():
      fmt = lambda v: '-' if v is None else f'{v:.0f}'
      ratio = lambda v: '-' if v is None else f'{v:.2f}x'
      flags = '-' if name == 'official' else f'`{sm["xla_flags"]}`' if sm['xla_flags'] else 'unset'
      lines.append(f'| {name} | {flags} | {sm["param_count"]} | {fmt(sm["wall_ms"])} | '
                   f'{fmt(sm["cpu_ms"])} | {ratio(sm["official_over_this_wall_ms"])}, '
                   f'{ratio(sm["official_over_this_cpu_ms"])} |')
    if not rec['param_counts_equal']:
      lines.append(f'\nParameter counts differ: {rec["param_count_difference"]}')
    lines.append('')
  with open(path, 'w') as f:
    f.write('\n'.join(lines))


def official_version(rec: dict, key: str) -> str:
  return next((r[key] for runs in rec['runs'].values() for r in runs if key in r), '?')


def check_args(args) -> None:
  """Bad input: one line before anything runs."""
  missing = [f for f in OFFICIAL_FILES if not os.path.isfile(os.path.join(args.official_dir, f))]
  if missing:
    raise ValueError(f'--official_dir {args.official_dir} lacks {", ".join(missing)}: give the folder '
         'examples/LRA/code of a lxchtan/PoNet checkout')
  if not args.output_dir:
    raise ValueError('--output_dir is required: the folder official_torch.json / .md are written to')
  if not args.torch_python:
    raise ValueError('--torch_python is required: an interpreter with torch and numpy (torch is not a '
         'dependency of this project; e.g. a separate venv with CPU torch)')
  probe = subprocess.run([args.torch_python, '-c', 'import torch, numpy'], capture_output=True,
                         text=True) if os.path.exists(args.torch_python) else None
  if probe is None or probe.returncode != 0:
    raise ValueError(f'--torch_python {args.torch_python} cannot import torch and numpy; install them in '
         'that environment (pip install torch numpy)')
  unknown = [m for m in args.models if m not in MODELS]
  if unknown:
    raise ValueError(f'--models {unknown} unknown; choose from {sorted(MODELS)}')
  if not 0 < args.real_tokens <= args.length:
    raise ValueError(f'--real_tokens {args.real_tokens} must be in 1..--length ({args.length})')
  if min(args.rounds, args.steps, args.batch) < 1 or args.warmup < 0:
    raise ValueError('--rounds, --steps and --batch must be >= 1 and --warmup >= 0')
  if args.length > OFFICIAL_POSITIONS:
    raise ValueError(f'--length {args.length} exceeds the official model\'s {OFFICIAL_POSITIONS} positions '
         '(lra_config text max_seq_len 4000, rounded up to a power of two)')


def drive(args) -> None:
  check_args(args)
  os.makedirs(args.output_dir, exist_ok=True)
  path = os.path.join(args.output_dir, 'official_torch.json')
  report = {'models': {}}
  if os.path.exists(path):   # an earlier run's models are kept
    with open(path) as f:
      report = json.load(f)
  command = ' '.join(['benchmarks/official_torch.py'] + sys.argv[1:])
  for model in args.models:
    record = measure_model(args, model)
    record['setup'] = dict(command=command, batch=args.batch, length=args.length,
                           real_tokens=args.real_tokens, rounds=args.rounds, steps=args.steps,
                           warmup=args.warmup, our_vocab_size=args.our_vocab_size,
                           our_xla_flags=args.our_xla_flags,
                           driver_xla_flags=os.environ.get('XLA_FLAGS'), machine=machine(),
                           official_commit=official_commit(args.official_dir),
                           date=time.strftime('%Y-%m-%d %H:%M'))
    report['models'][model] = record
    with open(path, 'w') as f:
      json.dump(report, f, indent=1)
    write_markdown(report, os.path.join(args.output_dir, 'official_torch.md'))
    for name, s in record['summary'].items():
      print(f'{model:8s} {name:28s} wall {s["wall_ms"]} ms, cpu {s["cpu_ms"]} ms, '
            f'official/this {s["official_over_this_wall_ms"]} / {s["official_over_this_cpu_ms"]}, '
            f'params {s["param_count"]}', flush=True)
  print(f'wrote {args.output_dir}/official_torch.json and .md')


def parse_args(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if '--child=official' in argv:   # --torch_python runs it: no absl, no poolformers_jax there
    p = argparse.ArgumentParser()
  else:   # the project's one-line error contract
    from poolformers_jax import errors  # pylint: disable=g-import-not-at-top
    p = errors.ArgumentParser(description=__doc__.split('\n', 1)[0])
  p.add_argument('--official_dir', required=True, help="a checkout's examples/LRA/code")
  p.add_argument('--torch_python', help='interpreter with torch and numpy (official side)')
  p.add_argument('--output_dir')
  p.add_argument('--models', type=lambda s: s.split(','), default=['ponet', 'softmax'])
  p.add_argument('--our_xla_flags', action='append', default=None,
                 help=f"XLA_FLAGS of one variant of our side (repeat the flag); 'unset', "
                 f"'inherit' or flags (default: unset and {REDUCE_FLAG})")
  p.add_argument('--our_vocab_size', type=int, default=OFFICIAL_VOCAB,
                 help='our embedding rows (0: the dataset\'s 257)')
  p.add_argument('--batch', type=int, default=8)
  p.add_argument('--length', type=int, default=4096)
  p.add_argument('--real_tokens', type=int, default=4000)
  p.add_argument('--rounds', type=int, default=5)
  p.add_argument('--warmup', type=int, default=2)
  p.add_argument('--steps', type=int, default=5)
  p.add_argument('--child', choices=['official', 'ours'], help=argparse.SUPPRESS)
  p.add_argument('--model', default='ponet', help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  args.our_xla_flags = args.our_xla_flags or ['unset', REDUCE_FLAG]
  return args


def main() -> None:
  args = parse_args()
  if args.child:
    result = run_official(args) if args.child == 'official' else run_ours(args)
    print(RESULT + json.dumps(result), flush=True)
  else:
    from poolformers_jax import errors  # pylint: disable=g-import-not-at-top
    errors.one_line_errors(drive)(args)


if __name__ == '__main__':
  sys.path.insert(0, ROOT)
  from poolformers_jax import runtime  # before the first compile
  runtime.configure_program()
  main()
