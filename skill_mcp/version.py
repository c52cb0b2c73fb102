"""The one version: declared in pyproject.toml, read from the installed metadata."""

from __future__ import annotations

import functools
import os


@functools.cache
def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("skill-mcp")
    except metadata.PackageNotFoundError:
        return _checkout_version()


def _checkout_version() -> str:
    # Running from a source checkout that was never installed: read the declaration itself.
    import tomllib

    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    try:
        with open(pyproject, "rb") as handle:
            return str(tomllib.load(handle)["project"]["version"])
    except (OSError, KeyError, ValueError):
        return "0+unknown"
