"""Reading a checkpoint: safetensors headers (tiny real files written here with struct + json), the index's
total_size, a huggingface_hub cache laid out on disk (offline), and the bad inputs that must be one line."""

import json
import shutil
import struct
from pathlib import Path

import pytest

from kvcalc.catalog import catalog_entry
from kvcalc.checkpoint import (cached_snapshot, checkpoint_format, closed_form_bytes, load_checkpoint,
                               weights_total)
from kvcalc.errors import UsageError
from kvcalc.model import spec_from_config
from kvcalc.safetensors_header import read_header

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
QWEN_05B = catalog_entry("qwen2.5-0.5b")["config"]  # Qwen/Qwen2.5-0.5B-Instruct's config.json

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "F8_E4M3": 1, "I64": 8}


def write_safetensors(path: Path, tensors: dict, metadata: dict | None = None, *, pad_to: int = 8) -> int:
    """A real .safetensors file: 8-byte little-endian header length, JSON header, zero-filled data. Returns its
    data bytes."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % pad_to)  # the format pads the header with spaces
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)  # zero-filled (sparse): only the header is ever read
    return offset


def test_header_dtype_times_shape(tmp_path):
    f = tmp_path / "model.safetensors"
    data = write_safetensors(f, {"model.embed_tokens.weight": ("BF16", (10, 4)),
                                 "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", (4, 4)),
                                 "model.layers.0.self_attn.q_proj.weight_scale_inv": ("F32", (1, 1)),
                                 "model.layers.0.mlp.down_proj.qweight": ("I32", (3, 2))}, {"format": "pt"})
    entries = read_header(str(f))
    assert {e.name: e.nbytes for e in entries} == {"model.embed_tokens.weight": 80,
                                                   "model.layers.0.self_attn.q_proj.weight": 16,
                                                   "model.layers.0.self_attn.q_proj.weight_scale_inv": 4,
                                                   "model.layers.0.mlp.down_proj.qweight": 24}
    assert sum(e.nbytes for e in entries) == data == 124


def _bad(tmp_path, raw: bytes):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(raw)
    with pytest.raises(UsageError) as exc:
        read_header(str(f))
    msg = str(exc.value)
    assert "\n" not in msg and "bad.safetensors" in msg
    return msg


def test_bad_headers_are_one_line(tmp_path):
    assert "too short" in _bad(tmp_path, b"\x01\x02")
    assert "over the 100 MiB limit" in _bad(tmp_path, struct.pack("<Q", 2**40) + b"{}")
    assert "runs past the end" in _bad(tmp_path, struct.pack("<Q", 100) + b"{}")
    assert "not valid JSON" in _bad(tmp_path, struct.pack("<Q", 5) + b"{nope")
    assert "not a JSON object" in _bad(tmp_path, struct.pack("<Q", 2) + b"[]")
    head = json.dumps({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode()
    assert "unknown dtype" in _bad(tmp_path, struct.pack("<Q", len(head)) + head + b"\0\0")
    head = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    assert "do not hold BF16" in _bad(tmp_path, struct.pack("<Q", len(head)) + head + bytes(6))
    head = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    assert "truncated" in _bad(tmp_path, struct.pack("<Q", len(head)) + head + bytes(4))
    head = json.dumps({"w": {"dtype": "BF16", "shape": [-4], "data_offsets": [0, 8]}}).encode()
    assert "bad shape" in _bad(tmp_path, struct.pack("<Q", len(head)) + head + bytes(8))


def _folder(tmp_path, cfg=QWEN_05B, name="ckpt"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_folder_headers_win_and_mtp_layers_are_left_out(tmp_path):
    folder = _folder(tmp_path)
    a = write_safetensors(folder / "model-00001-of-00002.safetensors",
                          {"model.embed_tokens.weight": ("BF16", (151936, 896))})
    norms = {f"model.layers.{i}.input_layernorm.weight": ("BF16", (896,)) for i in range(23)}  # every layer: complete
    b = write_safetensors(folder / "model-00002-of-00002.safetensors",
                          {**norms, "model.layers.23.mlp.down_proj.weight": ("BF16", (896, 4864)),
                           "model.layers.24.mlp.down_proj.weight": ("BF16", (896, 4864)),  # past layer 23: MTP
                           "mtp.fc.weight": ("BF16", (896, 1792))})  # Qwen3-Next / Qwen3.5 MTP naming
    (folder / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 123}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                                        "x": "model-00002-of-00002.safetensors"}}))
    cfg, name, ck = load_checkpoint(str(folder))
    assert name == "ckpt" and ck.scheme is None and ck.header_files == 2
    spec = spec_from_config(cfg, name)
    total = weights_total(spec, ck)
    assert total.source == "safetensors headers"
    assert total.bytes == a + b - 896 * 4864 * 2 - 896 * 1792 * 2 == (151936 * 896 + 896 * 4864 + 23 * 896) * 2
    assert "MTP" in total.detail


def test_index_total_when_shards_are_absent(tmp_path):
    folder = _folder(tmp_path)
    (folder / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 988_065_664}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    cfg, _, ck = load_checkpoint(str(folder / "config.json"))
    total = weights_total(spec_from_config(cfg), ck)
    assert (total.source, total.bytes) == ("model.safetensors.index.json", 988_065_664)


def test_closed_form_when_nothing_else(tmp_path):
    cfg = {**QWEN_05B, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                               "zero_point": True, "version": "gemm"}}
    folder = _folder(tmp_path, cfg)
    cfg, _, ck = load_checkpoint(str(folder))
    spec = spec_from_config(cfg)
    total = weights_total(spec, ck)
    assert total.source == "closed form" and total.bytes == 458_314_496 == closed_form_bytes(spec, ck.scheme)[0]
    fmt = checkpoint_format(spec, ck)
    assert (fmt.name, fmt.total_bytes, fmt.label) == ("awq", 458_314_496, "checkpoint AWQ int4 group 128 GEMM")


def test_modelopt_hf_quant_config_json_is_read(tmp_path):
    cfg = json.loads((FIXTURES / "nvidia--Llama-3.1-70B-Instruct-FP8.json").read_text())
    folder = _folder(tmp_path, cfg)
    shutil.copy(FIXTURES / "nvidia--Llama-3.1-70B-Instruct-FP8.hf_quant_config.json", folder / "hf_quant_config.json")
    _, _, ck = load_checkpoint(str(folder))
    assert ck.scheme.label == "ModelOpt FP8, per-tensor scales" and ck.scheme.kv_cache_fp8


def _hub_cache(tmp_path, monkeypatch, repo="acme/tiny-qwen", with_shard=True):
    """The huggingface_hub cache layout: models--org--name/{refs/main, blobs/, snapshots/<commit>/ -> blobs}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = tmp_path / "hub"
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    blobs = repo_dir / "blobs"
    blobs.mkdir()
    (blobs / "cfgblob").write_text(json.dumps(QWEN_05B))
    (snap / "config.json").symlink_to(Path("../../blobs/cfgblob"))
    data = 0
    if with_shard:
        data = write_safetensors(blobs / "stblob", {"model.embed_tokens.weight": ("BF16", (151936, 896))})
        (snap / "model.safetensors").symlink_to(Path("../../blobs/stblob"))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snap, data


