"""Checkpoints of other frameworks <-> our parameters, in one place; the command is
`python -m poolformers_jax.convert`.

  state_dict.py  THE reader of weights files: .safetensors, torch files (no torch needed), Hugging
                 Face folders
  timm.py        timm ViT / DeiT and HVT release names -> our ViT / HVT params
  ponet.py       the authors' PoNet (Hugging Face BERT names) -> our params, and back (save_hf)

Layering: builds on models/ only (to know a model's parameter tree); `config.init_from` reads a
Hugging Face folder through ponet.py.
"""
