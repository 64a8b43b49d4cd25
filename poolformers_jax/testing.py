"""Test a token mixer's numerics in one call: `check_mixer`, the property checks it runs,
`MixerTestCase` for unittest suites, and `assert_sequence_parallel` for a mixer's sharded core.
Used by the test suite on every built-in mixer, and meant for yours (docs/api.md, "Testing a
mixer", says what each property checks and what is skipped):

    from poolformers_jax.testing import check_mixer
    check_mixer(MyMixer(num_heads=2))                  # raises AssertionError naming the property
    check_mixer(MyMixer(num_heads=2, causal=True))     # + causality (read from the `causal` field)

A mixer is an unbound Flax module following `mixer(x, mask=None, *, deterministic=True)`
(docs/design.md). The properties, in the order they are checked and reported (`PROPERTIES`):
output (shaped and typed like the input; when it fails, the rest do not run), padding_values,
padding_amount, batch_rows, causal, jit, grads, dropout, bfloat16. Every failure is a
`PropertyError` (an AssertionError) whose first line names the property and the worst offending
position, e.g. `padding_values: batch 1, position 9, feature 3: |a - b| = 0.41 > tol 1e-05`. A
property that does not hold by design is declared in the mixer class's traits (`MixerTraits(
not_by_design=..., padding_amount=...)`, poolformers_jax.layers.registry); check_mixer skips it
and says why in its report, as it does for what a mixer lacks (a dropout field, `deterministic`,
a `dtype` field).
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import traceback
import unittest
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

PROPERTIES = ('output', 'padding_values', 'padding_amount', 'batch_rows', 'causal', 'jit',
              'grads', 'dropout', 'bfloat16')


def bf16_bound(storage_error: float) -> float:
  """The largest relative error allowed for bfloat16 compute (float32 parameters) against float32:
  4x the error that merely STORING the input and parameters in bfloat16 causes, plus 2^-7.
  One bf16 rounding of the output alone is up to 2^-9 relative; compute may add a few more. A
  mixer that sums over the sequence in bfloat16 exceeds it by a factor growing with the length
  (tests/layers/test_bfloat16.py runs it at length 1024)."""
  return 4 * storage_error + 2 ** -7


BF16_BOUND = '4 * storage_error + 2**-7 (relative to max |float32 output|; see bf16_bound)'


class PropertyError(AssertionError):
  """A mixer property failed; `property` names it, and the message's first line starts with it."""

  failed: list[str]        # check_mixer's error: every failed property
  report: dict[str, str]   # check_mixer's error: every property's result

  def __init__(self, prop: str, message: str):
    super().__init__(f'{prop}: {message}')
    self.property = prop


def random_inputs(seed: int, batch: int, length: int, dim: int,
                  num_real: list[int] | None = None, dtype=jnp.float32):
  """x ~ N(0, 1) of shape [B, L, D] and a right-padded mask with `num_real[b]` real tokens."""
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((batch, length, dim)), dtype)
  if num_real is None:
    num_real = [length] * batch
  mask = jnp.asarray(np.arange(length)[None, :] < np.asarray(num_real)[:, None])
  return x, mask


def init_apply(module: nn.Module, x, mask=None, seed: int = 0, **kwargs):
  """Initializes `module` on (x, mask) and returns (params, output)."""
  variables = module.init(jax.random.PRNGKey(seed), x, mask, **kwargs)
  return variables, module.apply(variables, x, mask, **kwargs)


# --------------------------------------------------------------------------- helpers

def takes_deterministic(module: nn.Module) -> bool:
  """Whether the module's __call__ has a `deterministic` argument (passed only then)."""
  return 'deterministic' in inspect.signature(type(module).__call__).parameters


def _call_kwargs(module, call_kwargs, deterministic=True) -> dict[str, Any]:
  kwargs = dict(call_kwargs or {})
  if takes_deterministic(module):
    kwargs['deterministic'] = deterministic
  return kwargs


def _apply(module, variables, x, mask, call_kwargs=None, deterministic=True, rngs=None):
  return module.apply(variables, x, mask, rngs=rngs,
                      **_call_kwargs(module, call_kwargs, deterministic))


