"""Loads the fitted (or assumed) constants of kvcalc/data/*.yaml, once."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((resources.files("kvcalc") / "data" / f"{name}.yaml").read_text())


def engine_constants(engine: str) -> dict[str, Any]:
    return load("constants")[engine]
