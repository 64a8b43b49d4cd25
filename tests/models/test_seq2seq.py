"""transformer_seq2seq: cached decoding, greedy / beam search, causality, packing, sharding,
parameter counts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import retrace
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from poolformers_jax import tasks
from poolformers_jax.models import build_model, seq2seq_decode as sd
from poolformers_jax.models.seq2seq import TransformerSeq2Seq
from poolformers_jax.tasks.translation import length_batches

VOCAB = 40
CP_VARIANTS = {'plain': None, 'cp': {},
               'cp_nonlocal_window': {'weights': 'nonlocal', 'locality': 'fixed_window'},
               'cp_self_attention_only': {'placement': 'self_attention'},
               'cp_block_output': {'placement': 'block_output'}}
PLACEMENT_VARIANTS = ['plain', 'cp', 'cp_self_attention_only', 'cp_block_output']
# make test-fast checks plain and cp; the two other placements run in make test.
PLACEMENT_CASES = PLACEMENT_VARIANTS[:2] + [pytest.param(v, marks=pytest.mark.slow)
                                            for v in PLACEMENT_VARIANTS[2:]]


def tiny(decoder_cp=None, encoder_cp=None, positions='sinusoidal'):
  """decoder placement 'block_output' goes with the encoder's 'block_output' placement."""
  block_output = (decoder_cp or {}).get('placement') == 'block_output'
  return TransformerSeq2Seq(vocab_size=VOCAB, num_layers=2, emb_dim=32, num_heads=4, mlp_dim=64,
                            mixer='contextpool' if encoder_cp else 'softmax',
                            mixer_kwargs={'placement': 'block_output'} if block_output else None,
                            decoder_context_pool=decoder_cp, dropout_rate=0.0,
                            attention_dropout_rate=0.0, positions=positions)


def variant_model(variant):
  """A CP_VARIANTS model, or 'rotary': the plain one with rotary positions (no sinusoids)."""
  if variant == 'rotary':
    return tiny(positions='rotary')
  return tiny(CP_VARIANTS[variant], encoder_cp=CP_VARIANTS[variant] is not None)


def tokens(shape, seed):
  return jnp.asarray(np.random.default_rng(seed).integers(3, VOCAB, shape), jnp.int32)


def init(model, src, tgt):
  return model.init(jax.random.PRNGKey(0), {'inputs': src, 'targets': tgt})['params']


@pytest.mark.parametrize('variant', [   # the pooled variants decode in make test, not test-fast
    v if v == 'plain' else pytest.param(v, marks=pytest.mark.slow) for v in sorted(CP_VARIANTS)]
    + ['rotary'])   # a decoding step's q and k turned at its cache index
def test_cached_decoding_equals_full_recomputation(variant):
  model = variant_model(variant)
  src = tokens((3, 7), 0).at[0, 5:].set(0)            # a padded source row too
  tgt = tokens((3, 9), 1)
  params = init(model, src, tgt)
  full = model.apply({'params': params}, {'inputs': src, 'targets': tgt})
  decoder = model.clone(decode=True)
  memory = model.apply({'params': params}, src, method='encode')
  cache = sd.init_cache(decoder, params, memory, src, 9)
  previous = jnp.pad(tgt, ((0, 0), (1, 0)))[:, :-1]   # start token 0, then the targets
  step = jax.jit(lambda cache, token, t: decoder.apply(
      {'params': params, 'cache': cache}, memory, src, token, t, method='decode_step',
      mutable=['cache']))
  for t in range(9):
    logits, updates = step(cache, previous[:, t:t + 1], t)
    cache = updates['cache']
    np.testing.assert_allclose(logits, full[:, t], atol=2e-5, rtol=2e-5)


