"""The user's own vLLM environment (GPU, driver, vLLM version), fitted by `kvcalc calibrate LOG...` from their
start-up logs and kept in a user profile; plan and explain use it when the GPU and the vLLM version match.

Only the per-environment terms of vLLM's memory budget that have a mechanism are calibrated
(vllm/v1/worker/gpu_worker.py determine_available_memory: KV = total x util - weights - activation peak - non-torch
- CUDA-graph estimate):
- non-torch memory per rank, by tensor-parallel size: the CUDA context, cuBLAS/cuDNN workspaces and, with TP, NCCL
  and custom all-reduce buffers: set by the driver, the NCCL build and the interconnect, not by the model;
- the CUDA-graph memory vLLM subtracts (its estimate, or the captured pool where it prints no estimate);
- the activation peak as a scale on kvcalc's formula (the profile run's kernels: attention backend, torch.compile,
  fused-MoE and quantized kernels' workspaces differ per build).
Weights and the KV layout are not calibrated: they follow from the checkpoint and vLLM's rules, not the environment.

With `vllm bench serve` / `vllm bench throughput` result files beside the logs (`--bench`), the speed model's
per-GPU constants (kvcalc/throughput.py, kvcalc/data/speed.yaml) are fitted too, each a mechanism that transfers
to other models on the same GPU and vLLM build: the bandwidth decode kernels reach (bytes/s), the per-step overhead
(launches, scheduling, sampling bookkeeping: seconds, whatever the model), the tensor-core efficiency (a fraction of
the datasheet dense peak, GEMMs and attention alike) and, from benches of a tensor-parallel server, the time of one
layer's all-reduces (set by the interconnect: NVLink, PCIe, pods of one node). kvcalc/validate/speed_fit.py fits
them.

Where the profile lives: $KVCALC_CONFIG_DIR/calibration.json, else $XDG_CONFIG_HOME/kvcalc/calibration.json, else
~/.config/kvcalc/calibration.json. This module reads and writes that file and applies a calibration; fitting it from
logs is kvcalc/validate/calibration_fit.py (the log parser lives in validate/).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import UsageError
from .hardware.profile import GpuProfile
from .units import GiB

SCHEMA = "kvcalc.calibration/1"
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few KiB; a larger file is not one kvcalc wrote


def profile_path() -> Path:
    """$KVCALC_CONFIG_DIR/calibration.json, else the XDG config directory's kvcalc/calibration.json."""
    override = os.environ.get("KVCALC_CONFIG_DIR")
    if override:
        return Path(override) / "calibration.json"
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(xdg) / "kvcalc" / "calibration.json"


def release(version: str) -> str:
    """'0.19.0rc1' -> '0.19.0', '0.10.1.1' -> '0.10.1.1': the release a calibration is keyed by."""
    from packaging.version import InvalidVersion, Version

    try:
        return ".".join(str(n) for n in Version(str(version)).release)
    except InvalidVersion:
        raise UsageError(f"vLLM version {str(version)[:40]!r} is not a version number (e.g. 0.19.0)") from None


Layout = tuple[int, int]  # (tensor-parallel size, pipeline-parallel size)


def layout_key(layout: Layout) -> str:
    """(2, 1) -> "tp2" and (1, 2) -> "tp1pp2": the profile's JSON keys."""
    tp, pp = layout
    return f"tp{tp}" + (f"pp{pp}" if pp > 1 else "")


def parse_layout(key: str) -> Layout:
    m = re.fullmatch(r"tp(\d{1,4})(?:pp(\d{1,4}))?", str(key))
    if not m:
        raise ValueError(f"layout key {str(key)[:20]!r} is not like tp2 or tp1pp2")
    return int(m.group(1)), int(m.group(2) or 1)


def layout_text(layout: Layout) -> str:
    tp, pp = layout
    return f"TP {tp}" + (f" x PP {pp}" if pp > 1 else "")


