"""`kvcalc.plan(...)` and `kvcalc.search(...)` where kvcalc/plan.py and kvcalc/search.py are modules too.

Python sets a package's attribute to a submodule when the submodule is imported, so `kvcalc.plan` is the module
kvcalc/plan.py as soon as anything imports it. Rather than rename modules every surface imports, those two modules
are made callable: calling the module calls the API function of the same name (kvcalc/api.py). `kvcalc.plan.Row`
and `from kvcalc.plan import plan` keep working; `kvcalc.plan(gpu="l4")` is the documented API call.
"""

from __future__ import annotations

import sys
import types


def make_callable(module_name: str, api_name: str) -> None:
    """Make sys.modules[module_name] callable as kvcalc.api.<api_name>."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            from . import api

            return getattr(api, api_name)(*args, **kwargs)

    CallableModule.__call__.__doc__ = f"kvcalc.{api_name}(**options): see kvcalc.api.{api_name} and docs/api.md."
    sys.modules[module_name].__class__ = CallableModule
