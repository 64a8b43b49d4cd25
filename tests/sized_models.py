"""Every registered model at a size that compiles in seconds, from its own config file: the
file's smallest size word, made smaller still by overrides (as --config.k=v) where the file has
no size word (vision). Shared by the summary and the accelerator tests."""
import importlib.util
import os

from poolformers_jax import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_OVERRIDES = dict(hidden_dim=16, depth=2, num_heads=2, image_size=32, patch_size=4,
                      num_stages=2)
MODEL = lambda **fields: {f'model.{k}': v for k, v in fields.items()}
SMALL_MSAC = dict(MODEL(stage_widths=(8, 8, 8), stage_blocks=(1, 1, 1), msac_stages=(2,),
                        num_heads=1), **{'data.image_size': 16})
SIZED_BY = {
    'lra_encoder': ('lra_listops.py:tiny', {}),
    'lra_dual_encoder': ('lra_retrieval.py:tiny', {}),
    'lra_masked_lm': ('lra_listops.py:tiny,spt', {}),
    'lra_causal_lm': ('lra_listops.py:tiny,spt_causal', {}),
    'char_lm': ('enwik8.py:tiny', {}),
    'transformer_seq2seq': ('wmt14.py:tiny', {}),
    'ponet_mlm': ('ponet_pretrain.py:sso,tiny', {}),
    'ponet_classifier': ('glue.py:cola,tiny', {}),
    'vit': ('cifar.py:deit_ti', MODEL(**{k: v for k, v in TINY_OVERRIDES.items()
                                         if k != 'num_stages'})),
    'hvt': ('cifar.py:hvt_s_4', MODEL(**TINY_OVERRIDES)),
    'swin': ('imagenet.py:swin_b', MODEL(image_size=32, embed_dim=8, depths=(1, 1),
                                         num_heads=(1, 2), window_size=4)),
    'cp_convnet': ('cifar.py:cp_convnet', MODEL(widths=(8, 8, 8), convs_per_stage=1)),
    'msac_resnet': ('cifar.py:msac_resnet', SMALL_MSAC),
    'cross_attentive_similarity': ('cifar.py:cross_attentive_similarity', SMALL_MSAC),
}


def load_config(spec: str, overrides: dict = None):
  """configs/<spec> with `overrides`, as train.py loads it with them on the command line."""
  config = config_lib.load_file(os.path.join(ROOT, 'configs', spec))
  # As --config.k=v: the data follows image_size.
  config.update_from_flattened_dict(overrides or {})
  return config


def load_sized(name: str):
  """The config of registered model `name` at its SIZED_BY size."""
  return load_config(*SIZED_BY[name])


def load_benchmark(name: str):
  """benchmarks/<name>.py as a module (the benchmarks are scripts, not a package)."""
  spec = importlib.util.spec_from_file_location(f'{name}_benchmark',
                                                os.path.join(ROOT, 'benchmarks', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
