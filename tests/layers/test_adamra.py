"""AdaMRA: identity to linear attention, segment means and routing vs numpy loops, properties."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import AdaMRA, LinearAttention, build_mixer
from poolformers_jax.layers.adamra import (
  kernel_attention_state,
  move_rows,
  random_routes,
  routed_kernel_attention,
  routed_layout,
  segment_means,
)
from poolformers_jax.layers.attention import (
  FEATURE_MAPS,
  linear_attention,
  merge_heads,
  split_heads,
)

RATES = (1 / 2, 1 / 3, 1 / 5)  # at length 10: 5, 3 (10 is not divisible by 3) and 2 segments


@pytest.mark.parametrize('per_head_projections', [False, True])
@pytest.mark.parametrize('routing', ['none', 'learned'])  # one learned head: probability 1
def test_one_head_rate_one_is_linear_attention(per_head_projections, routing):
  x, mask = T.random_inputs(0, 2, 9, 8, num_real=[9, 5])
  linear = LinearAttention(num_heads=2, feature_map='relu')
  lin_vars, y_linear = T.init_apply(linear, x, mask)
  module = AdaMRA(num_heads=2, compression_rates=(1.0,), routing=routing,
                  per_head_projections=per_head_projections)
  params = dict(module.init(jax.random.PRNGKey(1), x, mask)['params'])
  for name in ('query', 'key', 'value', 'out'):  # Eq. 1 and W^O are LinearAttention's layers
    params[name] = lin_vars['params'][name]
  if per_head_projections:  # Eq. 9 matrices set to the identity
    for name in ('head_query', 'head_key', 'head_value'):
      params[name] = jnp.eye(8)[None]
  y = module.apply({'params': params}, x, mask)
  np.testing.assert_allclose(np.asarray(y), np.asarray(y_linear), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('length,count', [(12, 4), (10, 4), (5, 4), (7, 7)])
def test_segment_means_match_numpy_loop(length, count):
  # (10, 4): segments of 3, padded to 12; (5, 4): segments of 2, the last one only padding.
  x, mask = T.random_inputs(1, 2, length, 3, num_real=[length, length - 3])
  means, valid = segment_means(x, mask, count)
  x, mask = np.asarray(x, np.float64), np.asarray(mask)
  seg = math.ceil(length / count)
  for b in range(2):
    for j in range(count):
      real = [t for t in range(j * seg, min((j + 1) * seg, length)) if mask[b, t]]
      assert bool(valid[b, j]) == bool(real)
      expected = x[b, real].mean(axis=0) if real else np.zeros(3)
      np.testing.assert_allclose(np.asarray(means[b, j]), expected, atol=1e-6)


def _numpy_adamra(variables, x, mask, rates, subheads, feature_map, routing, per_head):
  """Eq. 1, 6-9 token by token: each query attends only in the head it is routed to."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), variables['params'])
  x = np.asarray(x, np.float64)
  batch, length, dim = x.shape
  dk = dim // subheads
  dense = lambda name, t: t @ p[name]['kernel'] + p[name]['bias']
  q_all, k_all, v_all = dense('query', x), dense('key', x), dense('value', x)
  if routing == 'learned':
    logits = q_all @ p['router']['kernel']
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = probs.argmax(-1)
    gate = np.take_along_axis(probs, chosen[..., None], -1)[..., 0]
  else:  # 'random': the fixed position -> head table, gate 1
    chosen = np.broadcast_to(random_routes(length, len(rates)), (batch, length))
    gate = np.ones((batch, length))
  phi = {'relu': lambda t: np.maximum(t, 0), 'elu+1': lambda t: np.where(t > 0, t + 1, np.exp(t))}
  mixed = np.zeros_like(x)
  for b in range(batch):
    for i in range(length):
      h = chosen[b, i]
      count = math.floor(length * rates[h] + 1e-9)
      seg = math.ceil(length / count)
      segments = [[t for t in range(j * seg, min((j + 1) * seg, length)) if mask[b, t]]
                  for j in range(count)]
      keys = np.stack([k_all[b, s].mean(0) for s in segments if s])
      values = np.stack([v_all[b, s].mean(0) for s in segments if s])
      query = q_all[b, i]
      if per_head:
        query, keys, values = (query @ p['head_query'][h], keys @ p['head_key'][h],
                               values @ p['head_value'][h])
      for s in range(subheads):
        cols = slice(s * dk, (s + 1) * dk)
        if feature_map == 'softmax':
          scores = keys[:, cols] @ query[cols] / np.sqrt(dk)
          weights = np.exp(scores - scores.max())
          weights /= weights.sum()
        else:
          sim = phi[feature_map](keys[:, cols]) @ phi[feature_map](query[cols])
          weights = sim / (sim.sum() + 1e-6)
        mixed[b, i, cols] = gate[b, i] * (weights @ values[:, cols])
  return dense('out', mixed), chosen


