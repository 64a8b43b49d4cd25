r"""Our whole training step against the official PyTorch LRA text step of PoNet's authors, same CPU.

Official side: lxchtan/PoNet `examples/LRA/code`'s `model_wrapper.ModelForSC` ('text' task, the
`--models` attention) built and trained as its `run_tasks.py` does: positions rounded up to 4096,
zero_grad, forward with dropout, mean loss, backward, AdamW (0.9 / 0.999, eps 1e-6), OneCycleLR;
imported from `--official_dir` (your checkout; nothing is copied here) under `--torch_python`
(torch and numpy). On a CPU their amp does nothing: both sides run float32.

Our side: train.py's training step (built as benchmarks/efficiency.py builds it) of
`configs/lra_text.py:ponet` / `:transformer`, with the official vocabulary size (512, so the
parameter counts are equal; `--our_vocab_size=0` keeps the byte data's 257). Each
`--our_xla_flags` value is a variant of our side: the XLA_FLAGS its processes get ('unset'
removes the variable, 'inherit' keeps this process's); every process records what it saw.

Same batch on both sides: `--batch` rows of `--length` tokens, the first `--real_tokens` random
bytes 1..256 and the rest 0 = padding (LRA text as both codes train it: 4000 bytes padded to 4096).
Our position table keeps their 4096 rows at any `--length`; PoNet's segments match only at 4096
(theirs fixes segment_num 4096: one-token segments below 4096; ours scales it with the length).

Processes alternate, one at a time (per round and model: the official step, then each variant of
ours), each `--warmup` steps, then `--steps` timed by wall clock and by the process's CPU time
(all threads; torch gets as many as the process may use); reported: medians over every timed
step, per side (per round in the JSON). Pin the run with taskset on a shared machine.

  taskset -c 0 python benchmarks/official_torch.py --official_dir /path/PoNet/examples/LRA/code \
      --torch_python /path/torchvenv/bin/python --output_dir /tmp/official_torch

Writes official_torch.json (every step time, versions, XLA_FLAGS, parameter counts, both sides'
model dims) and official_torch.md (the table); a later run with other --models keeps the earlier
models' results.

`--device cuda` (benchmarks/gpu_run.sh peer): run_tasks.py's GPU step (nn.DataParallel, fp16
autocast, GradScaler; `--device cpu` makes the same calls disabled, so a CPU test covers them)
against ours in each `--our_precisions` dtype and, for softmax, each `--our_impls` implementation
(cudnn: bf16 only); each process records its peak device memory. `--budget_s`: a process that
cannot finish in the time left is 'not run: budget spent'; the files are rewritten after every
model of every round.
"""
import argparse
import json
import math
import os
import platform
import re
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

def official_config(lra_config, attn_type: str, amp: bool = False) -> tuple[dict, dict]:
  """(model config, training config) as run_tasks.py builds them for the 'text' task; `amp`:
  their mixed_precision (CUDA autocast, which does nothing on a CPU)."""
  task = lra_config.config['text']
  model = dict(task['model'])
  model.update(task['extra_attn_config'][attn_type])
  model['mixed_precision'] = amp
  model['attn_type'] = attn_type
  model['max_seq_len'] = int(2 ** math.ceil(math.log2(model['max_seq_len'])))
  return model, dict(task['training'])


