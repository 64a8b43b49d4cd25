"""benchmarks/causal_linear.py at a tiny size: the prefix-sum baseline it traces in place of the
library's causal linear attention is another program with the same loss as the chunked form."""
from sized_models import load_benchmark


def test_the_baseline_is_another_program_of_the_same_function():
  bench = load_benchmark('causal_linear')
  report = bench.main(['--lengths', '24', '--repeats', '1', '--width', '32', '--heads', '2',
                       '--ffn', '64', '--entries', 'linear/prefix_sums,linear/5,softmax/xla'])
  points = report['results']['24']
  baseline, chunked = points['linear/prefix_sums'], points['linear/5']
  assert all(p['status'] == 'ok' and len(p['wall_times_ms']) == 1 for p in points.values())
  assert abs(chunked['first_loss'] - baseline['first_loss']) <= 1e-5 * abs(baseline['first_loss'])
  assert chunked['flops'] != baseline['flops']   # the baseline was traced, not the library's
  assert baseline['temp_bytes_ratio_to_prefix_sums'] == 1.0
  assert points['softmax/xla']['wall_ms_ratio_to_softmax'] == 1.0
  # the library's function is back after tracing the baseline
  from poolformers_jax.layers import attention
  assert attention.linear_attention is not bench.prefix_sum_attention
