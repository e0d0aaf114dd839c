"""Read a checkpoint the way it ships: config.json, its quantization, and the exact weight bytes.

`--model` names a catalog entry, a local checkpoint folder, a config.json, or a hub id. For a folder (or a hub id's
snapshot in the huggingface_hub cache) kvcalc reads:
- config.json, and hf_quant_config.json (ModelOpt) when present;
- the headers of every *.safetensors file (safetensors_header.py: dtype x shape per tensor, nothing else read);
- model.safetensors.index.json, whose metadata.total_size is the fallback when the shards themselves are absent.

The weight bytes of the baseline row then come from, in this order (WeightsTotal.source says which):
1. the safetensors headers: the sum of every tensor's bytes, less the tensors vLLM does not load (the MTP /
   next-token-prediction layers numbered past num_hidden_layers: deepseek_v2.py load_weights skips them);
2. model.safetensors.index.json metadata.total_size (the same sum, as the hub wrote it; MTP layers included);
3. the closed form: ModelSpec's parameter counts with each Linear in the checkpoint's quantized layout
   (quant_config.py), everything else in the config's dtype.

Hub ids: the huggingface_hub cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) is read first, directly;
with HF_HUB_OFFLINE=1 nothing else is tried. Otherwise, with huggingface_hub installed, config.json and the small JSON
files come through hf_hub_download and the safetensors headers from the hub's header metadata
(get_safetensors_metadata: HTTP range requests, no weights downloaded), all within HUB_TIMEOUT_S (fuzz review H9).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import UsageError, shown
from .input_files import exists
from .formats import WEIGHT_FORMATS, WeightFormat
from .layouts import Layout
from .quant_config import QuantScheme, find_quant_config, parse_scheme
from .safetensors_header import TensorEntry, read_header

MAX_SHARDS = 10_000  # no real checkpoint has more shard files; a bound keeps a bad folder from running forever
MAX_JSON_BYTES = 64 * 1024 * 1024  # model.safetensors.index.json of a 1T model is ~10 MB


@dataclass(frozen=True)
class Checkpoint:
    """What kvcalc read from a checkpoint besides the architecture."""

    origin: str  # "folder PATH", "hub ID (cache)", "catalog NAME", "file PATH"
    scheme: QuantScheme | None = None
    tensors: tuple[TensorEntry, ...] | None = None  # every tensor of every shard, from the headers
    header_files: int = 0
    index_total: int | None = None  # model.safetensors.index.json metadata.total_size
    declared_format: str | None = None  # the catalog's own statement of the checkpoint format
    notes: tuple[str, ...] = field(default=())
    # hub ids: the commit the files came from (the snapshot folder's name), whatever revision was asked for
    revision: str | None = None

    @property
    def quantized(self) -> bool:
        return self.scheme is not None


@dataclass(frozen=True)
class WeightsTotal:
    bytes: int
    source: str  # "safetensors headers" | "model.safetensors.index.json" | "closed form"
    detail: str  # one line for explain


# ---------------------------------------------------------------------------------------------------------------------
# locating


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, by its own rules (constants.py: HF_HUB_CACHE, else HF_HOME/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(hub_id: str, revision: str = "main") -> Path | None:
    """The snapshot folder of hub_id in the cache (models--org--name/snapshots/<commit>), via refs/<revision>."""
    repo = hub_cache_dir() / ("models--" + hub_id.replace("/", "--"))
    ref = repo / "refs" / revision
    try:
        commit = ref.read_text().strip() if ref.is_file() else revision
    except OSError:
        return None
    snap = repo / "snapshots" / commit
    if (snap / "config.json").is_file():
        return snap
    return None


# Seconds the hub may take for one model (config.json, then the small JSON files and the safetensors header metadata).
# huggingface_hub alone retries a failed DNS lookup for ~24 s and waits ~400 s on an endpoint that accepts but never
# answers (fuzz review H9); KVCALC_HUB_TIMEOUT changes it.
HUB_TIMEOUT_S = 4.0


def _hub_timeout() -> float:
    try:
        value = float(os.environ.get("KVCALC_HUB_TIMEOUT", HUB_TIMEOUT_S))
    except ValueError:
        return HUB_TIMEOUT_S
    return value if 0 < value <= 600 else HUB_TIMEOUT_S  # (NaN fails the comparison too)


def _offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it, also when set after it was imported."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "on", "yes", "true")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


class _NoAnswer(Exception):
    pass


def _bounded(call, seconds: float):
    """call() in a daemon thread, given at most `seconds` (the process may exit while it still waits); its result, its
    exception re-raised, or _NoAnswer. huggingface_hub's "Retrying in 8s [Retry 4/5]" lines are silenced."""
    import logging
    import threading

    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    worker = threading.Thread(target=run, name="kvcalc-hub", daemon=True)
    worker.start()
    worker.join(max(seconds, 0.0))
    if worker.is_alive():
        raise _NoAnswer()
    if "error" in result:
        raise result["error"]
    return result["value"]