def run_official(args) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  threads = len(os.sched_getaffinity(0))
  torch.set_num_threads(threads)
  cuda = args.device == 'cuda'
  if cuda and not torch.cuda.is_available():
    raise RuntimeError('--device cuda: torch sees no CUDA device')
  device = torch.device(args.device)
  sys.path.insert(0, os.path.abspath(args.official_dir))
  import lra_config  # pylint: disable=g-import-not-at-top
  from model_wrapper import ModelForSC  # pylint: disable=g-import-not-at-top
  attn_type = MODELS[args.model][0]
  # run_tasks.py forces mixed_precision on; without CUDA its autocast and scaler do nothing,
  # so on a CPU it is off (the same step, float32).
  amp = args.official_precision == 'amp' and cuda
  config, training = official_config(lra_config, attn_type, amp)
  torch.manual_seed(0)
  build = time.perf_counter()
  module = ModelForSC(config).to(device)
  # As run_tasks.py: wrapped in DataParallel, here over one GPU (one chip against one; it then
  # calls the module directly), so a second GPU would not split the batch.
  model = torch.nn.DataParallel(module, device_ids=[0]) if cuda else module
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=training['learning_rate'],
                                betas=(0.9, 0.999), eps=1e-6,
                                weight_decay=training['weight_decay'])
  scheduler = torch.optim.lr_scheduler.OneCycleLR(
      optimizer=optimizer, max_lr=training['learning_rate'],
      pct_start=training['warmup'] / training['num_train_steps'],
      anneal_strategy=training['lr_decay'], total_steps=training['num_train_steps'])
  # run_tasks.py's torch.cuda.amp.GradScaler(); disabled (scale, step and update pass through)
  # when amp is off.
  scaler = torch.amp.GradScaler('cuda', enabled=amp)
  ids, labels = example_batch(args.batch, args.length, args.real_tokens)
  ids = torch.tensor(ids, dtype=torch.long)
  # On the device before timing (theirs copies each loaded batch; ours is on the device too).
  batch = dict(input_ids_0=ids.to(device), mask_0=(ids != 0).float().to(device),  # dataset.py
               label=torch.tensor(labels, dtype=torch.long).to(device))
  build_s = time.perf_counter() - build

  def step():   # run_tasks.py's training step (one GPU: accumu_steps = 32 // 32 = 1)
    optimizer.zero_grad()
    outputs = model(**batch)
    loss = outputs['loss'].mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss.item()

  sync = (lambda r: torch.cuda.synchronize()) if cuda else (lambda r: r)
  if cuda:
    torch.cuda.reset_peak_memory_stats()
  result = time_steps(step, args.warmup, args.steps, sync=sync)
  return dict(result, side='official', torch=torch.__version__, threads=threads,
              torch_threads=torch.get_num_threads(), build_s=round(build_s, 3),
              param_count=int(sum(p.numel() for p in model.parameters())),
              dims=config, device=args.device,
              card=torch.cuda.get_device_name(0) if cuda else machine()['cpu'],
              precision='amp fp16 (autocast + GradScaler)' if amp else 'float32',
              peak_bytes=int(torch.cuda.max_memory_allocated()) if cuda else None,
              loss_after=step())


# ---- our side (runs under this project's interpreter) --------------------------------------

def efficiency_module():
  """benchmarks/efficiency.py (its training-step builder): it leaves XLA_FLAGS as given, so this
  runner times the flags it is given."""
  sys.path.insert(0, HERE)
  import efficiency  # pylint: disable=g-import-not-at-top
  return efficiency


def our_entry(model: str, impl) -> str:
  """efficiency.py's entry name: 'softmax/xla' for softmax with implementation xla, say."""
  return f'{MODELS[model][1]}/{impl}' if impl and model == 'softmax' else MODELS[model][1]


def our_config(model: str, length: int, batch: int, vocab_size: int, dtype: str = 'float32',
               impl=None):
  """configs/lra_text.py's config of `model`'s family at `length` and `batch` in `dtype` (as
  benchmarks/efficiency.py sizes it; softmax: attention implementation `impl`), with
  `vocab_size` (0: the dataset's)."""
  config = efficiency_module().lra_text_config(our_entry(model, impl), length, batch, dtype)
  config.model.max_length = OFFICIAL_POSITIONS   # = the data's length at the default 4096
  if vocab_size:
    config.model.vocab_size = vocab_size
  return config


def our_dims(config) -> dict:
  from poolformers_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  m = config_lib.complete(config, need_files=False).model
  dims = dict(mixer=m.mixer, dim=m.dim, mlp_dim=m.mlp_dim, head_hidden_dim=m.head_hidden_dim,
              num_heads=m.num_heads, num_layers=m.num_layers, vocab_size=m.vocab_size,
              max_length=m.max_length, num_classes=m.num_classes, dropout_rate=m.dropout_rate,
              attention_dropout_rate=m.attention_dropout_rate, pooling=m.pooling,
              activation=m.activation, layer_norm_epsilon=m.layer_norm_epsilon)
  dims.update({f'mixer_kwargs.{k}': v for k, v in m.mixer_kwargs.items()})
  return dims