def _init(module, x, mask, call_kwargs=None, variables=None):
  """`variables`, else the module's initialised on (x, mask)."""
  if variables is not None:
    return variables
  return module.init(jax.random.PRNGKey(0), x, mask, **_call_kwargs(module, call_kwargs))


def _where(index: tuple[int | np.integer, ...], ndim: int) -> str:
  names = (('batch', 'position', 'feature') if ndim == 3 else
           ('batch', 'row', 'column', 'channel') if ndim == 4 else ())
  if len(names) == len(index):
    return ', '.join(f'{n} {i}' for n, i in zip(names, index))
  return f'index {tuple(index)}'


def assert_close(prop: str, actual, expected, *, atol: float, rtol: float = 0.0,
                 where=None, what: str = '') -> None:
  """Raises PropertyError(prop) naming the worst position where |actual - expected| exceeds
  atol + rtol |expected| (a NaN on one side only counts as infinitely far); `where` (broadcast
  against the arrays, e.g. the mask [B, L, 1]) limits the positions compared."""
  a = np.asarray(jnp.asarray(actual, jnp.float32))
  e = np.asarray(jnp.asarray(expected, jnp.float32))
  if a.shape != e.shape:
    raise PropertyError(prop, f'{what}shapes differ: {a.shape} vs {e.shape}')
  with np.errstate(invalid='ignore'):
    diff = np.abs(a - e)
    diff = np.where(np.isnan(a) & np.isnan(e), 0.0, np.where(np.isnan(diff), np.inf, diff))
    excess = diff - (atol + rtol * np.nan_to_num(np.abs(e)))
  if where is not None:
    excess = np.where(np.broadcast_to(np.asarray(where), excess.shape), excess, -np.inf)
  if excess.size and np.max(excess) > 0:
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    count = int(np.sum(excess > 0))
    tol = atol + rtol * np.nan_to_num(abs(e[worst]))
    raise PropertyError(prop, f'{what}{_where(worst, a.ndim)}: |a - b| = {diff[worst]:.3g} > tol '
                              f'{tol:.3g} (a = {a[worst]:.6g}, b = {e[worst]:.6g}); {count} of '
                              f'{excess.size} values differ')


def _real(mask, ndim):
  """The mask broadcast over the feature axis; None (everything real) without a mask."""
  if mask is None:
    return None
  return np.asarray(mask).reshape(np.shape(mask) + (1,) * (ndim - np.ndim(mask)))


# --------------------------------------------------------------------------- the property checks

def assert_padding_values_irrelevant(module: nn.Module, x, mask, *, seed: int = 1,
                                     atol: float = 1e-5, variables: Any = None,
                                     call_kwargs: Mapping | None = None) -> None:
  """Changing the values at padded positions never changes the outputs at real positions."""
  variables = _init(module, x, mask, call_kwargs, variables)
  noise = jax.random.normal(jax.random.PRNGKey(seed), x.shape, x.dtype) * 10.0
  x2 = jnp.where(mask[..., None], x, noise)
  y1 = _apply(module, variables, x, mask, call_kwargs)
  y2 = _apply(module, variables, x2, mask, call_kwargs)
  assert_close('padding_values', y2, y1, atol=atol, rtol=atol, where=_real(mask, y1.ndim))


def assert_padding_amount_irrelevant(module: nn.Module, x, mask, extra: int = 5, *,
                                     atol: float = 1e-5, variables: Any = None,
                                     call_kwargs: Mapping | None = None) -> None:
  """Appending `extra` padded positions does not change the outputs at real positions."""
  variables = _init(module, x, mask, call_kwargs, variables)
  b, l, d = x.shape
  x_long = jnp.concatenate([x, jnp.ones((b, extra, d), x.dtype) * 3.0], axis=1)
  mask_long = jnp.concatenate([mask, jnp.zeros((b, extra), bool)], axis=1)
  y = _apply(module, variables, x, mask, call_kwargs)
  y_long = _apply(module, variables, x_long, mask_long, call_kwargs)[:, :l]
  assert_close('padding_amount', y_long, y, atol=atol, rtol=atol, where=_real(mask, y.ndim),
               what=f'{extra} more padded positions: ')


