"""Fast start: import the SDK's stdio server without paying at start for what a session never uses.

Seven levers, confined to the one SDK import that `serve` makes (frozen-gc and deferred-methods to all of its
imports); none touches the installed files:

- skipped-inits: the packages `mcp` and `mcp.server` are registered without running their `__init__`, which
  import the whole client and the high-level server. The real `__init__` runs on the first access to a name.
- deferred-models, deferred-adapters: pydantic builds no model validator or TypeAdapter while the SDK is
  imported (one model set per protocol revision), not even for an explicit `model_rebuild()`; each is built
  on first use, so what goes on the wire is validated exactly as before.
- deferred-fields: nor does it collect a model's fields (evaluating every annotation: most of the time a model
  class takes to create); they are collected, by pydantic's own function, when first read, which building the
  model's validator, creating a subclass or reading `model_fields` all do.
- frozen-gc: no garbage collection while the SDK imports (nor, in `serve`, while the rest of what it uses
  imports), then `gc.freeze()`: the ~70,000 objects alive by then live as long as the process, and would
  otherwise be walked by ~170 collections during start-up and by every full collection after it.
- deferred-methods: Python 3.11 and 3.12 compile each method a dataclass generates with an `exec` of its own
  (~40 µs each; `serve`'s imports create 119 dataclasses, ~20 ms in all); all but `__init__` are compiled,
  by the same function from the same source, when first called.
- deferred-modules: the low-level server imports its HTTP transport (streamable HTTP, SSE, OAuth, Starlette)
  and a Windows-only stdio helper, which a stdio server on Linux never calls, and both protocol revisions'
  model sets, of which a session uses one; anyio's event loop imports its socket layer (and TLS) for UDP;
  OpenTelemetry's propagators serve only requests that carry a `_meta` (a legacy session's seldom do).
  Each module in DEFERRED_MODULES and DEFERRED_REVISIONS is served, while the SDK imports, by a stand-in
  whose listed (for a revision: public) names are forwarders that import the real module when first used;
  any other name imports the real module at once. The stand-ins leave `sys.modules` when the import is done.

A lever whose premise an upgrade removed is skipped and reported: start-up gets slower, never wrong.
tests/test_startup.py asserts each lever's effect, so an upgrade that silently disables one fails there.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FunctionType, ModuleType
from typing import Any, Union

LEVERS = (
    "skipped-inits",
    "deferred-models",
    "deferred-adapters",
    "deferred-fields",
    "frozen-gc",
    "deferred-methods",
    "deferred-modules",
)
SKIPPED_INITS = ("mcp", "mcp.server")  # parents first
# The SDK modules whose imports bring in every one skill_mcp uses, so that all are imported inside the window
# (tests/test_startup.py checks none is left out), and the event loop backend that `anyio.run` imports.
SDK_MODULES = (
    "mcp_types",
    "mcp_types.version",
    "mcp.shared.exceptions",
    "mcp.server.context",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
    "anyio._backends._asyncio",
)
# Module -> the names the SDK imports from it, each used at import only in annotations and otherwise only
# called; checked against the installed SDK by tests/test_startup.py, which also drives a real HTTP request.
DEFERRED_MODULES = {
    "sse_starlette": ("EventSourceResponse",),
    "starlette.applications": ("Starlette",),
    "starlette.middleware.authentication": ("AuthenticationMiddleware",),
    "starlette.routing": ("Mount", "Route"),
    "starlette.requests": ("Request",),
    "starlette.responses": ("Response",),
    "starlette.datastructures": ("Headers",),
    "mcp.server.auth.middleware.auth_context": ("AuthContextMiddleware",),
    "mcp.server.auth.middleware.bearer_auth": (
        "AuthenticatedUser",
        "AuthorizationContext",
        "BearerAuthBackend",
        "RequireAuthMiddleware",
        "authorization_context",
    ),
    "mcp.server.auth.provider": ("OAuthAuthorizationServerProvider", "TokenVerifier"),
    "mcp.server.auth.routes": ("build_resource_metadata_url", "create_auth_routes", "create_protected_resource_routes"),
    "mcp.server.auth.settings": ("AuthSettings",),
    "mcp.os.win32.utilities": ("rebind_std_handle_to_fd",),  # called by the stdio transport on Windows only
    "mcp.server._streamable_http_modern": ("handle_modern_request",),  # the HTTP transport's 2026-era entry
    # W3C trace context, read from a request's `_meta` (2026-era requests carry one) and written into one
    "opentelemetry.propagate": ("extract", "inject"),
    # pydantic's plugin search (which `serve` turns off) and its email-validator version check
    "importlib.metadata": ("entry_points", "version"),
    "anyio._core._sockets": ("convert_ipv6_sockaddr",),  # the asyncio backend's, for a UDP datagram's address
}
# One model set per protocol revision; `mcp_types.methods` only files their classes and unions in its per-version
# maps, and a session speaks one revision, so each set is imported when a message first needs it.
DEFERRED_REVISIONS = ("mcp_types._v2025_11_25", "mcp_types._v2026_07_28")


def import_sdk() -> list[str]:
    """Import SDK_MODULES the fast way; return the levers that could not be applied."""
    if "mcp" in sys.modules or "mcp_types" in sys.modules:
        return []  # already imported the ordinary way (an in-process client, the tests): nothing left to save
    applied: set[str] = {"frozen-gc"}
    with fast_imports(), _deferred_builds(applied), _deferred_modules(applied):
        if _methods_deferred() or not hasattr(dataclasses, "_create_fn"):  # 3.13 compiles a class's in one exec
            applied.add("deferred-methods")
        registered = all(_register_without_init(name) for name in SKIPPED_INITS)
        for name in SDK_MODULES:
            importlib.import_module(name)
    # An SDK module that reads a name from either package has run its real __init__ by now.
    if registered and all("__getattr__" in vars(sys.modules[name]) for name in SKIPPED_INITS):
        applied.add("skipped-inits")
    return [lever for lever in LEVERS if lever not in applied]


@contextmanager
def fast_imports() -> Iterator[None]:
    """For modules that live as long as the process (`serve` wraps all of its imports in this): no garbage
    collection while they import, then what they built is frozen out of every later collection (frozen-gc); and
    their dataclasses' methods are compiled at first call (deferred-methods). Nests: an inner one changes nothing
    but an early freeze."""
    collecting = gc.isenabled()
    gc.disable()
    create_fn = getattr(dataclasses, "_create_fn", None)
    # 3.11 and 3.12's signature
    defer = _parameters(create_fn) == ("name", "args", "body", "globals", "locals", "return_type")
    if defer:
        dataclasses._create_fn = partial(_compiled_on_first_call, create_fn)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if defer:
            dataclasses._create_fn = create_fn  # type: ignore[attr-defined]
        gc.freeze()
        if collecting:
            gc.enable()


def _parameters(function: Any) -> tuple[str, ...]:
    """The names of a private function's parameters, to check it still has the signature a lever replaces."""
    code = getattr(function, "__code__", None)
    return code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] if code else ()


