"""A trained run, from Python: `load_run(workdir)` -> `Run` (config, model, params, and the
run's own input processing).

    run = poolformers_jax.load_run('runs/listops', checkpoint='best')
    run.predict(['[MAX 2 9 [MIN 4 7 ] 0 ]', '[SM 1 2 ]'])        # class ids, here ListOps values
    run.logits(['[MAX 2 9 ]'])                                   # [N, num_classes]
    lm.generate('The ', 200, temperature=0.8, top_k=40)          # a character LM's text
    batch = run.encode(['[MAX 2 9 ]'])                           # {'inputs': [N, max_length]}

A run is read as eval.py reads it: its DIR/config.json, `make_setup`, and the checkpoint verified
against its integrity record, restored onto the devices at hand (the model's variables only, not
the optimizer state). Raw inputs become examples through the dataset's own `record` and
`preprocess` (data/<dataset>.py), exactly as evaluation makes them (ListOps strings lose their
parentheses where the run dropped them, text becomes the run's bytes or WordPiece ids, images its
pixels); `predict` returns the task's `prediction` (tasks/). What a raw input is, per dataset:
  listops                  a string of ListOps tokens (with or without parentheses) or a token list
  lra_text                 a string (or bytes)
  lra_retrieval            a pair of documents (text1, text2)
  lra_image, lra_pathfinder, cifar10/100, imagenet2012   an image array [H, W, 3] or [H, W] uint8
  cifar10_pairs            a pair of images
  glue                     a sentence, or a pair (sentence1, sentence2) for the pair tasks
  text_classification      a document string
  wmt14                    a source sentence (predict translates it)
  enwik8, text8            a text (predict gives the distribution of the symbol after it)
Inputs longer than the run's config.data.max_length are refused, naming the input;
`too_long='truncate'` cuts them as the run's data did. `generate` continues a prompt with a
character LM (models/lm_decode.py), its text made and read back by the dataset's symbol table.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from poolformers_jax.data import base as data_base


class _QuietReadOnly(logging.Filter):
  """orbax warns that a read-only manager is read-only: expected here."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(('CheckpointManagerOptions.read_only=True',
                                               'Given directory is read only'))


def _mesh_for(config):
  """The devices at hand, as many as split the run's batch sizes evenly (the setup's checks)."""
  from poolformers_jax.trainer import sharding
  sizes = [int(config.batch_size), int(config.eval_batch_size or config.batch_size)]
  count = len(jax.devices())
  while count > 1 and any(s % count for s in sizes):
    count -= 1
  return sharding.make_mesh(count if jax.process_count() == 1 else -1)


def load_run(workdir: str, checkpoint: str | int = 'best', *,
             trust_imports: bool = False) -> Run:
  """The run trained in `workdir` at `checkpoint` ('best' | 'latest' | 'averaged' | a step),
  restored onto the devices at hand. A run directory runs no code on load: the modules its config
  names (`config.imports`) must be imported already, or are imported with `trust_imports=True`."""
  from poolformers_jax import config as config_lib
  from poolformers_jax.trainer import checkpoint as checkpoint_lib
  from poolformers_jax.trainer.setup import setup_with_config
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f'{workdir} not found: pass the workdir of a train.py run')
  config = config_lib.run_config(workdir, trust_imports=trust_imports)
  spec = data_base.get_spec(config.data.name)   # else the setup would make them anew from the data
  for path in spec.run_files(data_base.settings(config.data)) if spec.run_files else ():
    if not os.path.exists(path):
      raise FileNotFoundError(f'{path} (trained with this run, config.data.name='
                              f'{config.data.name!r}) is missing; train.py writes it beside the '
                              'data')
  config, setup = setup_with_config(config, need_files=False, mesh=_mesh_for(config))
  quiet, loggers = _QuietReadOnly(), [logging.getLogger('absl'), logging.getLogger()]
  for logger in loggers:   # orbax logs through absl's logger; a logger's filter sees its own
    logger.addFilter(quiet)
  # The model's variables only: the optimizer state (2x the parameters for Adam) is not read.
  abstract = {'params': setup.abstract_state.params}
  if setup.abstract_state.batch_stats is not None:
    abstract['batch_stats'] = setup.abstract_state.batch_stats
  try:
    restored, step = checkpoint_lib.restore_for_reading(workdir, config, checkpoint,
                                                        abstract)
  finally:
    for logger in loggers:
      logger.removeFilter(quiet)
  return Run(workdir=workdir, checkpoint=str(checkpoint), step=int(step), config=config,
             model=setup.model, params=restored['params'],
             batch_stats=restored.get('batch_stats'), setup=setup)