@dataclass(frozen=True)
class SpeedCalibration:
    """The speed model's per-GPU constants fitted on the user's bench files (None: not fitted, kvcalc's own applies).
    They replace kvcalc/data/speed.yaml's measured or derived values for this GPU in vLLM rows."""

    bandwidth_bytes_per_s: float | None = None  # what decode kernels reach (speed.yaml bandwidth_bytes_per_s)
    step_overhead_s: float | None = None  # per engine step (speed.yaml step_overhead_s)
    tensor_fraction: float | None = None  # prefill's share of the datasheet dense tensor peak (tensor_fraction)
    tp_comm_per_layer_s: float | None = None  # the all-reduces of one layer at TP > 1 (throughput.yaml tp_comm_...)
    link_bandwidth_bytes_per_s: float | None = None  # the all-reduce's data path (bytes of a batch's hidden states)
    benches: tuple[str, ...] = ()
    not_fitted: tuple[str, ...] = ()  # why a constant was left to kvcalc (what the benches lacked)

    def describe(self) -> str:
        parts = []
        if self.bandwidth_bytes_per_s is not None:
            parts.append(f"decode bandwidth {self.bandwidth_bytes_per_s / 1e12:.2f} TB/s")
        if self.step_overhead_s is not None:
            parts.append(f"step overhead {self.step_overhead_s * 1e3:.2f} ms")
        if self.tensor_fraction is not None:
            parts.append(f"tensor efficiency {self.tensor_fraction:.0%} of the datasheet peak")
        if self.tp_comm_per_layer_s is not None:
            parts.append(f"TP all-reduce {self.tp_comm_per_layer_s * 1e6:.1f} us per layer")
        if self.link_bandwidth_bytes_per_s is not None:
            parts.append(f"all-reduce data at {self.link_bandwidth_bytes_per_s / 1e9:.1f} GB/s")
        return ", ".join(parts) + f" (from {len(self.benches)} bench file(s))"

    def to_json(self) -> dict[str, Any]:
        return {"bandwidth_bytes_per_s": self.bandwidth_bytes_per_s, "step_overhead_s": self.step_overhead_s,
                "tensor_fraction": self.tensor_fraction, "tp_comm_per_layer_s": self.tp_comm_per_layer_s,
                "link_bandwidth_bytes_per_s": self.link_bandwidth_bytes_per_s,
                "benches": list(self.benches),
                "not_fitted": list(self.not_fitted)}

    @classmethod
    def from_json(cls, d: Any) -> "SpeedCalibration | None":
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ValueError("speed is not a mapping")
        return cls(bandwidth_bytes_per_s=_num(d.get("bandwidth_bytes_per_s"), float, 1e9, 1e14),
                   step_overhead_s=_num(d.get("step_overhead_s"), float, 1e-6, 1.0),
                   tensor_fraction=_num(d.get("tensor_fraction"), float, 0.01, 1.0),
                   tp_comm_per_layer_s=_num(d.get("tp_comm_per_layer_s"), float, 1e-8, 0.01),
                   link_bandwidth_bytes_per_s=_num(d.get("link_bandwidth_bytes_per_s"), float, 1e8, 1e13),
                   benches=tuple(str(x) for x in d.get("benches") or ()),
                   not_fitted=tuple(str(x) for x in d.get("not_fitted") or ()))


def _num(value: Any, kind: type, lo: float, hi: float) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"{value!r} out of range")
    return kind(value)


@dataclass(frozen=True)
class CalibratedGpu(GpuProfile):
    """A GPU profile that carries the user's speed calibration: kvcalc/throughput.py's gpu_rates uses it for vLLM's
    kernels (transformers rows keep kvcalc's own constants: the calibration measured vLLM's kernels)."""

    speed_calibration: SpeedCalibration | None = None
    speed_source: str = ""