def _methods_deferred() -> bool:
    return getattr(getattr(dataclasses, "_create_fn", None), "func", None) is _compiled_on_first_call


# `_process_class` reads `inspect.signature(cls)`, which is `__init__`'s, to give a class without a docstring one.
COMPILED_AT_ONCE = ("__init__",)


def _compiled_on_first_call(create_fn: Callable[..., Any], name: str, args: Any, body: Any, **options: Any) -> Any:
    """Stands for dataclasses' `_create_fn`: the method it returns compiles itself when first called, by `create_fn`
    with the same arguments, and is then replaced by what that compiled in the classes that hold it, or in the
    wrapper around it. Until its first call, `inspect.signature` shows it as `(self, *arguments, **keywords)`,
    `inspect.getsource` finds this function, and a reference taken to it then no longer pickles after it."""
    if name in COMPILED_AT_ONCE:
        return create_fn(name, args, body, **options)
    compiled = None

    def method(self, *arguments, **keywords):  # type: ignore[no-untyped-def]  # unannotated, as the methods are
        nonlocal compiled
        if compiled is None:
            compiled = create_fn(name, args, body, **options)
            compiled.__qualname__ = method.__qualname__  # the class's, set when it was added to the class
        # Replaced in every class of `self`'s MRO still holding it (a subclass may, by `__hash__ = Base.__hash__`)
        for owner in type(self).__mro__:
            held = vars(owner).get(name)
            if held is method:
                type.__setattr__(owner, name, compiled)
            elif isinstance(held, FunctionType) and getattr(held, "__wrapped__", None) is method:
                _rewrap(held, method, compiled)
        return compiled(self, *arguments, **keywords)

    # Named as `create_fn` names its functions; `_process_class` then names each after its class, but for the one
    # that `__repr__`'s guard wraps.
    method.__name__, method.__qualname__ = name, f"__create_fn__.<locals>.{name}"
    method.__module__ = (options.get("globals") or {}).get("__name__")  # type: ignore[assignment]
    return method


