"""What training and evaluation share: dataset info, the completed config, model, optimizer,
mesh, task and the abstract (sharded) train state."""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import ml_collections
import optax
from jax.sharding import Mesh

from poolformers_jax import data
from poolformers_jax.models import build_model
from poolformers_jax.train import config_utils, optim, sharding, state as state_lib, tasks, validate


@dataclasses.dataclass
class Setup:
  config: ml_collections.ConfigDict      # completed from the dataset (model sizes filled in)
  info: Any                              # data.DatasetInfo
  model: Any
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  mesh: Mesh
  task: tasks.Task
  abstract_state: Any                    # ShapeDtypeStructs carrying the current shardings
  state_shardings: Any


def make_setup(config: ml_collections.ConfigDict) -> Setup:
  info = data.get_dataset_info(config)
  config = copy.deepcopy(config)   # the caller's config is left untouched
  config_utils.complete_from_dataset(config, info)
  config.lock()
  mesh = sharding.make_mesh(config.get('num_devices', -1))
  validate.check_config(config, info, mesh)   # every config problem, before any model is built
  model = build_model(config)
  tx = optim.make_optimizer(config)
  abstract, shardings = state_lib.state_shardings(model, tx, info, mesh)
  return Setup(config=config, info=info, model=model, tx=tx, schedule=optim.make_schedule(config),
               mesh=mesh, task=tasks.get_task(info.task), abstract_state=abstract,
               state_shardings=shardings)


def variables_of(state) -> dict[str, Any]:
  variables = {'params': state.params}
  if state.batch_stats is not None:
    variables['batch_stats'] = state.batch_stats
  return variables


def process_slice() -> dict[str, int]:
  return dict(process_index=jax.process_index(), process_count=jax.process_count())