@pytest.mark.parametrize('feature_map,routing,per_head', [
    ('relu', 'learned', True), ('elu+1', 'learned', False), ('softmax', 'random', True)])
def test_matches_numpy_routing_reference(feature_map, routing, per_head):
  x, mask = T.random_inputs(2, 2, 10, 8, num_real=[10, 6])
  module = AdaMRA(num_heads=2, compression_rates=RATES, routing=routing,
                  feature_map=feature_map, per_head_projections=per_head)
  variables = module.init(jax.random.PRNGKey(3), x, mask)
  y, state = module.apply(variables, x, mask, mutable=['intermediates'])
  ref, chosen = _numpy_adamra(variables, x, np.asarray(mask), RATES, 2, feature_map, routing,
                              per_head)
  assert len(np.unique(chosen)) == len(RATES), 'every head must be used, else the test is weak'
  np.testing.assert_array_equal(np.asarray(state['intermediates']['routed_head'][0]), chosen)
  np.testing.assert_allclose(np.asarray(y), ref, atol=2e-5, rtol=2e-4)


def _every_head_then_select(x, chosen, kernels, biases, k, v, valid, phi):
  """Each query through every head's linear_attention, then its routed head's row kept."""
  outs = []
  for h in range(kernels.shape[0]):
    q = split_heads(x @ kernels[h] + biases[h], 2)
    k_h, v_h = split_heads(k[h], 2), split_heads(v[h], 2)
    outs.append(merge_heads(linear_attention(phi(q), phi(k_h), v_h, valid[h], causal=False)))
  return jnp.take_along_axis(jnp.stack(outs, 2), chosen[:, :, None, None], 2)[:, :, 0]


@pytest.mark.parametrize('routes', [pytest.param('mixed', marks=pytest.mark.slow), 'one_head'])
def test_routed_evaluation_equals_every_head_then_select(routes):
  # 2 rows x 50 tokens, 3 heads: blocks of 24 rows, so groups span several blocks and blocks
  # are padded; 'one_head' sends every token of a row to one head (empty groups).
  keys = jax.random.split(jax.random.PRNGKey(0), 6)
  x = jax.random.normal(keys[0], (2, 50, 8))
  chosen = jax.random.randint(keys[1], (2, 50), 0, 3)
  if routes == 'one_head':
    chosen = jnp.stack([jnp.full((50,), 2), jnp.full((50,), 0)])
  kernels, biases = jax.random.normal(keys[2], (3, 8, 8)), jax.random.normal(keys[3], (3, 8))
  k, v = jax.random.normal(keys[4], (3, 2, 7, 8)), jax.random.normal(keys[5], (3, 2, 7, 8))
  # [H, B, m]: keys / values per head and row; some compressed keys are padding
  valid = jnp.arange(7)[None, None, :] < jnp.array([[7, 4], [7, 7], [5, 2]])[..., None]
  phi = FEATURE_MAPS['relu']
  weights = jax.random.normal(keys[0], (2, 50, 8))

  def routed(x, kernels, biases, k, v):
    states = jnp.stack([kernel_attention_state(split_heads(k[h], 2), split_heads(v[h], 2),
                                               valid[h], phi) for h in range(3)], axis=1)
    return routed_kernel_attention(x, chosen, kernels, biases, states, phi, jnp.float32)

  def dense(x, kernels, biases, k, v):
    return _every_head_then_select(x, chosen, kernels, biases, k, v, valid, phi)

  args = (x, kernels, biases, k, v)
  np.testing.assert_allclose(np.asarray(routed(*args)), np.asarray(dense(*args)),
                             atol=1e-5, rtol=1e-4)
  grads = [jax.grad(lambda *a, f=f: jnp.sum(weights * f(*a)), argnums=range(5))(*args)
           for f in (jax.jit(routed), dense)]
  for g_routed, g_dense in zip(*grads):
    np.testing.assert_allclose(np.asarray(g_routed), np.asarray(g_dense), atol=1e-4, rtol=1e-4)


