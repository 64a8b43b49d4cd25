"""HVT Tables 5-8 (CIFAR-100, 100-way head): depth, heads, resolution and patch-size variants of
HVT-S-4 / HVT-Ti-4, built from `configs/cifar.py` with the same `--config.model.*` overrides a
user would pass, counted the way `python -m poolformers_jax.summary` counts (parameters of the
abstract init, matmul + convolution MACs of one example's traced forward; nothing runs).

The paper prints parameters in M and "FLOPs" (MACs) in G with two decimals. Parameters must
round to the printed value exactly. MACs must lie within one unit of the last printed digit
(0.01 G): every row rounds exactly except resolution 160, where we count 0.685 G and the paper
prints 0.69.
"""
import math

import jax
import pytest
from test_vit import image_spec, load_config

from poolformers_jax.models import build_model
from poolformers_jax.summary import abstract_variables, forward_macs

# (config arg, config.model overrides, stage lengths, paper params M, paper FLOPs G)
HVT_TABLES_5_TO_8 = [
    # Table 5: HVT-S-4 with 12 / 16 / 20 / 24 blocks (3, 4, 5, 6 blocks per stage).
    ('hvt_s_4', dict(depth=16), [196, 97, 48, 23, 11], 28.87, 1.72),
    ('hvt_s_4', dict(depth=20), [196, 97, 48, 23, 11], 35.97, 2.05),
    ('hvt_s_4', dict(depth=24), [196, 97, 48, 23, 11], 43.07, 2.37),
    # Table 6: HVT-Ti-4 with 3 / 6 / 12 / 16 heads of 64 channels.
    ('hvt_ti_4', dict(), [196, 97, 48, 23, 11], 5.58, 0.38),
    ('hvt_ti_4', dict(num_heads=6, hidden_dim=384), [196, 97, 48, 23, 11], 21.77, 1.39),
    ('hvt_ti_4', dict(num_heads=12, hidden_dim=768), [196, 97, 48, 23, 11], 86.01, 5.34),
    ('hvt_ti_4', dict(num_heads=16, hidden_dim=1024), [196, 97, 48, 23, 11], 152.43, 9.39),
    # Table 7: HVT-S-4 at 160 / 320 / 384 pixels (224 is Table 4's row).
    ('hvt_s_4', dict(image_size=160), [100, 49, 24, 11, 5], 21.70, 0.69),
    ('hvt_s_4', dict(image_size=320), [400, 199, 99, 49, 24], 21.92, 3.00),
    ('hvt_s_4', dict(image_size=384), [576, 287, 143, 71, 35], 22.06, 4.48),
    # Table 8: HVT-S-4 with patch 8 / 32 (16 is Table 4's row).
    ('hvt_s_4', dict(patch_size=8), [784, 391, 195, 97, 48], 21.99, 6.18),
    ('hvt_s_4', dict(patch_size=32), [49, 24, 11, 5, 2], 22.55, 0.37),
]


@pytest.mark.parametrize('arg,overrides,lengths,params_m,gflops', HVT_TABLES_5_TO_8,
                         ids=[f'{a}-{o}' for a, o, *_ in HVT_TABLES_5_TO_8])
def test_hvt_tables_5_to_8(arg, overrides, lengths, params_m, gflops):
  config = load_config('cifar', arg)
  with config.unlocked():
    for key, value in overrides.items():
      config.model[key] = value
  # The data pipeline follows the model's resolution (a reference, as for a CLI override).
  assert config.data.image_size == config.model.image_size
  model = build_model(config.model)
  assert model.stage_lengths() == lengths
  # summary.forward_macs, with the abstract variables it traces kept for the parameter count.
  variables = abstract_variables(model, image_spec(config))
  params = sum(math.prod(a.shape) for a in jax.tree_util.tree_leaves(variables['params']))
  assert round(params / 1e6, 2) == params_m
  assert abs(forward_macs(model, image_spec(config), variables) / 1e9 - gflops) <= 0.01
