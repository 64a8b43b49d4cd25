"""Generation from the character LM (models/lm_decode.py, models/mixer_steps.py): every step's
logits on the cache equal the full forward's at that position, for every causal mixer of the
registry and every kind of position; greedy generation is the full forward's argmax, token by
token; top_k=1 is greedy, a seed reproduces its sample; a tiny LM trained on a periodic text
continues the period; bad settings are refused before tracing."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from poolformers_jax.layers.registry import MIXERS, causal_mixers
from poolformers_jax.models import lm_decode
from poolformers_jax.models.lm import CharTransformerLM, lm_inputs_targets

VOCAB = 11

# (mixer, options, positions): every causal mixer, each position kind, the forms with their own
# decoding paths (ContextPool's placements, predictors and weights; SAC's regular convolution,
# MSAC's split heads and a relative-bias table shorter than the text).
CASES = [
    ('softmax', {}, 'sinusoidal'),
    ('softmax', {}, 'rotary'),
    ('softmax', {}, 'learned'),
    ('softmax', {}, 'none'),
    ('linear', {}, 'sinusoidal'),
    ('linear', {'feature_map': 'relu'}, 'learned'),
    ('contextpool', {'predictor_dim': 8}, 'sinusoidal'),
    ('contextpool', {'placement': 'block_output'}, 'rotary'),
    ('contextpool', {'predictor': 'mlp', 'locality': 'fixed_window', 'weights': 'nonlocal'},
     'none'),
    ('contextpool', {'locality': 'adaptive_window', 'weights': 'uniform'}, 'learned'),
    ('sac', {'window': 3, 'regular_conv': True}, 'sinusoidal'),
    ('msac', {'windows': (1, 2, 3)}, 'learned'),
    ('msac', {'windows': (1, 2), 'heads': 'split', 'max_distance': 3}, 'none'),
]


def tiny_lm(mixer='softmax', options=None, positions='sinusoidal', **kwargs):
  return CharTransformerLM(vocab_size=VOCAB, num_layers=2, emb_dim=16, num_heads=2, mlp_dim=16,
                           mixer=mixer, mixer_kwargs=options, positions=positions, max_length=12,
                           **kwargs)


def tokens_of(seed, batch, length):
  return jnp.asarray(np.random.default_rng(seed).integers(1, VOCAB, (batch, length)), jnp.int32)


def test_the_cases_cover_every_causal_mixer():
  """Every causal mixer of the library (a test's own registered mixers left out)."""
  ours = {name for name in causal_mixers()
          if MIXERS[name].__module__.startswith('poolformers_jax.layers.')}
  assert {mixer for mixer, _, _ in CASES} == ours == {'contextpool', 'linear', 'msac', 'sac',
                                                      'softmax'}


@pytest.mark.parametrize('mixer,options,positions', CASES)
def test_each_step_gives_the_full_forwards_logits(mixer, options, positions):
  """Teacher forcing on the cache, a token per step from position 0 (a prompt of 9), against one
  forward over the 9 tokens; the logits differ between positions, so each step is its own."""
  model = tiny_lm(mixer, options, positions)
  tokens = tokens_of(0, 2, 9)
  params = model.init(jax.random.PRNGKey(1), tokens)['params']
  full = model.apply({'params': params}, tokens)
  steps = jax.jit(lambda p, t: lm_decode.step_logits(model, p, t))(params, tokens)
  chex.assert_trees_all_close(steps, full, atol=1e-5, rtol=1e-5)
  assert float(jnp.abs(full[:, 1:] - full[:, :-1]).max()) > 1e-3


@pytest.mark.parametrize('mixer,options', [('softmax', {}), ('linear', {}),
                                           ('contextpool', {'predictor_dim': 8}),
                                           ('msac', {'windows': (1, 2)})])
def test_greedy_generation_is_the_full_forwards_argmax(mixer, options):
  """From a 3-token prompt, each generated token is the argmax (padding left out) of the full
  forward over the prompt and the tokens generated before it; top_k=1 at temperature 1 is the
  same; a seed reproduces its sample and another seed draws another."""
  model = tiny_lm(mixer, options)
  prompt = tokens_of(2, 2, 3)
  params = model.init(jax.random.PRNGKey(3), prompt)['params']
  key = jax.random.PRNGKey(0)
  greedy = lm_decode.make_generate(model, 8, temperature=0.0)(params, prompt, key)
  text = jnp.concatenate([prompt, greedy], axis=1)
  logits = model.apply({'params': params}, text[:, :-1])[:, 2:]
  expected = jnp.argmax(logits.at[..., 0].set(-jnp.inf), axis=-1)
  chex.assert_trees_all_equal(greedy, expected.astype(jnp.int32))
  top1 = lm_decode.make_generate(model, 8, temperature=1.0, top_k=1)(params, prompt, key)
  chex.assert_trees_all_equal(top1, greedy)
  sample = lm_decode.make_generate(model, 8, temperature=1.0)
  chex.assert_trees_all_equal(sample(params, prompt, key), sample(params, prompt, key))
  assert not np.array_equal(sample(params, prompt, key),
                            sample(params, prompt, jax.random.PRNGKey(1)))
  assert int(jnp.min(sample(params, prompt, key))) >= 1   # padding is never drawn


def test_top_k_samples_only_among_the_k_most_likely():
  logits = jnp.log(jnp.array([[0.0, 0.1, 0.2, 0.3, 0.4]] * 512) + 1e-9)
  drawn = jax.vmap(lambda key: lm_decode.draw(logits[:1], key, 1.0, 2))(
      jax.random.split(jax.random.PRNGKey(0), 512))
  assert set(np.unique(np.asarray(drawn)).tolist()) == {3, 4}


def test_a_tiny_lm_trained_on_a_period_continues_it():
  """'abcd' repeated (ids 1..4), a 1-layer LM, 150 Adam steps on 16-symbol windows: greedy
  generation from 'bc' writes 'dabcdabc...'."""
  model = CharTransformerLM(vocab_size=6, num_layers=1, emb_dim=16, num_heads=2, mlp_dim=32,
                            dropout_rate=0.0, attention_dropout_rate=0.0)
  period = np.arange(1, 5)
  windows = np.stack([np.roll(np.tile(period, 5), -s)[:17] for s in range(4)] * 2)
  inputs, targets = lm_inputs_targets(jnp.asarray(windows, jnp.int32))
  params = model.init(jax.random.PRNGKey(0), inputs)['params']
  tx = optax.adam(1e-2)

  @jax.jit
  def train_step(params, opt_state):
    def loss(p):
      logits = model.apply({'params': p}, inputs)
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    grads = jax.grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state

  opt_state = tx.init(params)
  for _ in range(150):
    params, opt_state = train_step(params, opt_state)
  out = lm_decode.make_generate(model, 12, temperature=0.0)(
      params, jnp.array([[2, 3]], jnp.int32), jax.random.PRNGKey(0))
  assert np.asarray(out)[0].tolist() == [4, 1, 2, 3] * 3


@pytest.mark.parametrize('model,settings,message', [
    (tiny_lm(), dict(prompt_length=0), 'the prompt is empty'),
    (tiny_lm(), dict(num_tokens=0), 'num_tokens=0: generate at least 1 token'),
    (tiny_lm(), dict(temperature=-0.5), 'temperature=-0.5 is negative'),
    (tiny_lm(), dict(top_k=12), r'top_k=12: use 1..11'),
    (tiny_lm(positions='learned'), dict(prompt_length=6, num_tokens=8),
     'a prompt of 6 symbols and 8 new tokens need 13 positions, more than the 12 of the learned'),
])
def test_bad_settings_are_refused_before_tracing(model, settings, message):
  args = dict(prompt_length=3, num_tokens=4, temperature=1.0, top_k=None) | settings
  with pytest.raises(ValueError, match=f'^{message}'):
    lm_decode.check_generation(model, **args)


@pytest.mark.parametrize('mixer,options,message', [
    ('linear', {'normalizer': 'padded_length'},
     "LinearAttention: normalizer='padded_length' scales by the padded length of the whole input"),
    ('softmax', {'use_bias': False}, 'MultiHeadAttention: use_bias=False has no decoding step'),
    ('contextpool', {'locality': 'random_sparse'},
     "ContextPoolStep: cached decoding supports predictor 'conv'/'mlp' and every locality but"),
])
def test_forms_without_a_decoding_step_are_refused(mixer, options, message):
  model = tiny_lm(mixer, options)
  prompt = tokens_of(0, 1, 2)
  params = model.init(jax.random.PRNGKey(0), prompt)['params']
  with pytest.raises(ValueError, match=f'^{message}'):
    lm_decode.generate(model, params, prompt, 2, jax.random.PRNGKey(0))


def test_only_a_character_lm_decodes():
  from poolformers_jax.models.encoder import LraEncoder
  with pytest.raises(ValueError, match=r"^generation decodes a character LM .* this model is a "
                     'LraEncoder'):
    lm_decode.decoder_of(LraEncoder(vocab_size=5, num_classes=2, max_length=8))
