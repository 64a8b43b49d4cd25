"""enwik8 / text8 evaluation as in ContextPool Table 5 (Longformer's protocol): overlapping
windows of `eval_context` symbols every `eval_step`, the new symbols of each window scored.

Checked against a brute force that knows nothing of windows or batches: for every symbol t of
the split (t >= 1) it runs the model on exactly the symbols the protocol allows as its context,
s[a(t):t] with a(t) = 0 while t <= C and a(t) = min(ceil((t - C) / step) * step, N - 1 - C) after
(the latest window start whose scored range holds t; the last window is aligned to the end),
and sums -log p(s_t) in float64. The evaluator (eval.py's path: padded, masked, sharded batches
over 8 devices) must give the same loss and count every symbol but the first exactly once.
"""
import math
import zipfile

import enwik8
import jax
import numpy as np
import pytest
import retrace

from poolformers_jax.data import text_lm
from poolformers_jax.eval import evaluate_state
from poolformers_jax.trainer import setup as setup_lib
from poolformers_jax.trainer.step import make_eval_step

ALPHABET = list('abcdefghijklmnopqrstuvwxyz ')


def _config(tmp_path, context, step, split_sizes=(40, 37, 45)):
  rng = np.random.default_rng(0)
  text = ''.join(rng.choice(ALPHABET, sum(split_sizes)))
  with zipfile.ZipFile(tmp_path / 'text8.zip', 'w') as archive:
    archive.writestr('text8', text)
  config = enwik8.get_config('transformer_l12,tiny,text8')
  config.model.update(num_layers=1, emb_dim=16, num_heads=2, mlp_dim=32, dropout_rate=0.0,
                      attention_dropout_rate=0.0)
  config.data.update(data_dir=str(tmp_path), max_length=8, split_sizes=split_sizes,
                     eval_protocol='sliding', eval_context=context, eval_step=step)
  config.num_devices = -1
  return config, text


def _random_state(setup):
  """A train state with random parameters (numpy: no threefry compile)."""
  rng = np.random.default_rng(1)
  params = jax.tree.map(lambda a: np.asarray(0.5 * rng.standard_normal(a.shape), a.dtype),
                        setup.abstract_state.params)
  return setup_lib.TrainState.create(apply_fn=setup.model.apply, params=params, tx=setup.tx)


def _brute_force(setup, params, ids, context, step):
  """Sum of -log p(s_t | s[a(t):t]) over t = 1 .. N-1 in float64. Each context s[a(t):t] is one
  row, right-padded to a common length (the LM is causal, tests/models/test_lm.py: what follows
  position t - 1 cannot change its prediction), so one compiled forward serves every t."""
  n = len(ids)
  c = min(context, n - 1)
  starts = [0 if t <= c else min(math.ceil((t - c) / step) * step, n - 1 - c) for t in range(1, n)]
  rows = np.ones((n - 1, c), np.int32)
  for t, a in zip(range(1, n), starts):
    assert 1 <= t - a <= c
    rows[t - 1, :t - a] = ids[a:t]
  logits = np.asarray(jax.jit(setup.model.apply)({'params': params}, rows), np.float64)
  last = logits[np.arange(n - 1), [t - a - 1 for t, a in zip(range(1, n), starts)]]
  return float(np.sum(np.logaddexp.reduce(last, axis=-1) - last[np.arange(n - 1), ids[1:]])), n - 1


def test_sliding_bpc_equals_brute_force(tmp_path):
  # 44 predictions, windows of 8 every 5: starts 0, 5, ..., 35 and a last one at 36 (scores 1).
  context, step = 8, 5
  config, text = _config(tmp_path, context, step)
  setup = setup_lib.make_setup(config)
  state = _random_state(setup)
  _, table = text_lm.VOCABS['text8']
  test_ids = table[np.frombuffer(text[77:].encode(), np.uint8)]
  expected_loss, expected_count = _brute_force(setup, state.params, test_ids, context, step)
  # The eval step compiles once for the split: its padded last batch reuses the program.
  step = make_eval_step(setup)
  metrics = retrace.assert_driver_traces(
      step, lambda run: evaluate_state(config, setup, state, 'test', batch_size=8,
                                       eval_step=run), n=1)
  assert retrace.compilations(step) == 1
  assert metrics['count'] == expected_count == 44
  np.testing.assert_allclose(metrics['loss'] * metrics['count'], expected_loss, rtol=2e-6)
  assert metrics['bits_per_token'] == pytest.approx(metrics['loss'] / math.log(2))
  # Another batch size gives the same number (padding windows weigh nothing).
  again = evaluate_state(config, setup, state, 'test', batch_size=16)
  np.testing.assert_allclose(again['loss'], metrics['loss'], rtol=1e-6)
  # The old protocol (non-overlapping windows of max_length, remainder dropped) is another number.
  with config.unlocked():
    config.data.eval_protocol = 'windows'
  old_setup = setup_lib.make_setup(config)
  old = evaluate_state(config, old_setup, _random_state(old_setup), 'test', batch_size=8)
  assert old['count'] == 40 and abs(old['loss'] - metrics['loss']) > 1e-3


def test_windows_and_their_scored_ranges():
  source = text_lm.SlidingWindowSource(np.arange(21, dtype=np.uint8), context=8, step=3)
  # 20 predictions: windows at 0, 3, 6, 9, 12 (predicting up to 20), scored from 0, 5, 5, 5, 5.
  assert source.starts.tolist() == [0, 3, 6, 9, 12]
  assert source.scored_from.tolist() == [0, 5, 5, 5, 5]
  tail = text_lm.SlidingWindowSource(np.arange(23, dtype=np.uint8), context=8, step=3)
  # 22 predictions: the last regular window ends at 20, one more aligned to the end scores 2.
  assert tail.starts.tolist() == [0, 3, 6, 9, 12, 14] and tail.scored_from[-1] == 6
  assert len(tail[5]['window']) == 9
  short = text_lm.SlidingWindowSource(np.arange(5, dtype=np.uint8), context=8, step=3)
  assert short.starts.tolist() == [0] and short.length == 4
  with pytest.raises(ValueError, match='1 <= eval_step <= eval_context'):
    text_lm.SlidingWindowSource(np.arange(5, dtype=np.uint8), context=4, step=5)
