# Two commands do all set-up on a fresh machine with only python3:
#   make train   -- the main job (offline default: train on generated ListOps)
#   make test    -- the test suite (8 fake CPU devices; also installs requirements-test.txt,
#                   libtpu included, to compile for TPU slices)
# make data-env: the data-preparation environment .venv-data (TensorFlow; docs/data.md).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
WORKDIR ?= runs/listops_default

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

.venv-data/.installed: requirements-data.txt
	$(PYTHON) -m venv .venv-data
	.venv-data/bin/python -m pip install -q --upgrade pip
	.venv-data/bin/python -m pip install -q -r requirements-data.txt
	touch $@

data-env: .venv-data/.installed

train: install
	$(PY) train.py --config configs/lra_listops.py --workdir $(WORKDIR)

test: $(VENV)/.installed-test
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(PY) -m pytest -n 2 --dist worksteal -q tests notebooks --nbmake

.PHONY: install train test data-env

# Re-execute the notebooks in place, so the committed files show their outputs and plots.
notebooks: install
	JAX_PLATFORMS=cpu $(PY) notebooks/execute.py

.PHONY: notebooks
