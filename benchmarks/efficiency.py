r"""The papers' efficiency tables in one command: whole TRAINING steps of the LRA text model.

Mode `train` (default): the training step of the trainer (trainer/step.py: forward with dropout,
backward, the AdamW update of `configs/lra_text.py`, metric sums and the NaN guard) of the LRA
text model (2 pre-LN layers, dim 64, 2 heads, FFN 128, mean pooling; batch 32 as in PoNet's
table, `--batch` / `--dtype` change it) for every registered mixer, for:
- `softmax/<impl>`: softmax attention in each `MultiHeadAttention.implementation` that runs on
  this device ('explicit' = the papers' naive float32 baseline, 'xla', and 'cudnn' on NVIDIA GPUs
  with bf16/fp16);
- `none`: the no-mixing lower bound: softmax attention's four Dense layers and output dropout,
  nothing between them, y = out(q * k + v) position by position (not out(q + k + v), whose three
  projections share one gradient that XLA computes once: a bound below any real mixer);
- `identity`: the model without its mixer (y = x): a mixer's own cost is its time minus this.
Lengths 1K-16K, and 32K for the linear-memory mixers (`--long_lengths`). Each point reports
  step_ms       median wall time of one step over the timed repeats (after one warm-up run);
                in-process the models of a length run interleaved, round-robin, so load changes
                hit them alike; repeats stop early once a point has used `--point_budget_s`;
  steps_per_s   1000 / step_ms;
  memory_bytes  CPU: XLA's compiled temp bytes of the step (`memory_analysis()`; deterministic);
                GPU: peak device bytes of a fresh process that ran only this point, or
                (`--isolate=no`: one process for the sweep, no process start and backend
                start per point) the compiled program's argument + output + temp - aliased
                bytes, checked against the card's memory before it runs;
  forward_gflops  `cost_analysis()` of the (lowered) forward + loss;
  step_flops    `cost_analysis()` flops of the compiled training step;
  flops_used    the larger of step_flops and 3 x forward (XLA:GPU's compiled count leaves out
                the cuBLAS calls dots become; jax issue 22249); XLA counts nothing inside a
                custom call such as cuDNN attention, so softmax/cudnn takes softmax/xla's count
                at the same length when that is larger (`flops_from` says which);
  flops_per_s   flops_used / step time; peak_fraction: that over the card's dense bf16 peak
                (trainer/flops.py, by device_kind; None for an unknown card or a CPU);
  status        'ok' | 'out of memory' (CPU: temp + arguments exceed `--memory_budget_gb`, not run;
                GPU: the allocator failed) | 'error: ...';
and ratios to softmax/explicit, to the lower bound and to identity at the same length, and the
load average before and after each length. Writes efficiency.json, efficiency.md (tables) and
efficiency.png (log-log: time, memory, time ratio to softmax/explicit) to --output_dir after
every length; points past `--deadline_s` are 'not run: budget spent'.

Mode `layer`: the older per-mixer measurement (one mixer layer, forward+backward, no optimizer).

`--topology v5e:2x2` (needs libtpu): nothing runs; the same training steps are compiled for that
TPU slice, `--batch` examples per chip, and each point reports XLA:TPU's memory per chip, flops
and bytes per chip and the roofline step time of poolformers_jax/trainer/accelerators.py, with
ratios to softmax/xla and to the bound: efficiency_tpu.{json,md} (docs/accelerators.md).

XLA flags: none of its own; the program train.py runs, under the environment's XLA_FLAGS
(recorded as `setup.xla_flags`; their effect on memory: docs/efficiency.md).

  nice -n 19 .venv/bin/python benchmarks/efficiency.py --output_dir /tmp/eff --batch 4
  .venv/bin/python benchmarks/efficiency.py --output_dir /tmp/eff_quick --quick
"""
import os
import sys

os.environ.setdefault('MPLBACKEND', 'Agg')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'configs'))

import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from absl import flags  # noqa: E402

from poolformers_jax import errors  # noqa: E402
from poolformers_jax.layers import MIXERS, build_mixer, register_mixer  # noqa: E402
from poolformers_jax.layers.attention import cudnn_unavailable_reason  # noqa: E402
from poolformers_jax.layers.common import check_sequence_input, compute_dtype  # noqa: E402
from poolformers_jax.trainer import host_memory, step as step_lib  # noqa: E402
from poolformers_jax.trainer.flops import peak_bf16_flops  # noqa: E402
from poolformers_jax.trainer.setup import make_setup, variables_of  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_runner  # noqa: E402  (benchmarks/step_runner.py)

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', None, 'Where efficiency.json / .md / .png are written.')
flags.DEFINE_enum('mode', 'train', ['train', 'layer'], 'Whole training steps, or one mixer layer.')
flags.DEFINE_list('mixers', None, 'Entries (default: softmax/<each implementation that runs>, '
                  'every other registered mixer, none).')
