"""benchmarks/check_cudnn.py's comparison, run on a CPU for explicit vs xla attention.

On a GPU the same comparison decides whether cuDNN flash attention may be used; here it must pass
for two implementations already proven equal in float32 (tests/layers), so that a failure on a
GPU means the kernel, not the measure. The key bias, whose exact gradient is zero, once made
that measure fail by dividing rounding by rounding.
"""
import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'benchmarks',
                     'check_cudnn.py')


def _check_cudnn():
  spec = importlib.util.spec_from_file_location('check_cudnn', _PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize('causal', [False, True])
def test_explicit_and_xla_attention_agree_within_the_bf16_tolerance(causal):
  check = _check_cudnn()
  diffs = check.compare('xla', 'explicit', causal, length=256)
  assert set(diffs) >= {'output', "[0]['params']['key']['bias']", "[1]"}
  assert max(diffs.values()) <= check.TOL, diffs
  # The key bias's gradient is zero in exact arithmetic: tiny against the tree's largest.
  assert diffs["[0]['params']['key']['bias']"] < 1e-2
