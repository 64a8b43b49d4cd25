"""The training step and the eval step, built from a `Setup` (trainer/setup.py): what the trainer
runs, `summary` measures and the benchmarks time. `compile_train_step` compiles from abstract
shapes only (no data read), so `summary` reports the memory of exactly the program train.py runs.

One step: dropout rng folded with the step, DeiT mixup / cutmix when config.mixup asks, forward
(inside the platform's program transforms, trainer/transforms.py), the task's objective,
backward, the optimizer update (gradient accumulation inside optax), train metrics summed on
device. With config.length_buckets the batch comes as length-grouped micro-batches
(`BucketedStep`), whose gradients and sums are added on device before the same update. The
guard: if the objective or any updated array is not finite, the step returns the state it was
given (no non-finite state is ever saved) and records the step in acc['first_bad_step'].
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from poolformers_jax import tasks
from poolformers_jax.layers import sequence_parallel
from poolformers_jax.trainer import length_buckets, mixup, sharding, transforms
from poolformers_jax.trainer.setup import Setup, variables_of

_MIXUP_SALT = 0x6D6978   # folded into the step rng for mixup / cutmix (dropout uses the step rng)


def example_weights(targets: Any) -> jax.Array:
  """Weight 1 for every example of a training batch; targets may be a pytree (pre-training:
  {'mlm': [B, L], 'sso': [B]}), whose leaves all lead with the batch axis."""
  return jnp.ones(jax.tree.leaves(targets)[0].shape[:1], jnp.float32)


def batch_spec(setup: Setup, batch_size: int | None = None) -> Any:
  """The abstract global training batch (sharded as sharding.batch_sharded says: examples over
  'data' x 'fsdp', tokens over 'sequence'): `batch_size` (default config.batch_size) training
  examples of the dataset."""
  size = int(setup.batch_size if batch_size is None else batch_size)
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(
      (size,) + s.shape, s.dtype, sharding=sharding.batch_sharded(setup.mesh, 1 + len(s.shape))),
      tasks.train_example(setup.info))


def _all_finite(tree: Any) -> jax.Array:
  """Whether every float leaf is finite: the finite leaves counted in a single integer reduction.
  (XLA:CPU turns an and-reduction of the leaves' flags into a chain of scalar ands and copies it
  into the select of every leaf: HLO quadratic in the leaf count, minutes of compilation.)"""
  flags = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
           if jnp.issubdtype(x.dtype, jnp.inexact)]
  if not flags:
    return jnp.bool_(True)
  return jnp.sum(jnp.stack(flags).astype(jnp.int32)) == len(flags)


def accumulator_shapes(setup: Setup) -> Any:
  """Shapes of the task's sums of a training batch (they may be arrays: a confusion matrix)."""

  def sums(state, batch):
    logits = setup.model.apply(variables_of(state), setup.task.model_inputs(batch),
                               deterministic=True)
    return setup.task.sums(logits, batch['targets'], example_weights(batch['targets']), 0.0)
  return jax.eval_shape(sums, setup.abstract_state, batch_spec(setup))


def _accumulator(sums_shapes: Any, leaf) -> dict[str, Any]:
  scalar = lambda dtype: leaf((), dtype)
  return dict(sums=jax.tree.map(lambda s: leaf(s.shape, s.dtype), sums_shapes),
              grad_norm=scalar(np.float32), update_norm=scalar(np.float32),
              param_norm=scalar(np.float32), steps=scalar(np.float32),
              learning_rate=scalar(np.float32), bad_loss=scalar(np.float32),
              first_bad_step=scalar(np.int32))


def new_accumulator(mesh, sums_shapes: Any) -> dict[str, Any]:
  """Train metrics summed on device between log steps (fetched only there) and the NaN guard:
  `first_bad_step` is 0 until a step produces a non-finite objective or state, then that step."""
  return jax.device_put(_accumulator(sums_shapes, np.zeros), sharding.replicated(mesh))


