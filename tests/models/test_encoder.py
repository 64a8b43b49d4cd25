"""LRA encoder and dual encoder: padding invariance, the retrieval head's features, pooling,
bf16, rematerialised blocks."""
import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from remat_check import assert_remat_changes_nothing

from poolformers_jax.models import build_model
from poolformers_jax.models.encoder import ClassifierHead, SequenceEncoder


def _cfg(name='lra_encoder', **updates):
  cfg = ml_collections.ConfigDict(dict(
      name=name, mixer='softmax', mixer_kwargs={}, dim=16, num_layers=2, num_heads=2, mlp_dim=32,
      head_hidden_dim=8, dropout_rate=0.1, attention_dropout_rate=0.1, pooling='mean',
      dtype='float32', vocab_size=12, max_length=24, num_classes=5))
  cfg.update(updates)
  return cfg


def _tokens(seed, batch, length, num_real):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, 12, size=(batch, length))
  return jnp.asarray(np.where(np.arange(length)[None] < np.asarray(num_real)[:, None], ids, 0),
                     jnp.int32)


@pytest.mark.parametrize('pooling', ['mean', 'cls'])
def test_logits_ignore_the_amount_of_padding(pooling):
  model = build_model(_cfg(pooling=pooling))
  tokens = _tokens(0, 3, 16, [16, 9, 4])
  variables = model.init(jax.random.PRNGKey(0), tokens)
  logits = model.apply(variables, tokens)
  longer = jnp.concatenate([tokens, jnp.zeros((3, 8), jnp.int32)], axis=1)
  chex.assert_shape(logits, (3, 5))
  assert logits.dtype == jnp.float32
  np.testing.assert_allclose(model.apply(variables, longer), logits, atol=1e-5)
  # Dropout is active when deterministic=False, and seeded.
  rngs = {'dropout': jax.random.PRNGKey(1)}
  noisy = model.apply(variables, tokens, deterministic=False, rngs=rngs)
  assert not np.allclose(noisy, logits)
  np.testing.assert_array_equal(noisy,
                                model.apply(variables, tokens, deterministic=False, rngs=rngs))


def test_mean_pooling_is_the_masked_mean_of_the_final_norm():
  model = build_model(_cfg())
  tokens = _tokens(1, 2, 10, [10, 3])
  variables = model.init(jax.random.PRNGKey(0), tokens)
  _, state = model.apply(variables, tokens, capture_intermediates=True, mutable=['intermediates'])
  final = np.asarray(state['intermediates']['encoder']['final_norm']['__call__'][0])
  pooled = np.asarray(state['intermediates']['encoder']['pooled'][0])
  np.testing.assert_allclose(pooled[0], final[0].mean(0), atol=1e-6)
  np.testing.assert_allclose(pooled[1], final[1, :3].mean(0), atol=1e-6)


def test_dual_encoder_head_sees_x0_x1_product_and_difference():
  cfg = _cfg('lra_dual_encoder')
  model = build_model(cfg)
  pair = jnp.stack([_tokens(2, 3, 12, [12, 5, 7]), _tokens(3, 3, 12, [6, 12, 2])], axis=1)
  variables = model.init(jax.random.PRNGKey(0), pair)
  logits = model.apply(variables, pair)
  encoder = SequenceEncoder(vocab_size=12, max_length=24, dim=16, num_layers=2, num_heads=2,
                            mlp_dim=32, mixer='softmax')
  params = variables['params']
  x0 = np.asarray(encoder.apply({'params': params['encoder']}, pair[:, 0]))
  x1 = np.asarray(encoder.apply({'params': params['encoder']}, pair[:, 1]))
  features = np.concatenate([x0, x1, x0 * x1, x0 - x1], axis=-1)
  expected = ClassifierHead(5, 8).apply({'params': params['head']}, features)
  np.testing.assert_allclose(logits, expected, atol=1e-5)
  with pytest.raises(ValueError, match=r'expected token pairs \[batch, 2, length\]'):
    model.apply(variables, pair[:, 0])


def test_bfloat16_compute_keeps_float32_params_and_logits():
  tokens = _tokens(4, 2, 8, [8, 5])
  f32 = build_model(_cfg())
  variables = f32.init(jax.random.PRNGKey(0), tokens)
  bf16 = build_model(_cfg(dtype='bfloat16'))
  bf16_params = jax.tree.leaves(bf16.init(jax.random.PRNGKey(0), tokens))
  assert all(p.dtype == jnp.float32 for p in bf16_params)
  low = bf16.apply(variables, tokens)
  assert low.dtype == jnp.float32
  np.testing.assert_allclose(low, f32.apply(variables, tokens), atol=0.1)


@pytest.mark.parametrize('mixer,kwargs', [('linear', {}), ('ponet', {'segment_num': 4}),
                                          ('adamra', {'compression_rates': (0.5, 0.25)}),
                                          ('contextpool', {}), ('msac', {})])
def test_every_family_mixer_builds_and_ignores_padding_amount(mixer, kwargs):
  model = build_model(_cfg(mixer=mixer, mixer_kwargs=kwargs, num_layers=1))
  tokens = _tokens(5, 2, 16, [16, 11])
  variables = model.init(jax.random.PRNGKey(0), tokens)
  logits = model.apply(variables, tokens)
  assert np.isfinite(np.asarray(logits)).all()
  assert any(k.endswith('_0') and k not in ('ln_mixer', 'ln_mlp')
             for k in variables['params']['encoder']['block_0'])
  # Mixers whose segments are defined on the padded length (PoNet, AdaMRA) are exempt by design.
  if mixer not in ('ponet', 'adamra'):
    longer = jnp.concatenate([tokens, jnp.zeros((2, 4), jnp.int32)], axis=1)
    np.testing.assert_allclose(model.apply(variables, longer), logits, atol=1e-4)


@pytest.mark.parametrize('dtype,remat,tolerance', [
    ('float32', 'dots', None),
    # bf16 compute: the recomputed forward rounds in another order, by up to bf16's 2^-8
    ('bfloat16', 'full', dict(atol=1e-2, rtol=1e-2)),
])
def test_remat_keeps_the_parameters_loss_and_every_gradient(dtype, remat, tolerance):
  """The LRA classifier with config.model.remat ('dots': each block keeps its matrix products,
  recomputes the rest; 'full': keeps its input): the same parameter tree, loss and gradients,
  dropout on, padding."""
  tokens = _tokens(6, 2, 12, [12, 7])
  assert_remat_changes_nothing(lambda r: build_model(_cfg(remat=r, dtype=dtype)), tokens, remat,
                               tolerance)


def test_build_model_from_keyword_values_equals_from_config_model():
  """What the trainer does (`build_model(**config.model.to_dict())`): the same module, fields
  and outputs as from `config.model`; nested mappings and lists arrive as dicts and tuples."""
  cfg = _cfg(mixer='ponet', mixer_kwargs={'segment_num': 4}, pooling='cls')
  from_keywords, from_config = build_model(**cfg.to_dict()), build_model(cfg)
  assert from_keywords == from_config
  assert from_keywords.mixer_kwargs == {'segment_num': 4}
  tokens = _tokens(2, 2, 12, [12, 5])
  variables = from_config.init(jax.random.PRNGKey(0), tokens)
  np.testing.assert_array_equal(from_keywords.apply(variables, tokens),
                                from_config.apply(variables, tokens))
  with pytest.raises(ValueError, match=r"^build_model takes the model's name and fields"):
    build_model(dim=16, num_layers=2)