def run_ours(args) -> dict:
  from poolformers_jax.trainer import host_memory  # pylint: disable=g-import-not-at-top
  host_memory.keep_freed_memory()   # as train.py (cli.run) does, before XLA allocates
  efficiency = efficiency_module()
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  backend = jax.default_backend()   # the backend starts here, with the XLA_FLAGS recorded below
  if backend != {'cuda': 'gpu', 'cpu': 'cpu'}[args.device]:   # never time a CPU against a GPU
    raise RuntimeError(f'--device {args.device}: jax runs on {backend} ({jax.devices()})')
  config = our_config(args.model, args.length, args.batch, args.our_vocab_size, args.dtype,
                      args.impl)
  build = time.perf_counter()
  (run, memory), variables, _, _ = efficiency.build_step(
      our_entry(args.model, args.impl), args.length, args.batch, args.dtype, config=config)
  ids, labels = example_batch(args.batch, args.length, args.real_tokens)
  data = {'inputs': jnp.asarray(ids, jnp.int32), 'targets': jnp.asarray(labels, jnp.int32)}
  build_s = time.perf_counter() - build
  result = time_steps(lambda: run(data), args.warmup, args.steps,
                      sync=jax.block_until_ready)
  stats = jax.devices()[0].memory_stats() or {}   # None on a CPU
  return dict(result, side='ours', jax=jax.__version__, xla_flags=os.environ.get('XLA_FLAGS'),
              threads=len(os.sched_getaffinity(0)), build_s=round(build_s, 3),
              param_count=int(sum(x.size for x in jax.tree_util.tree_leaves(variables['params']))),
              dims=our_dims(config), device=args.device, precision=args.dtype,
              entry=our_entry(args.model, args.impl),
              card=jax.devices()[0].device_kind if backend != 'cpu' else machine()['cpu'],
              peak_bytes=stats.get('peak_bytes_in_use'), compiled_bytes=memory['total'])


# ---- the driver ----------------------------------------------------------------------------

def child_argv(args, python: str, side: str, model: str, dtype: str = 'float32',
               impl=None) -> list[str]:
  forwarded = ('official_dir', 'batch', 'length', 'real_tokens', 'warmup', 'steps',
               'our_vocab_size', 'device', 'official_precision')
  return [python, os.path.abspath(__file__), f'--child={side}', f'--model={model}',
          f'--dtype={dtype}', *[f'--{k}={getattr(args, k)}' for k in forwarded],
          *([f'--impl={impl}'] if impl else [])]


def variant_env(value: str) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
  if value == 'unset':
    env.pop('XLA_FLAGS', None)
  elif value != 'inherit':
    env['XLA_FLAGS'] = value
  return env


def run_child(argv: list[str], env: dict, timeout=None) -> dict:
  load = os.getloadavg()[0]
  start = time.perf_counter()
  try:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {'status': f'error: killed at the budget ({timeout:.0f} s)',
            'process_s': round(time.perf_counter() - start, 1)}
  lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT)]
  if proc.returncode != 0 or not lines:
    return {'status': f'error (exit {proc.returncode}): {error_line(proc.stderr or proc.stdout)}'}
  result = json.loads(lines[-1][len(RESULT):])
  result.update(status='ok', load_average=[round(load, 2), round(os.getloadavg()[0], 2)],
                process_s=round(time.perf_counter() - start, 1))
  return result


def error_line(text: str) -> str:
  """The exception line of a traceback (jax appends a note after it), else the last line."""
  lines = text.strip().splitlines() or ['no output']
  found = [l for l in lines if re.match(r'[\w.]*(Error|Exception|Exit)\b.*:', l)]
  return (found or lines)[-1][:400]