def assert_batch_rows_independent(module: nn.Module, x, mask, *, atol: float = 1e-5,
                                  variables: Any = None,
                                  call_kwargs: Mapping | None = None) -> None:
  """Replacing one row's tokens (and its number of real tokens) never changes the real outputs
  of the other rows. Every row is replaced once (batch >= 2)."""
  variables = _init(module, x, mask, call_kwargs, variables)
  batch, length = x.shape[:2]
  assert batch >= 2, 'batch_rows needs a batch of at least 2 rows'
  y = _apply(module, variables, x, mask, call_kwargs)
  noise = jax.random.normal(jax.random.PRNGKey(11), x.shape, x.dtype) * 3.0
  for row in range(batch):
    x2 = x.at[row].set(noise[row])
    mask2 = mask
    if mask is not None:   # a full row becomes half padding, a padded row becomes full
      full = bool(np.all(np.asarray(mask[row])))
      mask2 = mask.at[row].set(jnp.arange(length) < (max(length // 2, 1) if full else length))
    y2 = _apply(module, variables, x2, mask2, call_kwargs)
    others = np.arange(batch) != row
    where = others.reshape((batch,) + (1,) * (y.ndim - 1))
    if mask is not None:
      where = where & _real(mask, y.ndim)
    assert_close('batch_rows', y2, y, atol=atol, rtol=atol, where=where,
                 what=f'changing row {row} changed another row: ')


def assert_causal(module: nn.Module, x, *, t: int | None = None, atol: float = 1e-5,
                  variables: Any = None, mask=None,
                  call_kwargs: Mapping | None = None) -> None:
  """Changing the tokens after position t never changes the outputs at positions <= t; and
  changing them does change some output after t (so the check cannot pass vacuously).
  With `mask`, only real positions are compared, and some row must have real tokens after t."""
  variables = _init(module, x, mask, call_kwargs, variables)
  length = x.shape[1]
  t = length // 2 if t is None else t
  future = jnp.arange(length)[None, :, None] > t
  x2 = jnp.where(future, jax.random.normal(jax.random.PRNGKey(7), x.shape, x.dtype), x)
  y1 = np.asarray(_apply(module, variables, x, mask, call_kwargs), np.float32)
  y2 = np.asarray(_apply(module, variables, x2, mask, call_kwargs), np.float32)
  real = np.ones(y1.shape[:2] + (1,), bool) if mask is None else _real(mask, 3)
  padding = 'with padding' if mask is not None else 'no padding'
  past = np.broadcast_to(real & (np.arange(length)[None, :, None] <= t), y1.shape)
  assert_close('causal', y2, y1, atol=atol, rtol=atol, where=past,
               what=f'({padding}) changing tokens after position {t} changed an output at or '
                    f'before it: ')
  later = np.broadcast_to(real & (np.arange(length)[None, :, None] > t), y1.shape)
  if not np.any(later) or np.allclose(y1[later], y2[later], atol=atol):
    raise PropertyError('causal', f'({padding}) future outputs did not change when the tokens '
                                  f'after position {t} changed: the check is vacuous')


def assert_jit_matches(module: nn.Module, x, mask, *, atol: float = 1e-5,
                       variables: Any = None, call_kwargs: Mapping | None = None) -> None:
  """jax.jit(apply) equals eager apply (run under jax.disable_jit, so nested jits run eagerly
  too): catches Python-side state read at trace time, and tracer-only branches."""
  variables = _init(module, x, mask, call_kwargs, variables)
  kwargs = _call_kwargs(module, call_kwargs)
  apply = lambda v, xx, mm: module.apply(v, xx, mm, **kwargs)
  with jax.disable_jit():
    eager = apply(variables, x, mask)
  jitted = jax.jit(apply)(variables, x, mask)
  chex.assert_trees_all_equal_structs(jitted, eager)
  for path, a, e in zip(*([p for p, _ in jax.tree_util.tree_flatten_with_path(eager)[0]],
                         jax.tree.leaves(jitted), jax.tree.leaves(eager))):
    same_grid = mask is not None and np.shape(e)[:2] == np.shape(mask)   # a pooled output is not
    assert_close('jit', a, e, atol=atol, rtol=atol, where=_real(mask, np.ndim(e)) if same_grid
                 else None, what=f'jitted vs eager{_path(path)}: ')


def _path(path) -> str:
  return jax.tree_util.keystr(path)


def assert_finite_grads(module: nn.Module, x, mask, *, variables: Any = None,
                        call_kwargs: Mapping | None = None, every_param: bool = True) -> None:
  """Gradients of sum(y^2) over the real outputs w.r.t. parameters and inputs are finite; no
  parameter array (`every_param`; else: not all of them) and no real input token gets an
  all-zero gradient."""
  variables = _init(module, x, mask, call_kwargs, variables)
  real = 1.0 if mask is None else jnp.asarray(_real(mask, x.ndim), jnp.float32)

  def loss(v, xx):
    y = _apply(module, v, xx, mask, call_kwargs).astype(jnp.float32)
    return jnp.sum(jnp.square(y) * real)

  g_params, g_x = jax.grad(loss, argnums=(0, 1))(variables, x)
  for path, g in jax.tree_util.tree_flatten_with_path(g_params)[0]:
    bad = ~np.isfinite(np.asarray(g, np.float32))
    if bad.any():
      first = np.unravel_index(int(np.argmax(bad)), bad.shape)
      raise PropertyError('grads', f'parameter {_path(path)}{list(first)}: gradient '
                                   f'{float(np.asarray(g)[first])} ({int(bad.sum())} of {bad.size}'
                                   f' non-finite)')
  gx = np.asarray(g_x, np.float32)
  bad = ~np.isfinite(gx)
  if bad.any():
    first = np.unravel_index(int(np.argmax(bad)), bad.shape)
    raise PropertyError('grads', f'input {_where(first, gx.ndim)}: gradient {gx[first]} '
                                 f'({int(bad.sum())} of {bad.size} non-finite)')
  zero = [_path(p) for p, g in jax.tree_util.tree_flatten_with_path(g_params)[0]
          if not np.any(np.asarray(g))]
  leaves = jax.tree_util.tree_leaves(g_params)
  if leaves and (len(zero) == len(leaves) or (every_param and zero)):
    raise PropertyError('grads', f'parameter {zero[0]}: all-zero gradient '
                                 f'({len(zero)} of {len(leaves)} parameter arrays)')
  token_norm = np.abs(gx).reshape(gx.shape[:2] + (-1,)).sum(-1)        # [B, L(, ...)]
  dead = (token_norm == 0) & (np.ones_like(token_norm, bool) if mask is None else np.asarray(mask))
  if dead.any():
    first = np.unravel_index(int(np.argmax(dead)), dead.shape)
    raise PropertyError('grads', f'input {_where(first, 2)}: all-zero gradient at a real token '
                                 f'({int(dead.sum())} tokens)')


def assert_dropout_consistent(module: nn.Module, x, mask, *, variables: Any = None,
                              call_kwargs: Mapping | None = None, seed: int = 3) -> None:
  """deterministic=False with the same rng gives identical outputs twice, and they differ from
  deterministic=True at some real position (so dropout does act)."""
  variables = _init(module, x, mask, call_kwargs, variables)
  rngs = lambda: {'dropout': jax.random.PRNGKey(seed)}
  y1 = _apply(module, variables, x, mask, call_kwargs, deterministic=False, rngs=rngs())
  y2 = _apply(module, variables, x, mask, call_kwargs, deterministic=False, rngs=rngs())
  det = _apply(module, variables, x, mask, call_kwargs, deterministic=True)
  real = _real(mask, y1.ndim)
  assert_close('dropout', y2, y1, atol=0.0, where=real,
               what='deterministic=False twice with the same rng: ')
  same = np.isclose(np.asarray(y1, np.float32), np.asarray(det, np.float32), atol=1e-6)
  if np.all(same if real is None else same | ~np.broadcast_to(real, same.shape)):
    rate = getattr(module, 'dropout_rate', None)
    raise PropertyError('dropout', f'every real output of deterministic=False (dropout_rate='
                                   f'{rate}) equals deterministic=True: no dropout acted')


def _with_routes(module, variables, x, mask, call_kwargs=None):
  """(output, discrete routes sown as 'routed_head' or None): AdaMRA's argmax routing."""
  y, state = module.apply(variables, x, mask, mutable=['intermediates'],
                          **_call_kwargs(module, call_kwargs))
  found = [v for path, v in jax.tree_util.tree_flatten_with_path(state.get('intermediates', {}))[0]
           if 'routed_head' in _path(path)]
  return y, (np.asarray(found[0]) if found else None)


def _relative_error(y, reference, where):
  real = np.broadcast_to(where, np.shape(y))
  diff = np.abs(np.asarray(y, np.float32) - np.asarray(reference, np.float32)) * real
  scale = float((np.abs(np.asarray(reference, np.float32)) * real).max())
  return diff / scale


def assert_bfloat16_close(module: nn.Module, x, mask, *, variables: Any = None,
                          call_kwargs: Mapping | None = None,
                          min_routed_alike: float = 0.97) -> tuple[float, float]:
  """bfloat16 compute (`module.clone(dtype=bfloat16)`, float32 parameters, bf16 input) against
  float32: the relative error stays within `bf16_bound(storage error)`, where the storage error
  is float32 compute on the bf16-rounded input and parameters. Tokens a mixer routes discretely
  (it sows 'routed_head', as AdaMRA) are compared only where all three runs route alike, and
  at least `min_routed_alike` of them must. Returns (compute error, storage error)."""
  variables = _init(module, x, mask, call_kwargs, variables)
  to_bf16_and_back = lambda t: jax.tree.map(lambda a: a.astype(jnp.bfloat16).astype(a.dtype), t)
  f32, bf16 = module.clone(dtype=None), module.clone(dtype=jnp.bfloat16)
  reference, heads = _with_routes(f32, variables, x, mask, call_kwargs)
  stored, stored_heads = _with_routes(f32, to_bf16_and_back(variables), to_bf16_and_back(x), mask,
                                      call_kwargs)
  computed, computed_heads = _with_routes(bf16, variables, x.astype(jnp.bfloat16), mask,
                                          call_kwargs)
  if computed.dtype != jnp.bfloat16:
    raise PropertyError('bfloat16', f'dtype=bfloat16 gave a {computed.dtype} output')
  compared = np.ones(x.shape[:2], bool) if mask is None else np.asarray(mask)
  if heads is not None:
    alike = (heads == stored_heads) & (heads == computed_heads)
    if alike[compared].mean() < min_routed_alike:
      raise PropertyError('bfloat16', f'only {alike[compared].mean():.3f} of the tokens route '
                                      f'alike in float32 and bfloat16')
    compared = compared & alike
  where = compared.reshape(compared.shape + (1,) * (reference.ndim - 2))
  storage = _relative_error(stored, reference, where)
  compute = _relative_error(computed, reference, where)
  bound = bf16_bound(float(storage.max()))
  if not compute.max() <= bound:
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(compute), np.inf, compute))),
                             compute.shape)
    raise PropertyError('bfloat16', f'{_where(worst, compute.ndim)}: relative error '
                                    f'{float(compute[worst]):.3g} > bound {bound:.3g} = '
                                    f'{BF16_BOUND} (storage error {float(storage.max()):.3g})')
  return float(compute.max()), float(storage.max())