def _rewrap(wrapper: FunctionType, method: Callable[..., Any], compiled: Callable[..., Any]) -> None:
    """Points a wrapper (`__repr__`'s guard against recursion) at `compiled` instead of `method`: what it shows and,
    through the closure cell that held `method`, what it calls."""
    wrapper.__wrapped__ = compiled  # type: ignore[attr-defined]
    for cell in wrapper.__closure__ or ():
        if cell.cell_contents is method:
            cell.cell_contents = compiled


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
    # A plain `model_rebuild()` at import time (mcp_types resolving forward references) builds a validator too;
    # a deferred model resolves them itself when first used.
    from pydantic import BaseModel, TypeAdapter
    from pydantic._internal import _config, _model_construction, _typing_extra

    defaults = getattr(_config, "config_defaults", None)
    adapter_property = vars(TypeAdapter).get("_defer_build")
    rebuild = vars(BaseModel).get("model_rebuild")
    models = isinstance(defaults, dict) and defaults.get("defer_build") is False and isinstance(rebuild, classmethod)
    adapters = isinstance(adapter_property, property)
    # Fields wait for a validator build, so only with deferred models; only for the signature that
    # `ModelMetaclass.__new__` calls and `_DeferredFields.set_model_fields` takes; and with pydantic's own reader
    # of a class's annotations (Python 3.14 evaluates them lazily).
    collect_fields = getattr(_model_construction, "set_model_fields", None)
    annotations_of = getattr(_typing_extra, "safe_get_annotations", None)
    fields = (
        models
        and callable(annotations_of)
        and _parameters(collect_fields) == ("cls", "config_wrapper", "ns_resolver", "namespace_info")
    )
    if models:
        defaults["defer_build"] = True
        BaseModel.model_rebuild = classmethod(  # type: ignore[method-assign,assignment]
            lambda model, **options: rebuild.__func__(model, **options) if options else None
        )
        applied.add("deferred-models")
    if adapters:
        TypeAdapter._defer_build = property(lambda adapter: True)  # type: ignore[method-assign,assignment]
        applied.add("deferred-adapters")
    if fields:
        _model_construction.set_model_fields = _DeferredFields(collect_fields, annotations_of).set_model_fields
        applied.add("deferred-fields")
    try:
        yield
    finally:
        if models:
            defaults["defer_build"] = False
            BaseModel.model_rebuild = rebuild  # type: ignore[method-assign]
        if adapters:
            TypeAdapter._defer_build = adapter_property  # type: ignore[method-assign]
        if fields:
            _model_construction.set_model_fields = collect_fields


class _DeferredFields:
    """Stands for pydantic's `set_model_fields(cls, config_wrapper, ns_resolver, namespace_info)`, which
    `ModelMetaclass.__new__` calls to collect a new model's fields: for a model whose creation needs none of what
    it finds, each attribute it sets is left as a `_CollectedOnRead` that calls it, with the same arguments.

    Until then a field's default is still readable as a class attribute (collecting removes it; neither the SDK
    nor skill-mcp reads one), and an error in a model's fields is raised at its first use, not at its creation."""

    SETS = ("__pydantic_fields__", "__pydantic_extra_info__")  # the two it sets; it only adds to the others

    def __init__(self, collect: Any, annotations_of: Any) -> None:
        self._collect, self._annotations_of = collect, annotations_of

    def set_model_fields(self, cls: type, config_wrapper: Any, ns_resolver: Any, namespace_info: Any) -> None:
        arguments = {"config_wrapper": config_wrapper, "ns_resolver": ns_resolver, "namespace_info": namespace_info}
        # Of what it finds, `__new__` reads only the private attributes (`_x = value` or `_x: T`), to have
        # `model_post_init` set their defaults; a model that has any is collected at once.
        if namespace_info.private_candidates or any(name.startswith("_") for name in self._annotations_of(cls)):
            self._collect(cls, **arguments)
            return
        collect = partial(self._collect, cls, **arguments)
        for name in self.SETS:
            type.__setattr__(cls, name, _CollectedOnRead(collect, cls, name))


_COLLECTING = threading.RLock()  # one collection at a time: a reader on another thread waits for it to finish


