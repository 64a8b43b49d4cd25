r"""Causal linear attention in chunks against its prefix-sum form and against softmax attention:
the training step of the enwik8 character LM at its width (configs/enwik8.py, models/lm.py: width
512, 8 heads of 64, FFN 2048, dropout 0.2, sinusoidal positions; `--layers` blocks), batch 1,
every entry in one process.

Entries (`--entries`):
- `linear/prefix_sums`: the causal form before chunks, the baseline: prefix sums of k_j v_j^T
  over the tokens, [B, H, L, Dh, Dh] float32 (`prefix_sum_attention`, traced in place of
  layers/attention.py's `linear_attention`);
- `linear/<C>`: LinearAttention(causal=True, chunk_size=C);
- `softmax/<implementation>`: MultiHeadAttention(causal=True, implementation=...);
- `contextpool`, `msac`: the causal mixer with the options of configs/enwik8.py's model of it
  (`cp_transformer_l12`: predictor width 64 at the mixer's input; `msac_lm`: 1x1, 1x2, 1x3 SACs;
  `msac/split` its heads split, as `--config.model.mixer_kwargs.heads=split`);
- any entry + `/<remat>`: the same with config.model.remat=<remat> (`linear/64/full`: each block
  rematerialised, models/block.py's REMAT_POLICIES; `contextpool//full`).
Each point reports the compiled step's temporaries and arguments (`memory_analysis()`: the same
on every run), the temporaries of the mixer alone (forward and backward of one layer), the step's
flops (`cost_analysis()`), the loss of its first step (equal across the linear entries: the same
function) and the median step time, wall clock and CPU time of the process, over `--repeats`
steps; the entries of a length are compiled first, then timed round-robin, so load changes hit
them alike. `step_ms`, the figure the ratios use, is the CPU time of the process on a CPU (load
on a shared machine does not enter it) and the wall clock on an accelerator (the host waits for
the device: its CPU time is not the step's). A point whose temporaries and arguments exceed
`--memory_budget_gb` (0: the device's `bytes_limit`) is compiled and not run; `softmax/cudnn`
where cuDNN does not run (a CPU, float32) is 'n/a' and not compiled. Ratios: to
`linear/prefix_sums` and to the first softmax entry at the same length.

  python benchmarks/causal_linear.py --lengths 4096,16384 --output /tmp/causal_linear.json
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))   # step_runner, when imported as a module

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import step_runner  # noqa: E402  (benchmarks/step_runner.py)

from poolformers_jax import config as config_lib, errors  # noqa: E402
from poolformers_jax.layers import attention, build_mixer  # noqa: E402
from poolformers_jax.layers.attention import cudnn_unavailable_reason  # noqa: E402
from poolformers_jax.models.lm import CharTransformerLM, lm_inputs_targets  # noqa: E402

BASELINE = 'linear/prefix_sums'
ENWIK8_MODELS = {'contextpool': 'cp_transformer_l12', 'msac': 'msac_lm'}   # configs/enwik8.py


def prefix_sum_attention(q, k, v, mask, causal, eps=1e-6, normalizer='keys', shard=None,
                         chunk_size=None):
  """The causal form before chunks (one sequence shard): out_i from the prefix sums
  sum_{j <= i} phi(k_j) v_j^T [B, H, L, Dh, Dh] and sum_{j <= i} phi(k_j), float32."""
  del shard, chunk_size
  assert causal, 'the baseline is the causal form'
  k = k * mask[:, None, :, None].astype(k.dtype)
  q32, k32, v32 = (t.astype(jnp.float32) for t in (q, k, v))
  if normalizer == 'padded_length':
    q32, k32 = q32 * q.shape[2] ** -0.25, k32 * q.shape[2] ** -0.25
  kv = jnp.cumsum(jnp.einsum('bhld,bhle->bhlde', k32, v32), axis=2)
  num = jnp.einsum('bhld,bhlde->bhle', q32, kv)
  if normalizer == 'padded_length':
    return num.astype(v.dtype)
  den = jnp.einsum('bhld,bhld->bhl', q32, jnp.cumsum(k32, axis=2))
  return (num / (den[..., None] + eps)).astype(v.dtype)


@contextlib.contextmanager
def traced_as(entry: str) -> Iterator[None]:
  """While a step is traced, `linear/prefix_sums` puts the baseline in place of the library's
  `linear_attention` (LinearAttention calls it by name)."""
  if entry != BASELINE:
    yield
    return
  library = attention.linear_attention
  attention.linear_attention = prefix_sum_attention
  try:
    yield
  finally:
    attention.linear_attention = library


def mixer_of(entry: str) -> tuple[str, dict]:
  """(mixer name, its options) of an entry."""
  mixer, option = (entry.split('/') + [''])[:2]
  if mixer == 'linear':
    return mixer, {} if option == 'prefix_sums' else {'chunk_size': int(option)}
  if mixer == 'softmax':
    return mixer, {'implementation': option or 'xla'}
  if mixer in ENWIK8_MODELS:
    options = dict(config_lib.load(f'enwik8:{ENWIK8_MODELS[mixer]}').model.mixer_kwargs)
    return mixer, {**options, 'heads': option} if option else options
  raise ValueError(f'--entries: unknown entry {entry!r}; use linear/prefix_sums, linear/<chunk '
                   'size>, softmax/<implementation>, contextpool, msac or msac/split.')


def mixer_temp_bytes(entry: str, length: int, args) -> int:
  """Compiled temporaries of the mixer alone, in --dtype: forward and backward of one causal
  layer."""
  name, options = mixer_of(entry)
  dtype = jnp.dtype(args.dtype)   # softmax/cudnn runs in bfloat16 alone
  mixer = build_mixer(name, shared=dict(num_heads=args.heads, causal=True, dtype=dtype), **options)
  x = jax.ShapeDtypeStruct((1, length, args.width), dtype)
  variables = jax.eval_shape(mixer.init, jax.random.PRNGKey(0), x)
  grad = jax.grad(lambda v, x: jnp.sum(mixer.apply(v, x) ** 2), argnums=(0, 1))
  with traced_as(entry):
    compiled = jax.jit(grad).lower(variables, x).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


def prepare(entry: str, length: int, args) -> dict:
  """Compiles one point's step (loss, gradient, AdamW; the state donated) and runs it once if
  its memory fits the budget."""
  mixer, options = mixer_of(entry)
  if options.get('implementation') == 'cudnn':
    why = cudnn_unavailable_reason(jnp.dtype(args.dtype), args.width // args.heads)
    if why:
      return {'point': {'status': f'n/a: {why}', 'temp_bytes': None, 'mixer_temp_bytes': None,
                        'wall_ms': None, 'cpu_ms': None, 'step_ms': None}}
  model = CharTransformerLM(vocab_size=256, num_layers=args.layers, emb_dim=args.width,
                            num_heads=args.heads, mlp_dim=args.ffn, mixer=mixer,
                            mixer_kwargs=options, dtype=jnp.dtype(args.dtype),
                            remat=(entry.split('/')[2:] or ['none'])[0])   # a third part
  tokens = jax.random.randint(jax.random.PRNGKey(0), (1, length + 1), 1, 256, jnp.int32)
  inputs, targets = lm_inputs_targets(tokens)
  params = jax.jit(model.init)(jax.random.PRNGKey(1), inputs[:, :64])['params']
  tx = optax.adamw(2.5e-4, weight_decay=0.01)

  def step(params, opt_state, key):
    def loss_fn(params):
      logits = model.apply({'params': params}, inputs, deterministic=False,
                           rngs={'dropout': key})
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  state = [params, tx.init(params)]
  with traced_as(entry):
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(*state, jax.random.PRNGKey(2)).compile()
  memory, cost = compiled.memory_analysis(), step_runner.cost_of(compiled)
  point = {'temp_bytes': int(memory.temp_size_in_bytes),
           'mixer_temp_bytes': mixer_temp_bytes(entry, length, args),
           'argument_bytes': int(memory.argument_size_in_bytes),
           'flops': cost.get('flops'), 'status': 'ok', 'first_loss': None,
           'wall_ms': None, 'cpu_ms': None, 'wall_times_ms': [], 'cpu_times_ms': []}
  budget = step_runner.memory_budget_bytes(args.memory_budget_gb)
  if point['temp_bytes'] + point['argument_bytes'] > budget:
    point['status'] = f'not run: over the budget of {budget / 2**30:.1f} GiB'
    return {'point': point}
  job = {'point': point, 'run': compiled, 'state': state, 'count': 0}
  point['first_loss'] = run_once(job)[2]   # the first run allocates: not timed
  return job


def run_once(job: dict) -> tuple[float, float, float]:
  """(wall s, CPU s, loss) of one step."""
  wall, cpu = time.perf_counter(), time.process_time()
  *job['state'], loss = job['run'](*job['state'], jax.random.PRNGKey(job['count']))
  loss = float(jax.block_until_ready(loss))
  job['count'] += 1
  return time.perf_counter() - wall, time.process_time() - cpu, loss


def measure_length(entries: list[str], length: int, args) -> dict:
  jobs = {entry: prepare(entry, length, args) for entry in entries}
  for _ in range(args.repeats):
    for job in jobs.values():
      if 'run' in job:
        wall, cpu, _ = run_once(job)
        job['point']['wall_times_ms'].append(wall * 1e3)
        job['point']['cpu_times_ms'].append(cpu * 1e3)
  points = {entry: job['point'] for entry, job in jobs.items()}
  for point in points.values():
    if point.get('wall_times_ms'):
      point['wall_ms'] = statistics.median(point['wall_times_ms'])
      point['cpu_ms'] = statistics.median(point['cpu_times_ms'])
    point['step_ms'] = point.get('cpu_ms' if jax.default_backend() == 'cpu' else 'wall_ms')
  add_ratios(points, next((e for e in entries if e.startswith('softmax')), None))
  return points


def add_ratios(points: dict, softmax: str | None) -> None:
  for point in points.values():
    for reference, suffix in ((BASELINE, 'prefix_sums'), (softmax, 'softmax')):
      ref = points.get(reference or '', {})
      for key in ('temp_bytes', 'mixer_temp_bytes', 'wall_ms', 'cpu_ms', 'step_ms'):
        ok = point.get(key) is not None and ref.get(key)
        point[f'{key}_ratio_to_{suffix}'] = point[key] / ref[key] if ok else None


def table(results: dict) -> str:
  """Markdown: per length and entry, temporaries and step time, with their ratios."""
  fmt = lambda r: '-' if r is None else f'{r:.3g}'
  ms = lambda t: '-' if t is None else f'{t:.0f}'
  mb = lambda b: '-' if b is None else f'{b / 2**20:.0f}'
  lines = ['| length | entry | step temp MB | mixer temp MB | step ms (wall / CPU) | '
           'step temp, mixer temp, step time / prefix sums | ... / softmax |',
           '|---|---|---|---|---|---|---|']
  for length, points in results.items():
    for entry, p in points.items():
      ratios = lambda to, p=p: ', '.join(fmt(p[f'{key}_ratio_to_{to}']) for key in (
          'temp_bytes', 'mixer_temp_bytes', 'step_ms'))
      lines.append(
          f'| {length} | {entry} | {mb(p["temp_bytes"])} | '
          f'{mb(p["mixer_temp_bytes"])} | {ms(p["wall_ms"])} / {ms(p["cpu_ms"])}'
          + ('' if p['status'] == 'ok' else f' ({p["status"]})') + ' | '
          f'{ratios("prefix_sums")} | {ratios("softmax")} |')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = errors.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--lengths', default='4096,16384', help='tokens per sequence, comma list')
  parser.add_argument('--entries', default=f'{BASELINE},linear/64,softmax/xla')
  parser.add_argument('--layers', type=int, default=1)
  parser.add_argument('--width', type=int, default=512)
  parser.add_argument('--heads', type=int, default=8)
  parser.add_argument('--ffn', type=int, default=2048)
  parser.add_argument('--repeats', type=int, default=3, help='timed steps per point')
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'),
                      help='compute dtype of the model (softmax/cudnn needs bfloat16)')
  parser.add_argument('--memory_budget_gb', type=float, default=6.0,
                      help="0: the device's bytes_limit")
  parser.add_argument('--output', default=None, help='a JSON file of every point')
  args = parser.parse_args(argv)
  entries = args.entries.split(',')
  results = {}
  for length in (int(n) for n in args.lengths.split(',')):
    load = os.getloadavg()[0]
    results[str(length)] = measure_length(entries, length, args)
    print(f'{length} tokens (load {load:.1f} -> {os.getloadavg()[0]:.1f}):', flush=True)
    for entry, point in results[str(length)].items():
      print(f'  {entry}: {point["status"]}, {point["temp_bytes"]} B temp, wall '
            f'{point["wall_ms"]} ms, CPU {point["cpu_ms"]} ms, loss {point.get("first_loss")}',
            flush=True)
  report = {'command': ' '.join(['python', 'benchmarks/causal_linear.py', *(argv or sys.argv[1:])]),
            'machine': f'{platform.machine()}, {os.cpu_count()} CPUs, {jax.default_backend()}',
            'jax': jax.__version__, 'dtype': args.dtype,
            'clock': 'CPU time' if jax.default_backend() == 'cpu' else 'wall', 'results': results}
  print(table(results))
  if args.output:
    with open(args.output, 'w') as f:
      json.dump(report, f, indent=1)
  return report


if __name__ == '__main__':
  main()