# --------------------------------------------------------------------------- one call

def _known(skips: Mapping[str, str], where: str) -> dict[str, str]:
  unknown = sorted(set(skips) - set(PROPERTIES))
  if unknown:
    raise ValueError(f'{where} names unknown properties {unknown}; choose from '
                     f'{list(PROPERTIES)}.')
  return dict(skips)


def not_by_design(mixer: nn.Module) -> dict[str, str]:
  """{property: why} that do not hold by design for this mixer with its options, as its class's
  traits declare them (`MixerTraits.not_by_design` and `padding_amount`)."""
  from poolformers_jax.layers.registry import options_of, traits_of
  return _known(traits_of(mixer).kit_skips(options_of(mixer)),
                f'{type(mixer).__name__}.traits')


def _fields(module) -> set[str]:
  return {f.name for f in dataclasses.fields(module)}


def takes_no_mask(module: nn.Module) -> bool:
  """Whether the module's `mask` argument has no default (`__call__(self, x, mask)`): then it
  is never called with mask=None."""
  parameters = list(inspect.signature(type(module).__call__).parameters.values())[1:]
  mask = next((p for p in parameters if p.name == 'mask'), parameters[1] if len(parameters) > 1
              else None)
  return mask is not None and mask.default is inspect.Parameter.empty


