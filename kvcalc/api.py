"""kvcalc's Python API: `kvcalc.plan`, `explain`, `fit`, `search`, `validate_log`, `validate_metrics`.

Each function takes the CLI command's options as keyword arguments, by their names in kvcalc/options.py (the names
`--help` shows, with underscores: `max_model_len=32768`, `kv="fp8"`, `tp=2`), and returns a typed result whose
`to_json()` is exactly what the command prints with `--json`. The keywords are turned into the command's own
arguments and parsed by the CLI's click options, so a value means what it means on the command line ("32k" and
32768 both work for a token count) and a bad one raises the same `kvcalc.UsageError` with the same one-line message.
There is no second copy of option translation here; docs/api.md documents the API (stable: semantic versioning).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError, shown
from .gate import GateFailed

__all__ = ["plan", "explain", "fit", "search", "validate_log", "validate_metrics", "PlanResult", "ExplainResult",
           "FitResult", "SearchResult", "LogValidation", "MetricsValidation", "UsageError", "GateFailed"]


# ------------------------------------------------------------------------------------------ keywords -> the CLI's


def _argv(table, options: dict[str, Any], command: str) -> list[str]:
    """The command-line arguments that give `options` (keyword name -> Python value) to `table`'s click options."""
    by_name = {o.name: o for o in table}
    argv: list[str] = []
    for name, value in options.items():
        option = by_name.get(name)
        if option is None:
            known = ", ".join(sorted(by_name))
            raise UsageError(f"kvcalc.{command}(): no option {shown(name)}; the options are {known}")
        if value is None:
            continue
        flag = option.spellings[0]
        if option.is_flag and not option.secondary:
            if not isinstance(value, bool):
                raise UsageError(f"kvcalc.{command}(): {name} is a switch: True or False, not {shown(value)}")
            argv += [flag] if value else []
        elif option.secondary:
            if not isinstance(value, bool):
                raise UsageError(f"kvcalc.{command}(): {name} is True or False, not {shown(value)}")
            argv.append(flag if value else option.secondary)
        elif option.multiple:
            values = [value] if isinstance(value, (str, int, float)) else list(value)
            for item in values:
                argv += [flag, str(item)]
        elif isinstance(value, (dict, list)) and option.metavar == "JSON":
            import json

            argv += [flag, json.dumps(value)]
        elif isinstance(value, (list, tuple)):  # a list option (--weights awq,fp8, search's grids): comma-joined
            argv += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, bool):
            raise UsageError(f"kvcalc.{command}(): {name} takes a value, not {value}")
        else:
            argv += [flag, str(value)]
    return argv


def _parse(table, options: dict[str, Any], command: str) -> tuple[dict, set[str]]:
    from .options import parse

    return parse(table, _argv(table, options, command), command=f"kvcalc.{command}")


def _request(options: dict[str, Any], command: str):
    from .options import FIT_PLAN_OPTIONS, PLAN_OPTIONS
    from .request import build_request

    values, given = _parse(FIT_PLAN_OPTIONS if command == "fit" else PLAN_OPTIONS, options, command)
    return build_request(values, given)


# ------------------------------------------------------------------------------------------ results


def _as_printed(payload: dict) -> dict:
    """The payload as the command's --json prints it (tuples become lists...), so to_json() equals the CLI's JSON."""
    import json

    return json.loads(json.dumps(payload))


@dataclass
class PlanResult:
    """`kvcalc plan`: the rows of the decision table. `to_json()` is `kvcalc plan --json` (schema kvcalc.plan/1)."""

    request: Any  # kvcalc.plan.PlanRequest
    rows: list  # kvcalc.plan.Row, each with its own to_json()
    warnings: list[str]
    sweep: list | None = None  # kvcalc.plan.TpOption: the TP sweep, when the CLI would show it

    def to_json(self) -> dict:
        from .plan import plan_json

        return _as_printed(plan_json(self.request, self.rows, self.warnings, self.sweep))

    def chosen(self, engine: str = "vllm"):
        """The row of the asked configuration (--weights/--kv, else the baseline) on `engine`, or None."""
        from .plan import custom_key

        key = custom_key(self.request)
        return next((r for r in self.rows if r.engine == engine and r.config == key), None)

    @property
    def fits(self) -> bool:
        """What `--require-fit` checks: the asked configuration fits on every asked engine."""
        return self.failure is None

    @property
    def failure(self) -> str | None:
        """The one line `--require-fit` prints when it fails (None when it passes)."""
        from .gate import plan_failure

        return plan_failure(self.request, self.rows)

    def require_fit(self) -> PlanResult:
        """Raise GateFailed (with the `--require-fit` line) unless the asked configuration fits; else self."""
        if self.failure:
            raise GateFailed(self.failure)
        return self

    def deployment(self, kind: str | None = None):
        """The asked configuration's vLLM deployment (kvcalc.deploy.Deployment), or with `kind` the text of one
        deployment file, as `kvcalc plan --emit KIND` prints it."""
        from .deploy import emit, from_plan

        row = self.chosen("vllm")
        if row is None:
            raise UsageError("no vLLM row for the asked configuration: nothing to deploy")
        d = from_plan(self.request, row)
        return d if kind is None else emit(d, kind)


