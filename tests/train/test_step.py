"""One training step (trainer/step.py): the memory `python -m poolformers_jax.summary` prints is the
`memory_analysis()` of the very step the trainer compiles and runs, for a tiny ListOps run, a
tiny HVT with mixup / cutmix on CIFAR (tfds mock data), and the paper's WMT14 Transformer-Base
(the setup it compiles). The threefry bits (dropout masks) of the unrolled CPU lowering the step
module installs equal jax's loop form and the Threefry-2x32 known answer."""
import os
import re

import cifar
import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds
from tiny_runs import REPO, tiny_config

from poolformers_jax import config as config_lib, runtime, summary
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import step, transforms
from poolformers_jax.trainer.setup import make_setup, setup_with_config

ONE_STEP = {'num_train_steps': 1, 'log_every_steps': 1, 'eval_every_steps': 1,
            'checkpoint_every_steps': 1, 'final_test': False, 'num_devices': 1,
            'progress_bar': False}


def _trained_step_memory(config, workdir) -> dict:
  result = train_and_evaluate(config, workdir)
  assert result.status == 'finished' and result.step == 1
  return result.train_step_memory


def test_summary_memory_is_the_memory_of_the_listops_step_the_trainer_ran(data_dir, tmp_path):
  config = tiny_config(data_dir, **ONE_STEP)
  trained = _trained_step_memory(config, str(tmp_path / 'run'))
  out = summary.summarize(config)
  assert out['train_step_memory'] == trained
  assert out['train_step_memory_bytes'] == trained['total'] > 0


def test_summary_memory_is_the_memory_of_the_mixup_hvt_step_the_trainer_ran(tmp_path):
  config = config_lib.override(cifar.get_config('hvt_s_1,cifar10'), **ONE_STEP, **{
      'batch_size': 8, 'optimizer.warmup_steps': 1, 'data.data_dir': str(tmp_path / 'data'),
      'data.image_size': 32, 'model.image_size': 32, 'model.patch_size': 8,
      'model.hidden_dim': 16, 'model.num_heads': 2, 'model.depth': 2})
  assert config.mixup.cutmix_alpha > 0            # the step mixes the batch
  with tfds.testing.mock_data(num_examples=12):
    trained = _trained_step_memory(config, str(tmp_path / 'run'))
  out = summary.summarize(config)                 # no data: sizes from the dataset's constants
  assert out['train_step_memory'] == trained and out['batch_size'] == 8


def test_wmt14_base_is_sized_and_summary_compiles_the_trainers_step(monkeypatch):
  """`python -m poolformers_jax.summary --config configs/wmt14.py:base` prints 60.52 M parameters
  and the memory of compile_train_step(setup) for the trainer's setup. Compiling
  Base's step takes minutes and 5-7 GB of host memory on XLA:CPU, too much for the suite, so the
  compile is replaced by a spy here; the two tests above compare compiled bytes with a real
  trainer run."""
  compiled = []
  memory = {'argument': 1, 'output': 2, 'temp': 3, 'alias': 1, 'total': 5}

  def spy(parts):
    compiled.append(parts)
    return step.CompiledStep(run=None, sums_shapes=None, memory=memory, put=None)

  monkeypatch.setattr(step, 'compile_train_step', spy)
  config = config_lib.load_file(os.path.join(REPO, 'configs', 'wmt14.py') + ':base')
  out = summary.summarize(config, batch_size=8)
  assert out['model'] == 'transformer_seq2seq' and round(out['params'] / 1e6, 2) == 60.52
  assert out['train_step_memory'] == memory and out['train_step_memory_bytes'] == 5
  # The trainer compiles its step with compile_train_step(make_setup(config)); the
  # data's files are missing here, so the sizes come from the dataset's constants.
  completed, setup = setup_with_config(config_lib.override(config, num_devices=1, batch_size=8),
                                       need_files=False)
  assert setup.info.packed and completed.model.vocab_size == 32000
  (summarized,) = compiled
  assert summarized.info == setup.info and summarized.batch_size == completed.batch_size
  shapes = lambda state: jax.tree.map(lambda a: (a.shape, a.dtype), state)
  for part in ('params', 'opt_state'):
    assert (shapes(getattr(summarized.abstract_state, part))
            == shapes(getattr(setup.abstract_state, part)))
  assert out['batch_size'] == 8 and out['input_shape'] == [256]


def _rolled_threefry_bits(key, shape):
  """jax's 32-bit random bits of a threefry `key` (partitionable form: element i hashes the
  counter (0, i) and xors the two words), hashed by jax's CPU loop form of threefry (a fori_loop
  over the 5 blocks of rounds), not by the registered lowering."""
  from jax._src.random import threefry2x32  # pylint: disable=g-import-not-at-top
  assert jax.config.jax_threefry_partitionable
  counts2 = jnp.arange(np.prod(shape), dtype=jnp.uint32).reshape(shape)
  counts1 = jnp.zeros_like(counts2)
  bits1, bits2 = threefry2x32._threefry2x32_lowering(  # pylint: disable=protected-access
      key[0], key[1], counts1, counts2, use_rolled_loops=True)
  return bits1 ^ bits2


