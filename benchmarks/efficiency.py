r"""Efficiency of the token mixers vs sequence length: forward+backward time and compiled memory.

One LRA-sized mixer layer (dim 64, 2 heads; PAPER_NOTES.md) per registered mixer, for each length:
- time: median wall time of one jitted forward+backward (value_and_grad w.r.t. params and input)
  over `--repeats` runs after a warm-up, and its ratio to softmax attention measured in the same
  process (ratios are what transfers between machines; AdaMRA's Table 2 quotes them too);
- memory: XLA's compiled temp bytes (`memory_analysis()`) of the forward and of the
  forward+backward: deterministic, no allocator noise. `--xla_cpu_experimental_ynn_fusion_type=-reduce`
  is added to XLA_FLAGS before jax is imported, otherwise XLA:CPU does not count the scratch of
  its fused forward softmax attention (STACK_NOTES.md).
Timing is skipped (recorded as null) when the forward+backward would need more than
`--max_temp_gb` of scratch, so softmax attention at long lengths cannot exhaust the machine.

Writes efficiency.json and efficiency.png to --output_dir:

  .venv/bin/python benchmarks/efficiency.py --output_dir /tmp/efficiency \
      --lengths 1024,2048,4096,8192 --batch 4 --repeats 5
"""
import os

os.environ['XLA_FLAGS'] = ' '.join(
    [os.environ.get('XLA_FLAGS', ''), '--xla_cpu_experimental_ynn_fusion_type=-reduce']).strip()
os.environ.setdefault('MPLBACKEND', 'Agg')

import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from poolformers_jax.layers import MIXERS, build_mixer  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', None, 'Where efficiency.json and efficiency.png are written.')
flags.DEFINE_list('mixers', ['softmax', 'linear', 'ponet', 'adamra', 'contextpool', 'msac'],
                  'Mixer names; names not in the registry are skipped with a note.')
flags.DEFINE_list('lengths', ['1024', '2048', '4096', '8192'], 'Sequence lengths.')
flags.DEFINE_integer('batch', 4, 'Batch size.')
flags.DEFINE_integer('dim', 64, 'Model width (LRA: 64).')
flags.DEFINE_integer('num_heads', 2, 'Heads (LRA: 2 of 32).')
flags.DEFINE_integer('repeats', 5, 'Timed runs per point (median reported).')
flags.DEFINE_float('max_temp_gb', 4.0, 'Skip timing above this much compiled scratch memory.')
flags.DEFINE_string('mixer_kwargs', '{"ponet": {"segment_num": 64}}',
                    'JSON: per-mixer options passed to build_mixer.')
flags.mark_flag_as_required('output_dir')


def measure(mixer, batch: int, length: int, dim: int, repeats: int, max_temp_bytes: float) -> dict:
  """Compiled temp bytes of forward and forward+backward, and the median fwd+bwd time (ms)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (batch, length, dim), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  variables = jax.jit(mixer.init)(jax.random.PRNGKey(1), x, mask)
  forward = jax.jit(lambda v, xx: mixer.apply(v, xx, mask))
  fwd_bwd = jax.jit(jax.value_and_grad(
      lambda v, xx: jnp.sum(jnp.square(mixer.apply(v, xx, mask))), argnums=(0, 1)))
  fwd_compiled = forward.lower(variables, x).compile()
  compiled = fwd_bwd.lower(variables, x).compile()
  result = {
      'forward_temp_bytes': int(fwd_compiled.memory_analysis().temp_size_in_bytes),
      'fwd_bwd_temp_bytes': int(compiled.memory_analysis().temp_size_in_bytes),
      'fwd_bwd_gflops': float(compiled.cost_analysis().get('flops', float('nan'))) / 1e9,
      'fwd_bwd_ms': None,
  }
  if result['fwd_bwd_temp_bytes'] > max_temp_bytes:
    return result
  jax.block_until_ready(compiled(variables, x))  # warm-up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(variables, x))
    times.append((time.perf_counter() - start) * 1e3)
  result['fwd_bwd_ms'] = statistics.median(times)
  return result


def plot(results: dict, lengths: list[int], path: str) -> None:
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  panels = [('fwd_bwd_ms', 'forward+backward time (ms, median)'),
            ('fwd_bwd_temp_bytes', 'compiled temp memory, fwd+bwd (MB)'),
            ('forward_temp_bytes', 'compiled temp memory, forward (MB)')]
  for ax, (key, title) in zip(axes, panels):
    for name, per_length in results.items():
      points = [(n, per_length[str(n)][key]) for n in lengths
                if str(n) in per_length and per_length[str(n)].get(key) is not None]
      if points:
        scale = 1.0 if key == 'fwd_bwd_ms' else 2.0 ** -20
        ax.plot([n for n, _ in points], [v * scale for _, v in points], 'o-', label=name)
    ax.set(xscale='log', yscale='log', xlabel='sequence length', title=title)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xticks([], minor=True)  # no log-axis minor labels over ours
    ax.grid(True, which='both', alpha=0.3)
  axes[0].legend(loc='best', fontsize='small')
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main(argv):
  del argv
  lengths = [int(n) for n in FLAGS.lengths]
  kwargs = json.loads(FLAGS.mixer_kwargs)
  names = [n for n in FLAGS.mixers if n in MIXERS]
  skipped = {n: 'not registered' for n in FLAGS.mixers if n not in MIXERS}
  results: dict = {}
  for name in names:
    mixer = build_mixer(name, shared=dict(num_heads=FLAGS.num_heads, dropout_rate=0.0),
                        **kwargs.get(name, {}))
    results[name] = {}
    for length in lengths:
      try:
        point = measure(mixer, FLAGS.batch, length, FLAGS.dim, FLAGS.repeats,
                        FLAGS.max_temp_gb * 2**30)
      except Exception as e:  # pylint: disable=broad-except  # record it and go on
        point = {'error': f'{type(e).__name__}: {e}'.splitlines()[0]}
      results[name][str(length)] = point
      print(f'{name:12s} L={length:6d} {point}', flush=True)

  baseline = results.get('softmax', {})
  for per_length in results.values():
    for length, point in per_length.items():
      ref = baseline.get(length, {})
      for key, ratio_key in (('fwd_bwd_ms', 'time_ratio_to_softmax'),
                             ('fwd_bwd_temp_bytes', 'memory_ratio_to_softmax')):
        ok = point.get(key) is not None and ref.get(key)
        point[ratio_key] = point[key] / ref[key] if ok else None

  os.makedirs(FLAGS.output_dir, exist_ok=True)
  report = {
      'setup': dict(batch=FLAGS.batch, dim=FLAGS.dim, num_heads=FLAGS.num_heads,
                    repeats=FLAGS.repeats, lengths=lengths, mixer_kwargs=kwargs,
                    backend=jax.default_backend(), device=str(jax.devices()[0]),
                    xla_flags=os.environ['XLA_FLAGS'], jax=jax.__version__),
      'skipped': skipped,
      'results': results,
  }
  with open(os.path.join(FLAGS.output_dir, 'efficiency.json'), 'w') as f:
    json.dump(report, f, indent=2)
  plot(results, lengths, os.path.join(FLAGS.output_dir, 'efficiency.png'))
  print(f'wrote {FLAGS.output_dir}/efficiency.json and efficiency.png')


if __name__ == '__main__':
  app.run(main)
