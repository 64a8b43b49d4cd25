"""The optional parts of the install: what each extra of pyproject.toml lets you import.

A module that needs an extra calls `require(extra, __name__)` first, so a missing package fails
on import naming the pip command, not deep inside a training run."""
from __future__ import annotations

import importlib.util

# extra -> the top-level modules without which its users cannot start (pyproject.toml's
# optional-dependencies; tqdm, tensorboardX and matplotlib load only when a run uses them, so a
# GPU image's own stack without them still trains).
MODULES: dict[str, tuple[str, ...]] = {
    'train': ('optax', 'orbax', 'grain', 'absl', 'tensorflow_datasets', 'PIL'),
    'text': ('sentencepiece', 'tokenizers', 'sacrebleu', 'sacremoses'),
    'convert': ('safetensors',),
}


class MissingExtraError(ModuleNotFoundError):
  """An optional package is not installed; the message names the pip command."""


def require(extra: str, user: str) -> None:
  """Raises MissingExtraError when a package of `extra` is missing (`user`: the module asking)."""
  missing = [m for m in MODULES[extra] if importlib.util.find_spec(m) is None]
  if missing:
    raise MissingExtraError(f"{user} needs {', '.join(missing)}: "
                            f"pip install 'poolformers_jax[{extra}]'", name=missing[0])
