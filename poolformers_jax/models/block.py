"""The pre-LN transformer block every model stacks, and `model_kwargs` (`config.model` -> module
arguments).

    X' = X + DropPath(Dropout(Mixer(LN(X))))        (HVT Eq. 2, Vaswani et al. 2017 pre-LN form)
    Y  = X' + DropPath(MLP(LN(X')))                 (HVT Eq. 3; the MLP ends with its dropout)

A decoder adds its cross-attention sublayer with another `PreNormResidual`. `post_norm=True` is
BERT's post-LN form, which the official PoNet code keeps (`ponet_mlm.py`):
X' = LN(X + Dropout(Mixer(X))),  Y = LN(X' + Dropout(W2 act(W1 X'))). Parameter names: `norm1`,
the mixer under its class name (`PoNet_0`, ...), `norm2`, `mlp` (`fc1`, `fc2`).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.common import Array, DropPath, Dtype, MlpBlock, check_choice
from poolformers_jax.layers.registry import MIXERS, build_mixer, check_use, module_fields, traits_of

# MLP activations by name (a config holds strings). 'gelu' is flax's tanh approximation,
# 'gelu_exact' the erf form of timm / the official ViT code.
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    'relu': nn.relu,
    'gelu': nn.gelu,
    'gelu_exact': functools.partial(nn.gelu, approximate=False),
}


# config.model.remat: what each block keeps for its backward pass. 'none' keeps every activation;
# 'full' keeps the block's input and recomputes the rest (jax.checkpoint_policies.nothing_saveable);
# 'dots' keeps the outputs of its matrix products and recomputes the elementwise work. The
# parameters are the same under every choice (the block's scope is unchanged).
Remat = Literal['none', 'full', 'dots']
REMAT_POLICIES: dict[str, Callable[..., bool]] = {
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _call_block(block: nn.Module, x: Array, mask: Array | None, deterministic: bool) -> Array:
  return block(x, mask, deterministic=deterministic)


def apply_block(block: nn.Module, x: Array, mask: Array | None, deterministic: bool,
                remat: str = 'none') -> Array:
  """`block(x, mask, deterministic=...)`, under `nn.remat` with the policy `remat` names.
  `deterministic` is static (dropout branches on it), so it goes by position."""
  if remat == 'none':
    return block(x, mask, deterministic=deterministic)
  check_choice(type(block).__name__, 'remat', remat, ['none', *REMAT_POLICIES])
  rematerialised = nn.remat(_call_block, policy=REMAT_POLICIES[remat], static_argnums=(3,))
  return rematerialised(block, x, mask, deterministic)


class PreNormResidual(nn.Module):
  """One sublayer: x + DropPath(Dropout(fn(norm(x), *args))). `norm` and `fn` are built and
  named by the caller, so their parameters live in the caller's scope; extra arguments go to `fn`
  after the normalised input (a cross-attention's memory and bias)."""
  norm: nn.Module
  fn: nn.Module
  dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  post_norm: bool = False     # True: norm(x + DropPath(Dropout(fn(x)))), BERT's post-LN order

  @nn.compact
  def __call__(self, x: Array, *args: Any, deterministic: bool = True, **kwargs: Any) -> Array:
    h = self.fn(x if self.post_norm else self.norm(x), *args, deterministic=deterministic, **kwargs)
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    out = x + DropPath(self.drop_path_rate)(h, deterministic=deterministic)
    return self.norm(out) if self.post_norm else out


class TransformerBlock(nn.Module):
  """Pre-LN block on [B, L, D]: token mixer by registry name, then the MLP.

  The mixer gets `num_heads`, `causal`, `rotary`, `dropout_rate=attention_dropout_rate` and
  `dtype` where it declares them (`build_mixer`), plus `mixer_kwargs`. `dropout_rate` drops the
  mixer's output and the MLP's hidden and output activations; `drop_path_rate` drops whole
  residual branches per example. `post_norm=True`: BERT's post-LN block (no hidden dropout).
  """
  mixer: str
  num_heads: int
  mlp_dim: int
  mixer_kwargs: Mapping[str, Any] | None = None
  causal: bool = False
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  activation: str = 'gelu'
  rotary: bool = False     # config.model.positions='rotary': the mixer turns its q and k
  layer_norm_epsilon: float = 1e-6
  kernel_init: Callable = nn.initializers.xavier_uniform()   # the MLP's Dense kernels
  post_norm: bool = False
  # Image tokens: [prefix_tokens; raster token_grid (h, w)], passed to mixers that take them
  # (ContextPool pools on the grid, CP-ViT); None for sequences.
  token_grid: tuple[int, int] | None = None
  prefix_tokens: int = 0
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               deterministic: bool = True, **mixer_inputs: Any) -> Array:
    """`mixer_inputs`: further keyword arrays for the mixer (PoNet's `segment_ids`, ...)."""
    check_choice('TransformerBlock', 'activation', self.activation, sorted(ACTIVATIONS))
    norm = lambda name: nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype, name=name)
    shared = dict(num_heads=self.num_heads, causal=self.causal, rotary=self.rotary,
                  dropout_rate=self.attention_dropout_rate, dtype=self.dtype)
    if self.token_grid is not None:
      shared.update(token_grid=tuple(self.token_grid), prefix_tokens=self.prefix_tokens)
    mixer = build_mixer(self.mixer, shared=shared,
                        **dict(self.mixer_kwargs or {}))
    post = self.post_norm
    x = PreNormResidual(norm('norm1'), mixer, self.dropout_rate, self.drop_path_rate, post)(
        x, mask, deterministic=deterministic, **mixer_inputs)
    mlp = MlpBlock(self.mlp_dim, activation=ACTIVATIONS[self.activation],
                   dropout_rate=0.0 if post else self.dropout_rate, dtype=self.dtype,
                   kernel_init=self.kernel_init, name='mlp')
    x = PreNormResidual(norm('norm2'), mlp, self.dropout_rate if post else 0.0,
                        self.drop_path_rate, post)(x, deterministic=deterministic)
    if hasattr(mixer, 'block_output'):
      # The mixer's hook on the block's output (ContextPool Fig. 2c: pooled for the next block).
      packed = {k: v for k, v in mixer_inputs.items() if k == 'segment_ids'}
      x = mixer.block_output(x, mask, **packed)
    return x


