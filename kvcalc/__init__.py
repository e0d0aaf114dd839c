"""kvcalc: will this model fit on this GPU under this engine, and how fast will it decode?

The Python API (docs/api.md; stable, semantic versioning): `kvcalc.plan`, `explain`, `fit`, `search`,
`validate_log`, `validate_metrics`, with the CLI's options as keyword arguments and results whose `to_json()` is the
CLI's JSON. `import kvcalc` loads nothing else: each name is imported on first use, so a program pays only for what
it calls (`kvcalc.plan` costs what `kvcalc plan` costs).
"""

__version__ = "0.2.0"

_API = ("plan", "explain", "fit", "search", "validate_log", "validate_metrics", "PlanResult", "ExplainResult",
        "FitResult", "SearchResult", "LogValidation", "MetricsValidation", "GateFailed")
__all__ = [*_API, "UsageError", "__version__"]


def __getattr__(name: str):
    # PEP 562: kvcalc.plan etc. load kvcalc.api (and what it needs) on first use, not at `import kvcalc`; the
    # submodules (kvcalc.plan the module, kvcalc.cli, ...) import as usual
    if name in ("plan", "search"):  # modules of the same name, made callable (kvcalc/callable_module.py)
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name in _API:
        from . import api

        return getattr(api, name)
    if name == "UsageError":
        from .errors import UsageError

        return UsageError
    raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
