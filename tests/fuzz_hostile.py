"""The fuzz generators of the third audit (fuzz-2026-12: docs/reviews/replies.md), for input that reaches code the
first generators never fed: checkpoint folders (safetensors headers whose byte ranges overlap, run past the file or
lie about dtype x shape, duplicate names, partial downloads, sidecar files), JSON option values with non-finite
numbers, hostile web parameters (paths, ~, .., /proc, hub ids) and request bodies shorter than their Content-Length.

tests/fuzz_cases.py registers them as case kinds ("ckpt", "jsonopt", "web-hostile", "lying-length") with their
oracles; tests/test_fuzz.py runs a fixed-seed slice in CI and benchmarks/fuzz.py runs them by the thousand. The input
builders are also what tests/test_fuzz3_reproductions.py rebuilds the audit's input files with.
"""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "kvcalc" / "catalog"

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "I32": 4}


# ---------------------------------------------------------------------------------------------------------------------
# safetensors and checkpoint folders


def safetensors(tensors: list[tuple[str, str, list, list | None]], buffer: int | None = None, *,
                raw_header: str | None = None) -> bytes:
    """A .safetensors file: (name, dtype, shape, data_offsets or None for the next free range) per tensor, zero
    data of `buffer` bytes (default: up to the last offset). raw_header replaces the JSON (duplicate keys)."""
    header, offset, end = {}, 0, 0
    for name, dtype, shape, offsets in tensors:
        n = DTYPE_BYTES.get(dtype, 2)
        for d in shape:
            n *= d if isinstance(d, int) else 1
        begin, stop = offsets if offsets is not None else (offset, offset + n)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, stop]}
        offset = max(offset, stop if isinstance(stop, int) else 0)
        end = max(end, stop if isinstance(stop, int) else 0)
    text = raw_header if raw_header is not None else json.dumps(header)
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    size = end if buffer is None else buffer
    return struct.pack("<Q", len(raw)) + raw + bytes(max(size, 0))


def catalog_config(name: str) -> dict:
    return json.loads((CATALOG / f"{name}.json").read_text())["config"]


