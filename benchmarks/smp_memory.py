r"""PoNet's SMP alone compiled for a TPU slice: temporaries of its forward and gradient, per chip.

  python benchmarks/smp_memory.py --tokens 4194304,16777216 [--forms scan,reshape] \
      [--topology v5e:4x4] [--sequence 16] [--dim 64] [--segment_num 4096]

`chunk_max_pool` (the maxima of the chunks of L // segment_num + 1 tokens, spread back) on the
`[1, L, dim]` tokens split over `--sequence` chips (`sharded_sequences`), and the gradient of
sum(w * SMP) with respect to them, compiled by libtpu's compile-only topology (no TPU needed):
`memory_analysis()` temporaries per chip. `scan`: the library's form (layers/chunk_scan.py);
`reshape`: the [chunks, size] reshape and jnp.repeat (`scan=False`; the form below
`chunk_scan.SCAN_FROM`). A minute to compile where the whole step (`summary --topology`) takes
several: SMP's own growth, not the step's peak, which depends on what else is live
(docs/efficiency.md).
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp

from poolformers_jax import errors
from poolformers_jax.layers import ponet
from poolformers_jax.layers.sequence_parallel import TOKENS, map_shards, sharded_sequences
from poolformers_jax.trainer import accelerators


def temporaries(tokens: int, form: str, args) -> int:
  mesh = accelerators.topology_mesh(args.topology, {'sequence': args.sequence})

  def loss(x, weights, mask):
    with sharded_sequences(mesh):
      pooled = map_shards(lambda shard, x, mask: TOKENS(ponet.chunk_max_pool(
          x, mask, args.segment_num, shard, scan=form == 'scan')), TOKENS(x), TOKENS(mask))
    return jnp.sum(weights * pooled)

  spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, 'sequence'))
  x = jax.ShapeDtypeStruct((1, tokens, args.dim), jnp.float32, sharding=spec)
  mask = jax.ShapeDtypeStruct((1, tokens), jnp.bool_, sharding=spec)
  compiled = jax.jit(jax.grad(loss)).lower(x, x, mask).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tokens', default='4194304,16777216')
  parser.add_argument('--forms', default='scan,reshape')
  parser.add_argument('--topology', default='v5e:4x4')
  parser.add_argument('--sequence', type=int, default=16)
  parser.add_argument('--dim', type=int, default=64)
  parser.add_argument('--segment_num', type=int, default=4096)
  args = parser.parse_args()
  unknown = set(args.forms.split(',')) - {'scan', 'reshape'}
  if unknown:
    parser.error(f'--forms {args.forms}: unknown {sorted(unknown)}; use scan, reshape or both.')
  for form in args.forms.split(','):
    for tokens in map(int, args.tokens.split(',')):
      record = dict(form=form, tokens=tokens, topology=args.topology, sequence=args.sequence,
                    dim=args.dim, temp_bytes=temporaries(tokens, form, args))
      print(json.dumps(record), flush=True)


if __name__ == '__main__':
  main()
