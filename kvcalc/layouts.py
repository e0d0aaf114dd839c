"""How a Linear weight is laid out in memory: one `Layout` per storage scheme, and the only byte formulas of a
Linear in kvcalc. The registered weight formats (kvcalc/formats.py) are presets of it, and a checkpoint's
quantization_config (kvcalc/quant_config.py) is read into one, so a new weight format is one registry entry.

Each formula follows the library's own tensors: AutoAWQ/GPTQ qweight/qzeros/scales/g_idx, compressed-tensors
weight_packed/weight_scale/weight_shape (vLLM compressed_tensors_wNa16.py, _w8a8_int8.py), vLLM Fp8LinearMethod's
per-tensor fp32 weight_scale, bitsandbytes Params4bit (absmax per 64, double quant) and Int8Params (SCB per row), hqq's
W_q with scale and zero per group, ModelOpt NVFP4, OCP MX formats, torchao int4 tinygemm.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .units import ceil_div as _cdiv


@dataclass(frozen=True)
class Layout:
    """How one Linear weight is stored. `kind` picks the formula; the rest are its parameters."""

    kind: str  # dense | awq | gptq | fp8 | int8 | wna16 | nvfp4 | mxfp4 | mxfp8 | nf4 | nf4-dq | bnb8 | hqq | int4-tinygemm
    bits: int
    group_size: int = 0  # elements per scale along the input axis; 0: per channel (one group per row)
    strategy: str = "tensor"  # fp8/int8 scales: tensor | channel | block | group
    block: tuple[int, int] | None = None  # (out, in) block of block-wise scales
    scale_bytes: int = 2  # bytes of one scale (fp16/bf16 2, fp32 4, fp8/e8m0 1); 0: the compute dtype's
    zero_points: bool = False  # asymmetric WNA16: packed zero points stored too
    input_scales: int = 0  # fp32 scalars stored per Linear besides the weight scales (static input scale, globals)
    flat_groups: bool = False  # hqq: groups over the flattened weight (hqq's reshape([-1, group])), not per row

    def linear_bytes(self, fin: int, fout: int, dtype_bytes: int = 2) -> int:
        """Bytes of one Linear weight of `fin` x `fout` (bias excluded: biases stay in the compute dtype)."""
        if self.scale_bytes == 0:
            return replace(self, scale_bytes=dtype_bytes).linear_bytes(fin, fout, dtype_bytes)
        n, b = fin * fout, self.bits
        if self.kind == "dense":  # unquantized: every weight in `bits`
            return n * b // 8
        if self.kind in ("awq", "gptq"):
            groups = 1 if self.group_size <= 0 else _cdiv(fin, self.group_size)
            packed = n * b // 8 if n * b % 8 == 0 else _cdiv(n * b, 32) * 4
            zeros = _cdiv(groups * fout * b, 32) * 4
            scales = groups * fout * self.scale_bytes
            return packed + zeros + scales + (fin * 4 if self.kind == "gptq" else 0)
        if self.kind == "wna16":
            groups = 1 if self.group_size <= 0 else _cdiv(fin, self.group_size)
            packed = fout * _cdiv(fin * b, 32) * 4  # weight_packed int32 [out, in * b / 32]
            zeros = _cdiv(fout * b, 32) * 4 * groups if self.zero_points else 0  # int32 [out * b / 32, G]
            return packed + groups * fout * self.scale_bytes + 2 * 8 + zeros  # + weight_shape int64 [2]
        if self.kind in ("fp8", "int8"):
            if self.strategy == "block" and self.block:
                scales = _cdiv(fout, self.block[0]) * _cdiv(fin, self.block[1])
            elif self.strategy == "channel":
                scales = fout
            elif self.strategy == "group":
                scales = fout * _cdiv(fin, self.group_size)
            else:
                scales = 1
            return n + scales * self.scale_bytes + 4 * self.input_scales
        if self.kind == "nvfp4":  # uint8 [out, in/2] + fp8 e4m3 scale per 16 + fp32 global scale(s)
            return _cdiv(n, 2) + fout * _cdiv(fin, self.group_size or 16) + 4 * self.input_scales
        if self.kind == "mxfp4":  # uint8 [out, in/2] (two e2m1 per byte) + one e8m0 byte per 32
            return _cdiv(n, 2) + fout * _cdiv(fin, self.group_size or 32)
        if self.kind == "mxfp8":
            return n + fout * _cdiv(fin, 32)
        if self.kind == "nf4":  # bitsandbytes Params4bit: uint8 n/2 + fp32 absmax per 64
            return _cdiv(n, 2) + _cdiv(n, 64) * 4
        if self.kind == "nf4-dq":  # absmax as uint8 + fp32 absmax per 256 of them + fp32 offset + 256-entry code
            blocks = _cdiv(n, 64)
            return _cdiv(n, 2) + blocks + _cdiv(blocks, 256) * 4 + 4 + 256 * 4
        if self.kind == "bnb8":  # Int8Params: int8 + fp32 SCB per output row
            return n + fout * 4
        if self.kind == "hqq":  # W_q packed b-bit + zero and scale [out, in/group] in the compute dtype
            groups = _cdiv(n, self.group_size) if self.flat_groups else fout * _cdiv(fin, self.group_size)
            return _cdiv(n * b, 8) + 2 * groups * self.scale_bytes
        if self.kind == "int4-tinygemm":  # torchao Int4WeightOnly: packed int4 + bf16 scale_and_zero [in/g, out, 2]
            return _cdiv(n, 2) + _cdiv(fin, self.group_size) * fout * 2 * 2
        raise AssertionError(f"no byte formula for layout {self.kind}")

    def describe(self) -> str:
        if self.kind == "dense":
            return f"{self.bits}-bit"
        if self.kind in ("awq", "gptq", "wna16"):
            g = f"group {self.group_size}" if self.group_size > 0 else "per channel"
            return f"int{self.bits} {g}"
        if self.kind in ("fp8", "int8"):
            scale = {"block": f"{self.block[0]}x{self.block[1]} block" if self.block else "block",
                     "channel": "per-channel", "group": f"group {self.group_size}"}.get(self.strategy, "per-tensor")
            return f"{self.kind} {scale} scales"
        return {"nvfp4": "NVFP4 (group 16)", "mxfp4": "MXFP4 (group 32)", "mxfp8": "MXFP8", "nf4": "NF4",
                "nf4-dq": "NF4 double-quant", "bnb8": "int8 (LLM.int8)", "hqq": f"HQQ {self.bits}-bit",
                "int4-tinygemm": f"int4 group {self.group_size}"}.get(self.kind, self.kind)
