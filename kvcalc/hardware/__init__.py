"""GPU profiles. profile.py holds the GpuProfile type and name spellings (the leaf), schema.py the pydantic rules for
users' files (imports only profile), registry.py the shipped files and lookup (imports the schema lazily).

`from kvcalc.hardware import get_gpu` is the way in; nothing here imports back up the package.
"""

from .profile import FLOPS_KEYS, GpuProfile, canonical_dtype, normalize_name
from .registry import get_gpu, list_gpus, load_gpu_file

__all__ = ["FLOPS_KEYS", "GpuProfile", "canonical_dtype", "get_gpu", "list_gpus", "load_gpu_file", "normalize_name"]
