"""Checkpoint policy: which steps to keep, confirm, reject, resume from and call best, as pure
functions of lists of steps and metric values (no jax, no orbax, no files); and the error texts.
The sections below: keep, best, confirm (a checkpoint is good once the step after it was
finite), resume (newest first; a damaged one is moved to DIR/rejected/ and the next older tried),
read ('best' | 'latest' | 'averaged' | a step).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

LATEST_DIR = 'checkpoints'
BEST_DIR = 'best'
AVERAGED_DIR = 'averaged'
REJECTED_DIR = 'rejected'
KINDS = (LATEST_DIR, BEST_DIR, AVERAGED_DIR)


class CheckpointError(ValueError):
  """No usable checkpoint (damaged, or none where one is needed); the message says what to do."""


# -- keep -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Retention:
  """How many checkpoints of each kind a workdir keeps; None = all (a reader deletes nothing)."""
  latest: int | None = 2
  best: int | None = 1
  averaged: int | None = 1

  @classmethod
  def of(cls, keep: int, read_only: bool = False) -> Retention:
    return cls(None, None, None) if read_only else cls(latest=int(keep))


def kept(steps: Iterable[int], keep: int | None) -> list[int]:
  """The steps a manager keeping the newest `keep` holds (ascending); None keeps them all."""
  ordered = sorted(set(steps))
  if keep is None:
    return ordered
  return ordered[len(ordered) - keep:] if keep > 0 else []


def pruned(steps: Iterable[int], keep: int | None) -> list[int]:
  """The steps a manager keeping the newest `keep` deletes (ascending)."""
  ordered = sorted(set(steps))
  holds = set(kept(ordered, keep))
  return [s for s in ordered if s not in holds]


# -- best -------------------------------------------------------------------------------------
def improves(value: float, best: float | None, mode: str) -> bool:
  """Whether a checkpoint with metric `value` becomes the best over a kept best of `best` (None:
  none kept). A tie improves (the newer step wins, as in `best_step`); a NaN never does."""
  if mode not in ('min', 'max'):
    raise ValueError(f"best_mode={mode!r}: use 'min' or 'max'")
  if math.isnan(value):
    return False
  if best is None or math.isnan(best):
    return True
  return value >= best if mode == 'max' else value <= best


def best_step(entries: Sequence[tuple[int, float | None]], mode: str) -> int | None:
  """The step of the best metric among (step, value) pairs; ties go to the newest step, steps
  without a value (None) or with NaN are never best; None when no step has a value."""
  best, best_value = None, None
  for step, value in sorted(entries, key=lambda e: e[0]):
    if value is not None and improves(value, best_value, mode):
      best, best_value = step, value
  return best


def saves_best(step: int, value: float, kept: Sequence[tuple[int, float | None]],
               mode: str) -> bool:
  """Whether a new checkpoint of `step` with metric `value` is saved as the best, given the kept
  best ones' (step, value): only a step newer than all of them that `best_step` then picks."""
  if any(s >= step for s, _ in kept):
    return False
  return best_step([*kept, (step, value)], mode) == step


# -- confirm ----------------------------------------------------------------------------------
def unconfirmed(steps: Iterable[int], first_bad_step: int) -> list[int]:
  """The checkpoints a non-finite step `first_bad_step` leaves unconfirmed: from the step before
  it on (finite, but the update before a NaN step is often already ~1e29)."""
  return sorted(s for s in set(steps) if s >= first_bad_step - 1)


# -- resume -----------------------------------------------------------------------------------
def resume_order(steps: Iterable[int], rejected: Iterable[int] = ()) -> list[int]:
  """The order in which resume tries the kept steps: newest first, rejected ones never."""
  skip = set(rejected)
  return sorted((s for s in set(steps) if s not in skip), reverse=True)


def fallback(order: Sequence[int], damaged: int) -> str:
  """What resume does after `damaged` (one of `order`) fails to verify."""
  i = list(order).index(damaged)
  return f'falling back to {order[i + 1]}' if i + 1 < len(order) else 'no older checkpoint'


def damaged_before(rejected_names: Iterable[str]) -> list[str]:
  """The entries of DIR/rejected/ that were latest checkpoints found damaged (not the diverged
  ones of a non-finite step nor best ones)."""
  return sorted(n for n in rejected_names if n.startswith(LATEST_DIR))


def when_none_verifies(rejected_names: Iterable[str], start_over: bool) -> str:
  """'fresh': nothing was ever kept (train from step 0); 'start_over': every checkpoint was
  damaged and the caller asked to train from step 0; 'stop': damaged and not asked."""
  if not damaged_before(rejected_names):
    return 'fresh'
  return 'start_over' if start_over else 'stop'


# -- read -------------------------------------------------------------------------------------
def resolve(which: str | int, *, latest: Sequence[int], best: int | None,
            averaged: int | None, best_steps: Sequence[int] = (),
            where: str = 'DIR') -> tuple[str, int]:
  """'best' | 'latest' | 'averaged' | a step -> (kind, step): `latest` are the kept latest steps,
  `best` / `averaged` the best and newest averaged step (None: none), `best_steps` the kept best
  ones. CheckpointError, saying what to do, when there is none."""
  which = str(which)
  if which == 'averaged':
    if averaged is None:
      raise CheckpointError(f'no averaged checkpoint in {where}/{AVERAGED_DIR}: run python -m '
                            f'poolformers_jax.average --workdir {where} --last N first')
    return AVERAGED_DIR, averaged
  if which == 'best':
    if best is None:
      raise CheckpointError(f'no best checkpoint in {where}/{BEST_DIR}: the run has not '
                            'evaluated on validation yet; use --checkpoint latest')
    return BEST_DIR, best
  if which == 'latest':
    if not latest:
      raise CheckpointError(f'no checkpoint in {where}/{LATEST_DIR}: train first '
                            '(python train.py --config ... --workdir DIR)')
    return LATEST_DIR, max(latest)
  if not which.isdigit():
    raise CheckpointError(f"--checkpoint={which!r}: use 'best', 'latest', 'averaged' or a step "
                          'number')
  step = int(which)
  for kind, steps in ((LATEST_DIR, latest), (BEST_DIR, best_steps)):
    if step in steps:
      return kind, step
  raise CheckpointError(f'no checkpoint at step {step}; kept steps: latest {sorted(latest)}, '
                        f'best {sorted(best_steps)}')


# -- errors (built, not raised; nothing here touches a file) ----------------------------------
def none_verifies_error(latest_dir: str, rejected_dir: str,
                        rejected_names: Iterable[str]) -> CheckpointError:
  return CheckpointError(
      f'no checkpoint in {latest_dir} verifies (damaged: '
      f'{", ".join(damaged_before(rejected_names))}, moved to {rejected_dir}); '
      'run again with --start_over to train from step 0, or use another --workdir')


def damaged_error(step_dir: str, reason: object, *, kept_steps: Iterable[int] = (),
                  averaging: bool = False) -> CheckpointError:
  """A checkpoint asked for by name is damaged: evaluate (or average) another one."""
  if averaging:
    todo = 'average fewer (--last) or other steps'
  else:
    todo = ('evaluate another one (--checkpoint latest, best or a step of '
            f'{sorted(set(kept_steps))})')
  return CheckpointError(f'checkpoint {step_dir} is damaged ({reason}); {todo}')
