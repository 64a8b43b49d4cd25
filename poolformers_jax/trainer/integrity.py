"""Integrity records of checkpoints: what was saved, so a restore can tell a damaged checkpoint.

Orbax data files carry no checksum: a flipped bit restores silently as a wrong parameter. Each
saved step gets `<step>/integrity.json`, written only after orbax has finished the step (a step
without one did not finish saving):
  leaves  per array: shape, dtype and a checksum computed on device (two sums of the raw bits
          modulo 2**32, one weighted by position; any flipped bit changes both, whatever the
          sharding);
  files   every file with its size and, up to CRC_MAX_BYTES, its CRC-32 (`verify_files`, before
          orbax reads anything; bigger files are covered by the leaf sums, `verify_leaves`);
  step, config_sha256.
"""
from __future__ import annotations

import json
import os
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

RECORD = 'integrity.json'


class CheckpointDamaged(Exception):
  """A checkpoint fails its integrity record; the message says what differs."""


class CheckpointMismatch(ValueError):
  """A sound checkpoint of a different model (other leaves or shapes than this config's)."""


def leaf_name(path) -> str:
  """'params/encoder/block_0/.../kernel': the name a leaf has in the record."""
  return jax.tree_util.keystr(path, simple=True, separator='/')


def _bits(x: jax.Array) -> jax.Array:
  """The raw bits of `x` as uint32 words (8-byte dtypes give two words per element)."""
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  size = x.dtype.itemsize
  if size == 8:
    return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
  words = jax.lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[size])
  return words.astype(jnp.uint32).ravel()


def _leaf_checksum(x: jax.Array) -> jax.Array:
  # Integer sums wrap modulo 2**32 and are order-free, so the result does not depend on how
  # the array is sharded. Odd weights are invertible modulo 2**32: a single flipped bit (a change
  # of 2**k) can never leave either sum unchanged; the weighted sum also catches moved words.
  words = _bits(x)
  weights = jnp.arange(words.size, dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
  return jnp.stack([jnp.sum(words, dtype=jnp.uint32), jnp.sum(words * weights, dtype=jnp.uint32)])


_checksums = jax.jit(lambda tree: jax.tree.map(_leaf_checksum, tree))


def leaf_records(state: Any) -> dict[str, dict[str, Any]]:
  """{leaf name: {shape, dtype, checksum}}; the sums run on device, 8 bytes per leaf come back."""
  sums = jax.device_get(_checksums(state))
  return {leaf_name(path): {'shape': list(np.shape(x)), 'dtype': str(x.dtype),
                            'checksum': [int(v) for v in np.asarray(s)]}
          for (path, x), s in zip(jax.tree_util.tree_leaves_with_path(state),
                                  jax.tree.leaves(sums))}


CRC_MAX_BYTES = 64 << 20   # reading back bigger files after every save would cost real time


def file_records(step_dir: str) -> dict[str, dict[str, int]]:
  files = {}
  for root, _, names in os.walk(step_dir):
    for name in names:
      path = os.path.join(root, name)
      relpath = os.path.relpath(path, step_dir)
      if relpath == RECORD:
        continue
      entry = {'size': os.path.getsize(path)}
      if entry['size'] <= CRC_MAX_BYTES:
        with open(path, 'rb') as f:
          entry['crc32'] = zlib.crc32(f.read())
      files[relpath] = entry
  return files


def write_record(step_dir: str, step: int, leaves: dict, config_sha256: str) -> None:
  """Called once orbax has finished `step_dir`; written atomically (temp file + rename)."""
  record = {'step': int(step), 'config_sha256': config_sha256, 'leaves': leaves,
            'files': file_records(step_dir)}
  tmp = os.path.join(step_dir, RECORD + '.tmp')
  with open(tmp, 'w') as f:
    json.dump(record, f)
  os.replace(tmp, os.path.join(step_dir, RECORD))


def read_record(step_dir: str) -> dict[str, Any]:
  path = os.path.join(step_dir, RECORD)
  if not os.path.exists(path):
    raise CheckpointDamaged(f'it has no {RECORD} (its save did not finish)')
  try:
    with open(path) as f:
      record = json.load(f)
    record['leaves'], record['files']   # pylint: disable=pointless-statement
    return record
  except (ValueError, KeyError, TypeError) as error:
    raise CheckpointDamaged(f'{path} is unreadable ({type(error).__name__})') from None


def check_structure(record: dict, abstract_state: Any, where: str, partial: bool = False) -> None:
  """Raises CheckpointMismatch naming the first leaf whose presence or shape differs. `partial`:
  `abstract_state` is a part of the saved state (the parameters alone): leaves it lacks are fine."""
  saved = record['leaves']
  wanted = {leaf_name(p): list(x.shape)
            for p, x in jax.tree_util.tree_leaves_with_path(abstract_state)}
  for name, shape in wanted.items():
    if name not in saved:
      break
    if saved[name]['shape'] != shape:
      raise CheckpointMismatch(
          f'checkpoint {where} was made by a different model: {name} has shape '
          f'{tuple(saved[name]["shape"])} there and {tuple(shape)} in this config; use the '
          "config it was trained with (its run's config.json) or another --workdir")
  missing = [n for n in wanted if n not in saved]
  extra = [] if partial else [n for n in saved if n not in wanted]
  if missing or extra:
    first = (f'{missing[0]} is not in it' if missing else f'it has {extra[0]}, which this config '
             'does not')
    raise CheckpointMismatch(
        f'checkpoint {where} was made by a different model: {first}; use the config it was '
        "trained with (its run's config.json) or another --workdir")


def verify_files(record: dict, step_dir: str) -> None:
  for relpath, entry in sorted(record['files'].items()):
    path = os.path.join(step_dir, relpath)
    if not os.path.exists(path):
      raise CheckpointDamaged(f'{relpath} is missing')
    size = os.path.getsize(path)
    if size != entry['size']:
      raise CheckpointDamaged(f'{relpath} has {size} bytes, {entry["size"]} were written')
    if 'crc32' in entry:
      with open(path, 'rb') as f:
        if zlib.crc32(f.read()) != entry['crc32']:
          raise CheckpointDamaged(f'{relpath} differs from what was written (CRC-32)')


def verify_leaves(record: dict, state: Any, partial: bool = False) -> None:
  """`partial`: only the leaves `state` has (a part of the saved state) are compared."""
  actual = leaf_records(state)
  for name, entry in record['leaves'].items():
    if partial and name not in actual:
      continue
    if actual.get(name, {}).get('checksum') != entry['checksum']:
      raise CheckpointDamaged(f'checksum of {name} differs')


def short_reason(error: BaseException) -> str:
  """A short reason for an exception orbax / tensorstore raised reading a damaged step."""
  text = ' '.join(str(error).split())
  return f'cannot be read: {type(error).__name__}: {text[:160]}' if text else (
      f'cannot be read: {type(error).__name__}')

