r"""Long-text classification with PoNet-Base at 4096 tokens (slides: "Long-Text Classification").

Run (IMDb from TFDS imdb_reviews; HND / Yelp-5 / Arxiv-11 from JSONL or CSV files):
  python train.py --config configs/long_text.py:imdb --workdir runs/imdb \
      --config.init_from=runs/ponet_pretrain          # or the chtan/ponet-base-uncased folder
  python train.py --config configs/long_text.py:hnd --workdir runs/hnd --config.init_from=... \
      --config.data.files.train=hnd/train.jsonl --config.data.files.validation=hnd/dev.jsonl \
      --config.data.files.test=hnd/test.jsonl
  python eval.py  --config configs/long_text.py:imdb --workdir runs/imdb --split test
The 512 pre-trained position embeddings are tiled to 4096 as the official code does
(position p gets pre-trained row p mod 512; init_from's 1D rule). SMP segments are sentences
(Arxiv-11: paragraphs, as the official preprocessing). eval.py prints f1 (binary: of class 1;
multi-class: micro F1 = accuracy, the official metric), macro_f1 and accuracy.

Argument: `task[,bert][,small|tiny]`, task one of imdb hnd yelp5 arxiv11.

The official setting (run_shell/3-LongTask.sh): 4096 tokens, batch 32 (2 GPUs x 16), lr 3e-5 or
5e-5, 10 epochs (Yelp-5: 2), the best checkpoint by F1. Slides (F1; IMDb F1/acc), PoNet-Base vs
BERT-Base: HND 96.2 vs 88.0, IMDb 93.0/93.0 vs 94.1/94.1, Yelp-5 69.13 vs 69.59, Arxiv 86.11
vs 85.36.
"""
from __future__ import annotations

import math

from ml_collections import config_dict

from poolformers_jax.config.bert import model_config, parse_words, transfer_config

# task -> (training examples, epochs, source, sentence split)
TASKS = {
    'imdb': (25000, 10, 'tfds', 'regex'),
    'hnd': (516, 10, 'files', 'regex'),
    'yelp5': (520000, 2, 'files', 'regex'),      # official: train[20%:] of 650000
    'arxiv11': (24034, 10, 'files', 'paragraph'),
}


def get_config(arg: str | None = None):
  words = parse_words(arg, {'task': tuple(TASKS)}, 'configs/long_text.py:imdb')
  train_size, epochs, source, split = TASKS[words['task']]
  # max_length (positions) from the data: 4096 (full), 1024 (small), 128 (tiny).
  model = model_config('ponet_classifier', words['family'])
  model.num_classes = config_dict.placeholder(int)
  batch_size = 32
  config = transfer_config('text_classification', model, words['size'],
                           lengths={'full': 4096, 'small': 1024, 'tiny': 128}, learning_rate=3e-5,
                           warmup_steps=0, batch_size=batch_size,
                           num_train_steps=math.ceil(epochs * train_size / batch_size),
                           best_metric='f1', eval_every_steps=500)
  config.data.source, config.data.sentence_split = source, split
  config.lock()
  return config