def with_speed(gpu: GpuProfile, speed: SpeedCalibration | None, source: str = "") -> GpuProfile:
    """`gpu` with the speed calibration attached (the same profile when there is none)."""
    if speed is None:
        return gpu
    base = {f.name: getattr(gpu, f.name) for f in fields(GpuProfile)}
    return CalibratedGpu(**base, speed_calibration=speed, speed_source=source)


@dataclass(frozen=True)
class EnvCalibration:
    """One environment's fitted terms (bytes are per rank). None: that term was not fitted, kvcalc's own applies."""

    gpu: str  # the GPU profile's name (GpuProfile.name), e.g. "NVIDIA H100 SXM5 80GB"
    vllm_version: str  # the release, e.g. "0.19.0"
    # keyed by the parallel layout (tp, pp): NCCL's all-reduce buffers come with TP, not with PP
    non_torch_by_tp: tuple[tuple[Layout, int], ...] = ()  # ((tp, pp), non-torch bytes per rank)
    activation_scale_by_tp: tuple[tuple[Layout, float], ...] = ()  # ((tp, pp), observed activation peak / kvcalc's)
    cudagraph_by_tp: tuple[tuple[Layout, int], ...] = ()  # ((tp, pp), the CUDA-graph memory vLLM subtracts per rank)
    total_memory_bytes: int | None = None  # what the logs' driver reported
    speed: SpeedCalibration | None = None  # fitted on bench files (kvcalc calibrate --bench)
    logs: tuple[str, ...] = ()
    created: str = ""
    source: str = field(default="", compare=False)  # the profile file it was read from

    def layouts(self) -> list[Layout]:
        return sorted({key for pairs in (self.non_torch_by_tp, self.activation_scale_by_tp, self.cudagraph_by_tp)
                       for key, _ in pairs}) or [(1, 1)]

    def non_torch(self, tp: int, pp: int, default: int) -> int:
        return dict(self.non_torch_by_tp).get((int(tp), int(pp)), default)

    def activation(self, tp: int, pp: int, predicted: int) -> int:
        scale = dict(self.activation_scale_by_tp).get((int(tp), int(pp)))
        return predicted if scale is None else int(round(predicted * scale))

    def cudagraph(self, tp: int, pp: int, predicted: int) -> int:
        """The calibrated graph memory where kvcalc subtracts one (0 stays 0: eager, or a runner that does not)."""
        fitted = dict(self.cudagraph_by_tp).get((int(tp), int(pp)))
        return predicted if (fitted is None or predicted == 0) else fitted

    def describe(self, tp: int, pp: int = 1) -> str:
        parts = []
        key = (int(tp), int(pp))
        for what, pairs, shown in (("non-torch", self.non_torch_by_tp, lambda b: f"{b / GiB:.2f} GiB per rank"),
                                   ("activation", self.activation_scale_by_tp, lambda x: f"x{x:.2f} kvcalc's"),
                                   ("CUDA graphs", self.cudagraph_by_tp, lambda b: f"{b / GiB:.2f} GiB")):
            by_layout = dict(pairs)
            if key in by_layout:
                parts.append(f"{what} {shown(by_layout[key])} at {layout_text(key)}")
            elif by_layout:
                parts.append(f"{what} not calibrated for {layout_text(key)} (only "
                             f"{', '.join(layout_text(k) for k in sorted(by_layout))})")
        if self.speed is not None:
            parts.append("speed: " + self.speed.describe())
        where = f" ({self.source})" if self.source else ""
        what = "logs and bench files" if self.speed is not None else "logs"
        return (f"calibrated from your {what} for {self.gpu}, vLLM {self.vllm_version}{where}: " + ", ".join(parts)
                + "; --no-calibration ignores it")

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "vllm_version": self.vllm_version,
                "non_torch_bytes_by_tp": {layout_key(k): b for k, b in self.non_torch_by_tp},
                "activation_scale_by_tp": {layout_key(k): x for k, x in self.activation_scale_by_tp},
                "cudagraph_bytes_by_tp": {layout_key(k): b for k, b in self.cudagraph_by_tp},
                "total_memory_bytes": self.total_memory_bytes,
                "speed": self.speed.to_json() if self.speed is not None else None,
                "logs": list(self.logs), "created": self.created}

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "") -> "EnvCalibration":
        def figure(value: Any, kind: type, lo: float, hi: float) -> Any:  # a layout's entry: a number, never null
            if value is None:
                raise ValueError("a per-layout entry is null")
            return _num(value, kind, lo, hi)

        by_tp = d.get("non_torch_bytes_by_tp") or {}
        scales = d.get("activation_scale_by_tp") or {}
        graphs = d.get("cudagraph_bytes_by_tp") or {}
        if not all(isinstance(x, dict) for x in (by_tp, scales, graphs)):
            raise ValueError("non_torch_bytes_by_tp / activation_scale_by_tp is not a mapping")
        return cls(gpu=str(d["gpu"]), vllm_version=release(str(d["vllm_version"])),
                   non_torch_by_tp=tuple(sorted((parse_layout(k), figure(b, int, 0, 64 * GiB))
                                                for k, b in by_tp.items())),
                   activation_scale_by_tp=tuple(sorted((parse_layout(k), figure(x, float, 0.05, 20))
                                                       for k, x in scales.items())),
                   cudagraph_by_tp=tuple(sorted((parse_layout(k), figure(b, int, 0, 64 * GiB))
                                                for k, b in graphs.items())),
                   total_memory_bytes=_num(d.get("total_memory_bytes"), int, 0, 1 << 50),
                   speed=SpeedCalibration.from_json(d.get("speed")),
                   logs=tuple(str(x) for x in d.get("logs") or ()), created=str(d.get("created", "")),
                   source=source)


