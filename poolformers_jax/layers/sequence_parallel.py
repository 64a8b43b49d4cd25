"""Sequence parallelism for token mixers: every device holds a contiguous shard of each sequence.

A mixer keeps its projections as they are (per token: they need no communication, and XLA keeps
them on the shard) and writes its parameter-free core once, as a function of one shard,

    core(shard, *arrays) -> outputs

using the shard's position (`shard.offset`, `shard.chunks`) and collectives over the 'sequence'
mesh axis (`shard.psum`, `shard.pmax`, `shard.softmax`, `shard.all_gather`, `shard.halo`).
Every array passed in or returned says how it lies over the shards: `TOKENS(x)` ([B, L, ...]),
`HEAD_TOKENS(q)` ([B, H, L, ...]), `PER_EXAMPLE(g)` ([B, ...], no tokens) or `SAME(w)` (weights;
None). `map_shards(core, *laid_arrays)` runs it:
  - inside `sharded_sequences(mesh)` (the train and eval steps on a mesh whose 'sequence' axis is
    larger than 1): on every shard at once with `jax.shard_map`, so what crosses devices is
    exactly what the core's collectives say (a global view would let XLA gather the whole
    sequence wherever its partitioner cannot follow a reshape, a scatter or a cumulative sum);
  - anywhere else: on the whole sequence, as one shard whose collectives are identities and whose
    offset is the constant 0, so the compiled program is that of the plain unsharded maths.
So the unsharded mixer is the sharded one with one shard: one code path, tested against itself.
A mixer declares the form in its traits (`MixerTraits.sequence_parallel`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

from poolformers_jax.layers import chunk_scan

Array = jax.Array

SEQUENCE_AXIS = 'sequence'   # the mesh axis that splits the tokens (trainer/sharding.py's mesh)


@dataclasses.dataclass(frozen=True)
class _Mesh:
  mesh: Mesh
  batch_axes: tuple[str, ...]

  @property
  def count(self) -> int:
    return int(self.mesh.shape[SEQUENCE_AXIS])


_MESH: contextvars.ContextVar[_Mesh | None] = contextvars.ContextVar(
    'poolformers_jax_sequence_mesh', default=None)


@contextlib.contextmanager
def sharded_sequences(mesh: Mesh | None) -> Iterator[None]:
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
  token = _MESH.set(_Mesh(mesh, batch_axes))
  try:
    yield
  finally:
    _MESH.reset(token)


def active() -> bool:
  """Whether the model being traced runs sequence-sharded."""
  return _MESH.get() is not None


@dataclasses.dataclass(frozen=True)
class Shard:
  """One shard of `count` along the sequence: `length` tokens starting at `offset`, and the
  collectives over the shards (identities when `count` is 1)."""
  count: int
  length: int
  axis: str | None = None   # the mesh axis; None: the whole sequence, no devices to talk to

  @property
  def index(self) -> int | Array:
    """This shard's place among the shards: traced on a mesh, the constant 0 without one."""
    return jax.lax.axis_index(self.axis) if self.axis else 0

  @property
  def offset(self) -> int | Array:
    """The global position of this shard's first token."""
    return self.index * self.length

  def positions(self) -> Array:
    """The global positions of this shard's tokens, [length]."""
    return self.offset + jnp.arange(self.length)

  def psum(self, x: Any) -> Any:
    return jax.lax.psum(x, self.axis) if self.axis else x

  def pmax(self, x: Any) -> Any:
    return jax.lax.pmax(x, self.axis) if self.axis else x

  def softmax(self, scores: Array) -> Array:
    """The softmax over the last axis, the tokens of every shard: the largest score of all
    shards, then the summed exponentials."""
    if not self.axis:
      return jax.nn.softmax(scores, axis=-1)
    top = self.pmax(jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True)))
    exps = jnp.exp(scores - top)
    return exps / self.psum(jnp.sum(exps, axis=-1, keepdims=True))

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

  def _from_neighbour(self, x: Array, fill: Any, step: int) -> Array:
    """The `x` of the shard `step` before this one (-1: the next shard's), `fill` where there is
    none (the first shard, or the last)."""
    got = jax.lax.ppermute(x, self.axis, [(i, i + step) for i in range(self.count)
                                          if 0 <= i + step < self.count])
    edge = 0 if step > 0 else self.count - 1
    return jnp.where(self.index == edge, jnp.asarray(fill, x.dtype), got)

  def halo(self, x: Array, before: int, after: int, fill: Any = 0, axis: int = 1) -> Array:
    """`x` with the `before` tokens that precede this shard and the `after` that follow it
    (along `axis`), `fill` beyond the sequence's ends: [.., before + length + after, ..]."""
    if max(before, after) > self.length:
      raise ValueError(f'a halo of {max(before, after)} tokens is longer than a shard of '
                       f'{self.length} tokens; use fewer sequence shards (config.mesh.sequence) '
                       'or a smaller window.')
    if not self.axis:   # no neighbours: the sequence padded with `fill`
      widths = [(0, 0)] * x.ndim
      widths[axis] = (before, after)
      return jnp.pad(x, widths, constant_values=fill)
    take = lambda start, stop: jax.lax.slice_in_dim(x, start, stop, axis=axis)
    parts = []
    if before:
      parts.append(self._from_neighbour(take(self.length - before, self.length), fill, 1))
    parts.append(x)
    if after:
      parts.append(self._from_neighbour(take(0, after), fill, -1))
    return jnp.concatenate(parts, axis=axis) if len(parts) > 1 else x

  def chunks(self, size: int, total: int | None = None) -> Chunks:
    """Where this shard's tokens fall among the chunks of `size` tokens of the whole sequence
    (`total` of them; default: as many as the whole length needs)."""
    whole = self.count * self.length
    total = -(-whole // size) if total is None else total
    if not self.axis:       # every chunk, the sequence padded to whole chunks
      return Chunks(self, size, total, first=0, start=0, span=total)
    if self.length % size == 0:   # every shard begins and ends at a chunk boundary
      return Chunks(self, size, total, first=self.offset // size, start=0,
                    span=self.length // size)
    # A shard may begin inside a chunk: one more chunk than its length fills.
    return Chunks(self, size, total, first=self.offset // size, start=self.offset % size,
                  span=-(-self.length // size) + 1)


@dataclasses.dataclass(frozen=True)
class Chunks:
  """The chunks of `size` tokens of the whole sequence (`total` of them) that one shard's tokens
  fall in (`Shard.chunks`): `span` chunks from chunk `first` (its global index), the shard's
  first token `start` tokens into it. `first` and `start` are traced on a mesh, and `start` is
  the constant 0 where no chunk crosses a shard boundary (`shared` is False): one shard, or
  shards whose length `size` divides."""
  shard: Shard
  size: int
  total: int
  first: int | Array
  start: int | Array
  span: int

  @property
  def shared(self) -> bool:
    """Whether the first and last chunk of a shard may continue on its neighbours."""
    return not isinstance(self.start, int)

  def _split(self) -> Array | None:
    """Shards within one chunk boundary (a chunk at least a shard long): [length] whether each
    token is in the second chunk; None otherwise."""
    if self.shared and self.size >= self.shard.length:
      return (self.start + jnp.arange(self.shard.length)) >= self.size
    return None

  def reduce(self, x: Array, op: Callable[..., Array], fill: Any,
             where: Array | None = None) -> Array:
    """[B, span, ...]: `op` (jnp.max, jnp.sum; over an `axis`) of this shard's tokens of `x`
    ([B, length, ...]) in each chunk, `fill` standing for tokens it does not hold and for those
    where `where` ([B, length]) is False."""
    keep = lambda t, w: t if w is None else jnp.where(w.reshape(w.shape + (1,) * (t.ndim - 2)),
                                                      t, jnp.asarray(fill, t.dtype))
    second = self._split()
    if second is not None:   # no buffer two chunks long: the tokens either side of the boundary
      x = keep(x, where)
      second = second.reshape((1, -1) + (1,) * (x.ndim - 2))
      return jnp.stack([op(jnp.where(second, fill, x), axis=1),
                        op(jnp.where(second, x, fill), axis=1)], axis=1)
    batch, rest = x.shape[0], x.shape[2:]
    placed = keep(self._place(x, fill), None if where is None else self._place(where, False))
    return op(placed.reshape((batch, self.span, self.size) + rest), axis=2)

  def _place(self, x: Array, fill: Any) -> Array:
    """[B, span * size, ...]: this shard's tokens where they fall in its chunks, `fill` around."""
    width = self.span * self.size
    if self.shared:
      return jax.lax.dynamic_update_slice_in_dim(
          jnp.full((x.shape[0], width) + x.shape[2:], fill, x.dtype), x, self.start, axis=1)
    return jnp.pad(x, [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2),
                   constant_values=fill)

  def spread(self, per_chunk: Array) -> Array:
    """[B, length, ...]: every token of this shard gets its chunk's value of `per_chunk`
    ([B, span, ...])."""
    second = self._split()
    if second is not None:
      second = second.reshape((1, -1) + (1,) * (per_chunk.ndim - 2))
      return jnp.where(second, per_chunk[:, 1:2], per_chunk[:, :1])
    every = jnp.repeat(per_chunk, self.size, axis=1)
    if self.shared:
      return jax.lax.dynamic_slice_in_dim(every, self.start, self.shard.length, axis=1)
    return every[:, :self.shard.length]

  def join(self, partial: Array, op: Callable[..., Array], fill: Any) -> Array:
    """`partial` ([B, span, ...], `reduce`'s) with the chunks that continue on other shards
    (a shard's first and last) reduced over every shard's part (`_whole_ends`)."""
    if not self.shared:
      return partial
    last = self._last()
    first_whole, last_whole = self._whole_ends(partial[:, 0], jnp.take(partial, last, axis=1),
                                               op, fill)
    partial = partial.at[:, 0].set(first_whole)
    return jax.lax.dynamic_update_slice_in_dim(partial, last_whole[:, None], last, axis=1)

  def _last(self) -> int | Array:
    """The shard's last chunk, counted from `first`."""
    return (self.start + self.shard.length - 1) // self.size

  def _whole_ends(self, first: Array, last: Array, op: Callable[..., Array], fill: Any
                  ) -> tuple[Array, Array]:
    """`op` over every shard's part of this shard's first and last chunk, given this shard's
    parts `first`, `last` ([B, ...]): each shard publishes its two ([count, 2, B, ...] gathered,
    whatever the length) and takes, for each of its two, `op` over the parts of the same chunk."""
    shard = self.shard
    ids = shard.all_gather(jnp.stack([self.first, self.first + self._last()]))     # [count, 2]
    every = shard.all_gather(jnp.stack([first, last]))                     # [count, 2, B, ...]
    ids = ids.reshape(ids.shape + (1,) * (every.ndim - 2))
    whole = lambda chunk: op(jnp.where(ids == chunk, every, fill), axis=(0, 1))
    return whole(self.first), whole(self.first + self._last())

  def max_everywhere(self, x: Array, fill: float, scan: bool | None = None) -> Array:
    """[B, length, ...]: each token gets the maximum of `x` over its whole chunk: that of
    `spread(join(reduce(x, jnp.max, fill), jnp.max, fill))`, with the same values and gradient,
    by running maxima along the tokens (layers/chunk_scan.py; `scan`, by default for chunks of
    `chunk_scan.SCAN_FROM` tokens or more) instead of a reshape to [chunks, size]. `fill` is at
    most every value of `x`."""
    if not (self.size >= chunk_scan.SCAN_FROM if scan is None else scan):
      return self.spread(self.join(self.reduce(x, jnp.max, fill), jnp.max, fill))
    part = chunk_scan.chunk_part_max(x, self.start, self.size, fill)
    if not self.shared:
      return part
    first, last = self._whole_ends(part[:, 0], part[:, -1], jnp.max, fill)
    chunk = ((self.start + jnp.arange(self.shard.length)) // self.size).reshape(
        (1, -1) + (1,) * (x.ndim - 2))
    return jnp.where(chunk == 0, first[:, None], jnp.where(chunk == self._last(), last[:, None],
                                                           part))

  def everywhere(self, partial: Any) -> Any:
    """[B, total, ...] per array of `partial` (a pytree of [B, span, ...]): this shard's chunks
    at their global index, zero elsewhere; `shard.psum` of it sums every shard's parts."""
    if self.span == self.total:   # one shard: its chunks are all of them
      return partial

    def place(x: Array) -> Array:   # a buffer `span` longer, so the update never clamps
      buffer = jnp.zeros((x.shape[0], self.total + self.span) + x.shape[2:], x.dtype)
      return jax.lax.dynamic_update_slice_in_dim(buffer, x, self.first, axis=1)[:, :self.total]
    return jax.tree.map(place, partial)


@dataclasses.dataclass(frozen=True)
class Layout:
  """How an array lies over the sequence shards: split along its token axis `tokens` (axis 0
  the batch), or not at all; `batch`: axis 0 is the batch, split as the examples are. Call it on
  an array (or a pytree of arrays, or None) to pass or return that array laid out so."""
  name: str
  tokens: int | None = None
  batch: bool = True

  def __call__(self, value: Any) -> Laid:
    return Laid(value, self)

  def spec(self, mesh: _Mesh, ndim: int) -> P:
    if not self.batch or ndim == 0:
      return P()
    spec: list[Any] = [mesh.batch_axes] + [None] * (ndim - 1)
    if self.tokens is not None:
      spec[self.tokens] = SEQUENCE_AXIS
    return P(*spec)


TOKENS = Layout('tokens', tokens=1)               # [B, L, ...]
HEAD_TOKENS = Layout('head tokens', tokens=2)     # [B, H, L, ...]
PER_EXAMPLE = Layout('per example')               # [B, ...]: equal on every shard of a row
SAME = Layout('same', batch=False)                # the same on every device: weights, None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Laid:
  """An array (a pytree of them, or None) and how it lies over the shards."""
  value: Any
  layout: Layout = dataclasses.field(metadata=dict(static=True))


def _is_laid(x: Any) -> bool:
  return isinstance(x, Laid)


def _values(tree: Any, owner: str, what: str) -> Any:
  """The values of a pytree of Laid arrays; a ValueError if an array comes without its layout."""
  def value(laid: Any) -> Any:
    if not isinstance(laid, Laid):
      raise TypeError(f'{owner}: map_shards {what} every array with its layout (TOKENS(x), '
                      f'SAME(w), ...); got a bare {type(laid).__name__}.')
    return laid.value
  return jax.tree.map(value, tree, is_leaf=_is_laid)


def _specs(tree: Any, mesh: _Mesh) -> Any:
  """The PartitionSpecs of a pytree of Laid values (a prefix of their arrays)."""
  def specs(laid: Laid) -> Any:
    if not jax.tree.leaves(laid.value):
      return P()
    return jax.tree.map(lambda a: laid.layout.spec(mesh, a.ndim), laid.value)
  return jax.tree.map(specs, tree, is_leaf=_is_laid)


def map_shards(core: Callable[..., Any], *args: Laid, owner: str = 'mixer', **kwargs: Laid
               ) -> Any:
  """`core(shard, *args, **kwargs)` on every sequence shard (see the module docstring), with the
  values of the laid-out arguments; the core returns its outputs laid out too (a pytree of
  `Laid`), and map_shards returns their values. An output laid out `PER_EXAMPLE` or `SAME` must
  be equal on every shard (after a psum, say)."""
  values = _values((args, kwargs), owner, 'takes')
  along = [(a, p.layout.tokens) for p in jax.tree.leaves((args, kwargs), is_leaf=_is_laid)
           if p.layout.tokens is not None for a in jax.tree.leaves(p.value)]
  if not along:
    raise ValueError(f'{owner}: map_shards needs one array with a token axis.')
  length = int(along[0][0].shape[along[0][1]])
  run = lambda shard, v: core(shard, *v[0], **v[1])
  mesh = _MESH.get()
  if mesh is None:
    return _values(run(Shard(1, length), values), owner, 'needs the core to return')
  if length % mesh.count:
    raise ValueError(f'{owner}: {length} tokens do not split over {mesh.count} sequence shards '
                     '(config.mesh.sequence); use a length that is a multiple of it (a '
                     "pooling='cls' token adds one) or another sequence size.")
  shard = Shard(mesh.count, length // mesh.count, SEQUENCE_AXIS)
  # The outputs' layouts, from a trace of the core on the whole sequence.
  abstract = jax.eval_shape(lambda v: run(Shard(1, length), v), values)
  _values(abstract, owner, 'needs the core to return')
  out_specs = _specs(abstract, mesh)
  # check_vma: jax tracks which values vary over the shards, so the gradient of a psum is right
  # whether its result leaves the core per shard or replicated.
  return jax.shard_map(lambda v: _values(run(shard, v), owner, 'needs the core to return'),
                       mesh=mesh.mesh, in_specs=(_specs((args, kwargs), mesh),),
                       out_specs=out_specs)(values)
