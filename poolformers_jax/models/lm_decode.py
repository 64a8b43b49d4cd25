"""Generation from the character LM (models/lm.py): one token per step on a cache, jit-compiled.

`CharLMDecoder` is CharTransformerLM one token per call: the same parameters, each block's mixer
replaced by its decoding step (models/mixer_steps.py: what each keeps of the past), positions
taken at the step's index (sinusoidal and learned added to the embedding, rotary turned inside
the attention by its cache index). Its logits at every step equal the full forward's at that
position (tests/models/test_lm_decode.py).

`generate` feeds the prompt a token per step (the prefill, a `jax.lax.scan`), then a second scan
draws each new token from its step's logits and feeds it back: the most likely with temperature
0, else a sample of softmax(logits / temperature) among the top_k most likely; padding (id 0) is
never drawn. The scans carry the cache, allocated once for prompt + num_tokens - 1 inputs, so the
program compiles once per prompt length and settings.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.common import (
  Array,
  LearnedPositionEmbedding,
  MlpBlock,
  sinusoidal_positions,
)
from poolformers_jax.layers.registry import MIXERS, check_use, mixer_fields, options_of
from poolformers_jax.models.block import ACTIVATIONS, fields_of
from poolformers_jax.models.lm import CharTransformerLM
from poolformers_jax.models.mixer_steps import mixer_step

PAD_ID = 0   # the LM's padding: never generated


class BlockStep(nn.Module):
  """TransformerBlock one token per call (parameter names norm1, <mixer>_0, norm2, mlp)."""
  mixer: str
  mixer_options: dict
  mlp_dim: int
  activation: str = 'relu'
  dtype: object = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    norm = lambda name: nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name=name)
    mixer = mixer_step(MIXERS[self.mixer], self.mixer_options)
    x = x + mixer(norm('norm1')(x))
    x = x + MlpBlock(self.mlp_dim, activation=ACTIVATIONS[self.activation], dtype=self.dtype,
                     name='mlp')(norm('norm2')(x))
    return mixer.block_output(x) if hasattr(mixer, 'block_output') else x


class CharLMDecoder(CharTransformerLM):
  """CharTransformerLM's fields and parameters; called with tokens [B, 1] at `position`, the
  logits [B, 1, vocab] of the next token. The first call (in `init`, tokens [B, T]) sizes the
  cache for T inputs."""

  @nn.compact
  def __call__(self, tokens: Array, position: Array) -> Array:   # type: ignore[override]
    dtype = self.dtype if self.dtype is not None else jnp.float32
    embed = nn.Embed(self.vocab_size, self.emb_dim, dtype=dtype, name='embed')
    x = embed(tokens) * jnp.asarray(self.emb_dim ** 0.5, dtype)
    positions = position + jnp.arange(tokens.shape[1])
    if self.positions == 'sinusoidal':
      x = x + sinusoidal_positions(positions, self.emb_dim)[None].astype(dtype)
    elif self.positions == 'learned':
      x = LearnedPositionEmbedding(self.max_length or 0, name='pos_embed')(x, positions)
    options = self.mixer_options()
    for i in range(self.num_layers):
      x = BlockStep(self.mixer, options, self.mlp_dim, self.activation, self.dtype,
                    name=f'block_{i}')(x)
    return self.head(embed, x)

  @nn.nowrap
  def mixer_options(self) -> dict:
    """Every field of the blocks' mixer, as TransformerBlock builds it (build_mixer's shared
    arguments where the mixer declares them, then mixer_kwargs)."""
    cls, kwargs = MIXERS[self.mixer], dict(self.mixer_kwargs or {})
    rotary = self.positions == 'rotary'
    shared = dict(num_heads=self.num_heads, causal=True, rotary=rotary, dtype=self.dtype)
    shared = {k: v for k, v in shared.items() if k in mixer_fields(cls)}
    check_use(self.mixer, kwargs, given=shared, causal=True, rotary=rotary)
    return options_of(cls, {**shared, **kwargs})


def decoder_of(model: nn.Module) -> CharLMDecoder:
  """The decoder of a trained character LM (its fields; the same parameters)."""
  if not isinstance(model, CharTransformerLM):
    raise ValueError(f'generation decodes a character LM (CharTransformerLM, config.model.name '
                     f"'char_lm'); this model is a {type(model).__name__}.")
  return CharLMDecoder(**fields_of(model, CharTransformerLM))


def init_cache(decoder: CharLMDecoder, batch: int, length: int):
  """The zero cache of `batch` rows and `length` inputs (shapes only: nothing runs)."""
  tokens = jnp.zeros((batch, length), jnp.int32)
  shapes = jax.eval_shape(lambda: decoder.init(jax.random.PRNGKey(0), tokens, 0))['cache']
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _step(decoder: CharLMDecoder, params, cache, token: Array, position: Array):
  """The next token's logits [B, vocab] after `token` [B] at `position`, and the new cache."""
  logits, updates = decoder.apply({'params': params, 'cache': cache}, token[:, None], position,
                                  mutable=['cache'])
  return logits[:, 0], updates['cache']


