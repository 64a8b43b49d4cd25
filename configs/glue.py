r"""GLUE fine-tuning of PoNet-Base (or BERT-Base) from a pre-trained checkpoint.

Run (TFDS glue/<task> prepared as array_record in config.data.data_dir; a vocab.txt):
  python train.py --config configs/glue.py:cola --workdir runs/glue_cola \
      --config.init_from=runs/ponet_pretrain          # or the chtan/ponet-base-uncased folder
  python eval.py  --config configs/glue.py:cola --workdir runs/glue_cola --split validation
eval.py prints every metric of the task's output: accuracy, f1 (binary: of class 1),
accuracy_f1 (their mean, MRPC/QQP in the slides), matthews_corrcoef (CoLA), pearson / spearman
(STS-B). GLUE's test labels are hidden, so 'test' is the dev set; for MNLI --split validation is
matched and --split test mismatched.

Argument: `task[,bert][,small|tiny]`, task one of cola sst2 mrpc qqp stsb mnli qnli rte wnli.

The official setting (run_shell/2-GLUE.sh): 128 tokens, 4 epochs, the best of a grid of batch
sizes {8, 16, 32, 64, 128} x learning rates {3e-5, 5e-5, 1e-4, 3e-4}, linear decay, no warmup.
Defaults here: batch 32, lr 5e-5. `num_train_steps` follows `num_epochs` (4) and the batch size
when the config is resolved: --config.batch_size=8 trains 4 epochs in 4x the steps of batch 32
(setting --config.num_train_steps fixes the steps instead). The whole grid, the best on dev and
the paper's numbers beside it, in one command:
  python -m poolformers_jax.reproduce glue --task all --workdir runs/glue_grid \
      --set init_from=runs/ponet_pretrain
GLUE dev results of the slides (PoNet-Base / BERT-Base, pre-trained 340K steps on 5 GB): the
papers' numbers file, poolformers_jax/experiments/papers.json (QQP / MRPC: mean of accuracy and F1;
STS-B: Spearman); `reproduce glue` prints them beside ours.
"""
from __future__ import annotations

from ml_collections import config_dict

from poolformers_jax.config.bert import model_config, parse_words, transfer_config

# task -> (train examples, the metric the slides report, used to keep the best checkpoint)
TASKS = {
    'cola': (8551, 'matthews_corrcoef'), 'sst2': (67349, 'accuracy'),
    'mrpc': (3668, 'accuracy_f1'), 'qqp': (363846, 'accuracy_f1'), 'stsb': (5749, 'spearman'),
    'mnli': (392702, 'accuracy'), 'qnli': (104743, 'accuracy'), 'rte': (2490, 'accuracy'),
    'wnli': (635, 'accuracy'),
}
EPOCHS = 4


def get_config(arg: str | None = None):
  words = parse_words(arg, {'task': tuple(TASKS)}, 'configs/glue.py:mrpc')
  task, size = words['task'], words['size']
  # The position table as pre-trained (512; the tiny pre-training run has 64).
  model = model_config('ponet_classifier', words['family'],
                       max_length=64 if size == 'tiny' else 512)
  model.num_classes = config_dict.placeholder(int)     # from the data; 1 = regression (STS-B)
  train_size, metric = TASKS[task]
  config = transfer_config('glue', model, size, lengths={'tiny': 32}, learning_rate=5e-5,
                           warmup_steps=0, batch_size=32, num_train_steps=0,
                           best_metric=metric, eval_every_steps=1000)
  if size == 'full':   # (small and tiny keep their fixed steps)
    # ceil(epochs * train_size / batch_size), evaluated when the config is resolved, so that an
    # override of batch_size or num_epochs changes the steps (ml_collections FieldReferences).
    config.num_epochs = EPOCHS
    config.num_train_steps = -((-train_size * config.get_ref('num_epochs'))
                               // config.get_ref('batch_size'))
  config.data.task = task
  if task == 'mnli':
    config.data.tfds_splits = dict(train='train', validation='validation_matched',
                                   test='validation_mismatched')
  config.lock()
  return config