def split_revision(key: str) -> tuple[str, str | None]:
    """'org/name@revision' -> ('org/name', 'revision'); a revision is a branch, tag or commit (huggingface_hub's
    revision argument). No '@': (key, None)."""
    if "@" not in key:
        return key, None
    hub_id, revision = key.split("@", 1)
    if not revision or not _REVISION.match(revision):
        raise UsageError(f"revision {shown(revision, 60)} of {shown(hub_id, 60)} must be a branch, tag or commit "
                         "(letters, digits, '.', '_', '-', '/')")
    return hub_id, revision


_REVISION = re.compile(r"^[\w.-][\w./-]{0,199}$")


def _hub_download(hub_id: str, deadline: float, revision: str | None = None) -> Path:
    """config.json of hub_id at `revision` (the default branch when None): the local cache first (no network), then
    the hub until `deadline` (time.monotonic()), never the network when HF_HUB_OFFLINE is set; the folder holding
    it (a snapshots/<commit> folder of the cache)."""
    import time

    snap = cached_snapshot(hub_id, revision or "main")
    if snap is not None:
        return snap
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise UsageError(f"{shown(hub_id)} is not in the catalog or the huggingface_hub cache, and huggingface_hub "
                         "is not installed (python3 -m pip install huggingface_hub); or pass a local checkpoint folder") from None
    if _offline():
        raise UsageError(f"{shown(hub_id)} is not in the catalog nor in the local hub cache, and HF_HUB_OFFLINE is "
                         "set; pass a local checkpoint folder or config.json with --model PATH")
    timeout = deadline - time.monotonic()
    try:
        return Path(_bounded(lambda: hf_hub_download(hub_id, "config.json", revision=revision, etag_timeout=timeout,
                                                     cache_dir=hub_cache_dir()), timeout)).parent
    except _NoAnswer:
        raise UsageError(f"no answer from the hub for config.json of {shown(hub_id)} within {_hub_timeout():g} s; "
                         "offline? pass a local checkpoint folder with --model PATH (or raise KVCALC_HUB_TIMEOUT)"
                         ) from None
    except Exception as exc:  # gated, missing, unreachable: all the same to the user
        raise UsageError(f"cannot get config.json of {shown(hub_id)} from the hub or its cache "
                         f"({type(exc).__name__}); offline? pass a local checkpoint folder with --model PATH") from None


def _hub_extras(hub_id: str, folder: Path, deadline: float,
                revision: str | None = None) -> tuple[dict | None, list[TensorEntry] | None, int]:
    """Online only: the hub's small JSON files next to config.json and its safetensors header metadata, each given
    what is left until `deadline` (at least half a second); what does not come in time is left to the other sources."""
    import time

    if _offline():
        return None, None, 0
    try:
        from huggingface_hub import get_safetensors_metadata, hf_hub_download
    except ImportError:
        return None, None, 0
    hf_quant = None
    try:
        left = max(deadline - time.monotonic(), 0.5)
        path = _bounded(lambda: hf_hub_download(hub_id, "hf_quant_config.json", revision=revision,
                                                etag_timeout=left, cache_dir=hub_cache_dir()), left)
        hf_quant = _read_json(Path(path), "hf_quant_config.json")
    except UsageError:
        raise
    except Exception:  # absent (most checkpoints have none), or no answer in time
        pass
    try:
        meta = _bounded(lambda: get_safetensors_metadata(hub_id, revision=revision),
                        max(deadline - time.monotonic(), 0.5))
    except Exception:  # no safetensors, unreachable or no answer in time: fall back to the other sources
        return hf_quant, None, 0
    from .safetensors_header import header_from_json

    tensors: list[TensorEntry] = []
    for name, file_meta in meta.files_metadata.items():
        raw = {t: {"dtype": info.dtype, "shape": list(info.shape), "data_offsets": list(info.data_offsets)}
               for t, info in file_meta.tensors.items()}
        tensors.extend(header_from_json(name, raw))
    return hf_quant, tensors, len(meta.files_metadata)


