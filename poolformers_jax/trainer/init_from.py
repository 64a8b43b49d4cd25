"""`config.init_from`: start a run from another run's parameters (fine-tuning, e.g. 224 -> 384).

Only the model's variables are read ('params', and 'batch_stats'); the optimizer state and the
step start fresh. Per parameter (names are '/'-joined paths):
- same name, same shape: copied;
- same name, other shape: resized by the first matching rule of `resize_rules` ((regex,
  fn(name, old, new_shape) -> new)), else an error;
- only in the new model: an error, unless its name matches `allow_missing`
  (`config.init_from_allow_missing`, e.g. '^classifier/'): kept as initialised, logged;
- matching `fresh` (`config.init_from_fresh`): kept as initialised even when the checkpoint has
  it (a new head of another size);
- only in the checkpoint (the pre-training heads a classifier drops): logged, ignored.
Missing and unmatched-in-shape names fail together, the unused ones listed too.

Rules (`RESIZE_RULES`): ViT / DeiT / HVT position embeddings (`pos_embed*/pos_embedding`,
[1, L, D]) whose patch part is a square grid on both sides are resized on the 2D grid with
PyTorch's bicubic (a = -0.75, align_corners=False), the class token copied: exactly DeiT's
fine-tuning code; otherwise (HVT's pooled sequences) the same cubic along the sequence. PoNet /
BERT position tables are tiled cyclically (`tile_positions`), and a self-pretrained LRA
encoder's token table loses its [MASK] row (`drop_mask_row`).
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import flax
import jax
import numpy as np
import orbax.checkpoint as ocp

from poolformers_jax.trainer import checkpoint as checkpoint_lib

ResizeFn = Callable[[str, np.ndarray, tuple[int, ...]], np.ndarray]
BICUBIC_A = -0.75           # PyTorch's cubic convolution coefficient (jax.image uses -0.5)


def cubic_resize_matrix(n_in: int, n_out: int, a: float = BICUBIC_A) -> np.ndarray:
  """[n_out, n_in] weights of PyTorch's `interpolate(mode='bicubic', align_corners=False)` on
  one axis: source x = (i + 0.5) n_in / n_out - 0.5, 4 taps, edge indices clamped."""
  src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
  x0 = np.floor(src)
  t = src - x0
  weights = np.zeros((n_out, n_in))
  for k in range(-1, 3):
    d = np.abs(t - k)
    w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                 ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)
    np.add.at(weights, (np.arange(n_out), np.clip(x0 + k, 0, n_in - 1).astype(int)), w)
  return weights


def resize_grid(grid: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  """Bicubic resize of `[h, w, D]` to `[size[0], size[1], D]` (separable, float64)."""
  rows = cubic_resize_matrix(grid.shape[0], size[0])
  cols = cubic_resize_matrix(grid.shape[1], size[1])
  return np.einsum('ih,hwd,jw->ijd', rows, grid.astype(np.float64), cols)


def _square_split(n_old: int, n_new: int) -> tuple[int, int, int] | None:
  """(extra tokens, old side, new side) when both tables are extra + side^2, else None."""
  for extra in (0, 1, 2):   # none (HVT), class token (ViT / DeiT), class + distillation token
    sides = [math.isqrt(n - extra) if n > extra else 0 for n in (n_old, n_new)]
    if all(s > 1 and s * s == n - extra for s, n in zip(sides, (n_old, n_new))):
      return extra, sides[0], sides[1]
  return None


def resize_position_embedding(name: str, old: np.ndarray,
                              new_shape: tuple[int, ...]) -> np.ndarray:
  """[1, L, D] -> [1, L', D]: 2D bicubic over the patch grid (extra tokens kept), else 1D cubic."""
  if old.ndim != 3 or len(new_shape) != 3 or old.shape[::2] != tuple(new_shape[::2]):
    raise ValueError(f'{name}: cannot resize a position table {old.shape} to {new_shape}: only '
                     'the length may differ.')
  split = _square_split(old.shape[1], new_shape[1])
  if split is None:
    seq = cubic_resize_matrix(old.shape[1], new_shape[1])
    return np.einsum('il,bld->bid', seq, old.astype(np.float64))
  extra, side, new_side = split
  dim = old.shape[-1]
  grid = resize_grid(old[0, extra:].reshape(side, side, dim), (new_side, new_side))
  return np.concatenate([old[:, :extra].astype(np.float64), grid.reshape(1, -1, dim)], axis=1)


def tile_positions(name: str, old: np.ndarray, new_shape: tuple[int, ...]) -> np.ndarray:
  """PoNet / BERT learned positions [L, D] -> [L', D]: row p is old row p mod L, the official
  long-text code's cyclic copy of 512 positions to 4096 (there L' must be a multiple of L)."""
  if old.ndim != 2 or len(new_shape) != 2 or old.shape[1] != new_shape[1]:
    raise ValueError(f'{name}: cannot tile a position table {old.shape} to {new_shape}.')
  return old[np.arange(new_shape[0]) % old.shape[0]]


def drop_mask_row(name: str, old: np.ndarray, new_shape: tuple[int, ...]) -> np.ndarray:
  """A self-pretrained encoder's token table [V + 1, D] -> the task's [V, D] (the last row is the
  [MASK] id the task never sees)."""
  if old.ndim != 2 or tuple(new_shape) != (old.shape[0] - 1, old.shape[1]):
    raise ValueError(f'{name}: a token table {old.shape} cannot become {tuple(new_shape)}; only '
                     'the [MASK] row of a self-pretrained encoder (one row fewer) is dropped.')
  return old[:-1]


RESIZE_RULES: list[tuple[str, ResizeFn]] = [
    (r'(^|/)pos_embed(_stage\d+)?/pos_embedding$', resize_position_embedding),
    (r'^position_embed/embedding$', tile_positions),        # ponet_mlm / ponet_classifier
    (r'^encoder/token_embedding/embedding$', drop_mask_row),   # lra_masked_lm -> lra_encoder
]


# ---- reading a checkpoint ------------------------------------------------------------------------

class _Best(TypedDict, total=False):
  """A run's best_metric / best_mode: Checkpointer's keywords (none when config.json lacks them)."""
  best_metric: str
  best_mode: str


def _best_of(workdir: str) -> _Best:
  """The run's best_metric / best_mode (its config.json), which orders its best checkpoints."""
  try:
    with open(os.path.join(workdir, 'config.json')) as f:
      saved = json.load(f)
    return _Best(best_metric=saved['best_metric'], best_mode=saved['best_mode'])
  except (OSError, KeyError, ValueError):
    return _Best()


def checkpoint_dir(path: str) -> str:
  """The orbax PyTree directory behind `path`: a workdir (its best checkpoint, else the latest),
  a step directory (DIR/checkpoints/<step>) or the PyTree directory itself."""
  path = os.path.abspath(os.path.expanduser(path))
  if os.path.isdir(os.path.join(path, 'state')):
    return os.path.join(path, 'state')
  if os.path.exists(os.path.join(path, '_METADATA')):
    return path
  if any(os.path.isdir(os.path.join(path, d))
         for d in (checkpoint_lib.BEST_DIR, checkpoint_lib.LATEST_DIR)):
    checkpointer = checkpoint_lib.Checkpointer(path, read_only=True, **_best_of(path))
    try:
      store, step = checkpointer.resolve(
          'best' if checkpointer.best_step() is not None else 'latest')
      return os.path.join(store.step_dir(step), 'state')
    finally:
      checkpointer.close()
  raise FileNotFoundError(f'config.init_from={path!r} is neither a workdir with checkpoints nor '
                          'a checkpoint directory nor a Hugging Face PoNet folder; point it at a '
                          'training workdir, DIR/checkpoints/<step> or a folder with config.json '
                          'and model.safetensors.')


def read_variables(path: str) -> dict[str, Any]:
  """{'params': ..., ['batch_stats': ...]} of the checkpoint at `path` as host numpy arrays (a
  tree without 'params' is the params); a Hugging Face PoNet folder (chtan/ponet-base-uncased) is
  converted on the fly."""
  from poolformers_jax.weights import ponet as ponet_conversion
  folder = os.path.abspath(os.path.expanduser(path))
  if ponet_conversion.is_hf_folder(folder) and not os.path.isdir(
      os.path.join(folder, checkpoint_lib.LATEST_DIR)):
    params, _ = ponet_conversion.load_official(folder)
    logging.info('init_from: read the Hugging Face folder %s', folder)
    return {'params': params}
  directory = checkpoint_dir(path)
  checkpointer = ocp.PyTreeCheckpointer()
  tree = dict(checkpointer.metadata(directory).item_metadata)
  wanted = {k: tree[k] for k in ('params', 'batch_stats') if tree.get(k) is not None}
  if 'params' not in wanted:
    wanted = {'params': tree}
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
  if 'params' in tree:
    out = checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
        item=wanted, restore_args=restore_args, partial_restore=True))
  else:
    out = {'params': checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
        item=tree, restore_args=restore_args['params']))}
  logging.info('init_from: read %s', directory)
  return out