def summarize(runs: list[dict]) -> dict:
  ok = [r for r in runs if r['status'] == 'ok']
  out = {'runs': len(runs), 'failed': len(runs) - len(ok)}
  for clock in ('wall_ms', 'cpu_ms'):
    steps = [t for r in ok for t in r[clock]]
    out[clock] = statistics.median(steps) if steps else None
    out[f'round_medians_{clock}'] = [statistics.median(r[clock]) for r in ok]
  first = ok[0] if ok else {}
  peaks = [r['peak_bytes'] for r in ok if r.get('peak_bytes') is not None]
  out.update(param_count=first.get('param_count'), xla_flags=first.get('xla_flags'),
             peak_bytes=max(peaks) if peaks else None, card=first.get('card'),
             precision=first.get('precision'), entry=first.get('entry'),
             statuses=sorted({r['status'] for r in runs if r['status'] != 'ok'}))
  return out


def variant_name(value: str) -> str:
  return {'unset': 'ours, XLA_FLAGS unset', 'inherit': 'ours, XLA_FLAGS inherited',
          REDUCE_FLAG: 'ours, XLA_FLAGS=-reduce'}.get(value, f'ours, XLA_FLAGS={value}')


def model_sides(args, model: str) -> dict:
  """{side name: (argv, env, what it runs)}: the official process (not with --torch_python
  none), then each variant of ours -- XLA_FLAGS x --our_precisions x (softmax) --our_impls;
  cuDNN attention only in bf16 (it has no float32)."""
  sides = {}
  if args.torch_python != 'none':
    sides['official'] = (child_argv(args, args.torch_python, 'official', model), dict(os.environ),
                         dict(entry=model, precision=None))
  plain = args.our_precisions == ['float32'] and not args.our_impls   # the CPU record's names
  impls = (args.our_impls or [None]) if model == 'softmax' else [None]
  for value in args.our_xla_flags:
    for dtype in args.our_precisions:
      for impl in impls:
        if impl == 'cudnn' and dtype == 'float32':
          continue
        name = variant_name(value)
        if not plain:
          flags = f', {name[len("ours, "):]}' if len(args.our_xla_flags) > 1 else ''
          name = f'ours {our_entry(model, impl)} {dtype}{flags}'
        sides[name] = (child_argv(args, sys.executable, 'ours', model, dtype, impl),
                       variant_env(value), dict(entry=our_entry(model, impl), precision=dtype))
  return sides


def model_record(model: str, runs: dict, meta: dict) -> dict:
  """Summaries, ratios and parameter counts of one model's runs ({side: [run per round]});
  `meta` {side: its entry and precision}, for sides with no run that came back."""
  summary = {name: summarize(r) for name, r in runs.items()}
  for name, s in summary.items():
    s['entry'] = s['entry'] or meta[name]['entry']
    s['precision'] = s['precision'] or meta[name]['precision']
  official = summary.get('official') or summarize([])
  for s in summary.values():
    for clock in ('wall_ms', 'cpu_ms'):
      s[f'official_over_this_{clock}'] = (official[clock] / s[clock]
                                          if official[clock] and s[clock] else None)
  counts = {name: s['param_count'] for name, s in summary.items() if s['param_count']}
  first_ok = lambda name: next((r for r in runs.get(name, []) if r['status'] == 'ok'), {})
  official_dims = first_ok('official').get('dims')
  ours = [name for name in runs if name != 'official']
  record = dict(summary=summary, runs=runs, param_counts=counts,
                param_counts_equal=len(set(counts.values())) <= 1,
                official_dims=official_dims,
                our_dims=next((first_ok(n)['dims'] for n in ours if first_ok(n)), None))
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
  """The commit of the --official_dir checkout, or of its COMMIT file (a `git archive` copy
  has no .git; whoever copied it writes the commit there); None when neither says."""
  try:
    with open(os.path.join(official_dir, 'COMMIT')) as f:
      return f.read().strip() or None
  except OSError:
    pass
  try:   # only a PoNet checkout's own folder (not one inside another repository)
    proc = subprocess.run(['git', '-C', official_dir, 'rev-parse', '--show-prefix', 'HEAD'],
                          capture_output=True, text=True)
  except OSError:   # no git
    return None
  lines = proc.stdout.split()
  ok = proc.returncode == 0 and len(lines) == 2 and lines[0] == 'examples/LRA/code/'
  return lines[1] if ok else None