def small_llama(layers: int = 2, hidden: int = 64, vocab: int = 256) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": 2 * hidden, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def llama_tensors(cfg: dict, layers: range | None = None) -> list[tuple[str, str, list, None]]:
    """The tensors of a Llama checkpoint of `cfg` (every layer, or `layers`), contiguous."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    out = [("model.embed_tokens.weight", "BF16", [v, h], None)]
    for n in layers if layers is not None else range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [(p + "self_attn.q_proj.weight", "BF16", [h, h], None), (p + "self_attn.k_proj.weight", "BF16", [kv, h], None),
                (p + "self_attn.v_proj.weight", "BF16", [kv, h], None), (p + "self_attn.o_proj.weight", "BF16", [h, h], None),
                (p + "mlp.gate_proj.weight", "BF16", [i, h], None), (p + "mlp.up_proj.weight", "BF16", [i, h], None),
                (p + "mlp.down_proj.weight", "BF16", [h, i], None), (p + "input_layernorm.weight", "BF16", [h], None),
                (p + "post_attention_layernorm.weight", "BF16", [h], None)]
    return out + [("model.norm.weight", "BF16", [h], None), ("lm_head.weight", "BF16", [v, h], None)]


def overlapping_checkpoint(count: int = 10_000, span: int = 2 << 20) -> dict[str, bytes]:
    """The audit's ckpt-overlap: llama-3.2-1b's config, `count` tensors all claiming bytes 0..span."""
    rows = span // 2 // 1024
    tensors = [(f"model.layers.0.mlp.w{k}.weight", "BF16", [rows, 1024], [0, span]) for k in range(count)]
    return {"config.json": json.dumps(catalog_config("llama-3.2-1b")).encode(),
            "model.safetensors": safetensors(tensors, span + 1_000_000)}


def tiny_checkpoint(model: str = "llama-3.1-8b") -> dict[str, bytes]:
    """The audit's ckpt-tiny: a catalog model's config and one 2 KiB tensor (a partial download)."""
    return {"config.json": json.dumps(catalog_config(model)).encode(),
            "model.safetensors": safetensors([("model.embed_tokens.weight", "BF16", [32, 32], None)])}


def hostile_checkpoint(rng: random.Random) -> tuple[dict[str, bytes], str]:
    """A checkpoint folder that is broken in one of many ways (or intact), and what was done to it."""
    cfg = small_llama(layers=rng.choice([1, 2, 4]))
    tensors = llama_tensors(cfg)
    files: dict[str, bytes] = {"config.json": json.dumps(cfg).encode()}
    kind = rng.choice(["intact", "overlap", "overlap-many", "past-end", "lying-shape", "duplicate", "missing-layer",
                       "tiny", "cut", "mtp-only", "hfquant", "index", "shards", "dtype", "empty-tensors",
                       "zero-header", "gap"])
    if kind == "intact":
        files["model.safetensors"] = safetensors(tensors)
    elif kind in ("overlap", "overlap-many"):
        n = 2 if kind == "overlap" else rng.choice([100, 2000])
        body = [(f"model.layers.0.mlp.x{k}.weight", "BF16", [64, 64], [0, 8192]) for k in range(n)]
        files["model.safetensors"] = safetensors(tensors[:1] + body)
    elif kind == "past-end":
        data = safetensors(tensors)
        files["model.safetensors"] = data[: len(data) - rng.choice([1, 100, 4096])]
    elif kind == "lying-shape":
        name, dtype, shape, _ = tensors[rng.randrange(len(tensors))]
        tensors = [(n, d, s, None) if n != name else (n, rng.choice(["F32", "I8", "BF16"]), [x * 2 for x in s], None)
                   for n, d, s, _ in tensors]
        body = safetensors(tensors)
        header_len = struct.unpack("<Q", body[:8])[0]
        header = json.loads(body[8:8 + header_len])
        header[name]["shape"] = shape  # offsets of the new size, shape of the old one
        files["model.safetensors"] = safetensors([], raw_header=json.dumps(header)) + body[8 + header_len:]
    elif kind == "duplicate":
        text = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})
        dup = text[:-1] + ', "model.embed_tokens.weight": {"dtype": "BF16", "shape": [8, 8], "data_offsets": [32, 160]}}'
        files["model.safetensors"] = safetensors([], 160, raw_header=dup)
    elif kind == "missing-layer":
        keep = [t for t in tensors if ".layers.0." not in t[0]] if cfg["num_hidden_layers"] > 1 else tensors[:1]
        files["model.safetensors"] = safetensors(keep)
    elif kind == "tiny":
        files["model.safetensors"] = safetensors([("model.embed_tokens.weight", "BF16", [4, 4], None)])
    elif kind == "cut":
        files["model.safetensors"] = safetensors(tensors)[: rng.choice([3, 8, 20, 64])]
    elif kind == "mtp-only":
        files["model.safetensors"] = safetensors([(f"mtp.layers.0.w{k}", "BF16", [64, 64], None) for k in range(3)])
    elif kind == "hfquant":
        files["model.safetensors"] = safetensors(tensors)
        files["hf_quant_config.json"] = rng.choice([b"[]", b"\"x\"", b"1", b"null", b'{"quantization": "x"}',
                                                    b'{"quantization": []}', b'{"quantization": {"quant_algo": 5}}',
                                                    b'{"quantization": {"quant_algo": "FP8"}}', b"{", b"\xff\xfe"])
    elif kind == "index":
        files["model.safetensors"] = safetensors(tensors)
        files["model.safetensors.index.json"] = json.dumps({
            "metadata": {"total_size": rng.choice([-5, 1.5, True, 10**30, "x", 0, 12])},
            "weight_map": {"a": rng.choice(["../../../../etc/passwd", "/dev/zero", "model.safetensors", "nope"])},
        }).encode()
    elif kind == "shards":
        half = len(tensors) // 2
        files["model-00001-of-00002.safetensors"] = safetensors(tensors[:half])
        if rng.random() < 0.5:
            files["model-00002-of-00002.safetensors"] = safetensors(tensors[half:])
    elif kind == "dtype":
        bad = rng.choice(["bf16", "BF16 ", "I4", "Q4_0", None, 16, "F8_E4M3FN"])
        files["model.safetensors"] = safetensors([], raw_header=json.dumps(
            {"model.embed_tokens.weight": {"dtype": bad, "shape": [4, 4], "data_offsets": [0, 32]}})) + bytes(32)
    elif kind == "empty-tensors":
        files["model.safetensors"] = safetensors(tensors + [("model.empty", "BF16", [0], [0, 0])])
    elif kind == "zero-header":
        files["model.safetensors"] = struct.pack("<Q", 0) + bytes(64)
    else:  # a gap between tensors (the safetensors library refuses it; kvcalc counts what the header names)
        files["model.safetensors"] = safetensors([(n, d, s, None) for n, d, s, _ in tensors[:1]]
                                                 + [("model.layers.0.gap", "BF16", [4], [10_000, 10_008])])
    return files, kind


def shard_bytes(files: dict[str, bytes]) -> int:
    return sum(len(data) for name, data in files.items() if name.endswith(".safetensors"))


HEADER_WEIGHTS = re.compile(r"([\d,]+) B from safetensors headers")


def checkpoint_invariants(doc: dict, disk_bytes: int) -> list[str]:
    """A checkpoint's header-derived weights never exceed the bytes of its safetensors files."""
    problems = []
    for row in doc.get("rows") or []:
        for note in row.get("notes") or []:
            m = HEADER_WEIGHTS.search(str(note))
            if m and int(m.group(1).replace(",", "")) > disk_bytes:
                problems.append(f"{row.get('config')} ({row.get('engine')}): {m.group(1)} B of weights from the "
                                f"headers of {disk_bytes:,} bytes of files")
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# JSON option values with non-finite numbers