@pytest.fixture
def unrolled_threefry():
  """The lowering the programs install (runtime.configure_program), then jax's loop form back."""
  runtime.install_cpu_threefry_lowering('unrolled')
  yield
  runtime.install_cpu_threefry_lowering('rolled')


def test_unrolled_threefry_gives_the_same_bits_and_dropout_masks(unrolled_threefry):
  # The step module's lowering: the hash compiles without a loop.
  draw = jax.jit(lambda k: jax.random.bits(k, (8, 64)))
  assert ' while(' not in draw.lower(jax.random.PRNGKey(0)).compile().as_text()
  # Random123's known answer for Threefry-2x32 with 20 rounds.
  out = jax.jit(jax.extend.random.threefry_2x32)(np.uint32([0x13198A2E, 0x03707344]),
                                          np.uint32([0x243F6A88, 0x85A308D3]))
  np.testing.assert_array_equal(np.asarray(out), np.uint32([0xC4923A9C, 0x483DF7A0]))
  key = jax.random.fold_in(jax.random.PRNGKey(3), 7)
  shape = (3, 40, 64)
  bits = jax.jit(lambda k: jax.random.bits(k, shape))(key)
  rolled = jax.jit(lambda k: _rolled_threefry_bits(k, shape))(key)
  np.testing.assert_array_equal(np.asarray(bits), np.asarray(rolled))
  # A dropout mask (flax's nn.Dropout: bernoulli of its key) is those bits against the keep
  # probability: uniform floats from the top 23 bits.
  mask = jax.jit(lambda k: jax.random.bernoulli(k, 0.9, shape))(key)
  uniform = jax.lax.bitcast_convert_type((rolled >> 9) | np.uint32(0x3F800000), jnp.float32) - 1
  np.testing.assert_array_equal(np.asarray(mask), np.asarray(uniform < 0.9))
  assert 0.85 < float(mask.mean()) < 0.95


