"""AdaMRA split over the sequence (layers/sequence_parallel.py) equals the whole, and only the
compressed keys / values cross devices: partial segment sums and token counts all-reduced at
m_h = floor(L * c_h) rows, never the full length. 8 fake CPU devices (tests/conftest.py)."""
import math

import chex

from poolformers_jax.layers.adamra import AdaMRA
from poolformers_jax.testing import assert_sequence_parallel


def test_segments_straddling_shards_every_head_path_equals_the_whole():
  """48 tokens on 4 shards of 12: segments of 4 tokens (1/4) divide the shards, 8 and 10 (1/7,
  1/9; the last padded) straddle shard boundaries, 16 (1/16) is longer than a shard, 48 (1/48)
  spans all four; random routing with the softmax ablation evaluates every head."""
  mixer = AdaMRA(num_heads=2, compression_rates=(1 / 4, 1 / 7, 1 / 9, 1 / 16, 1 / 48),
                 routing='random', feature_map='softmax', use_bias=False)
  found = assert_sequence_parallel(mixer, sequence=4, length=48)
  chex.assert_equal(bool(found), True)   # the split is real: devices talk


def test_only_the_compressed_length_crosses_devices():
  """Learned routing, routed kernel attention (the default path) equals the whole at 48 and 96
  tokens. Every collective is shorter than the sequence; those that grow with it are exactly
  the heads' [B, m_h, D] segment sums and [B, m_h] token counts; the rest (gradients of the
  states and parameters) are the same at both lengths."""
  rates = (1 / 2, 1 / 7, 1 / 12)   # m_h: 24, 6, 4 at 48 tokens; 48, 13, 8 at 96
  mixer = AdaMRA(num_heads=1, compression_rates=rates)
  found, growing = {}, {}
  for length in (48, 96):
    got = assert_sequence_parallel(mixer, sequence=4, length=length)
    compressed = {math.floor(length * r + 1e-9) for r in rates}
    chex.assert_equal([c for c in got if max(c[1], default=0) >= length], [])
    growing[length] = sorted(c for c in got if compressed & set(c[1]))
    found[length] = sorted(c for c in got if not compressed & set(c[1]))
    # 2 examples per data shard: 16 features summed, and the tokens counted
    chex.assert_equal(growing[length], sorted(('all-reduce', shape) for m in compressed
                                              for shape in ((2, m, 16), (2, m))))
  chex.assert_equal(found[48], found[96])
