"""AdaMRA's router load (poolformers_jax.router_load) against hand counts: a router set by hand
whose routes are known, and a tiny trained 2-layer run counted example by example."""
import json
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util
from tiny_runs import REPO, tiny_config

import poolformers_jax
from poolformers_jax.data import listops
from poolformers_jax.layers.adamra import AdaMRA
from poolformers_jax.router_load import count_routes, router_load
from poolformers_jax.train import train_and_evaluate


def test_count_routes_on_a_router_set_by_hand():
  """Query map = identity, router = features 0 / 1: each token goes to the head of its larger
  feature, known by construction; padding is not counted."""
  heads = np.array([[0, 1, 1, 0, 1, 1, 1, 0], [1, 1, 0, 0, 0, 1, 0, 1]])
  x = np.asarray(jax.nn.one_hot(heads, 4)) * 2.0 + 0.1 * np.random.default_rng(0).random((2, 8, 4))
  mask = np.ones((2, 8), bool)
  mask[1, 5:] = False
  layer = AdaMRA(num_heads=1, compression_rates=(1 / 2, 1 / 4))
  params = layer.init(jax.random.key(0), jnp.asarray(x, jnp.float32), mask)['params']
  params['query'] = {'kernel': jnp.eye(4), 'bias': jnp.zeros(4)}
  params['router']['kernel'] = jnp.eye(4)[:, :2]
  _, state = layer.apply({'params': params}, jnp.asarray(x, jnp.float32), mask,
                         mutable=['intermediates'])
  counts = count_routes(state['intermediates'], mask, num_heads=2)
  # Row 0: 3 tokens to head 0, 5 to head 1; row 1's first 5: 3 to head 0, 2 to head 1.
  assert list(counts) == [''] and counts[''].tolist() == [6, 7]
  with pytest.raises(ValueError, match='routed_head has shape'):
    count_routes(state['intermediates'], mask[:, :4], num_heads=2)


@pytest.fixture(scope='module')
def adamra_run(data_dir, tmp_path_factory):
  """A 3-step tiny 2-layer AdaMRA ListOps run (seconds)."""
  workdir = str(tmp_path_factory.mktemp('router_load'))
  config = tiny_config(data_dir, 'adamra', **{'model.num_layers': 2, 'num_train_steps': 3})
  train_and_evaluate(config, workdir)
  return workdir


def test_router_load_of_a_run_is_the_count_example_by_example(adamra_run):
  run = poolformers_jax.load_run(adamra_run)
  out = router_load(run, 'test', batch_size=8)   # 20 test trees: 8 + 8 + 4 and 4 padding rows
  # By hand: each test tree alone (no batching, no padding rows), unjitted, every non-pad token.
  hand = {}
  source = listops.source(run.setup.data, 'test')
  apply = jax.jit(lambda ids: run.model.apply(run.variables, ids, mutable=['intermediates'])[1])
  for i in range(len(source)):
    ids = listops.preprocess(source[i], run.setup.data)['inputs'][None]
    state = jax.device_get(apply(ids))
    for key, (routes,) in traverse_util.flatten_dict(state['intermediates'], sep='/').items():
      if key.endswith('/routed_head'):
        counts = hand.setdefault(key[:-len('/routed_head')], [0, 0, 0])
        for position, token in enumerate(ids[0]):
          if token != 0:
            counts[int(routes[0, position])] += 1
  assert len(hand) == 2 and sorted(out['layers']) == sorted(hand)   # one per layer
  for layer, counts in hand.items():
    got = out['layers'][layer]
    assert got['tokens'] == sum(counts)
    np.testing.assert_allclose(got['load'], np.asarray(counts) / sum(counts), atol=1e-6)
    assert got['rates'] == [1 / 2, 1 / 8, 1 / 32]
  assert (out['split'], out['step']) == ('test', 3)


@pytest.mark.slow
def test_router_load_command_prints_the_functions_object(adamra_run):
  out = router_load(poolformers_jax.load_run(adamra_run), 'test', batch_size=8)
  proc = subprocess.run([sys.executable, '-m', 'poolformers_jax.router_load', '--workdir',
                         adamra_run, '--batch_size', '8'], cwd=REPO, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(proc.stdout.strip().splitlines()[-1]) == out


def test_router_load_refuses_a_run_without_adamra(data_dir):
  run = types.SimpleNamespace(workdir='runs/ponet', config=tiny_config(data_dir, 'ponet'))
  with pytest.raises(ValueError, match="model.mixer is 'ponet'; the router load is AdaMRA's"):
    router_load(run)
