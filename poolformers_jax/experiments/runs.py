"""What every reproduced run shares: its config with the `--set` overrides, and its record (git
commit, device, peak memory, steps/s, wall time over every invocation)."""
from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
from collections.abc import Sequence
from typing import Any

import numpy as np

from poolformers_jax.config import files as config_files

CONFIGS_DIR = config_files.CONFIGS_DIR
log = logging.getLogger('poolformers_jax.reproduce')
# --spt_objective -> the pre-training's config word (config/lra.py STAGES) and what it predicts
SPT_OBJECTIVES = {'masked': ('spt', 'masked tokens'), 'causal': ('spt_causal', 'next tokens')}


def config_with(spec: str, updates: dict[str, Any], overrides: Sequence[str]):
  """The config file `spec` with `updates`, then the `--set key=value` overrides."""
  from poolformers_jax import config as config_lib
  from poolformers_jax.cli import literal  # as --config.key=value reads a value
  updates = dict(updates)
  for item in overrides:
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'--set {item!r}: expected key=value, e.g. --set num_train_steps=100.')
    updates[key] = literal(value)
  try:
    config = config_lib.override(config_lib.load_file(spec), **updates)
    if 'mixer' in config.model and config.model.get('mixer_kwargs'):   # open: any key passes
      from poolformers_jax import registry
      registry.import_modules(config.get('imports', ''))
      from poolformers_jax.layers.registry import check_options
      check_options(config.model.mixer, config.model.mixer_kwargs)
    return config
  except (config_lib.ConfigKeyError, ValueError) as error:   # name the config: --set is for all
    raise type(error)(
        f'--set for configs/{os.path.basename(spec)}: {str(error).rstrip(".")}; pass only '
        '--families whose config has that key (or mixer option)') from None


def git_commit() -> str:
  try:
    out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)), check=True, timeout=10)
    dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                           capture_output=True, text=True, timeout=10,
                           cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return out.stdout.strip() + ('-dirty' if dirty else '')
  except (OSError, subprocess.SubprocessError):
    return 'unknown'


def device_name() -> str:
  import jax
  devices = jax.devices()
  return f'{len(devices)}x {devices[0].device_kind} ({devices[0].platform})'


def peak_memory_bytes() -> tuple[int, str]:
  """Peak accelerator memory of this process (device 0), else the process's peak host RSS."""
  import jax
  stats = jax.local_devices()[0].memory_stats() or {}
  if 'peak_bytes_in_use' in stats:
    return int(stats['peak_bytes_in_use']), 'device'
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 'host RSS'


def median_steps_per_second(workdir: str) -> float | None:
  """Median train steps/s over the logged windows (robust to the compile in the first one)."""
  rates = []
  path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        record = json.loads(line)
        if record.get('split') == 'train' and 'steps_per_second' in record:
          rates.append(record['steps_per_second'])
  return float(np.median(rates)) if rates else None


def best_validation(workdir: str) -> float | None:
  """The best validation accuracy (%) the run evaluated (what its best checkpoint kept)."""
  from poolformers_jax.trainer.metrics import read_metrics
  accuracy = [r['accuracy'] for r in read_metrics(workdir, 'validation') if 'accuracy' in r]
  return 100.0 * max(accuracy) if accuracy else None


class RunStopped(RuntimeError):
  """A run stopped before its end (SIGTERM / preemption): its checkpoint is kept."""


WALL_FILE = 'wall_time.json'


def add_wall_time(workdir: str, seconds: float) -> dict[str, float]:
  """Adds one invocation's seconds to WORKDIR/wall_time.json: a resumed run counts them all."""
  path = os.path.join(workdir, WALL_FILE)
  total = {'seconds': 0.0, 'invocations': 0}
  if os.path.exists(path):
    with open(path) as f:
      total = json.load(f)
  total = {'seconds': total['seconds'] + seconds, 'invocations': total['invocations'] + 1}
  os.makedirs(workdir, exist_ok=True)
  with open(path, 'w') as f:
    json.dump(total, f)
  return total
