"""LRA protocol as the reference code runs it: eval cadence, byte cut, padded mean pooling,
OneCycleLR and beta1, PyTorch-default initialisation."""
import dataclasses
import functools
import math

import flax
import jax
import jax.numpy as jnp
import lra_image
import lra_listops
import lra_pathfinder
import lra_retrieval
import lra_text
import numpy as np
import optax
import pytest
from tiny_runs import sigterm_at_step, tiny_config

from poolformers_jax import config as config_lib
from poolformers_jax.config.lra import FAMILIES
from poolformers_jax.data import get_data_config, lra
from poolformers_jax.models.encoder import POOLINGS, SequenceEncoder
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import optim, param_init, setup as setup_lib
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup


def test_full_configs_evaluate_as_often_as_the_reference_and_cut_bytes_at_4000():
  """PoNet's / Nystromformer's lra_config.py eval_frequency; text and retrieval keep 4000 bytes
  and pad to 4096 (their datasets/text.py, retrieval.py)."""
  every = {lra_listops: 50, lra_text: 500, lra_retrieval: 300, lra_image: 175,
           lra_pathfinder: 312}
  for module, steps in every.items():
    config = module.get_config('ponet')
    assert config.eval_every_steps == steps, module.__name__
  for module in (lra_text, lra_retrieval):
    config = module.get_config('transformer')
    assert (config.data.max_tokens, config.data.max_length) == (4000, 4096)


def test_bytes_cut_at_max_tokens_then_padded():
  data_config = get_data_config('lra_text')
  data_config.update(max_length=8, max_tokens=5)
  np.testing.assert_array_equal(lra.byte_tokens('abcdefghij', data_config, 'review'),
                                [98, 99, 100, 101, 102, 0, 0, 0])
  data_config.max_tokens = 0                         # 0 = max_length
  np.testing.assert_array_equal(lra.byte_tokens('abcdefghij', data_config, 'review'),
                                [98, 99, 100, 101, 102, 103, 104, 105])


def test_mean_padded_pooling_is_the_reference_sum_over_padded_length():
  """model.py of the reference: (LN(x) * mask).mean(dim=1) over all L positions."""
  x = np.random.default_rng(0).normal(size=(2, 8, 3)).astype(np.float32)
  mask = np.arange(8)[None, :] < np.array([[4], [6]])
  reference = (x * mask[..., None]).sum(1) / 8
  padded = POOLINGS['mean_padded'](jnp.asarray(x), jnp.asarray(mask))
  np.testing.assert_allclose(padded, reference, rtol=1e-6)
  np.testing.assert_allclose(POOLINGS['mean'](jnp.asarray(x), jnp.asarray(mask)),
                             reference * 8 / np.array([[4], [6]]), rtol=1e-6)
  # Less padding changes the reference's features; the default's stay (real tokens only).
  short = POOLINGS['mean_padded'](jnp.asarray(x[:, :6]), jnp.asarray(mask[:, :6]))
  np.testing.assert_allclose(short, reference * 8 / 6, rtol=1e-6)
  with pytest.raises(ValueError, match="unknown pooling 'max'"):
    SequenceEncoder(vocab_size=5, max_length=4, pooling='max').init(
        jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32))


def _adamw_torch(params, grads, lrs, b1s, b2=0.999, eps=1e-6):
  """torch.optim.AdamW's update with a per-step beta1 (what OneCycleLR's momentum cycling sets)."""
  p, m, v = params.copy(), np.zeros_like(params), np.zeros_like(params)
  for t, (g, lr, b1) in enumerate(zip(grads, lrs, b1s), start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
  return p


def _torch_one_cycle(max_lr, total_steps, pct_start, step_num):
  """torch.optim.lr_scheduler.OneCycleLR.get_lr at `step_num`, transcribed (two phases,
  anneal_strategy='linear', the other arguments at their defaults, as the reference's
  run_tasks.py builds it): (learning rate, beta1)."""
  group = {'initial_lr': max_lr / 25.0, 'max_lr': max_lr, 'max_momentum': 0.95,
           'base_momentum': 0.85}
  group['min_lr'] = group['initial_lr'] / 1e4
  phases = [dict(end_step=float(pct_start * total_steps) - 1, start_lr='initial_lr',
                 end_lr='max_lr', start_momentum='max_momentum', end_momentum='base_momentum'),
            dict(end_step=total_steps - 1, start_lr='max_lr', end_lr='min_lr',
                 start_momentum='base_momentum', end_momentum='max_momentum')]
  anneal = lambda start, end, pct: (end - start) * pct + start
  start_step = 0.0
  for i, phase in enumerate(phases):
    end_step = phase['end_step']
    if step_num <= end_step or i == len(phases) - 1:
      pct = (step_num - start_step) / (end_step - start_step)
      return (anneal(group[phase['start_lr']], group[phase['end_lr']], pct),
              anneal(group[phase['start_momentum']], group[phase['end_momentum']], pct))
    start_step = phase['end_step']


# (warmup, steps): every LRA task's, plus a pct_start that is not exact in binary and no warmup.
@pytest.mark.parametrize('warmup,total', [(1000, 5000), (8000, 20000), (800, 30000), (175, 35000),
                                          (312, 62400), (3, 7), (0, 10), (20, 100)])
def test_one_cycle_lr_and_beta1_equal_pytorch_onecycle_at_every_step(warmup, total):
  config = config_lib.override(tiny_config('/unused'), **{
      'optimizer.schedule': 'one_cycle', 'optimizer.warmup_steps': warmup,
      'num_train_steps': total, 'optimizer.learning_rate': 1e-4})
  lr = optim.make_schedule(setup_lib.optimizer_settings(config))
  b1 = optim.one_cycle_b1(warmup, total)
  steps = jnp.arange(total)
  expected = np.array([_torch_one_cycle(1e-4, total, warmup / total, s) for s in range(total)])
  np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(lr))(steps)), expected[:, 0], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(b1))(steps)), expected[:, 1], rtol=1e-6)
  if warmup:   # the peak at step warmup - 1, the end value at the last step
    assert int(np.argmax(expected[:, 0])) == warmup - 1
  assert expected[-1, 0] == pytest.approx(1e-4 / 25 / 1e4, rel=1e-12)