# ---- merging into the new model --------------------------------------------------------------

def _place(value: np.ndarray, like: Any) -> Any:
  """`value` with the dtype (and, for a jax.Array, the sharding) of `like`."""
  value = np.asarray(value, dtype=like.dtype)
  if isinstance(like, jax.Array):
    return jax.make_array_from_callback(value.shape, like.sharding, lambda index: value[index])
  return value


def load_init_params(source: Any, target_params: Any,
                     resize_rules: Sequence[tuple[str, ResizeFn]] | None = None, *,
                     fresh: str = '', allow_missing: str = '', what: str = 'params') -> Any:
  """`target_params` (the new model's initialised tree) with the checkpoint's values put in.

  `source`: the checkpoint's tree of the same collection (a path's: `read_variables(path)`).
  `fresh`: a regex of names kept as initialised even when the checkpoint has them.
  `allow_missing`: a regex of names the checkpoint may lack (kept as initialised).
  """
  if isinstance(source, (str, os.PathLike)):
    raise TypeError(f'load_init_params takes the checkpoint\'s tree, not the path {source!r}: '
                    'pass read_variables(path)["params"]')
  rules = RESIZE_RULES if resize_rules is None else resize_rules
  old = flax.traverse_util.flatten_dict(flax.core.unfreeze(source), sep='/')
  new = flax.traverse_util.flatten_dict(flax.core.unfreeze(target_params), sep='/')
  merged, kept_fresh, resized, mismatched, missing = {}, [], [], [], []
  for name, like in new.items():
    if name not in old and not (allow_missing and re.search(allow_missing, name)) and not (
        fresh and re.search(fresh, name)):
      missing.append(name)
      continue
    if name not in old or (fresh and re.search(fresh, name)):
      merged[name] = like
      kept_fresh.append(name)
      continue
    value = np.asarray(old[name])
    if value.shape != tuple(like.shape):
      rule = next((fn for pattern, fn in rules if re.search(pattern, name)), None)
      if rule is None:
        mismatched.append(f'{name} {value.shape} -> {tuple(like.shape)}')
        continue
      value = rule(name, value, tuple(like.shape))
      resized.append(f'{name} {old[name].shape} -> {value.shape}')
    merged[name] = _place(value, like)
  unused = sorted(set(old) - set(new))
  if mismatched or missing:
    found = ([f'{len(missing)} {what} missing from the checkpoint: {", ".join(missing)}']
             if missing else []) + (
        [f'{len(mismatched)} {what} cannot be matched in shape (checkpoint -> this model): '
         f'{"; ".join(mismatched)}'] if mismatched else []) + (
        [f'{len(unused)} checkpoint {what} unused: {", ".join(unused)}'] if unused else [])
    raise ValueError(f'init_from: {". ".join(found)}. Allow a new head the checkpoint lacks with '
                     "config.init_from_allow_missing (a regex, e.g. '^classifier/'), keep "
                     "mismatched ones freshly initialised with config.init_from_fresh (e.g. "
                     "'^head/'), or start from a checkpoint of the same architecture.")
  logging.info('init_from: %d %s loaded, %d resized%s', len(new) - len(kept_fresh), what,
               len(resized), f' ({"; ".join(resized)})' if resized else '')
  if kept_fresh:
    logging.info('init_from: %d %s freshly initialised (not taken from the checkpoint): %s',
                 len(kept_fresh), what, ', '.join(kept_fresh))
  if unused:
    logging.info('init_from: %d checkpoint %s unused by this model: %s', len(unused), what,
                 ', '.join(unused))
  out = flax.traverse_util.unflatten_dict(merged, sep='/')
  return type(target_params)(out) if isinstance(target_params, flax.core.FrozenDict) else out


def init_state_from(state: Any, path: str, fresh: str = '', allow_missing: str = '') -> Any:
  """The train state with params (and batch_stats) from `path`; optimizer and step untouched."""
  variables = read_variables(path)
  state = state.replace(params=load_init_params(variables['params'], state.params, fresh=fresh,
                                                allow_missing=allow_missing))
  if getattr(state, 'batch_stats', None) is not None and 'batch_stats' in variables:
    state = state.replace(batch_stats=load_init_params(
        variables['batch_stats'], state.batch_stats, fresh=fresh, allow_missing=allow_missing,
        what='batch_stats'))
  return state
