"""What training, evaluation, `summary` and the benchmarks share: dataset info, the completed
config, model, optimizer and its schedule, mesh, task (and its decoder, built here once), the
abstract (sharded) train state, and the numbers derived from the config once (the eval batch size,
the gradient-accumulation count).

The config is completed once, here (on a resume with the run's own model), checked and kept as
`Setup.config`: every later reader takes it from `Setup`. The train and eval steps are built from
`Setup.step_parts` (StepParts) instead: the parts they use and the few config values they read,
resolved here once, so the steps never take the config.
Each part is held once, in StepParts; Setup reads its model, mesh, task, ... from there."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import ml_collections
import optax
from jax.sharding import Mesh

from poolformers_jax import config as config_lib, tasks
from poolformers_jax.config import completion
from poolformers_jax.layers.registry import check_sequence_parallel
from poolformers_jax.models import build_model
from poolformers_jax.tasks.classification import TOP_K
from poolformers_jax.train import length_buckets, optim, sharding, state as state_lib


@dataclasses.dataclass(frozen=True)
class StepParts:
  """What the train step and the eval step (evaluate.make_eval_step) are built
  from: parts of the Setup plus the few config values the steps read, resolved once by
  make_setup. The steps take these, never the config (Setup.step_parts)."""
  info: Any
  model: Any
  task: tasks.Task
  schedule: optax.Schedule
  mesh: Mesh
  abstract_state: Any
  state_shardings: Any
  grad_accum_steps: int
  batch_size: int                      # global; config.batch_size
  label_smoothing: float               # config.label_smoothing
  mixup: dict[str, float]              # mixup.mix_batch's keyword arguments; {}: no mixup / cutmix
  bucket_multiple: int                 # config.length_buckets.multiple; 0: no length buckets
  micro_batch_size: int                # config.length_buckets.micro_batch_size


def _mixup_kwargs(config: ml_collections.ConfigDict) -> dict[str, float]:
  """mix_batch's keyword arguments from config.mixup, or {} when both alphas are 0
  (the config check has made sure that the data are images to classify)."""
  mixup = config.mixup
  if mixup.mixup_alpha <= 0 and mixup.cutmix_alpha <= 0:
    return {}
  return dict(mixup_alpha=float(mixup.mixup_alpha), cutmix_alpha=float(mixup.cutmix_alpha),
              switch_prob=float(mixup.switch_prob),
              label_smoothing=float(config.label_smoothing))


@dataclasses.dataclass(frozen=True)
class Setup:
  """A run's completed config and what is built from it. The parts the steps use are held once,
  in `step_parts`; `info`, `model`, `task`, `schedule`, `mesh`, `abstract_state`,
  `state_shardings` and `grad_accum_steps` read them from there."""
  config: ml_collections.ConfigDict      # completed from the dataset (model sizes filled in)
  tx: optax.GradientTransformation
  eval_batch_size: int                   # global; config.eval_batch_size, 0 -> batch_size
  step_parts: StepParts                  # what the train / eval steps are built from
  fsdp_rules: sharding.FsdpRules         # where parameters and optimizer state are split
  decoder: Any = None                    # the task's, if it generates outputs (Task.decoder)

  info = property(lambda self: self.step_parts.info)                          # data.DatasetInfo
  model = property(lambda self: self.step_parts.model)
  task = property(lambda self: self.step_parts.task)
  schedule = property(lambda self: self.step_parts.schedule)   # learning rate per optimizer update
  mesh = property(lambda self: self.step_parts.mesh)
  abstract_state = property(lambda self: self.step_parts.abstract_state)  # sharded ShapeDtypeStructs
  state_shardings = property(lambda self: self.step_parts.state_shardings)
  grad_accum_steps = property(lambda self: self.step_parts.grad_accum_steps)  # micro-batches / update


def validation_metrics(info) -> Optional[list[str]]:
  """The validation metrics of a classification-like task (None for tasks with other sums): what
  config.best_metric may name."""
  sums = {'loss': 1.0, 'correct': 1.0, 'count': 1.0}
  if info.task in ('classification', 'retrieval') and (info.num_classes or 0) >= TOP_K:
    sums[f'correct_top{TOP_K}'] = 1.0
  try:
    return sorted(tasks.get_task(info.task).summary(sums))
  except (KeyError, TypeError, ValueError):
    return None


def make_setup(config: Optional[ml_collections.ConfigDict], *, need_files: bool = True,
               info: Optional[Any] = None, mesh: Optional[Mesh] = None,
               run_dir: Optional[str] = None, todo: str = '') -> Setup:
  """The completed config and every check of it (`config.check_config`), then
  the model, optimizer and abstract state; raises before compiling. need_files=False builds it
  without the dataset's files (sizes from its constants: the summary tool and the benchmarks);
  `info`: this DatasetInfo instead of the dataset's (a benchmark that makes its own batches);
  `mesh` instead of the local devices' (summary --topology: the chips of a TPU slice, compile
  only); `run_dir`: the run directory this config continues or reads, whose model it must be
  (config.with_run_model: `config` None is the run's own; `todo` says what to do about another
  model)."""
  # config.complete, with the DatasetInfo it read (completion.py's own, private form)
  config, info = completion._completed(config, need_files=need_files, info=info,
                                       run_dir=run_dir, todo=todo)
  mesh = make_mesh(config) if mesh is None else mesh
  config_lib.check_config(config, info, devices=sharding.batch_devices(mesh),   # before any model
                          processes=jax.process_count(), metrics=validation_metrics(info),
                          sequence=sharding.axis_size(mesh, sharding.SEQUENCE_AXIS))
  if sharding.axis_size(mesh, sharding.SEQUENCE_AXIS) > 1 and 'mixer' in config.model:
    try:   # what build_mixer checks at trace time, here before anything is built
      check_sequence_parallel(config.model.mixer)
    except ValueError as error:
      raise config_lib.ConfigError(str(error)) from None
  model = build_model(config.model)
  if config.length_buckets.multiple:   # batches cut shorter: 'mean_padded' keeps the data's L
    model = length_buckets.padded_length_model(model, info)
  tx, schedule = optim.make_optimizer_and_schedule(config)
  rules = fsdp_rules(config)
  abstract, shardings = state_lib.state_shardings(model, tx, info, mesh, rules)
  task = tasks.get_task(info.task)
  decoder = None if task.decoder is None else task.decoder(
      model=model, decode=config.decode, data=config.data, devices=sharding.batch_devices(mesh),
      params_sharding=shardings.params, batch_sharding=sharding.batch_sharded(mesh, 2),
      out_sharding=sharding.replicated(mesh))
  step_parts = StepParts(
      info=info, model=model, task=task, schedule=schedule, mesh=mesh, abstract_state=abstract,
      state_shardings=shardings, grad_accum_steps=int(config.optimizer.grad_accum_steps),
      batch_size=int(config.batch_size), label_smoothing=float(config.label_smoothing),
      mixup=_mixup_kwargs(config), bucket_multiple=int(config.length_buckets.multiple),
      micro_batch_size=int(config.length_buckets.micro_batch_size))
  return Setup(config=config, tx=tx, eval_batch_size=int(config.eval_batch_size or config.batch_size),
               step_parts=step_parts, fsdp_rules=rules, decoder=decoder)


def make_mesh(config: ml_collections.ConfigDict) -> Mesh:
  """The run's mesh: config.num_devices devices shaped by config.mesh (one line when the sizes do
  not fit the devices)."""
  sizes = {a: config.mesh[a] for a in sharding.MESH_AXES}
  try:
    return sharding.make_mesh(config.num_devices, sizes)
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None


def fsdp_rules(config: ml_collections.ConfigDict) -> sharding.FsdpRules:
  """config.mesh.rules and fsdp_min_size as the FSDP placement rule (a bad rule: one line)."""
  rules = sharding.FsdpRules(tuple(r.strip() for r in str(config.mesh.rules).split(';')
                                   if r.strip()), int(config.mesh.fsdp_min_size))
  try:
    rules.parsed()
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None
  return rules


def variables_of(state) -> dict[str, Any]:
  variables = {'params': state.params}
  if state.batch_stats is not None:
    variables['batch_stats'] = state.batch_stats
  return variables


def process_slice() -> dict[str, int]:
  return dict(process_index=jax.process_index(), process_count=jax.process_count())
