"""The windowed mixers without a sequence-parallel form (SAC / MSAC, ContextPool) are refused
under sequence sharding in one line that says why: their attention is global, so a halo of
their windows would not suffice (layers/sequence_parallel.py)."""
import pytest

from poolformers_jax.layers import build_mixer
from poolformers_jax.layers.sequence_parallel import sharded_sequences
from poolformers_jax.trainer.sharding import make_mesh


@pytest.mark.parametrize('name,why', [
    ('sac', r'global softmax attention over every token'),
    ('msac', r'global softmax attention over every token'),
    ('contextpool', r"Eq. 4's Gaussian weighs every token .* attention after it is global"),
])
def test_refused_in_one_line_saying_why(name, why):
  with sharded_sequences(make_mesh(2, {'sequence': 2})):
    with pytest.raises(ValueError, match=rf"'{name}'.*no sequence-parallel form \(.*{why}.*\)"
                                         r".*'adamra'.*'ponet'") as refused:
      build_mixer(name, num_heads=2)
  assert '\n' not in str(refused.value)
  build_mixer(name, num_heads=2)   # without sequence sharding: built as always