def our_commit():
  """This repository's commit (short), or $PEER_COMMIT where the copy has no .git."""
  try:
    proc = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'],
                          capture_output=True, text=True)
    if proc.returncode == 0:
      return proc.stdout.strip()
  except OSError:
    pass
  return os.environ.get('PEER_COMMIT') or 'unknown'


def machine() -> dict:
  model_name = platform.processor()
  try:
    with open('/proc/cpuinfo') as f:
      model_name = next(l.split(':', 1)[1].strip() for l in f if l.startswith('model name'))
  except (OSError, StopIteration):
    pass
  return dict(cpu=model_name, cpu_count=os.cpu_count(),
              cpus_allowed=sorted(os.sched_getaffinity(0)), platform=platform.platform())


PEER_HEADER = ('| model | precision | official ms | ours ms | ratio | official peak GiB | '
               'ours peak GiB | card | commit |')


def peer_rows(report: dict) -> list[str]:
  """One row per variant of ours against the official step of its model: wall ms (medians),
  official / ours, peak device memory of each side's own process ('-' on a CPU)."""
  gib = lambda b: '-' if b is None else f'{b / 2**30:.2f}'
  ms = lambda v: '-' if v is None else f'{v:.2f}'
  rows = []
  for model, rec in report['models'].items():
    official = rec['summary'].get('official') or summarize([])
    for name, s in rec['summary'].items():
      if name == 'official':
        continue
      ratio = s['official_over_this_wall_ms']
      cards = ' / '.join(dict.fromkeys(c for c in (official['card'], s['card']) if c)) or '-'
      precision = f'{s["precision"] or "?"} vs {official["precision"] or "?"}'
      note = f' ({", ".join(s["statuses"])})' if s['statuses'] and s['wall_ms'] is None else ''
      rows.append(f'| {s["entry"] or model}{note} | {precision} | {ms(official["wall_ms"])} | '
                  f'{ms(s["wall_ms"])} | {"-" if ratio is None else f"{ratio:.2f}x"} | '
                  f'{gib(official["peak_bytes"])} | {gib(s["peak_bytes"])} | {cards} | '
                  f'{rec["setup"]["commit"]} |')
  return rows


def write_markdown(report: dict, path: str) -> None:
  lines = []
  for model, rec in report['models'].items():
    s = rec['setup']
    official = rec['summary'].get('official') or summarize([])
    lines += [f'**{model}**: batch {s["batch"]} x {s["length"]} tokens ({s["real_tokens"]} real), '
              f'{s.get("device", "cpu")}, official {official["precision"] or "float32"}, '
              f'{s["rounds"]} rounds x {s["steps"]} timed steps after {s["warmup"]} '
              f'warm-up, CPUs {s["machine"]["cpus_allowed"]} of {s["machine"]["cpu_count"]} '
              f'({s["machine"]["cpu"]}); torch {official_version(rec, "torch")}, jax '
              f'{official_version(rec, "jax")}; official commit {s.get("official_commit")}; '
              f'`{s["command"]}`', '',
              '| side | XLA_FLAGS seen | params | wall ms | CPU ms | official / this (wall, CPU) |',
              '|---|---|---|---|---|---|']
    for name, sm in rec['summary'].items():
      fmt = lambda v: '-' if v is None else f'{v:.0f}'
      ratio = lambda v: '-' if v is None else f'{v:.2f}x'
      flags = '-' if name == 'official' else f'`{sm["xla_flags"]}`' if sm['xla_flags'] else 'unset'
      failed = f' ({"; ".join(sm["statuses"])})' if sm['statuses'] else ''
      lines.append(f'| {name}{failed} | {flags} | {sm["param_count"]} | {fmt(sm["wall_ms"])} | '
                   f'{fmt(sm["cpu_ms"])} | {ratio(sm["official_over_this_wall_ms"])}, '
                   f'{ratio(sm["official_over_this_cpu_ms"])} |')
    if not rec['param_counts_equal']:
      lines.append(f'\nParameter counts differ: {rec["param_count_difference"]}')
    lines.append('')
  lines += ['Side by side (wall ms, medians of every timed step; ratio = official / ours; peak = '
            'each side\'s own process):', '', PEER_HEADER, '|---' * 9 + '|'] + peer_rows(report)
  with open(path, 'w') as f:
    f.write('\n'.join(lines) + '\n')