def test_one_cycle_momentum_cycles_beta1_like_pytorch():
  config = config_lib.override(tiny_config('/unused'), **{
      'optimizer.schedule': 'one_cycle', 'optimizer.cycle_momentum': True,
      'optimizer.warmup_steps': 4, 'num_train_steps': 12, 'optimizer.learning_rate': 0.1})
  settings = setup_lib.optimizer_settings(config)
  b1 = optim.one_cycle_b1(4, 12)
  # PyTorch: the rise ends at float(4 / 12 * 12) - 1 = 3, the fall at 11.
  np.testing.assert_allclose([float(b1(s)) for s in (0, 3, 7, 11)],
                             [0.95, 0.85, 0.90, 0.95], rtol=1e-6)
  tx = optim.make_optimizer(settings)
  rng = np.random.default_rng(0)
  grads = rng.normal(size=(6, 3)).astype(np.float32)
  params = {'w': jnp.zeros((3,), jnp.float32)}       # 1D: no weight decay (mask)
  state = tx.init(params)

  @jax.jit
  def step(params, state, g):
    updates, state = tx.update({'w': g}, state, params)
    return optax.apply_updates(params, updates), state

  for g in grads:
    params, state = step(params, state, jnp.asarray(g))
  torch_values = [_torch_one_cycle(0.1, 12, 4 / 12, s) for s in range(6)]
  expected = _adamw_torch(np.zeros(3), grads, [v[0] for v in torch_values],
                          [v[1] for v in torch_values])
  np.testing.assert_allclose(np.asarray(params['w']), expected, rtol=1e-5, atol=1e-7)
  with pytest.raises(ValueError, match='needs schedule one_cycle'):
    optim.make_optimizer(dataclasses.replace(settings, schedule='cosine'))


# ------------------------------------------------------------------ config.param_init = 'torch'

@functools.cache
def _setup(family, param_init=None):
  scheme = {} if param_init is None else {'param_init': param_init}
  return make_setup(tiny_config('/unused', family, **{'model.dim': 32, 'model.mlp_dim': 64},
                                **scheme), need_files=False)


@functools.cache
def _fresh_and_torch(family):
  """A jitted rng -> (model.init's parameters, the same redrawn by 'torch'), flattened."""
  setup = _setup(family)

  def both(rng):
    fresh = setup.model.init({'params': rng, 'dropout': rng}, setup_lib.dummy_inputs(setup.info),
                             deterministic=True)['params']
    return fresh, param_init.initialize('torch', fresh, rng)
  flat = lambda tree: flax.traverse_util.flatten_dict(jax.device_get(tree), sep='/')
  return lambda seed: tuple(map(flat, jax.jit(both)(jax.random.PRNGKey(seed))))


