"""TrainState (Flax) with an optional `batch_stats` collection, created directly sharded."""
from __future__ import annotations

from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import Mesh

from poolformers_jax.train import param_init as param_init_lib
from poolformers_jax.train import sharding as sharding_lib
from poolformers_jax.tasks import get_task, train_example


class TrainState(train_state.TrainState):
  batch_stats: Optional[Any] = None   # BatchNorm running averages (models with BatchNorm only)


def dummy_inputs(info) -> Any:
  """One zero training example of the dataset (batch 1), as the model reads it (init)."""
  batch = jax.tree.map(lambda s: jnp.zeros((1,) + s.shape, s.dtype), train_example(info))
  return get_task(info.task).model_inputs(batch)


def _create(model: nn.Module, tx: optax.GradientTransformation, info, rng: jax.Array,
            param_init: str = 'default') -> TrainState:
  variables = model.init({'params': rng, 'dropout': rng}, dummy_inputs(info), deterministic=True)
  # config.param_init: redraw the fresh parameters (PyTorch's defaults), the one place it happens.
  params = param_init_lib.initialize(param_init, variables['params'], rng)
  state = TrainState.create(apply_fn=model.apply, params=params, tx=tx,
                            batch_stats=variables.get('batch_stats'))
  # TrainState.create leaves `step` a Python int; an array has a sharding and a checkpoint dtype.
  return state.replace(step=jnp.asarray(0, jnp.int32))


def state_shardings(model, tx, info, mesh: Mesh,
                    rules: sharding_lib.FsdpRules = sharding_lib.FsdpRules()) -> tuple[Any, Any]:
  """(abstract state with shardings, sharding tree): replicated over 'data', large parameters and
  their optimizer state split over 'fsdp' as `rules` say (config.mesh.rules)."""
  abstract = jax.eval_shape(lambda r: _create(model, tx, info, r), jax.random.PRNGKey(0))
  shardings = sharding_lib.state_shardings(mesh, abstract, rules)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, shardings)
  return abstract, shardings


def create_train_state(model, tx, info, rng: jax.Array, mesh: Mesh,
                       param_init: str = 'default',
                       rules: sharding_lib.FsdpRules = sharding_lib.FsdpRules()) -> TrainState:
  """A fresh state, created sharded as `state_shardings` says; `param_init` is config.param_init."""
  _, shardings = state_shardings(model, tx, info, mesh, rules)
  return jax.jit(lambda r: _create(model, tx, info, r, param_init), out_shardings=shardings)(rng)


def param_count(params: Any) -> int:
  return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))