def _read_json(path: Path, what: str) -> Any:
    from .model import load_config_file

    try:
        size = path.stat().st_size
    except OSError:
        raise UsageError(f"cannot read {what} {shown(str(path))}") from None
    if size > MAX_JSON_BYTES:
        raise UsageError(f"{what} {shown(str(path))} is {size:,} bytes, more than kvcalc reads")
    return load_config_file(path)


# ---------------------------------------------------------------------------------------------------------------------
# reading


def read_folder(folder: Path, origin: str) -> tuple[dict[str, Any], Checkpoint]:
    """config.json + quantization + safetensors headers (or the index's total) of a checkpoint folder."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UsageError(f"checkpoint folder {shown(str(folder))} has no config.json (not found)")
    cfg = _read_json(config_path, "config.json")
    if not isinstance(cfg, dict):
        raise UsageError(f"config.json in {shown(str(folder))} is not a JSON object")
    hf_quant = _optional_json(folder / "hf_quant_config.json", "hf_quant_config.json")
    scheme = parse_scheme(find_quant_config(cfg), hf_quant)
    shards = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if len(shards) > MAX_SHARDS:
        raise UsageError(f"{shown(str(folder))} holds {len(shards):,} safetensors files (more than {MAX_SHARDS:,})")
    index = _optional_json(folder / "model.safetensors.index.json", "model.safetensors.index.json")
    index_total = _index_total(index) if index is not None else None
    tensors = None
    notes: list[str] = []
    if shards:
        wanted = _index_files(index) if index is not None else None
        present = {p.name for p in shards}
        if wanted and not wanted <= present:
            missing = sorted(wanted - present)
            notes.append(f"{len(missing)} of {len(wanted)} shards named by the index are absent "
                         f"(e.g. {missing[0]}); using the index's total_size")
        else:
            tensors = tuple(t for p in shards for t in read_header(str(p)))
    return cfg, Checkpoint(origin, scheme, tensors, len(shards) if tensors is not None else 0, index_total,
                           notes=tuple(notes))


def _optional_json(path: Path, what: str) -> Any:
    return _read_json(path, what) if path.is_file() else None


def _index_total(index: Any) -> int | None:
    meta = index.get("metadata") if isinstance(index, dict) else None
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise UsageError(f"model.safetensors.index.json metadata.total_size is not a positive integer "
                         f"({shown(total, 30)})")
    return total


def _index_files(index: Any) -> set[str] | None:
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict):
        return None
    return {str(v) for v in wm.values()}


def load_checkpoint(key: str) -> tuple[dict[str, Any], str, Checkpoint]:
    """(config, display name, checkpoint) for a local folder, a config.json, or a hub id."""
    path = Path(key).expanduser()
    if _is_dir(path):
        folder = path
        cfg, ck = read_folder(folder, f"folder {key}")
        return cfg, folder.resolve().name or key, ck
    if key.endswith(".json") or exists(str(path)):  # a file, or a device/FIFO load_config_file refuses
        folder = path.parent
        from .model import load_config_file

        cfg = load_config_file(path)
        if not isinstance(cfg, dict):
            raise UsageError(f"model config {shown(key)} is not a JSON object")
        # a config.json inside a checkpoint folder: read the folder (hf_quant_config, headers) around it
        if path.name == "config.json" and _is_dir(folder):
            cfg, ck = read_folder(folder, f"folder {folder}")
            return cfg, folder.resolve().name, ck
        scheme = parse_scheme(find_quant_config(cfg), None)
        return cfg, path.stem, Checkpoint(f"file {key}", scheme)
    return load_hub_checkpoint(key)


def load_hub_checkpoint(key: str) -> tuple[dict[str, Any], str, Checkpoint]:
    """(config, name, checkpoint) of a hub id from the hub cache or the hub, never from a local path of that name
    (the web API's --allow-hub reads this way: a caller's text never names a file on the server)."""
    import time

    deadline = time.monotonic() + _hub_timeout()
    hub_id, revision = split_revision(key)
    folder = _hub_download(hub_id, deadline, revision)
    hf_quant, tensors, n_files = _hub_extras(hub_id, folder, deadline, revision)
    cfg, ck = read_folder(folder, f"hub {key}")
    if hf_quant is not None and ck.scheme is None:
        ck = Checkpoint(ck.origin, parse_scheme(find_quant_config(cfg), hf_quant), ck.tensors, ck.header_files,
                        ck.index_total, notes=ck.notes)
    if tensors is not None and ck.tensors is None:
        ck = Checkpoint(f"hub {key}", ck.scheme, tuple(tensors), n_files, ck.index_total, notes=ck.notes)
    elif ck.tensors is None:
        ck = Checkpoint(f"hub {key} (cache)", ck.scheme, None, 0, ck.index_total, notes=ck.notes)
    # the cache keeps each commit in snapshots/<commit>: the folder's name is the revision the files came from
    resolved = folder.name if folder.parent.name == "snapshots" else revision
    return cfg, key, replace(ck, revision=resolved)


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False



# ---------------------------------------------------------------------------------------------------------------------
# bytes


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _is_mtp(name: str, num_layers: int) -> bool:
    """A tensor of the multi-token-prediction module, which vLLM loads only for speculative decoding: DeepSeek's
    model.layers.{num_hidden_layers + k} (deepseek_v2.py get_spec_layer_idx_from_weight_name) or Qwen3-Next /
    Qwen3.5's mtp.* (qwen3_next.py skips them). Vision towers have their own layer numbering and are kept."""
    if name.startswith("mtp.") or ".mtp." in name:
        return True
    m = _LAYER.search(name)
    return bool(m and int(m.group(1)) >= num_layers and "vision" not in name and "visual" not in name)