def _fan_in(name, shape):
  """PyTorch's fan-in of the module owning parameter `name` (nn.Linear: in_features;
  nn.Conv1d/2d: in_channels x kernel size; AdaMRA's per-head [H, in, out]: in)."""
  if name.rsplit('/', 1)[-1].startswith('head_'):
    return shape[1]
  return int(np.prod(shape[:-1]))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_torch_init_draws_pytorch_defaults_for_every_parameter(family):
  """Every Dense / Conv kernel and its bias ~ U(+-1/sqrt(fan_in)), embeddings ~ N(0, 0.02^2),
  LayerNorms (and MSAC's relative bias, which the reference has no module for) as built."""
  fresh, torch = _fresh_and_torch(family)(0)
  unit = []                             # every uniform draw divided by its bound: U(-1, 1)
  for name, value in torch.items():
    leaf = name.rsplit('/', 1)[-1]
    if leaf in ('embedding', 'pos_embedding'):
      assert abs(value.mean()) < 0.003 and value.std() == pytest.approx(0.02, rel=0.08), name
      assert np.abs(value).max() > 2.5 * 0.02, f'{name}: looks truncated'   # a plain normal_
      continue
    kernel = name[:-len('bias')] + 'kernel' if leaf == 'bias' else name
    if leaf == 'kernel' or leaf.startswith('head_') or (leaf == 'bias' and kernel in torch):
      bound = 1 / np.sqrt(_fan_in(kernel, torch[kernel].shape))
      assert np.abs(value).max() <= bound, name
      if value.size >= 64:              # draws reach their bound: the fan-in is not too small
        assert np.abs(value).max() > 0.9 * bound, name
      assert not np.array_equal(value, fresh[name]), name
      unit.append(value.ravel() / bound)
    else:
      assert leaf in ('scale', 'bias', 'relative_bias'), name
      np.testing.assert_array_equal(value, fresh[name], err_msg=name)
  unit = np.concatenate(unit)
  assert abs(unit.mean()) < 4 * np.sqrt(1 / 3 / unit.size)
  assert unit.var() == pytest.approx(1 / 3, rel=0.03)
  expected_kept = {n for n in torch if '_norm/' in n or '/norm' in n or 'relative_bias' in n}
  assert set(param_init.kept(_setup(family).abstract_state.params)) == expected_kept


def test_torch_init_is_seeded_and_applied_where_the_state_is_made():
  draw = _fresh_and_torch('transformer')
  (_, a), (_, b), (_, c) = draw(3), draw(3), draw(4)
  kernel = 'encoder/block_0/MultiHeadAttention_0/query/kernel'
  for name in a:
    np.testing.assert_array_equal(a[name], b[name])
  assert not np.array_equal(a[kernel], c[kernel])
  # The train state holds the redrawn parameters with config.param_init='torch', and exactly
  # what model.init makes with 'default' (the same jitted computation: bit for bit).
  fresh, torch = draw(3)
  for scheme, expected in (('torch', torch), ('default', fresh)):
    state = setup_lib.create_train_state(_setup('transformer', scheme), jax.random.PRNGKey(3))
    got = flax.traverse_util.flatten_dict(jax.device_get(state.params), sep='/')
    assert got.keys() == expected.keys()
    for name in got:
      np.testing.assert_array_equal(got[name], expected[name], err_msg=f'{scheme} {name}')
  with pytest.raises(ValueError, match=r"config.param_init='jax' is unknown; choose one of"):
    make_setup(config_lib.override(tiny_config('/unused'), param_init='jax'), need_files=False)


# ------------------------------------------------------- evaluation: dev stream, test drop_last

def test_validation_stream_resumes_exactly_and_test_drops_the_last_batch(data_dir, tmp_path):
  """eval_num_batches: each validation reads the next batches of the endless reshuffled stream,
  whose position is checkpointed (a resumed run validates on the batches the straight run saw);
  test_drop_last: test on the first N - N % eval_batch_size examples (tiny: 20 -> 16)."""
  config = tiny_config(data_dir, num_train_steps=6, eval_every_steps=2, checkpoint_every_steps=2,
                       eval_num_batches=2, test_drop_last=True, eval_batch_size=8)
  straight = train_and_evaluate(config, str(tmp_path / 'straight'))
  interrupted = str(tmp_path / 'interrupted')
  with sigterm_at_step(2):
    assert train_and_evaluate(config, interrupted).status == 'preempted'
  resumed = train_and_evaluate(config, interrupted)
  want = read_metrics(str(tmp_path / 'straight'), 'validation')
  got = read_metrics(interrupted, 'validation')
  assert [r['step'] for r in want] == [2, 4, 6] and [r['step'] for r in got] == [2, 4, 6]
  for w, g in zip(want, got):
    assert w['count'] == g['count'] == 16                   # 2 batches of 8, all real
    assert g['loss'] == pytest.approx(w['loss'], rel=1e-6)
  # Consecutive validations read different batches of the 20-example split (a fresh pass each
  # time would repeat the same 16 examples); the loss moves with the batches and the model.
  assert len({round(r['loss'], 7) for r in want}) == 3
  assert straight.test['count'] == resumed.test['count'] == 16
  exact = tiny_config(data_dir, num_train_steps=2, eval_every_steps=2, eval_batch_size=8)
  assert train_and_evaluate(exact, str(tmp_path / 'exact')).test['count'] == 20


# ------------------------------------------------------------------ the `reference` config word

