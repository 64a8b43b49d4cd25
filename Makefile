# Two commands do all set-up on a fresh machine with only python3:
#   make train   -- the main job (offline default: train on generated ListOps)
#   make test    -- the test suite (8 fake CPU devices; also installs requirements-test.txt,
#                   libtpu included, to compile for TPU slices)
#   make test-fast  -- the layer, model and numerics-kit tests, no slow ones (a few minutes)
#   make test-floor -- the floor stack (.venv-floor, requirements-floor.txt: the oldest jax / flax
#                   / optax / orbax / chex pyproject.toml claims) on the layer, model, kit and a
#                   tiny train / eval subset
#   make lint       -- ruff (in make test)
#   make typecheck  -- mypy over the package, at pyproject.toml's [tool.mypy] (in make test)
#   make docs       -- the documentation site into site/ (strict, offline; open site/index.html);
#                   make docs-serve serves it at http://127.0.0.1:8000, rebuilt on every edit
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

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt requirements-docs.txt
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed requirements-docs.txt
	$(PY) -m pip install -q -r requirements-docs.txt
	touch $@

.venv-data/.installed: requirements-data.txt
	$(PYTHON) -m venv .venv-data
	.venv-data/bin/python -m pip install -q --upgrade pip
	.venv-data/bin/python -m pip install -q -r requirements-data.txt
	touch $@

data-env: .venv-data/.installed

train: install
	$(PY) train.py --config configs/lra_listops.py --workdir $(WORKDIR)

TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8
# Every layer, model and the numerics kit (poolformers_jax.testing), and the import / registry
# contracts: what a change to a mixer or a model must pass. Left to make test: memory growth and
# bfloat16 error bounds, beam-search semantics, official-weight conversion.
FAST_TESTS := tests/layers tests/models tests/test_registry.py tests/test_runtime.py \
  --ignore=tests/layers/test_memory.py --ignore=tests/layers/test_bfloat16.py \
  --ignore=tests/models/test_beam_eos.py --ignore=tests/models/test_convert.py \
  --ignore=tests/models/test_ponet_convert.py
# The floor stack's subset (CI runs it after the lock's suite): the kit on every registered
# mixer, the block / LRA encoder / LM / ViT-family model tests, the registry and one tiny
# train.py / eval.py run (a mixer of the user's own through config.imports). A wider floor run:
#   make test-floor FLOOR_OPT=3 FLOOR_TESTS="tests/layers tests/models tests/test_registry.py"
FLOOR_TESTS := tests/layers/test_mixer_kit.py tests/models/test_block.py \
  tests/models/test_encoder.py tests/models/test_lm.py tests/models/test_vit.py \
  tests/test_registry.py tests/train/test_imports.py

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .

typecheck: $(VENV)/.installed-test
	$(PY) -m mypy

test: $(VENV)/.installed-test lint typecheck
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist worksteal -q --durations=20 tests notebooks --nbmake

test-fast: $(VENV)/.installed-test
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist worksteal -q -m "not slow" $(FAST_TESTS)

.venv-floor/.installed: requirements-floor.txt pyproject.toml
	$(PYTHON) -m venv .venv-floor
	.venv-floor/bin/python -m pip install -q --upgrade pip
	.venv-floor/bin/python -m pip install -q -r requirements-floor.txt
	.venv-floor/bin/python -m pip install -q --no-deps -e .
	touch $@

# XLA:CPU at -O0 as in make test (tests/conftest.py): the subset above passes there, a third
# faster to compile. The wider run needs XLA's default, FLOOR_OPT=3: at -O0 jax 0.8's XLA:CPU
# moves AdaMRA's routed gradient by 1.2e-4 (tests/layers/test_adamra.py), the lock's does not.
FLOOR_OPT ?= 0
test-floor: .venv-floor/.installed
	XLA_FLAGS="--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=$(FLOOR_OPT)" \
	  .venv-floor/bin/python -m pytest -n 2 --dist worksteal -q -m "not slow" $(FLOOR_TESTS)

.PHONY: install train test test-fast test-floor lint typecheck data-env

# The site (mkdocs.yml; tests/test_site.py builds it the same way and reads it in Chromium).
DOCS_ENV := NO_MKDOCS_2_WARNING=1 JAX_PLATFORMS=cpu
docs: $(VENV)/.installed-docs
	$(DOCS_ENV) $(PY) -m mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed-docs
	$(DOCS_ENV) $(PY) -m mkdocs serve --strict --dev-addr 127.0.0.1:8000

.PHONY: docs docs-serve

# Re-execute the notebooks in place, so the committed files show their outputs and plots.
notebooks: install
	JAX_PLATFORMS=cpu $(PY) notebooks/execute.py

.PHONY: notebooks
