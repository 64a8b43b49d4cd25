"""Checkpoints of other frameworks <-> our parameters (the command: `python -m
poolformers_jax.convert`); builds on models/ only.

  state_dict.py  the reader of weights files: .safetensors, torch files (no torch needed), Hugging
                 Face folders
  timm.py        timm ViT / DeiT and HVT release names -> our ViT / HVT params
  ponet.py       the authors' PoNet (Hugging Face BERT names) -> our params, and back (save_hf)
"""
