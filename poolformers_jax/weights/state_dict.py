"""The reader of other frameworks' weights: {name: numpy array} of a `.safetensors` file, a
`torch.save`d file (`.pth` / `.pt` / `.bin`) or a Hugging Face folder (its model.safetensors, else
pytorch_model.bin). torch is never needed: without it, torch's zip files are read by a restricted
unpickler that rebuilds tensors only (`read_torch_zip`); with it, torch reads them.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
from typing import Any

import numpy as np

from poolformers_jax import extras

TORCH_SUFFIXES = ('.pth', '.pt', '.bin')
HF_WEIGHTS = ('model.safetensors', 'pytorch_model.bin')


class ConversionError(ValueError):
  """A source checkpoint that does not fit the configured model; the message says why."""


def weights_file(path: str) -> str:
  """`path`, or the weights file of the Hugging Face folder `path`."""
  path = os.path.abspath(os.path.expanduser(path))
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: pass --source a .safetensors or .pth checkpoint.')
  if not os.path.isdir(path):
    return path
  for file in HF_WEIGHTS:
    if os.path.exists(os.path.join(path, file)):
      return os.path.join(path, file)
  raise FileNotFoundError(f'{path}: no model.safetensors or pytorch_model.bin; download '
                          'chtan/ponet-base-uncased (e.g. `huggingface-cli download '
                          'chtan/ponet-base-uncased --local-dir DIR`).')


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """{name: numpy array} of the checkpoint `path` (module docstring); a file that wraps its state
  dict in 'model' / 'state_dict' (the DeiT / HVT releases) gives the state dict."""
  path = weights_file(path)
  if path.endswith('.safetensors'):
    extras.require('convert', 'reading .safetensors')
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    return load_file(path)
  if not path.endswith(TORCH_SUFFIXES):
    raise ConversionError(f'{path}: unknown checkpoint format; use .safetensors, a torch file '
                          f'({", ".join(TORCH_SUFFIXES)}) or a Hugging Face folder.')
  if importlib.util.find_spec('torch') is not None:
    return _read_torch(path)
  try:
    return read_torch_zip(path)
  except pickle.UnpicklingError as error:   # more than tensors in the file: torch must read it
    raise ConversionError(f'{error} (or install torch)') from None


def _unwrap(checkpoint: Any) -> Any:
  for key in ('model', 'state_dict'):
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
      return checkpoint[key]
  return checkpoint


def _read_torch(path: str) -> dict[str, np.ndarray]:
  import argparse  # HVT / DeiT release files keep their argparse.Namespace next to the weights

  import torch  # pylint: disable=g-import-not-at-top
  with torch.serialization.safe_globals([argparse.Namespace]):
    checkpoint = torch.load(path, map_location='cpu', weights_only=True)
  return {k: v.float().numpy() for k, v in _unwrap(checkpoint).items() if hasattr(v, 'numpy')}


# torch storage class -> numpy dtype, for reading pytorch_model.bin without torch
_STORAGE_DTYPES = {'FloatStorage': np.float32, 'DoubleStorage': np.float64,
                   'HalfStorage': np.float16, 'LongStorage': np.int64, 'IntStorage': np.int32,
                   'ShortStorage': np.int16, 'ByteStorage': np.uint8, 'BoolStorage': np.bool_}


def read_torch_zip(path: str) -> dict[str, np.ndarray]:
  """A `torch.save`d state dict (the zip format of torch >= 1.6: pytorch_model.bin) as numpy,
  without torch: a restricted unpickler that rebuilds only tensors of known storages and the
  OrderedDict around them (anything else in the pickle is refused, so nothing runs)."""
  import collections  # pylint: disable=g-import-not-at-top
  import zipfile
  if not zipfile.is_zipfile(path):
    raise ValueError(f'{path}: not a zip-format torch file (saved by torch < 1.6?); convert it to '
                     'model.safetensors on a machine with torch.')
  with zipfile.ZipFile(path) as archive:
    pickled = next(n for n in archive.namelist() if n.endswith('data.pkl'))
    prefix = pickled[:-len('data.pkl')]

    def rebuild(storage, offset, size, stride, *_):
      item = storage.itemsize
      view = np.lib.stride_tricks.as_strided(storage[offset:], tuple(size),
                                             tuple(s * item for s in stride))
      return np.array(view)

    class Unpickler(pickle.Unpickler):

      def find_class(self, module, name):
        if (module, name) == ('torch._utils', '_rebuild_tensor_v2'):
          return rebuild
        if (module, name) == ('torch._utils', '_rebuild_parameter'):
          return lambda data, *_: data
        if (module, name) == ('collections', 'OrderedDict'):
          return collections.OrderedDict
        if module == 'torch' and name in _STORAGE_DTYPES:
          return name
        raise pickle.UnpicklingError(f'{path}: {module}.{name} is not a tensor of a known type; '
                                     'convert the file to model.safetensors with torch.')

      def persistent_load(self, pid):
        kind, storage, key = pid[:3]
        if kind != 'storage' or storage not in _STORAGE_DTYPES:
          raise pickle.UnpicklingError(f'{path}: unknown storage {pid[:2]}.')
        return np.frombuffer(archive.read(f'{prefix}data/{key}'), _STORAGE_DTYPES[storage])

    with archive.open(pickled) as f:
      state = _unwrap(Unpickler(f).load())
  return {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