def _raised(prop: str, error: BaseException, mixer: nn.Module) -> PropertyError:
  """An exception inside a property, as that property's failure: the error's own line and the
  place it was raised (the deepest frame in the mixer's file, else the deepest one)."""
  frames = traceback.extract_tb(error.__traceback__)
  try:
    own = os.path.abspath(inspect.getsourcefile(type(mixer)) or '')
  except TypeError:
    own = ''
  mine = [f for f in frames if os.path.abspath(f.filename) == own] or frames[-1:]
  where = f' (raised at {os.path.basename(mine[-1].filename)}:{mine[-1].lineno}' + (
      f': {mine[-1].line.strip()})' if mine[-1].line else ')') if mine else ''
  line = ' '.join(str(error).split()) or '(no message)'
  return PropertyError(prop, f'{type(mixer).__name__} raised {type(error).__name__}: '
                             f'{line}{where}')


def _check_output(mixer, variables, x, mask, call_kwargs) -> None:
  """One array, shaped like x, of x's dtype (or the mixer's own `dtype`)."""
  y = _apply(mixer, variables, x, mask, call_kwargs)
  if not hasattr(y, 'shape') or not hasattr(y, 'dtype'):
    raise PropertyError('output', f'{type(mixer).__name__} returned a {type(y).__name__}, not '
                                  f'one array [batch, length, dim]')
  if tuple(y.shape) != tuple(x.shape):
    raise PropertyError('output', f'shape {tuple(y.shape)} for input {tuple(x.shape)}: a mixer '
                                  'returns [batch, length, dim] like its input')
  allowed = {jnp.dtype(x.dtype)}
  if getattr(mixer, 'dtype', None) is not None:
    allowed.add(jnp.dtype(mixer.dtype))
  if jnp.dtype(y.dtype) not in allowed:
    raise PropertyError('output', f'dtype {jnp.dtype(y.dtype)} for a {jnp.dtype(x.dtype)} input: '
                                  f'a mixer returns {" or ".join(sorted(map(str, allowed)))}')


