"""Greedy and beam search where hypotheses END: a model whose EOS logit is raised at chosen
decoding steps, so finished-beam bookkeeping, early stopping and the length penalty on finished
hypotheses are checked against a brute-force rescoring of every hypothesis (teacher forcing,
no cache)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax.models import seq2seq_decode as sd
from poolformers_jax.models.seq2seq import EOS_ID, TransformerSeq2Seq

VOCAB = 5            # 0 padding, 1 EOS, 2..4 words: few enough to enumerate every hypothesis
WORDS = (2, 3, 4)


class EosBiased(TransformerSeq2Seq):
  """TransformerSeq2Seq with `eos_bias[t]` added to the EOS logit at target position t, in
  teacher forcing and in cached decoding alike (so both score the same distribution).
  `steps` (a StepCounter) counts the decoding steps run, through a host callback."""
  eos_bias: tuple = ()
  steps: object = None

  def decode_logits(self, memory, inputs, decoder_inputs, targets_segment_ids, targets_positions,
                    inputs_segment_ids=None, **kwargs):
    logits = super().decode_logits(memory, inputs, decoder_inputs, targets_segment_ids,
                                   targets_positions, inputs_segment_ids, **kwargs)
    if targets_positions is None:
      targets_positions = jnp.broadcast_to(jnp.arange(logits.shape[1]), logits.shape[:2])
    table = jnp.asarray(tuple(self.eos_bias) + (0.0,), jnp.float32)
    bias = table[jnp.minimum(targets_positions, len(self.eos_bias))]
    if self.decode and self.steps is not None:
      jax.debug.callback(self.steps.count)
    return logits.at[..., self.eos_id].add(bias)


class StepCounter:
  def __init__(self):
    self.n = 0

  def count(self):
    self.n += 1


def model_and_params(eos_bias, steps=None, seed=0):
  model = EosBiased(vocab_size=VOCAB, num_layers=1, emb_dim=32, num_heads=4, mlp_dim=64,
                    decoder_context_pool={}, mixer='contextpool', dropout_rate=0.0,
                    attention_dropout_rate=0.0, eos_bias=tuple(eos_bias), steps=steps)
  src = jnp.asarray(np.random.default_rng(seed).integers(2, VOCAB, (1, 5)), jnp.int32)
  params = model.init(jax.random.PRNGKey(seed), {'inputs': src, 'targets': src})['params']
  return model, params, src


def finished_hypotheses(max_length):
  """Every hypothesis that ends in EOS within max_length tokens (EOS counted)."""
  return [words + (EOS_ID,) for n in range(max_length)
          for words in itertools.product(WORDS, repeat=n)]


def rescored(model, params, src, hypotheses, alpha):
  """Brute force: each hypothesis' log-probability by teacher forcing, over lp(its length)."""
  width = max(len(h) for h in hypotheses)
  targets = np.zeros((len(hypotheses), width), np.int32)
  for row, h in enumerate(hypotheses):
    targets[row, :len(h)] = h
  logits = jax.jit(model.apply)({'params': params}, {'inputs': jnp.repeat(src, len(hypotheses), 0),
                                                    'targets': jnp.asarray(targets)})
  logp = np.asarray(jax.nn.log_softmax(logits.at[..., 0].set(sd.NEG_INF)), np.float64)
  return np.array([sum(logp[row, t, tok] for t, tok in enumerate(h)) / sd.length_penalty(
      len(h), alpha) for row, h in enumerate(hypotheses)])


def as_tuple(seq):
  seq = [int(t) for t in np.asarray(seq)]
  return tuple(seq[:seq.index(EOS_ID) + 1]) if EOS_ID in seq else tuple(seq)


# EOS raised at steps 1 and 3: short and long finished hypotheses compete.
BIAS = (0.0, 2.5, 0.0, 3.5)