def _greedy_by_recomputation(model, params, src, length):
  """Argmax decoding that recomputes the whole decoder every step (no cache)."""
  out = jnp.zeros((src.shape[0], length), jnp.int32)
  done = np.zeros(src.shape[0], bool)
  # One segment per row: every target position counts as real, generated or not yet.
  full = jax.jit(lambda out: model.apply({'params': params}, {
      'inputs': src, 'targets': out, 'targets_segment_ids': jnp.ones_like(out)}))
  for t in range(length):
    logits = full(out)[:, t]
    token = np.asarray(jnp.argmax(logits.at[:, 0].set(-1e9), -1))
    token = np.where(done, 0, token)
    out = out.at[:, t].set(token)
    done |= token == 1
  return np.asarray(out)


@pytest.mark.slow   # decoding end to end: make test, not make test-fast
def test_greedy_and_beam_one():
  model = tiny({}, encoder_cp=True)
  src = tokens((4, 6), 2)
  params = init(model, src, tokens((4, 10), 3))
  greedy = np.asarray(sd.make_translate(model, 10, beam_size=1)(params, src))
  np.testing.assert_array_equal(greedy, _greedy_by_recomputation(model, params, src, 10))
  # Beam 1 (alpha 0: scores are log-probabilities) is greedy.
  beam1, _ = jax.jit(lambda p, s: sd.beam_search(model, p, s, 10, beam_size=1, alpha=0.0))(
      params, src)
  np.testing.assert_array_equal(np.asarray(beam1), greedy)


@pytest.mark.slow   # decoding end to end: make test, not make test-fast
def test_beam_search_returns_its_best_scored_hypothesis():
  model = tiny()
  src = tokens((3, 6), 4)
  params = init(model, src, tokens((3, 8), 5))
  seqs, scores = jax.jit(lambda p, s: sd.beam_search(model, p, s, 8, beam_size=4, alpha=0.6))(
      params, src)
  apply = jax.jit(lambda batch: model.apply({'params': params}, batch))
  # Rescore the returned sequences by teacher forcing: the reported score is their log-prob
  # over the length penalty, and it is at least the greedy sequence's score.
  def score(seq):
    seq = np.asarray(seq)
    logits = apply({'inputs': src, 'targets': jnp.asarray(seq)})
    logp = np.asarray(jax.nn.log_softmax(logits.at[..., 0].set(-1e7)))
    total, lengths = np.zeros(len(seq)), np.zeros(len(seq))
    for b, row in enumerate(seq):
      n = list(row).index(1) + 1 if 1 in row else len(row)
      total[b] = sum(logp[b, t, row[t]] for t in range(n))
      lengths[b] = n
    return total / sd.length_penalty(lengths, 0.6)
  np.testing.assert_allclose(score(seqs), scores, atol=1e-4)
  greedy = sd.make_translate(model, 8, beam_size=1)(params, src)
  assert np.all(score(seqs) >= score(greedy) - 1e-5)


@pytest.mark.parametrize('variant', PLACEMENT_CASES)
def test_decoder_is_causal(variant):
  model = tiny(CP_VARIANTS[variant], encoder_cp=CP_VARIANTS[variant] is not None)
  src, tgt = tokens((2, 6), 6), tokens((2, 10), 7)
  params = init(model, src, tgt)
  apply = jax.jit(lambda targets: model.apply({'params': params}, {'inputs': src,
                                                                   'targets': targets}))
  base = apply(tgt)
  for t in (3, 7):
    changed = tgt.at[:, t].set((tgt[:, t] + 5) % (VOCAB - 3) + 3)
    out = apply(changed)
    # logits[:, s] read decoder inputs <= s, i.e. targets < s: positions <= t are unchanged.
    np.testing.assert_array_equal(out[:, :t + 1], base[:, :t + 1])
    assert np.abs(out[:, t + 1] - base[:, t + 1]).max() > 1e-4