def check_mixer(mixer: nn.Module, *, causal: bool | None = None, batch: int = 2,
                length: int = 16, dim: int = 16, num_real: Sequence[int] | None = None,
                seed: int = 0, atol: float = 1e-5, call_kwargs: Mapping | None = None,
                skip: Mapping[str, str] | None = None, dropout_rate: float = 0.5,
                variables: Any = None) -> dict[str, str]:
  """Runs every property of `PROPERTIES` that applies to `mixer` on random inputs [batch,
  length, dim] (row 0 full, the others padded; `num_real` overrides) and returns the report
  {property: 'ok' | 'skipped: why'}. `causal`: check causality (default: the mixer's `causal`
  field, False without one). `call_kwargs`: extra keyword arguments of every call.
  Raises PropertyError (an AssertionError) whose first line names the first failing property and
  its worst position; the other failures follow on later lines."""
  if causal is None:
    causal = bool(getattr(mixer, 'causal', False))
  skips = {**not_by_design(mixer), **_known(skip or {}, 'check_mixer(skip=...)')}
  if not causal:
    skips.setdefault('causal', 'not declared causal')
  if not any('dropout' in f for f in _fields(mixer)):
    skips.setdefault('dropout', 'the mixer has no dropout field (e.g. dropout_rate)')
  if not takes_deterministic(mixer):
    skips.setdefault('dropout', '__call__ takes no `deterministic`')
  if 'dtype' not in _fields(mixer):
    skips.setdefault('bfloat16', 'the mixer has no `dtype` field')
  if num_real is None:
    num_real = [length] + [max(1, length - 3 - 2 * b) for b in range(batch - 1)]
  x, mask = random_inputs(seed, batch, length, dim, list(num_real))
  given = variables
  kw: dict[str, Any] = dict(call_kwargs=call_kwargs)   # and 'variables', once made
  unpadded = jnp.ones_like(mask) if takes_no_mask(mixer) else None   # mask=None, if it takes it

  def causal_both_masks():
    assert_causal(mixer, x, mask=unpadded, atol=atol, **kw)
    assert_causal(mixer, x, mask=mask, atol=atol, **kw)

  def output():   # init runs even where the output check is declared away
    kw['variables'] = _init(mixer, x, mask, call_kwargs, given)
    if 'output' not in skips:
      _check_output(mixer, kw['variables'], x, mask, call_kwargs)

  checks: dict[str, Callable[[], Any]] = {
      'output': output,
      'padding_values': lambda: assert_padding_values_irrelevant(mixer, x, mask, atol=atol, **kw),
      'padding_amount': lambda: assert_padding_amount_irrelevant(mixer, x, mask, atol=atol, **kw),
      'batch_rows': lambda: assert_batch_rows_independent(mixer, x, mask, atol=atol, **kw),
      'causal': causal_both_masks,
      'jit': lambda: assert_jit_matches(mixer, x, mask, atol=atol, **kw),
      'grads': lambda: assert_finite_grads(mixer, x, mask, **kw),
      'dropout': lambda: _check_dropout(mixer, x, mask, call_kwargs, dropout_rate),
      'bfloat16': lambda: assert_bfloat16_close(mixer, x, mask, **kw),
  }
  report, failures = {}, []
  for prop in PROPERTIES:
    if prop in skips and prop != 'output':
      report[prop] = f'skipped: {skips[prop]}'
      continue
    if prop != 'output' and 'variables' not in kw:
      report[prop] = 'not run: output failed'
      continue
    try:
      checks[prop]()
      report[prop] = f'skipped: {skips[prop]}' if prop in skips else 'ok'
    except AssertionError as e:   # a PropertyError, or a plain assert inside a check
      failures.append(e if isinstance(e, PropertyError) else PropertyError(prop, str(e)))
      report[prop] = 'FAILED'
    except Exception as e:   # pylint: disable=broad-except  (the mixer's own error, a bad return)
      failures.append(_raised(prop, e, mixer))
      report[prop] = 'FAILED'
    if prop == 'output' and report[prop] == 'FAILED':
      kw.pop('variables', None)   # init or apply raised, or the output is unusable
  if failures:
    name = type(mixer).__name__
    lines = [str(failures[0]), f'  ({name}: first of {len(failures)} failed properties; '
                               f'inputs {batch}x{length}x{dim}, real tokens {list(num_real)})']
    lines += ['  also ' + str(f).splitlines()[0] for f in failures[1:]]
    lines += [f'  skipped {p}: {why}' for p, why in skips.items()]
    error = PropertyError(failures[0].property, '')
    error.args = ('\n'.join(lines),)
    error.failed = [f.property for f in failures]
    error.report = report
    raise error
  return report