@dataclass
class ExplainResult:
    """`kvcalc explain`: the asked configuration's rows and their breakdown. `text` is what the command prints;
    `to_json()` is the plan JSON (kvcalc.plan/1) of these rows, each with its full breakdown."""

    request: Any
    rows: list
    warnings: list[str]
    text: str = ""

    def to_json(self) -> dict:
        from .plan import plan_json

        return _as_printed(plan_json(self.request, self.rows, self.warnings))


@dataclass
class FitResult:
    """`kvcalc fit QUESTION`: `value` (None: nothing in range fits), its unit and the proof. `to_json()` is
    `kvcalc fit --json` (schema kvcalc.fit/1)."""

    answer: Any  # kvcalc.inverse.Answer
    request: Any
    warnings: list[str]

    @property
    def value(self):
        return self.answer.value

    @property
    def failure(self) -> str | None:
        from .gate import fit_failure

        return fit_failure(self.answer)

    def to_json(self) -> dict:
        return _as_printed(self.answer.to_json())


@dataclass
class SearchResult:
    """`kvcalc search`: ranked deployments (`results`, cheapest first) and why others were rejected. `to_json()` is
    `kvcalc search --json` (schema kvcalc.search/1)."""

    result: Any  # kvcalc.search.SearchResult

    @property
    def results(self) -> list:
        return self.result.results

    @property
    def winner(self):
        return self.result.results[0] if self.result.results else None

    @property
    def failure(self) -> str | None:
        from .gate import search_failure

        return search_failure(self.result)

    def to_json(self) -> dict:
        from .search import search_json

        return _as_printed(search_json(self.result))

    def deployment(self, kind: str | None = None, rank: int = 1):
        """The deployment of result `rank` (1: the winner), or with `kind` one deployment file (`--emit KIND`)."""
        from .deploy import emit, from_search

        d = from_search(self.result, rank)
        return d if kind is None else emit(d, kind)


class _Verdict:
    """The verdict of a validate command's JSON, shared by its log and metrics results."""

    def to_json(self) -> dict:
        raise NotImplementedError

    @property
    def verdict(self) -> dict:
        return self.to_json()["verdict"]

    @property
    def ok(self) -> bool:
        """No MISS and no MISMATCH: what `--strict` requires."""
        v = self.verdict
        return not v["miss"] and not v["mismatch"]


@dataclass
class LogValidation(_Verdict):
    """`kvcalc validate --from-log`: kvcalc beside a vLLM start-up log. `to_json()` is the command's `--json`."""

    parsed: dict
    report: dict
    model: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        from .validate.reports import log_json

        return _as_printed(log_json(self.parsed, self.report))


@dataclass
class MetricsValidation(_Verdict):
    """`kvcalc validate --metrics`: a running server's vllm:cache_config_info beside the plan. `to_json()` is the
    command's `--json` (schema kvcalc.validate-metrics/1)."""

    source: str
    report: dict

    def to_json(self) -> dict:
        from .validate.reports import metrics_json

        return _as_printed(metrics_json(self.source, self.report))


# ------------------------------------------------------------------------------------------ the functions


def plan(*, tp_sweep: bool = False, require_fit: bool = False, **options) -> PlanResult:
    """The decision table, as `kvcalc plan`: e.g. `kvcalc.plan(gpu="l4", model="llama-3.1-8b", context="16k")`.
    `tp_sweep=True` adds the TP sweep (`--tp-sweep`); `require_fit=True` raises GateFailed unless the asked
    configuration fits (`--require-fit`)."""
    from .plan import plan as make_plan
    from .plan import should_sweep
    from .plan import tp_sweep as make_sweep

    req, warnings = _request(options, "plan")
    rows = make_plan(req, warnings)
    sweep = make_sweep(req) if should_sweep(req, rows, tp_sweep) else None
    result = PlanResult(req, rows, warnings, sweep)
    return result.require_fit() if require_fit else result


