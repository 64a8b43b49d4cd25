"""Sequence parallelism for token mixers: every device holds a contiguous shard of each sequence.

A mixer keeps its projections as they are (per token: they need no communication, and XLA keeps
them on the shard) and writes its parameter-free core ONCE, as a function of one shard,

    core(shard, *arrays) -> outputs

using the shard's position (`shard.offset`) and collectives over the 'sequence' mesh axis
(`shard.psum`, `shard.pmax`, `shard.all_gather`, `shard.halo`, `shard.ppermute_prev`).
`map_shards(core, arrays, axes, out_axes)` runs it:
  - inside `sharded_sequences(mesh)` (the train and eval steps on a mesh whose 'sequence' axis is
    larger than 1): on every shard at once with `jax.shard_map`, so what crosses devices is
    exactly what the core's collectives say (a global view would let XLA gather the whole
    sequence wherever its partitioner cannot follow a reshape, a scatter or a cumulative sum);
  - anywhere else: on the whole sequence, as one shard whose collectives are identities.
So the unsharded mixer IS the sharded one with one shard: one code path, tested against itself.

A mixer says what it needs in its traits, `MixerTraits(sequence_parallel='<what crosses
devices>')` (the empty string: no sequence-parallel form; `no_sequence_parallel`: why);
`build_mixer` refuses a mixer without one in a sequence-sharded model, in one line naming those
that have one.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

Array = jax.Array

SEQUENCE_AXIS = 'sequence'
BATCH = 'batch'   # an `axes` entry: [batch, ...] without a token axis (per-example values)


@dataclasses.dataclass(frozen=True)
class _Layout:
  mesh: Mesh
  batch_axes: tuple[str, ...]

  @property
  def count(self) -> int:
    return int(self.mesh.shape[SEQUENCE_AXIS])


_LAYOUT: contextvars.ContextVar[Optional[_Layout]] = contextvars.ContextVar(
    'poolformers_jax_sequence_layout', default=None)


@contextlib.contextmanager
def sharded_sequences(mesh: Optional[Mesh]) -> Iterator[None]:
  """Mixers traced inside run sequence-sharded over `mesh`'s 'sequence' axis (when it has one
  larger than 1; otherwise nothing changes). The examples stay split over the other axes.

  Exported as `poolformers_jax.layers.sharded_sequences`; a model of your own with FSDP too:
  docs/api.md. The tokens split over every device (32 of them: 1, 2, 4 or 8 devices):

  ```pycon
  >>> import jax, numpy as np
  >>> from jax.sharding import Mesh
  >>> from poolformers_jax.layers import PoNet, sharded_sequences
  >>> mesh = Mesh(np.array(jax.devices()).reshape(1, -1), ('data', 'sequence'))
  >>> ponet = PoNet(num_heads=2, segment_num=4)
  >>> x = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 16))
  >>> params = ponet.init(jax.random.PRNGKey(1), x)
  >>> with sharded_sequences(mesh):
  ...   y = jax.jit(ponet.apply)(params, x)
  >>> bool(np.allclose(y, ponet.apply(params, x), atol=1e-5))
  True

  ```
  """
  if mesh is None or int(dict(mesh.shape).get(SEQUENCE_AXIS, 1)) <= 1:
    yield
    return
  batch_axes = tuple(a for a in mesh.axis_names if a != SEQUENCE_AXIS)
  token = _LAYOUT.set(_Layout(mesh, batch_axes))
  try:
    yield
  finally:
    _LAYOUT.reset(token)


def active() -> bool:
  """Whether the model being traced runs sequence-sharded."""
  return _LAYOUT.get() is not None


@dataclasses.dataclass(frozen=True)
class Shard:
  """One shard of `count` along the sequence: `length` tokens starting at `offset`, and the
  collectives over the shards (identities when `count` is 1)."""
  count: int
  length: int
  axis: Optional[str] = None   # the mesh axis; None: the whole sequence, no devices to talk to

  @property
  def index(self) -> Array:
    return jax.lax.axis_index(self.axis) if self.axis else jnp.int32(0)

  @property
  def offset(self) -> Array:
    """The global position of this shard's first token."""
    return self.index * self.length

  def positions(self) -> Array:
    """The global positions of this shard's tokens, [length]."""
    return self.offset + jnp.arange(self.length)

  def psum(self, x: Any) -> Any:
    return jax.lax.psum(x, self.axis) if self.axis else x

  def pmax(self, x: Any) -> Any:
    return jax.lax.pmax(x, self.axis) if self.axis else x

  def varying(self, x: Array) -> Array:
    """`x` (equal on every shard, e.g. after a psum) marked as differing per shard, at its own
    size: do this before broadcasting it over the tokens, or the gradient's sum over the shards
    (the transpose of the mark) runs on the broadcast, token-sized array."""
    if not self.axis:
      return x
    if hasattr(jax.lax, 'pcast'):   # jax >= 0.9
      return jax.lax.pcast(x, self.axis, to='varying')
    return jax.lax.pvary(x, self.axis)  # type: ignore[attr-defined]  # jax < 0.9; gone in 0.10

  def all_gather(self, x: Array) -> Array:
    """[count, *x.shape]: every shard's `x`, in sequence order."""
    return jax.lax.all_gather(x, self.axis) if self.axis else x[None]

  def ppermute_prev(self, x: Array, fill: Any = 0) -> Array:
    """The previous shard's `x` (`fill` on the first shard)."""
    if not self.axis:
      return jnp.full_like(x, fill)
    got = jax.lax.ppermute(x, self.axis, [(i, i + 1) for i in range(self.count - 1)])
    return jnp.where(self.index == 0, jnp.asarray(fill, x.dtype), got)

  def ppermute_next(self, x: Array, fill: Any = 0) -> Array:
    """The next shard's `x` (`fill` on the last shard)."""
    if not self.axis:
      return jnp.full_like(x, fill)
    got = jax.lax.ppermute(x, self.axis, [(i + 1, i) for i in range(self.count - 1)])
    return jnp.where(self.index == self.count - 1, jnp.asarray(fill, x.dtype), got)

  def halo(self, x: Array, before: int, after: int, fill: Any = 0, axis: int = 1) -> Array:
    """`x` with the `before` tokens that precede this shard and the `after` that follow it
    (along `axis`), `fill` beyond the sequence's ends: [.., before + length + after, ..]."""
    if max(before, after) > self.length:
      raise ValueError(f'a halo of {max(before, after)} tokens is longer than a shard of '
                       f'{self.length} tokens; use fewer sequence shards (config.mesh.sequence) '
                       'or a smaller window.')
    take = lambda start, stop: jax.lax.slice_in_dim(x, start, stop, axis=axis)
    parts = []
    if before:
      parts.append(self.ppermute_prev(take(self.length - before, self.length), fill))
    parts.append(x)
    if after:
      parts.append(self.ppermute_next(take(0, after), fill))
    return jnp.concatenate(parts, axis=axis) if len(parts) > 1 else x


