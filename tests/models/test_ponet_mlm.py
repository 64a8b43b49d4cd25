"""PoNet MLM + SSO pre-training model at a tiny size: input-derived segments, shapes, padding,
finite grads, and the loss against numpy with masked-out positions contributing nothing."""
import chex
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from poolformers_jax.models import build_model
from poolformers_jax.models.ponet_mlm import sentence_segment_ids, token_type_ids_from_inputs
from poolformers_jax.tasks.text import pretraining_objective, pretraining_sums

CLS, SEP, V = 1, 2, 20
INPUTS = np.array([[CLS, 5, 6, SEP, 7, 8, 9, SEP, 0, 0],
                   [CLS, 3, SEP, 4, SEP, 0, 0, 0, 0, 0]], np.int32)


def _config(**overrides):
  cfg = dict(name='ponet_mlm', vocab_size=V, emb_dim=16, num_layers=2, num_heads=2, mlp_dim=32,
             max_length=16, cls_id=CLS, sep_id=SEP, dropout_rate=0.1)
  cfg.update(overrides)
  return ml_collections.ConfigDict(cfg)


@pytest.fixture(scope='module')
def model_and_params():
  model = build_model(_config())
  return model, model.init(jax.random.PRNGKey(0), jnp.asarray(INPUTS))


def test_segments_and_types_from_inputs():
  # [CLS] and [SEP] are segments of their own; sentences in between (official get_segment_index).
  np.testing.assert_array_equal(np.asarray(sentence_segment_ids(jnp.asarray(INPUTS), CLS, SEP)),
                                [[0, 1, 1, 2, 3, 3, 3, 4, 5, 5], [0, 1, 2, 3, 4, 5, 5, 5, 5, 5]])
  np.testing.assert_array_equal(np.asarray(token_type_ids_from_inputs(jnp.asarray(INPUTS), SEP, 2)),
                                [[0, 0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]])


def test_shapes_tied_head_and_padding_amount(model_and_params):
  model, params = model_and_params
  out = model.apply(params, jnp.asarray(INPUTS))
  assert out['mlm_logits'].shape == (2, 10, V) and out['mlm_logits'].dtype == jnp.float32
  assert out['sso_logits'].shape == (2, 3) and out['sso_logits'].dtype == jnp.float32
  chex.assert_tree_all_finite(out)
  # The MLM decoder is tied: the token table is the only [V, D] / [D, V] matrix.
  shapes = [x.shape for x in jax.tree_util.tree_leaves(params)]
  assert shapes.count((V, 16)) == 1 and (16, V) not in shapes
  # Sentence segments make PoNet blind to the amount of padding: append 4 padding tokens.
  longer = jnp.pad(jnp.asarray(INPUTS), ((0, 0), (0, 4)))
  out_long = model.apply(params, longer)
  real = INPUTS != 0
  np.testing.assert_allclose(np.asarray(out_long['mlm_logits'])[:, :10][real],
                             np.asarray(out['mlm_logits'])[real], atol=1e-5)
  np.testing.assert_allclose(np.asarray(out_long['sso_logits']), np.asarray(out['sso_logits']),
                             atol=1e-5)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  weights = np.zeros((2, 10), np.float32)
  weights[0, [1, 5]] = 1.0
  weights[1, [3]] = 1.0
  return {'mlm_targets': rng.integers(0, V, (2, 10)).astype(np.int32), 'mlm_weights': weights,
          'sso_targets': np.array([0, 2], np.int32)}


def mlm_loss(outputs, batch):
  """The 'pretraining' task's objective on one unpadded batch of `_batch()`'s form: (loss, its
  MLM and SSO parts)."""
  chosen = batch['mlm_weights'] > 0
  targets = {'mlm': jnp.where(chosen, batch['mlm_targets'], -1), 'sso': batch['sso_targets']}
  sums = pretraining_sums(outputs, targets, jnp.ones(chosen.shape[:1], jnp.float32))
  parts = {'mlm_loss': sums['mlm_loss'] / sums['mlm_count'],
           'sso_loss': sums['sso_loss'] / sums['count']}
  return pretraining_objective(sums), parts


def _numpy_loss(outputs, batch):
  def log_softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))
  lp = log_softmax(outputs['mlm_logits'])
  terms = [-lp[b, i, batch['mlm_targets'][b, i]] for b in range(2) for i in range(10)
           if batch['mlm_weights'][b, i]]
  sso_lp = log_softmax(outputs['sso_logits'])
  return np.mean(terms) + np.mean([-sso_lp[b, batch['sso_targets'][b]] for b in range(2)])


