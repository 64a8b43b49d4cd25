r"""Official PyTorch weights -> an orbax checkpoint that `eval.py` and `config.init_from` read,
and (PoNet, `--to hf`) our checkpoint back to a Hugging Face folder.

    python -m poolformers_jax.convert --config configs/imagenet.py:deit_ti \
        --source deit_tiny_patch16_224.safetensors --workdir runs/deit_ti_timm
    python eval.py --config configs/imagenet.py:deit_ti --workdir runs/deit_ti_timm \
        --checkpoint latest --split validation

Sources (the format is read from the names):
- timm ViT / DeiT (`deit_tiny_patch16_224`, `vit_base_patch16_384`, ...): `.safetensors`, or the
  official DeiT `.pth` (`{'model': state_dict}`); neither needs torch.
- PoNet-Base (`chtan/ponet-base-uncased`, BERT names; --source the folder with config.json,
  --config configs/ponet_pretrain.py:sso).
- HVT release checkpoints (MonashAI/HVT, `{'model': state_dict, 'args': ...}` `.pth`, or the same
  state dict as `.safetensors`): a block that pools carries its stage's `blocks.<i>.pos_embed`.

PoNet back to Hugging Face (model.safetensors + config.json + README.md, the official names;
docs/results/ponet_transfer.md):
    python -m poolformers_jax.convert --to hf --source runs/ponet_pretrain \
        --workdir runs/ponet_pretrain_hf
The architecture is the run's own (DIR/config.json); a run directory exports its best checkpoint,
else its latest; an NSP sentence head (2 classes) is refused unless --drop_sentence_head.

Every tensor must land on a parameter of the same shape and every parameter must be filled, else
the error names what differs. The checkpoint is a train state at step 0 in DIR/checkpoints/0, the
layout training writes. The name mappings and the reader live in `poolformers_jax.weights`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from poolformers_jax.weights import ponet as ponet_conversion
from poolformers_jax.weights.state_dict import ConversionError, read_state_dict
from poolformers_jax.weights.timm import model_params_of


def write_checkpoint(config, params: dict[str, Any], workdir: str) -> str:
  """A train state at step 0 with `params` into DIR/checkpoints/0 (+ DIR/config.json)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp
  import orbax.checkpoint as ocp

  from poolformers_jax.models import build_model
  from poolformers_jax.trainer import checkpoint as checkpoint_lib, optim, setup as setup_lib
  params = jax.tree.map(jnp.asarray, params)
  state = setup_lib.TrainState.create(apply_fn=build_model(config.model).apply, params=params,
                                      tx=optim.make_optimizer(setup_lib.optimizer_settings(config)))
  state = state.replace(step=jnp.asarray(0, jnp.int32))
  workdir = os.path.abspath(workdir)
  directory = os.path.join(workdir, checkpoint_lib.LATEST_DIR)
  if os.path.isdir(directory) and os.listdir(directory):
    raise ConversionError(f'{directory} already holds checkpoints; pass an empty --workdir.')
  manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(create=True))
  manager.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
  manager.wait_until_finished()
  manager.close()
  from poolformers_jax import config as config_lib
  from poolformers_jax.trainer import integrity  # what eval.py / resume verify
  integrity.write_record(os.path.join(directory, '0'), 0, integrity.leaf_records(state),
                         config_lib.config_hash(config))
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json_best_effort(indent=2) + '\n')
  return os.path.join(directory, '0')


def convert(config, source: str, workdir: str, allow_missing: str = '') -> str:
  """Reads `source`, fills the configured model, writes DIR/checkpoints/0; returns its path.
  `allow_missing` (PoNet): a regex of parameter names the checkpoint may lack (a new head)."""
  if config.model.name in ponet_conversion.MODELS:   # chtan/ponet-base-uncased (HF BERT names)
    config, params = ponet_conversion.config_and_params(config, source, allow_missing)
  else:
    _, params = model_params_of(config, read_state_dict(source))
  return write_checkpoint(config, params, workdir)


def _checkpoint_of_run(source: str) -> tuple[str, str | None, str, int | None]:
  """(the checkpoint's PyTree directory, the run directory or None, the checkpoint as
  '<best|checkpoints|averaged>/<step>', its step) of `source`: a workdir (its best checkpoint,
  else its latest: init_from.checkpoint_dir), DIR/checkpoints/<step> or its state directory."""
  from poolformers_jax.trainer import checkpoint as checkpoint_lib, init_from
  if not os.path.exists(source):
    raise FileNotFoundError(f'--source {os.path.abspath(source)} not found: pass the --workdir '
                            'of a train.py run (or DIR/checkpoints/<step>)')
  try:
    state_dir = init_from.checkpoint_dir(source)
  except FileNotFoundError:
    raise FileNotFoundError(f'--source {os.path.abspath(source)} holds no checkpoint: pass the '
                            '--workdir of a train.py run (or DIR/checkpoints/<step>)') from None
  step_dir = os.path.dirname(state_dir) if os.path.basename(state_dir) == 'state' else state_dir
  kind_dir, step = os.path.dirname(step_dir), os.path.basename(step_dir)
  kinds = (checkpoint_lib.BEST_DIR, checkpoint_lib.LATEST_DIR, checkpoint_lib.AVERAGED_DIR)
  run = os.path.dirname(kind_dir) if os.path.basename(kind_dir) in kinds else None
  return (state_dir, run, f'{os.path.basename(kind_dir)}/{step}',
          int(step) if step.isdigit() else None)


SSO_CLASSES = 3   # the official PoNetForPreTraining's sentence head: Linear(hidden, 3)