def load_profile(path: Path | None = None) -> list[EnvCalibration]:
    """Every calibration in the profile ([] when there is none); a damaged file is one line, exit 2."""
    from .input_files import is_file, parse_json, read_text

    path = path or profile_path()
    if not is_file(path):
        return []
    try:
        # read as data (input_files): capped, UTF-8 checked, bounded nesting and digits (a 200,000-deep array was a
        # RecursionError traceback on every plan; found by tests/fuzz_cases.py)
        data = parse_json(read_text(path, "calibration profile", MAX_PROFILE_BYTES), "the file")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        envs = data.get("environments", [])
        if not isinstance(envs, list) or not all(isinstance(e, dict) for e in envs):  # (a string entry: fuzz)
            raise ValueError("environments is not a list of objects")
        return [EnvCalibration.from_json(e, str(path)) for e in envs]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise UsageError(f"calibration profile {path}: {exc}; fix or delete it (or pass --no-calibration)") from None


def save_profile(envs: list[EnvCalibration], path: Path | None = None) -> Path:
    """Write the profile atomically (a temporary file renamed over it)."""
    path = path or profile_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"schema": SCHEMA, "environments": [e.to_json() for e in envs]}, indent=1) + "\n",
                       encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the calibration profile {path}: {exc.strerror or exc}") from None
    return path


def find(gpu_name: str, vllm_version: str, path: Path | None = None) -> tuple[EnvCalibration | None, str | None]:
    """(the calibration for this GPU and vLLM release, or None; a note when the profile holds calibrations that do
    not match, so the user knows why theirs was not used)."""
    envs = load_profile(path)
    if not envs:
        return None, None
    want = release(vllm_version)
    for env in envs:
        if env.gpu == gpu_name and env.vllm_version == want:
            return env, None
    same_gpu = sorted(e.vllm_version for e in envs if e.gpu == gpu_name)
    if same_gpu:
        return None, (f"your calibration for {gpu_name} is for vLLM {', '.join(same_gpu)}, not {want}: not used "
                      f"(--vllm-version {same_gpu[-1]} uses it)")
    return None, None
