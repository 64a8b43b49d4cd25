"""Greedy and beam-search decoding of TransformerSeq2Seq on its KV cache (jit-able, shardable).

Both encode the source once, project the encoder output to the cross-attentions' keys and values
once (init_cache), then call the decoder one token per step with `decode=True`. Start token 0,
stop at the model's `eos_id`; a sentence's output has at most its source length + 50 tokens, EOS
included (Vaswani et al.: "input length + 50"). Every operation is per batch row, so with the
batch sharded over the 'data' axis the decode runs sharded.

Beam search (Vaswani et al. 2017; the Flax wmt example's algorithm): beam K, length penalty
lp(n) = ((5 + n) / 6)^alpha (Wu et al. 2016); each step takes the 2K best extensions, moves those
among the K best that end in EOS to the finished set (score = log p / lp(length); fairseq's rule,
so beam 1 is greedy) and keeps the K best others alive; it stops when no live beam can still beat
the worst finished one (log p / lp(max_length) bounds every continuation) or at max_length.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from poolformers_jax.models.seq2seq import PAD_ID

NEG_INF = -1.0e7
EXTRA_LENGTH = 50       # output tokens at most: source length + this (Vaswani et al. 2017)
_MEMORY = ('memory_key', 'memory_value')


def length_penalty(length, alpha: float):
  return ((5.0 + length) / 6.0) ** alpha


def init_cache(decoder, params, memory: jax.Array, inputs: jax.Array, max_length: int) -> Any:
  """The decoding cache of inputs.shape[0] rows: zeros for the per-step state (sized
  max_length), every cross-attention's keys and values of `memory` projected once."""
  batch = {'inputs': inputs, 'targets': jnp.zeros((inputs.shape[0], max_length), jnp.int32)}
  shapes = jax.eval_shape(lambda: decoder.init(jax.random.PRNGKey(0), batch))['cache']
  flat = traverse_util.flatten_dict(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
  # Without the memory entries, a decoder step projects `memory` (its other updates dropped).
  steps = traverse_util.unflatten_dict({k: v for k, v in flat.items() if k[-1] not in _MEMORY})
  _, updates = decoder.apply({'params': params, 'cache': steps}, memory, inputs,
                             jnp.zeros((inputs.shape[0], 1), jnp.int32), 0, method='decode_step',
                             mutable=['cache'])
  projected = traverse_util.flatten_dict(updates['cache'])
  flat.update({k: projected[k] for k in flat if k[-1] in _MEMORY})
  return traverse_util.unflatten_dict(flat)


def source_lengths(inputs: jax.Array) -> jax.Array:
  return jnp.sum(inputs != PAD_ID, axis=1).astype(jnp.int32)


def _step_fn(decoder, params, memory, inputs, limits):
  """One decoding step -> log-probabilities; a row at its output limit can only end (EOS)."""
  def step(cache, token, position):
    logits, updates = decoder.apply({'params': params, 'cache': cache}, memory, inputs,
                                    token[:, None], position, method='decode_step',
                                    mutable=['cache'])
    # Padding (id 0) is never a prediction: it carries no loss in training.
    logits = logits.at[:, PAD_ID].set(NEG_INF)
    logp = jax.nn.log_softmax(logits)
    only_eos = jnp.where(jnp.arange(logp.shape[-1]) == decoder.eos_id, 0.0, NEG_INF)
    logp = jnp.where((position + 1 >= limits)[:, None], only_eos, logp)
    return logp, updates['cache']
  return step


def greedy(model, params, inputs: jax.Array, max_length: int,
           extra_length: int = EXTRA_LENGTH) -> jax.Array:
  """Source ids [B, Ls] -> [B, max_length] tokens (argmax each step; 0 after EOS)."""
  decoder = model.clone(decode=True)
  memory = model.apply({'params': params}, inputs, method='encode')
  step = _step_fn(decoder, params, memory, inputs, source_lengths(inputs) + extra_length)
  batch = inputs.shape[0]

  def body(state):
    i, token, cache, out, done = state
    logp, cache = step(cache, token, i)
    token = jnp.where(done, 0, jnp.argmax(logp, -1).astype(jnp.int32))
    out = out.at[:, i].set(token)
    return i + 1, token, cache, out, done | (token == model.eos_id)

  state = (jnp.array(0), jnp.zeros((batch,), jnp.int32),
           init_cache(decoder, params, memory, inputs, max_length),
           jnp.zeros((batch, max_length), jnp.int32), jnp.zeros((batch,), bool))
  state = jax.lax.while_loop(lambda s: (s[0] < max_length) & ~jnp.all(s[4]), body, state)
  return state[3]


def _gather(cache, flat_index: jax.Array, rows: int):
  """Rows `flat_index` of every cache array whose leading axis has `rows` entries; the
  cross-attention keys/values, one per sentence for all its beams, are left as they are."""
  flat = traverse_util.flatten_dict(cache)
  return traverse_util.unflatten_dict({
      k: x[flat_index] if x.ndim and x.shape[0] == rows and k[-1] not in _MEMORY else x
      for k, x in flat.items()})


def beam_search(model, params, inputs: jax.Array, max_length: int, beam_size: int = 4,
                alpha: float = 0.6, extra_length: int = EXTRA_LENGTH
                ) -> tuple[jax.Array, jax.Array]:
  """Source ids [B, Ls] -> (best sequence [B, max_length], its score [B])."""
  batch, k = inputs.shape[0], beam_size
  decoder = model.clone(decode=True)
  memory = model.apply({'params': params}, inputs, method='encode')
  tile = lambda x: jnp.repeat(x, k, axis=0)                 # row b*K + j = beam j of b
  step = _step_fn(decoder, params, tile(memory), tile(inputs),
                  tile(source_lengths(inputs) + extra_length))
  # Each sentence's cache is copied to its K beams, but for the cross-attention keys / values
  # (the beams' queries share them: seq2seq.Attention).
  flat = traverse_util.flatten_dict(init_cache(decoder, params, memory, inputs, max_length))
  cache0 = traverse_util.unflatten_dict({
      key: tile(x) if x.ndim and key[-1] not in _MEMORY else x for key, x in flat.items()})
  offsets = (jnp.arange(batch) * k)[:, None]
  max_lp = length_penalty(max_length, alpha)

  def not_done(state):
    i, _, live_logp, _, fin_scores, fin_flags, _ = state
    best_live = jnp.max(live_logp, 1) / max_lp
    worst_fin = jnp.min(jnp.where(fin_flags, fin_scores, NEG_INF), 1)
    return (i < max_length) & ~jnp.all(fin_flags.all(1) & (worst_fin > best_live))

  def body(state):
    i, live, live_logp, fin, fin_scores, fin_flags, cache = state
    logp, cache = step(cache, live[:, :, i].reshape(-1), i)
    vocab = logp.shape[-1]
    cand = (live_logp[..., None] + logp.reshape(batch, k, vocab)).reshape(batch, k * vocab)
    top_logp, top_idx = jax.lax.top_k(cand, 2 * k)
    beam, token = top_idx // vocab, (top_idx % vocab).astype(jnp.int32)
    seqs = jnp.take_along_axis(live, beam[..., None], 1).at[:, :, i + 1].set(token)
    # The K best extensions that did not end stay alive (with their cache rows); those ending
    # in EOS among the K best overall are finished (fairseq's rule: beam 1 is then greedy).
    alive_logp, alive = jax.lax.top_k(jnp.where(token == model.eos_id, NEG_INF, top_logp), k)
    ended = (token == model.eos_id) & (jnp.arange(2 * k) < k)
    live = jnp.take_along_axis(seqs, alive[..., None], 1)
    cache = _gather(cache, (offsets + jnp.take_along_axis(beam, alive, 1)).reshape(-1),
                    batch * k)
    # Finished: the K best of the old finished and those ending now, by normalised score.
    scores = jnp.where(ended, top_logp / length_penalty(i + 1.0, alpha), NEG_INF)
    all_scores = jnp.concatenate([fin_scores, scores], 1)
    fin_scores, best = jax.lax.top_k(all_scores, k)
    fin = jnp.take_along_axis(jnp.concatenate([fin, seqs], 1), best[..., None], 1)
    fin_flags = jnp.take_along_axis(jnp.concatenate([fin_flags, ended], 1), best, 1)
    return i + 1, live, alive_logp, fin, fin_scores, fin_flags, cache

  seqs0 = jnp.zeros((batch, k, max_length + 1), jnp.int32)
  live_logp0 = jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1)), (batch, 1))
  state = (jnp.array(0), seqs0, live_logp0, seqs0, jnp.full((batch, k), NEG_INF),
           jnp.zeros((batch, k), bool), cache0)
  _, live, live_logp, fin, fin_scores, fin_flags, _ = jax.lax.while_loop(not_done, body, state)
  # A row with no finished hypothesis returns its best live one.
  any_fin = fin_flags.any(1)
  seqs = jnp.where(any_fin[:, None], fin[:, 0, 1:], live[:, 0, 1:])
  scores = jnp.where(any_fin, fin_scores[:, 0], live_logp[:, 0] / max_lp)
  return seqs, scores


def make_translate(model, max_length: int | None = None, beam_size: int = 4,
                   alpha: float = 0.6, extra_length: int = EXTRA_LENGTH, **jit_kwargs):
  """A jitted `(params, inputs [B, Ls]) -> tokens [B, T]`: beam_size 1 = greedy, else beam
  search. T = max_length, or Ls + extra_length when None (one compilation per source shape).
  `jit_kwargs` (in_shardings, ...) go to jax.jit."""
  def run(params, inputs):
    length = max_length or inputs.shape[1] + extra_length
    if beam_size <= 1:
      return greedy(model, params, inputs, length, extra_length)
    return beam_search(model, params, inputs, length, beam_size, alpha, extra_length)[0]
  return jax.jit(run, **jit_kwargs)