def official_version(rec: dict, key: str) -> str:
  return next((r[key] for runs in rec['runs'].values() for r in runs if key in r), '?')


def check_args(args) -> None:
  """Bad input, refused before anything runs."""
  missing = [f for f in OFFICIAL_FILES if not os.path.isfile(os.path.join(args.official_dir, f))]
  if missing and args.torch_python != 'none':
    raise ValueError(f'--official_dir {args.official_dir} lacks {", ".join(missing)}: give the '
                     'folder examples/LRA/code of a lxchtan/PoNet checkout')
  if not args.output_dir:
    raise ValueError('--output_dir is required: the folder official_torch.json / .md are '
                     'written to')
  if not args.torch_python:
    raise ValueError('--torch_python is required: an interpreter with torch and numpy (torch is '
                     'not a dependency of this project; e.g. a separate venv with CPU torch), or '
                     'none: ours only')
  probe_code = 'import torch, numpy' + (
      '; assert torch.cuda.is_available(), "no CUDA device"' if args.device == 'cuda' else '')
  probe = subprocess.run([args.torch_python, '-c', probe_code], capture_output=True,
                         text=True) if os.path.exists(args.torch_python) else None
  if args.torch_python != 'none' and (probe is None or probe.returncode != 0):
    raise ValueError(f'--torch_python {args.torch_python} cannot import torch and numpy' + (
        ' or sees no CUDA device' if args.device == 'cuda' else '') +
        '; install them in that environment (pip install torch numpy)')
  for flag, given, allowed in (('--models', args.models, sorted(MODELS)),
                               ('--our_impls', args.our_impls, ['explicit', 'xla', 'cudnn',
                                                                'auto']),
                               ('--our_precisions', args.our_precisions, ['float32', 'bfloat16'])):
    if set(given) - set(allowed):
      raise ValueError(f'{flag} {sorted(set(given) - set(allowed))} unknown; choose from '
                       f'{", ".join(allowed)}')
  if not 0 < args.real_tokens <= args.length:
    raise ValueError(f'--real_tokens {args.real_tokens} must be in 1..--length ({args.length})')
  if min(args.rounds, args.steps, args.batch) < 1 or args.warmup < 0:
    raise ValueError('--rounds, --steps and --batch must be >= 1 and --warmup >= 0')
  if args.length > OFFICIAL_POSITIONS:
    raise ValueError(f'--length {args.length} exceeds the official model\'s {OFFICIAL_POSITIONS} '
                     'positions (lra_config text max_seq_len 4000, rounded up to a power of two)')


