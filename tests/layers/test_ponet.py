"""PoNet: each pooling vs a plain numpy loop, the full mixer vs a numpy re-implementation with the
same weights, ablation switches, padding contract, jit, grads, dtypes and bad-input messages."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import PoNet, build_mixer
from poolformers_jax.layers.common import NEG_INF
from poolformers_jax.layers.ponet import (
  chunk_max_pool,
  chunk_segment_ids,
  global_aggregation,
  local_max_pool,
  segment_max_pool,
)

# ---- plain numpy references (loops, float64) ---------------------------------------------------


def ga_np(q, k, mask, cross=True):
  """q, k: [B, L, H, Dh] -> g' [B, H, Dh]."""
  b, l, h, dh = q.shape
  out = np.zeros((b, h, dh))
  for bi in range(b):
    real = [i for i in range(l) if mask[bi, i]]
    for hi in range(h):
      g = sum(q[bi, i, hi] for i in real) / len(real)
      if not cross:
        out[bi, hi] = g
        continue
      s = np.array([g @ k[bi, i, hi] for i in real]) / np.sqrt(dh)
      w = np.exp(s - s.max())
      w /= w.sum()
      out[bi, hi] = sum(wi * k[bi, i, hi] for wi, i in zip(w, real))
  return out


def smp_np(x, mask, seg):
  b, l, d = x.shape
  out = np.zeros_like(x)
  for bi in range(b):
    for i in range(l):
      if mask[bi, i]:
        members = [j for j in range(l) if mask[bi, j] and seg[bi, j] == seg[bi, i]]
        out[bi, i] = np.max(x[bi, members], axis=0)
  return out