@pytest.mark.parametrize('variant', PLACEMENT_CASES + ['rotary'])   # rotary: relative, no restart
def test_packed_rows_give_the_loss_of_the_sentences_alone(variant):
  model = variant_model(variant)
  pairs = [(tokens((1, 5), 8), tokens((1, 4), 9)), (tokens((1, 3), 10), tokens((1, 6), 11)),
           (tokens((1, 6), 12), tokens((1, 3), 13))]
  length = 16
  row = {k: np.zeros((1, length), np.int32) for k in
         ('inputs', 'targets', 'inputs_segment_ids', 'targets_segment_ids',
          'inputs_positions', 'targets_positions')}
  offsets = {'inputs': 0, 'targets': 0}
  for seg, pair in enumerate(pairs, 1):
    for key, ids in zip(('inputs', 'targets'), pair):
      n, o = ids.shape[1], offsets[key]
      row[key][0, o:o + n] = ids[0]
      row[f'{key}_segment_ids'][0, o:o + n] = seg
      row[f'{key}_positions'][0, o:o + n] = np.arange(n)
      offsets[key] += n
  packed = {k: jnp.asarray(v) for k, v in row.items()}
  params = init(model, packed['inputs'], packed['targets'])
  task = tasks.get_task('seq2seq')
  one = jnp.ones((1,), jnp.float32)
  sums = jax.jit(lambda batch: task.sums(model.apply({'params': params}, batch),
                                         batch['targets'], one, 0.1))
  packed_sums = sums(packed)
  # The same pairs one per row, zero padded to 6 tokens (padding carries no loss).
  pad = lambda t: jnp.pad(t, ((0, 0), (0, 6 - t.shape[1])))
  alone = {'inputs': jnp.concatenate([pad(s) for s, _ in pairs]),
           'targets': jnp.concatenate([pad(t) for _, t in pairs])}
  alone_sums = jax.jit(lambda batch: task.sums(model.apply({'params': params}, batch),
                                               batch['targets'], jnp.ones((3,)), 0.1))(alone)
  assert float(packed_sums['count']) == float(alone_sums['count']) == 13
  np.testing.assert_allclose(packed_sums['loss'], alone_sums['loss'], rtol=2e-5)


@pytest.mark.slow   # decoding end to end: make test, not make test-fast
def test_decoding_sharded_over_the_data_axis_matches_one_device():
  model = tiny({}, encoder_cp=True)
  src = tokens((8, 6), 14).at[1, 3:].set(0)
  params = init(model, src, tokens((8, 8), 15))
  expected = np.asarray(sd.make_translate(model, 6, beam_size=2)(params, src))
  mesh = Mesh(np.array(jax.devices()[:8]), ('data',))
  run = sd.make_translate(model, 6, beam_size=2,
                          in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P('data'))),
                          out_shardings=NamedSharding(mesh, P('data')))
  out = run(params, src)
  assert len(out.sharding.device_set) == 8
  np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize('cp,placement,millions', [(False, None, 60.52),
                                                   (True, 'self_attention', 61.12),
                                                   (True, 'every_attention', 61.41)])
def test_base_parameter_count_with_a_32k_shared_vocabulary(cp, placement, millions):
  import os

  from poolformers_jax.config import load_file
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  config = load_file(os.path.join(repo, 'configs', 'wmt14.py') + (':base,cp' if cp else ':base'))
  with config.unlocked():
    config.model.vocab_size = 32000
    if placement:
      config.model.decoder_context_pool.placement = placement
  model = build_model(config.model)
  batch = {'inputs': jnp.zeros((1, 8), jnp.int32), 'targets': jnp.zeros((1, 8), jnp.int32)}
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch))['params']
  count = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(shapes))
  assert round(count / 1e6, 2) == millions
  # Tied embeddings: the only vocabulary-sized table is the shared embedding.
  assert [s.shape for s in jax.tree.leaves(shapes) if 32000 in s.shape] == [(32000, 512)]


def test_packed_rows_need_a_segment_aware_mixer():
  model = TransformerSeq2Seq(vocab_size=VOCAB, num_layers=1, emb_dim=32, num_heads=4,
                             mlp_dim=64, mixer='linear')
  batch = {'inputs': tokens((1, 6), 0), 'targets': tokens((1, 6), 1),
           'inputs_segment_ids': jnp.ones((1, 6), jnp.int32)}
  with pytest.raises(ValueError, match='config.data.pack=False'):
    model.init(jax.random.PRNGKey(0), batch)


