"""What training, evaluation, `summary` and the benchmarks share: dataset info, the completed
config, model, optimizer, mesh, task (and its decoder, built here once), the abstract (sharded)
train state, and the numbers derived from the config once (the eval batch size, the
gradient-accumulation count)."""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Optional

import jax
import ml_collections
import optax
from jax.sharding import Mesh

from poolformers_jax import data, registry, tasks
from poolformers_jax.models import build_model
from poolformers_jax.train import (config_utils, length_buckets, optim, sharding,
                                   state as state_lib, validate)


@dataclasses.dataclass
class Setup:
  config: ml_collections.ConfigDict      # completed from the dataset (model sizes filled in)
  info: Any                              # data.DatasetInfo
  model: Any
  tx: optax.GradientTransformation
  schedule: optax.Schedule               # learning rate per optimizer update
  mesh: Mesh
  task: tasks.Task
  abstract_state: Any                    # ShapeDtypeStructs carrying the current shardings
  state_shardings: Any
  eval_batch_size: int                   # global; config.eval_batch_size, 0 -> batch_size
  grad_accum_steps: int                  # micro-batches per optimizer update
  decoder: Any = None                    # the task's, if it generates outputs (Task.decoder)


def completed_config(config: ml_collections.ConfigDict, *, need_files: bool = True,
                     info: Optional[Any] = None) -> tuple[ml_collections.ConfigDict, Any]:
  """(a locked copy of `config` with the model sizes the data decides filled in, DatasetInfo).
  need_files=False: sizes from the dataset's constants where its files are missing; `info`: this
  DatasetInfo instead of the dataset's (a benchmark that makes its own batches)."""
  registry.import_modules(config.get('imports', ''))   # the user's mixers / models, registered
  info = info or data.get_dataset_info(config, need_files=need_files)
  config = copy.deepcopy(config)   # the caller's config is left untouched
  config_utils.complete_from_dataset(config, info)
  config.lock()
  return config, info


def make_setup(config: ml_collections.ConfigDict, *, need_files: bool = True,
               info: Optional[Any] = None, mesh: Optional[Mesh] = None) -> Setup:
  """Every check of the config (validate.py), then the model, optimizer and abstract state;
  raises before compiling. need_files=False builds it without the dataset's files (sizes from
  its constants: the summary tool and the benchmarks); `info` as in `completed_config`; `mesh`
  instead of the local devices' (summary --topology: the chips of a TPU slice, compile only)."""
  config, info = completed_config(config, need_files=need_files, info=info)
  mesh = sharding.make_mesh(config.num_devices) if mesh is None else mesh
  validate.check_config(config, info, mesh)   # every config problem, before any model is built
  model = build_model(config)
  if config.length_buckets.multiple:   # batches cut shorter: 'mean_padded' keeps the data's L
    model = length_buckets.padded_length_model(model, info)
  tx = optim.make_optimizer(config)
  abstract, shardings = state_lib.state_shardings(model, tx, info, mesh)
  task = tasks.get_task(info.task)
  decoder = None if task.decoder is None else task.decoder(
      model=model, decode=config.decode, data=config.data, devices=mesh.devices.size,
      params_sharding=shardings.params, batch_sharding=sharding.batch_sharded(mesh),
      out_sharding=sharding.replicated(mesh))
  return Setup(config=config, info=info, model=model, tx=tx, schedule=optim.make_schedule(config),
               mesh=mesh, task=task, abstract_state=abstract, state_shardings=shardings,
               eval_batch_size=int(config.eval_batch_size or config.batch_size),
               grad_accum_steps=int(config.optimizer.grad_accum_steps), decoder=decoder)


def variables_of(state) -> dict[str, Any]:
  variables = {'params': state.params}
  if state.batch_stats is not None:
    variables['batch_stats'] = state.batch_stats
  return variables


def process_slice() -> dict[str, int]:
  return dict(process_index=jax.process_index(), process_count=jax.process_count())