def step_logits(model: nn.Module, params, tokens: Array) -> Array:
  """Teacher forcing on the cache: tokens [B, T] -> the logits of every step [B, T, vocab] (the
  full forward's, position by position)."""
  decoder = decoder_of(model)

  def body(cache, position):
    logits, cache = _step(decoder, params, cache, tokens[:, position], position)
    return cache, logits

  cache = init_cache(decoder, tokens.shape[0], tokens.shape[1])
  _, logits = jax.lax.scan(body, cache, jnp.arange(tokens.shape[1]))
  return jnp.moveaxis(logits, 0, 1)


def draw(logits: Array, key: Array, temperature: float, top_k: int | None) -> Array:
  """A token per row of `logits` [B, vocab]: the most likely at temperature 0, else a sample of
  softmax(logits / temperature) among the `top_k` most likely (None: all); never padding."""
  logits = logits.at[:, PAD_ID].set(-jnp.inf)
  if top_k is not None:
    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  return jax.random.categorical(key, logits / temperature).astype(jnp.int32)


def check_generation(model: CharTransformerLM, prompt_length: int, num_tokens: int,
                     temperature: float, top_k: int | None) -> None:
  """The settings' errors, before anything is traced."""
  if prompt_length < 1:
    raise ValueError('the prompt is empty: give at least one symbol to continue')
  if num_tokens < 1:
    raise ValueError(f'num_tokens={num_tokens}: generate at least 1 token')
  if temperature < 0:
    raise ValueError(f'temperature={temperature} is negative: use 0 (the most likely token '
                     'each step) or more (1: the model\'s distribution)')
  if top_k is not None and not 1 <= top_k <= model.vocab_size:
    raise ValueError(f'top_k={top_k}: use 1..{model.vocab_size} (the vocabulary), or none')
  inputs = prompt_length + num_tokens - 1
  if model.positions == 'learned' and inputs > (model.max_length or 0):
    raise ValueError(f'a prompt of {prompt_length} symbols and {num_tokens} new tokens need '
                     f'{inputs} positions, more than the {model.max_length} of the learned '
                     'position table; shorten the prompt or generate fewer tokens')


def continue_text(decoder: CharLMDecoder, params, cache, token: Array, start: Array | int,
                  num_tokens: int, key: Array, *, temperature: float = 1.0,
                  top_k: int | None = None) -> Array:
  """From the cache after `start` inputs, `token` [B] at position `start`: the `num_tokens`
  tokens drawn after it, each fed back [B, num_tokens]."""
  def body(carry, position):
    cache, token = carry
    logits, cache = _step(decoder, params, cache, token, position)
    token = draw(logits, jax.random.fold_in(key, position), temperature, top_k)
    return (cache, token), token

  _, tokens = jax.lax.scan(body, (cache, token), start + jnp.arange(num_tokens))
  return jnp.moveaxis(tokens, 0, 1)


def generate(model: nn.Module, params, prompt: Array, num_tokens: int, key: Array, *,
             temperature: float = 1.0, top_k: int | None = None) -> Array:
  """Prompt ids [B, P] -> the `num_tokens` tokens after them [B, num_tokens]: the prompt's first
  P - 1 tokens fed (the prefill), then `continue_text` from its last. jit-compatible;
  `num_tokens`, `temperature` and `top_k` are static."""
  decoder = decoder_of(model)
  length = prompt.shape[1]
  check_generation(decoder, length, num_tokens, temperature, top_k)
  prompt = prompt.astype(jnp.int32)

  def feed(cache, position):
    return _step(decoder, params, cache, prompt[:, position], position)[1], None

  cache = init_cache(decoder, prompt.shape[0], length + num_tokens - 1)
  cache, _ = jax.lax.scan(feed, cache, jnp.arange(length - 1))
  return continue_text(decoder, params, cache, prompt[:, -1], length - 1, num_tokens, key,
                       temperature=temperature, top_k=top_k)


def make_generate(model: nn.Module, num_tokens: int, *, temperature: float = 1.0,
                  top_k: int | None = None):
  """A jitted `(params, prompt [B, P], key) -> tokens [B, num_tokens]` (one compilation per
  prompt shape)."""
  return jax.jit(lambda params, prompt, key: generate(
      model, params, prompt, num_tokens, key, temperature=temperature, top_k=top_k))