def test_routed_layout_is_a_block_aligned_permutation():
  chosen = jnp.array([[2, 0, 2, 2, 1, 0, 2], [1, 1, 1, 1, 1, 1, 1]])
  slot, source, head = (np.asarray(t) for t in routed_layout(chosen, 3, 2))
  assert source.shape == (2, 2 * (4 + 2)) and head.shape == (2, 6)
  for b in range(2):
    assert len(set(slot[b])) == 7 and np.all(source[b, slot[b]] == np.arange(7))
    assert np.sum(source[b] < 7) == 7  # every other place is padding
    for token in range(7):  # each token sits in a block of its own head
      assert head[b, slot[b, token] // 2] == chosen[b, token]
    for h in range(3):  # within a head, tokens keep their order
      members = np.flatnonzero(np.asarray(chosen[b]) == h)
      assert list(slot[b, members]) == sorted(slot[b, members])


def test_move_rows_gradient_is_the_gathers_gradient():
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
  index = jnp.array([3, 5, 0, 4, 5, 1, 2])  # 5 = out of range: a zero row
  inverse = jnp.array([2, 5, 6, 0, 3])
  w = jax.random.normal(jax.random.PRNGKey(2), (7, 3))
  plain = lambda x: jnp.sum(w * jnp.take(x, index, axis=0, mode='fill', fill_value=0))
  moved = lambda x: jnp.sum(w * move_rows(x, index, inverse))
  assert float(plain(x)) == pytest.approx(float(moved(x)))
  np.testing.assert_allclose(np.asarray(jax.grad(moved)(x)), np.asarray(jax.grad(plain)(x)))


@pytest.mark.slow   # sharding equivalence: make test, not make test-fast
def test_batch_sharded_over_devices_equals_one_device():
  # The routed layout is per batch row: with the batch split over 8 devices (conftest forces
  # 8 CPU devices) values and gradients equal the unsharded layer's.
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  assert len(jax.devices()) >= 8
  x, mask = T.random_inputs(8, 8, 24, 8, num_real=[24, 20, 24, 9, 24, 24, 17, 24])
  module = AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 4, 1 / 8))
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  loss = lambda v, x, m: jnp.sum(jnp.square(module.apply(v, x, m)))
  value_and_grad = jax.value_and_grad(loss, argnums=(0, 1))
  mesh = Mesh(np.array(jax.devices()[:8]), ('data',))
  rows = NamedSharding(mesh, P('data'))
  sharded = jax.jit(value_and_grad, in_shardings=(NamedSharding(mesh, P()), rows, rows))
  (value, grads), (value8, grads8) = value_and_grad(variables, x, mask), sharded(
      variables, x, mask)
  np.testing.assert_allclose(float(value8), float(value), rtol=1e-5)
  # Summed over rows in another order when sharded: float32 error scales with the largest term.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
      np.asarray(a), np.asarray(b), rtol=1e-4, atol=max(1e-5, 2e-6 * float(np.abs(b).max()))),
      grads8, grads)


def test_sown_routing_is_a_distribution_and_its_argmax():
  x, mask = T.random_inputs(4, 2, 16, 8)
  module = AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 4, 1 / 8))
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  _, state = module.apply(variables, x, mask, mutable=['intermediates'])
  sown = state['intermediates']
  (probs,), (chosen,) = sown['router_probs'], sown['routed_head']
  assert probs.shape == (2, 16, 3) and probs.dtype == jnp.float32 and chosen.shape == (2, 16)
  np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(chosen), np.asarray(probs).argmax(-1))


# The default form passes check_mixer in tests/layers/test_mixer_kit.py; these are the ablations.
# The three costliest ablations are slow (make test, not make test-fast).
@pytest.mark.parametrize('options', [
    pytest.param(dict(routing='random'), marks=pytest.mark.slow), dict(routing='none'),
    pytest.param(dict(router_gate='straight_through'), marks=pytest.mark.slow),
    dict(feature_map='elu+1'), pytest.param(dict(feature_map='softmax'), marks=pytest.mark.slow),
    dict(per_head_projections=False),
], ids=lambda o: '-'.join(f'{v}' for v in o.values()))
def test_ablations_pass_check_mixer(options):
  report = T.check_mixer(AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 4, 1 / 8), **options))
  # AdaMRA's traits
  assert report['padding_amount'].startswith('skipped: its segments are floor(L * rate)')


def test_grads_reach_the_router():
  x, mask = T.random_inputs(5, 2, 16, 8, num_real=[16, 7])
  module = AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 4, 1 / 8))
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  loss = lambda v: jnp.sum(jnp.square(module.apply(v, x, mask)))
  router_grad = jax.grad(loss)(variables)['params']['router']['kernel']
  assert np.all(np.isfinite(router_grad)) and float(jnp.max(jnp.abs(router_grad))) > 0.0