Axes = Union[int, str, None]   # a token axis (batch at 0) | BATCH | None (the same on every device)


def _spec(layout: _Layout, axis: Axes, ndim: int) -> P:
  if axis is None or ndim == 0:
    return P()
  spec: list[Any] = [layout.batch_axes] + [None] * (ndim - 1)
  if axis != BATCH:
    spec[int(axis)] = SEQUENCE_AXIS
  return P(*spec)


def map_shards(core: Callable[..., Any], arrays: Sequence[Any], axes: Sequence[Axes],
               out_axes: Any, *, owner: str = 'mixer') -> Any:
  """`core(shard, *arrays)` on every sequence shard (see the module docstring).

  `axes[i]` says how `arrays[i]` is laid out: an int, its token axis (batch at axis 0: [B, L, D]
  is 1, [B, H, L] is 2); `BATCH`, per example without tokens ([B, D]); None, the same everywhere
  (weights, None). `out_axes`: the same for the outputs (a pytree prefix of them); an output
  marked `BATCH` or None must be equal on every shard (after a psum, say).
  """
  token_axes = [(a, ax) for a, ax in zip(arrays, axes) if isinstance(ax, int)]
  if not token_axes:
    raise ValueError(f'{owner}: map_shards needs one array with a token axis.')
  length = int(token_axes[0][0].shape[token_axes[0][1]])
  layout = _LAYOUT.get()
  if layout is None:
    return core(Shard(1, length), *arrays)
  if length % layout.count:
    raise ValueError(f'{owner}: {length} tokens do not split over {layout.count} sequence shards '
                     '(config.mesh.sequence); use a length that is a multiple of it (a '
                     "pooling='cls' token adds one) or another sequence size.")
  shard = Shard(layout.count, length // layout.count, SEQUENCE_AXIS)
  in_specs = tuple(_spec(layout, ax, getattr(a, 'ndim', 0)) for a, ax in zip(arrays, axes))
  # check_vma: jax tracks which values vary over the shards, so the gradient of a psum is right
  # whether its result leaves the core per shard or replicated.
  abstract = jax.eval_shape(lambda *a: core(Shard(1, length), *a), *arrays)
  out_specs = jax.tree.map(lambda ax, out: jax.tree.map(
      lambda o: _spec(layout, ax, o.ndim), out), out_axes, abstract,
      is_leaf=lambda x: x is None or isinstance(x, (int, str)))
  return jax.shard_map(lambda *a: core(shard, *a), mesh=layout.mesh, in_specs=in_specs,
                       out_specs=out_specs)(*arrays)

