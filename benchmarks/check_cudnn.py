r"""On an NVIDIA GPU: softmax attention 'cudnn' (flash) equals 'xla' in bf16, values and grads.

Right-padded masks (cuDNN gets them as lengths) and causal, as the CPU tests check explicit ==
xla. Prints each gradient leaf's difference and exits 1 if one exceeds the bf16 tolerance. Then
the kernel alone, for a diagnosis: its gradients at real positions, and what it leaves at padded
ones. Run by benchmarks/gpu_run.sh; on a CPU it prints the error of
implementation='cudnn' (tests/test_check_cudnn.py runs the same comparison for explicit vs xla).

The key projection's bias has a gradient of exactly zero: adding one vector to every key adds
q_i . c to every score of row i, which the softmax ignores. What the backward passes compute
there is rounding (~1e-3 of the other leaves), so that leaf is measured against the largest
gradient of the tree, not its own largest entry: relative to itself two roundings differ by
~100 %.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from poolformers_jax.layers import MultiHeadAttention  # noqa: E402

TOL = 3e-2   # bf16 has 8 mantissa bits; both paths accumulate in float32
ZERO_GRADIENT_LEAVES = ("['params']['key']['bias']",)   # softmax shift invariance (docstring)


def raw_kernel_report(rng, causal: bool) -> str:
  """The kernel alone (no layer): cuDNN with lengths vs XLA with a key mask, gradients of a
  masked loss w.r.t. q, k, v at real and at padded positions (where XLA's are exactly zero)."""
  b, length, heads, dh = 4, 1024, 2, 64
  q, k, v = (jnp.asarray(rng.standard_normal((b, length, heads, dh)), jnp.bfloat16)
             for _ in range(3))
  lengths = jnp.asarray([1024, 700, 513, 64], jnp.int32)
  mask = jnp.arange(length)[None] < lengths[:, None]                      # [B, L]

  def loss(impl, qkv):
    if impl == 'cudnn':
      out = jax.nn.dot_product_attention(*qkv, is_causal=causal, query_seq_lengths=lengths,
                                         key_value_seq_lengths=lengths, implementation='cudnn')
    else:
      out = jax.nn.dot_product_attention(*qkv, mask=mask[:, None, None, :], is_causal=causal,
                                         implementation='xla')
    return jnp.sum(jnp.where(mask[:, :, None, None], out, 0).astype(jnp.float32) ** 2)

  grads = {impl: jax.jit(jax.grad(lambda t, i=impl: loss(i, t)))((q, k, v))
           for impl in ('xla', 'cudnn')}
  m = np.asarray(mask)
  parts = []
  for name, a, c in zip('qkv', grads['xla'], grads['cudnn']):
    a, c = np.asarray(a, np.float32), np.asarray(c, np.float32)
    scale = float(np.max(np.abs(a[m]))) + 1e-6
    parts.append(f'd{name}: real {float(np.max(np.abs(a[m] - c[m]))) / scale:.2e}, '
                 f'padded {float(np.max(np.abs(c[~m]))) / scale:.2e}')
  return f'raw kernel causal={causal} (relative to the real max): ' + '; '.join(parts)


def compare(reference: str, other: str, causal: bool, length: int = 1024) -> dict[str, float]:
  """Relative differences of the layer's bf16 output and gradients (params and input), `other`
  against `reference`: 'output' and one entry per gradient leaf (its keystr)."""
  rng = np.random.default_rng(0)
  b, dim, heads = 4, 128, 2       # head dim 64
  lengths = np.array([length, length * 700 // 1024, length // 2 + 1, length // 16])
  x = jnp.asarray(rng.standard_normal((b, length, dim)), jnp.bfloat16)
  mask = jnp.asarray(np.arange(length)[None] < lengths[:, None])
  modules = {impl: MultiHeadAttention(heads, causal=causal, dtype=jnp.bfloat16,
                                      implementation=impl) for impl in (reference, other)}
  params = modules[reference].init(jax.random.PRNGKey(0), x, mask)
  outs = {}
  for impl, module in modules.items():
    loss = lambda p, xx, m=module: jnp.sum(
        jnp.where(mask[..., None], m.apply(p, xx, mask), 0).astype(jnp.float32) ** 2)
    outs[impl] = (jax.jit(module.apply)(params, x, mask),
                  jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x))
  f32 = lambda t: np.asarray(t, np.float32)
  m = np.asarray(mask)
  y_ref, y_other = f32(outs[reference][0])[m], f32(outs[other][0])[m]
  result = {'output': float(np.max(np.abs(y_ref - y_other)) / (np.max(np.abs(y_ref)) + 1e-6))}
  ref_leaves = jax.tree_util.tree_leaves_with_path(outs[reference][1])
  other_leaves = jax.tree.leaves(outs[other][1])
  largest = max(float(np.max(np.abs(f32(a)))) for _, a in ref_leaves)
  for (path, a), c in zip(ref_leaves, other_leaves):
    name = jax.tree_util.keystr(path)
    zero_in_exact = any(name.endswith(z) for z in ZERO_GRADIENT_LEAVES)
    scale = largest if zero_in_exact else float(np.max(np.abs(f32(a)))) + 1e-6
    result[name] = float(np.max(np.abs(f32(a) - f32(c)))) / scale
  return result


def main() -> int:
  worst = 0.0
  for causal in (False, True):
    try:
      diffs = compare('xla', 'cudnn', causal)
    except ValueError as e:
      print(f'cudnn not available: {e}')
      return 0 if jax.default_backend() != 'gpu' else 1
    print(f'causal={causal}: ' + '; '.join(f'{k} {v:.2e}' for k, v in diffs.items()))
    print(raw_kernel_report(np.random.default_rng(0), causal))   # a diagnosis only
    worst = max(worst, *diffs.values())
  print(f'{"OK" if worst <= TOL else "FAIL"}: worst relative difference {worst:.2e} (tol {TOL})')
  return 0 if worst <= TOL else 1


if __name__ == '__main__':
  from poolformers_jax import runtime  # before the first compile
  runtime.configure_program()
  sys.exit(main())
