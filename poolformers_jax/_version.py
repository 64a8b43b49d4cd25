"""The version string: pyproject.toml reads it (dynamic version), the package exports it."""
__version__ = '0.1.0'
