r"""GSPMD or shard_map: what crosses devices when a mixer's tokens are split over 8 devices.

  python benchmarks/sequence_collectives.py

Each mixer's gradient (parameters and input) on one sequence of 96 and 192 tokens split over 8
fake CPU devices, compiled twice: the global program left to XLA's partitioner (GSPMD), and the
mixer's sequence-parallel form (layers/sequence_parallel.py, shard_map). Prints the number of
collectives and the shapes of those whose size follows the length (L, L/2 or L/8 tokens).
"""
import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from poolformers_jax.layers import build_mixer  # noqa: E402
from poolformers_jax.layers.sequence_parallel import SEQUENCE_AXIS, sharded_sequences  # noqa: E402
from poolformers_jax.trainer.sharding import batch_sharded, collective_ops, make_mesh  # noqa: E402

MIXERS = {'ponet': dict(num_heads=2, segment_num=4), 'linear': dict(num_heads=2),
          'adamra': dict(num_heads=2)}


def main():
  mesh = make_mesh(sizes={SEQUENCE_AXIS: 8})
  tokens = batch_sharded(mesh, 2)
  for name, kwargs in MIXERS.items():
    for length in (96, 192):
      x = jax.random.normal(jax.random.PRNGKey(0), (1, length, 16))
      mask = jnp.ones((1, length), bool)
      mixer = build_mixer(name, **kwargs)
      variables = mixer.init(jax.random.PRNGKey(1), x, mask)
      loss = lambda v, x, mask, mixer=mixer: jnp.sum(mixer.apply(v, x, mask) ** 2)
      grad = jax.grad(loss, argnums=(0, 1))

      def shard_mapped(v, x, mask, grad=grad):
        with sharded_sequences(mesh):
          return grad(v, x, mask)

      args = (variables, jax.device_put(x, tokens), jax.device_put(mask, tokens))
      for how, fn in (('gspmd', grad), ('shard_map', shard_mapped)):
        text = jax.jit(fn).lower(*args).compile().as_text()
        found = [(op.op, shape) for op in collective_ops(text) for shape in op.moved]
        sized = sorted({s for _, s in found
                        if any(d in (length, length // 2, length // 8) for d in s[1:2])})
        print(f'{name:7s} L={length:4d} {how:9s} {len(found):3d} collectives; '
              f'token-sized: {sized}')


if __name__ == '__main__':
  main()
