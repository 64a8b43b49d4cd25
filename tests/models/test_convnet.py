"""CP ConvNet: registry, forward/backward with BatchNorm, pool baselines, parameter counts."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from poolformers_jax.models import MODELS, convnet

TINY = dict(name='cp_convnet', num_classes=3, widths=(4, 8), convs_per_stage=1)


def _config(**overrides):
  return ml_collections.ConfigDict({**TINY, 'pool': 'contextpool', **overrides})


def _count(tree):
  return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(tree))


def test_registered():
  assert MODELS['cp_convnet'] is convnet.build


@pytest.mark.parametrize('pool', ['contextpool', 'max'])
def test_forward_backward(pool):
  model = convnet.build(_config(pool=pool))
  images = jnp.asarray(np.random.default_rng(0).standard_normal((2, 8, 8, 3)), jnp.float32)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), images)
  assert set(variables) == {'params', 'batch_stats'}

  def loss(params):
    logits, state = model.apply({'params': params, 'batch_stats': variables['batch_stats']},
                                images, deterministic=False, mutable=['batch_stats'])
    return jnp.mean(jax.nn.log_softmax(logits)[:, 0]), state

  (value, state), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(variables['params'])
  assert np.isfinite(float(value))
  jax.tree_util.tree_map(lambda g: np.testing.assert_array_equal(np.isfinite(g), True), grads)
  assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree_util.tree_leaves(grads))
  # Training updated the running statistics; evaluation uses them and is deterministic.
  assert not np.allclose(state['batch_stats']['stage0_bn0']['mean'], 0.0)
  logits = jax.jit(model.apply)({'params': variables['params'], **state}, images)
  assert logits.shape == (2, 3) and logits.dtype == jnp.float32
  assert bool(jnp.all(jnp.isfinite(logits)))


def test_parameter_counts_default_size():
  """Default widths (48, 96, 192), 2 convs per stage: counts from the layer formulas."""
  cfg = dict(num_classes=10, widths=(48, 96, 192), convs_per_stage=2)
  x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
  count = lambda pool: _count(jax.eval_shape(
      convnet.build(_config(**cfg, pool=pool)).init, jax.random.PRNGKey(0), x)['params'])
  convs, c_in = 0, 3
  for width in (48, 96, 192):
    convs += 9 * c_in * width + 2 * width + 9 * width * width + 2 * width  # conv + BN scale/bias
    c_in = width
  baseline = convs + 192 * 10 + 10
  assert count('max') == baseline == count('avg')
  hidden = {48: 8, 96: 8, 192: 12}          # max(C // 16, 8)
  predictors = sum(9 * c * h + h + 9 * h * 2 + 2 for c, h in hidden.items())
  assert count('contextpool') == baseline + predictors
  # Table 3: 0.66M baseline, +0.02M for ContextPool.
  assert 0.6e6 < baseline < 0.7e6 and 0.01e6 < predictors < 0.04e6


def test_pool_kwargs_reach_contextpool_and_bad_configs_fail():
  images = jnp.ones((1, 4, 4, 3))
  init = lambda cfg: jax.eval_shape(convnet.build(cfg).init, jax.random.PRNGKey(0),
                                    images)['params']
  assert 'predictor' in init(_config())['stage0_pool']
  # Uniform weights without locality need no predictor m(X): the pool layer has no parameters.
  assert 'stage0_pool' not in init(_config(pool_kwargs={'weights': 'uniform',
                                                        'locality': 'none'}))
  with pytest.raises(ValueError, match="unknown pool 'median'"):
    init(_config(pool='median'))
  with pytest.raises(ValueError, match='ContextPool options'):
    init(_config(pool='max', pool_kwargs={'locality': 'none'}))
  with pytest.raises(ValueError, match=r"missing \['pool'\]"):
    convnet.build(ml_collections.ConfigDict(TINY))
