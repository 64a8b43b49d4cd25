"""What `reproduce` (poolformers_jax/reproduce.py: the program, its flags) is built from:

  lra.py     the LRA table: one run per (task, family, seed), self-pretraining beside it
  glue.py    PoNet's GLUE grid, the best run on dev per task
  runs.py    what every run shares: its config with --set, its record (commit, device, memory)
  tables.py  results.md / glue_results.md
  plots.py   curves.csv / curves.png
  papers.py  the papers' numbers, read from papers.json
"""