def test_hub_id_offline_from_the_cache(tmp_path, monkeypatch):
    snap, data = _hub_cache(tmp_path, monkeypatch)
    assert cached_snapshot("acme/tiny-qwen") == snap
    cfg, name, ck = load_checkpoint("acme/tiny-qwen")
    assert name == "acme/tiny-qwen" and cfg["model_type"] == "qwen2"
    total = weights_total(spec_from_config(cfg), ck)
    assert (total.source, total.bytes) == ("safetensors headers", data)


def test_hub_id_without_huggingface_hub_reads_the_cache(tmp_path, monkeypatch):
    import builtins

    _, data = _hub_cache(tmp_path, monkeypatch)
    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    cfg, _, ck = load_checkpoint("acme/tiny-qwen")
    assert weights_total(spec_from_config(cfg), ck).bytes == data


def test_unreachable_hub_id_is_one_line(tmp_path, monkeypatch):
    _hub_cache(tmp_path, monkeypatch)
    with pytest.raises(UsageError) as exc:
        load_checkpoint("acme/not-cached")
    assert "acme/not-cached" in str(exc.value) and "\n" not in str(exc.value)


def test_folder_without_config_json(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="has no config.json"):
        load_checkpoint(str(tmp_path / "empty"))


def test_header_parser_agrees_with_the_safetensors_library(tmp_path):
    """A file written by the safetensors library itself (numpy API, no torch) reads back the same."""
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"a.weight": np.zeros((3, 5), dtype=np.float16), "b.qweight": np.zeros((7, 2), dtype=np.int32),
              "c.absmax": np.zeros((11,), dtype=np.float32), "d.packed": np.zeros((4, 4), dtype=np.uint8)}
    f = tmp_path / "lib.safetensors"
    st.save_file(arrays, str(f), metadata={"format": "pt"})
    got = {e.name: (e.dtype, e.shape, e.nbytes) for e in read_header(str(f))}
    assert got == {"a.weight": ("F16", (3, 5), 30), "b.qweight": ("I32", (7, 2), 56),
                   "c.absmax": ("F32", (11,), 44), "d.packed": ("U8", (4, 4), 16)}