def lmp_np(x, mask, window):
  b, l, d = x.shape
  out = np.zeros_like(x)
  for bi in range(b):
    for i in range(l):
      if mask[bi, i]:
        near = [j for j in range(i - window // 2, i + window // 2 + 1)
                if 0 <= j < l and mask[bi, j]]
        out[bi, i] = np.max(x[bi, near], axis=0)
  return out


def _dense(params, name, x):
  p = params['params'][name]
  return x @ np.asarray(p['kernel'], np.float64) + np.asarray(p['bias'], np.float64)


def ponet_np(params, x, mask, seg, heads, *, window=3, boundary=None, ga=True, cross=True,
             smp=True, lmp=True):
  """PoNet from the slides + the official code (docs/papers/ponet.md), independent of the module."""
  x = np.asarray(x, np.float64)
  mask = np.asarray(mask)
  b, l, d = x.shape
  keep = mask if boundary is None else mask & ~boundary
  gated = np.zeros((b, l, d))
  if ga:
    q = _dense(params, 'query', x).reshape(b, l, heads, d // heads)
    k = _dense(params, 'key', x).reshape(b, l, heads, d // heads)
    gated += ga_np(q, k, mask, cross).reshape(b, 1, d)
  if smp:
    gated += smp_np(_dense(params, 'segment', x), mask, seg) * keep[..., None]
  fused = gated * _dense(params, 'gate', x) if (ga or smp) else gated
  if lmp:
    fused = fused + lmp_np(_dense(params, 'local', x), keep, window)
  return _dense(params, 'out', fused * mask[..., None])


def lra_segments(b, l, segment_num):
  seg_len = l // segment_num + 1
  return np.tile(np.arange(l) // seg_len, (b, 1))


# ---- the three poolings alone ----------------------------------------------------------------


def test_poolings_match_numpy_loops():
  rng = np.random.default_rng(0)
  b, l, h, dh = 2, 11, 2, 3
  x = rng.standard_normal((b, l, h * dh))
  (w_q, w_k) = rng.standard_normal((2, h * dh, h * dh))
  (b_q, b_k) = rng.standard_normal((2, h * dh))
  q, k = (x @ w_q + b_q).reshape(b, l, h, dh), (x @ w_k + b_k).reshape(b, l, h, dh)
  mask = np.arange(l)[None] < np.array([[11], [6]])
  for cross in (False, True):  # GA folds the projections into its averages: same values
    g, w = global_aggregation(jnp.asarray(x), jnp.asarray(mask), (w_q, b_q), (w_k, b_k), h,
                              cross_attention=cross)
    np.testing.assert_allclose(np.asarray(g).reshape(b, h, dh), ga_np(q, k, mask, cross),
                               atol=1e-5, rtol=1e-5)
  assert float(jnp.max(w[1, :, 6:])) == 0.0  # padded keys get no weight

  x = rng.standard_normal((b, l, 4))
  ids = rng.integers(0, 4, (b, l))              # non-contiguous sentence ids
  pooled = segment_max_pool(jnp.asarray(x), jnp.asarray(mask), jnp.asarray(ids))
  np.testing.assert_allclose(np.asarray(pooled), smp_np(x, mask, ids), atol=1e-6)
  for segment_num in (1, 3, 4, 11):               # seg_len 12, 4, 3, 2
    chunked = chunk_max_pool(jnp.asarray(x), jnp.asarray(mask), segment_num)
    np.testing.assert_allclose(np.asarray(chunked),
                               smp_np(x, mask, lra_segments(b, l, segment_num)), atol=1e-6)
  np.testing.assert_array_equal(np.asarray(chunk_segment_ids(2048, 64)), np.arange(2048) // 33)
  for window in (1, 3, 5):
    pooled = local_max_pool(jnp.asarray(x), jnp.asarray(mask), window)
    np.testing.assert_allclose(np.asarray(pooled), lmp_np(x, mask, window), atol=1e-6)


def test_local_max_pool_gradient_goes_to_the_first_maximum():
  # Small integers make many ties: each output's cotangent must land on the first maximum of its
  # window (a loop, and XLA's own max-pool gradient, which the shifted-copy form replaces).
  rng = np.random.default_rng(1)
  b, l, d = 2, 9, 3
  x = jnp.asarray(rng.integers(-2, 3, (b, l, d)), jnp.float32)
  mask = np.arange(l)[None] < np.array([[9], [6]])
  c = jnp.asarray(rng.standard_normal((b, l, d)), jnp.float32)
  keep = jnp.asarray(mask)[..., None]
  max_pool = lambda x, w: nn.max_pool(jnp.where(keep, x, NEG_INF), (w,), strides=(1,),
                                      padding='SAME')
  for window in (1, 3, 5):
    grad = jax.grad(lambda x, w=window: jnp.sum(c * local_max_pool(x, jnp.asarray(mask), w)))(x)
    expected = np.zeros((b, l, d), np.float32)
    for bi, i, di in np.ndindex(b, l, d):
      if mask[bi, i]:
        near = [j for j in range(i - window // 2, i + window // 2 + 1)
                if 0 <= j < l and mask[bi, j]]
        expected[bi, near[int(np.argmax(np.asarray(x)[bi, near, di]))], di] += c[bi, i, di]
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-6)
    xla = jax.grad(lambda x, w=window: jnp.sum(c * jnp.where(keep, max_pool(x, w), 0)))(x)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(xla), atol=1e-6)


def test_padding_never_wins_a_max():
  # All real values are very negative and the padding huge: a leak would show immediately.
  x = jnp.full((1, 6, 2), -50.0).at[:, 3:].set(1e6)
  mask = jnp.arange(6)[None] < 3
  for pooled in (local_max_pool(x, mask), chunk_max_pool(x, mask, 1),
                 segment_max_pool(x, mask, jnp.zeros((1, 6), jnp.int32))):
    np.testing.assert_array_equal(np.asarray(pooled[0, :3]), -50.0)
    np.testing.assert_array_equal(np.asarray(pooled[0, 3:]), 0.0)


# ---- the full mixer -------------------------------------------------------------------------

ABLATIONS = [dict(), dict(use_ga_cross_attention=False), dict(use_ga=False), dict(use_smp=False),
             dict(use_lmp=False), dict(use_smp=False, use_lmp=False)]


def test_full_mixer_and_ablations_match_numpy():
  x, mask = T.random_inputs(0, 2, 10, 8, num_real=[10, 6])
  m = np.asarray(mask)
  full = PoNet(num_heads=2, segment_num=3)
  params, _ = T.init_apply(full, x, mask)
  seg = lra_segments(2, 10, 3)
  for switches in ABLATIONS:  # the full params hold every projection any ablation uses
    y = PoNet(num_heads=2, segment_num=3, **switches).apply(params, x, mask)
    ref = ponet_np(params, x, mask, seg, 2, ga=switches.get('use_ga', True),
                   cross=switches.get('use_ga_cross_attention', True),
                   smp=switches.get('use_smp', True), lmp=switches.get('use_lmp', True))
    np.testing.assert_allclose(np.asarray(y)[m], ref[m], atol=2e-5, rtol=2e-4,
                               err_msg=str(switches))

  # use_lmp=False removes exactly the l term: full - ablated = W_out . LMP(H_L) (linear output
  # projection).
  p = params['params']
  l_term = local_max_pool(x @ p['local']['kernel'] + p['local']['bias'], mask) @ p['out']['kernel']
  ablated = PoNet(num_heads=2, segment_num=3, use_lmp=False)
  diff = full.apply(params, x, mask) - ablated.apply(params, x, mask)
  np.testing.assert_allclose(np.asarray(diff)[m], np.asarray(l_term)[m], atol=1e-5)


def test_ablations_create_only_their_parameters():
  x, mask = T.random_inputs(0, 1, 5, 4)
  names = lambda **kw: set(PoNet(num_heads=2, segment_num=2, **kw).init(
      jax.random.PRNGKey(0), x, mask)['params'])
  assert names() == {'query', 'key', 'gate', 'segment', 'local', 'out'}
  assert names(use_ga=False) == {'gate', 'segment', 'local', 'out'}
  assert names(use_ga_cross_attention=False) == {'query', 'gate', 'segment', 'local', 'out'}
  assert names(use_smp=False, use_lmp=False) == {'query', 'key', 'gate', 'out'}
  assert names(use_ga=False, use_smp=False) == {'local', 'out'}


def test_explicit_segment_ids_and_boundary_match_numpy():
  x, mask = T.random_inputs(1, 2, 9, 8, num_real=[9, 7])
  seg = np.array([[0, 1, 1, 1, 2, 3, 3, 4, 5], [0, 1, 1, 2, 3, 3, 4, 5, 5]])
  boundary = np.isin(seg, [0, 2, 4]) & np.asarray(mask)  # [CLS], [SEP]s: single-token segments
  module = PoNet(num_heads=2, segment_num=1)
  params = module.init(jax.random.PRNGKey(0), x, mask)
  m = np.asarray(mask)
  y = module.apply(params, x, mask, segment_ids=jnp.asarray(seg))
  np.testing.assert_allclose(np.asarray(y)[m], ponet_np(params, x, mask, seg, 2)[m], atol=2e-5,
                             rtol=2e-4)
  y = module.apply(params, x, mask, segment_ids=jnp.asarray(seg),
                   boundary_mask=jnp.asarray(boundary))
  ref = ponet_np(params, x, mask, seg, 2, boundary=boundary)
  np.testing.assert_allclose(np.asarray(y)[m], ref[m], atol=2e-5, rtol=2e-4)
  # explicit ids equal to the LRA chunks give the segment_num output exactly
  chunks = jnp.asarray(lra_segments(2, 9, 4))
  np.testing.assert_allclose(np.asarray(module.apply(params, x, mask, segment_ids=chunks)),
                             np.asarray(PoNet(num_heads=2, segment_num=4).apply(params, x, mask)),
                             atol=1e-6)


class _WithSentenceIds(nn.Module):
  """PoNet fed sentences of 3 tokens (ids from positions only), for the padding-amount check."""

  @nn.compact
  def __call__(self, x, mask=None, *, deterministic=True):
    ids = jnp.broadcast_to(jnp.arange(x.shape[1]) // 3, x.shape[:2])
    return PoNet(num_heads=4, segment_num=1)(x, mask, segment_ids=ids)


@pytest.mark.parametrize('ablation', ABLATIONS[1:], ids=lambda a: '-'.join(sorted(a)))
def test_ablations_pass_check_mixer(ablation):
  """(The full mixer: tests/layers/test_mixer_kit.py.) Without SMP no segment depends on the
  padded length, so the amount of padding is checked too."""
  report = T.check_mixer(PoNet(num_heads=4, segment_num=3, **ablation))
  assert (report['padding_amount'] == 'ok') == (not ablation.get('use_smp', True)), report


def test_padding_amount_holds_with_sentences_and_not_with_lra_chunks():
  x, mask = T.random_inputs(1, 2, 12, 16, num_real=[12, 5])
  # Explicit sentence ids: every property holds (the wrapper has no dropout of its own).
  report = T.check_mixer(_WithSentenceIds(), skip={'dropout': 'the wrapper has none'})
  assert report['padding_amount'] == 'ok'
  # With LRA chunks the amount of padding may change outputs (segments live on the padded
  # length): PoNet declares it, and the check does fail.
  module = PoNet(num_heads=4, segment_num=3)
  assert 'padding_amount' in T.not_by_design(module)
  with pytest.raises(T.PropertyError, match='^padding_amount: '):
    T.assert_padding_amount_irrelevant(module, x, mask, extra=5)


def test_no_dropout_inside_and_intermediates():
  """No dropout field (the official mixer has none): training mode changes nothing, and the
  models' shared dropout_rate does not reach it (test_bad_input_messages builds one so)."""
  x, mask = T.random_inputs(2, 1, 6, 8, num_real=[4])
  module = PoNet(num_heads=2, segment_num=2)
  params = module.init(jax.random.PRNGKey(0), x, mask)
  train = module.apply(params, x, mask, deterministic=False,
                       rngs={'dropout': jax.random.PRNGKey(1)})
  np.testing.assert_array_equal(np.asarray(train), np.asarray(module.apply(params, x, mask)))
  _, state = module.apply(params, x, mask, mutable=['intermediates'])
  (w,) = state['intermediates']['ga_weights']
  assert w.shape == (1, 2, 6)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_shapes_and_dtypes(dtype):
  x, mask = T.random_inputs(3, 2, 6, 8, num_real=[6, 3], dtype=dtype)
  params, y = T.init_apply(PoNet(num_heads=2, segment_num=2), x, mask)
  assert y.shape == x.shape and y.dtype == dtype
  assert bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))
  if dtype == jnp.bfloat16:  # bf16 stays close to the float32 computation
    y32 = PoNet(num_heads=2, segment_num=2).apply(params, x.astype(jnp.float32), mask)
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(y32), atol=0.1, rtol=0.1)


def test_bad_input_messages():
  x, mask = T.random_inputs(0, 2, 6, 8)
  init = lambda module, *a, **kw: module.init(jax.random.PRNGKey(0), *a, **kw)
  with pytest.raises(ValueError, match='larger than the input length 6'):
    init(PoNet(num_heads=2, segment_num=2, local_window=7), x, mask)
  with pytest.raises(ValueError, match='positive odd number'):
    init(PoNet(num_heads=2, segment_num=2, local_window=2), x, mask)
  with pytest.raises(ValueError, match='segment_num=0 must be >= 1'):
    init(PoNet(num_heads=2, segment_num=0), x, mask)
  with pytest.raises(ValueError, match=r'segment_ids shape \(2, 5\) does not match'):
    init(PoNet(num_heads=2, segment_num=2), x, mask, segment_ids=jnp.zeros((2, 5), jnp.int32))
  with pytest.raises(ValueError, match='segment_ids must be integers'):
    init(PoNet(num_heads=2, segment_num=2), x, mask, segment_ids=jnp.zeros((2, 6)))
  with pytest.raises(ValueError, match='all False'):
    init(PoNet(num_heads=2, segment_num=2, use_ga=False, use_smp=False, use_lmp=False), x, mask)
  with pytest.raises(ValueError, match='does not divide the width'):
    init(PoNet(num_heads=3, segment_num=2), x, mask)
  with pytest.raises(ValueError, match='cannot run causally'):
    build_mixer('ponet', shared=dict(num_heads=2, causal=True), segment_num=2)
  m = build_mixer('ponet', shared=dict(num_heads=2, dropout_rate=0.1), segment_num=64,
                  use_lmp=False)
  assert isinstance(m, PoNet) and m.segment_num == 64 and not m.use_lmp
  # A required argument left out: one line naming it and where it goes (was a raw TypeError).
  with pytest.raises(ValueError, match=r"^mixer 'ponet' \(PoNet\) needs \['segment_num'\]: set "
                     r'config.model.mixer_kwargs.segment_num'):
    build_mixer('ponet', shared=dict(num_heads=2))


@pytest.mark.parametrize('name', ['lra_encoder', 'lra_dual_encoder', 'char_lm', 'vit',
                                  'transformer_seq2seq'])
def test_every_model_names_a_missing_mixer_argument_when_built(name):
  """Through every model that takes config.model.mixer: the same line, before any trace."""
  import ml_collections

  from poolformers_jax.models import build_model
  sizes = {'lra_encoder': dict(vocab_size=18, max_length=8, num_classes=10),
           'lra_dual_encoder': dict(vocab_size=18, max_length=8, num_classes=2),
           'char_lm': dict(vocab_size=18),
           'vit': dict(num_classes=10, depth=1, hidden_dim=16, num_heads=2),
           'transformer_seq2seq': dict(vocab_size=18)}[name]
  config = ml_collections.ConfigDict(dict(name=name, mixer='ponet', mixer_kwargs={}, **sizes))
  with pytest.raises(ValueError, match=r"^mixer 'ponet' \(PoNet\) needs \['segment_num'\]"):
    build_model(config)
  with config.unlocked():
    config.mixer_kwargs = {'segment_num': 2}
  assert build_model(config).mixer_kwargs == {'segment_num': 2}
