"""Parsed options -> the request every surface plans with: `build_request` for plan, explain, plot, fit and the web
API (a PlanRequest and its warnings), `build_search` for search (a SearchRequest).

The options come from kvcalc.options (the CLI's click options and the web's parameters are the same table). Most of
them land in a PlanRequest or Workload field of their own name, by their table entry; what is written out here is
only what needs several options at once: the model and GPU loaded, --vllm-command applied under the options typed
beside it, --quantization as a weight format, the workload setting context and batch, `auto` lengths, the engines and
the calibration.
"""

from __future__ import annotations

from .errors import UsageError
from .options import AUTO, PLAN_OPTIONS

DEFAULT_OUTPUT_LEN = 128  # --output-len when --input-len is given alone (vllm bench's random dataset default)


def _workload(given: dict):
    """The --input-len workload, or None; the other workload options need it."""
    from .workload import Workload

    fields = {o.field or o.name: (o.convert(given.get(o.name)) if o.convert else given.get(o.name))
              for o in PLAN_OPTIONS if o.into == "workload"}
    if fields["input_len"] is None:
        others = [o for o in PLAN_OPTIONS if o.into == "workload" and o.name != "input_len"
                  and given.get(o.name) not in (None, False)]
        if others:
            raise UsageError(f"{others[0].spellings[0]} describes a vllm bench workload and needs --input-len")
        return None
    fields["output_len"] = fields["output_len"] or DEFAULT_OUTPUT_LEN
    if fields.get("burstiness") is not None and fields.get("request_rate") is None:
        raise UsageError("--burstiness shapes --request-rate arrivals: give --request-rate too")
    return Workload(**{k: v for k, v in fields.items() if v is not None or k in ("concurrency", "request_rate")})


def _request_fields(given: dict) -> dict:
    """The PlanRequest fields that options set by their table entry (into="request")."""
    out = {}
    for option in PLAN_OPTIONS:
        if option.into == "request":
            value = given.get(option.name)
            out[option.field or option.name] = option.convert(value) if option.convert else value
    return out