def test_awq_checkpoint_headers_equal_the_closed_form(tmp_path):
    """The tensors AutoAWQ's WQLinear_GEMM saves (awq/modules/linear/gemm.py: qweight int32 [in, out/8], qzeros
    int32 [in/128, out/8], scales fp16 [in/128, out], bias fp16 [out]) for every Linear of Qwen2.5-0.5B, plus its
    fp16 embeddings and norms: the header sum is the closed form's 458,314,496 bytes."""
    cfg = {**QWEN_05B, "torch_dtype": "float16",
           "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                   "version": "gemm"}}
    folder = _folder(tmp_path, cfg)
    linears = {"self_attn.q_proj": (896, 896, True), "self_attn.k_proj": (896, 128, True),
               "self_attn.v_proj": (896, 128, True), "self_attn.o_proj": (896, 896, False),
               "mlp.gate_proj": (896, 4864, False), "mlp.up_proj": (896, 4864, False),
               "mlp.down_proj": (4864, 896, False)}
    tensors = {"model.embed_tokens.weight": ("F16", (151936, 896)), "model.norm.weight": ("F16", (896,))}
    for i in range(24):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = ("F16", (896,))
        tensors[p + "post_attention_layernorm.weight"] = ("F16", (896,))
        for name, (fin, fout, bias) in linears.items():
            tensors[p + name + ".qweight"] = ("I32", (fin, fout // 8))
            tensors[p + name + ".qzeros"] = ("I32", (fin // 128, fout // 8))
            tensors[p + name + ".scales"] = ("F16", (fin // 128, fout))
            if bias:
                tensors[p + name + ".bias"] = ("F16", (fout,))
    write_safetensors(folder / "model.safetensors", tensors)
    cfg, _, ck = load_checkpoint(str(folder))
    spec = spec_from_config(cfg)
    total = weights_total(spec, ck)
    assert total.source == "safetensors headers"
    assert total.bytes == closed_form_bytes(spec, ck.scheme)[0] == 458_314_496


def test_hub_header_metadata_when_online(tmp_path, monkeypatch):
    """Online, the shards are not downloaded: huggingface_hub's get_safetensors_metadata (HTTP range reads of each
    header) gives the tensors. The network is replaced here by the library's own result objects."""
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.utils._safetensors import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    snap, _ = _hub_cache(tmp_path, monkeypatch, with_shard=False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    files = {
        "model-00001-of-00002.safetensors": SafetensorsFileMetadata(
            {}, {"model.embed_tokens.weight": TensorInfo("BF16", [151936, 896], (0, 151936 * 896 * 2))}),
        "model-00002-of-00002.safetensors": SafetensorsFileMetadata(
            {}, {"model.norm.weight": TensorInfo("BF16", [896], (0, 1792))}),
    }
    meta = SafetensorsRepoMetadata(None, True, {}, files)

    def download(repo_id, filename, **_):
        if filename == "config.json":
            return str(snap / "config.json")
        raise FileNotFoundError(filename)  # no hf_quant_config.json in this repo

    monkeypatch.setattr(hub, "hf_hub_download", download)
    monkeypatch.setattr(hub, "get_safetensors_metadata", lambda repo_id, **_: meta)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # online: the hub's answers are the faked library calls
    cfg, _, ck = load_checkpoint("acme/tiny-qwen")
    assert ck.origin == "hub acme/tiny-qwen" and ck.header_files == 2
    total = weights_total(spec_from_config(cfg), ck)
    assert (total.source, total.bytes) == ("safetensors headers", 151936 * 896 * 2 + 1792)


def test_gemma4_experts_sit_beside_the_mlp_so_an_mlp_exclude_leaves_them_in_nvfp4():
    """nvidia/Gemma-4-26B-A4B-NVFP4 excludes every layer's `mlp*`, `router*` and `self_attn*` (its hf_quant_config):
    in transformers' Gemma 4 the MoE block is the decoder layer's own `experts` beside the dense `mlp`
    (modeling_gemma4.py Gemma4TextDecoderLayer), so the 3 x 128 expert matrices of each of the 30 layers are the
    NVFP4 ones and everything else stays BF16. Read under `mlp.experts`, the excludes had left the whole checkpoint
    BF16 (50.5 GB)."""
    from kvcalc.catalog import load_model
    from kvcalc.checkpoint import closed_form_bytes

    spec = load_model("gemma-4-26b-a4b-nvfp4")
    total, quantized = closed_form_bytes(spec, spec.checkpoint.scheme)
    experts = 30 * 128 * 3 * 2816 * 704  # layers x experts x (gate, up, down) x hidden x moe_intermediate_size
    assert quantized == experts == 22_837_985_280
    # NVFP4: 4 bits a weight + one FP8 scale per 16 (+ a per-tensor scale each); the rest at 2 bytes
    assert experts // 2 + experts // 16 < total - (spec.params.total - experts) * 2 < experts // 2 + experts // 16 + 10**6
