"""The authors' PoNet checkpoints (chtan/ponet-base-uncased: HuggingFace BERT names) -> our params.

    params, model_config = load_official('path/to/ponet-base-uncased')   # config.json + weights
    model = build_model(ml_collections.ConfigDict({'name': 'ponet_mlm', **model_config}))
or, as an orbax checkpoint that `config.init_from` and eval.py read (poolformers_jax/convert.py):
    python -m poolformers_jax.convert --config configs/ponet_pretrain.py:sso \
        --source path/to/ponet-base-uncased --workdir runs/ponet_base_official

Weights: `model.safetensors` (read with the `safetensors` package into numpy) or
`pytorch_model.bin` (only when torch is installed; torch is never a dependency). Linear weights
are [out, in] in PyTorch and [in, out] kernels here. The MLM decoder is tied to the word
embeddings (a stored `cls.predictions.decoder.weight` must equal them). The SSO head
(`cls.seq_relationship`) and a fine-tuned `classifier` are converted when present.
Proven against the official modeling code by tests/models/test_ponet_convert.py (fixture made
with tests/fixtures/make_ponet_fixture.py).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np
from flax import traverse_util

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


def convert_state_dict(state: dict[str, np.ndarray]) -> dict[str, Any]:
  """Official state dict (numpy) -> our nested params dict; unknown names raise."""
  flat, decoder = {}, None
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
      raise ValueError(f'PoNet checkpoint: unknown parameter {name!r}; is it a PoNet (BERT-style) '
                       'checkpoint?')
    leaf, value = _leaf(module, kind, value)
    flat[path + (leaf,)] = value
  if decoder is not None and not np.array_equal(decoder, flat[('token_embed', 'embedding')]):
    raise ValueError('PoNet checkpoint: cls.predictions.decoder.weight differs from the word '
                     'embeddings; this model ties them.')
  return traverse_util.unflatten_dict(flat)


def model_config(config: dict[str, Any]) -> dict[str, Any]:
  """HuggingFace config.json -> our config.model keys (ponet_mlm / ponet_classifier)."""
  if config.get('hidden_act', 'gelu') != 'gelu' or not config.get('clsgsepg', True):
    raise ValueError('PoNet checkpoint: only hidden_act="gelu" with clsgsepg=true (the released '
                     'model) is supported.')
  return dict(vocab_size=config['vocab_size'], emb_dim=config['hidden_size'],
              num_layers=config['num_hidden_layers'], num_heads=config['num_attention_heads'],
              mlp_dim=config['intermediate_size'], max_length=config['max_position_embeddings'],
              type_vocab_size=config['type_vocab_size'],
              layer_norm_eps=config.get('layer_norm_eps', 1e-12), mixer='ponet')


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """Weights of a checkpoint folder (or file): safetensors, else pytorch_model.bin via torch."""
  if os.path.isdir(path):
    for file in ('model.safetensors', 'pytorch_model.bin'):
      if os.path.exists(os.path.join(path, file)):
        path = os.path.join(path, file)
        break
    else:
      raise FileNotFoundError(f'{path}: no model.safetensors or pytorch_model.bin; download '
                              'chtan/ponet-base-uncased (e.g. `huggingface-cli download '
                              'chtan/ponet-base-uncased --local-dir DIR`).')
  if path.endswith('.safetensors'):
    from safetensors.numpy import load_file
    return load_file(path)
  try:
    import torch
  except ImportError as e:
    raise ImportError(f'{path} is a PyTorch pickle: reading it needs torch (pip install torch), '
                      'or convert it to model.safetensors on a machine that has torch.') from e
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: v.float().numpy() for k, v in state.items()}


def load_official(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
  """(params, config.model keys) of an official checkpoint folder with config.json."""
  config_path = os.path.join(path, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'{config_path} not found: point at the chtan/ponet-base-uncased folder.')
  with open(config_path) as f:
    config = json.load(f)
  return convert_state_dict(read_state_dict(path)), model_config(config)


MODELS = ('ponet_mlm', 'ponet_classifier')


def config_and_params(config, source: str):
  """(config with config.model completed from the checkpoint, params) for poolformers_jax.convert.

  `source`: the checkpoint folder, or its weights file (config.json must sit beside it). Sizes
  set in config.model must agree with the checkpoint; unset ones (vocab_size, cls/sep ids) are
  taken from it ([CLS] 101, [SEP] 102: the BERT uncased vocabulary the checkpoint uses).
  """
  folder = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
  params, found = load_official(folder)
  found = dict(found, cls_id=101, sep_id=102)
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
  if config.model.name != 'ponet_mlm':
    raise ValueError('convert PoNet-Base with its pre-training config (configs/ponet_pretrain.py:'
                     'sso); fine-tuning configs then read it with config.init_from.')
  return config, params