PROTOCOL_KEYS = ('model.pooling', 'model.activation', 'model.layer_norm_epsilon', 'param_init',
                 'optimizer.cycle_momentum', 'test_drop_last', 'eval_num_batches')


def _flat(config):
  return flax.traverse_util.flatten_dict(config.to_dict(), sep='.')


@pytest.mark.parametrize('module,batches', [(lra_listops, 62), (lra_text, 781),
                                            (lra_retrieval, 565), (lra_image, 20),
                                            (lra_pathfinder, 312)])
def test_reference_word_sets_the_reference_protocol_and_nothing_else(module, batches):
  """lra_config.py num_eval_steps per task; every other key as in our protocol."""
  ours, ref = _flat(module.get_config('ponet')), _flat(module.get_config('ponet,reference'))
  assert _flat(module.get_config('ponet,ours')) == ours
  assert [ours[k] for k in PROTOCOL_KEYS] == ['mean', 'gelu', 1e-6, 'default', False, False, 0]
  assert [ref[k] for k in PROTOCOL_KEYS] == ['mean_padded', 'gelu_exact', 1e-5, 'torch', True,
                                             True, batches]
  assert {k: v for k, v in ref.items() if k not in PROTOCOL_KEYS} == {
      k: v for k, v in ours.items() if k not in PROTOCOL_KEYS}


def test_reference_word_per_family_and_size():
  transformer = lra_listops.get_config('transformer,reference')
  assert transformer.model.mixer_kwargs.dropout_on == 'weights'      # attention.py drop_attn
  linear = lra_listops.get_config('reference,linear_reference')      # words in any order
  assert (linear.model.mixer, linear.model.mixer_kwargs.normalizer) == ('linear', 'padded_length')
  small = lra_listops.get_config('adamra,small,reference')
  assert small.param_init == 'torch' and small.eval_num_batches == 0   # CPU sizes: exact eval
  assert small.model.mixer_kwargs.router_gate == 'probability'


def _reference_logits(p, tokens, heads, layers):
  """model.py + attention.py (softmax) + model_wrapper.py of the reference in eval mode, in
  numpy: pre-LN blocks (nn.LayerNorm eps 1e-5, nn.GELU erf), -1e6 on padded keys, final
  LN(x) * mask averaged over all L positions, head Linear-ReLU-Linear."""
  e = jax.tree.map(lambda a: np.asarray(a, np.float64), p['encoder'])
  ln = lambda x, n: ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
                     * n['scale'] + n['bias'])
  lin = lambda x, n: x @ np.asarray(n['kernel'], np.float64) + np.asarray(n['bias'], np.float64)
  gelu = np.vectorize(lambda t: 0.5 * t * (1 + math.erf(t / math.sqrt(2))))
  b, l = tokens.shape
  mask = (tokens != 0).astype(np.float64)
  x = e['token_embedding']['embedding'][tokens] + e['position_embedding']['pos_embedding'][0, :l]
  for i in range(layers):
    block, a = e[f'block_{i}'], e[f'block_{i}']['MultiHeadAttention_0']
    h = ln(x, block['norm1'])
    q, k, v = (lin(h, a[n]).reshape(b, l, heads, -1).transpose(0, 2, 1, 3)
               for n in ('query', 'key', 'value'))
    dot = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) - 1e6 * (1 - mask[:, None, None])
    attn = np.exp(dot - dot.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    x = lin((attn @ v).transpose(0, 2, 1, 3).reshape(b, l, -1), a['out']) + x
    x = lin(gelu(lin(ln(x, block['norm2']), block['mlp']['fc1'])), block['mlp']['fc2']) + x
  pooled = (ln(x, e['final_norm']) * mask[..., None]).mean(1)
  return lin(np.maximum(lin(pooled, p['head']['hidden']), 0), p['head']['logits'])


def test_reference_transformer_equals_a_transcription_of_the_lra_code():
  overrides = {'model.num_layers': 2, 'model.dim': 16, 'model.num_heads': 2}
  setup = make_setup(tiny_config('/unused', 'transformer,reference', **overrides),
                     need_files=False)
  state = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  params = jax.device_get(state.params)
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, setup.info.vocab_size, size=(3, 32)).astype(np.int32)
  tokens[1, 20:], tokens[2, 7:] = 0, 0
  expected = _reference_logits(params, tokens, heads=2, layers=2)
  logits = np.asarray(setup.model.apply({'params': params}, jnp.asarray(tokens)))
  np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
  # Our protocol's encoder (tanh GELU, eps 1e-6, real-token mean) is another function.
  ours = make_setup(tiny_config('/unused', 'transformer', **overrides), need_files=False)
  other = np.asarray(ours.model.apply({'params': params}, jnp.asarray(tokens)))
  assert np.abs(other - expected).max() > 100 * np.abs(logits - expected).max()