NON_FINITE = ["Infinity", "-Infinity", "NaN", "1e309", "-1e309", "1e30", "-1", "1.5", "true", "null", '"4"', "[4]",
              "{}", '"inf"', "4", "0", "2", "9" * 400]


def mm_limit_value(rng: random.Random) -> str:
    value = rng.choice(NON_FINITE)
    roll = rng.random()
    if roll < 0.5:
        return '{"%s": %s}' % (rng.choice(["image", "video", "audio", "x y", ""]), value)
    if roll < 0.7:
        return '{"image": {"count": %s}}' % value
    if roll < 0.85:
        return f"image={value}"
    return "[" * rng.choice([2, 80]) + "]" * rng.choice([2, 80])


def speculative_value(rng: random.Random) -> str:
    method = rng.choice(["ngram", "eagle", "eagle3", "mtp", "deepseek_mtp", "medusa", 5, None])
    k = rng.choice(NON_FINITE)
    extra = rng.choice(["", ', "model": "/etc"', ', "model": "/dev/zero"', ', "model": "~"',
                        ', "model": "org/head"', ', "draft_tensor_parallel_size": Infinity'])
    return '{"method": %s, "num_speculative_tokens": %s%s}' % (json.dumps(method), k, extra)


# ---------------------------------------------------------------------------------------------------------------------
# hostile web parameters: names of server files and hub ids


HOSTILE_NAMES = ["~", "~/", "~root", ".", "..", "../..", "/", "/etc", "/root", "/proc/self/environ", "/etc/passwd",
                 "/dev/zero", "/dev/stdin", "someorg/somemodel", "tests/fixtures", "../shared", "{probe}",
                 "{probe}/config.json", "{probe}/../probe", "file://{probe}", " {probe}", "C:\\x", "\\\\srv\\share"]
COMMAND_FORMS = ["vllm serve {}", "vllm serve --model {}", "vllm serve --model={}",
                 "python -m vllm.entrypoints.openai.api_server --model {}", "vllm serve {} -tp 1",
                 "vllm serve llama-3.2-1b --speculative-config '{{\"method\": \"eagle\", \"model\": \"{}\"}}'"]


def hostile_web_params(rng: random.Random, names: list[str]) -> dict[str, str]:
    """Query parameters naming server files or hub ids, in one or two of `names` (the web's option names)."""
    params: dict[str, str] = {}
    for name in rng.sample(names, rng.choice([1, 1, 2])):
        value = rng.choice(HOSTILE_NAMES)
        if name == "vllm_command":
            value = rng.choice(COMMAND_FORMS).format(value)
        elif name == "speculative_config":
            value = json.dumps({"method": "eagle", "model": value, "num_speculative_tokens": 2})
        params[name] = value
    return params


