"""The authors' PoNet checkpoints (chtan/ponet-base-uncased: Hugging Face BERT names) -> our params.

    params, model_config = load_official('path/to/ponet-base-uncased')   # config.json + weights
    model = build_model(ml_collections.ConfigDict({'name': 'ponet_mlm', **model_config}))
or, as an orbax checkpoint that `config.init_from` and eval.py read:
    python -m poolformers_jax.convert --config configs/ponet_pretrain.py:sso \
        --source path/to/ponet-base-uncased --workdir runs/ponet_base_official

Weights: `model.safetensors` or `pytorch_model.bin` (no torch needed); Linear weights [out, in]
become [in, out] kernels. The MLM decoder is tied to the word embeddings (a stored
`cls.predictions.decoder.weight` must equal them); the SSO head and a fine-tuned `classifier`
are converted when present. `save_hf` writes our params back in these names. Tested against the
official modeling code (on a fixture made with it).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np
from flax import traverse_util

from poolformers_jax import extras
from poolformers_jax.weights.state_dict import read_state_dict

# Official name (after the 'ponet.' prefix) -> our parameter path, for one BERT layer i.
_LAYER = {
    'attention.self.dense_q': ('PoNet_0', 'query'),
    'attention.self.dense_k': ('PoNet_0', 'key'),
    'attention.self.dense_o': ('PoNet_0', 'gate'),       # the fusion gate H_O
    'attention.self.dense_local': ('PoNet_0', 'local'),
    'attention.self.dense_segment': ('PoNet_0', 'segment'),
    'attention.output.dense': ('PoNet_0', 'out'),
    'attention.output.LayerNorm': ('norm1',),            # post-LN TransformerBlock
    'intermediate.dense': ('mlp', 'fc1'),
    'output.dense': ('mlp', 'fc2'),
    'output.LayerNorm': ('norm2',),
}
_TOP = {
    'embeddings.word_embeddings': ('token_embed',),
    'embeddings.position_embeddings': ('position_embed',),
    'embeddings.token_type_embeddings': ('type_embed',),
    'embeddings.LayerNorm': ('embed_norm',),
    'pooler.dense': ('pooler',),
    'cls.predictions.transform.dense': ('mlm_transform',),
    'cls.predictions.transform.LayerNorm': ('mlm_norm',),
    'cls.seq_relationship': ('sso_head',),
    'classifier': ('classifier',),
}
_IGNORED = ('position_ids', 'token_type_ids', 'cls.predictions.decoder.bias')


def _leaf(module: str, kind: str, value: np.ndarray) -> tuple[str, np.ndarray]:
  """(our leaf name, value) of a PyTorch parameter `kind` of a module."""
  if module.endswith('embeddings'):
    return 'embedding', value
  if module.endswith('LayerNorm'):
    return {'weight': 'scale', 'gamma': 'scale', 'bias': 'bias', 'beta': 'bias'}[kind], value
  return ('kernel', value.T) if kind == 'weight' else ('bias', value)


def mismatch_line(missing: list[str], unexpected: list[str], misshaped: list[str]) -> str:
  """What does not fit, in words ('' when everything does)."""
  kinds = ((missing, 'missing from the checkpoint'),
           (unexpected, 'unknown parameter(s) with no counterpart here'),
           (misshaped, 'of another shape (checkpoint -> model)'))
  return '; '.join(f'{len(names)} {what} {names[:8]}{" ..." if len(names) > 8 else ""}'
                   for names, what in kinds if names)


def convert_state_dict(state: dict[str, np.ndarray], expected: Any = None,
                       allow_missing: str = '') -> dict[str, Any]:
  """Official state dict (numpy) -> our nested params dict. Names with no counterpart here raise;
  with `expected` (the model's params tree) every parameter must also be filled with its shape,
  but those whose '/'-joined name matches `allow_missing` (left out of the result)."""
  flat: dict[tuple[str, ...], np.ndarray] = {}
  decoder: np.ndarray | None = None
  unknown: list[str] = []
  for name, value in state.items():
    value = np.asarray(value, np.float32)
    key = name[len('ponet.'):] if name.startswith('ponet.') else name
    if key.startswith('bert.'):
      key = key[len('bert.'):]
    if any(key.endswith(s) for s in _IGNORED):
      continue
    if key == 'cls.predictions.decoder.weight':
      decoder = value
      continue
    if key == 'cls.predictions.bias':
      flat[('mlm_bias',)] = value
      continue
    module, _, kind = key.rpartition('.')
    match = re.fullmatch(r'encoder\.layer\.(\d+)\.(.+)', module)
    if match and match.group(2) in _LAYER:
      path = (f'layer_{match.group(1)}',) + _LAYER[match.group(2)]
    elif module in _TOP:
      path = _TOP[module]
    else:
      unknown.append(name)
      continue
    leaf, value = _leaf(module, kind, value)
    flat[path + (leaf,)] = value
  missing, misshaped = [], []
  if expected is not None:
    target = {'/'.join(k): v for k, v in traverse_util.flatten_dict(dict(expected)).items()}
    ours = {'/'.join(k): v for k, v in flat.items()}
    missing = sorted(k for k in target if k not in ours
                     and not (allow_missing and re.search(allow_missing, k)))
    unknown += sorted(k for k in ours if k not in target)   # a real name this model lacks
    misshaped = sorted(f'{k} {ours[k].shape} -> {tuple(target[k].shape)}' for k in ours
                       if k in target and ours[k].shape != tuple(target[k].shape))
  problems = mismatch_line(missing, unknown, misshaped)
  if problems:
    raise ValueError(f'PoNet checkpoint does not fit the model: {problems}; is it a PoNet '
                     '(BERT-style) checkpoint of this size? (allow a head the checkpoint lacks '
                     "with allow_missing, e.g. '^classifier/')")
  if decoder is not None and not np.array_equal(decoder, flat[('token_embed', 'embedding')]):
    raise ValueError('PoNet checkpoint: cls.predictions.decoder.weight differs from the word '
                     'embeddings; this model ties them.')
  return traverse_util.unflatten_dict(flat)


def model_config(config: dict[str, Any]) -> dict[str, Any]:
  """Hugging Face config.json -> our config.model keys (ponet_mlm / ponet_classifier)."""
  if config.get('hidden_act', 'gelu') != 'gelu' or not config.get('clsgsepg', True):
    raise ValueError('PoNet checkpoint: only hidden_act="gelu" with clsgsepg=true (the released '
                     'model) is supported.')
  return dict(vocab_size=config['vocab_size'], emb_dim=config['hidden_size'],
              num_layers=config['num_hidden_layers'], num_heads=config['num_attention_heads'],
              mlp_dim=config['intermediate_size'], max_length=config['max_position_embeddings'],
              type_vocab_size=config['type_vocab_size'],
              layer_norm_eps=config.get('layer_norm_eps', 1e-12), mixer='ponet')


def _read_config(folder: str) -> dict[str, Any]:
  """The checkpoint folder's config.json."""
  config_path = os.path.join(folder, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'{config_path} not found: point at the chtan/ponet-base-uncased '
                            'folder.')
  with open(config_path) as f:
    return json.load(f)


def load_official(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
  """(params, config.model keys) of an official checkpoint folder with config.json."""
  config, state = _read_config(path), read_state_dict(path)
  return convert_state_dict(state), dict(model_config(config), **_heads_found(state))


# ---------------------------------------------------------------- ours -> Hugging Face

def is_hf_folder(path: str) -> bool:
  """A Hugging Face checkpoint folder: config.json beside model.safetensors / pytorch_model.bin."""
  return os.path.isfile(os.path.join(path, 'config.json')) and any(
      os.path.isfile(os.path.join(path, f)) for f in ('model.safetensors', 'pytorch_model.bin'))


def to_state_dict(params: dict[str, Any]) -> dict[str, np.ndarray]:
  """Our params -> the official names (PoNetForPreTraining / PoNetForSequenceClassification):
  kernels transposed back to [out, in]; the tied decoder left out, as Hugging Face saves it."""
  layer = {v: k for k, v in _LAYER.items()}
  top = {v: k for k, v in _TOP.items()}
  out = {}
  for path, value in traverse_util.flatten_dict(params).items():
    value = np.asarray(value, np.float32)
    *module, leaf = path
    module = tuple(module)
    if module == () and leaf == 'mlm_bias':
      out['cls.predictions.bias'] = value
      continue
    if module[0].startswith('layer_') and module[1:] in layer:
      name = f'ponet.encoder.layer.{module[0][len("layer_"):]}.{layer[module[1:]]}'
    elif module in top:
      name = top[module]
      name = name if name.startswith(('cls.', 'classifier')) else 'ponet.' + name
    else:
      raise ValueError(f'{"/".join(path)}: no PoNet (BERT) name; only ponet_mlm / '
                       'ponet_classifier parameters export.')
    if leaf == 'kernel':
      out[name + '.weight'] = np.ascontiguousarray(value.T)
    else:   # embedding and LayerNorm scale: '.weight'
      out[name + ('.bias' if leaf == 'bias' else '.weight')] = value
  return out


def hf_config(params: dict[str, Any], model_config_dict) -> dict[str, Any]:
  """config.json of the official code (BertConfig fields + clsgsepg) for our params."""
  if model_config_dict.get('mixer', 'ponet') != 'ponet':
    raise ValueError('export to Hugging Face: only the PoNet mixer has an official model '
                     "(modeling_ponet.py); this model has mixer='softmax'.")
  for key, official in (('cls_id', 101), ('sep_id', 102)):
    if model_config_dict.get(key) not in (None, official):
      raise ValueError(f'export to Hugging Face: the official code hard-codes {key}={official} '
                       f'(BERT uncased); this model has {model_config_dict.get(key)}.')
  vocab, width = params['token_embed']['embedding'].shape
  layers = sum(1 for k in params if re.fullmatch(r'layer_\d+', k))
  dropout = float(model_config_dict.get('dropout_rate', 0.1))
  config = dict(
      architectures=['PoNetForSequenceClassification' if 'classifier' in params
                     else 'PoNetForPreTraining'],
      model_type='bert', vocab_size=int(vocab), hidden_size=int(width),
      num_hidden_layers=layers, num_attention_heads=int(model_config_dict['num_heads']),
      intermediate_size=int(params['layer_0']['mlp']['fc1']['kernel'].shape[1]),
      max_position_embeddings=int(params['position_embed']['embedding'].shape[0]),
      type_vocab_size=int(params['type_embed']['embedding'].shape[0]),
      layer_norm_eps=float(model_config_dict.get('layer_norm_eps', 1e-12)), hidden_act='gelu',
      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
      initializer_range=0.02, clsgsepg=True, pad_token_id=0, position_embedding_type='absolute')
  if 'classifier' in params:
    labels = int(params['classifier']['kernel'].shape[1])
    config['id2label'] = {str(i): f'LABEL_{i}' for i in range(labels)}
    config['label2id'] = {f'LABEL_{i}': i for i in range(labels)}
  return config


def save_hf(folder: str, params: dict[str, Any], model_config_dict,
            extra: dict[str, Any] | None = None) -> str:
  """Writes FOLDER/model.safetensors + config.json, which the official modeling code loads
  (`PoNetForPreTraining.from_pretrained(FOLDER)`) and `config.init_from=FOLDER` reads back.
  `extra`: more config.json keys (the official config keeps unknown keys as attributes)."""
  extras.require('convert', 'the Hugging Face export')
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  config = {**hf_config(params, model_config_dict), **(extra or {})}
  os.makedirs(folder, exist_ok=True)
  save_file(to_state_dict(params), os.path.join(folder, 'model.safetensors'),
            metadata={'format': 'pt'})
  with open(os.path.join(folder, 'config.json'), 'w') as f:
    json.dump(config, f, indent=1, sort_keys=True)
  return folder


MODELS = ('ponet_mlm', 'ponet_classifier')


def model_params(model_config_dict, abstract: bool = True, seed: int = 0) -> Any:
  """The params tree of config.model (ShapeDtypeStructs when `abstract`: nothing computed)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp

  from poolformers_jax.models import build_model
  model = build_model(model_config_dict)
  ids = jnp.zeros((1, 8), jnp.int32)
  init = lambda: model.init(jax.random.PRNGKey(seed), ids)['params']
  return jax.eval_shape(init) if abstract else init()


def _heads_found(state: dict[str, np.ndarray]) -> dict[str, int]:
  """Head sizes the checkpoint decides: SSO/NSP classes, classifier outputs (num_labels)."""
  found = {}
  for name, value in state.items():
    if name.endswith('cls.seq_relationship.weight'):
      found['sentence_classes'] = int(value.shape[0])
    elif name.endswith('classifier.weight'):
      found['num_classes'] = int(value.shape[0])
  return found


def config_and_params(config, source: str, allow_missing: str = ''):
  """(config with config.model completed from the checkpoint, params) for poolformers_jax.convert.

  `source`: the checkpoint folder, or its weights file beside config.json: PoNetForPreTraining's
  layout for ponet_mlm, PoNetForSequenceClassification's for ponet_classifier. Sizes set in
  config.model must agree with the checkpoint; unset ones (vocab_size, head sizes, [CLS] 101 /
  [SEP] 102 of the BERT uncased vocabulary) are taken from it. Every parameter must be in the
  checkpoint and every tensor land on one, with its shape; `allow_missing` (a regex of our names,
  e.g. '^classifier/') lets heads keep the model's initialisation (seed config.seed).
  """
  import jax  # pylint: disable=g-import-not-at-top
  if not os.path.exists(source):
    raise FileNotFoundError(f'--source {os.path.abspath(source)} not found: pass the '
                            'chtan/ponet-base-uncased folder (config.json + model.safetensors), '
                            'e.g. `huggingface-cli download chtan/ponet-base-uncased --local-dir '
                            f'{source}`')
  folder = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
  if config.model.name not in MODELS:
    raise ValueError(f'model {config.model.name!r}: PoNet checkpoints convert into {MODELS}.')
  state = read_state_dict(folder)
  found = dict(model_config(_read_config(folder)), cls_id=101, sep_id=102, **_heads_found(state))
  model = config.model
  differ = [f'{k}: config {model[k]} vs checkpoint {v}' for k, v in found.items()
            if k in model and model[k] is not None and model[k] != v
            and not (k == 'max_length')]                # positions: init_from tiles them
  if differ:
    raise ValueError(f'the PoNet checkpoint does not fit config.model: {"; ".join(differ)}.')
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for key, value in found.items():
      if key in model and (model[key] is None or key == 'max_length'):
        config.model[key] = value
  params = convert_state_dict(state, model_params(config.model), allow_missing)
  fresh = model_params(config.model, abstract=False, seed=config.seed)
  flat = traverse_util.flatten_dict(params)
  for path, value in traverse_util.flatten_dict(fresh).items():   # the allowed missing heads
    flat.setdefault(path, np.asarray(jax.device_get(value)))
  return config, traverse_util.unflatten_dict(flat)
