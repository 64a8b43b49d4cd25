"""timm ViT / DeiT and the HVT release (MonashAI/HVT) -> the params of our ViT / HVT.

Name mapping (PyTorch `[out, in]` Linear weights transpose to Flax `[in, out]` kernels; the
fused `attn.qkv` splits into query / key / value in that order, heads contiguous as in timm):
  patch_embed.proj.weight [D, C, P, P]   -> patch_embed/kernel [P, P, C, D]
  cls_token, pos_embed                   -> cls_token, pos_embed/pos_embedding
  blocks.i.pos_embed (HVT)               -> pos_embed_stage<m>/pos_embedding (m-th pooling block)
  blocks.i.norm1/2.weight, .bias         -> block<i>/norm1/2/scale, bias
  blocks.i.attn.qkv / proj               -> block<i>/<attention>/query, key, value / out
  blocks.i.mlp.fc1 / fc2, norm, head     -> block<i>/mlp/fc1 / fc2, norm, head
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from poolformers_jax.weights.state_dict import ConversionError

ATTENTION_CHILDREN = ('key', 'out', 'query', 'value')   # softmax attention's Dense layers


def _linear(w: np.ndarray) -> np.ndarray:
  return w.T


def _conv(w: np.ndarray) -> np.ndarray:
  return w.transpose(2, 3, 1, 0)            # [D, C, P, P] -> [P, P, C, D]


def _same(w: np.ndarray) -> np.ndarray:
  return w


def _qkv(part: int, transform: Callable[[np.ndarray], np.ndarray]):
  return lambda w: transform(np.split(w, 3, axis=0)[part])


def _attention_name(block: dict[str, Any], where: str) -> str:
  names = [k for k in block if k not in ('norm1', 'norm2', 'mlp')]
  if len(names) != 1 or sorted(block[names[0]]) != list(ATTENTION_CHILDREN):
    raise ConversionError(f'{where}: only softmax-attention models convert (the official DeiT / '
                          f'HVT weights); this block has {sorted(block)}.')
  return names[0]


def torch_to_flax_names(params: dict[str, Any],
                        stage_of_block: dict[int, int]) -> dict[str, tuple]:
  """{torch name: (flax path tuple, transform)} for the model whose (abstract) params are given.
  `stage_of_block[i] = m` when block i is followed by pooling stage m (HVT)."""
  table: dict[str, tuple] = {
      'patch_embed.proj.weight': (('patch_embed', 'kernel'), _conv),
      'patch_embed.proj.bias': (('patch_embed', 'bias'), _same),
      'pos_embed': (('pos_embed', 'pos_embedding'), _same),
      'norm.weight': (('norm', 'scale'), _same),
      'norm.bias': (('norm', 'bias'), _same),
      'head.weight': (('head', 'kernel'), _linear),
      'head.bias': (('head', 'bias'), _same),
  }
  if 'cls_token' in params:
    table['cls_token'] = (('cls_token',), _same)
  for i, m in stage_of_block.items():
    table[f'blocks.{i}.pos_embed'] = ((f'pos_embed_stage{m}', 'pos_embedding'), _same)
  blocks = sorted(int(k[len('block'):]) for k in params if re.fullmatch(r'block\d+', k))
  for i in blocks:
    block, t = f'block{i}', f'blocks.{i}'
    attention = _attention_name(params[block], block)
    for norm in ('norm1', 'norm2'):
      table[f'{t}.{norm}.weight'] = ((block, norm, 'scale'), _same)
      table[f'{t}.{norm}.bias'] = ((block, norm, 'bias'), _same)
    for fc in ('fc1', 'fc2'):
      table[f'{t}.mlp.{fc}.weight'] = ((block, 'mlp', fc, 'kernel'), _linear)
      table[f'{t}.mlp.{fc}.bias'] = ((block, 'mlp', fc, 'bias'), _same)
    for part, name in enumerate(('query', 'key', 'value')):   # '#part': a third of attn.qkv
      table[f'{t}.attn.qkv.weight#{part}'] = ((block, attention, name, 'kernel'),
                                              _qkv(part, _linear))
      table[f'{t}.attn.qkv.bias#{part}'] = ((block, attention, name, 'bias'), _qkv(part, _same))
    table[f'{t}.attn.proj.weight'] = ((block, attention, 'out', 'kernel'), _linear)
    table[f'{t}.attn.proj.bias'] = ((block, attention, 'out', 'bias'), _same)
  return table


def convert_params(state_dict: dict[str, np.ndarray], abstract_params: Any,
                   stage_of_block: dict[int, int]) -> dict[str, Any]:
  """The Flax params (numpy) of `state_dict`, checked name by name and shape by shape against
  `abstract_params` (a tree of arrays / ShapeDtypeStructs)."""
  import flax  # pylint: disable=g-import-not-at-top
  table = torch_to_flax_names(abstract_params, stage_of_block)
  if 'dist_token' in state_dict or 'head_dist.weight' in state_dict:
    raise ConversionError('a distilled DeiT (dist_token, head_dist) has no counterpart here; '
                          'convert the non-distilled checkpoint.')
  wanted = {k.split('#')[0] for k in table}
  unused = sorted(set(state_dict) - wanted)
  missing = sorted(wanted - set(state_dict))
  if unused or missing:
    raise ConversionError(f'the checkpoint does not match the configured model: tensors with no '
                          f'parameter {unused[:8]}{" ..." if len(unused) > 8 else ""}, parameters '
                          f'not in the checkpoint {missing[:8]}'
                          f'{" ..." if len(missing) > 8 else ""}; '
                          'check --config (depth, num_stages, classifier) against the source.')
  target = flax.traverse_util.flatten_dict(dict(abstract_params))
  out = {}
  for name, (path, transform) in table.items():
    value = transform(state_dict[name.split('#')[0]])
    if path not in target:
      raise ConversionError(f'{name} maps to {"/".join(path)}, which the model does not have.')
    if tuple(value.shape) != tuple(target[path].shape):
      raise ConversionError(f'{name}: shape {value.shape} (after conversion) does not fit '
                            f'{"/".join(path)} {tuple(target[path].shape)}; check --config '
                            '(image_size, patch_size, hidden_dim, num_classes).')
    out[path] = np.ascontiguousarray(value, np.dtype(target[path].dtype))
  unfilled = sorted('/'.join(p) for p in set(target) - set(out))
  if unfilled:
    raise ConversionError(f'model parameters the checkpoint does not fill: {unfilled[:8]}.')
  return flax.traverse_util.unflatten_dict(out)


def model_params_of(config, state_dict: dict[str, np.ndarray]) -> tuple[Any, dict[str, Any]]:
  """(model, Flax params) of the configured model filled from `state_dict`."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp

  from poolformers_jax.models import build_model
  model = build_model(config.model)
  if not hasattr(model, 'pool_after_blocks'):
    raise ConversionError(f'model {config.model.name!r}: only ViT / DeiT / HVT configs convert.')
  images = jax.ShapeDtypeStruct((1,) + tuple(model.input_shape()), jnp.float32)
  abstract = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), images)['params']
  stage_of_block = {b: m + 1 for m, b in enumerate(model.pool_after_blocks())}
  return model, convert_params(state_dict, abstract, stage_of_block)