def _check_complete(spec: Any, ck: Checkpoint, total: int) -> None:
    """A partial download (a shard missing, a file cut short and rewritten) is one clear line, not a plan of a model
    with no weights: its tensors must cover every decoder layer the config names (when they are named
    model.layers.N.*), and hold at least the parameters outside the Linear layers (embeddings, norms) at one byte
    each, which every complete checkpoint keeps in 8 bits or more."""
    where = ck.origin.split(" ", 1)[-1]
    layers = {int(m.group(1)) for t in ck.tensors for m in [_LAYER.search(t.name)] if m}
    if layers:
        missing = [i for i in range(spec.num_layers) if i not in layers]
        if missing:
            raise UsageError(f"checkpoint {shown(where, 80)} is partial: its safetensors hold tensors of "
                             f"{spec.num_layers - len(missing)} of the {spec.num_layers} layers its config.json "
                             f"names (layer {missing[0]} is missing); download the rest, or pass the config.json "
                             "alone for the closed-form estimate")
    floor = max(spec.params.total - spec.linear_params, 0)
    if total < floor:
        raise UsageError(f"checkpoint {shown(where, 80)} is partial: its safetensors hold {total:,} bytes, less than "
                         f"the {floor:,} parameters outside its Linear layers (embeddings, norms) at one byte each; "
                         "download the rest, or pass the config.json alone for the closed-form estimate")


def weights_total(spec: Any, ck: Checkpoint) -> WeightsTotal:
    """The checkpoint's weight bytes and where they came from (headers > index total > closed form)."""
    if ck.tensors is not None:
        skipped = 0
        total = 0
        for t in ck.tensors:
            if _is_mtp(t.name, spec.num_layers):
                skipped += t.nbytes
                continue
            total += t.nbytes
        _check_complete(spec, ck, total)
        detail = (f"{len(ck.tensors):,} tensors in {ck.header_files} safetensors file(s): {total:,} bytes")
        if skipped:
            detail += f" ({skipped:,} bytes of MTP layers past layer {spec.num_layers - 1} left out: vLLM skips them)"
        return WeightsTotal(total, "safetensors headers", detail)
    if ck.index_total is not None:
        return WeightsTotal(ck.index_total, "model.safetensors.index.json",
                            f"metadata.total_size {ck.index_total:,} bytes (every tensor the shards hold)")
    total, quantized = closed_form_bytes(spec, ck.scheme)
    if ck.scheme is None:
        return WeightsTotal(total, "closed form", f"{spec.params.total:,} parameters x {spec.dtype_bytes} bytes")
    return WeightsTotal(total, "closed form",
                        f"{quantized:,} of {spec.params.total:,} parameters in {ck.scheme.label}, the rest in "
                        f"{spec.dtype_bytes}-byte {_dtype_name(spec)}")


