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

# A hub repository id: owner/name (huggingface_hub's validate_repo_id rules, simplified).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


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


def _catalog_name(text: str) -> str | None:
    from ..catalog import catalog_entry, catalog_names

    if text.lower() in catalog_names():
        return text.lower()
    for name in catalog_names():
        if str(catalog_entry(name).get("hf_id", "")).lower() == text.lower():
            return name
    return None


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


def resolve_model(params: dict, allow_hub: bool):
    """(name to give the CLI parser or None, a ModelSpec to use instead of the CLI's or None)."""
    config = params.get("config")
    if config not in (None, ""):
        if not isinstance(config, (str, dict)):
            raise UsageError("config must be the text of a config.json")
        text = json.dumps(config) if isinstance(config, dict) else config
        name = _text("config_name", params.get("config_name") or "pasted")
        return None, load_config_text(text, name)
    model = params.get("model")
    if model in (None, ""):
        return None, None
    model = _text("model", model)
    short = _catalog_name(model)
    if short:
        return short, None
    if HUB_ID.match(model):
        if not allow_hub:
            raise UsageError(f"model {model!r} is not in the catalog, and this server reads no hub ids "
                             "(start it with `kvcalc serve --allow-hub`, or paste the model's config.json)")
        import os

        if os.path.lexists(model):  # load_model would read this local file or folder: never on a request's behalf
            raise UsageError(f"model {model!r} names a file or folder on this server, which the web page never reads; "
                             "give a hub id, or paste the config.json")
        from ..catalog import load_model  # the CLI's own path: checkpoint reading, quantization, weight bytes

        return None, load_model(model)
    from ..catalog import catalog_names
    import difflib

    close = difflib.get_close_matches(model.lower(), catalog_names(), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else "; GET /api/models lists the catalog"
    raise UsageError(f"unknown model {model!r}{hint}")


def _no_server_files(speculative_config) -> None:
    """--speculative-config's model names an EAGLE head, whose config.json the CLI reads when it is a local path; the
    web never reads the server's files on a request's behalf (the head is then taken to have the target's shape)."""
    try:
        cfg = json.loads(speculative_config) if isinstance(speculative_config, str) else speculative_config
    except ValueError:
        return  # the CLI's parser says why
    if isinstance(cfg, dict) and isinstance(cfg.get("model"), str):
        import os

        if os.path.lexists(os.path.expanduser(cfg["model"])):
            raise UsageError(f"speculative_config model {cfg['model'][:60]!r} names a file or folder on this server, "
                             "which the web page never reads; give the head's hub id")


def _argv(names: dict, params: dict, model_name: str | None) -> list[str]:
    """The command line a CLI user would type for these parameters (click options by name), GPU names checked as
    data first; an emptied field is left out, so the CLI's default applies."""
    argv: list[str] = []
    for name, option in names.items():
        if name == "model":
            if model_name:
                argv.append(f"--model={model_name}")
            continue
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
    unknown = sorted(k for k in params if k not in names and k not in WEB_OPTIONS)
    if unknown:
        raise UsageError(f"unknown parameter {unknown[0]!r}; known: {', '.join(sorted(names))}")
    model_name, spec = resolve_model(params, allow_hub)
    _no_server_files(params.get("speculative_config"))
    from ..options import web_table
    from ..request import build_request

    values, _ = options_parse(web_table("plan"), _argv(names, params, model_name), "plan")
    tp_sweep = bool(values.get("tp_sweep"))
    kwargs = {k: v for k, v in values.items() if k != "tp_sweep"}
    req, warnings = build_request(kwargs)
    if spec is not None:  # a pasted or hub config: the CLI's request with this spec, and the warnings for it
        from ..plan import request_warnings

        req = dataclasses.replace(req, spec=spec)
        warnings = request_warnings(req)
    key_parts = sorted((k, repr(v)) for k, v in kwargs.items())
    digest = hashlib.sha256(repr((key_parts, tp_sweep)).encode())
    if spec is not None:
        digest.update(repr((spec.name, spec.source)).encode())
        digest.update(json.dumps(params.get("config"), sort_keys=True).encode())
    return WebRequest(req, list(warnings), tp_sweep, digest.hexdigest())


def search_names() -> list[str]:
    return sorted(_web_names("search"))


def parse_search(params: dict, allow_hub: bool = False) -> tuple[dict, object]:
    """Query or JSON parameters -> (the parsed options of `kvcalc search`, a ModelSpec or None), through the search
    command's own click parser; `model` and `gpus` are held to the same rules as for a plan."""
    from ..options import SEARCH_OPTIONS

    names = _web_names("search")
    unknown = sorted(k for k in params if k not in names and k not in ("config", "config_name"))
    if unknown:
        raise UsageError(f"unknown search parameter {unknown[0]!r}; known: {', '.join(sorted(names))}")
    model_name, spec = resolve_model(params, allow_hub)
    values, _ = options_parse(SEARCH_OPTIONS, _argv(names, params, model_name), "search")
    return values, spec


def error_message(exc: BaseException) -> str | None:
    """The one line the CLI would print for this input error, or None when it is not an input error."""
    import click

    if isinstance(exc, UsageError):
        return str(exc)
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    return None