def _names(value) -> tuple[str, ...]:
    """An option's format names as a tuple: None (not given), one name (a --vllm-command's flag) or a parsed list."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def build_request(options: dict, explicit: set[str] = frozenset(), *, load_model=None, read_files: bool = True):
    """(PlanRequest, warnings) for the parsed PLAN_OPTIONS `options`; `explicit` names the options the user typed
    (they win over a --vllm-command's flags). `load_model` turns the model's name (--model, or the command's) into a
    ModelSpec (default catalog.load_model: catalog, files, hub); read_files=False reads no file a request names
    (the web API: with a load_model that reads none either)."""
    from .catalog import DEFAULT_MODEL
    from .hardware import get_gpu
    from .plan import PlanRequest, request_warnings, weights_for_quantization

    if load_model is None:
        from .catalog import load_model

    given = {o.name: o.default for o in PLAN_OPTIONS}
    given.update(options)
    notes: list[str] = []
    if given["vllm_command"]:
        from .vllm_command import apply_command

        given, notes = apply_command(given["vllm_command"], given, set(explicit))
        if "engine" not in explicit:  # a vLLM command: vLLM rows only, unless --engine asks for more
            given["engine"] = "vllm"
    if given.get("sglang_command"):
        from .sglang_command import apply_sglang_command

        if given["vllm_command"]:
            raise UsageError("give --vllm-command or --sglang-command, not both")
        given, more = apply_sglang_command(given["sglang_command"], given, set(explicit))
        notes = notes + more
    weights, kvs = _names(given["weights"]), _names(given["kv"])
    if given["quantization"]:
        if weights:
            raise UsageError("give --weights or --quantization, not both")
        weights = (weights_for_quantization(given["quantization"]),)
    workload = _workload(given)
    context, batch = given["context"], given["batch"]
    if workload is not None:
        # before any model or GPU is read: a bad workload is a usage error
        workload.check(given["max_model_len"] if given["max_model_len"] != AUTO else None)
        context, batch = workload.context, workload.concurrency or 1
    spec = load_model(given["model"] or DEFAULT_MODEL)
    pasted = "--vllm-command" if given["vllm_command"] else "--sglang-command" if given.get("sglang_command") else None
    if pasted and "gpu" not in explicit:
        # a pasted command never names its GPU: planning on --gpu's default would mislead (checked after the model
        # loads, so a model the caller may not load is refused for that first)
        raise UsageError(f"{pasted} needs --gpu: a server's command line does not say which GPU it runs on "
                         "(kvcalc gpus lists the ids)")
    profile = get_gpu(given["gpu"])
    engine = given["engine"]
    engines = {"both": ("vllm", "hf"), "servers": ("vllm", "sglang"), "all": ("vllm", "sglang", "hf")}.get(engine,
                                                                                                    (engine,))
    if given["max_model_len"] == AUTO:
        from . import limits

        given["max_model_len"] = spec.max_position_embeddings
        limits.check("max_model_len", given["max_model_len"])
    if (given["vllm_command"] or given.get("sglang_command")) and context is None:
        context = given["max_model_len"] or spec.max_position_embeddings  # the command's own length
    fields = _request_fields(given)
    fields["max_model_len"] = given["max_model_len"]
    # the first of a list (--weights awq,fp8) is the asked configuration (explain's, the TP sweep's); the table
    # shows every combination
    req = PlanRequest(spec=spec, gpu=profile, context=context or 8192, batch=batch, engines=engines,
                      workload=workload, weights=weights[0] if weights else None, kv=kvs[0] if kvs else None,
                      weights_choices=weights if len(weights) > 1 else (), kv_choices=kvs if len(kvs) > 1 else (),
                      read_files=read_files, from_command=bool(given["vllm_command"]), **fields)
    warnings = notes + request_warnings(req)
    if given["quantization"] and "vllm" in engines:
        from .engines.vllm_kernels import forced_slow_kernel

        slow = forced_slow_kernel(given["quantization"], req.vllm_version)
        if slow:
            warnings.append("vllm: " + slow)
    if "vllm" in engines and not given["no_calibration"]:
        from .calibrate import find

        req.calibration, why = find(profile.name, req.vllm_version)
        if req.calibration is not None:
            warnings.append("vllm: " + req.calibration.describe(req.tp, req.pp))
            if req.calibration.speed is not None:  # vLLM rows' speed model uses the fitted per-GPU constants
                from .calibrate import with_speed

                req.gpu = with_speed(req.gpu, req.calibration.speed, req.calibration.source)
        elif why:
            warnings.append(why)
    return req, warnings


# --vllm-command flag (as vllm_command.parse_command names it) -> the search option it fixes
SEARCH_FROM_COMMAND = {"model": "model", "weights": "weights", "kv": "kv", "tp": "tp", "pp": "pp", "util": "util",
                       "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens"}


def _apply_command(kw: dict, explicit: set[str], values: dict, warnings: list[str], label: str, name_for,
                   as_grid, ignored: tuple[str, ...]) -> tuple[dict, list[str]]:
    """kw with a pasted command's parsed `values` filled in where no search option was typed (`explicit` wins, with a
    warning): name_for(flag) is the search option a flag fixes (None: not searched), as_grid(name) whether it goes in
    as a one-value grid; the command's max_model_len becomes --min-context."""
    from .errors import shown
    from .plan import weights_for_quantization

    out = dict(kw)
    if "quantization" in values:
        values["weights"] = weights_for_quantization(values.pop("quantization"))
    for flag, value in values.items():
        name = name_for(flag)
        if name is None:
            if flag not in ignored:
                warnings.append(f"{label}: {flag} is not searched over; search ignores it")
            continue
        if name in explicit:
            warnings.append(f"{label} sets {flag} {shown(value)}; the search option given wins")
            continue
        out[name] = (value,) if as_grid(name) else value
    if "max_model_len" in values and "min_context" not in explicit and values["max_model_len"] != AUTO:
        out["min_context"] = values["max_model_len"]
    return out, warnings


def _search_command(kw: dict, explicit: set[str]) -> tuple[dict, list[str]]:
    """Search options with a --vllm-command's model and flags filled in where no search option was typed: the
    command's values become one-value grids (a pasted `-tp 2` searches TP 2 only)."""
    from .vllm_command import parse_command

    values, warnings = parse_command(kw["vllm_command"])
    return _apply_command(kw, explicit, values, warnings, "--vllm-command", SEARCH_FROM_COMMAND.get,
                          lambda name: name not in ("model", "max_num_batched_tokens"), ("entrypoint", "max_model_len"))


# --sglang-command value (as sglang_command.parse_sglang_command names it) -> the search option it fixes; a grid
# option takes it as a one-value grid
SEARCH_FROM_SGLANG = {"model": "model", "tp": "tp", "pp": "pp", "kv": "kv", "weights": "weights",
                      "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens"}
_SEARCH_GRIDS = ("tp", "pp", "kv", "weights", "max_num_seqs")


def _search_sglang_command(kw: dict, explicit: set[str]) -> tuple[dict, list[str]]:
    """Search options with an --sglang-command's model and flags filled in where no search option was typed: TP,
    formats and --max-running-requests as one-value grids, --context-length as --min-context, the SGLang settings
    (search_sglang.SGLANG_SETTINGS) as they are."""
    from .search_sglang import SGLANG_SETTINGS
    from .sglang_command import parse_sglang_command

    values, warnings = parse_sglang_command(kw["sglang_command"])
    return _apply_command(kw, explicit, values, warnings, "--sglang-command",
                          lambda flag: SEARCH_FROM_SGLANG.get(flag) or (flag if flag in SGLANG_SETTINGS else None),
                          lambda name: name in _SEARCH_GRIDS, ("engine", "max_model_len"))


def build_search(options: dict, load_model=None, explicit: set[str] = frozenset(), read_files: bool | None = None):
    """(SearchRequest, warnings) for the parsed SEARCH_OPTIONS `options`; `load_model` as build_request's (the web
    API's reads no file); `explicit`: the options typed, which win over --vllm-command's / --sglang-command's.
    read_files (default: when no load_model is given, the CLI): whether a draft model's local config may be read."""
    from .catalog import DEFAULT_MODEL
    from .engines.vllm import DEFAULT_VERSION, parse_version
    from .formats import kv_format, weight_format
    from .hardware import get_gpu, list_gpus
    from .prices import load_prices
    from . import search as S

    from .engines.sglang_versions import resolve_version as resolve_sglang
    from .search_sglang import check_settings, closed_form_notes, given_settings, settings_of

    kw, warnings = dict(options), []
    if kw.get("vllm_command") and kw.get("sglang_command"):
        raise UsageError("give --vllm-command or --sglang-command, not both")
    if kw.get("vllm_command"):
        kw, warnings = _search_command(kw, set(explicit))
    if kw.get("sglang_command"):
        kw, warnings = _search_sglang_command(kw, set(explicit))
        if "search_engine" not in explicit:  # a pasted SGLang command searches SGLang's deployments
            kw["search_engine"] = "sglang"
    engine = kw.get("search_engine") or "vllm"
    sglang_given = given_settings(kw)
    check_settings(sglang_given, engine, kw)
    sglang_base = settings_of(sglang_given, load_model is None if read_files is None else read_files)
    if engine != "vllm":
        warnings += closed_form_notes(sglang_given)
    if engine == "both" and "speculative_algorithm" in sglang_given:
        warnings.append("vllm: its candidates run without a drafter (search takes no --speculative-config), beside "
                        "SGLang's with one: to compare like with like, plan both with kvcalc plan --engine servers "
                        "--speculative-algorithm ... --speculative-config '{...}'")
    if (kw["concurrency"] is None) == (kw["request_rate"] is None):
        raise UsageError("give exactly one of --concurrency N and --request-rate R")
    if load_model is None:
        from .catalog import load_model
    spec = load_model(kw["model"] or DEFAULT_MODEL)
    version = kw["vllm_version"] or DEFAULT_VERSION
    parse_version(version)
    gpus = ([get_gpu(g) for g in kw["gpus"]] if kw["gpus"]
            else [g for g in list_gpus() if g.id not in S.NOT_SEARCHED_BY_DEFAULT])
    gpus = list({g.id: g for g in gpus}.values())
    weights = tuple(dict.fromkeys(weight_format(w).name for w in kw["weights"] or ())) or S.DEFAULT_WEIGHTS
    for w in weights:
        if "vllm" not in weight_format(w).engines:
            raise UsageError(f"--weights {w}: vLLM does not load {weight_format(w).label} weights")
    kvs = tuple(dict.fromkeys(kv_format(k).name for k in kw["kv"] or ())) or S.DEFAULT_KV
    if engine != "vllm":
        from .engines.sglang import KV_DTYPES

        if not any(k in KV_DTYPES for k in kvs):
            raise UsageError(f"--kv {','.join(kvs)}: SGLang has no such cache (kvcalc models its auto, fp8, "
                             "fp8-e5m2)")
        from .engines import sglang_draft
        from .engines.sglang import SglangSettings

        # the drafter's settings once, before any candidate: a refusal is one line, not one note per structure
        from .engines.sglang import kv_layout, sglang_weight_bytes

        sglang_draft.drafter(spec, SglangSettings(weights=weight_format("bf16"), kv=kv_format("auto"),
                                                  version=resolve_sglang(kw.get("sglang_version")), **sglang_base),
                             kv_layout, sglang_weight_bytes)
    for k in kvs:
        if kv_format(k).vllm_name is None:
            raise UsageError(f"--kv {k}: vLLM has no {kv_format(k).label} cache (auto, fp8, fp8-e5m2, int8/fp8/int4_per_token_head, nvfp4)")
    space = S.Space(gpus=gpus, weights=weights, kv=kvs, tp=tuple(kw["tp"] or S.DEFAULT_TP),
                    pp=tuple(kw["pp"] or (1,)), max_replicas=kw["max_replicas"],
                    max_gpus_per_replica=kw["max_gpus_per_replica"], utils=tuple(kw["util"] or S.DEFAULT_UTILS),
                    seqs=tuple(kw["max_num_seqs"] or S.DEFAULT_SEQS))
    prices = load_prices(kw["price"], kw["prices_file"])
    from .workload import parse_percentiles

    wl = S.Workload(kw["input_len"], kw["output_len"] or DEFAULT_OUTPUT_LEN, kw["concurrency"], kw["request_rate"],
                    num_prompts=kw.get("num_prompts"), random_range_ratio=kw.get("random_range_ratio") or 0.0,
                    prefix_len=kw.get("prefix_len") or 0,
                    burstiness=kw["burstiness"] if kw.get("burstiness") is not None else 1.0,
                    percentiles=parse_percentiles(kw.get("percentiles")), fresh_server=bool(kw.get("fresh_server")))
    wl.check()
    targets = S.Targets(kw["max_ttft_ms"], kw["max_tpot_ms"], kw["min_context"], kw["max_quality_risk"])
    req = S.SearchRequest(spec, wl, targets, space, prices, version, kw["max_num_batched_tokens"], kw["top"],
                          price_tier=kw.get("price_tier") or "on-demand",
                          published_prices_only=bool(kw.get("published_prices_only")),
                          sglang=sglang_base, sglang_given=sglang_given,
                          sglang_running=tuple(kw["max_num_seqs"] or ()) if engine != "vllm" else (),
                          server=engine)
    return req, warnings


def search_result(options: dict, load_model=None, explicit: set[str] = frozenset()):
    """The search for the parsed SEARCH_OPTIONS `options`, its request's warnings first (kvcalc search and the web
    API's /api/search both answer with this)."""
    from . import search as S

    req, warnings = build_search(options, load_model, explicit)
    result = S.run_search(req)
    result.warnings[:0] = warnings
    return result