def encoder_bytes_inside(spec: Any, ck: Checkpoint, source: str) -> int | None:
    """The multimodal encoders' share of a checkpoint total: from the headers, the tensors under the encoders'
    module names (vision_tower.*, multi_modal_projector.*, visual.*, ...); from the index's total_size, their closed
    form in the config's dtype; None for the closed form (the decoder alone)."""
    encoders = getattr(spec, "encoders", ())
    if not encoders or source == "closed form":
        return None
    if ck.tensors is not None:
        prefixes = tuple(p + "." for e in encoders for p in e.prefixes)
        return sum(t.nbytes for t in ck.tensors if t.name.startswith(prefixes))
    return spec.vision_params * spec.dtype_bytes


def _dtype_name(spec: Any) -> str:
    return str(spec.config.get("torch_dtype") or spec.config.get("dtype") or "bfloat16").replace("torch.", "")


_ATTENTION = {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
              "kv_b_proj"}


# families whose decoder layer holds its MoE block beside the dense MLP, not in it: transformers' Gemma 4
# (modeling_gemma4.py Gemma4TextDecoderLayer: self.router, self.experts = Gemma4TextExperts(config)), so a checkpoint's
# `layers.N.mlp*` excludes (nvidia/Gemma-4-26B-A4B-NVFP4's) leave the experts quantized
_MOE_BESIDE_MLP = {"gemma4_text"}


def module_paths(name: str, layer: int, wrapped: bool, model_type: str = "") -> list[str]:
    """Where transformers puts the Linear `name` of layer `layer` (aliases: the text model of a multimodal wrapper
    lives under model.language_model)."""
    beside = model_type in _MOE_BESIDE_MLP
    if name in _ATTENTION:
        sub = f"self_attn.{name}"
    elif name.startswith("experts."):
        sub = f"experts.{name.split('.', 1)[1]}" if beside else f"mlp.experts.0.{name.split('.', 1)[1]}"
    elif name == "router" and beside:
        sub = "router"
    elif name.startswith("shared_experts."):
        sub = f"mlp.{name}"
    elif name.startswith("indexer."):  # DeepSeek V3.2's sparse indexer sits in the attention module
        sub = f"self_attn.{name}"
    elif name == "router":
        sub = "mlp.gate"
    elif "." in name:  # a mixer with its own module: mamba.*, mixer.* (Nemotron-H), linear_attn.*, conv.* (LFM2)
        sub = name
    else:
        sub = f"mlp.{name}"
    bases = ["model.layers"]
    if wrapped:
        bases += ["model.language_model.layers", "language_model.model.layers"]
    return [f"{base}.{layer}.{sub}" for base in bases]


def closed_form_bytes(spec: Any, scheme: QuantScheme | None) -> tuple[int, int]:
    """(total bytes, quantized parameters): each Linear in its layout, every other parameter in the config's dtype.
    A Linear group's count is spread evenly over the layers; the scheme decides layer by layer (per-layer ignore
    lists), so a group ignored in k of L layers keeps count * k // L weights unquantized."""
    dtype = spec.dtype_bytes
    if scheme is None:
        return spec.params.total * dtype, 0
    wrapped = True  # aliases cost nothing and make wrapper paths (model.language_model.layers) match
    n_layers = max(spec.num_layers, 1)
    total = 0
    quantized = 0
    for g in spec.linears:
        by_layout: dict[Any, int] = {}
        for i in range(n_layers):
            layout = scheme.layout_for(module_paths(g.name, i, wrapped, spec.model_type), g.name)
            by_layout[layout] = by_layout.get(layout, 0) + 1
        if scheme.listed_only and None in by_layout and len(by_layout) > 1:
            # the checkpoint lists its modules layer by layer (ModelOpt MIXED_PRECISION): a group quantized in some
            # layers lives only in those (a hybrid's attention or MoE layers), not unquantized in the others
            del by_layout[None]
        assigned = 0
        items = sorted(by_layout.items(), key=lambda kv: -kv[1])
        for j, (layout, layers) in enumerate(items):
            count = g.count - assigned if j == len(items) - 1 else g.count * layers // n_layers
            assigned += count
            if layout is None:
                total += count * g.in_features * g.out_features * dtype
            else:
                total += count * layout.linear_bytes(g.in_features, g.out_features)
                quantized += count * g.in_features * g.out_features
    rest = spec.params.total - spec.linear_params
    return total + rest * dtype, quantized


# ---------------------------------------------------------------------------------------------------------------------
# the checkpoint as a weight format of the plan