def test_dense_on_rows_keeps_values_and_gradients_and_flattens_every_dense():
  from poolformers_jax.models.encoder import LraEncoder  # pylint: disable=g-import-not-at-top
  model = LraEncoder(vocab_size=20, max_length=32, dim=16, num_heads=2, mlp_dim=32,
                     mixer='ponet', mixer_kwargs={'segment_num': 4}, num_classes=3)
  tokens = jax.random.randint(jax.random.PRNGKey(0), (3, 32), 1, 20).at[1, 20:].set(0)
  params = model.init(jax.random.PRNGKey(1), tokens)['params']

  def loss(p, rows):
    def run():
      return model.apply({'params': p}, tokens, deterministic=False,
                         rngs={'dropout': jax.random.PRNGKey(2)})
    if not rows:
      return jnp.sum(run() ** 2)
    with nn.intercept_methods(transforms.dense_on_rows):
      return jnp.sum(run() ** 2)

  plain, on_rows = (jax.value_and_grad(loss)(params, rows) for rows in (False, True))
  np.testing.assert_allclose(on_rows[0], plain[0], rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               on_rows[1], plain[1])
  # Every product with a Dense kernel now takes [rows, K] inputs (before: [B, L, K]).
  def kernel_product_ranks(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == 'dot_general' and eqn.invars[1].aval.ndim == 2:
        yield eqn.invars[0].aval.ndim
      for value in eqn.params.values():
        inner = getattr(value, 'jaxpr', value)
        if hasattr(inner, 'eqns'):
          yield from kernel_product_ranks(inner)

  ranks = lambda rows: list(kernel_product_ranks(jax.make_jaxpr(lambda p: loss(p, rows))(
      params).jaxpr))
  assert max(ranks(False)) == 3 and max(ranks(True)) == 2


def test_dropout_mask_once_keeps_flax_masks_and_hashes_each_mask_once(unrolled_threefry):
  from poolformers_jax.models.encoder import LraEncoder  # pylint: disable=g-import-not-at-top
  model = LraEncoder(vocab_size=20, max_length=32, dim=16, num_heads=2, mlp_dim=36,
                     mixer='softmax', mixer_kwargs={'dropout_on': 'weights'}, dropout_rate=0.1,
                     attention_dropout_rate=0.3, num_classes=3)
  tokens = jax.random.randint(jax.random.PRNGKey(0), (3, 32), 1, 20).at[1, 20:].set(0)
  params = model.init(jax.random.PRNGKey(1), tokens)['params']
  calls = []

  def count(next_fun, args, kwargs, context):
    if isinstance(context.module, nn.Dropout) and context.module.rate > 0:
      calls.append(args[0].shape)   # the masks drawn (a pre-LN MLP sublayer's rate is 0)
    return next_fun(*args, **kwargs)

  def loss(p, interceptor):
    with nn.intercept_methods(interceptor):
      out = model.apply({'params': p}, tokens, deterministic=False,
                        rngs={'dropout': jax.random.PRNGKey(2)})
    return jnp.sum(out ** 2)

  plain = jax.jit(jax.value_and_grad(lambda p: loss(p, count)))
  once = jax.jit(jax.value_and_grad(lambda p: loss(p, transforms.dropout_mask_once)))
  # Flax's masks to the bit: the same loss and gradients, exactly.
  (plain_loss, plain_grads), (once_loss, once_grads) = plain(params), once(params)
  np.testing.assert_array_equal(once_loss, plain_loss)
  jax.tree.map(np.testing.assert_array_equal, once_grads, plain_grads)
  # Each mask (embeddings, attention weights [B, H, L, L], the MLP's hidden width 36, not a
  # multiple of 8, ...) is hashed once in the compiled step: the threefry rounds over arrays
  # (xors of more than 2 elements; the keys are 2) are those of one `jax.random.bernoulli` per
  # mask. Flax's are hashed again inside the backward's selects.
  def array_xors(fn, *args):
    hlo = fn.lower(*args).compile().as_text()
    shapes = re.findall(r'= u32\[([\d,]+)\]\S* xor\(', hlo)
    return sum(1 for shape in shapes if np.prod([int(n) for n in shape.split(',')]) > 2)
  per_mask = array_xors(jax.jit(lambda k: jax.random.bernoulli(k, 0.9, (3, 32, 36))),
                        jax.random.PRNGKey(0))
  masks = len(calls)
  assert masks == 9 and (3, 2, 32, 32) in calls and (3, 32, 36) in calls and per_mask > 0
  assert array_xors(once, params) == masks * per_mask
  assert array_xors(plain, params) > masks * per_mask


def test_dropout_mask_once_follows_flax_for_broadcast_dims_rng_and_deterministic():
  x = jnp.arange(1.0, 1 + 4 * 5 * 6).reshape(4, 5, 6)
  key = jax.random.PRNGKey(7)

  def both(fn):
    plain = fn()
    with nn.intercept_methods(transforms.dropout_mask_once):
      return plain, fn()

  for module, kwargs in ((nn.Dropout(0.5, broadcast_dims=(1,)), dict(deterministic=False)),
                         (nn.Dropout(0.25), dict(deterministic=False, rng=key)),
                         (nn.Dropout(0.25, deterministic=True), {}),
                         (nn.Dropout(0.0), dict(deterministic=False))):
    plain, once = both(lambda module=module, kwargs=kwargs: module.apply(
        {}, x, rngs={'dropout': key}, **kwargs))
    np.testing.assert_array_equal(once, plain)
  dropped = np.asarray(once) == 0
  assert not dropped.any()   # rate 0
  plain, once = both(lambda: nn.Dropout(0.5, broadcast_dims=(1,)).apply(
      {}, x, deterministic=False, rngs={'dropout': key}))
  zero = np.asarray(once) == 0
  assert 0 < zero.mean() < 1 and (zero == zero[:, :1]).all()   # one mask broadcast over axis 1


def test_the_cpu_forms_are_the_cpu_steps_only_gpu_and_tpu_keep_flax_dense_and_dropout():
  # Measured faster on XLA:CPU only; a GPU or TPU program keeps flax's fused masks and its
  # [B, L, K] Dense products (on v5e the row form cost DeiT-S 52 % more roofline time,
  # docs/accelerators.md). The same values either way (tests above).
  setup = make_setup(tiny_config('/unused', 'transformer', **{'model.dim': 32,
                                                              'model.mlp_dim': 64}),
                     need_files=False)
  texts = {platform: step.make_train_step(setup, platform).lower(
      *step.abstract_step_args(setup)).as_text() for platform in (None, 'cpu', 'tpu', 'cuda')}
  text = texts.__getitem__                                 # each program lowered once
  packing = lambda platform: text(platform).count('ui8')   # packed masks are uint8
  # A Dense kernel [32, 64] met by a rank-3 input: [B, L, 32] x [32, 64] -> [B, L, 64].
  rank3_dense = lambda platform: len(re.findall(
      r'stablehlo.dot_general %\S+, %\S+, contracting_dims = \[2\] x \[0\][^\n]*'
      r'\(tensor<\d+x\d+x32xf32>, tensor<32x64xf32>\)', text(platform)))
  assert setup.mesh.devices.flat[0].platform == 'cpu'
  assert packing(None) > 0 and packing('cpu') == packing(None)
  assert packing('tpu') == 0 and packing('cuda') == 0
  assert rank3_dense('cpu') == 0 and rank3_dense(None) == 0
  assert rank3_dense('tpu') > 0 and rank3_dense('cuda') > 0