def drive(args) -> None:
  check_args(args)
  start = time.perf_counter()
  os.makedirs(args.output_dir, exist_ok=True)
  path = os.path.join(args.output_dir, f'{args.output_name}.json')
  report = {'models': {}}
  if os.path.exists(path):   # an earlier run's models are kept
    with open(path) as f:
      report = json.load(f)
  command = ' '.join(['benchmarks/official_torch.py'] + sys.argv[1:])
  sides = {model: model_sides(args, model) for model in args.models}
  runs = {model: {name: [] for name in sides[model]} for model in args.models}
  took: dict = {}   # (model, side) -> seconds its last process took
  setup = dict(command=command, batch=args.batch, length=args.length,
               real_tokens=args.real_tokens, rounds=args.rounds, steps=args.steps,
               warmup=args.warmup, our_vocab_size=args.our_vocab_size,
               our_xla_flags=args.our_xla_flags, our_precisions=args.our_precisions,
               our_impls=args.our_impls, device=args.device,
               official_precision=args.official_precision, budget_s=args.budget_s,
               driver_xla_flags=os.environ.get('XLA_FLAGS'), machine=machine(),
               official_commit=official_commit(args.official_dir), commit=our_commit(),
               date=time.strftime('%Y-%m-%d %H:%M'))
  # Round-robin over models inside each round, so a budget cut still leaves every model a round.
  for round_index in range(args.rounds):
    for model in args.models:
      for name, (argv, env, _) in sides[model].items():
        left = args.budget_s - (time.perf_counter() - start) if args.budget_s else None
        if left is not None and left < max(took.get((model, name), 0), 1):
          result = {'status': 'not run: budget spent'}
        else:
          result = run_child(argv, env, timeout=left)
          took[(model, name)] = result.get('process_s', 0)
        runs[model][name].append(result)
        one = summarize([result])
        print(f'[{model} round {round_index + 1}/{args.rounds}] {name:28s} {result["status"]:4s} '
              f'wall {one.get("wall_ms")} ms, cpu {one.get("cpu_ms")} ms, '
              f'peak {one.get("peak_bytes")} B', flush=True)
      record = model_record(model, runs[model], {n: m for n, (_, _, m) in sides[model].items()})
      record['setup'] = dict(setup, rounds_done=round_index + 1)
      report['models'][model] = record
      with open(path, 'w') as f:
        json.dump(report, f, indent=1)
      write_markdown(report, os.path.join(args.output_dir, f'{args.output_name}.md'))
  for model in args.models:
    for name, s in report['models'][model]['summary'].items():
      print(f'{model:8s} {name:28s} wall {s["wall_ms"]} ms, cpu {s["cpu_ms"]} ms, '
            f'official/this {s["official_over_this_wall_ms"]} / {s["official_over_this_cpu_ms"]}, '
            f'params {s["param_count"]}', flush=True)
  print(f'wrote {args.output_dir}/{args.output_name}.json and .md')


def parse_args(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if '--child=official' in argv:   # --torch_python runs it: no absl, no poolformers_jax there
    p = argparse.ArgumentParser()
  else:   # the project's error contract (poolformers_jax/errors.py)
    from poolformers_jax import errors  # pylint: disable=g-import-not-at-top
    p = errors.ArgumentParser(description=__doc__.split('\n', 1)[0])
  split = lambda s: [x for x in s.split(',') if x]
  p.add_argument('--official_dir', required=True, help="a checkout's examples/LRA/code")
  p.add_argument('--torch_python', help='interpreter with torch and numpy (official side); '
                 'none: our side only')
  p.add_argument('--output_dir')
  p.add_argument('--output_name', default='official_torch', help='NAME.json / NAME.md')
  p.add_argument('--models', type=split, default=['ponet', 'softmax'])
  p.add_argument('--device', choices=['cpu', 'cuda'], default='cpu',
                 help='cuda: both sides on the GPU, the official step with amp + GradScaler')
  p.add_argument('--official_precision', choices=['amp', 'float32'], default='amp',
                 help='amp: run_tasks.py\'s mixed_precision (autocast fp16 + GradScaler; only '
                 'with --device cuda, a no-op without CUDA)')
  p.add_argument('--our_precisions', type=split, default=['float32'],
                 help='our dtypes, one variant each (float32, bfloat16)')
  p.add_argument('--our_impls', type=split, default=[],
                 help='softmax: attention implementations, one variant each (xla, cudnn; '
                 'default: the config\'s)')
  p.add_argument('--budget_s', type=float, default=0,
                 help='wall-clock budget of the whole run (0: none); see the docstring')
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
  p.add_argument('--dtype', default='float32', help=argparse.SUPPRESS)
  p.add_argument('--impl', default=None, help=argparse.SUPPRESS)
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
  if '--child=official' not in sys.argv:   # the official child runs under torch's python: no jax
    from poolformers_jax import runtime  # before the first compile
    runtime.configure_program()
  main()