def _hf_heads(params: dict[str, Any], drop_sentence_head: bool) -> tuple[dict[str, Any], str]:
  """(the params to export, what the exported heads are): the official PoNetForPreTraining has
  a 3-class sentence head (SSO), so a 2-class one (NSP) is refused unless dropped."""
  if 'classifier' in params:
    labels = params['classifier']['kernel'].shape[1]
    return params, f'encoder + classifier ({labels} labels): PoNetForSequenceClassification'
  classes = params['sso_head']['kernel'].shape[1] if 'sso_head' in params else 0
  if classes and classes != SSO_CLASSES and not drop_sentence_head:
    raise ConversionError(
        f"--to hf: this run's sentence head has {classes} classes (NSP) and the official "
        f'PoNetForPreTraining cannot load it (its head, cls.seq_relationship, has '
        f'{SSO_CLASSES}: SSO); pass --drop_sentence_head to export the encoder and the MLM head '
        'without it (the official code then starts a new 3-class head)')
  if classes and not drop_sentence_head:
    return params, 'encoder + MLM head + SSO head (3 classes): PoNetForPreTraining'
  why = ('dropped (--drop_sentence_head)' if classes else 'none in this run (MLM only)')
  return ({k: v for k, v in params.items() if k != 'sso_head'},
          f'encoder + MLM head, sentence head {why}: PoNetForPreTraining loads it with a new '
          '3-class cls.seq_relationship')


_HF_README = """# PoNet exported by poolformers_jax

- source run: {run}
- checkpoint: {checkpoint} (step {step}; a run directory exports its best checkpoint, else its
  latest); the architecture is the run's own (its config.json)
- exported by poolformers_jax at commit {commit}
- heads: {heads}

Load it with the official modeling code (modeling_ponet.py of lxchtan/PoNet),
`PoNetForPreTraining.from_pretrained(FOLDER)` or `PoNetForSequenceClassification`, and call it
with `token_type_ids`: poolformers_jax derives them from [SEP] (0 up to and including the first
[SEP], 1 after), the official code sets them to zeros when they are not given.
"""


def export_hf(config, source: str, folder: str, *, drop_sentence_head: bool = False,
              trust_imports: bool = False) -> dict[str, Any]:
  """Our PoNet checkpoint (a workdir or DIR/checkpoints/<step>) -> a Hugging Face folder that the
  official modeling code loads; the model is the run's. Returns what was written (also in the
  folder's config.json and README.md)."""
  from poolformers_jax import config as config_lib
  from poolformers_jax.experiments.runs import git_commit
  from poolformers_jax.trainer import init_from
  state_dir, run, checkpoint, step = _checkpoint_of_run(source)
  if run is not None:
    config = config_lib.with_run_model(config, run, trust_imports=trust_imports)
  elif config is None:
    raise ConversionError(f'--source {source} is not in a run directory (no config.json says '
                          'what the model is); pass --config')
  if config.model.name not in ponet_conversion.MODELS:
    raise ConversionError(f'--to hf: only PoNet models {ponet_conversion.MODELS} have a Hugging '
                          f'Face layout; the run trained {config.model.name!r}.')
  if os.path.exists(os.path.join(folder, 'model.safetensors')):
    raise ConversionError(f'{folder} already holds model.safetensors; pass an empty --workdir.')
  params, heads = _hf_heads(init_from.read_variables(state_dir)['params'], drop_sentence_head)
  record = {'run': run, 'checkpoint': checkpoint, 'step': step, 'commit': git_commit(),
            'heads': heads}
  ponet_conversion.save_hf(folder, params, config.model, extra={'poolformers_jax_export': record})
  with open(os.path.join(folder, 'README.md'), 'w') as f:
    f.write(_HF_README.format(**record))
  return {'hf_folder': os.path.abspath(folder), **record}


def _convert() -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top

  from poolformers_jax import cli  # pylint: disable=g-import-not-at-top
  config = cli.config_value(flags.FLAGS['config']) if flags.FLAGS['config'].present else None
  if flags.FLAGS.to == 'hf':
    print(json.dumps(export_hf(config, flags.FLAGS.source, flags.FLAGS.workdir,
                               drop_sentence_head=flags.FLAGS.drop_sentence_head,
                               trust_imports=flags.FLAGS.trust_imports)))
    return
  if config is None:
    raise ValueError('--config is required to convert official weights: it names the model '
                     '(e.g. --config configs/ponet_pretrain.py:sso)')
  path = convert(config, flags.FLAGS.source, flags.FLAGS.workdir, flags.FLAGS.allow_missing)
  print(json.dumps({'checkpoint': path, 'source': os.path.abspath(flags.FLAGS.source)}))


def main(argv: Sequence[str] | None = None) -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top

  from poolformers_jax import cli  # pylint: disable=g-import-not-at-top
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_string('source', None, 'official checkpoint: .safetensors, or .pth with torch')
  flags.DEFINE_string('workdir', None, 'run directory to write (DIR/checkpoints/0)')
  flags.DEFINE_enum('to', 'orbax', ['orbax', 'hf'], 'orbax: official weights -> our checkpoint '
                    '(DIR/checkpoints/0); hf: our PoNet checkpoint (--source a workdir) -> a '
                    'Hugging Face folder (--workdir) with model.safetensors + config.json')
  flags.DEFINE_string('allow_missing', '', "PoNet: regex of parameters the checkpoint may lack, "
                      "kept as initialised (e.g. '^classifier/'); anything else missing fails")
  flags.DEFINE_bool('drop_sentence_head', False, "--to hf: export without the run's sentence "
                    'head (needed for an NSP head: the official class has a 3-class SSO head)')
  cli.define_trust_imports_flag()
  cli.start(__name__, _convert, argv, required=('source', 'workdir'))


if __name__ == '__main__':
  main()
