"""The summary tool: params / MACs / training-step memory / stage lengths of a config, the MAC
counter on known shapes (scan included), and the command line printing one JSON object."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from sized_models import SIZED_BY, TINY_OVERRIDES, load_sized

from poolformers_jax import config as config_lib, summary
from poolformers_jax.models import build_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_hvt_config():
  spec = importlib.util.spec_from_file_location('cfg_cifar',
                                                os.path.join(ROOT, 'configs', 'cifar.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config('hvt_s_4')
  config.model.update(TINY_OVERRIDES)
  return config


def test_summary_of_a_tiny_hvt():
  config = tiny_hvt_config()
  out = summary.summarize(config, batch_size=2)
  model = build_model(config_lib.complete(config, need_files=False).model)   # 100 classes: the data
  abstract = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3))))
  params = sum(math.prod(p.shape) for p in jax.tree_util.tree_leaves(abstract['params']))
  assert out['params'] == params
  assert out['stage_lengths'] == [64, 31, 15] and out['input_shape'] == [32, 32, 3]
  # Patch projection + blocks at lengths 64 (block 0) and 31 (block 1) + 100-way head.
  d = 16
  expected = 64 * 4 * 4 * 3 * d + sum(12 * n * d * d + 2 * n * n * d for n in (64, 31)) + d * 100
  assert out['macs'] == expected
  assert out['xla_flops'] > 2 * expected   # XLA also counts elementwise work
  memory = out['train_step_memory']
  assert memory['argument'] >= 3 * 4 * params      # float32 params + two AdamW moments
  assert memory['temp'] > 0
  assert out['train_step_memory_bytes'] == (memory['argument'] + memory['output'] + memory['temp']
                                            - memory['alias'])


def test_count_macs_scan_and_calls():
  def f(h, w):
    def body(carry, _):
      return jnp.tanh(carry @ w), None
    h, _ = jax.lax.scan(body, h, None, length=5)
    return jax.jit(lambda a: a @ w)(h)             # a nested jit (pjit) call
  macs = summary.count_macs(jax.make_jaxpr(f)(jnp.ones((3, 4)), jnp.ones((4, 4))))
  assert macs == 6 * 3 * 4 * 4


def test_command_line_prints_one_json_object():
  overrides = [f'--config.model.{k}={v}' for k, v in TINY_OVERRIDES.items()]
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=1', JAX_PLATFORMS='cpu')
  result = subprocess.run(
      [sys.executable, '-m', 'poolformers_jax.summary', '--config', 'configs/cifar.py:hvt_s_4',
       '--batch_size', '2', *overrides], cwd=ROOT, env=env, capture_output=True, text=True,
      check=True)
  lines = [l for l in result.stdout.splitlines() if l.strip()]
  assert len(lines) == 1
  out = json.loads(lines[0])
  assert out['stage_lengths'] == [64, 31, 15] and out['batch_size'] == 2
  assert {'params', 'macs', 'train_step_memory_bytes'} <= set(out)


def test_every_registered_model_has_a_config_file_to_size_it():
  from poolformers_jax.models import MODELS
  assert set(SIZED_BY) == set(MODELS)


# One model per way of counting MACs: attention and MLPs, cross-attention and the decoder, token
# pooling, shifted windows, convolutions with 2-D ContextPool, self-attentive convolutions.
COUNTED_ALIKE = ('lra_encoder', 'transformer_seq2seq', 'hvt', 'swin', 'cp_convnet', 'msac_resnet')


@pytest.mark.parametrize('name', COUNTED_ALIKE)
def test_summary_sizes_the_model_from_its_config_file(name):
  out = summary.summarize(load_sized(name), batch_size=8)
  assert out['model'] == name and out['params'] > 0 and out['macs'] > 0, out
  # float32 parameters and two AdamW moments are arguments of the step, at least
  assert out['train_step_memory']['argument'] >= 3 * 4 * out['params'], out