class _CollectedOnRead:
    """`cls.<name>` until `cls`'s fields are collected: the first read collects them, and pydantic's function sets
    both attributes, over both stand-ins. If it raises, they stay, and the next read raises again."""

    __slots__ = ("_collect", "_cls", "_name")

    def __init__(self, collect: Callable[[], None], cls: type, name: str) -> None:
        self._collect, self._cls, self._name = collect, cls, name

    def __get__(self, instance: Any, owner: type) -> Any:
        with _COLLECTING:
            if vars(self._cls)[self._name] is self:
                self._collect()
        return vars(self._cls)[self._name]

    def __contains__(self, name: str) -> bool:
        # While the fields are collected, pydantic looks each annotation up in the class's own
        # `__pydantic_fields__`, as already evaluated: none is, yet.
        return False


_UNRESOLVED = object()


class _Forwarder:
    """Stands for `module.name` until used: calling it (or reading, subclassing, isinstance, a pydantic schema)
    imports the module."""

    __slots__ = ("_finder", "_module", "_name", "_resolved")

    def __init__(self, finder: _StandIns, module: str, name: str) -> None:
        self._finder, self._module, self._name, self._resolved = finder, module, name, _UNRESOLVED

    def _target(self) -> Any:
        if self._resolved is _UNRESOLVED:
            target = getattr(self._finder.real_module(self._module), self._name)
            if self._finder.importing:
                return target
            self._resolved = target
        return self._resolved

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and self._finder.importing:  # typing probing an annotation: stay inert
            raise AttributeError(attribute)
        return getattr(self._target(), attribute)

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[Any, ...]:
        return (self._target(),)

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self._target())

    def __subclasscheck__(self, subclass: Any) -> bool:
        return issubclass(subclass, self._target())

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:  # TypeAdapter(forwarder)
        return handler.generate_schema(self._target())

    def __or__(self, other: Any) -> Any:  # `Response | None` in an annotation evaluated at import
        return Union[self, other]

    def __ror__(self, other: Any) -> Any:
        return Union[other, self]

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._name}>"


class _StandIns:
    """Finds DEFERRED_MODULES and DEFERRED_REVISIONS as stand-in modules while the SDK imports; a module it had
    to import for real then (a name outside its list was asked for) is recorded in `imported`.

    A meta path finder and its modules' loader, by protocol: `importlib.abc` would import importlib.resources."""

    def __init__(self) -> None:
        self.stand_ins: dict[str, ModuleType] = {}
        self.imported: set[str] = set()
        self.importing = True
        self._late_imports = threading.RLock()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parent = name.rpartition(".")[0]
        if parent in self.stand_ins:  # a submodule needs the real package
            self.real_module(parent)
        if name not in DEFERRED_MODULES and name not in DEFERRED_REVISIONS or name in self.imported:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        stand_in = ModuleType(spec.name)
        stand_in.__getattr__ = lambda name: self._attribute(spec.name, name)  # type: ignore[attr-defined]
        self.stand_ins[spec.name] = stand_in
        return stand_in

    def exec_module(self, module: ModuleType) -> None:
        pass

    def _attribute(self, module: str, name: str) -> Any:
        if name.startswith("__"):  # the import system probing for __path__, __file__…
            raise AttributeError(name)
        if name in DEFERRED_MODULES.get(module, ()) or module in DEFERRED_REVISIONS and not name.startswith("_"):
            return _Forwarder(self, module, name)
        return getattr(self.real_module(module), name)

    def real_module(self, module: str) -> ModuleType:
        if module in self.stand_ins:  # needed while the SDK imports: the deferral did not hold
            self.imported.add(module)
            self._remove(module)
        if self.importing or module in sys.modules:
            return importlib.import_module(module)
        # A model set imported late is as lazy as one imported at start; one at a time, since the switches
        # are process-wide and each import restores what it found.
        with self._late_imports, _deferred_builds(set()):
            return importlib.import_module(module)

    def _remove(self, module: str) -> None:
        stand_in = self.stand_ins.pop(module, None)
        if sys.modules.get(module) is stand_in:
            del sys.modules[module]
        parent, _, child = module.rpartition(".")
        if stand_in is not None and getattr(sys.modules.get(parent), child, None) is stand_in:
            delattr(sys.modules[parent], child)

    def remove_all(self) -> None:
        self.importing = False
        for module in list(self.stand_ins):
            self._remove(module)


@contextmanager
def _deferred_modules(applied: set[str]) -> Iterator[None]:
    finder = _StandIns()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        finder.remove_all()
    if not finder.imported:
        applied.add("deferred-modules")