def test_loss_matches_numpy_and_ignores_unchosen_positions(model_and_params):
  model, params = model_and_params
  outputs = model.apply(params, jnp.asarray(INPUTS))
  batch = _batch()
  loss, metrics = mlm_loss(outputs, batch)
  np.testing.assert_allclose(float(loss), _numpy_loss(outputs, batch), rtol=1e-5)
  np.testing.assert_allclose(float(metrics['mlm_loss'] + metrics['sso_loss']), float(loss),
                             rtol=1e-6)
  # Targets (even invalid ones) and logits at positions with weight 0 change nothing.
  unchosen = batch['mlm_weights'] == 0
  batch2 = dict(batch, mlm_targets=np.where(unchosen, -100, batch['mlm_targets']))
  noisy = dict(outputs, mlm_logits=jnp.where(unchosen[..., None], 1e3 * jax.random.normal(
      jax.random.PRNGKey(3), outputs['mlm_logits'].shape), outputs['mlm_logits']))
  np.testing.assert_allclose(float(mlm_loss(noisy, batch2)[0]), float(loss), rtol=1e-6)
  grad = jax.grad(lambda o: mlm_loss(o, batch)[0])(outputs)['mlm_logits']
  assert float(jnp.max(jnp.abs(grad[unchosen]))) == 0.0
  assert float(jnp.min(jnp.max(jnp.abs(grad[~unchosen]), axis=-1))) > 0.0


def test_finite_grads_with_dropout(model_and_params):
  model, params = model_and_params
  batch = _batch(1)

  def loss_fn(p):
    out = model.apply(p, jnp.asarray(INPUTS), deterministic=False,
                      rngs={'dropout': jax.random.PRNGKey(1)})
    return mlm_loss(out, batch)[0]

  loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
  assert np.isfinite(float(loss))
  chex.assert_tree_all_finite(grads)
  for name in ('token_embed', 'layer_0', 'layer_1', 'sso_head', 'mlm_bias'):
    leaves = jax.tree_util.tree_leaves(grads['params'][name])
    total = sum(float(jnp.sum(jnp.abs(g))) for g in leaves)
    assert total > 0.0, f'no gradient reaches {name}'


def test_config_errors():
  with pytest.raises(ValueError, match=r"unknown config.model key\(s\) \['hidden'\]"):
    build_model(_config(hidden=3))
  with pytest.raises(ValueError, match='exceeds max_length'):
    model = build_model(_config(max_length=8))
    model.init(jax.random.PRNGKey(0), jnp.asarray(INPUTS))
  # The mixer options are PoNet's fields.
  with pytest.raises(ValueError, match=r"has no option\(s\) \['nope'\]"):
    build_model(_config(mixer_kwargs={'nope': 1}))
  ablated = build_model(_config(mixer_kwargs={'use_lmp': False}))
  params = ablated.init(jax.random.PRNGKey(0), jnp.asarray(INPUTS))['params']
  assert 'local' not in params['layer_0']['PoNet_0'] and 'segment' in params['layer_0']['PoNet_0']


@pytest.mark.parametrize('mixer', ['ponet', 'softmax'])
def test_init_is_the_official_normal_002_for_every_dense(mixer):
  """Official `_init_weights`: every Linear (the mixer's projections included) N(0, 0.02^2) with
  zero bias, embeddings N(0, 0.02^2), LayerNorm 1 / 0 (Flax's default would give 1/16 at width
  256); std and mean within 4 standard errors."""
  model = build_model(ml_collections.ConfigDict(dict(
      name='ponet_classifier', vocab_size=300, emb_dim=256, num_layers=1, num_heads=4,
      mlp_dim=512, max_length=16, num_classes=2, mixer=mixer)))
  params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))['params']
  flat = {'/'.join(k): np.asarray(v) for k, v in
          flax.traverse_util.flatten_dict(params).items()}
  kernels = [k for k in flat if k.endswith(('kernel', 'embedding'))]
  assert len([k for k in kernels if k.startswith('layer_0/') and 'mlp' not in k]) == (
      6 if mixer == 'ponet' else 4)          # every projection of the mixer is covered
  for name in kernels:
    n = flat[name].size
    assert abs(flat[name].std() - 0.02) < 4 * 0.02 / np.sqrt(2 * n), name
    assert abs(flat[name].mean()) < 4 * 0.02 / np.sqrt(n), name
  for name in flat:
    if name.endswith('bias'):
      assert not flat[name].any(), name
    elif name.endswith('scale'):
      assert (flat[name] == 1).all(), name
