"""Retrace guards for the tests: a function, a step or a decoder compiles at most `n` programs over
the batches it is given (`assert_traces`) or in the loop that drives it (`assert_driver_traces`).
Harness, not kit: what a user checks of a mixer is poolformers_jax.testing."""
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np


def compilations(fn) -> int:
  """How many programs the jitted `fn` (jax.jit's result) has compiled so far."""
  return fn._cache_size()   # pylint: disable=protected-access


def _counted(fn: Callable, jit_kwargs: dict) -> tuple[str, Callable, Callable[[], int]]:
  """(name, the function to run, how many times it traced so far).

  - A jitted function (jax.jit's result, e.g. an eval step or a decoder): the new entries of its
    compilation cache are counted, so its own shardings and static arguments stay as they are.
  - Anything else (a Flax `apply`, a bound method, a plain function): wrapped in a fresh Python
    function that counts its traces, then jitted with `jit_kwargs`. (`chex.assert_max_traces`
    refuses a JAX-transformed function such as a Flax `apply`, and keys its counter on the
    wrapper's source, so a second check would inherit the first one's count.)
  """
  name = getattr(fn, '__name__', repr(fn))
  if hasattr(fn, '_cache_size') and hasattr(fn, 'lower'):
    before = compilations(fn)
    return name, fn, lambda: compilations(fn) - before
  traces = []

  def counted(*args):   # a fresh Python function each call: its count starts at 0
    traces.append(1)
    return fn(*args)

  return name, jax.jit(counted, **jit_kwargs), lambda: len(traces)


def _retraced(name: str, count: int, n: int, calls: str) -> AssertionError:
  return AssertionError(f'retrace: {name} compiled {count} times in {calls}; at most {n} allowed')


def assert_traces(fn: Callable, batches: Iterable[Sequence[Any]], n: int = 1,
                  **jit_kwargs) -> list[Any]:
  """Calls `fn(*args)` on each argument tuple of `batches` and asserts that it traced (compiled)
  at most `n` times; returns the outputs. How `fn` is counted: `_counted`."""
  name, run, count = _counted(fn, jit_kwargs)
  result = []
  for args in batches:
    result.append(run(*args))
    if count() > n:
      break
  if count() > n:
    raise _retraced(name, count(), n, f'{len(result)} calls (the last with shapes '
                    f'{jax.tree.map(np.shape, args)})')
  return result


def assert_driver_traces(fn: Callable, driver: Callable[[Callable], Any], n: int = 1,
                         **jit_kwargs) -> Any:
  """Calls `driver(f)` once, `f` standing for `fn`, and asserts that `fn` traced (compiled) at most
  `n` times in it; returns what the driver returns. E.g. an eval loop:
  `assert_driver_traces(step, lambda run: evaluate_state(config, setup, state, 'test',
  eval_step=run))`."""
  name, run, count = _counted(fn, jit_kwargs)
  result = driver(run)
  if count() > n:
    raise _retraced(name, count(), n, 'its driver')
  return result
