"""Pictures of a plan: vLLM concurrency vs context, decode speed vs batch, and where the GPU's memory goes.

Drawing only: the numbers come from `sweeps.py` (plain Python, tested on their own), and this file imports no
engine. matplotlib is optional (`python3 -m pip install matplotlib`, the [plot] extra) and imported only inside the drawing functions, on
the Agg canvas (no pyplot, no GUI, no global backend switch).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UnsupportedModelError, UsageError
from .sweeps import (
    HF_SEGMENTS,
    VLLM_SEGMENTS,
    capacity_series,
    config_labels,
    config_speed_series,
    context_grid,
    hf_longest_contexts,
    kv_label,
    measured_speed_points,
    memory_segments,
    plan_rows,
)
from .units import GiB
from .units import fmt_shortfall as shortfall_text

if TYPE_CHECKING:
    from .plan import PlanRequest, Row

DPI = 150
MISSING_MATPLOTLIB = "plots need matplotlib: python3 -m pip install matplotlib"
OUTPUT_SUFFIXES = (".png", ".svg", ".pdf")

# One colour per configuration key, the same in every panel.
CONFIG_COLORS = {
    "baseline": "#1f77b4", "fp8-kv": "#ff7f0e", "kv4": "#8c564b", "nf4": "#2ca02c", "nf4+fp8-kv": "#d62728",
    "nf4+kv4": "#e377c2", "awq": "#9467bd",
}
EXTRA_COLORS = ("#17becf", "#bcbd22", "#7f7f7f")


# and one line style and marker, so that curves lying on each other (NF4 and AWQ often do) stay visible.
CONFIG_STYLES = {
    "baseline": ("-", "o"), "fp8-kv": ("-", "s"), "nf4": ("--", "^"), "nf4+fp8-kv": ("-", "D"), "awq": (":", "v"),
}


def _color(key: str, index: int = 0) -> str:
    return CONFIG_COLORS.get(key, EXTRA_COLORS[index % len(EXTRA_COLORS)])


def _fmt_tokens(n: float) -> str:
    """1024 -> 1k, 131072 -> 128k, 1536 -> 1.5k (binary k, as --context takes them)."""
    n = int(n)
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    if n >= 1024:
        k = n / 1024
        return f"{k:.0f}k" if k == int(k) else f"{k:.1f}k"
    return str(n)


def check_output(path) -> Path:
    """Fail before any work when no plot can be written: matplotlib missing, an unknown image type, no folder."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(MISSING_MATPLOTLIB)
    path = Path(path)
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(f"cannot write a plot to {str(path)!r}: name it .png (or .svg, .pdf)")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write a plot to {str(path)!r}: no folder {str(path.parent)!r}")
    if path.is_dir():
        raise UsageError(f"cannot write a plot to {str(path)!r}: it is a folder")
    return path


# -- drawing ----------------------------------------------------------------------------------------------------------


