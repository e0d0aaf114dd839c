"""A checkpoint's quantization, read from config.json's `quantization_config` (or ModelOpt's hf_quant_config.json),
and the exact bytes each quantized Linear weight takes as the checkpoint stores it and vLLM allocates it.

One function reads every form vLLM loads (vllm/model_executor/layers/quantization/__init__.py, QUANTIZATION_METHODS);
each layout below cites the vLLM file whose create_weights() allocates those tensors (the same tensors the
checkpoint's safetensors hold, so the closed form and a header sum agree). n = in_features x out_features.

Per quantized Linear (in x out, b bits, G = in / group_size groups), and the vLLM file (under
vllm/model_executor/layers/quantization/) whose create_weights() allocates it:
- awq, awq_marlin (awq.py): qweight int32 [in, out*b/32] + qzeros int32 [G, out*b/32] + scales fp16 [G, out].
- gptq, gptq_marlin (gptq.py): qweight int32 [in*b/32, out] + qzeros int32 [G, out*b/32] + scales fp16 [G, out]
  + g_idx int32 [in] (stored whatever desc_act; group_size -1: G = 1).
- fp8 (fp8.py): weight fp8 [out, in] + block-wise weight_scale_inv fp32 [ceil(out/bo), ceil(in/bi)], or a
  per-tensor weight_scale fp32; input_scale fp32 when activation_scheme is static.
- compressed-tensors (compressed_tensors/schemes/*.py), per config group: WNA16 pack-quantized (weight_packed
  int32 + weight_scale [out, G] + weight_shape int64[2] + packed zero points when asymmetric); W8A8 int8 / fp8
  (weight + fp32 scale per tensor, channel or block, input_scale when static); NVFP4 (weight_packed uint8 n/2 +
  fp8 scale per 16 + fp32 global scale(s)); MXFP4 (uint8 n/2 + e8m0 scale per 32).
- bitsandbytes (bitsandbytes.py; formats.py): 4-bit uint8 n/2 + fp32 absmax per 64 (double quant: uint8 absmax +
  fp32 absmax per 256 + 256-entry code); 8-bit int8 n + fp32 SCB per row.
- mxfp4, gpt-oss (mxfp4.py): routed experts only: blocks uint8 n/2 + scales uint8 (e8m0) n/32; the rest bf16.
- hqq (hqq_marlin.py): W_q 4-bit n/2 + scale and zero [out, in/64] in the compute dtype.
- modelopt (modelopt.py): FP8 fp8 n + fp32 weight_scale + fp32 input_scale; FP8_PER_CHANNEL_PER_TOKEN,
  FP8_PB_WO (128x128 blocks), MXFP8; NVFP4 uint8 n/2 + fp8 scale per 16 + fp32 weight_scale_2 + fp32 input_scale.
- torchao (torchao.py; layouts: torchao's tensor subclasses): Int4WeightOnly int4 n/2 + bf16 scale_and_zero
  [in/g, out, 2]; Int8WeightOnly / Int8DynamicActivationInt8Weight int8 n + bf16 scale per row;
  Float8WeightOnly / Float8DynamicActivationFloat8Weight fp8 n + fp32 scale per row (PerRow) or per tensor.

What stays unquantized, as vLLM decides it: embeddings and lm_head (not LinearBase layers), MoE routers (built with
quant_config=None in vLLM's MoE models, e.g. qwen3_moe.py, deepseek_v2.py, mixtral.py), and every module the
checkpoint's ignore list names (`modules_to_not_convert`, `ignore`, `ignored_layers`, `exclude_modules`,
`llm_int8_skip_modules`, `skip_modules`), matched the way each method matches them (exact or prefix, fnmatch globs,
`re:` regexes, substrings).

Module paths: ModelSpec.linears aggregates Linear weights by name; checkpoint.module_paths() rebuilds each one's path in
transformers' naming (model.layers.{i}.self_attn.q_proj, model.layers.{i}.mlp.experts.{e}.down_proj, ...) for every
layer i, so per-layer ignore lists are applied layer by layer. Linear names starting with "experts." are routed
experts, "shared_experts." shared ones, "router" routers; builders in model.py keep to that convention.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from .errors import UsageError, shown
from .layouts import Layout  # the layout of a checkpoint's Linears: read here, defined (with its bytes) there

KNOWN_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "fp8", "fbgemm_fp8", "bitsandbytes",
                 "mxfp4", "hqq", "modelopt", "modelopt_fp4", "torchao")


@dataclass(frozen=True)
class Rule:
    """A config group: the Linear weights it targets (empty: all) and how they are stored."""

    layout: Layout
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuantScheme:
    method: str  # as the config names it (awq, gptq, fp8, compressed-tensors, ...)
    label: str  # one line for tables and explain
    rules: tuple[Rule, ...]
    ignore: tuple[str, ...] = ()
    match: str = "exact"  # how ignore entries match a module path: exact | substring | component
    experts_only: bool = False  # mxfp4: only routed experts are quantized
    nearest: str = "bf16"  # the registered weight format whose speed and quality model applies
    # ModelOpt checkpoints with kv_cache_quant_algo FP8 (or a static fp8 kv_cache_scheme): vLLM resolves
    # --kv-cache-dtype auto to fp8_e4m3 for them (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string, read at
    # vllm-project/vllm@0024350b5da3; only quant_method modelopt*)
    kv_cache_fp8: bool = False
    notes: tuple[str, ...] = field(default=())
    # the config lists every quantized module layer by layer (ModelOpt MIXED_PRECISION quantized_layers), so a
    # Linear group found quantized in some layers exists only there (checkpoint.closed_form_bytes)
    listed_only: bool = False

    def layout_for(self, paths: list[str], name: str) -> Layout | None:
        """The layout of the Linear at any of `paths` (aliases of one module), or None when it stays unquantized."""
        if name in ("router", "shared_expert_gate") or name.endswith((".router", ".shared_expert_gate")):
            return None  # routers and Qwen3-Next's shared-expert gate: built with quant_config=None in vLLM
        if self.experts_only and not name.startswith("experts."):
            return None
        if self._ignored(paths):
            return None
        for rule in self.rules:
            if not rule.targets or any(_target_matches(t, p) for t in rule.targets for p in paths):
                return rule.layout
        return None

    def _ignored(self, paths: list[str]) -> bool:
        matcher = _ignore_matcher(self.ignore, self.match)
        return matcher is not None and any(matcher(path) for path in paths)


@lru_cache(maxsize=64)
def _ignore_matcher(patterns: tuple[str, ...], style: str):
    """One matcher for a whole ignore list, each entry matching as its method matches it:
    - `re:` entries (compressed-tensors): re.match from the start (utils.py _is_equal_or_regex_match);
    - substring (awq.py is_layer_skipped_awq, bitsandbytes.py is_layer_skipped_bnb): anywhere in the path;
    - component (hqq_marlin.py is_layer_skipped): equal to one dot-separated component (or a dotted run of them);
    - exact (fp8, modelopt, compressed-tensors names): the module itself or a parent of it, or an fnmatch glob
      (modelopt.py) on the module or its parent.
    Plain names are looked up in sets (a path's parents, components or substrings of the lengths listed), so the
    cost per path does not grow with the list: a real list has ~300 per-layer entries, a hostile one 100,000, and
    one regex alternation of them took seconds per model. Only `re:` entries and globs go through a regex."""
    names = set()
    regexes = []
    for pattern in dict.fromkeys(patterns):
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error:
                continue
            regexes.append(pattern[3:])
        else:
            names.add(pattern)
            if style == "exact" and any(ch in pattern for ch in "*?["):
                regexes += [fnmatch.translate(pattern), fnmatch.translate(pattern + ".*")]
    if not names and not regexes:
        return None
    regex = re.compile("|".join(f"(?:{r})" for r in regexes), re.S) if regexes else None
    lengths = sorted({len(n) for n in names})

    def matches(path: str) -> bool:
        if regex is not None and regex.match(path):
            return True
        if style == "substring":
            return any(path[i:i + n] in names for n in lengths for i in range(len(path) - n + 1))
        parts = path.split(".")
        if style == "component":
            return any(".".join(parts[i:j]) in names for i in range(len(parts)) for j in range(i + 1, len(parts) + 1))
        return any(".".join(parts[:j]) in names for j in range(1, len(parts) + 1))  # the module or a parent

    return matches


def _target_matches(target: str, path: str) -> bool:
    if target == "Linear":
        return True
    if target.startswith("re:"):
        try:
            return re.match(target[3:], path) is not None
        except re.error:
            return False
    return path == target or path.endswith("." + target) or path.startswith(target + ".")


# ---------------------------------------------------------------------------------------------------------------------
# reading the config


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"quantization_config {what} must be an integer (got {shown(value, 30)})")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"quantization_config {what} must be a list of module names")
    return tuple(value)


def find_quant_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """config.json's quantization_config, at the top level or (Kimi-K2.5) inside text_config."""
    qc = cfg.get("quantization_config")
    if qc is None and isinstance(cfg.get("text_config"), dict):
        qc = cfg["text_config"].get("quantization_config")
    # not an object: spec_from_config refuses the config with its own one-line message naming the field
    if not isinstance(qc, dict):
        return None
    if cfg.get("model_type") == "deepseek_v4" and str(qc.get("quant_method", "")).lower() == "fp8":
        # vLLM overrides fp8 to deepseek_v4_fp8 for this model type (models/deepseek_v4.py DeepseekV4FP8Config):
        # the experts follow the checkpoint's own expert format, the other Linears stay FP8 blocks
        experts = "nvfp4" if str(qc.get("moe_quant_algo", "")).upper() == "NVFP4" else str(
            cfg.get("expert_dtype") or "fp4").lower()
        return {**qc, "quant_method": "deepseek_v4_fp8", "expert_format": experts}
    return qc


def parse_scheme(qc: dict[str, Any] | None, hf_quant: dict[str, Any] | None = None) -> QuantScheme | None:
    """The scheme of a checkpoint, or None for an unquantized one. Unknown methods are a one-line UsageError."""
    if qc is not None and not qc.get("quant_method") and (
            "quant_algo" in qc or (isinstance(qc.get("producer"), dict) and qc["producer"].get("name") == "modelopt")):
        qc = {**qc, "quant_method": "modelopt"}  # ModelOpt's config.json copy without quant_method
    if (qc is None or not qc.get("quant_method")) and hf_quant is not None:
        # vLLM reads hf_quant_config.json when config.json has no quantization_config (ModelOpt exports)
        if not isinstance(hf_quant, dict):
            raise UsageError(f"hf_quant_config.json is not a JSON object (it is a {type(hf_quant).__name__}); "
                             "ModelOpt writes {\"quantization\": {...}}")
        quant = hf_quant.get("quantization")
        if not isinstance(quant, dict):
            raise UsageError("hf_quant_config.json has no 'quantization' object")
        return _modelopt({**quant, "ignore": quant.get("exclude_modules")})
    if qc is None:
        return None
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        raise UsageError("quantization_config has no quant_method; kvcalc cannot tell how the weights are stored")
    method = method.lower()
    reader = _READERS.get(method)
    if reader is None:
        raise UsageError(f"unknown quantization method {shown(method, 40)} in quantization_config "
                         f"(kvcalc reads: {', '.join(KNOWN_METHODS)})")
    return reader(qc)


def _awq(qc: dict[str, Any]) -> QuantScheme:
    bits = _int(qc.get("bits", qc.get("w_bit", 4)), "bits")
    group = _int(qc.get("group_size", qc.get("q_group_size", 128)), "group_size")
    if bits not in (4, 8):
        raise UsageError(f"AWQ with {bits}-bit weights is not a layout vLLM loads (4 or 8)")
    version = str(qc.get("version", "gemm")).lower()
    if version not in ("gemm", "gemv", "gemv_fast", "marlin", "exllama"):
        raise UsageError(f"AWQ version {shown(version, 20)} is not one kvcalc knows (gemm, gemv, marlin)")
    layout = Layout("awq", bits, group)
    return QuantScheme(qc["quant_method"], f"AWQ int{bits} group {group} {version.upper()}", (Rule(layout),),
                       ignore=_strings(qc.get("modules_to_not_convert"), "modules_to_not_convert"),
                       match="substring", nearest="awq")


def _gptq(qc: dict[str, Any]) -> QuantScheme:
    bits, group = _int(qc.get("bits", 4), "bits"), _int(qc.get("group_size", 128), "group_size")
    if bits not in (2, 3, 4, 8):
        raise UsageError(f"GPTQ with {bits}-bit weights is not a layout vLLM loads (2, 3, 4 or 8)")
    desc = bool(qc.get("desc_act", False))
    layout = Layout("gptq", bits, group if group > 0 else 0)
    grouping = f"group {group}" if group > 0 else "per channel"
    notes = ("desc_act: activation order, g_idx permutes the groups" if desc else "",)
    if bits == 3:
        notes += ("3-bit GPTQ runs on vLLM's exllama gptq kernel, not Marlin",)
    return QuantScheme(qc["quant_method"], f"GPTQ int{bits}, {grouping}{', desc_act' if desc else ''}",
                       (Rule(layout),), ignore=_strings(qc.get("modules_to_not_convert"), "modules_to_not_convert"),
                       match="substring", nearest="gptq", notes=tuple(n for n in notes if n))


def _fp8(qc: dict[str, Any]) -> QuantScheme:
    block = qc.get("weight_block_size")
    static = str(qc.get("activation_scheme", "dynamic")).lower() == "static"
    if block is not None:
        if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
            raise UsageError(f"quantization_config weight_block_size must be two positive integers "
                             f"(got {shown(block, 30)})")
        layout = Layout("fp8", 8, strategy="block", block=(block[0], block[1]), scale_bytes=4)
        label = f"FP8 e4m3, {block[0]}x{block[1]} block scales"
    else:
        layout = Layout("fp8", 8, strategy="tensor", scale_bytes=4, input_scales=1 if static else 0)
        label = "FP8 e4m3, per-tensor scales"
    ignore = _strings(qc.get("modules_to_not_convert") or qc.get("ignored_layers"), "modules_to_not_convert")
    return QuantScheme("fp8", label, (Rule(layout),), ignore=ignore, match="exact", nearest="fp8")


def _fbgemm_fp8(qc: dict[str, Any]) -> QuantScheme:
    """Meta's FP8 checkpoints of Llama 3.1 (quant_method fbgemm_fp8; vllm/model_executor/layers/quantization/
    fbgemm_fp8.py FBGEMMFp8Config): weight fp8 [out, in] + a per-channel fp32 weight_scale [out, 1]
    (FBGEMMFp8LinearMethod.create_weights), activations quantized per token at run time (activation_scale_ub caps
    the scale). Every module of modules_to_not_convert stays bf16 (get_quant_method: is_layer_skipped on the
    ignore_list, a fused qkv / gate_up skipped when its shards are): in Meta's 405B checkpoint that is every
    self-attention projection and the first and last layers' MLPs (catalog llama-3.1-405b-fp8)."""
    ignore = _strings(qc.get("modules_to_not_convert"), "modules_to_not_convert")
    return QuantScheme("fbgemm_fp8", "FBGEMM FP8 e4m3, per-channel scales, dynamic per-token activations",
                       (Rule(Layout("fp8", 8, strategy="channel", scale_bytes=4)),), ignore=ignore, match="exact",
                       nearest="fp8")


def _bnb(qc: dict[str, Any]) -> QuantScheme:
    skip = _strings(qc.get("llm_int8_skip_modules"), "llm_int8_skip_modules")
    if qc.get("load_in_4bit"):
        kind = "nf4-dq" if qc.get("bnb_4bit_use_double_quant") else "nf4"
        qtype = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()
        label = f"bitsandbytes 4-bit {qtype}{' + double quant' if kind == 'nf4-dq' else ''}"
        return QuantScheme("bitsandbytes", label, (Rule(Layout(kind, 4)),), ignore=skip, match="substring",
                           nearest=kind)
    if qc.get("load_in_8bit"):
        return QuantScheme("bitsandbytes", "bitsandbytes 8-bit (LLM.int8)", (Rule(Layout("bnb8", 8)),), ignore=skip,
                           match="substring", nearest="int8")
    raise UsageError("bitsandbytes quantization_config sets neither load_in_4bit nor load_in_8bit")


def _mxfp4(qc: dict[str, Any]) -> QuantScheme:
    # vllm mxfp4.py Mxfp4Config.get_quant_method: FusedMoE layers get Mxfp4MoEMethod, Linear layers stay unquantized
    return QuantScheme("mxfp4", "MXFP4 experts (attention, router, embeddings in bf16)",
                       (Rule(Layout("mxfp4", 4, group_size=32)),),
                       ignore=_strings(qc.get("modules_to_not_convert"), "modules_to_not_convert"),
                       match="exact", experts_only=True, nearest="mxfp4")


def _hqq(qc: dict[str, Any]) -> QuantScheme:
    inner = qc.get("quant_config") or {}
    params = inner.get("weight_quant_params") if isinstance(inner, dict) else None
    if not isinstance(params, dict):
        raise UsageError("hqq quantization_config has no quant_config.weight_quant_params (nbits, group_size)")
    bits, group = _int(params.get("nbits"), "nbits"), _int(params.get("group_size"), "group_size")
    if bits != 4 or group != 64:
        raise UsageError(f"hqq {bits}-bit group {group}: vLLM loads only 4-bit, group 64 (hqq_marlin.py)")
    return QuantScheme("hqq", "HQQ 4-bit, group 64", (Rule(Layout("hqq", 4, group_size=64)),),
                       ignore=_strings(qc.get("skip_modules"), "skip_modules"), match="component", nearest="hqq4")


def _modelopt(q: dict[str, Any]) -> QuantScheme:
    algo = str(q.get("quant_algo") or "").upper()
    ignore = _strings(q.get("ignore") or q.get("exclude_modules"), "exclude_modules")
    kv = str(q.get("kv_cache_quant_algo") or "").upper() == "FP8" or _kv_scheme_fp8(q.get("kv_cache_scheme"))
    if algo == "FP8":  # ModelOptFp8LinearMethod: weight fp8, weight_scale and input_scale fp32 per tensor
        layout, label, nearest = Layout("fp8", 8, strategy="tensor", scale_bytes=4, input_scales=1), \
            "ModelOpt FP8, per-tensor scales", "fp8"
    elif algo == "FP8_PER_CHANNEL_PER_TOKEN":
        layout, label, nearest = Layout("fp8", 8, strategy="channel", scale_bytes=4), \
            "ModelOpt FP8, per-channel scales", "fp8"
    elif algo == "FP8_PB_WO":
        layout, label, nearest = Layout("fp8", 8, strategy="block", block=(128, 128), scale_bytes=4), \
            "ModelOpt FP8 128x128 block (weight only)", "fp8"
    elif algo == "NVFP4":  # ModelOptNvFp4LinearMethod: uint8 n/2, fp8 scale per 16, weight_scale_2 + input_scale
        group = _int(q.get("group_size", 16), "group_size")
        layout, label, nearest = Layout("nvfp4", 4, group_size=group, input_scales=2), \
            f"ModelOpt NVFP4, group {group}", "nvfp4"
    elif algo == "MXFP8":
        layout, label, nearest = Layout("mxfp8", 8), "ModelOpt MXFP8", "fp8"
    elif algo == "MIXED_PRECISION":
        return _modelopt_mixed(q, ignore, kv)
    else:
        raise UsageError(f"unknown ModelOpt quant_algo {shown(algo or '(none)', 40)} "
                         "(kvcalc reads FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, MXFP8)")
    return QuantScheme("modelopt", label, (Rule(layout),), ignore=ignore, match="exact", nearest=nearest,
                       kv_cache_fp8=kv)


# ModelOpt per-layer algorithms of a MIXED_PRECISION checkpoint (modelopt.py ModelOptMixedPrecisionConfig reads
# quantized_layers the same way: each listed module in its own algorithm, every other module unquantized)
_MIXED_LAYOUTS = {
    "FP8": Layout("fp8", 8, strategy="tensor", scale_bytes=4, input_scales=1),
    "NVFP4": Layout("nvfp4", 4, group_size=16, input_scales=2),
    "W4A16_NVFP4": Layout("nvfp4", 4, group_size=16, input_scales=1),  # weight_scale_2, no activation scale
    "MXFP8": Layout("mxfp8", 8),
}


def _modelopt_mixed(q: dict[str, Any], ignore: tuple[str, ...], kv: bool) -> QuantScheme:
    """quant_algo MIXED_PRECISION (Qwen3.6 NVFP4, Nemotron 3.5 Lightning): quantized_layers maps module names to
    their own algorithm; unlisted modules stay unquantized. One rule per algorithm whose target is one regex over
    the listed layers (_mixed_target: checkpoint names -> the module paths kvcalc sizes)."""
    layers = q.get("quantized_layers")
    if not isinstance(layers, dict) or not layers:
        raise UsageError("ModelOpt MIXED_PRECISION config has no quantized_layers")
    by_algo: dict[str, set[str]] = {}
    for module, spec in layers.items():
        algo = str(spec.get("quant_algo") if isinstance(spec, dict) else "").upper()
        if algo not in _MIXED_LAYOUTS:
            raise UsageError(f"unknown ModelOpt quant_algo {shown(algo or '(none)', 40)} in quantized_layers "
                             f"(kvcalc reads {', '.join(_MIXED_LAYOUTS)})")
        target = _mixed_target(str(module))
        if target:
            by_algo.setdefault(algo, set()).add(target)
    rules, counts = [], {}
    for algo, names in sorted(by_algo.items()):
        rules.append(Rule(_MIXED_LAYOUTS[algo], targets=("re:(?:" + "|".join(sorted(names)) + r")\Z",)))
        counts[algo] = len(names)
    if not counts:
        raise UsageError("ModelOpt MIXED_PRECISION quantized_layers names no decoder-layer module")
    main = max(counts, key=lambda a: counts[a])
    label = "ModelOpt mixed precision (" + ", ".join(f"{a} x{n}" for a, n in sorted(counts.items())) + ")"
    return QuantScheme("modelopt", label, tuple(rules), ignore=ignore, match="exact",
                       nearest="nvfp4" if "NVFP4" in main else "fp8", kv_cache_fp8=kv, listed_only=True)


def _mixed_target(module: str) -> str | None:
    """A regex for the kvcalc module paths (checkpoint.module_paths) one quantized_layers entry covers. Checkpoints
    name modules their own way: backbone./model.language_model. prefixes, a mixer. or mlp. parent, per-expert
    indices or the whole experts block, Qwen3.5's split in_proj_qkv / in_proj_z (kvcalc: in_proj_qkvz) and
    shared_expert (kvcalc: shared_experts). Entries outside the decoder layers (lm_head) are sized elsewhere."""
    m = re.match(r"(?:.*\.)?layers\.(\d+)\.(.+)\Z", module)
    if not m:
        return None
    layer, rest = m.group(1), re.sub(r"^(?:self_attn|mlp|mixer|block_sparse_moe)\.", "", m.group(2))
    rest = re.sub(r"^shared_expert\.", "shared_experts.", rest)
    # MiniMax's experts.N.w1 / w3 / w2 are kvcalc's gate_proj / up_proj / down_proj
    rest = re.sub(r"^(experts\.\d+\.)w([123])\Z", lambda x: x.group(1) + {"1": "gate_proj", "3": "up_proj",
                                                                            "2": "down_proj"}[x.group(2)], rest)
    rest = re.sub(r"^linear_attn\.in_proj_(?:qkv|z)\Z", "linear_attn.in_proj_qkvz", rest)
    if rest == "experts":
        role = r"experts\..+"
    else:
        role = re.escape(re.sub(r"^experts\.\d+\.", "experts.0.", rest))
    return rf"(?:.*\.)?layers\.{layer}\.(?:self_attn\.|mlp\.|mixer\.)?{role}"


def _kv_scheme_fp8(scheme: Any) -> bool:
    """A static fp8 kv_cache_scheme, as vllm/utils/torch_utils.py get_kv_cache_quant_algo_string reads it."""
    return (isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8
            and scheme.get("dynamic") is False)


def _ct_layout(weights: dict[str, Any], acts: dict[str, Any] | None, fmt: str) -> tuple[Layout, str, str]:
    """One compressed-tensors config group -> (layout, label, nearest format), following vLLM's
    compressed_tensors.py _get_scheme_from_parts: which scheme class a weights/input_activations pair selects."""
    bits = _int(weights.get("num_bits"), "weights.num_bits")
    wtype = str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy") or "tensor").lower()
    group = weights.get("group_size")
    group = _int(group, "weights.group_size") if group is not None else 0
    symmetric = weights.get("symmetric", True) is not False
    static_acts = bool(acts) and not acts.get("dynamic", False)
    if wtype == "float" and bits == 4:  # NVFP4 (tensor_group, group 16) or MXFP4 (group 32, e8m0 scales)
        if group == 32 or "mxfp4" in fmt:
            return Layout("mxfp4", 4, group_size=32), "MXFP4 (compressed-tensors)", "mxfp4"
        globals_ = 2 if acts else 1  # weight_global_scale (+ input_global_scale for W4A4)
        return (Layout("nvfp4", 4, group_size=group or 16, input_scales=globals_),
                f"NVFP4 {'W4A4' if acts else 'W4A16'} (compressed-tensors)", "nvfp4")
    if wtype == "float" and bits == 8:
        block = weights.get("block_structure")
        if strategy == "block":
            if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
                raise UsageError("compressed-tensors block strategy needs block_structure [rows, cols]")
            layout = Layout("fp8", 8, strategy="block", block=(block[0], block[1]), scale_bytes=4)
        else:
            layout = Layout("fp8", 8, strategy="channel" if strategy == "channel" else "tensor", scale_bytes=4,
                            input_scales=1 if static_acts else 0)
        return layout, f"FP8 {'W8A8' if acts else 'W8A16'}, {layout.describe()} (compressed-tensors)", "fp8"
    if wtype == "int" and acts and bits == 8:  # W8A8 int8: int8 weight + fp32 scale (CompressedTensorsW8A8Int8)
        layout = Layout("int8", 8, strategy="channel" if strategy == "channel" else "tensor", scale_bytes=4,
                        input_scales=1 if static_acts else 0)
        return layout, f"INT8 W8A8, {layout.describe()} (compressed-tensors)", "int8"
    if wtype == "int" and not acts and bits in (4, 8):  # WNA16 (CompressedTensorsWNA16): pack-quantized
        if strategy not in ("group", "channel"):
            raise UsageError(f"compressed-tensors W{bits}A16 with strategy {shown(strategy, 20)} is not a layout "
                             "vLLM loads (group or channel)")
        layout = Layout("wna16", bits, group_size=group if strategy == "group" else 0, zero_points=not symmetric)
        return layout, f"W{bits}A16 int{bits} {layout.describe().split(' ', 1)[1]} (compressed-tensors)", "gptq"
    raise UsageError(f"compressed-tensors scheme {wtype}{bits} weights with "
                     f"{'quantized' if acts else 'no'} input activations is not one kvcalc reads")


def _compressed_tensors(qc: dict[str, Any]) -> QuantScheme:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise UsageError("compressed-tensors quantization_config has no config_groups")
    fmt = str(qc.get("format") or "").lower()
    sparsity = qc.get("sparsity_config")
    if fmt == "marlin-24" or (isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense")):
        raise UsageError("compressed-tensors with 2:4 sparsity (marlin-24 / sparse-24-bitmask) stores half the "
                         "weights plus metadata; kvcalc has no layout for it yet")
    rules, labels, nearest = [], [], []
    for key, group in groups.items():
        if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
            raise UsageError(f"compressed-tensors config group {shown(key, 30)} has no weights scheme")
        group_fmt = str(group.get("format") or fmt).lower()
        layout, label, near = _ct_layout(group["weights"], group.get("input_activations"), group_fmt)
        rules.append(Rule(layout, _strings(group.get("targets"), f"{key}.targets") or ("Linear",)))
        labels.append(label)
        nearest.append(near)
    ignore = _strings(qc.get("ignore"), "ignore")
    return QuantScheme("compressed-tensors", " + ".join(dict.fromkeys(labels)), tuple(rules), ignore=ignore,
                       match="exact", nearest=nearest[0])


_TORCHAO = {
    # torchao config class -> (layout, nearest); group sizes from the config's _data when given
    "Int4WeightOnlyConfig": ("int4-tinygemm", "awq"),
    "Int8WeightOnlyConfig": ("int8-row-bf16", "int8"),
    "Int8DynamicActivationInt8WeightConfig": ("int8-row-bf16", "int8"),
    "Float8WeightOnlyConfig": ("fp8-row", "fp8"),
    "Float8DynamicActivationFloat8WeightConfig": ("fp8-granular", "fp8"),
}


def _torchao(qc: dict[str, Any]) -> QuantScheme:
    qt = qc.get("quant_type")
    if isinstance(qt, dict) and "default" in qt:
        qt = qt["default"]
    if not isinstance(qt, dict) or not isinstance(qt.get("_type"), str):
        raise UsageError("torchao quantization_config has no quant_type {_type, _data} kvcalc can read")
    name, data = qt["_type"], qt.get("_data") or {}
    if name not in _TORCHAO:
        raise UsageError(f"torchao {shown(name, 50)} is not a layout kvcalc reads "
                         f"({', '.join(_TORCHAO)}); pass a checkpoint folder so its safetensors headers give the bytes")
    kind, nearest = _TORCHAO[name]
    if kind == "int4-tinygemm":
        group = _int(data.get("group_size", 128), "group_size")
        layout = Layout("int4-tinygemm", 4, group_size=group)
        label = f"torchao int4 weight-only, group {group}"
    elif kind == "int8-row-bf16":  # int8 weight + a bf16 scale per output row
        layout = Layout("int8", 8, strategy="channel", scale_bytes=2)
        label = "torchao int8 weight-only" if name.startswith("Int8Weight") else "torchao int8 W8A8"
    else:
        granularity = str(data.get("granularity", "PerRow" if kind == "fp8-row" else "PerTensor"))
        per_row = "PerRow" in granularity or kind == "fp8-row"
        layout = Layout("fp8", 8, strategy="channel" if per_row else "tensor", scale_bytes=4)
        label = f"torchao float8 {'weight-only' if kind == 'fp8-row' else 'dynamic'}, {layout.describe()}"
    modules = _strings(qc.get("modules_to_not_convert"), "modules_to_not_convert")
    return QuantScheme("torchao", label, (Rule(layout),), ignore=modules, match="substring", nearest=nearest)


def _deepseek_v4_fp8(qc: dict[str, Any]) -> QuantScheme:
    """DeepseekV4FP8Config.get_quant_method: FusedMoE experts MXFP4 (expert_dtype "fp4", group 32, e8m0 scales) or
    FP8 blocks (expert_dtype "fp8"); NVIDIA's NVFP4 exports (moe_quant_algo NVFP4) carry NVFP4 experts; every other
    Linear is an FP8 128x128 block."""
    base = _fp8(qc)
    fmt = qc.get("expert_format", "fp4")
    if fmt == "fp8":
        return replace(base, method="deepseek_v4_fp8", label=base.label + " (experts too)")
    if fmt == "nvfp4":
        experts, name = Layout("nvfp4", 4, group_size=16, input_scales=2), "NVFP4 experts, group 16"
    elif fmt == "fp4":
        experts, name = Layout("mxfp4", 4, group_size=32), "MXFP4 experts, group 32"
    else:
        raise UsageError(f"DeepSeek V4 expert_dtype {shown(fmt, 20)} is not one vLLM loads (fp4, fp8)")
    rules = (Rule(experts, targets=(r"re:.*\.experts\.\d+\.",)),) + base.rules
    return QuantScheme("deepseek_v4_fp8", f"{name}; other Linears {base.label}", rules, ignore=base.ignore,
                       match=base.match, nearest="nvfp4" if fmt == "nvfp4" else "mxfp4")


_READERS = {
    "deepseek_v4_fp8": _deepseek_v4_fp8,
    "awq": _awq, "awq_marlin": _awq,
    "gptq": _gptq, "gptq_marlin": _gptq,
    "fp8": _fp8,
    "fbgemm_fp8": _fbgemm_fp8,
    "bitsandbytes": _bnb,
    "mxfp4": _mxfp4,
    "hqq": _hqq,
    "compressed-tensors": _compressed_tensors, "compressed_tensors": _compressed_tensors,
    "modelopt": _modelopt, "modelopt_fp4": _modelopt,
    "torchao": _torchao,
}
