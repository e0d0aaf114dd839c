"""kvcalc: will this model fit on this GPU under this engine, and how fast will it decode?

The Python API (docs/api.md; stable, semantic versioning): `kvcalc.plan`, `explain`, `fit`, `search`,
`validate_log`, `validate_metrics`, with the CLI's options as keyword arguments and results whose `to_json()` is the
CLI's JSON. `import kvcalc` loads nothing else: each name is imported on first use, so a program pays only for what
it calls (`kvcalc.plan` costs what `kvcalc plan` costs).
"""

import sys
import types

__version__ = "0.2.0"

_API = ("plan", "explain", "fit", "search", "validate_log", "validate_metrics", "PlanResult", "ExplainResult",
        "FitResult", "SearchResult", "LogValidation", "MetricsValidation", "GateFailed")
__all__ = [*_API, "UsageError", "__version__"]
_CALLABLE_MODULES = ("plan", "search")  # kvcalc/plan.py and kvcalc/search.py share their name with an API call


class _CallableModule(types.ModuleType):
    """The class of the modules kvcalc.plan and kvcalc.search: calling the module calls the API function of its
    name, so `kvcalc.plan(gpu="l4")` is the API while `from kvcalc.plan import Row` and `kvcalc.plan.Row` keep
    reading the module."""

    def __call__(self, *args, **kwargs):
        from . import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # Python sets kvcalc.plan to the submodule when kvcalc/plan.py is imported: make that module callable
        if name in _CALLABLE_MODULES and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    # PEP 562: kvcalc.plan etc. load kvcalc.api (and what it needs) on first use, not at `import kvcalc`
    if name == "plan":  # importing the module sets kvcalc.plan to it, made callable by _Package.__setattr__
        from .plan import plan as _  # noqa: F401

        return sys.modules[f"{__name__}.plan"]
    if name == "search":
        from .search import search_json as _  # noqa: F401

        return sys.modules[f"{__name__}.search"]
    if name in _API:
        from . import api

        return getattr(api, name)
    if name == "UsageError":
        from .errors import UsageError

        return UsageError
    raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
