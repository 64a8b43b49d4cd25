"""The checkpoint policy (trainer/checkpoint_policy.py) on plain lists of steps and metric values,
and, on a tiny state, that the storage's orbax managers hold exactly what the policy says."""
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax.train import NonFiniteLossError, _non_finite_error
from poolformers_jax.trainer import checkpoint as checkpoint_lib, checkpoint_policy as policy


def _walk(steps, damaged, rejected=()):
  """Resume as the Checkpointer runs it, over sets: (chosen step or None, log tails, rejected)."""
  rejected, lines = list(rejected), []
  order = policy.resume_order(steps, rejected)
  for step in order:
    if step in damaged:
      lines.append(policy.fallback(order, step))
      rejected.append(step)
      continue
    return step, lines, rejected
  return None, lines, rejected


# -- resume -----------------------------------------------------------------------------------
def test_resume_tries_the_newest_first_and_never_a_rejected_step():
  assert policy.resume_order([4, 2, 6]) == [6, 4, 2]
  assert policy.resume_order([2, 4, 6], rejected=[6]) == [4, 2]
  assert policy.resume_order([2, 4, 6], rejected=[2, 4, 6]) == []
  assert policy.resume_order([]) == []


def test_resume_after_a_corrupted_newest_takes_the_newest_that_verifies():
  step, lines, rejected = _walk([2, 4, 6], damaged={6})
  assert step == 4 and lines == ['falling back to 4'] and rejected == [6]
  step, lines, rejected = _walk([2, 4, 6], damaged={6, 4})
  assert step == 2 and lines == ['falling back to 4', 'falling back to 2']
  step, lines, rejected = _walk([2, 4, 6], damaged={2, 4, 6})
  assert step is None and lines[-1] == 'no older checkpoint' and rejected == [6, 4, 2]
  # A damaged older step is never reached while a newer one verifies.
  assert _walk([2, 4, 6], damaged={2})[0] == 6


def test_a_rejected_step_is_never_chosen_again():
  _, _, rejected = _walk([2, 4, 6], damaged={6})
  # The next resume (even if the damaged step came back into the list) skips it.
  assert _walk([2, 4, 6], damaged=set(), rejected=rejected)[0] == 4
  assert 6 not in policy.resume_order([2, 4, 6], rejected)


def test_fallback_names_the_next_older_step():
  assert policy.fallback([9, 5, 1], 9) == 'falling back to 5'
  assert policy.fallback([9, 5, 1], 1) == 'no older checkpoint'
  with pytest.raises(ValueError):
    policy.fallback([9, 5, 1], 3)


@pytest.mark.parametrize('names, start_over, verdict', [
    ([], False, 'fresh'),
    ([], True, 'fresh'),
    (['diverged-checkpoints-3', 'best-2', 'diverged-best-3'], False, 'fresh'),
    (['checkpoints-4'], False, 'stop'),
    (['checkpoints-4', 'diverged-checkpoints-5'], True, 'start_over'),
])
def test_when_none_verifies(names, start_over, verdict):
  assert policy.when_none_verifies(names, start_over) == verdict


def test_the_none_verifies_error_names_only_the_damaged_latest_ones():
  error = policy.none_verifies_error('/r/checkpoints', '/r/rejected',
                                     ['checkpoints-4', 'best-4', 'checkpoints-2.1'])
  assert isinstance(error, policy.CheckpointError)
  assert str(error) == ('no checkpoint in /r/checkpoints verifies (damaged: checkpoints-2.1, '
                        'checkpoints-4, moved to /r/rejected); run again with --start_over to '
                        'train from step 0, or use another --workdir')


# -- best -------------------------------------------------------------------------------------
def test_best_step_max_and_min():
  entries = [(1, 0.5), (2, 0.9), (3, 0.7), (4, 0.1)]
  assert policy.best_step(entries, 'max') == 2
  assert policy.best_step(entries, 'min') == 4
  assert policy.best_step(list(reversed(entries)), 'max') == 2   # the order given is irrelevant
  assert policy.best_step([], 'max') is None
  with pytest.raises(ValueError, match='best_mode'):
    policy.best_step(entries, 'largest')


@pytest.mark.parametrize('mode', ['max', 'min'])
def test_best_ties_go_to_the_newest_step(mode):
  assert policy.best_step([(3, 0.5), (1, 0.5), (2, 0.5)], mode) == 3
  better = 0.9 if mode == 'max' else 0.1
  assert policy.best_step([(1, better), (2, 0.5), (3, 0.5)], mode) == 1