@pytest.mark.parametrize('alpha', [0.0, 0.6, 2.0])
def test_exhaustive_beam_equals_brute_force_over_every_hypothesis(alpha):
  """A beam wide enough to keep every candidate is exact search: its best finished hypothesis
  and score are the brute-force best of all hypotheses, length penalty included."""
  max_length = 4
  model, params, src = model_and_params(BIAS)
  hypotheses = finished_hypotheses(max_length)
  scores = rescored(model, params, src, hypotheses, alpha)
  seqs, beam_scores = jax.jit(lambda p, s: sd.beam_search(model, p, s, max_length,
                                                          beam_size=128, alpha=alpha))(params, src)
  best = int(np.argmax(scores))
  assert as_tuple(seqs[0]) == hypotheses[best]
  np.testing.assert_allclose(float(beam_scores[0]), scores[best], atol=1e-4)


def test_the_length_penalty_decides_between_finished_hypotheses():
  """The brute-force winner changes length with alpha here, so the test above checks the
  penalty on finished hypotheses, not only their log-probabilities."""
  model, params, src = model_and_params(BIAS)
  hypotheses = finished_hypotheses(4)
  lengths = {alpha: len(hypotheses[int(np.argmax(rescored(model, params, src, hypotheses,
                                                           alpha)))])
             for alpha in (0.0, 2.0)}
  assert lengths[0.0] < lengths[2.0], lengths


def test_narrow_beam_keeps_a_hypothesis_finished_early():
  """Beam 2: a hypothesis that ends at step 2 stays the answer while live beams go on to
  max_length and none of them beats it (it is no longer in the live beams)."""
  max_length = 6
  model, params, src = model_and_params((0.0, 6.0))
  seqs, scores = jax.jit(lambda p, s: sd.beam_search(model, p, s, max_length, beam_size=2,
                                                     alpha=0.6))(params, src)
  best = as_tuple(seqs[0])
  assert len(best) == 2 and best[-1] == EOS_ID
  assert np.all(np.asarray(seqs[0, 2:]) == 0)
  np.testing.assert_allclose(float(scores[0]),
                             rescored(model, params, src, [best], 0.6)[0], atol=1e-4)
  # No longer hypothesis scores better (brute force over every one that ends within 6 tokens).
  every = finished_hypotheses(max_length)
  assert float(scores[0]) >= rescored(model, params, src, every, 0.6).max() - 1e-4


def test_beam_search_stops_early_once_no_live_beam_can_win():
  """EOS is near-certain at step 1: both beams finish there, every live continuation has
  log p < -40, so the search stops after step 2 (the bound log p / lp(max_length) cannot win)
  instead of running to max_length = 50."""
  steps = StepCounter()
  model, params, src = model_and_params((0.0, 60.0), steps=steps)
  run = jax.jit(lambda p, s: sd.beam_search(model, p, s, 50, beam_size=2, alpha=0.6))
  seqs, _ = jax.block_until_ready(run(params, src))
  assert len(as_tuple(seqs[0])) == 2
  # One decoder call per executed step (callbacks run on execution, not at trace time), plus
  # the one that creates the cache (init_cache projects the cross-attention keys/values).
  assert steps.n == 2 + 1, steps.n


def test_greedy_stops_at_eos_and_pads_after_it():
  steps = StepCounter()
  model, params, src = model_and_params((0.0, 0.0, 60.0), steps=steps)
  src = jnp.repeat(src, 2, 0)
  out = np.asarray(jax.block_until_ready(sd.make_translate(model, 40, beam_size=1)(params, src)))
  assert np.all(out[:, 2] == EOS_ID) and np.all(out[:, 3:] == 0)
  assert np.all(out[:, :2] > EOS_ID)
  assert steps.n == 3 + 1          # the loop ends when every row has finished (+ init_cache)



def test_decoding_ends_at_the_models_eos_id():
  """The end of sentence is the model's `eos_id` (the dataset's, config.model.eos_id), not a
  constant: with eos_id 3 raised at the first step, greedy and beam search end there."""
  model, params, src = model_and_params((60.0,))
  model = model.clone(eos_id=3)
  src = jnp.repeat(src, 2, 0)
  greedy = np.asarray(sd.make_translate(model, 12, beam_size=1)(params, src))
  beam = np.asarray(sd.make_translate(model, 12, beam_size=2)(params, src))
  for out in (greedy, beam):
    assert np.all(out[:, 0] == 3) and np.all(out[:, 1:] == 0)
