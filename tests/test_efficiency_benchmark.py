"""benchmarks/efficiency.py --quick: every field of every point is written (no timed assertions)."""
import json
import os
import subprocess
import sys

import pytest
from sized_models import load_benchmark

from poolformers_jax.layers import MIXERS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ('status', 'step_ms', 'steps_per_s', 'timed_steps', 'forward_gflops',
          'compiled_temp_bytes', 'argument_bytes', 'memory_bytes', 'memory_kind',
          'time_ratio_to_softmax', 'memory_ratio_to_softmax', 'time_ratio_to_lower_bound',
          'memory_ratio_to_lower_bound', 'load_average')


@pytest.mark.slow
def test_quick_training_step_benchmark_writes_every_field(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu', XLA_FLAGS='')
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'efficiency.py'),
                         '--quick', f'--output_dir={tmp_path}'], env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads((tmp_path / 'efficiency.json').read_text())
  results = report['results']
  assert list(results) == ['softmax/explicit', 'none']
  # 32 for every entry; 64 (the long length) only for the linear-memory ones.
  assert {e: sorted(r) for e, r in results.items()} == {
      'softmax/explicit': ['32'], 'none': ['32', '64']}
  for entry, per_length in results.items():
    for length, point in per_length.items():
      assert set(FIELDS) <= set(point), (entry, length, sorted(set(FIELDS) - set(point)))
      assert point['status'] == 'ok' and point['timed_steps'] == 1
      assert point['memory_bytes'] == point['compiled_temp_bytes'] > 0   # CPU: compiled temp
      assert point['forward_gflops'] > 0
      assert abs(point['steps_per_s'] * point['step_ms'] - 1000) < 1e-6
  assert results['softmax/explicit']['32']['time_ratio_to_softmax'] == 1.0
  assert results['none']['64']['time_ratio_to_lower_bound'] == 1.0
  assert results['none']['64']['time_ratio_to_softmax'] is None        # softmax not run at 64
  assert results['none']['32']['time_ratio_to_lower_bound'] == 1.0
  # The lower bound keeps attention's projections and skips the [L, L] part: fewer FLOPs.
  assert results['none']['32']['forward_gflops'] < results['softmax/explicit']['32'][
      'forward_gflops']
  table = (tmp_path / 'efficiency.md').read_text()
  assert '| none |' in table and '| softmax/explicit |' in table and 'compiled temp' in table
  assert 'step time / the no-mixing bound' in table and '| none | 1.00x | 1.00x |' in table
  assert report['setup']['clock'] == 'wall' and 'load average' in table
  assert (tmp_path / 'efficiency.png').stat().st_size > 10_000


def test_topology_mode_compiles_each_point_for_a_tpu_slice(tmp_path):
  """--topology: each entry's training step compiled for a v5e 2x2 slice (libtpu, nothing runs);
  per-chip cost, the roofline time and the ratios to softmax and to the no-mixing bound."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu', XLA_FLAGS='')
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'efficiency.py'),
                         '--quick', '--topology=v5e:2x2', f'--output_dir={tmp_path}'], env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads((tmp_path / 'efficiency_tpu.json').read_text())
  assert report['setup']['chip'] == 'TPU v5 lite' and report['setup']['lengths'] == [32]
  softmax, bound = report['results']['softmax/xla']['32'], report['results']['none']['32']
  for point in (softmax, bound):
    assert point['status'] == 'ok' and point['fits'] and point['memory_bytes'] > 0
    assert point['step_ms'] > 0 and point['bound'] in ('flops', 'memory', 'ici')
  assert softmax['time_vs_softmax'] == 1.0 and bound['time_vs_lower_bound'] == 1.0
  assert bound['time_vs_softmax'] == bound['step_ms'] / softmax['step_ms']
  # The bound keeps softmax attention's projections and drops the [L, L] part: fewer flops.
  assert bound['flops'] < softmax['flops']
  table = (tmp_path / 'efficiency_tpu.md').read_text()
  assert '| softmax/xla | ' in table and '| none | ' in table and '(1.00x, ' in table
  # Run again into the same folder: every point is taken from the JSON, none compiled again.
  again = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'efficiency.py'),
                          '--quick', '--topology=v5e:2x2', f'--output_dir={tmp_path}'], env=env,
                         capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and ' L=' not in again.stdout, again.stdout + again.stderr[-2000:]
  resumed = json.loads((tmp_path / 'efficiency_tpu.json').read_text())['results']
  assert resumed['none']['32']['step_ms'] == bound['step_ms']


def test_importing_the_benchmark_leaves_the_library_registry_alone():
  """official_torch.py imports efficiency.py for its step builder: 'none' and 'identity' are the
  program's own, registered where it runs, not in the importing process."""
  before = sorted(MIXERS)
  efficiency = load_benchmark('official_torch').efficiency_module()
  assert efficiency.NoMixing and sorted(MIXERS) == before
  assert not {'none', 'identity'} & set(MIXERS)


def test_flop_rates_take_xla_count_for_cudnn_and_the_peak_by_device_kind():
  """FLOP/s = XLA's flops of the step (or 3 x the forward's, where XLA:GPU's compiled count
  misses the cuBLAS calls) / step time; XLA counts nothing inside cuDNN's custom call, so
  softmax/cudnn takes softmax/xla's count at the same length where there is one."""
  rates = load_benchmark('step_runner')   # efficiency.py's FLOP/s part, without its flags
  assert rates.peak_bf16_flops('NVIDIA H200') == 989e12
  assert rates.peak_bf16_flops('NVIDIA H100 80GB HBM3') == 989e12
  assert rates.peak_bf16_flops('NVIDIA H100 PCIe') == 756e12
  assert rates.peak_bf16_flops('cpu') is None
  results = {'softmax/xla': {'1024': {'step_flops': 4e12, 'forward_gflops': 1e3, 'step_ms': 10.0}},
             'softmax/cudnn': {'1024': {'step_flops': 1e12, 'forward_gflops': 1e2, 'step_ms': 5.0},
                               '2048': {'step_flops': 2e12, 'step_ms': 8.0}},
             'linear': {'1024': {'step_flops': 1e9, 'forward_gflops': 1e3, 'step_ms': 2.0}},
             'none': {'1024': {'status': 'not run: budget spent'}}}
  rates.add_flop_rates(results, 'NVIDIA H200')
  cudnn = results['softmax/cudnn']['1024']
  assert cudnn['flops_from'] == 'softmax/xla' and cudnn['flops_per_s'] == 4e12 / 5e-3
  assert cudnn['peak_fraction'] == pytest.approx(8e14 / 989e12)
  assert results['softmax/cudnn']['2048']['flops_from'] == 'compiled step'   # no xla point
  assert results['softmax/cudnn']['2048']['flops_used'] == 2e12
  # a compiled count below 3 x the forward's (GPU: gemms as custom calls): the forward's
  assert results['linear']['1024']['flops_from'] == '3 x forward'
  assert results['linear']['1024']['flops_per_s'] == pytest.approx(3e12 / 2e-3)
  assert results['softmax/xla']['1024']['peak_fraction'] == pytest.approx(4e14 / 989e12)
  assert results['none']['1024']['flops_per_s'] is None
  assert results['none']['1024']['flops_from'] is None
  rates.add_flop_rates(results, 'some new card')
  assert results['linear']['1024']['peak_fraction'] is None