def probe_files() -> dict[str, bytes]:
    """A readable checkpoint folder the hostile parameters name ({probe}): the positive control of the read check."""
    return {"probe/config.json": json.dumps(small_llama()).encode()}


_OPENED: list[str] = []
_ARMED = threading.Event()


def _audit(event, args):
    if _ARMED.is_set() and event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # permanent for the process; records only while armed


class opened_files:
    """`with opened_files() as seen:` the files the process opened inside the block (kvcalc's own data and Python's
    left out)."""

    def __enter__(self) -> list[str]:
        _OPENED.clear()
        _ARMED.set()
        self.seen: list[str] = []
        return self.seen

    def __exit__(self, *exc) -> None:
        _ARMED.clear()
        allowed = (str(ROOT / "kvcalc"), sys.prefix, sys.base_prefix, "/usr/lib", "/usr/share/zoneinfo")
        self.seen += [p for p in _OPENED if not p.startswith(allowed) and not p.endswith(".pyc")]


# ---------------------------------------------------------------------------------------------------------------------
# lying Content-Length: a real uvicorn server with kvcalc's protocol (TestClient hands the app whole bodies)


READ_TIMEOUT_S = 0.5  # the fuzz server's read deadline (kvcalc serve uses 10 s)
_SERVER: dict = {}


def server_port() -> int:
    """A kvcalc app on uvicorn with kvcalc serve's protocol on a free loopback port, started once per process."""
    if "port" in _SERVER:
        return _SERVER["port"]
    import uvicorn

    from kvcalc.web.app import create_app
    from kvcalc.web.server import time_bound_protocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="critical",
                            http=time_bound_protocol(READ_TIMEOUT_S))
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True, name="fuzz-uvicorn").start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    _SERVER.update(port=port, server=server)
    return port


LENGTHS = ["100", "3", "17", "-1", "1e3", "\uff11\uff17", "9" * 20, "17, 17", "17, 18", " 17", "0x11", ""]


def lying_request(rng: random.Random) -> bytes:
    """A request whose body is shorter (or longer) than its Content-Length, or whose Content-Length is malformed;
    sometimes headers cut short."""
    method = rng.choice(["POST", "POST", "GET", "PUT"])
    path = rng.choice(["/api/plan", "/api/search", "/api/explain", "/", "/static/app.js"])
    body = rng.choice([b'{"gpu": "t4"}    ', b"", b"{", b"x" * 50])
    length = rng.choice(LENGTHS)
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    if length:
        head += f"Content-Length: {length}\r\n"
    data = (head + "\r\n").encode() + body
    if rng.random() < 0.15:
        data = data[: rng.randrange(5, len(head))]  # the headers themselves never finish
    return data


def send_raw(data: bytes, wait: float = 6.0) -> tuple[bytes, float]:
    """Send `data` to the fuzz server, read until it closes: (reply, seconds until closed; inf if it never did)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", server_port()), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except socket.timeout:
            return out, float("inf")
        except ConnectionResetError:
            pass
    return out, time.monotonic() - t0


SECURITY = (b"content-security-policy", b"x-content-type-options", b"referrer-policy", b"cache-control")


def lying_invariants(reply: bytes, seconds: float) -> list[str]:
    """The connection ends within the read deadline (plus the answer's own time), and every reply is JSON (on the
    API) with the security headers."""
    problems = []
    if seconds > READ_TIMEOUT_S + 4:
        problems.append(f"connection held {seconds:.1f} s (read deadline {READ_TIMEOUT_S} s)")
    if reply:
        head, _, body = reply.partition(b"\r\n\r\n")
        for responses in re.split(rb"(?=HTTP/1\.1 \d{3})", reply):
            if not responses:
                continue
            top = responses.partition(b"\r\n\r\n")[0].lower()
            missing = [h.decode() for h in SECURITY if h not in top]
            if missing:
                problems.append(f"reply {top[:15]!r} lacks {missing}")
        if not head.startswith(b"HTTP/1.1 "):
            problems.append(f"not an HTTP reply: {reply[:60]!r}")
    return problems
