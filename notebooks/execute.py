"""Re-executes the notebooks in place, so the committed files show their outputs and plots
(`make notebooks`). The test suite runs them again, asserts included (pytest --nbmake)."""
import glob
import os
import sys

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))


def main(paths):
  for path in paths or sorted(glob.glob(os.path.join(HERE, '*.ipynb'))):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name='python3',
                   resources={'metadata': {'path': HERE}}).execute()
    for cell in notebook.cells:   # no run-specific metadata: reruns diff only where outputs do
      cell.get('metadata', {}).pop('execution', None)
    nbformat.write(notebook, path)
    print(f'executed {os.path.relpath(path)}')


if __name__ == '__main__':
  main(sys.argv[1:])