def test_decoder_placements_pool_where_they_say():
  """'every_attention' pools before self- and cross-attention, 'self_attention' before the
  self-attention only, 'block_output' the block's output: their parameters say so, and the
  cross-attention pooling changes the output."""
  src, tgt = tokens((2, 6), 16), tokens((2, 7), 17)
  names = {}
  for variant in ('cp', 'cp_self_attention_only', 'cp_block_output'):
    params = init(tiny(CP_VARIANTS[variant], encoder_cp=True), src, tgt)
    names[variant] = {k for k in params['decoder_blocks_0']}
    names[variant] |= {f'self_attention/{k}' for k in params['decoder_blocks_0']['self_attention']}
  assert {'cross_context_pool', 'self_attention/context_pool'} <= names['cp']
  assert 'cross_context_pool' not in names['cp_self_attention_only']
  assert 'self_attention/context_pool' in names['cp_self_attention_only']
  assert 'output_context_pool' in names['cp_block_output']
  assert not {'cross_context_pool', 'self_attention/context_pool'} & names['cp_block_output']
  # The same parameters without the cross-attention pooling give another output.
  every, self_only = tiny({}, encoder_cp=True), tiny(CP_VARIANTS['cp_self_attention_only'], True)
  params = init(every, src, tgt)
  reduced = jax.tree.map(lambda x: x, params)
  for i in range(2):
    reduced[f'decoder_blocks_{i}'] = {k: v for k, v in params[f'decoder_blocks_{i}'].items()
                                      if k != 'cross_context_pool'}
  batch = {'inputs': src, 'targets': tgt}
  assert np.abs(every.apply({'params': params}, batch)
                - self_only.apply({'params': reduced}, batch)).max() > 1e-3


def test_unknown_decoder_placement_is_one_line():
  model = tiny({'placement': 'everywhere'}, encoder_cp=True)
  with pytest.raises(ValueError, match=r"placement='everywhere'; choose one of"):
    init(model, tokens((1, 5), 0), tokens((1, 5), 1))


def test_attention_dropout_drops_probabilities():
  """With identity value/out projections and the identity as memory, the output IS the dropped
  attention-probability matrix: each entry 0 or weight / (1 - rate), some of both."""
  from poolformers_jax.models.seq2seq import Attention
  dim, rate = 8, 0.5
  attention = Attention(num_heads=1, dropout_rate=rate)
  x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 8, dim)), jnp.float32)
  memory = jnp.eye(dim)[None]
  bias = jnp.zeros((1, 1, 8, dim))
  params = attention.init(jax.random.PRNGKey(0), x, memory, bias)['params']
  eye = {'kernel': jnp.eye(dim), 'bias': jnp.zeros(dim)}
  params = {**params, 'value': eye, 'out': eye}
  (out, ), weights = attention.apply({'params': params}, x, memory, bias, deterministic=False,
                                     rngs={'dropout': jax.random.PRNGKey(1)},
                                     mutable=['intermediates'])
  weights = weights['intermediates']['attention_weights'][0][0, 0]
  kept = np.isclose(np.asarray(out), np.asarray(weights) / (1 - rate), rtol=1e-5)
  dropped = np.asarray(out) == 0
  assert np.all(kept | dropped) and kept.any() and dropped.any()


@pytest.mark.slow   # decoding end to end: make test, not make test-fast
def test_the_decoder_compiles_once_per_bucket_shape():
  """Translator's decoder over length_batches: sources of 3 to 7 tokens share the 8-token bucket
  (two batches, one program), 9 and 11 tokens the 12-token one: two compilations in all."""
  model = tiny()
  params = init(model, tokens((2, 8), 0), tokens((2, 8), 1))
  sources = [np.asarray(tokens((n,), n)) for n in (3, 5, 7, 9, 11, 4)]
  batches = [(params, ids) for _, ids in length_batches(sources, batch_tokens=16, multiple=2)]
  assert [ids.shape for _, ids in batches] == [(2, 8), (2, 8), (2, 12)]
  run = sd.make_translate(model, None, beam_size=1)
  retrace.assert_traces(run, batches, n=2)
  retrace.assert_traces(run, batches, n=0)   # decoding the same buckets again compiles nothing
