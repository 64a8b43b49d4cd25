"""Compiled memory vs length: PoNet and AdaMRA are linear, softmax attention is quadratic.

Temp bytes come from XLA's `memory_analysis()` of the compiled forward and backward
(value_and_grad) of one mixer (batch 1, dim 64, 2 heads) at lengths 1K, 2K, 4K: deterministic,
no timing. On XLA:CPU the forward softmax attention is one custom fusion whose scratch is not
counted (temp ~0 from 2K on) unless `--xla_cpu_experimental_ynn_fusion_type=-reduce` is set
before the backend starts (docs/efficiency.md). XLA reads XLA_FLAGS once per process, and under
pytest the backend has usually started already, so the measurement runs in a fresh Python
process with that flag: forward numbers are then real, and backward numbers are the same either way.
"""
import json
import os
import subprocess
import sys

import pytest

LENGTHS = (1024, 2048, 4096)

_MEASURE = r'''
import json, sys
import jax, jax.numpy as jnp
from poolformers_jax.layers import AdaMRA, MultiHeadAttention, PoNet

compiled_temp = lambda fn, *args: int(
    jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes)

mixers = {'softmax': MultiHeadAttention(num_heads=2), 'adamra': AdaMRA(num_heads=2),
          'ponet': PoNet(num_heads=2, segment_num=64)}
result = {}
for name, mixer in mixers.items():
  # Abstract parameters: only shapes matter for compiling, and eager init is slow.
  variables = jax.eval_shape(mixer.init, jax.random.PRNGKey(0), jnp.zeros((1, 64, 64)))
  forward = lambda v, x: mixer.apply(v, x)
  backward = jax.value_and_grad(lambda v, x: jnp.sum(mixer.apply(v, x)), argnums=(0, 1))
  for length in json.loads(sys.argv[1]):
    x = jax.ShapeDtypeStruct((1, length, 64), jnp.float32)
    result[f'{name}/forward/{length}'] = compiled_temp(forward, variables, x)
    result[f'{name}/backward/{length}'] = compiled_temp(backward, variables, x)
print(json.dumps(result))
'''


@pytest.fixture(scope='module')
def temp_bytes():
  env = dict(os.environ, XLA_FLAGS='--xla_cpu_experimental_ynn_fusion_type=-reduce',
             JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, '-c', _MEASURE, json.dumps(LENGTHS)], env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _growth(temp_bytes, name, pass_):
  sizes = [temp_bytes[f'{name}/{pass_}/{n}'] for n in LENGTHS]
  assert all(s > 0 for s in sizes), f'{name} {pass_}: temp bytes {sizes} (not measured)'
  return [b / a for a, b in zip(sizes, sizes[1:])], sizes


@pytest.mark.parametrize('pass_', ['forward', 'backward'])
@pytest.mark.parametrize('name', ['adamra', 'ponet'])
def test_pooling_mixers_grow_linearly(temp_bytes, name, pass_):
  """Doubling the length at most doubles (2.2x) the bytes between the two longest lengths; at
  1K, where XLA:CPU fuses PoNet's forward into fewer buffers than at 2K, the first doubling may
  cost up to 3x (still far from softmax's 4x)."""
  growth, sizes = _growth(temp_bytes, name, pass_)
  assert growth[-1] <= 2.2 and max(growth) <= 3.0, (
      f'{name} {pass_}: temp bytes {sizes} at {LENGTHS}, growth {growth}')


@pytest.mark.parametrize('pass_', ['forward', 'backward'])
def test_softmax_attention_grows_quadratically(temp_bytes, pass_):
  growth, sizes = _growth(temp_bytes, 'softmax', pass_)
  assert min(growth) >= 3.5, f'softmax {pass_}: temp bytes {sizes} at {LENGTHS}, growth {growth}'
