"""benchmarks/check_cudnn.py's comparison, run on a CPU for explicit vs xla attention.

On a GPU the same comparison decides whether cuDNN flash attention may be used; here it must pass
for two implementations already proven equal in float32 (tests/layers), so that a failure on a
GPU means the kernel, not the measure. The key bias, whose exact gradient is zero, once made
that measure fail by dividing rounding by rounding.
"""
import pytest
from sized_models import load_benchmark


@pytest.mark.parametrize('causal', [False, True])
def test_explicit_and_xla_attention_agree_within_the_bf16_tolerance(causal):
  check = load_benchmark('check_cudnn')
  diffs = check.compare('xla', 'explicit', causal, length=256)
  assert set(diffs) >= {'output', "[0]['params']['key']['bias']", "[1]"}
  assert max(diffs.values()) <= check.TOL, diffs
  # The key bias's gradient is zero in exact arithmetic: tiny against the tree's largest.
  assert diffs["[0]['params']['key']['bias']"] < 1e-2
