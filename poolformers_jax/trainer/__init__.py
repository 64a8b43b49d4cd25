"""What `train.py` and `eval.py` are built from: `setup` (the config completed into one `Setup`,
and the train state), `step` (the training and eval steps), checkpoints (`checkpoint` and the
modules it uses), sharding and the multi-process start (`sharding`), the optimizer (`optim`) and
the metric writer (`metrics`). The modules that read a run (`setup`, `checkpoint`) need only the
core install, so `load_run(...).predict` works without the `train` extra."""