@dataclasses.dataclass
class Run:
  """A trained model with its config and the run's input processing; see the module docstring."""
  workdir: str
  checkpoint: str
  step: int
  config: ml_collections.ConfigDict    # the run's config.json (model sizes filled in)
  model: Any
  params: Any                          # on the devices at hand (replicated over them)
  batch_stats: Any = None              # BatchNorm statistics (models with BatchNorm only)
  setup: Any = dataclasses.field(default=None, repr=False)   # trainer.setup.Setup
  _apply: Any = dataclasses.field(default=None, repr=False)
  _generators: dict = dataclasses.field(default_factory=dict, repr=False)   # compiled, by sampling

  @property
  def task(self) -> str:
    """The run's task ('classification', 'retrieval', 'lm', 'seq2seq', ...)."""
    return self.setup.info.task

  @property
  def variables(self) -> dict[str, Any]:
    out = {'params': self.params}
    if self.batch_stats is not None:
      out['batch_stats'] = self.batch_stats
    return out

  # -- inputs -----------------------------------------------------------------------------------
  def _examples(self, raw_inputs: Sequence[Any], too_long: str) -> list[dict[str, np.ndarray]]:
    from poolformers_jax.data.info import Preprocess
    record = data_base.get_spec(self.config.data.name).record
    if record is None:
      readable = sorted(n for n in data_base.DATASETS if data_base.DATASETS[n].record)
      raise ValueError(f'load_run cannot encode raw inputs of dataset {self.config.data.name!r}; '
                       f'it knows {readable}')
    if too_long not in ('error', 'truncate'):
      raise ValueError(f"too_long={too_long!r}: use 'error' or 'truncate'")
    if isinstance(raw_inputs, (str, bytes)):
      raise ValueError('raw_inputs is one string: pass a list of inputs, e.g. [text]')
    settings = dataclasses.replace(self.setup.data, too_long=too_long)
    preprocess, refit = Preprocess(settings), self.setup.task.predict_example
    examples = []
    for i, raw in enumerate(raw_inputs):
      try:
        example = preprocess(record(raw, settings))
        examples.append(refit(example, settings) if refit else example)
      except ValueError as error:
        message = str(error)
        if 'max_length' in message and 'tokens >' in message:
          message = (f"{message.split(';')[0]}, too long for this run's model; shorten it, or "
                     "pass too_long='truncate' to cut it as the run's data did")
        raise ValueError(f'input {i}: {message.rstrip(".")}') from None
    if not examples:
      raise ValueError('no inputs: pass a list of raw inputs')
    return examples

  def encode(self, raw_inputs: Sequence[Any], *, too_long: str = 'error') -> dict[str, np.ndarray]:
    """The model's input arrays of `raw_inputs`, stacked (e.g. {'inputs': [N, max_length]}), made
    by the dataset's preprocessing as evaluation makes them (no augmentation)."""
    examples = self._examples(raw_inputs, too_long)
    return {k: np.stack([e[k] for e in examples]) for k in examples[0]
            if k not in ('targets', 'weights', 'last')}

  # -- outputs ----------------------------------------------------------------------------------
  def _refuse(self, what: str) -> None:
    if self.setup.task.predicts is None:
      raise ValueError(f'{self.workdir} is a {self.task!r} run (pre-training): it has no '
                       f'{what}; fine-tune it (config.init_from={self.workdir}) and load that run')

  def batch_size_for(self, batch_size: int | None) -> int:
    """`batch_size` (default: the run's eval batch size) rounded up to a multiple of the devices."""
    devices = self.setup.mesh.devices.size
    size = int(batch_size or self.setup.eval_batch_size)
    if size < 1:
      raise ValueError(f'batch_size={batch_size} must be positive')
    return -(-size // devices) * devices

  def _forward(self, examples: list[dict[str, np.ndarray]], batch_size: int | None):
    """The model's outputs for `examples`, batch by batch (the last padded with zero rows)."""
    from poolformers_jax.trainer import sharding
    setup = self.setup
    if self._apply is None:
      model = self.model
      self._apply = jax.jit(lambda variables, inputs: model.apply(variables, inputs,
                                                                  deterministic=True))
    size = self.batch_size_for(batch_size)
    outputs = []
    for start in range(0, len(examples), size):
      rows = examples[start:start + size]
      rows = rows + [jax.tree.map(np.zeros_like, rows[0])] * (size - len(rows))
      batch = {k: np.stack([r[k] for r in rows]) for k in rows[0] if k != 'last'}
      inputs = setup.task.model_inputs(sharding.global_batch(batch, setup.mesh))
      outputs.append(jax.device_get(self._apply(self.variables, inputs)))
    return jax.tree.map(lambda *xs: np.concatenate(xs)[:len(examples)], *outputs)

  def logits(self, raw_inputs: Sequence[Any], *, batch_size: int | None = None,
             too_long: str = 'error') -> np.ndarray:
    """The model's outputs for `raw_inputs` (classification: logits [N, num_classes]; lm:
    [N, max_length, vocab], position t predicting symbol t + 1), `batch_size` at a time
    (default: the run's eval batch size)."""
    self._refuse('logits')
    if self.setup.decoder is not None:
      raise ValueError('a translation model needs target tokens for logits; predict() translates')
    return self._forward(self._examples(raw_inputs, too_long), batch_size)

  def predict(self, raw_inputs: Sequence[Any], *, batch_size: int | None = None,
              too_long: str = 'error', **decode: Any):
    """classification / retrieval: class ids [N]; regression: scores [N]; lm: the probabilities
    of the symbol after each text [N, vocab]; seq2seq: the translations (`decode`: beam_size,
    alpha, batch_tokens)."""
    self._refuse('predictions')
    if self.setup.decoder is not None:   # a task that generates (translation) decodes
      if isinstance(raw_inputs, str):
        raise ValueError('raw_inputs is one string: pass a list of sentences, e.g. [text]')
      return self.setup.decoder.translate(self.params, list(raw_inputs), **decode)
    if decode:
      raise ValueError(f'{sorted(decode)}: decoding options are for translation runs only')
    examples = self._examples(raw_inputs, too_long)
    return self.setup.task.prediction(self._forward(examples, batch_size), examples)

  def generate(self, prompt: str | bytes, num_tokens: int, *, temperature: float = 1.0,
               top_k: int | None = None, seed: int = 0) -> str:
    """The `num_tokens` symbols a character LM writes after `prompt`, as text (data/text_lm.py).
    temperature 0: the most likely symbol each step; else a sample of softmax(logits /
    temperature) among the `top_k` most likely (None: all), the same for the same `seed`. The
    prompt may be longer than the run's max_length but for learned positions (their table)."""
    from poolformers_jax.models import lm_decode
    spec = data_base.get_spec(self.config.data.name)
    if spec.text is None or spec.record is None:
      raise ValueError(f'{self.workdir} trained on {self.config.data.name!r}, whose runs write no '
                       'text: generate continues text with a character LM run (enwik8, text8)')
    if not isinstance(prompt, (str, bytes)):
      raise ValueError(f'prompt is a {type(prompt).__name__}: pass one text (a str)')
    if not prompt:
      raise ValueError('the prompt is empty: give at least one symbol to continue')
    settings = self.setup.data
    ids = spec.preprocess(spec.record(prompt, settings), settings, None)['inputs']
    lm_decode.check_generation(lm_decode.decoder_of(self.model), len(ids), num_tokens,
                               temperature, top_k)
    sampling = (num_tokens, float(temperature), top_k)
    if sampling not in self._generators:
      self._generators[sampling] = lm_decode.make_generate(
          self.model, num_tokens, temperature=float(temperature), top_k=top_k)
    tokens = self._generators[sampling](self.params, np.asarray(ids, np.int32)[None],
                                        jax.random.PRNGKey(seed))
    return spec.text(np.asarray(jax.device_get(tokens))[0], settings)
