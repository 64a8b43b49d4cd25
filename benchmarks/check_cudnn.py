r"""On an NVIDIA GPU: softmax attention 'cudnn' (flash) equals 'xla' in bf16, values and grads.

Right-padded masks (cuDNN gets them as lengths) and causal, as the CPU tests check explicit ==
xla. Prints the largest differences and exits 1 if one exceeds the bf16 tolerance. Then the
kernel alone, for a diagnosis: its gradients at real positions, and what it leaves at padded ones
(the H200 run of 2026-11-26, before the layer zeroed q, k, v there, had gradients 2.0-2.3x off).
Run by benchmarks/gpu_run.sh; on a CPU it prints the one-line error of implementation='cudnn'.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from poolformers_jax.layers import MultiHeadAttention  # noqa: E402

TOL = 3e-2   # bf16 has 8 mantissa bits; both paths accumulate in float32


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


def main() -> int:
  rng = np.random.default_rng(0)
  b, length, dim, heads = 4, 1024, 128, 2       # head dim 64
  x = jnp.asarray(rng.standard_normal((b, length, dim)), jnp.bfloat16)
  mask = jnp.asarray(np.arange(length)[None] < np.array([1024, 700, 513, 64])[:, None])
  worst = 0.0
  for causal in (False, True):
    modules = {impl: MultiHeadAttention(heads, causal=causal, dtype=jnp.bfloat16,
                                        implementation=impl) for impl in ('xla', 'cudnn')}
    try:
      params = modules['xla'].init(jax.random.PRNGKey(0), x, mask)
      outs = {}
      for impl, module in modules.items():
        loss = lambda p, xx, m=module: jnp.sum(
            jnp.where(mask[..., None], m.apply(p, xx, mask), 0).astype(jnp.float32) ** 2)
        y = jax.jit(module.apply)(params, x, mask)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
        outs[impl] = (y, grads)
    except ValueError as e:
      print(f'cudnn not available: {e}')
      return 0 if jax.default_backend() != 'gpu' else 1
    m = np.asarray(mask)
    diff = lambda a, c: float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(c, np.float32))))
    scale = lambda a: float(np.max(np.abs(np.asarray(a, np.float32)))) + 1e-6
    y_diff = diff(np.asarray(outs['xla'][0], np.float32)[m], np.asarray(outs['cudnn'][0],
                                                                           np.float32)[m])
    y_rel = y_diff / scale(np.asarray(outs['xla'][0], np.float32)[m])
    g_rel = max(diff(a, c) / scale(a) for a, c in zip(jax.tree.leaves(outs['xla'][1]),
                                                      jax.tree.leaves(outs['cudnn'][1])))
    print(f'causal={causal}: max |y_xla - y_cudnn| / max|y| = {y_rel:.2e}; grads (relative '
          f'to each leaf max) {g_rel:.2e}')
    print(raw_kernel_report(rng, causal))   # a diagnosis only: the layer's result decides
    worst = max(worst, y_rel, g_rel)
  print(f'{"OK" if worst <= TOL else "FAIL"}: worst relative difference {worst:.2e} (tol {TOL})')
  return 0 if worst <= TOL else 1


if __name__ == '__main__':
  sys.exit(main())
