"""MSAC ResNet and cross-attentive similarity model: build by name, shapes, BatchNorm, gradients."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from poolformers_jax.models import build_model
from poolformers_jax.models.msac_models import cross_attentive_similarity_config, msac_resnet_config


def _tiny(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  cfg.stage_widths, cfg.stage_blocks, cfg.msac_stages = (4, 8), (1, 1), (1,)
  cfg.num_heads, cfg.max_distance = 2, 8
  cfg.heads = 'split'   # the kernel shapes asserted below are the split-heads form's
  return cfg


def _train_step_grads(model, variables, inputs, labels):
  def loss_fn(params):
    logits, state = model.apply({'params': params, 'batch_stats': variables['batch_stats']},
                                inputs, deterministic=False, mutable=['batch_stats'])
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), (logits, state)
  return jax.grad(loss_fn, has_aux=True)(variables['params'])


# make test-fast builds the lighter model; msac_resnet runs in make test.
@pytest.mark.parametrize('name', [pytest.param('msac_resnet', marks=pytest.mark.slow),
                                  'cross_attentive_similarity'])
def test_forward_backward_and_batch_stats(name):
  cfg = _tiny(msac_resnet_config(num_classes=5) if name == 'msac_resnet'
              else cross_attentive_similarity_config(num_classes=5))
  model = build_model(cfg)
  rng = np.random.default_rng(0)
  shape = (3, 8, 8, 3) if name == 'msac_resnet' else (3, 2, 8, 8, 3)
  inputs = jnp.asarray(rng.standard_normal(shape), jnp.float32)
  variables = model.init(jax.random.PRNGKey(0), inputs)
  params = variables['params']
  backbone = params if name == 'msac_resnet' else params['backbone']
  # Stage 0 keeps its 3×3 convolutions; stage 1 has MSACs with a 1×1 and a 3×3 SAC.
  assert backbone['stage0_block0']['conv1']['kernel'].shape == (3, 3, 4, 4)
  msac = backbone['stage1_block0']['conv1']
  assert msac['sac_0']['query']['kernel'].shape == (1, 1, 4, 8)
  assert msac['sac_1']['query']['kernel'].shape == (3, 3, 4, 8)
  if name == 'cross_attentive_similarity':
    assert params['cross_input']['x_segment'].shape == (8, 8, 3)

  grads, (logits, state) = _train_step_grads(model, variables, inputs, jnp.array([0, 1, 4]))
  assert logits.shape == (3, 5) and logits.dtype == jnp.float32
  jax.tree.map(lambda g: np.testing.assert_array_equal(np.isfinite(g), True), grads)
  g_msac = grads if name == 'msac_resnet' else grads['backbone']
  assert float(jnp.abs(g_msac['stage1_block0']['conv1']['sac_0']['query']['kernel']).sum()) > 0
  if name == 'cross_attentive_similarity':
    assert float(jnp.abs(grads['cross_input']['z_segment']).sum()) > 0
  # Training mode updates the running averages.
  before = variables['batch_stats']['stage1_block0' if name == 'msac_resnet' else 'backbone']
  after = state['batch_stats']['stage1_block0' if name == 'msac_resnet' else 'backbone']
  assert not np.allclose(jax.tree.leaves(before)[0], jax.tree.leaves(after)[0])


def test_deterministic_uses_running_averages():
  """With running averages an example's logits do not depend on the rest of the batch."""
  model = build_model(_tiny(msac_resnet_config(num_classes=3)))
  inputs = jnp.asarray(np.random.default_rng(1).standard_normal((2, 8, 8, 3)), jnp.float32)
  variables = model.init(jax.random.PRNGKey(0), inputs)
  apply = lambda x: model.apply(variables, x)
  np.testing.assert_allclose(np.asarray(apply(inputs))[:1], np.asarray(apply(inputs[:1])),
                             atol=1e-5, rtol=1e-5)
  train_logits, _ = model.apply(variables, inputs, deterministic=False, mutable=['batch_stats'])
  assert not np.allclose(np.asarray(train_logits), np.asarray(apply(inputs)), atol=1e-4)


def test_bfloat16_compute_gives_float32_logits():
  cfg = _tiny(msac_resnet_config(num_classes=3))
  cfg.dtype = 'bfloat16'
  model = build_model(cfg)
  inputs = jnp.asarray(np.random.default_rng(2).standard_normal((2, 8, 8, 3)), jnp.float32)
  variables = model.init(jax.random.PRNGKey(0), inputs)
  assert variables['params']['stage1_block0']['conv1']['reduce']['kernel'].dtype == jnp.float32
  logits = model.apply(variables, inputs)
  assert logits.shape == (2, 3) and logits.dtype == jnp.float32
  assert bool(jnp.all(jnp.isfinite(logits)))


def test_config_and_input_errors():
  cfg = _tiny(msac_resnet_config())
  with cfg.unlocked():
    cfg.segment = 'add'
  with pytest.raises(ValueError, match=r"unknown config.model key\(s\) \['segment'\]"):
    build_model(cfg)
  cfg = cross_attentive_similarity_config()
  del cfg['segment_dim']
  with pytest.raises(ValueError, match=r"missing \['segment_dim'\]"):
    build_model(cfg)
  model = build_model(_tiny(cross_attentive_similarity_config()))
  with pytest.raises(ValueError, match=r'expected image pairs \[batch, 2, height, width'):
    model.init(jax.random.PRNGKey(0), jnp.zeros((2, 8, 8, 3)))
  cfg = _tiny(msac_resnet_config())
  cfg.msac_stages = (2,)
  with pytest.raises(ValueError, match='are not stage indices'):
    build_model(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)))
