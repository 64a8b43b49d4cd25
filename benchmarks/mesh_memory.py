r"""What a mesh saves per chip, on TPU slices compiled here (libtpu's compile-only topologies).

  python benchmarks/mesh_memory.py fsdp --output runs/mesh_memory.jsonl
  python benchmarks/mesh_memory.py sequence --output runs/mesh_memory.jsonl \
      [--families ponet,linear]
  python benchmarks/mesh_memory.py causal_lm --output runs/mesh_memory.jsonl \
      [--families linear,softmax] [--size small|full] [--lengths 16384,65536] [--remat full] \
      [--dtype bfloat16]

`fsdp`: the parameter and optimizer bytes per chip of a v5e 2x4 slice for the big models
(PoNet-Base MLM, WMT14 Big, ViT-B/16 = DeiT-B, HVT-S-1), data parallel against fsdp 8, read from
the train state's shardings (nothing compiled). `sequence`: each family's LRA Text training step
(2 x 64, batch 1 per sequence) compiled at a length, split over 'sequence' or one sequence per
chip: bytes per chip (`memory_analysis`), the collectives' bytes, the compile seconds.
`causal_lm`: the same for the character LM (configs/enwik8.py's `small`: 2 layers of width 128;
`--size full`: 12 of 512) at 16K, 64K and 1M tokens on 8 shards: linear attention (chunked),
softmax (keys and values gathered) and the prefix sums chunks replaced (`linear_prefix_sums`,
benchmarks/causal_linear.py's baseline: its memory only, it is not the sharded function).
`--remat` / `--dtype` set config.model.remat / dtype. One JSON line per record, appended to
--output; records already there are skipped, so a stopped run resumes.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # causal_linear, run any way

import causal_linear  # noqa: E402

from poolformers_jax import config as config_lib, errors  # noqa: E402
from poolformers_jax.trainer import accelerators, sharding, step as step_lib  # noqa: E402
from poolformers_jax.trainer.setup import make_setup  # noqa: E402

GIB = 2 ** 30
FSDP_MODELS = ('configs/ponet_pretrain.py:mlm', 'configs/wmt14.py:big',
               'configs/imagenet.py:vit_b16', 'configs/imagenet.py:hvt_s_1')
# (family, slice, sequence shards, length): the targets (1M tokens on 8 chips, 4M on 16),
# then the same lengths without 'sequence': data parallel, one whole sequence per chip.
SEQUENCE_RUNS = [(family, topology, shards, length)
                 for family in ('ponet', 'linear', 'adamra')
                 for topology, shards, length in (('v5e:2x4', 8, 2 ** 20), ('v5e:4x4', 16, 2 ** 22),
                                                  ('v5e:2x4', 1, 2 ** 20), ('v5e:2x4', 1, 2 ** 22))]

# (mixer, enwik8 model, sequence length): the causal LM on the 8 chips of a v5e 2x4 slice.
CAUSAL_LM_RUNS = [(mixer, model, length)
                  for mixer, model in (('linear', 'linear_l12'), ('softmax', 'transformer_l12'),
                                       ('linear_prefix_sums', 'linear_l12'))
                  for length in (2 ** 14, 2 ** 16, 2 ** 20)]


def _state_bytes(setup) -> dict[str, float]:
  state = setup.abstract_state
  return {'params_gib': accelerators.per_device_bytes(state.params) / GIB,
          'optimizer_gib': accelerators.per_device_bytes(state.opt_state) / GIB}


def fsdp_records(topology: str = 'v5e:2x4'):
  for spec in FSDP_MODELS:
    for name, mesh in (('data', {}), ('fsdp', {'data': 1, 'fsdp': -1})):
      config = config_lib.load(spec, {'batch_size': 8 * 8, 'eval_batch_size': 8 * 8,
                                      **{f'mesh.{k}': v for k, v in mesh.items()}})
      setup = make_setup(config, need_files=False,
                         mesh=accelerators.topology_mesh(topology, mesh))
      yield {'kind': 'fsdp', 'config': spec, 'mesh': name, 'topology': topology,
             **_state_bytes(setup)}


def sequence_record(family: str, topology: str, shards: int, length: int,
                    spec: str | None = None, kind: str = 'sequence', remat: str = 'none',
                    dtype: str = 'float32'):
  """The record of `spec`'s training step (default: the family's LRA Text encoder)."""
  chips = math.prod(int(n) for n in topology.split(':')[1].split('x'))
  batch = 1 if shards > 1 else chips   # without 'sequence': one whole sequence per chip
  overrides = {'data.max_length': length, 'batch_size': batch, 'eval_batch_size': batch,
               'mesh.data': 1 if shards > 1 else -1, 'mesh.sequence': shards,
               'model.remat': remat, 'model.dtype': dtype}
  config = config_lib.load(spec or f'configs/lra_text.py:{family}', overrides)
  started = time.time()
  record = {'kind': kind, 'config': spec, 'family': family, 'topology': topology,
            'sequence': shards, 'length': length, **({'remat': remat} if remat != 'none' else {}),
            **({'dtype': dtype} if dtype != 'float32' else {})}
  try:
    setup = make_setup(config, need_files=False, mesh=accelerators.topology_mesh(
        topology, {'data': 1, 'sequence': shards} if shards > 1 else {}))
    with causal_linear.traced_as(causal_linear.BASELINE if family == 'linear_prefix_sums'
                                 else family):
      compiled = step_lib.compile_train_step(setup).run
  except Exception as error:   # libtpu refuses a step whose temporaries exceed the chip
    return {**record, 'error': str(error).strip().splitlines()[0][:300],
            'compile_seconds': time.time() - started}
  memory = step_lib.memory_of(compiled)
  moved = accelerators.collectives(compiled.as_text())
  return {**record, 'total_gib': memory['total'] / GIB, 'memory': memory, **_state_bytes(setup),
          'collective_bytes': sum(v['bytes'] for v in moved.values()), 'collectives': moved,
          'compile_seconds': time.time() - started, 'devices': sharding.batch_devices(setup.mesh)}


def main():
  parser = errors.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('what', choices=('fsdp', 'sequence', 'causal_lm'))
  parser.add_argument('--output', required=True)
  parser.add_argument('--families', default=None, help='sequence: ponet,linear,adamra (all); '
                      'causal_lm: linear,softmax,linear_prefix_sums (all)')
  parser.add_argument('--size', default='small', choices=('small', 'full'),
                      help="causal_lm: configs/enwik8.py's size")
  parser.add_argument('--lengths', default=None, help='causal_lm: tokens per sequence (all)')
  parser.add_argument('--remat', default='none', help="config.model.remat: 'none', 'full', "
                      "'dots'")
  parser.add_argument('--dtype', default='float32', help='config.model.dtype: float32, bfloat16')
  args = parser.parse_args()
  os.makedirs(os.path.dirname(args.output) or '.', exist_ok=True)
  done = set()
  if os.path.exists(args.output):
    with open(args.output) as f:
      keys = ('kind', 'config', 'mesh', 'family', 'topology', 'sequence', 'length', 'remat',
              'dtype')
      done = {json.dumps({k: r.get(k) for k in keys}, sort_keys=True) for r in map(json.loads, f)}

  def write(record):
    with open(args.output, 'a') as f:
      f.write(json.dumps(record, sort_keys=True) + '\n')
    print(json.dumps(record, sort_keys=True), flush=True)

  if args.what == 'fsdp':
    for record in fsdp_records():
      write(record)
    return
  size = '' if args.size == 'full' else ',small'
  lengths = [int(n) for n in args.lengths.split(',')] if args.lengths else None
  runs = SEQUENCE_RUNS if args.what == 'sequence' else [
      (mixer, 'v5e:2x4', 8, length, f'configs/enwik8.py:{model}{size}')
      for mixer, model, length in CAUSAL_LM_RUNS if lengths is None or length in lengths]
  families = (args.families or ','.join(dict.fromkeys(r[0] for r in runs))).split(',')
  for family, topology, shards, length, *spec in runs:
    key = json.dumps({'kind': args.what, 'config': spec[0] if spec else None, 'mesh': None,
                      'family': family, 'topology': topology, 'sequence': shards,
                      'length': length, 'remat': None if args.remat == 'none' else args.remat,
                      'dtype': None if args.dtype == 'float32' else args.dtype}, sort_keys=True)
    if family in families and key not in done:
      write(sequence_record(family, topology, shards, length, *spec, kind=args.what,
                            remat=args.remat, dtype=args.dtype))


if __name__ == '__main__':
  main()