@dataclass(frozen=True)
class CheckpointWeights(WeightFormat):
    """The weights as this checkpoint ships them: a WeightFormat whose bytes are the checkpoint's exact total
    (engines/weights.py returns total_bytes as is). Speed and quality rules follow the nearest registered format
    (`name`); `label` and `detail` say what the checkpoint really holds and where the number came from."""

    total_bytes: int = 0
    # bytes of the multimodal encoders inside total_bytes (headers: their tensors; index: their closed form); None
    # when total_bytes is the closed form of the decoder alone (engines/weights.py then charges them apart)
    encoder_bytes: int | None = None
    source: str = ""  # safetensors headers | model.safetensors.index.json | closed form
    detail: str = ""
    scheme_label: str = ""
    kv_cache_fp8: bool = False  # vLLM runs this checkpoint's KV cache in fp8 under --kv-cache-dtype auto


# formats that are not in formats.WEIGHT_FORMATS: how vLLM runs them (mxfp4.py / modelopt.py: native from
# Blackwell, a weight-only Marlin kernel on Ampere and Hopper)
_EXTRA = {
    "mxfp4": WeightFormat("mxfp4", "MXFP4", "OCP MX fp4 (e2m1) with an e8m0 scale per 32", 4, True, True, 10.0,
                          "low", ("hf", "vllm"), layout=Layout("mxfp4", 4, group_size=32)),
    "nvfp4": WeightFormat("nvfp4", "NVFP4", "NVIDIA fp4 (e2m1) with an fp8 scale per 16", 4, True, True, 10.0,
                          "low", ("vllm",), layout=Layout("nvfp4", 4, group_size=16, input_scales=2)),
}


def checkpoint_format(spec: Any, ck: Checkpoint) -> CheckpointWeights:
    """The baseline weight format of a checkpoint: its own quantization and its exact bytes."""
    base_name = ck.scheme.nearest if ck.scheme else ("fp32" if spec.dtype_bytes == 4 else "bf16")
    base = _EXTRA.get(base_name) or WEIGHT_FORMATS.get(base_name) or WEIGHT_FORMATS["bf16"]
    total = weights_total(spec, ck)
    label = ck.scheme.label if ck.scheme else _dtype_name(spec).upper().replace("BFLOAT16", "BF16").replace(
        "FLOAT16", "FP16").replace("FLOAT32", "FP32")
    return CheckpointWeights(
        name=base.name, label=f"checkpoint {label}", description=f"as the checkpoint ships: {label}",
        bits=base.bits, quantizes_linears=ck.scheme is not None, needs_unpack=base.needs_unpack,
        native_min_compute_capability=base.native_min_compute_capability, quality_risk=base.quality_risk,
        quality_risk_small=base.quality_risk_small, layout=base.layout,
        engines=("vllm",) if ck.scheme and ck.scheme.method == "modelopt" else ("hf", "vllm"),
        total_bytes=total.bytes, encoder_bytes=encoder_bytes_inside(spec, ck, total.source),
        source=total.source, detail=total.detail,
        kv_cache_fp8=bool(ck.scheme and ck.scheme.kv_cache_fp8),
        scheme_label=label)


def baseline_weights(spec: Any) -> CheckpointWeights | None:
    """The weight format of the plan's baseline row when the checkpoint says more than "bf16 as the config counts
    it": a quantization, or exact bytes (headers, index). None otherwise (the baseline stays the closed-form bf16)."""
    ck = getattr(spec, "checkpoint", None)
    if ck is None or (ck.scheme is None and ck.tensors is None and ck.index_total is None):
        return None
    cached = _FORMATS.get(id(spec))
    if cached is not None and cached[0] is spec:  # one plan asks several times; a header sum is worth keeping
        return cached[1]
    fmt = checkpoint_format(spec, ck)
    if len(_FORMATS) > 64:
        _FORMATS.clear()
    _FORMATS[id(spec)] = (spec, fmt)
    return fmt


_FORMATS: dict[int, tuple[Any, CheckpointWeights]] = {}


def weights_note(fmt: WeightFormat) -> str | None:
    """One line for explain and the JSON notes: what the checkpoint's weights are and where the bytes came from."""
    if not isinstance(fmt, CheckpointWeights):
        return None
    return f"weights as the checkpoint ships them ({fmt.scheme_label}): {fmt.total_bytes:,} B from {fmt.source}: " \
           f"{fmt.detail}"


def checkpoint_label(spec: Any) -> str:
    """The format the checkpoint ships in: its quantization's label, else its torch_dtype ("bfloat16")."""
    ck = getattr(spec, "checkpoint", None)
    return ck.scheme.label if ck is not None and ck.scheme is not None else _dtype_name(spec)
