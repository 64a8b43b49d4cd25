"""Errors that suggest a flag suggest one that runs (issue 54): every `--config.<key>` an error
message of the package or a config file names is fed back to train.py's own parser (tests/
commands.py `parse`: the flags read, the --config file loaded with the override), on a shipped
config that has the key; none may be rejected. The f-string sites are expanded from the code
that fills them in; a new site fails here until it is listed in SITES."""
import glob
import json
import os
import re
import subprocess
import sys

from poolformers_jax import config as config_lib
from poolformers_jax.layers import registry as mixers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATE = os.path.join(REPO, 'poolformers_jax', 'config', 'validate.py')
FLAG = re.compile(r'--config\.((?:[\w.]|\{[\w\[\]]+\})*)')
DOC_PLACEHOLDERS = {'k', 'a.b', 'key'}     # `--config.k=v` in usage lines


def _positive_int_keys() -> list[str]:
  """validate.py's `_positive_int(node, 'key'[, 'prefix.'])` calls: the keys they name."""
  with open(VALIDATE, encoding='utf-8') as f:
    calls = re.findall(r"_positive_int\(\w[\w.]*, '(\w+)'(?:, '([\w.]+)')?\)", f.read())
  return [prefix + key for key, prefix in calls]


SITES = {   # an f-string's flag -> the keys it can name
    '{prefix}{key}': _positive_int_keys,
    'model.{key}': lambda: ['model.dim', 'model.dropout_rate'],        # config.model's own keys
    'optimizer.{key}': lambda: ['optimizer.' + k for k in ('warmup_steps', 'grad_clip_norm',
                                                            'weight_decay')],
    '{key}': lambda: ['log_every_steps', 'eval_every_steps', 'checkpoint_every_steps'],
    'model.mixer_kwargs.': lambda: sorted({'model.mixer_kwargs.' + k for cls in
                                           mixers.MIXERS.values()
                                           for k in mixers.required_fields(cls)}),
    '{keys[0]}': list, '{key}=...': list,     # cli.py: the user's own key, echoed
}


def suggested_keys() -> set[str]:
  files = glob.glob(os.path.join(REPO, 'poolformers_jax', '**', '*.py'), recursive=True)
  files += glob.glob(os.path.join(REPO, 'configs', '*.py'))
  keys, unlisted = set(), []
  for path in files:
    with open(path, encoding='utf-8') as f:
      text = f.read()
    where = os.path.relpath(path, REPO)
    for found in FLAG.findall(text):
      if found not in SITES:
        found = found.rstrip('.')                    # a sentence's full stop
      if found in SITES:
        keys.update(SITES[found]())
      elif '{' in found:
        unlisted.append(f'{where}: --config.{found}')
      elif found and found not in DOC_PLACEHOLDERS:
        keys.add(found)
  assert not unlisted, f'list these f-string flags in SITES: {unlisted}'
  return keys


def _value(config, key: str) -> str:
  node = config
  for part in key.split('.'):
    if part not in node:
      return '4'                                     # a new mixer option (segment_num)
    node = node[part]
  return '1' if node is None else str(node)


def test_every_suggested_config_flag_is_accepted_by_the_parser():
  keys = suggested_keys()
  assert {'model.mixer_kwargs.segment_num', 'optimizer.grad_accum_steps',
          'length_buckets.multiple', 'num_train_steps'} <= keys
  # lra_listops:transformer first: PoNet's segment_num on a config whose mixer has none.
  specs = ['lra_listops:transformer,tiny'] + config_lib.files.shipped_tasks()
  configs = {spec: config_lib.load(spec) for spec in specs}
  commands, unknown = [], []
  for key in sorted(keys):
    for spec, config in configs.items():
      try:
        config_lib.check_keys(config, [key])
      except config_lib.ConfigKeyError:
        continue
      commands.append(['train.py', '--config', spec, '--workdir', 'unused',
                       f'--config.{key}={_value(config, key)}'])
      break
    else:
      unknown.append(key)
  assert not unknown, f'suggested flags no shipped config has: {unknown}'
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'tests', 'commands.py'), 'parse'],
                        input=json.dumps(commands), capture_output=True, text=True, cwd=REPO,
                        timeout=600, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 0, proc.stderr[-3000:]
  rejected = [f'{" ".join(r["argv"][1:])}: {r["stderr"].strip()[-300:]}'
              for r in json.loads(proc.stdout) if r['code'] != 0]
  assert not rejected, 'suggested flags the parser rejects:\n' + '\n'.join(rejected)