@pytest.mark.parametrize('feature_map', ['relu', 'softmax'])   # routed path and all-heads path
def test_straight_through_gate_keeps_eq8_output_and_the_routers_gradient(feature_map):
  """router_gate='straight_through': forward, the Switch output without the factor P (W^O is
  affine, so (y_switch - b) = P * (y_straight - b)); backward, the router's gradient equals the
  Switch gate's for any loss linear in the output."""
  x, mask = T.random_inputs(8, 2, 16, 8, num_real=[16, 11])
  options = dict(num_heads=2, compression_rates=(1 / 2, 1 / 4, 1 / 8), feature_map=feature_map)
  switch = AdaMRA(**options)
  straight = AdaMRA(router_gate='straight_through', **options)
  variables = switch.init(jax.random.PRNGKey(0), x, mask)
  y_switch, state = switch.apply(variables, x, mask, mutable=['intermediates'])
  sown = state['intermediates']
  (probs,), (chosen,) = sown['router_probs'], sown['routed_head']
  gate = jnp.take_along_axis(probs, chosen[..., None], -1)
  assert float(jnp.min(gate)) < 0.9          # the factor is not ~1 anywhere it matters
  bias = variables['params']['out']['bias']
  y_straight = straight.apply(variables, x, mask)
  np.testing.assert_allclose(np.asarray(y_switch - bias), np.asarray(gate * (y_straight - bias)),
                             atol=1e-5, rtol=1e-4)
  cotangent = jax.random.normal(jax.random.PRNGKey(1), y_switch.shape)
  router_grad = lambda m: jax.grad(lambda v: jnp.sum(cotangent * m.apply(v, x, mask)))(
      variables)['params']['router']['kernel']
  g_switch, g_straight = router_grad(switch), router_grad(straight)
  assert float(jnp.max(jnp.abs(g_switch))) > 0.0
  np.testing.assert_allclose(np.asarray(g_straight), np.asarray(g_switch), atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize('feature_map', ['relu', 'softmax'])
def test_shapes_and_dtypes(dtype, feature_map):
  x, mask = T.random_inputs(6, 2, 12, 8, num_real=[12, 9], dtype=dtype)
  variables, y = T.init_apply(AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 4),
                                     feature_map=feature_map), x, mask)
  assert y.shape == x.shape and y.dtype == dtype
  assert bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))
  assert all(p.dtype == jnp.float32 for p in jax.tree_util.tree_leaves(variables))


def test_bad_input_messages():
  x, mask = T.random_inputs(0, 1, 16, 8)
  init = lambda m, xx=x: m.init(jax.random.PRNGKey(0), xx, mask if xx is x else None)
  with pytest.raises(ValueError, match='leaves no segment at length 16'):
    init(AdaMRA(num_heads=2, compression_rates=(1 / 2, 1 / 32)))
  with pytest.raises(ValueError, match=r'is not in \(0, 1\]'):
    init(AdaMRA(num_heads=2, compression_rates=(2.0,)))
  with pytest.raises(ValueError, match='does not divide the width'):
    init(AdaMRA(num_heads=3))
  with pytest.raises(ValueError, match='unknown routing'):
    init(AdaMRA(num_heads=2, compression_rates=(1 / 2,), routing='topk'))
  with pytest.raises(ValueError, match='unknown router_gate'):
    init(AdaMRA(num_heads=2, compression_rates=(1 / 2,), router_gate='gumbel'))
  with pytest.raises(ValueError, match='unknown feature_map'):
    init(AdaMRA(num_heads=2, compression_rates=(1 / 2,), feature_map='tanh'))
  with pytest.raises(ValueError, match=r'expected input of shape \[batch, length, dim\]'):
    init(AdaMRA(num_heads=2), x[0])


def test_registry_and_dropout():
  m = build_mixer('adamra', shared=dict(num_heads=2, causal=False, dropout_rate=0.5),
                  compression_rates=(1 / 2, 1 / 4))
  assert isinstance(m, AdaMRA) and m.num_heads == 2 and m.dropout_rate == 0.5
  with pytest.raises(ValueError, match='cannot run causally'):
    build_mixer('adamra', shared=dict(num_heads=2, causal=True))
  x, mask = T.random_inputs(7, 1, 8, 8)
  variables = m.init(jax.random.PRNGKey(0), x, mask)
  y_eval = m.apply(variables, x, mask)
  y_train = m.apply(variables, x, mask, deterministic=False,
                    rngs={'dropout': jax.random.PRNGKey(1)})
  assert np.all(np.isfinite(y_train)) and not np.allclose(y_eval, y_train)
