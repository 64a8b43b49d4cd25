"""Test setup: 8 fake CPU devices (before jax is imported), parsed absl flags for grain workers."""
import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('MPLBACKEND', 'Agg')

from absl import flags  # noqa: E402

from poolformers_jax.train import host_memory  # noqa: E402

flags.FLAGS.mark_as_parsed()
host_memory.keep_freed_memory()   # as train.py does: XLA:CPU steps without page-fault storms