def _gradients_and_update(setup: Setup, platform: str | None = None):
  """(gradients, update) of the step, shared by its plain and its bucketed form.

  gradients(state, inputs, targets, weights, rng, reduce) -> ((reduce(sums), (sums, updates)),
  grads): forward with dropout, the task's weighted sums, the gradient of `reduce(sums)`.
  update(state, acc, objective, sums, grads, updates) -> (state, acc): the optimizer update, the
  NaN guard and the train metrics summed on device (the norms of the gradient and of the
  parameters' change summed over the window's steps, the parameters' norm after its last step).
  `platform` (default: the mesh's) picks the program transforms the forward runs inside
  (transforms.program_transforms: the same values on every platform).
  """
  model, task, schedule = setup.model, setup.task, setup.schedule
  platform = platform or setup.mesh.devices.flat[0].platform
  forward_in = transforms.program_transforms(platform)
  label_smoothing = setup.label_smoothing
  accum = setup.grad_accum_steps

  def gradients(state, inputs, targets, weights, rng, reduce):
    mutable = ['batch_stats'] if state.batch_stats is not None else False

    def loss_fn(params):
      with forward_in(), sequence_parallel.sharded_sequences(setup.mesh):
        out = model.apply({**variables_of(state), 'params': params}, inputs,
                          deterministic=False, rngs={'dropout': rng}, mutable=mutable)
      logits, updates = out if mutable else (out, {})
      sums = task.sums(logits, targets, weights, label_smoothing)
      return reduce(sums), (sums, updates)

    return jax.value_and_grad(loss_fn, has_aux=True)(state.params)

  def update(state, acc, objective, sums, grads, updates):
    new_state = state.apply_gradients(grads=grads)
    if updates:
      new_state = new_state.replace(batch_stats=updates['batch_stats'])
    finite = jnp.isfinite(objective) & _all_finite(new_state)
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    first_bad = (acc['first_bad_step'] == 0) & ~finite
    add = lambda total, value: total + jnp.where(finite, value, jnp.zeros_like(value))
    change = jax.tree.map(jnp.subtract, new_state.params, state.params)
    acc = {'sums': jax.tree.map(add, acc['sums'], sums),
           'grad_norm': add(acc['grad_norm'], optax.global_norm(grads)),
           'update_norm': add(acc['update_norm'], optax.global_norm(change)),
           'param_norm': optax.global_norm(new_state.params).astype(jnp.float32),
           'steps': add(acc['steps'], jnp.float32(1)),
           'learning_rate': jnp.asarray(schedule(state.step // accum), jnp.float32),
           'first_bad_step': jnp.where(first_bad, state.step + 1, acc['first_bad_step']),
           'bad_loss': jnp.where(first_bad, objective.astype(jnp.float32), acc['bad_loss'])}
    return new_state, acc

  return gradients, update


def make_train_step(setup: Setup, platform: str | None = None):
  """jit of `(state, acc, batch, rng) -> (state, acc)`; state and accumulator are donated.
  With config.length_buckets the step is `BucketedStep` (below), whose batch is micro-batches.
  `platform`: the device platform the step is for (default: the mesh's; `export_for_cuda`
  says 'cuda'), which picks its program transforms (trainer/transforms.py)."""
  if setup.bucket_multiple:
    return BucketedStep(setup, platform)
  task = setup.task
  mix = setup.mixup
  gradients, update = _gradients_and_update(setup, platform)

  def train_step(state, acc, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    inputs, targets = task.model_inputs(batch), batch['targets']
    if mix:   # DeiT mixup / cutmix: soft targets, already label-smoothed
      inputs, targets = mixup.mix_batch(jax.random.fold_in(rng, _MIXUP_SALT), inputs, targets,
                                        setup.info.num_classes, **mix)
    (objective, (sums, updates)), grads = gradients(state, inputs, targets,
                                                    example_weights(targets), rng, task.objective)
    return update(state, acc, objective, sums, grads, updates)

  replicated = sharding.replicated(setup.mesh)
  # The batch: None = as its arrays are sharded (batch_spec, sharding.global_batch).
  return jax.jit(train_step, in_shardings=(setup.state_shardings, replicated, None, replicated),
                 out_shardings=(setup.state_shardings, replicated), donate_argnums=(0, 1))


class BucketedStep:
  """The step on length-grouped micro-batches (config.length_buckets, trainer/length_buckets.py):
  `(state, acc, micro_batches, rng) -> (state, acc)`, the batch from `put(host batch)`.

  One jitted program per bucket length adds a micro-batch's summed loss gradient and sums into a
  carry on device (compiled on first use, kept per length); `finish` divides the gradient by the
  batch's real example count (the sums' 'count', what the mean loss divides by) and applies the
  plain step's `update` once: the same optimizer step, NaN guard, metrics and step count. Dropout
  draws per micro-batch (the rng folded with the step and the micro-batch's index).
  """

  def __init__(self, setup: Setup, platform: str | None = None):
    self.setup = setup
    task, mesh = setup.task, setup.mesh
    gradients, update = _gradients_and_update(setup, platform)
    replicated = sharding.replicated(mesh)

    self.sums_shapes = accumulator_shapes(setup)

    def zeros(state):
      return {'grads': jax.tree.map(jnp.zeros_like, state.params),
              'sums': jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self.sums_shapes),
              'index': jnp.zeros((), jnp.int32)}

    def micro(state, carry, batch, rng):
      rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), carry['index'])
      (_, (sums, _)), grads = gradients(state, task.model_inputs(batch), batch['targets'],
                                        batch['weights'], rng, lambda sums: sums['loss'])
      return {'grads': jax.tree.map(jnp.add, carry['grads'], grads),
              'sums': jax.tree.map(jnp.add, carry['sums'], sums), 'index': carry['index'] + 1}

    def finish(state, acc, carry):
      sums = carry['sums']
      count = jnp.maximum(sums['count'], 1.0)
      grads = jax.tree.map(lambda g: g / count, carry['grads'])
      return update(state, acc, task.objective(sums), sums, grads, {})

    self._zeros = jax.jit(zeros, in_shardings=(setup.state_shardings,),
                          out_shardings=replicated)
    self._micro = jax.jit(micro, in_shardings=(setup.state_shardings, replicated, None,
                                               replicated),
                          out_shardings=replicated, donate_argnums=(1,))
    self._finish = jax.jit(finish, in_shardings=(setup.state_shardings, replicated, replicated),
                           out_shardings=(setup.state_shardings, replicated),
                           donate_argnums=(0, 1))
    self._compiled: dict[int, Any] = {}   # bucket length -> compiled micro step

  def _abstract_micro(self, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """A micro-batch's abstract arrays at bucket `length`."""
    setup, devices = self.setup, sharding.batch_devices(self.setup.mesh)
    size = -(-min(setup.micro_batch_size, setup.batch_size) // devices) * devices
    batch = batch_spec(setup, size)
    inputs = batch['inputs']
    return {**batch, 'inputs': jax.ShapeDtypeStruct(inputs.shape[:-1] + (length,), inputs.dtype,
                                                    sharding=inputs.sharding),
            'weights': jax.ShapeDtypeStruct((size,), jnp.float32,
                                            sharding=sharding.batch_sharded(setup.mesh))}

  def compile_micro(self, length: int, state, rng) -> Any:
    """The compiled micro step at bucket `length` (cached); state / rng may be abstract."""
    if length not in self._compiled:
      carry = jax.eval_shape(self._zeros, state)
      self._compiled[length] = self._micro.lower(state, carry, self._abstract_micro(length),
                                                 rng).compile()
    return self._compiled[length]

  def put(self, local_batch: dict[str, np.ndarray]) -> list[dict[str, jax.Array]]:
    """A host batch -> its micro-batches as arrays sharded over 'data'."""
    setup = self.setup
    return [sharding.global_batch(micro, setup.mesh) for micro in length_buckets.micro_batches(
        local_batch, setup.micro_batch_size, sharding.batch_devices(setup.mesh),
        setup.bucket_multiple)]

  def accumulate(self, state, micro_batches, rng) -> dict[str, Any]:
    """{'grads', 'sums'}: the summed loss gradient and sums of all `micro_batches`."""
    carry = self._zeros(state)
    for batch in micro_batches:
      carry = self.compile_micro(batch['inputs'].shape[-1], state, rng)(state, carry, batch, rng)
    return carry

  def __call__(self, state, acc, micro_batches, rng):
    return self._finish(state, acc, self.accumulate(state, micro_batches, rng))


@dataclasses.dataclass
class CompiledStep:
  """`run(state, acc, batch, rng) -> (state, acc)`, compiled; `memory` its memory_analysis()
  (the bucketed step: its micro step at the full length, the largest of its programs);
  `put(host batch)` makes the `batch` that `run` takes; `flops` XLA's count of one step per
  device (`step_flops`; None for the bucketed step, programs whose mix depends on each batch)."""
  run: Any
  sums_shapes: Any
  memory: dict[str, int]
  put: Callable[[Any], Any]
  flops: float | None = None

  def new_accumulator(self, mesh) -> dict[str, Any]:
    return new_accumulator(mesh, self.sums_shapes)


def memory_of(compiled) -> dict[str, int]:
  """Bytes of a compiled program per device: arguments + outputs + temporaries - aliased
  (donated arguments reused as outputs) = `total`."""
  m = compiled.memory_analysis()
  parts = {k: int(getattr(m, f'{k}_size_in_bytes')) for k in ('argument', 'output', 'temp',
                                                               'alias')}
  parts['total'] = parts['argument'] + parts['output'] + parts['temp'] - parts['alias']
  return parts


def flops_of(compiled) -> float | None:
  """cost_analysis()['flops'] of a compiled program: per device (the partitioned program is one
  device's share); None when XLA gives none."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
  flops = float((cost or {}).get('flops', 0.0))
  return flops if flops > 0 else None


def step_flops(compiled, lowered, devices: int) -> float | None:
  """XLA's flops of one step per device: the compiled program's, or the lowered (unoptimised,
  whole-mesh) program's / devices where that is larger: XLA:GPU's compiled count leaves out the
  dots it hands to cuBLAS (jax issue 22249). On a CPU the compiled count is the larger."""
  counts = [flops_of(compiled), (flops_of(lowered) or 0.0) / devices]
  return max((c for c in counts if c), default=None)


def abstract_step_args(setup: Setup, sums_shapes: Any = None) -> tuple[Any, Any, Any, Any]:
  """(state, accumulator, batch, rng) of the training step as sharded ShapeDtypeStructs."""
  sums_shapes = accumulator_shapes(setup) if sums_shapes is None else sums_shapes
  replicated = sharding.replicated(setup.mesh)
  acc = _accumulator(sums_shapes, lambda shape, dtype: jax.ShapeDtypeStruct(
      shape, dtype, sharding=replicated))
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)   # jax.random.PRNGKey
  return setup.abstract_state, acc, batch_spec(setup), rng


def compile_train_step(setup: Setup) -> CompiledStep:
  """The training step of `setup`, compiled from abstract shapes. Bucketed: the micro step at the
  full length now, the shorter buckets on first use."""
  sums_shapes = accumulator_shapes(setup)
  state, _, _, rng = args = abstract_step_args(setup, sums_shapes)
  step = make_train_step(setup)
  if isinstance(step, BucketedStep):
    full = step.compile_micro(int(setup.info.input_shape[-1]), state, rng)
    return CompiledStep(run=step, sums_shapes=sums_shapes, memory=memory_of(full), put=step.put)
  lowered = step.lower(*args)
  compiled = lowered.compile()
  return CompiledStep(run=compiled, sums_shapes=sums_shapes, memory=memory_of(compiled),
                      put=functools.partial(sharding.global_batch, mesh=setup.mesh),
                      flops=step_flops(compiled, lowered, setup.mesh.devices.size))


def make_eval_step(setup: Setup):
  """`(state, batch) -> (sums, rows)` jitted: the model's forward pass (deterministic) on a
  batch with 'mask', the task's sums weighted by it (and its rows, if the task has them)."""
  model, task, mesh = setup.model, setup.task, setup.mesh

  def eval_step(state, batch):
    with sequence_parallel.sharded_sequences(mesh):
      logits = model.apply(variables_of(state), task.model_inputs(batch), deterministic=True)
    weights = batch['mask'].astype(jnp.float32)
    token_weights = weights
    if 'weights' in batch:   # per-token weights (sliding LM evaluation, data/text_lm.py)
      token_weights = weights[:, None] * batch['weights']
    sums = task.sums(logits, batch['targets'], token_weights)
    if task.rows is None:
      return sums, {}
    return sums, {**task.rows(logits, batch['targets']), 'weight': weights}

  # The batch: None = as its arrays are sharded (sharding.global_batch).
  return jax.jit(eval_step, in_shardings=(setup.state_shardings, None),
                 out_shardings=sharding.replicated(mesh))


def eval_batch_spec(setup: Setup, batch_size: int | None = None) -> Any:
  """The abstract global eval batch: the training batch's arrays and the `mask` of real
  examples, `batch_size` (default: the setup's eval batch size) of them."""
  size = int(setup.eval_batch_size if batch_size is None else batch_size)
  batch = batch_spec(setup, size)
  return {**batch, 'mask': jax.ShapeDtypeStruct((size,), jnp.bool_,
                                                sharding=sharding.batch_sharded(setup.mesh))}


def compile_eval_step(setup: Setup, batch_size: int | None = None):
  """The eval step of `setup` compiled from abstract shapes (summary --topology)."""
  return make_eval_step(setup).lower(setup.abstract_state,
                                     eval_batch_spec(setup, batch_size)).compile()
