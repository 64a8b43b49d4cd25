"""Fixtures of the trainer tests; the helpers live in tiny_runs.py."""
import pytest
import tiny_runs  # noqa: F401  (sets the persistent compilation cache for these tests)


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('listops_data'))