flags.DEFINE_list('lengths', ['1024', '2048', '4096', '8192', '16384'], 'Sequence lengths.')
flags.DEFINE_list('long_lengths', ['32768'], 'Extra lengths for the linear-memory entries.')
flags.DEFINE_list('linear_memory',
                  ['none', 'identity', 'linear', 'ponet', 'adamra', 'softmax/cudnn'],
                  'Entries that also run at --long_lengths.')
flags.DEFINE_integer('batch', 32, 'Batch size (PoNet table: 32).')
flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Compute dtype of the model.')
flags.DEFINE_integer('repeats', 5, 'Timed steps per point at most (median reported).')
flags.DEFINE_enum('clock', 'wall', ['wall', 'cpu'], 'Step time: wall clock, or CPU time of the '
                  'process (load-independent when pinned to one core with taskset).')
flags.DEFINE_float('point_budget_s', 20.0, 'Stop timing a point after this many seconds '
                   '(at least one timed step).')
flags.DEFINE_float('memory_budget_gb', 8.0, 'CPU: points whose compiled temp + argument bytes '
                   'exceed this are reported as out of memory and not run (GPU, one process: '
                   'compiled total bytes); 0 on a GPU: the device\'s bytes_limit.')
flags.DEFINE_float('deadline_s', 0, 'Stop compiling new points after this many seconds (0: '
                   'never); the rest are reported as not run.')
flags.DEFINE_bool('plot', True, 'Also write efficiency.png.')
flags.DEFINE_enum('isolate', 'auto', ['auto', 'yes', 'no'], 'One subprocess per point (auto: on '
                  'GPU, where the peak device memory of a process is the measurement).')
flags.DEFINE_string('resume_from', None, 'efficiency.json of an earlier run: its points are kept '
                    'and not measured again (but those not run for the budget).')
flags.DEFINE_float('point_timeout_s', 600.0, 'Isolated points: kill a point after this long.')
flags.DEFINE_string('point', None, 'Internal: measure ENTRY@LENGTH alone and print its JSON.')
flags.DEFINE_bool('quick', False, 'Smoke test: softmax/explicit and none (unless '
                  '--mixers), length 32 (+64 for the linear-memory ones), batch 2, one '
                  'repeat; every field is still written.')
flags.DEFINE_string('topology', None, 'Compile every point for this TPU slice (e.g. v5e:2x2) '
                    'and report its cost model instead of timing on this machine.')
flags.DEFINE_integer('num_heads', 2, 'layer mode: heads.')
flags.DEFINE_integer('dim', 64, 'layer mode: width.')
flags.DEFINE_float('max_temp_gb', 4.0, 'layer mode: skip timing above this scratch memory.')


class NoMixing(nn.Module):
  """The lower bound: softmax attention's four projections, no token mixing: out(q * k + v)."""
  num_heads: int
  dropout_rate: float = 0.0
  use_bias: bool = True
  dtype: Any | None = None

  @nn.compact
  def __call__(self, x, mask=None, *, deterministic: bool = True):
    check_sequence_input(x, mask, type(self).__name__)
    dense = lambda n: nn.Dense(x.shape[-1], use_bias=self.use_bias,
                               dtype=compute_dtype(self.dtype, x), name=n)
    mixed = dense('query')(x) * dense('key')(x) + dense('value')(x)  # four distinct gradients
    mixed = nn.Dropout(self.dropout_rate)(mixed, deterministic=deterministic)
    return dense('out')(mixed)


class Identity(NoMixing):
  """The model without its mixer: the block's residual, LayerNorm and FFN around y = x (no
  projection; NoMixing's fields, unused). What a mixer adds to a step is its time minus this
  one's."""

  def __call__(self, x, mask=None, *, deterministic: bool = True):
    check_sequence_input(x, mask, type(self).__name__)
    return x


def on_gpu() -> bool:
  return jax.default_backend() == 'gpu'