def _plain(value: Any) -> Any:
  """ConfigDict / FieldReference / list values -> plain dicts and tuples (hashable fields)."""
  if hasattr(value, 'to_dict'):
    value = value.to_dict()
  if isinstance(value, Mapping):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(_plain(v) for v in value)
  return value


def fields_of(module: nn.Module, cls: type) -> dict[str, Any]:
  """`module`'s values of the fields of `cls`, one of its base classes: the arguments of a `cls`
  child with the same settings (LraEncoder's 'encoder', CrossAttentiveSimilarity's 'backbone')."""
  return {name: getattr(module, name) for name in module_fields(cls)}


# config.model keys a config file leaves None for its dataset to decide (DatasetInfo: sizes and
# model_defaults; train.py fills them, config/completion.py).
DATA_FILLED = ('vocab_size', 'num_classes', 'max_length', 'cls_id', 'sep_id', 'eos_id',
               'sentence_classes')


def model_kwargs(cfg, cls: type, *, required: tuple[str, ...] = (),
                 **overrides: Any) -> dict[str, Any]:
  """A model's fields (`config.model`, or build_model's keywords) -> keyword arguments of module
  class `cls` (every model builder's).

  Every key but `name` must be a field of `cls`, every field without a default a key, and the
  `required` keys must be set (not None). A key set to None keeps the field's default; where the
  field has none, a data-decided size (DATA_FILLED) is refused, any other key stays None. Lists
  become tuples, ConfigDicts dicts, the dtype string a jnp.dtype. `overrides` are the model's to
  set, never the config's (HVT's classifier='mean').
  """
  fields = module_fields(cls)
  valid = sorted(set(fields) - set(overrides))
  keys = set(cfg.keys()) - {'name'}
  name = cfg.get('name', cls.__name__)
  unknown = sorted(keys - set(valid))
  if unknown:
    raise ValueError(f'model {name!r}: unknown config.model key(s) {unknown}; valid keys: '
                     f'{valid}.')
  unset = {k for k in keys if cfg[k] is None}
  no_default = {k for k, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
  missing = sorted((set(required) - (keys - unset)) | (no_default - keys - set(overrides)))
  if missing:
    raise ValueError(f'model {name!r}: config.model is missing {missing} (absent or None).')
  from_data = sorted(k for k in unset & no_default if k in DATA_FILLED)
  if from_data:   # a model built with them None would fail at its first trace, in JAX's words
    raise ValueError(f'model {name!r}: config.model.{{{", ".join(from_data)}}} unset: the dataset '
                     'decides them; fill them with config = poolformers_jax.config.complete('
                     'config) (from config.data, as train.py does) or set them')
  kwargs = {k: _plain(cfg[k]) for k in keys if k not in unset or k in no_default}
  if 'dtype' in kwargs:
    kwargs['dtype'] = as_dtype(kwargs['dtype'])
  kwargs.update(overrides)
  _check_mixer_args(cls, fields, kwargs)
  return kwargs


# What TransformerBlock passes every mixer that declares them (`shared` of build_mixer).
_BLOCK_SHARED = ('num_heads', 'causal', 'rotary', 'dropout_rate', 'dtype', 'token_grid',
                 'prefix_tokens')


def _check_mixer_args(cls: type, fields: dict[str, dataclasses.Field], kwargs: dict) -> None:
  """A model whose mixer lacks a required argument, the causal form or the rotary positions the
  model asks for fails when built, not at its first trace. A model with `sentence_inputs`
  (PoNetMLM) sets its mixer's `MixerTraits.sentence_options` itself."""
  if 'mixer' not in fields or 'mixer_kwargs' not in fields:
    return
  mixer = kwargs.get('mixer', fields['mixer'].default)
  if not isinstance(mixer, str) or mixer not in MIXERS:
    return   # an unknown name is refused where the model builds its mixer, naming the valid ones
  given = set(_BLOCK_SHARED)
  if getattr(cls, 'sentence_inputs', False):
    given |= set(traits_of(MIXERS[mixer]).sentence_options)
  causal = kwargs.get('causal', fields['causal'].default) if 'causal' in fields else False
  rotary = ('positions' in fields
            and kwargs.get('positions', fields['positions'].default) == 'rotary')
  check_use(mixer, kwargs.get('mixer_kwargs') or {}, given=given, causal=causal, rotary=rotary)


def as_dtype(value: Any) -> Any:
  """A config's dtype ('bfloat16', 'float32', None) as a module's dtype field."""
  return jnp.dtype(value) if isinstance(value, str) else value