def _figure(width: float, height: float):
    """A figure on the Agg canvas (no pyplot: nothing global, nothing to close)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(MISSING_MATPLOTLIB) from None
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path) -> Path:
    """Write the figure; a PNG goes through a 256-colour palette (a third of the size, no visible change)."""
    import io

    path = Path(path)
    try:
        if path.suffix.lower() != ".png":
            fig.savefig(path, dpi=DPI)
            return path
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
        buf.seek(0)
        try:
            from PIL import Image  # a dependency of matplotlib
        except ImportError:
            path.write_bytes(buf.getvalue())
            return path
        with Image.open(buf) as image:
            palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                    dither=Image.Dither.NONE)
            palette.save(path, format="PNG", optimize=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write the plot to {path}: {exc}") from None
    return path


def _header(req: PlanRequest) -> str:
    parts = [f"{req.spec.name} on {req.gpu.name} ({req.gpu.memory_total_bytes / GiB:.1f} GiB)"]
    if req.tp > 1:
        parts.append(f"TP {req.tp}")
    if req.pp > 1:
        parts.append(f"PP {req.pp}")
    return ", ".join(parts)


def _log2_context_axis(ax, lo: int, hi: int) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ticks = []
    n = lo
    while n <= hi:
        ticks.append(n)
        n *= 2
    if ticks[-1] != hi:
        ticks.append(hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([_fmt_tokens(t) for t in ticks])
    ax.set_xlim(lo / 1.1, hi * 1.1)


def _int_log_axis(axis, base: int = 2) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=base))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, wrap=True,
            color="#444444")


def draw_capacity(ax, req: PlanRequest, rows: list[Row] | None = None) -> None:
    labels = config_labels(req)
    grid = context_grid(req)
    try:
        series = capacity_series(req)
    except UnsupportedModelError as exc:
        series = {}
        _note(ax, str(exc))
    top = 1
    for i, (key, points) in enumerate(series.items()):
        xs = [c for c, n in points if n > 0]
        ys = [n for c, n in points if n > 0]
        if not xs:
            ax.plot([], [], color=_color(key, i), label=f"vLLM {labels.get(key, key)}: does not start")
            continue
        top = max(top, max(ys))
        last = "" if xs[-1] == grid[-1] else f" (starts up to {_fmt_tokens(xs[-1])})"
        style, marker = CONFIG_STYLES.get(key, ("-", "o"))
        ax.plot(xs, ys, linestyle=style, marker=marker, markersize=4, linewidth=2 if style == "-" else 2.4,
                color=_color(key, i), label=f"vLLM {labels.get(key, key)}{last}")
    if rows is not None and "hf" in req.engines:
        markers = iter(("s", "D", "^", "v", "P", "X", "*"))
        for i, (key, longest) in enumerate(hf_longest_contexts(req, rows).items()):
            x = min(max(longest, grid[0]), grid[-1])
            ax.plot([x], [req.batch], linestyle="none", marker=next(markers, "o"), markersize=9,
                    markerfacecolor="none", markeredgewidth=2, color=_color(key, i), zorder=5,
                    label=f"HF {labels.get(key, key)}: batch {req.batch} up to {_fmt_tokens(longest)}")
    _log2_context_axis(ax, grid[0], grid[-1])
    ax.set_yscale("log", base=2)
    ax.set_ylim(0.7, max(top, req.batch) * 1.6)
    _int_log_axis(ax.yaxis)
    if grid[0] <= req.context <= grid[-1]:
        ax.axvline(req.context, color="#555555", linestyle=":", linewidth=1)
        ax.text(req.context, 0.98, f" context asked: {_fmt_tokens(req.context)}", transform=ax.get_xaxis_transform(),
                ha="left", va="top", fontsize=8, color="#555555")
    if req.batch > 1:
        ax.axhline(req.batch, color="#555555", linestyle="--", linewidth=0.8)
    ax.set_xlabel("context per request (tokens, prompt + generation; vLLM max_model_len = context)")
    ax.set_ylabel("max concurrency (requests at once)")
    if req.batch > 1:
        ax.text(grid[0], req.batch, f" {req.batch} asked", ha="left", va="bottom", fontsize=8, color="#555555")
    ax.set_title(f"Requests that fit at once, by context: {_header(req)}\n"
                 f"vLLM {req.vllm_version}, gpu_memory_utilization {req.vllm_util:g}"
                 + (", eager" if req.enforce_eager else ", CUDA graphs"), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)


def draw_speed(ax, req: PlanRequest) -> None:
    """Tokens/s one user gets vs requests decoding together, for every vLLM configuration of the plan: solid while
    vLLM's KV cache holds that many requests of --context tokens, dashed beyond; a configuration that does not hold
    --batch says how many it holds in its label. On the H200, the measured points of the baseline weights."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    labels = config_labels(req)
    series = config_speed_series(req)
    ymax, ymin = 0.0, math.inf
    dashed = False
    for i, (key, (capacity, points)) in enumerate(series.items()):
        style, marker = CONFIG_STYLES.get(key, ("-", "o"))
        held = ("does not start" if capacity == 0 else
                f"holds {capacity} of {req.batch} at once" if capacity < req.batch else "fits")
        fit = [p for p in points if p.fits]
        over = [p for p in points if not p.fits]
        color = _color(key, i)
        label = f"{labels.get(key, key)}: {held}"
        if fit:
            ax.plot([p.batch for p in fit], [p.tokens_per_s / p.batch for p in fit], color=color, linewidth=2,
                    linestyle=style if style != "--" else "-.", marker=marker, markersize=3, label=label)
            label = None
        if over:
            start = fit[-1:] + over  # join the dashed part to the solid one
            ax.plot([p.batch for p in start], [p.tokens_per_s / p.batch for p in start], color=color,
                    linewidth=1.2, linestyle="--", alpha=0.7, label=label)
            dashed = True
        per_user = [p.tokens_per_s / p.batch for p in points]
        ymax, ymin = max(ymax, max(per_user)), min(ymin, min(per_user))
    weights = req.weights_or_default.name
    measured = [] if req.enforce_eager else measured_speed_points(req.spec.name, req.gpu.id, req.tp, weights)
    for kv in sorted({m.kv for m in measured}, key=lambda k: k != "auto"):
        ms = sorted((m for m in measured if m.kv == kv), key=lambda m: m.batch)
        key = "baseline" if kv == "auto" else f"{kv}-kv"
        ax.plot([m.batch for m in ms], [m.tokens_per_s / m.batch for m in ms], linestyle="none",
                marker="o" if kv == "auto" else "D", markersize=8, markerfacecolor=_color(key),
                markeredgecolor="black", zorder=6,
                label=f"measured ({ms[0].gpu}, vLLM {'.'.join(ms[0].vllm_version.split('.')[:2])}), {kv_label(kv)}, "
                      f"prompt {ms[0].prompt_len} + {ms[0].new_tokens} new")
        ymax = max(ymax, max(m.tokens_per_s / m.batch for m in ms))
        ymin = min(ymin, min(m.tokens_per_s / m.batch for m in ms))
    if dashed:
        ax.plot([], [], color="#777777", linestyle="--", linewidth=1.2,
                label=f"dashed: more requests of {_fmt_tokens(req.context)} than vLLM's KV cache holds")
    if req.batch > 1:
        ax.axvline(req.batch, color="#555555", linestyle=":", linewidth=1)
        ax.text(req.batch, 0.98, f" {req.batch} asked", transform=ax.get_xaxis_transform(), ha="left", va="top",
                fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([1, 2, 4, 8, 16, 32, 64, 128, 256]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels(["1", "2", "4", "8", "16", "32", "64", "128", "256"])
    ax.set_xlim(0.85, 300)
    ax.set_yscale("log")
    if ymax > 0:
        ax.set_ylim(ymin / 1.5, ymax * 1.5)
    narrow = ymax > 0 and ymax / ymin < 20  # less than about a decade shown: label 20, 30, 40 ... too
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=tuple(range(1, 10)) if narrow else (1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:,.1f}"))
    ax.set_xlabel("requests decoding together (batch)")
    ax.set_ylabel("decode tokens/s per user (1 / time per output token)")
    ax.set_title(f"Tokens/s per user, by requests at once: {_header(req)}\n"
                 f"vLLM decode (no prefill interleaved), context {_fmt_tokens(req.context)} tokens per request, "
                 + ("eager" if req.enforce_eager else "CUDA graphs"), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)


SEGMENT_COLORS = {
    "weights": "#4c72b0", "KV cache": "#55a868", "activation peak": "#c44e52", "transient": "#c44e52",
    "non-torch": "#8172b2", "CUDA context": "#8172b2", "CUDA graphs": "#ccb974", "unused (1 - util)": "#d0d0d0",
    "free": "#f0f0f0",
}
# vLLM's and HF's names for the same kind of memory share a colour and a legend entry
SEGMENT_LEGEND = {
    "weights": "weights", "KV cache": "KV cache (vLLM: all it allocates; HF: at context x batch)",
    "activation peak": "activations (vLLM: profile-run peak; HF: prefill or decode transient peak)",
    "transient": "activations (vLLM: profile-run peak; HF: prefill or decode transient peak)",
    "non-torch": "CUDA context / non-torch memory", "CUDA context": "CUDA context / non-torch memory",
    "CUDA graphs": "CUDA graphs (vLLM estimate)", "unused (1 - util)": "vLLM: left unused (1 - util)",
    "free": "HF: free",
}


def bar_status(req: PlanRequest, bar) -> str:
    """A memory bar's answer, the table's (render.fits_text): vLLM that starts but holds fewer requests than asked
    is not "does not fit"."""
    if bar.fits:
        return "(fits)"
    if bar.engine == "vllm" and bar.starts:
        return f"(holds {bar.held} of {req.batch} at once)"
    return "(does not start)" if bar.engine == "vllm" else "(out of memory)"


def draw_memory(ax, req: PlanRequest, rows: list[Row]) -> None:
    bars = memory_segments(req, rows)
    total = req.gpu.memory_total_bytes / GiB
    span = max([total] + [b.total / GiB for b in bars]) * 1.22
    if not bars:
        _note(ax, "no rows to draw")
        return
    seen = set()
    labels = []
    order = list(dict.fromkeys(SEGMENT_LEGEND[n] for n in VLLM_SEGMENTS[:-1] + HF_SEGMENTS + VLLM_SEGMENTS[-1:]))
    for y, bar in enumerate(bars):
        left = 0.0
        for name, size in bar.segments:
            width = size / GiB
            if width <= 0:
                continue
            legend = SEGMENT_LEGEND[name]
            hatch = "//" if name in ("unused (1 - util)", "free") else None
            ax.barh(y, width, left=left, height=0.7, color=SEGMENT_COLORS[name], edgecolor="white",
                    linewidth=0.6, hatch=hatch, label=legend if legend not in seen else None)
            seen.add(legend)
            text = ""
            if name not in ("unused (1 - util)", "free"):
                # the longest label that fits inside its segment (about 1.2% of the axis per character at size 7)
                for candidate in ((f"{width:.1f} GiB = {_fmt_tokens(bar.kv_tokens)} tokens",) if name == "KV cache"
                                  and bar.kv_tokens else ()) + (f"{width:.1f}",):
                    if len(candidate) * 0.0135 * span <= width:
                        text = candidate
                        break
            if text:
                ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=7,
                        color="white" if name != "CUDA graphs" else "black")
            left += width
        labels.append(bar.label + "  " + bar_status(req, bar))
        if not bar.fits and bar.shortfall_bytes > 0 and not (bar.engine == "vllm" and bar.starts):
            ax.text(max(left, total), y, f" short by {shortfall_text(bar.shortfall_bytes)[1:]}", ha="left",
                    va="center", fontsize=7, color="#b00000")
    ax.axvline(total, color="black", linewidth=1.5, label=f"GPU total ({total:.1f} GiB usable)")
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels(labels, fontsize=8)
    for tick, bar in zip(ax.get_yticklabels(), bars):
        if not bar.fits:
            tick.set_color("#b00000")
    ax.invert_yaxis()
    widest = max(b.total for b in bars) / GiB
    short = any(not b.fits and b.shortfall_bytes > 0 and not (b.engine == "vllm" and b.starts) for b in bars)
    ax.set_xlim(0, max(total, widest) * (1.22 if short else 1.02))
    ax.set_xlabel("GPU memory (GiB = 2^30 bytes; numbers in bars are GiB)")
    ax.set_title(f"Does it fit? Where the memory goes: {_header(req)}\n"
                 f"context {_fmt_tokens(req.context)} tokens, batch {req.batch}; vLLM fills its KV cache up to "
                 f"util {req.vllm_util:g}, HF holds the cache at the context", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    handles, names = ax.get_legend_handles_labels()
    ranked = sorted(zip(handles, names), key=lambda hn: order.index(hn[1]) if hn[1] in order else len(order))
    ax.legend([h for h, _ in ranked], [n for _, n in ranked], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)


def plot_capacity_vs_context(req: PlanRequest, path, rows: list[Row] | None = None) -> Path:
    """vLLM max concurrency vs context per configuration (HF's longest context at --batch as markers)."""
    fig = _figure(11, 5.2)
    draw_capacity(fig.add_subplot(), req, rows if rows is not None else plan_rows(req))
    return _save(fig, path)


def plot_decode_vs_batch(req: PlanRequest, path) -> Path:
    """Predicted vLLM decode tokens/s vs batch (BF16 KV and FP8 KV) and, on the H200, the measured points."""
    fig = _figure(11, 5.2)
    draw_speed(fig.add_subplot(), req)
    return _save(fig, path)


def plot_memory_breakdown(req: PlanRequest, rows: list[Row], path) -> Path:
    """Stacked bars per configuration and engine: weights, activations, overheads, KV cache, unused/free."""
    fig = _figure(11, 1.6 + 0.42 * max(len(rows), 1))
    draw_memory(fig.add_subplot(), req, rows)
    return _save(fig, path)


def plot_all(req: PlanRequest, rows: list[Row], path) -> Path:
    """The three panels in one PNG (kvcalc plan --plot FILE.png)."""
    memory_height = 1.6 + 0.42 * max(len(rows), 1)
    fig = _figure(11, 5.2 + 5.2 + memory_height)
    axes = fig.subplots(3, 1, height_ratios=[5.2, 5.2, memory_height])
    draw_capacity(axes[0], req, rows)
    draw_speed(axes[1], req)
    draw_memory(axes[2], req, rows)
    return _save(fig, path)



def plot_kind(kind: str, req: PlanRequest, rows: list[Row], path) -> Path:
    if kind == "capacity":
        return plot_capacity_vs_context(req, path, rows)
    if kind == "speed":
        return plot_decode_vs_batch(req, path)
    if kind == "memory":
        return plot_memory_breakdown(req, rows, path)
    if kind == "all":
        return plot_all(req, rows, path)
    raise UsageError(f"no plot {kind!r}; choose from capacity, speed, memory")
