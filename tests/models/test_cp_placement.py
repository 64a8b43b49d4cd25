"""ContextPool placement (Fig. 2c / §3.2): 'block_output' pools the block's output, the residual
stream the next block reads; 'mixer_input' (default) pools LN(X) inside the attention branch.

'block_output' must equal, with the same parameters, a plain softmax-attention block followed by
ContextPool on its output; it must differ from 'mixer_input'; and a causal LM built with it must
stay causal (the pooled stream only looks back).
"""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from poolformers_jax.layers.context_pool import ContextPool
from poolformers_jax.models import build_model
from poolformers_jax.models.block import TransformerBlock

X = jnp.asarray(np.random.default_rng(0).standard_normal((2, 9, 16)), jnp.float32)
MASK = jnp.asarray([[True] * 9, [True] * 6 + [False] * 3])


def _random(tree, seed=0):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: jnp.asarray(0.4 * rng.standard_normal(a.shape), a.dtype), tree)


def _block(placement, causal=False):
  return TransformerBlock('contextpool', 2, 32, mixer_kwargs={'placement': placement},
                          causal=causal)


def test_block_output_is_attention_block_then_contextpool(causal=False):
  block = _block('block_output', causal)
  params = _random(jax.eval_shape(block.init, jax.random.PRNGKey(0), X, MASK))['params']
  out = jax.jit(block.apply)({'params': params}, X, MASK)
  cp_params = params['ContextPoolAttention_0']
  plain = TransformerBlock('softmax', 2, 32, causal=causal)
  plain_params = {k: v for k, v in params.items() if k != 'ContextPoolAttention_0'}
  plain_params['MultiHeadAttention_0'] = cp_params['attention']
  h = jax.jit(plain.apply)({'params': plain_params}, X, MASK)
  expected = jax.jit(ContextPool(causal=causal).apply)({'params': cp_params['context_pool']}, h,
                                                        MASK)
  real = np.asarray(MASK)
  np.testing.assert_allclose(np.asarray(out)[real], np.asarray(expected)[real], rtol=1e-5,
                             atol=5e-5)
  # The other placement (pool LN(X) before attention, stream unpooled) is a different function.
  other = jax.jit(_block('mixer_input', causal).apply)({'params': params}, X, MASK)
  assert np.abs(np.asarray(other - out)[real]).max() > 1e-2


def test_block_output_lm_stays_causal():
  config = ml_collections.ConfigDict(dict(
      name='char_lm', vocab_size=11, num_layers=2, emb_dim=16, num_heads=2, mlp_dim=32,
      mixer='contextpool', mixer_kwargs={'placement': 'block_output', 'predictor_dim': 4},
      dropout_rate=0.0, attention_dropout_rate=0.0))
  model = build_model(config)
  tokens = jnp.asarray(np.random.default_rng(1).integers(1, 11, (1, 12)), jnp.int32)
  params = _random(jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens))['params']
  apply = jax.jit(model.apply)
  base = np.asarray(apply({'params': params}, tokens))
  changed = np.asarray(apply({'params': params}, tokens.at[0, 7].set(tokens[0, 7] % 10 + 1)))
  np.testing.assert_allclose(changed[0, :7], base[0, :7], atol=1e-5)
  assert np.abs(changed[0, 7:] - base[0, 7:]).max() > 1e-3


def test_unknown_placement_is_one_line():
  with pytest.raises(ValueError, match=r"unknown placement 'after'; choose one of \['mixer_input', "
                                       r"'block_output'\]"):
    _block('after').init(jax.random.PRNGKey(0), X, MASK)
