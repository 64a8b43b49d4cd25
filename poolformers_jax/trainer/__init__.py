"""What `train.py` and `eval.py` are built from: `setup` (the completed config as a `Setup`, and
the train state), `step` (the training and eval steps), `checkpoint`, `sharding`, `optim` and
`metrics`. `setup` and `checkpoint` need only the core install, so `load_run(...).predict` works
without the `train` extra."""