def test_steps_without_a_value_or_with_nan_are_never_best():
  assert policy.best_step([(1, None), (2, 0.3), (3, math.nan)], 'max') == 2
  assert policy.best_step([(1, None), (2, math.nan)], 'min') is None
  assert not policy.improves(math.nan, None, 'max')
  assert policy.improves(0.1, math.nan, 'max')


def test_saves_best_only_a_newer_step_that_becomes_the_best():
  kept = [(4, 0.6)]
  assert policy.saves_best(5, 0.7, kept, 'max')
  assert policy.saves_best(5, 0.6, kept, 'max')           # a tie: the newer one
  assert not policy.saves_best(5, 0.5, kept, 'max')
  assert policy.saves_best(5, 0.5, kept, 'min')
  assert not policy.saves_best(4, 0.9, kept, 'max')       # the same step
  assert not policy.saves_best(3, 0.9, kept, 'max')       # an older one (a resumed run)
  assert policy.saves_best(1, 0.0, [], 'max')
  assert not policy.saves_best(1, math.nan, [], 'max')


# -- keep -------------------------------------------------------------------------------------
def test_keep_n_keeps_the_newest_and_prunes_the_rest():
  assert policy.kept([5, 1, 3, 2, 4], 2) == [4, 5]
  assert policy.pruned([5, 1, 3, 2, 4], 2) == [1, 2, 3]
  assert policy.kept([1, 2], 5) == [1, 2] and policy.pruned([1, 2], 5) == []
  assert policy.kept([3, 1, 2], None) == [1, 2, 3] and policy.pruned([3, 1, 2], None) == []
  assert policy.kept([1, 2, 3], 0) == [] and policy.pruned([1, 2, 3], 0) == [1, 2, 3]
  for steps in ([], [7], list(range(10))):
    for keep in (None, 1, 3):
      assert sorted(policy.kept(steps, keep) + policy.pruned(steps, keep)) == steps


def test_retention_of_a_writer_and_a_reader():
  assert policy.Retention.of(3) == policy.Retention(latest=3, best=1, averaged=1)
  assert policy.Retention.of(3, read_only=True) == policy.Retention(None, None, None)


# -- confirm ----------------------------------------------------------------------------------
def test_unconfirmed_are_the_checkpoints_from_the_step_before_the_bad_one():
  assert policy.unconfirmed([1, 2, 3, 4, 5], 4) == [3, 4, 5]
  assert policy.unconfirmed([2, 4], 4) == [4]
  assert policy.unconfirmed([2, 4], 6) == []
  assert policy.unconfirmed([0, 1], 1) == [0, 1]


# -- read -------------------------------------------------------------------------------------
def test_resolve_each_kind_and_a_step():
  kw = dict(latest=[2, 4], best=3, averaged=4, best_steps=[3], where='/r')
  assert policy.resolve('latest', **kw) == ('checkpoints', 4)
  assert policy.resolve('best', **kw) == ('best', 3)
  assert policy.resolve('averaged', **kw) == ('averaged', 4)
  assert policy.resolve(2, **kw) == ('checkpoints', 2)
  assert policy.resolve('3', **kw) == ('best', 3)
  # A step kept both as latest and best is read from DIR/checkpoints.
  assert policy.resolve(4, **{**kw, 'best_steps': [4]}) == ('checkpoints', 4)


@pytest.mark.parametrize('which, message', [
    ('latest', 'no checkpoint in /r/checkpoints: train first'),
    ('best', 'no best checkpoint in /r/best: the run has not evaluated'),
    ('averaged', 'no averaged checkpoint in /r/averaged: run python -m poolformers_jax.average '
                 '--workdir /r --last N first'),
    ('7', r'no checkpoint at step 7; kept steps: latest \[\], best \[\]'),
    ('newest', "--checkpoint='newest': use 'best', 'latest', 'averaged' or a step number"),
])
def test_resolve_says_what_to_do_when_there_is_none(which, message):
  with pytest.raises(policy.CheckpointError, match=message):
    policy.resolve(which, latest=[], best=None, averaged=None, where='/r')


