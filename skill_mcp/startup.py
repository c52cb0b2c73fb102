"""Fast start (issue 7): import the SDK's stdio server without paying at start for what a session never uses.

Four levers, confined to the one SDK import that `serve` makes; none touches the installed files:

- skipped-inits: the packages `mcp` and `mcp.server` are registered without running their `__init__`, which
  import the whole client and the high-level server. The real `__init__` runs on the first access to a name.
- deferred-models, deferred-adapters: pydantic builds no model validator or TypeAdapter while the SDK is
  imported (one model set per protocol revision); each is built on first use, so what goes on the wire is
  validated exactly as before.
- frozen-gc: no garbage collection while the SDK imports, then `gc.freeze()`: the ~90,000 objects alive by
  then live as long as the process, and would otherwise be walked by ~150 collections during the import and
  by every full collection after it.

A lever whose premise an upgrade removed is skipped and reported: start-up gets slower, never wrong.
tests/test_startup.py asserts each lever's effect, so an upgrade that silently disables one fails there.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

LEVERS = ("skipped-inits", "deferred-models", "deferred-adapters", "frozen-gc")
SKIPPED_INITS = ("mcp", "mcp.server")  # parents first
# Every SDK module skill_mcp imports, so that all of them are imported inside the window.
SDK_MODULES = (
    "mcp_types",
    "mcp_types.version",
    "mcp.shared.exceptions",
    "mcp.server.context",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
)


def import_sdk() -> list[str]:
    """Import SDK_MODULES the fast way; return the levers that could not be applied."""
    if "mcp" in sys.modules or "mcp_types" in sys.modules:
        return []  # already imported the ordinary way (an in-process client, the tests): nothing left to save
    applied: set[str] = {"frozen-gc"}
    collecting = gc.isenabled()
    gc.disable()
    try:
        with _deferred_builds(applied):
            registered = all(_register_without_init(name) for name in SKIPPED_INITS)
            for name in SDK_MODULES:
                importlib.import_module(name)
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    # An SDK module that reads a name from either package has run its real __init__ by now.
    if registered and all("__getattr__" in vars(sys.modules[name]) for name in SKIPPED_INITS):
        applied.add("skipped-inits")
    return [lever for lever in LEVERS if lever not in applied]


def _register_without_init(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    package = importlib.util.module_from_spec(spec)
    package.__getattr__ = _run_init_on_first_use(package)  # type: ignore[attr-defined]  # PEP 562
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
    return True


def _run_init_on_first_use(package: ModuleType) -> Any:
    def __getattr__(attribute: str) -> Any:
        del package.__getattr__  # type: ignore[attr-defined]
        package.__spec__.loader.exec_module(package)  # type: ignore[union-attr]
        try:
            return vars(package)[attribute]
        except KeyError:
            raise AttributeError(f"module {package.__name__!r} has no attribute {attribute!r}") from None

    return __getattr__


@contextmanager
def _deferred_builds(applied: set[str]) -> Iterator[None]:
    # Both are pydantic internals: a model class without its own `defer_build` falls back to `config_defaults`
    # when it is created, and a TypeAdapter asks its `_defer_build` property; hence the shape checks.
    from pydantic import TypeAdapter
    from pydantic._internal import _config

    defaults = getattr(_config, "config_defaults", None)
    adapter_property = vars(TypeAdapter).get("_defer_build")
    models = isinstance(defaults, dict) and defaults.get("defer_build") is False
    adapters = isinstance(adapter_property, property)
    if models:
        defaults["defer_build"] = True
        applied.add("deferred-models")
    if adapters:
        TypeAdapter._defer_build = property(lambda adapter: True)  # type: ignore[method-assign,assignment]
        applied.add("deferred-adapters")
    try:
        yield
    finally:
        if models:
            defaults["defer_build"] = False
        if adapters:
            TypeAdapter._defer_build = adapter_property  # type: ignore[method-assign]
