"""One-step train_and_evaluate for every LRA model family on tiny generated ListOps."""
import math

import jax
import numpy as np
import pytest
from tiny_runs import tiny_config

from poolformers_jax.config import lra as lra_base
from poolformers_jax.layers import MIXERS
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer.metrics import read_metrics


@pytest.mark.parametrize('family', sorted(lra_base.FAMILIES))
def test_one_step_for_every_family(family, data_dir, tmp_path):
  config = tiny_config(data_dir, family, num_train_steps=1, eval_every_steps=1,
                       checkpoint_every_steps=1)
  result = train_and_evaluate(config, str(tmp_path))
  assert result.status == 'finished' and result.step == 1
  # The block really runs the family's mixer (build_mixer names it after its class).
  mixer_class = MIXERS[lra_base.FAMILIES[family][0]].__name__
  assert f'{mixer_class}_0' in result.state.params['encoder']['block_0']
  (train,) = read_metrics(str(tmp_path), 'train')
  assert abs(train['loss'] - math.log(10)) < 0.5        # an untrained 10-way classifier
  assert result.validation['count'] == 20 and result.test['count'] == 20
  assert np.isfinite(result.validation['loss']) and np.isfinite(result.test['loss'])
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(jax.device_get(result.state.params)))