def test_the_damaged_error_suggests_the_other_kept_steps():
  error = policy.damaged_error('/r/checkpoints/4', 'checksum of w differs', kept_steps=[2, 3, 2])
  assert str(error) == ('checkpoint /r/checkpoints/4 is damaged (checksum of w differs); evaluate '
                        'another one (--checkpoint latest, best or a step of [2, 3])')
  error = policy.damaged_error('/r/checkpoints/4', 'x', averaging=True)
  assert str(error).endswith('; average fewer (--last) or other steps')


# -- the non-finite error builds an error and does nothing else -------------------------------
def test_the_non_finite_error_is_built_without_touching_anything(tmp_path):
  error = _non_finite_error(5, float('nan'), unconfirmed=[4], last_good=2,
                            latest_dir=str(tmp_path / 'checkpoints'),
                            rejected_dir=str(tmp_path / 'rejected'), resumed_from=None)
  assert isinstance(error, NonFiniteLossError) and '\n' not in str(error)
  assert str(error).startswith('training loss is nan at step 5: stopped without saving anything '
                               f'after step 4; the last good checkpoint is step 2 in {tmp_path}')
  assert 'checkpoint 4, saved right before the step that diverged' in str(error)
  assert os.listdir(tmp_path) == []
  error = _non_finite_error(3, 1.5, unconfirmed=[], last_good=None, latest_dir='d',
                            rejected_dir='r', resumed_from=2)
  assert 'the update of step 3 is not finite (loss 1.5)' in str(error)
  assert 'no checkpoint was saved before it' in str(error)
  assert 'the checkpoint of step 2 this run resumed from' in str(error)


# -- the storage holds what the policy says ---------------------------------------------------
class _Position:
  def __init__(self, step):
    self.step = step

  def get_state(self):
    return {'step': self.step}


def _state(value):
  return {'w': jnp.full((3,), value, jnp.float32)}


@pytest.mark.parametrize('mode', ['max', 'min'])
def test_orbax_keeps_what_the_policy_says(tmp_path, mode):
  workdir = str(tmp_path / mode)
  values = [0.5, 0.7, 0.6, 0.7, 0.2]
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=2, best_metric='accuracy',
                                             best_mode=mode)
  try:
    for step, value in enumerate(values, start=1):
      checkpointer.save_latest(step, _state(value), _Position(step))
      checkpointer.save_best(step, _state(value), {'accuracy': value, 'loss': 1.0})
      checkpointer.poll()
    checkpointer.wait()
    assert checkpointer.latest.steps() == policy.kept(range(1, 6), 2) == [4, 5]
    best = policy.best_step(list(enumerate(values, start=1)), mode)
    assert best == (4 if mode == 'max' else 5) and checkpointer.best_step() == best
    assert checkpointer.best.steps() == [best]
  finally:
    checkpointer.close()
  # What a reader finds on disk: the same best, by the policy and by orbax's own ordering.
  reader = checkpoint_lib.Checkpointer(workdir, best_mode=mode, read_only=True)
  try:
    assert reader.best_step() == best == reader.best.manager.best_step()
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                            _state(0.0))
    state, step = reader.restore_state('best', abstract)
    assert step == best
    np.testing.assert_array_equal(state['w'], np.full((3,), values[best - 1], np.float32))
  finally:
    reader.close()


def test_rejecting_unconfirmed_moves_them_and_the_best_is_read_again(tmp_path):
  workdir = str(tmp_path)
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=3)
  try:
    for step, value in ((1, 0.1), (2, 0.5), (3, 0.9)):
      checkpointer.save_latest(step, _state(value), _Position(step))
      checkpointer.save_best(step, _state(value), {'accuracy': value})
    assert checkpointer.reject_unconfirmed(3) == [2, 3]
    assert checkpointer.latest.steps() == [1] and checkpointer.latest_step() == 1
    assert checkpointer.best_step() is None   # best 3 moved; 1 and 2 were pruned when saved
    assert sorted(os.listdir(os.path.join(workdir, 'rejected'))) == [
        'diverged-best-3', 'diverged-checkpoints-2', 'diverged-checkpoints-3']
    # A later save of a worse value becomes the best: nothing better is kept any more.
    checkpointer.save_best(4, _state(0.2), {'accuracy': 0.2})
    checkpointer.wait()
    assert checkpointer.best_step() == 4 and checkpointer.best.steps() == [4]
  finally:
    checkpointer.close()
