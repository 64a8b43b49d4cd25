"""`make_setup(config)`: what a run builds from its config, in one frozen `Setup` of typed values
that training, evaluation, `summary`, `load_run` and the benchmarks build their steps from.

The config is completed here (on a resume with the run's own model: config/completion.py) and
checked before anything is built, so a bad key, size or mesh fails before compiling; it is read
here, and what is built from it takes plain values (`setup_with_config` also returns the
completed config, for the programs that read it further).
The train state (Flax's TrainState, plus BatchNorm statistics where a model has them) is created
here too, directly sharded as the Setup's `state_shardings` say.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import Mesh

from poolformers_jax import config as config_lib, tasks
from poolformers_jax.config import completion
from poolformers_jax.data.base import DataSettings
from poolformers_jax.layers.registry import check_sequence_parallel
from poolformers_jax.models import build_model
from poolformers_jax.tasks.classification import TOP_K
from poolformers_jax.trainer import length_buckets, optim, param_init as param_init_lib, sharding


class TrainState(train_state.TrainState):
  batch_stats: Any | None = None   # BatchNorm running averages (models with BatchNorm only)


@dataclasses.dataclass(frozen=True)
class Setup:
  """What a run builds from its completed config, once: the train and eval steps
  (trainer/step.py) and every reader of a run take their parts from here."""
  info: Any                            # data.DatasetInfo
  data: DataSettings                   # the dataset's typed settings (config.data)
  model: nn.Module
  task: tasks.Task
  tx: optax.GradientTransformation
  schedule: optax.Schedule             # learning rate per optimizer update
  mesh: Mesh
  fsdp_rules: sharding.FsdpRules       # where parameters and optimizer state are split
  abstract_state: Any                  # TrainState of sharded ShapeDtypeStructs
  state_shardings: Any
  num_train_steps: int                 # micro-batch steps (from num_train_epochs where given)
  batch_size: int                      # global; config.batch_size
  eval_batch_size: int                 # global; config.eval_batch_size, 0 -> batch_size
  grad_accum_steps: int                # micro-batches per optimizer update
  label_smoothing: float
  mixup: dict[str, float]              # mixup.mix_batch's keyword arguments; {}: none
  bucket_multiple: int                 # config.length_buckets.multiple; 0: no length buckets
  micro_batch_size: int                # config.length_buckets.micro_batch_size
  param_init: str                      # config.param_init: how fresh parameters are drawn
  compute_dtype: str                   # config.model.dtype ('float32' when unset)
  decoder: Any = None                  # the task's, if it generates outputs (Task.decoder)


def _mixup_kwargs(config: ml_collections.ConfigDict) -> dict[str, float]:
  """mix_batch's keyword arguments from config.mixup, or {} when both alphas are 0
  (the config check has made sure that the data are images to classify)."""
  mixup = config.mixup
  if mixup.mixup_alpha <= 0 and mixup.cutmix_alpha <= 0:
    return {}
  return dict(mixup_alpha=float(mixup.mixup_alpha), cutmix_alpha=float(mixup.cutmix_alpha),
              switch_prob=float(mixup.switch_prob),
              label_smoothing=float(config.label_smoothing))


def validation_metrics(info) -> list[str] | None:
  """The validation metrics of a classification-like task (None for tasks with other sums): what
  config.best_metric may name."""
  sums = {'loss': 1.0, 'correct': 1.0, 'count': 1.0}
  if info.task in ('classification', 'retrieval') and (info.num_classes or 0) >= TOP_K:
    sums[f'correct_top{TOP_K}'] = 1.0
  try:
    return sorted(tasks.get_task(info.task).summary(sums))
  except (KeyError, TypeError, ValueError):
    return None


def make_setup(config: ml_collections.ConfigDict | None, **options: Any) -> Setup:
  """The `Setup` of `config` (`setup_with_config`'s options)."""
  return setup_with_config(config, **options)[1]


def setup_with_config(config: ml_collections.ConfigDict | None, *, need_files: bool = True,
                      info: Any | None = None, mesh: Mesh | None = None, run_dir: str | None = None,
                      todo: str = '') -> tuple[ml_collections.ConfigDict, Setup]:
  """(the completed config, its `Setup`): the config completed and checked
  (`config.check_config`), then the model, optimizer and abstract state built; raises before
  compiling. need_files=False builds it without the dataset's files (sizes from its constants:
  the summary tool and the benchmarks); `info`: this DatasetInfo instead of the dataset's (a
  benchmark that makes its own batches); `mesh` instead of the local devices' (summary
  --topology: the chips of a TPU slice, compile only); `run_dir`: the run directory this config
  continues or reads, whose model it must be (config.with_run_model: `config` None is the run's
  own; `todo` says what to do about another model)."""
  config, data_settings, info = completion.complete_with_info(
      config, need_files=need_files, info=info, run_dir=run_dir, todo=todo)
  mesh = make_mesh(config) if mesh is None else mesh
  config_lib.check_config(config, info, devices=sharding.batch_devices(mesh),   # before any model
                          processes=jax.process_count(), metrics=validation_metrics(info),
                          sequence=sharding.axis_size(mesh, sharding.SEQUENCE_AXIS))
  if sharding.axis_size(mesh, sharding.SEQUENCE_AXIS) > 1 and 'mixer' in config.model:
    try:   # what build_mixer checks at trace time, here before anything is built
      check_sequence_parallel(config.model.mixer)
    except ValueError as error:
      raise config_lib.ConfigError(str(error)) from None
  model = build_model(**config.model.to_dict())
  if config.length_buckets.multiple:   # batches cut shorter: 'mean_padded' keeps the data's L
    model = length_buckets.padded_length_model(model, info)
  tx, schedule = optim.make_optimizer_and_schedule(optimizer_settings(config))
  rules = fsdp_rules(config)
  abstract, shardings = state_shardings(model, tx, info, mesh, rules)
  task = tasks.get_task(info.task)
  decoder = None if task.decoder is None else task.decoder(
      model=model, decode=config.decode, data=data_settings, devices=sharding.batch_devices(mesh),
      params_sharding=shardings.params, batch_sharding=sharding.batch_sharded(mesh, 2),
      out_sharding=sharding.replicated(mesh))
  return config, Setup(
      info=info, data=data_settings, model=model, task=task, tx=tx, schedule=schedule, mesh=mesh,
      fsdp_rules=rules, abstract_state=abstract, state_shardings=shardings,
      num_train_steps=int(config.num_train_steps), batch_size=int(config.batch_size),
      eval_batch_size=int(config.eval_batch_size or config.batch_size),
      grad_accum_steps=int(config.optimizer.grad_accum_steps),
      label_smoothing=float(config.label_smoothing), mixup=_mixup_kwargs(config),
      bucket_multiple=int(config.length_buckets.multiple),
      micro_batch_size=int(config.length_buckets.micro_batch_size),
      param_init=config.param_init, compute_dtype=str(config.model.get('dtype') or 'float32'),
      decoder=decoder)


def optimizer_settings(config: ml_collections.ConfigDict) -> optim.OptimizerSettings:
  """config.optimizer and the run's length (config.num_train_steps) as the optimizer's settings."""
  return optim.OptimizerSettings(total_steps=config.num_train_steps, **config.optimizer)


def make_mesh(config: ml_collections.ConfigDict) -> Mesh:
  """The run's mesh: config.num_devices devices shaped by config.mesh (ConfigError when the sizes do
  not fit the devices)."""
  sizes = {a: config.mesh[a] for a in sharding.MESH_AXES}
  try:
    return sharding.make_mesh(config.num_devices, sizes)
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None


def fsdp_rules(config: ml_collections.ConfigDict) -> sharding.FsdpRules:
  """config.mesh.rules and fsdp_min_size as the FSDP placement rule (a bad rule: ConfigError)."""
  rules = sharding.FsdpRules(tuple(r.strip() for r in str(config.mesh.rules).split(';')
                                   if r.strip()), int(config.mesh.fsdp_min_size))
  try:
    rules.parsed()
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None
  return rules


def dummy_inputs(info) -> Any:
  """One zero training example of the dataset (batch 1), as the model reads it (init)."""
  batch = jax.tree.map(lambda s: jnp.zeros((1,) + s.shape, s.dtype), tasks.train_example(info))
  return tasks.get_task(info.task).model_inputs(batch)


def _create(model: nn.Module, tx: optax.GradientTransformation, info, rng: jax.Array,
            param_init: str = 'default') -> TrainState:
  variables = model.init({'params': rng, 'dropout': rng}, dummy_inputs(info), deterministic=True)
  # config.param_init: redraw the fresh parameters (PyTorch's defaults), here only.
  params = param_init_lib.initialize(param_init, variables['params'], rng)
  state = TrainState.create(apply_fn=model.apply, params=params, tx=tx,
                            batch_stats=variables.get('batch_stats'))
  # TrainState.create leaves `step` a Python int; an array has a sharding and a checkpoint dtype.
  return state.replace(step=jnp.asarray(0, jnp.int32))


def state_shardings(model, tx, info, mesh: Mesh,
                    rules: sharding.FsdpRules = sharding.FsdpRules()) -> tuple[Any, Any]:
  """(abstract state with shardings, sharding tree): replicated over 'data', large parameters and
  their optimizer state split over 'fsdp' as `rules` say (config.mesh.rules)."""
  abstract = jax.eval_shape(lambda r: _create(model, tx, info, r), jax.random.PRNGKey(0))
  shardings = sharding.state_shardings(mesh, abstract, rules)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, shardings)
  return abstract, shardings


def create_train_state(setup: Setup, rng: jax.Array) -> TrainState:
  """A fresh state, created sharded as `setup.state_shardings` says, its parameters drawn as
  `setup.param_init` says."""
  return jax.jit(lambda r: _create(setup.model, setup.tx, setup.info, r, setup.param_init),
                 out_shardings=setup.state_shardings)(rng)


def variables_of(state) -> dict[str, Any]:
  variables = {'params': state.params}
  if state.batch_stats is not None:
    variables['batch_stats'] = state.batch_stats
  return variables


def param_count(params: Any) -> int:
  return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))


def process_slice() -> dict[str, int]:
  return dict(process_index=jax.process_index(), process_count=jax.process_count())
