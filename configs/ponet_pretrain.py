r"""PoNet pre-training: masked LM + a sentence-structure objective on a text corpus.

Run (a corpus of plain text files: documents separated by blank lines, a sentence per line, and
a BERT vocab.txt, e.g. the one of chtan/ponet-base-uncased):
  python train.py --config configs/ponet_pretrain.py:sso --workdir runs/ponet_pretrain \
      --config.data.files.train='corpus/train/*.txt' \
      --config.data.files.validation='corpus/valid/*.txt' \
      --config.data.files.test='corpus/valid/*.txt' --config.data.vocab_file=vocab.txt
  TFDS wikipedia instead of files: --config.data.source=tfds (prepared as array_record).
  python eval.py --config configs/ponet_pretrain.py:sso --workdir runs/ponet_pretrain \
    --split validation
Eval prints mlm_accuracy and sso_accuracy (the slides' pre-training curves and ablation table).

Argument: `objective[,bert][,small|tiny]`
  sso   MLM + StructBERT's sentence structural objective (next / previous / random), the paper
  nsp   MLM + BERT's next-sentence prediction (the ablation L_MN)
  mlm   MLM only (the ablation L_OM)
  bert  BERT-Base (softmax attention) under the same objective, the paper's baseline

The paper's setting (slides; official run_shell/1-pretrain_bookcorpus_wikitext.sh): PoNet-Base =
BERT-Base sizes, uncased, 512 tokens, 340K steps on 5 GB (Wikitext-103 + BooksCorpus), batch 192
(4 GPUs x 48), AdamW lr 1e-4 (eps 1e-8, no weight decay, clipping 1.0), 5000 warmup steps then
linear decay, fp16. Sampling as the official script: every chunk of every document is an
example, the corpus repeated 5 times per epoch with fresh pairs and masks
(config.data.dupe_factor = 5; data/text_pretraining.py).
Schedule horizon, a stated choice: the linear decay reaches 0 at step 340K, the length the
slides report. The official script sets `--num_train_epochs 500` instead, so its Trainer decays
towards 0 at 500 epochs (of the 5x-duplicated corpus), far past 340K steps: its learning rate at
340K was still well above 0. Set --config.num_train_steps to change the horizon and the length
together (the schedule always ends at num_train_steps).
Pre-training accuracies of the slides' ablation table (MLM / SST %): PoNet 59.44 / 80.75,
L_MN 62.53 / 79.28 (NSP), L_OM 63.11 / -.
"""
from __future__ import annotations

from ml_collections import config_dict

from poolformers_jax.config.bert import model_config, parse_words, transfer_config


def get_config(arg: str | None = None):
  words = parse_words(arg, {'objective': ('sso', 'nsp', 'mlm')},
                      'configs/ponet_pretrain.py:sso,small')
  model = model_config('ponet_mlm', words['family'])
  model.sentence_classes = config_dict.placeholder(int)   # 3 SSO, 2 NSP, 0 MLM only (the data)
  config = transfer_config('text_pretraining', model, words['size'],
                           lengths={'small': 128, 'tiny': 64}, learning_rate=1e-4,
                           warmup_steps=5000, num_train_steps=340_000, batch_size=192,
                           best_metric='loss', best_mode='min')
  config.data.objective = words['objective']
  config.lock()
  return config