def default_entries(dtype: str) -> list[str]:
  impls = ['explicit', 'xla']
  if cudnn_unavailable_reason(jnp.dtype(dtype), 64 // 2) is None:
    impls.append('cudnn')
  others = [m for m in MIXERS if m not in ('softmax', 'none', 'identity')]
  return [f'softmax/{i}' for i in impls] + others + ['none', 'identity']


def lra_text_config(entry: str, length: int, batch: int, dtype: str):
  """configs/lra_text.py at the paper setting, resized to `length`, with `entry`'s mixer."""
  import lra_text  # pylint: disable=g-import-not-at-top

  from poolformers_jax.config.lra import FAMILIES  # pylint: disable=g-import-not-at-top
  mixer, _, impl = entry.partition('/')
  family = next((f for f, (m, _) in FAMILIES.items() if m == mixer), 'transformer')
  config = lra_text.get_config(family).unlock()
  config.model.mixer = mixer
  kwargs = dict(FAMILIES[family][1]) if family != 'transformer' else {}
  if mixer == 'ponet':   # PoNet's LRA-text segment count scales with the length (config/lra.py)
    kwargs['segment_num'] = max(lra_text.TASK.segment_num * length // lra_text.TASK.length, 1)
  if impl:
    kwargs['implementation'] = impl
  config.model.mixer_kwargs = kwargs
  config.model.dtype = dtype
  config.data.max_length = length
  config.update(batch_size=batch, num_devices=1)
  return config


def build_step(entry: str, length: int, batch: int, dtype: str, config=None):
  """((the trainer's step as `batch -> steps taken`, its compiled memory and flops), variables,
  batch, jitted forward loss) for one point. `config`: a changed `lra_text_config(entry, length,
  batch, dtype)` (benchmarks/official_torch.py)."""
  config = lra_text_config(entry, length, batch, dtype) if config is None else config
  setup = make_setup(config, need_files=False)
  compiled, train_state, runner = step_runner.trainer_step(setup, step_seed=0)
  key = jax.random.PRNGKey(0)
  inputs = jax.random.randint(key, (batch, length), 1, 257, jnp.int32)   # every token real
  data = {'inputs': inputs, 'targets': jnp.arange(batch, dtype=jnp.int32) % 2}

  def loss_fn(variables, data):
    logits = setup.model.apply(variables, data['inputs'], deterministic=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, data['targets']).mean()

  stats = dict(compiled.memory, step_flops=step_lib.flops_of(compiled.run))
  return (runner, stats), variables_of(train_state), data, jax.jit(loss_fn)


def is_oom(error: Exception) -> bool:
  text = str(error)
  return 'RESOURCE_EXHAUSTED' in text or 'Out of memory' in text or 'out of memory' in text


def memory_kind(gpu_peak: bool) -> str:
  if gpu_peak:
    return 'peak device bytes'
  return 'compiled argument + output + temp bytes' if on_gpu() else 'compiled temp bytes'


def prepare(entry: str, length: int, batch: int, dtype: str, budget_bytes: float,
            gpu_peak: bool = True) -> dict:
  """Compiles one point: FLOPs, compiled memory, and (if it fits) what timing needs.
  `gpu_peak`: on a GPU this process runs only this point and reports its peak memory."""
  (compiled, memory), state, data, loss_fn = build_step(entry, length, batch, dtype)
  forward = loss_fn.lower(state, data).cost_analysis()
  point = {'status': 'ok', 'step_ms': None, 'steps_per_s': None, 'timed_steps': 0,
           'forward_gflops': float(forward.get('flops', float('nan'))) / 1e9,
           'step_flops': memory['step_flops'],
           'compiled_temp_bytes': memory['temp'],
           'argument_bytes': memory['argument'], 'compiled_total_bytes': memory['total'],
           'memory_bytes': None, 'memory_kind': memory_kind(gpu_peak and on_gpu()),
           'first_step_s': None}
  if not on_gpu():
    point['memory_bytes'] = point['compiled_temp_bytes']
    if point['compiled_temp_bytes'] + point['argument_bytes'] > budget_bytes:
      point['status'] = 'out of memory'
      return {'point': point}
  elif not gpu_peak:   # one process for every point: the program's own bytes, not a peak
    point['memory_bytes'] = point['compiled_total_bytes']
    if point['memory_bytes'] > budget_bytes:
      point['status'] = 'out of memory'
      return {'point': point}
  start = time.perf_counter()
  jax.block_until_ready(compiled(data))                         # warm-up (first run allocates)
  point['first_step_s'] = round(time.perf_counter() - start, 3)
  return {'point': point, 'run': compiled, 'data': data, 'times': []}


def step_clock() -> float:
  return time.process_time() if FLAGS.clock == 'cpu' else time.perf_counter()


def time_once(job: dict) -> float:
  start = step_clock()
  jax.block_until_ready(job['run'](job['data']))
  elapsed = step_clock() - start
  job['times'].append(elapsed)
  return elapsed


def finish(job: dict) -> dict:
  point = job['point']
  if job.get('times'):
    point['step_ms'] = statistics.median(job['times']) * 1e3
    point['steps_per_s'] = 1e3 / point['step_ms']
    point['timed_steps'] = len(job['times'])
  if point.get('memory_kind') == 'peak device bytes' and point['status'] == 'ok':
    point['memory_bytes'] = int(jax.devices()[0].memory_stats()['peak_bytes_in_use'])
  return point


def guarded(fn, *args) -> dict:
  try:
    return fn(*args)
  except Exception as e:  # pylint: disable=broad-except  # record it and go on
    if is_oom(e):
      return {'point': {'status': 'out of memory'}}
    return {'point': {'status': f'error: {type(e).__name__}: {str(e).splitlines()[0][:300]}'}}


NOT_RUN = 'not run: budget spent'


def time_left(opts) -> float:
  """Seconds to --deadline_s (inf without one)."""
  if not opts.get('deadline_s'):
    return float('inf')
  return opts['deadline_s'] - (time.time() - opts['start'])


def measure_length_in_process(entries, length, opts) -> dict:
  """All entries at one length, compiled first, then timed round-robin (interleaved). Past the
  deadline (--deadline_s) no further entry is compiled, and timing stops after one round."""
  jobs = {}
  for e in entries:
    # the next compile would end past the deadline (estimate: the last one, of any length)
    if time_left(opts) < opts.get('last_prepare_s', 0.0):
      jobs[e] = {'point': {'status': NOT_RUN}}
      continue
    begin = time.time()
    jobs[e] = guarded(prepare, e, length, opts['batch'], opts['dtype'], opts['budget'],
                      opts.get('gpu_peak', False))
    opts['last_prepare_s'] = time.time() - begin
  spent = {e: 0.0 for e in entries}
  for repeat in range(opts['repeats']):
    if repeat and time_left(opts) <= 0:
      break
    for e, job in jobs.items():
      if 'run' in job and spent[e] < opts['point_budget_s']:
        try:
          spent[e] += time_once(job)
        except Exception as err:  # pylint: disable=broad-except
          job['point']['status'] = 'out of memory' if is_oom(err) else f'error: {err}'[:300]
          del job['run']
  return {e: finish(job) for e, job in jobs.items()}


def measure_point_alone(entry, length, opts) -> dict:
  job = guarded(prepare, entry, length, opts['batch'], opts['dtype'], opts['budget'],
                opts.get('gpu_peak', True))
  spent = 0.0
  for _ in range(opts['repeats']):
    if 'run' not in job or spent >= opts['point_budget_s']:
      break
    spent += time_once(job)
  return finish(job)


def measure_point_subprocess(entry, length, opts) -> dict:
  """A fresh process for one point, so its peak device memory is its own."""
  argv = [sys.executable, os.path.abspath(__file__), f'--point={entry}@{length}'] + [
      f'--{name}={FLAGS[name].value}' for name in
      ('batch', 'dtype', 'repeats', 'point_budget_s', 'memory_budget_gb', 'clock')]
  timeout = min(FLAGS.point_timeout_s, max(time_left(opts), 1))
  try:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {'status': f'error: no result in {timeout:.0f} s'}
  lines = [l for l in proc.stdout.splitlines() if l.startswith('{')]
  if proc.returncode == 0 and lines:
    return json.loads(lines[-1])
  tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['no output']
  status = 'out of memory' if is_oom(Exception(proc.stderr)) else f'error: {tail[0][:300]}'
  return {'status': status}


def extrapolated_oom(per_length: dict, length: int, budget: float) -> dict | None:
  known = [(int(n), p['compiled_temp_bytes']) for n, p in per_length.items()
           if p.get('compiled_temp_bytes') and int(n) < length]
  if not known:
    return None
  n0, temp = max(known)
  estimate = temp * (length / n0) ** 2
  if estimate <= budget:
    return None
  return {'status': 'out of memory', 'memory_bytes': None, 'step_ms': None, 'steps_per_s': None,
          'note': f'not compiled: {temp / 2**30:.2f} GB at {n0} x ({length}/{n0})^2 = '
                  f'{estimate / 2**30:.1f} GB > budget'}


def shorter_oom(per_length: dict, length: int) -> dict | None:
  shorter = [int(n) for n, p in per_length.items()
             if int(n) < length and p.get('status') == 'out of memory']
  if not shorter:
    return None
  return {'status': 'out of memory', 'memory_bytes': None, 'step_ms': None, 'steps_per_s': None,
          'note': f'not compiled: out of memory at {min(shorter)}'}


def add_ratios(results: dict) -> None:
  for per_length in results.values():
    for length, point in per_length.items():
      for ref_name, suffix in (('softmax/explicit', 'softmax'), ('none', 'lower_bound'),
                               ('identity', 'identity')):
        ref = results.get(ref_name, {}).get(length, {})
        for key, name in (('step_ms', 'time'), ('memory_bytes', 'memory')):
          ok = point.get(key) is not None and ref.get(key)
          point[f'{name}_ratio_to_{suffix}'] = point[key] / ref[key] if ok else None


def length_label(n: int) -> str:
  return f'{n // 1024}K' if n >= 1024 and n % 1024 == 0 else str(n)


def fmt_cell(point: dict) -> tuple[str, str]:
  if point.get('status') != 'ok':
    status = point.get('status') or ''
    text = status if status in ('out of memory', NOT_RUN) else 'error'
    memory = point.get('memory_bytes')
    return text, text if memory is None else f'{memory / 2**20:.0f}'
  time_text = f'{point["step_ms"]:.0f} ({point["steps_per_s"]:.2f}/s)' if point.get(
      'step_ms') else 'not timed'
  return time_text, f'{point["memory_bytes"] / 2**20:.0f}'


def rate_cell(p: dict) -> str:
  rate, frac = p.get('flops_per_s'), p.get('peak_fraction')
  if rate is None:
    return '-'
  return f'{rate / 1e12:.3g}' + (f' ({100 * frac:.2g} %)' if frac is not None else '') + (
      f' [{p["flops_from"]}]' if p.get('flops_from') not in (None, 'compiled step') else '')


def ratios_cell(p: dict) -> str:
  """time / memory vs softmax/explicit, time vs the no-mixing bound."""
  r = [p.get('time_ratio_to_softmax'), p.get('memory_ratio_to_softmax'),
       p.get('time_ratio_to_lower_bound')]
  return ' / '.join('-' if v is None else f'{v:.3g}' for v in r) if p else '-'


def write_markdown(report: dict, path: str) -> None:
  results, lengths = report['results'], report['setup']['all_lengths']
  s = report['setup']
  clock = 'CPU time of the process' if s.get('clock') == 'cpu' else 'wall clock'
  loads = {length_label(int(n)): p['load_average'] for per_length in results.values()
           for n, p in per_length.items() if p.get('load_average')}
  lines = [f'Training step of the LRA text model, batch {s["batch"]}, {s["dtype"]}, '
           f'{s["device"]} ({s["backend"]}, {s.get("cpus_allowed", s["cpu_count"])} of '
           f'{s["cpu_count"]} CPUs), step time by {clock}; '
           f'`{s["command"]}`', '',
           '1-minute load average before / after each length: ' + ', '.join(
               f'{n} {a:.1f} / {b:.1f}' for n, (a, b) in loads.items()), '']
  peak = s.get('peak_bf16_flops')
  ratio = lambda key: lambda p: '-' if p.get(key) is None else f'{p[key]:.2f}x'
  tables = [
      ('**step time, ms (steps/s)**', lambda p: fmt_cell(p)[0] if p else '-'),
      (f'**memory, MB ({s["memory_kind"]})**', lambda p: fmt_cell(p)[1] if p else '-'),
      ('**achieved TFLOP/s (XLA cost_analysis flops of the step, or 3 x the forward\'s where '
       f'larger, / step time; fraction of the {s["device"]}\'s dense bf16 peak, '
       f'{"unknown" if not peak else f"{peak / 1e12:.0f} TFLOP/s"})**', rate_cell),
      ('**step time / the no-mixing bound (`none`) at each length**',
       ratio('time_ratio_to_lower_bound'))]
  if 'identity' in results:
    tables.append(('**step time / the model without its mixer (`identity`) at each length**',
                   ratio('time_ratio_to_identity')))
  tables.append(('**ratios at each length: time / memory vs softmax/explicit; time vs the '
                 'no-mixing lower bound**', ratios_cell))
  for i, (title, cell) in enumerate(tables):
    lines += [''] * (i > 0) + [title, '', '| entry | ' + ' | '.join(
        length_label(n) for n in lengths) + ' |', '|---|' + '---|' * len(lengths)]
    for entry, per_length in results.items():
      cells = [cell(per_length.get(str(n), {})) for n in lengths]
      lines.append(f'| {entry} | ' + ' | '.join(cells) + ' |')
  with open(path, 'w') as f:
    f.write('\n'.join(lines) + '\n')


def plot(results: dict, lengths: list[int], path: str, title: str) -> None:
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
  panels = [('step_ms', 'training step (ms, median)', 1.0),
            ('memory_bytes', 'memory (MB)', 2.0 ** -20),
            ('time_ratio_to_softmax', 'step time / softmax explicit', 1.0)]
  for ax, (key, label, scale) in zip(axes, panels):
    for name, per_length in results.items():
      points = [(n, per_length[str(n)][key]) for n in lengths
                if per_length.get(str(n), {}).get(key) is not None]
      oom = [n for n in lengths if per_length.get(str(n), {}).get('status') == 'out of memory']
      if points:
        line, = ax.plot([n for n, _ in points], [v * scale for _, v in points],
                        'o-' if name != 'none' else 'k--', ms=3, label=name)
        if oom and key != 'time_ratio_to_softmax':
          ax.plot(oom, [points[-1][1] * scale] * len(oom), 'x', color=line.get_color(), ms=7)
    ax.set(xscale='log', yscale='log', xlabel='sequence length', title=label)
    ax.set_xticks(lengths, [length_label(n) for n in lengths])
    ax.set_xticks([], minor=True)
    ax.grid(True, which='both', alpha=0.3)
  axes[0].legend(loc='best', fontsize='x-small')
  fig.suptitle(title + '   (x: out of memory)', fontsize='small')
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def run_train(argv_command: str) -> None:
  if FLAGS.quick:
    FLAGS.lengths, FLAGS.long_lengths, FLAGS.batch, FLAGS.repeats = ['32'], ['64'], 2, 1
    FLAGS.mixers = FLAGS.mixers or ['softmax/explicit', 'none']
  isolate = FLAGS.isolate == 'yes' or (FLAGS.isolate == 'auto' and on_gpu())
  opts = dict(batch=FLAGS.batch, dtype=FLAGS.dtype, repeats=FLAGS.repeats,
              point_budget_s=FLAGS.point_budget_s, deadline_s=FLAGS.deadline_s, start=time.time(),
              budget=step_runner.memory_budget_bytes(FLAGS.memory_budget_gb),
              gpu_peak=on_gpu() and (bool(FLAGS.point) or isolate))
  if FLAGS.point:
    entry, length = FLAGS.point.rsplit('@', 1)
    print(json.dumps(measure_point_alone(entry, int(length), opts)), flush=True)
    return
  entries = FLAGS.mixers or default_entries(FLAGS.dtype)
  unknown = [e for e in entries if e.partition('/')[0] not in MIXERS]
  if unknown:
    raise ValueError(f'--mixers: {unknown} are not registered; choose from '
                     f'{sorted(MIXERS)} (softmax/<explicit|xla|cudnn|auto>)')
  lengths = [int(n) for n in FLAGS.lengths]
  long_lengths = [int(n) for n in FLAGS.long_lengths]
  results: dict = {e: {} for e in entries}
  if FLAGS.resume_from:   # lengths already measured (each length is one process's work)
    with open(FLAGS.resume_from) as f:
      for e, per_length in json.load(f)['results'].items():
        if e in results:
          results[e].update({n: p for n, p in per_length.items() if p.get('status') != NOT_RUN})
  start = time.time()
  for length in lengths + long_lengths:
    todo = [e for e in entries if (length in lengths or e in FLAGS.linear_memory)
            and str(length) not in results[e]]
    # A quadratic entry whose measured memory, scaled by (L / L0)^2, exceeds the budget is not
    # compiled (XLA would constant-fold [L, L] index tables for minutes): out of memory.
    # Nor is an entry out of memory at a shorter length (the doubling search of the queue's
    # `longest` job stops there).
    skipped = {e: shorter_oom(results[e], length) or (
        None if e in FLAGS.linear_memory else extrapolated_oom(results[e], length, opts['budget']))
        for e in todo}
    skipped = {e: p for e, p in skipped.items() if p}
    todo = [e for e in todo if e not in skipped]
    load_before = os.getloadavg()[0]
    if isolate:
      points = {e: measure_point_subprocess(e, length, opts) if time_left(opts) > 0 else
                {'status': NOT_RUN} for e in todo}
    else:
      points = measure_length_in_process(todo, length, opts)
    points.update(skipped)
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]   # 1-minute load, before / after
    for e, point in points.items():
      point.setdefault('load_average', load)
      results[e][str(length)] = point
      print(f'[{time.time() - start:6.0f}s] {e:18s} L={length:6d} {point["status"]:14s} '
            f'step_ms={point.get("step_ms")} mem={point.get("memory_bytes")}', flush=True)
    # Written after every length, so a run cut short still leaves its points.
    write_report(results, lengths, long_lengths, isolate, argv_command, opts['gpu_peak'])


def write_report(results, lengths, long_lengths, isolate, argv_command, gpu_peak) -> None:
  add_ratios(results)
  device_kind = jax.devices()[0].device_kind
  step_runner.add_flop_rates(results, device_kind)
  report = {'setup': dict(mode='train', batch=FLAGS.batch, dtype=FLAGS.dtype,
                          repeats=FLAGS.repeats, point_budget_s=FLAGS.point_budget_s,
                          memory_budget_gb=FLAGS.memory_budget_gb, lengths=lengths,
                          long_lengths=long_lengths,
                          all_lengths=sorted(set(lengths + long_lengths)),
                          isolated=isolate, clock=FLAGS.clock, backend=jax.default_backend(),
                          device=jax.devices()[0].device_kind, jax=jax.__version__,
                          cpu_count=os.cpu_count(), cpus_allowed=len(os.sched_getaffinity(0)),
                          xla_flags=os.environ.get('XLA_FLAGS', ''),
                          memory_kind=memory_kind(gpu_peak), command=argv_command,
                          peak_bf16_flops=peak_bf16_flops(device_kind),
                          deadline_s=FLAGS.deadline_s,
                          lower_bound='none = out(q * k + v) with the 4 Dense layers of '
                          'softmax attention, no token mixing'),
            'results': results}
  write_outputs(report, report['setup']['all_lengths'],
                f'LRA text training step, batch {FLAGS.batch}, {FLAGS.dtype}, '
                f'{report["setup"]["device"]}')


def write_outputs(report: dict, lengths: list[int], title: str) -> None:
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with open(os.path.join(FLAGS.output_dir, 'efficiency.json'), 'w') as f:
    json.dump(report, f, indent=2)
  if report['setup']['mode'] == 'train':
    write_markdown(report, os.path.join(FLAGS.output_dir, 'efficiency.md'))
    if FLAGS.plot:
      plot(report['results'], lengths, os.path.join(FLAGS.output_dir, 'efficiency.png'), title)
  print(f'wrote {FLAGS.output_dir}/efficiency.*', flush=True)


# ---- layer mode: one mixer, forward+backward (the earlier benchmark) -----------------------

def measure_layer(mixer, batch: int, length: int, dim: int, repeats: int,
                  max_temp_bytes: float) -> dict:
  """Compiled temp bytes of forward and forward+backward, and the median fwd+bwd time (ms)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (batch, length, dim), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  variables = jax.jit(mixer.init)(jax.random.PRNGKey(1), x, mask)
  forward = jax.jit(lambda v, xx: mixer.apply(v, xx, mask))
  fwd_bwd = jax.jit(jax.value_and_grad(
      lambda v, xx: jnp.sum(jnp.square(mixer.apply(v, xx, mask))), argnums=(0, 1)))
  compiled = fwd_bwd.lower(variables, x).compile()
  result = {
      'forward_temp_bytes': int(forward.lower(variables, x).compile().memory_analysis()
                                .temp_size_in_bytes),
      'fwd_bwd_temp_bytes': int(compiled.memory_analysis().temp_size_in_bytes),
      'fwd_bwd_gflops': float(compiled.cost_analysis().get('flops', float('nan'))) / 1e9,
      'fwd_bwd_ms': None,
  }
  if result['fwd_bwd_temp_bytes'] > max_temp_bytes:
    return result
  jax.block_until_ready(compiled(variables, x))  # warm-up
  run = lambda: compiled(variables, x)
  result['fwd_bwd_ms'] = 1e3 * step_runner.interleaved_medians({'x': run}, repeats)['x']
  return result


def run_layer() -> None:
  lengths = [int(n) for n in FLAGS.lengths]
  names = [n for n in (FLAGS.mixers or ['softmax', 'linear', 'ponet', 'adamra', 'contextpool',
                                        'msac']) if n in MIXERS]
  kwargs = {'ponet': {'segment_num': 64}}
  results: dict = {}
  for name in names:
    mixer = build_mixer(name, shared=dict(num_heads=FLAGS.num_heads, dropout_rate=0.0),
                        **kwargs.get(name, {}))
    results[name] = {}
    for length in lengths:
      try:
        point = measure_layer(mixer, FLAGS.batch, length, FLAGS.dim, FLAGS.repeats,
                              FLAGS.max_temp_gb * 2**30)
      except Exception as e:  # pylint: disable=broad-except  # record it and go on
        point = {'error': f'{type(e).__name__}: {e}'.splitlines()[0]}
      results[name][str(length)] = point
      print(f'{name:12s} L={length:6d} {point}', flush=True)
  report = {'setup': dict(mode='layer', batch=FLAGS.batch, dim=FLAGS.dim,
                          num_heads=FLAGS.num_heads, lengths=lengths,
                          backend=jax.default_backend(), jax=jax.__version__),
            'results': results}
  write_outputs(report, lengths, '')


def run_topology(argv_command: str) -> None:
  """Every entry x length compiled for --topology: per-chip memory, cost and roofline time."""
  from poolformers_jax.trainer import accelerators  # pylint: disable=g-import-not-at-top
  chip = accelerators.chip_of(FLAGS.topology)
  if FLAGS.quick:   # the test suite's smoke test: two tiny compiles
    FLAGS.lengths, FLAGS.batch = ['32'], 2
    FLAGS.mixers = FLAGS.mixers or ['softmax/xla', 'none']
  baselines = ['none', 'identity']
  mixers = [m for m in MIXERS if m not in ('softmax', *baselines)]
  entries = FLAGS.mixers or ['softmax/xla', *mixers, *baselines]
  results: dict = {e: {} for e in entries}
  chips = accelerators.topology_mesh(FLAGS.topology).devices.size
  path = os.path.join(FLAGS.output_dir, 'efficiency_tpu.json')
  if os.path.exists(path):   # resume: points compiled before (each is a compile of minutes)
    with open(path) as f:
      saved = json.load(f)
    ours = dict(topology=FLAGS.topology, batch_per_chip=FLAGS.batch, dtype=FLAGS.dtype)
    theirs = {k: saved['setup'].get(k) for k in ours}
    if theirs != ours:
      raise ValueError(f'{path} holds a sweep of another setup ({theirs}); give another '
                       '--output_dir')
    for entry, per_length in saved['results'].items():
      results.setdefault(entry, {}).update(
          {n: p for n, p in per_length.items() if p.get('status') == 'ok'})
  sweep = dict(mode='topology', topology=FLAGS.topology, batch_per_chip=FLAGS.batch,
               dtype=FLAGS.dtype, lengths=[int(n) for n in FLAGS.lengths], command=argv_command,
               chip=chip.device_kind)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for length in [int(n) for n in FLAGS.lengths]:
    for entry in entries:
      if str(length) in results[entry]:
        continue
      # --batch is per chip here: the global batch is batch x chips.
      config = lra_text_config(entry, length, FLAGS.batch * chips, FLAGS.dtype)
      try:
        setup, train, _ = accelerators.compile_for_topology(config, FLAGS.topology)
        report = accelerators.program_report(train, chip, setup.mesh.devices.size)
        point = {'status': 'ok', 'memory_bytes': report['memory']['total'],
                 'fits': report['fits'], 'flops': report['flops'],
                 'bytes_accessed': report['bytes_accessed'],
                 'step_ms': report['roofline']['seconds'] * 1e3,
                 'bound': report['roofline']['bound'], 'xla_ms': report['xla_seconds'] * 1e3}
      except Exception as error:  # pylint: disable=broad-except  # record it and go on
        point = {'status': f'error: {type(error).__name__}: {str(error).splitlines()[0][:200]}'}
      results[entry][str(length)] = point
      _write_json(path, {'setup': sweep, 'results': results})   # a crash loses one point
      print(f'{entry:18s} L={length:6d} {point["status"]} {point.get("step_ms")} ms '
            f'{point.get("memory_bytes")} B', flush=True)
  for per_length in results.values():   # ratios to softmax/xla and to the no-mixing bound
    for length, point in per_length.items():
      for ref_name, suffix in (('softmax/xla', 'softmax'), ('none', 'lower_bound')):
        ref = results.get(ref_name, {}).get(length, {})
        for key, name in (('step_ms', 'time'), ('memory_bytes', 'memory')):
          if point.get(key) and ref.get(key):
            point[f'{name}_vs_{suffix}'] = point[key] / ref[key]
  _write_json(path, {'setup': sweep, 'results': results})
  lengths = sweep['lengths']
  lines = [f'Roofline step ms per chip ({FLAGS.topology}, {FLAGS.batch} per chip, {FLAGS.dtype}); '
           '(x softmax/xla, x bound); MiB per chip', '',
           '| entry | ' + ' | '.join(f'L={n}' for n in lengths) + ' |',
           '|---' * (len(lengths) + 1) + '|']
  for entry, per_length in results.items():
    cells = []
    for n in lengths:
      p = per_length.get(str(n), {})
      cells.append(p['status'] if p.get('status') != 'ok' else
                   f"{p['step_ms']:.2f} ({p.get('time_vs_softmax', float('nan')):.2f}x, "
                   f"{p.get('time_vs_lower_bound', float('nan')):.2f}x); "
                   f"{p['memory_bytes'] / 2**20:.0f}")
    lines.append(f'| {entry} | ' + ' | '.join(cells) + ' |')
  with open(os.path.join(FLAGS.output_dir, 'efficiency_tpu.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print(f'wrote {FLAGS.output_dir}/efficiency_tpu.*', flush=True)


def _write_json(path: str, value: Any) -> None:
  """Written whole or not at all (a temporary file renamed over the old one)."""
  with open(path + '.tmp', 'w') as f:
    json.dump(value, f, indent=2)
  os.replace(path + '.tmp', path)


@errors.one_line_errors
def main(argv):
  del argv
  # The program's own names, registered where it runs (each --point process too): importing this
  # module (official_torch.py, the tests) leaves the library's registry as it is.
  register_mixer('none', NoMixing)
  register_mixer('identity', Identity)
  host_memory.keep_freed_memory()   # the allocator train.py runs with (every point process too)
  if not (FLAGS.output_dir or FLAGS.point):
    raise ValueError('--output_dir is required: the folder the results are written to')
  if FLAGS.topology:
    run_topology(' '.join(['benchmarks/efficiency.py'] + sys.argv[1:]))
  elif FLAGS.mode == 'layer':
    run_layer()
  else:
    run_train(' '.join(['benchmarks/efficiency.py'] + sys.argv[1:]))


if __name__ == '__main__':
  step_runner.run_absl(main)
