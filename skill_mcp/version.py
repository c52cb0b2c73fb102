"""The one version: pyproject.toml reads it from here (`[tool.setuptools.dynamic]`), so the installed metadata
carries the same value and the server never pays for importlib.metadata at start."""

VERSION = "0.1.0"