def _check_dropout(mixer, x, mask, call_kwargs, rate):
  if 'dropout_rate' in _fields(mixer) and not mixer.dropout_rate:
    mixer = mixer.clone(dropout_rate=rate)   # a rate of 0 would pass the first half vacuously
  assert_dropout_consistent(mixer, x, mask, call_kwargs=call_kwargs)


# --------------------------------------------------------------------------- unittest / chex

class MixerTestCase(chex.TestCase):
  """A unittest base for a mixer: set `make_mixer` (and `causal` if its causality should be
  checked) in a subclass; it runs `check_mixer`, and the mixer under `chex.variants` with and
  without jit. Set `batch`, `length`, `dim` for other shapes. Public kit: `check_mixer` for a
  unittest / absltest suite, where a user's tests are classes rather than pytest functions.

      class MyMixerTest(MixerTestCase):
        def make_mixer(self):
          return MyMixer(num_heads=2)
  """
  causal: bool | None = None
  batch, length, dim = 2, 16, 16

  def make_mixer(self) -> nn.Module | None:
    return None

  def _mixer(self) -> nn.Module:
    mixer = self.make_mixer()
    if mixer is None:
      raise unittest.SkipTest('MixerTestCase itself: a subclass sets make_mixer')
    return mixer

  def test_check_mixer(self):
    check_mixer(self._mixer(), causal=self.causal, batch=self.batch, length=self.length,
                dim=self.dim)

  @chex.variants(with_jit=True, without_jit=True)
  def test_padding_values_under_variant(self):
    """Outputs are shaped like the input, finite, and padding values never reach real tokens,
    in the jitted and the eager variant alike."""
    mixer = self._mixer()
    x, mask = random_inputs(0, self.batch, self.length, self.dim,
                            [self.length] + [self.length // 2] * (self.batch - 1))
    variables = _init(mixer, x, mask)
    kwargs = _call_kwargs(mixer, None)
    apply = self.variant(lambda v, xx, mm: mixer.apply(v, xx, mm, **kwargs))
    y = apply(variables, x, mask)
    chex.assert_shape(y, x.shape)
    chex.assert_tree_all_finite(y)
    noise = jnp.where(mask[..., None], x, 100.0)
    assert_close('padding_values', apply(variables, noise, mask), y, atol=1e-5, rtol=1e-5,
                 where=_real(mask, y.ndim))


# --------------------------------------------------------------------------- sequence parallelism

def assert_sequence_parallel(mixer: nn.Module, *, sequence: int = 4, length: int = 48,
                             dim: int = 16, rtol: float = 1e-5, seed: int = 0,
                             call_kwargs: Mapping[str, Any] | None = None) -> list:
  """`sequence_parallel`: the mixer split over `sequence` devices along the tokens (the trainer's
  mesh, `make_mesh`: the remaining devices along the batch) gives the outputs, the loss and every
  gradient (parameters and input) of the unsplit mixer, within `rtol` of each array's largest
  magnitude. Rows are padded differently (the mask crosses shard boundaries). Returns (op, shape)
  of every array the compiled sharded program's collectives move (`Collective.moved`), so the
  caller can bound what crosses devices."""
  from poolformers_jax.layers.sequence_parallel import sharded_sequences
  from poolformers_jax.trainer import sharding
  mesh = sharding.make_mesh(sizes={sharding.SEQUENCE_AXIS: sequence})
  rows = sharding.batch_devices(mesh)
  x, _ = random_inputs(seed, 2 * rows, length, dim)
  mask = jnp.arange(length)[None, :] < jnp.asarray([length, length - 7] * rows)[:, None]
  call_kwargs = dict(call_kwargs or {})
  variables = _init(mixer, x, mask, call_kwargs)

  def loss(variables, x, mask):
    y = _apply(mixer, variables, x, mask, call_kwargs)
    return jnp.sum(jnp.where(mask[..., None], y, 0) ** 2), y

  grad = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
  expected = jax.jit(grad)(variables, x, mask)

  def split(variables, x, mask):
    with sharded_sequences(mesh):
      return grad(variables, x, mask)

  tokens = sharding.batch_sharded(mesh, 2)
  args = (variables, jax.device_put(x, tokens), jax.device_put(mask, tokens))
  compiled = jax.jit(split).lower(*args).compile()
  actual = compiled(*args)
  names = ['loss', 'outputs', *(f'grad {_path(p)}' for p, _ in
                                jax.tree_util.tree_flatten_with_path(expected[1][0])[0]),
           'grad input']
  flat_e, flat_a = jax.tree.leaves(expected), jax.tree.leaves(actual)
  # tree order: ((loss, outputs), (param grads..., input grad))
  for name, a, e in zip(names, flat_a, flat_e):
    scale = float(jnp.max(jnp.abs(e))) if e.size else 0.0
    assert_close('sequence_parallel', a, e, atol=rtol * max(scale, 1e-30),
                 what=f'{type(mixer).__name__} {name} on {sequence} sequence shards: ')
  text = compiled.as_text()
  assert text is not None, f'{jax.default_backend()} gives no compiled text to read'
  return [(op.op, shape) for op in sharding.collective_ops(text) for shape in op.moved]