def explain(**options) -> ExplainResult:
    """The breakdown of the asked configuration (`weights=`/`kv=`, else the baseline), as `kvcalc explain`."""
    from .plan import explained_rows
    from .plan import plan as make_plan
    from .render import explain_text

    req, warnings = _request(options, "explain")
    rows = explained_rows(req, make_plan(req, warnings), warnings)
    return ExplainResult(req, rows, warnings, "\n".join(explain_text(req, r) for r in rows))


def fit(question: str, *, max_gpus: int = 16, **options) -> FitResult:
    """Plan backwards for one vLLM configuration, as `kvcalc fit QUESTION` (max-context, max-concurrency,
    min-util, min-gpus, auto)."""
    from .inverse import answer
    from .options import FIT_QUESTIONS

    if question not in FIT_QUESTIONS:
        raise UsageError(f"kvcalc.fit(): question {shown(question)} is not one of {', '.join(FIT_QUESTIONS)}")
    req, warnings = _request(options, "fit")
    return FitResult(answer(question, req, max_gpus), req, warnings)


def search(**options) -> SearchResult:
    """The cheapest vLLM deployments meeting a workload's targets, as `kvcalc search`: e.g.
    `kvcalc.search(model="llama-3.1-8b", input_len="2k", output_len=512, concurrency=32, max_tpot_ms=50)`.
    List options take a list or the CLI's comma-separated text (`gpus=["l4", "h100"]` or `gpus="l4,h100"`)."""
    from .options import SEARCH_OPTIONS
    from .request import search_result

    values, given = _parse([o for o in SEARCH_OPTIONS if o.name not in ("as_json", "emit")], options, "search")
    return SearchResult(search_result(values, None, given))


def validate_log(path: str | None = None, *, text: str | None = None, model: str | None = None,
                 gpu: str | None = None, vllm_version: str | None = None, run: int | None = None,
                 **settings) -> LogValidation:
    """kvcalc beside a vLLM start-up log (a file `path`, or the log's `text`), as `kvcalc validate --from-log`.
    `settings` are that command's options (kv, util, weights, tp, pp, max_model_len, max_num_batched_tokens,
    max_num_seqs, enforce_eager, entrypoint): what the log does not say."""
    from .validate.reports import from_log

    if (path is None) == (text is None):
        raise UsageError("kvcalc.validate_log(): give a log file path or its text, one of them")
    got = from_log(path or "<text>", model, gpu, _validate_settings(settings, "validate_log", metrics=False),
                   vllm_version=vllm_version, run=run, text=text)
    notes = [got["model_note"]] if got["model_note"] else []
    return LogValidation(got["parsed"], got["report"], got["model"], notes)


def validate_metrics(source: str, *, model: str, gpu: str, vllm_version: str | None = None,
                     **settings) -> MetricsValidation:
    """A running vLLM server's /metrics (an http URL or a saved text file) beside kvcalc's plan for these settings,
    as `kvcalc validate --metrics` (the same settings as validate_log, and block_size)."""
    from .validate.metrics import check_metrics, read_metrics

    report = check_metrics(read_metrics(source), model, gpu, vllm_version=vllm_version,
                           **_validate_settings(settings, "validate_metrics", metrics=True))
    return MetricsValidation(source, report)


# `kvcalc validate`'s settings: plan's options as overrides of what a log or a server says (options.override)
_VALIDATE_SETTINGS = ("kv", "util", "weights", "quantization", "tp", "pp", "max_model_len", "max_num_batched_tokens",
                      "max_num_seqs", "enforce_eager", "entrypoint")


def _validate_settings(settings: dict[str, Any], command: str, metrics: bool) -> dict[str, Any]:
    """The keywords parsed by `kvcalc validate`'s own options, normalized and mapped as the command does."""
    from .options import override
    from .validate.reports import normalize_formats, settings_overrides

    names = _VALIDATE_SETTINGS + (("block_size",) if metrics else ())
    values, _ = _parse([override(name, "") for name in names], settings, command)
    weights, kv = normalize_formats(values.pop("weights"), values.pop("kv"), values.pop("quantization"),
                                    values["max_model_len"])
    return settings_overrides(weights=weights, kv=kv, **values)
