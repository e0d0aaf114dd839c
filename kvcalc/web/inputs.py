"""Web input -> the CLI's PlanRequest, through the CLI's own option table.

The page sends the same option names the CLI takes (`context=32k`, `max_model_len=16k`, `enforce_eager=1`). They are
turned into an argument list and parsed by the click options of kvcalc.options' tables (the ones `kvcalc plan` and
`kvcalc search` are made of), then built by kvcalc.request, so every range, size and name check the CLI makes is
made here too, word for word; nothing is re-implemented.

What the web refuses on top of the CLI is what would reach the server's own files or network:
- `model` must be a catalog name (or a catalog model's hub id); any other hub id only when the server was started with
  --allow-hub; never a path. A pasted config.json comes as text, capped at MAX_CONFIG_BYTES and parsed as JSON data.
- `gpu` must be a built-in profile id or alias; never a YAML path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

from ..errors import UsageError
from ..options import parse as options_parse

MAX_CONFIG_BYTES = 1 << 20  # a config.json is 1-10 KiB; 1 MiB leaves room for any real one
MAX_VALUE_CHARS = 200  # one option's text: names, sizes and versions are short
MAX_GPUS = 8  # GPUs compared side by side on one page

# Options the web adds, handled here and never passed to the CLI parser.
WEB_OPTIONS = {"config", "config_name", "row", "row_engine", "format", "kind"}  # kind: /api/deploy's file

TRUE_WORDS = {"1", "true", "on", "yes"}
FALSE_WORDS = {"", "0", "false", "off", "no"}



@dataclass(frozen=True)
class WebRequest:
    """A parsed plan request plus what the web adds: the key of the row to explain, the output format."""

    req: object  # kvcalc.plan.PlanRequest
    warnings: list
    tp_sweep: bool
    key: str  # canonical form of the inputs: equal keys give equal answers (the response cache uses it)


def _web_names(command: str = "plan") -> dict[str, object]:
    """Option name (as the page and the JSON spell it: max_model_len) -> its kvcalc.options.Option, for the options
    the web takes (output modes and server files are the CLI's only: `web=False` in the table)."""
    from ..options import web_table

    return {o.name: o for o in web_table(command)}


def canonical_params(params: dict, names: dict, extra: set[str] = frozenset()) -> dict:
    """Parameters under the option names the table uses: any spelling of an option is taken as the CLI takes it
    (`input-len`, `--input-len`, `tensor_parallel_size` and `input_len` are one parameter); two spellings of one
    option are refused, as a repeated parameter is."""
    spelled = {}
    for name, option in names.items():
        for flag in (name, *option.spellings):
            spelled[flag.lstrip("-").replace("-", "_").lower()] = name
    out: dict = {}
    for key, value in params.items():
        name = key if key in names or key in extra else spelled.get(str(key).lstrip("-").replace("-", "_").lower(),
                                                                    key)
        if name in out:
            raise UsageError(f"parameter {name!r} given twice (as {key!r})")
        out[name] = value
    return out


def option_names() -> list[str]:
    return sorted(_web_names())


def _text(name: str, value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string or a number, got {type(value).__name__}")
    if len(value) > MAX_VALUE_CHARS:
        raise UsageError(f"{name} is too long ({len(value)} characters; at most {MAX_VALUE_CHARS})")
    if not value.isprintable():
        raise UsageError(f"{name} holds a control character")
    return value.strip()


def _flag(name: str, text: str) -> bool:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise UsageError(f"{name} must be 1 or 0 (true or false), got {text!r}")


def check_gpu_name(text: str) -> str:
    """A built-in GPU id or alias: anything that looks like a path (the CLI would read a YAML file) is refused."""
    if not text:
        raise UsageError("no GPU given")
    if "/" in text or "\\" in text or text.startswith("~") or text.lower().endswith((".yaml", ".yml")):
        raise UsageError(f"gpu {text!r}: the web page takes built-in GPU ids only (GET /api/gpus lists them), "
                         "not files")
    return text


def load_config_text(text: str, name: str = "pasted") -> object:
    """A pasted config.json: size-capped here, then read by the CLI's own JSON reader (bounded integers and nesting)
    and spec_from_config with the user-config schema, exactly as `--model config.json` reads a file."""
    from ..input_files import parse_json
    from ..model import spec_from_config

    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_CONFIG_BYTES:
        raise UsageError(f"config.json is {len(raw):,} bytes; at most {MAX_CONFIG_BYTES:,} are read")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("config.json is not UTF-8 text") from None
    cfg = parse_json(text, "config.json")
    if not isinstance(cfg, dict):
        raise UsageError("config.json must be a JSON object")
    label = re.sub(r"[^\w.+-]", "_", name or "pasted")[:60] or "pasted"
    # as checkpoint.load_checkpoint reads a lone config.json file: its quantization_config names the checkpoint format
    from ..checkpoint import Checkpoint
    from ..quant_config import find_quant_config, parse_scheme

    ck = Checkpoint("pasted config.json", parse_scheme(find_quant_config(cfg), None))
    return dataclasses.replace(spec_from_config(cfg, name=label, source=ck.origin), checkpoint=ck)


def model_loader(params: dict, allow_hub: bool):
    """How this request's model is loaded, whatever names it (`model`, or the model of `vllm_command`): a pasted
    config.json's spec; else a catalog name or a catalog model's hub id; with --allow-hub also a hub id, from the hub
    cache or the hub. Never a file or folder on the server: a path is refused with the same line whether or not it
    exists, so no answer tells what the server holds."""
    config = params.get("config")
    if config not in (None, ""):
        if not isinstance(config, (str, dict)):
            raise UsageError("config must be the text of a config.json")
        text = json.dumps(config) if isinstance(config, dict) else config
        spec = load_config_text(text, _text("config_name", params.get("config_name") or "pasted"))
        return lambda name: spec
    from ..catalog import load_catalog_or_hub

    return lambda name: load_catalog_or_hub(name, allow_hub)


def _argv(names: dict, params: dict) -> list[str]:
    """The command line a CLI user would type for these parameters (click options by name), GPU names checked as
    data first; an emptied field is left out, so the CLI's default applies."""
    argv: list[str] = []
    for name, option in names.items():
        if name not in params or params[name] is None:
            continue
        text = _text(name, params[name])
        if name == "gpu":
            check_gpu_name(text)
        elif name == "gpus":
            for gpu in text.split(","):
                check_gpu_name(gpu.strip() or "-")
        if option.is_flag or option.secondary:
            if _flag(name, text):
                argv.append(option.spellings[0])
        elif text != "":
            argv.append(f"{option.spellings[0]}={text}")
    return argv


def parse(params: dict, allow_hub: bool = False) -> WebRequest:
    """Query or JSON parameters -> WebRequest. Raises UsageError (or click's errors, via `error_message`) on any
    bad input; unknown parameter names are refused, so a typo never silently falls back to a default."""
    names = _web_names()
    params = canonical_params(params, names, WEB_OPTIONS)
    unknown = sorted(k for k in params if k not in names and k not in WEB_OPTIONS)
    if unknown:
        raise UsageError(f"unknown parameter {unknown[0]!r}; known: {', '.join(sorted(names))}")
    load = model_loader(params, allow_hub)
    from ..options import web_table
    from ..request import build_request

    values, explicit = options_parse(web_table("plan"), _argv(names, params), "plan")
    tp_sweep = bool(values.get("tp_sweep"))
    kwargs = {k: v for k, v in values.items() if k != "tp_sweep"}
    # as on the CLI, options given beside vllm_command win; no file a parameter names is read
    req, warnings = build_request(kwargs, explicit, load_model=load, read_files=False)
    key_parts = sorted((k, repr(v)) for k, v in kwargs.items())
    digest = hashlib.sha256(repr((key_parts, tp_sweep)).encode())
    digest.update(repr((req.spec.name, req.spec.source)).encode())
    if params.get("config") not in (None, ""):
        digest.update(json.dumps(params.get("config"), sort_keys=True).encode())
    return WebRequest(req, list(warnings), tp_sweep, digest.hexdigest())


def search_names() -> list[str]:
    return sorted(_web_names("search"))


def parse_search(params: dict, allow_hub: bool = False) -> tuple[dict, object, set]:
    """Query or JSON parameters -> (the parsed options of `kvcalc search`, the model loader, the options given),
    through the search command's own click options; `model` and `gpus` are held to the same rules as for a plan."""
    from ..options import SEARCH_OPTIONS

    names = _web_names("search")
    params = canonical_params(params, names, {"config", "config_name"})
    unknown = sorted(k for k in params if k not in names and k not in ("config", "config_name"))
    if unknown:
        raise UsageError(f"unknown search parameter {unknown[0]!r}; known: {', '.join(sorted(names))}")
    load = model_loader(params, allow_hub)
    values, explicit = options_parse(SEARCH_OPTIONS, _argv(names, params), "search")
    return values, load, explicit


def error_message(exc: BaseException) -> str | None:
    """The one line the CLI would print for this input error, or None when it is not an input error."""
    import click

    if isinstance(exc, UsageError):
        return str(exc)
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    return None
