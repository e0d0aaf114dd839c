/* kvcalc's three plots in plain SVG: capacity vs context, decode speed vs batch, memory bars.
   The numbers come from /api/plots (kvcalc's own sweep functions); this file only draws them. Hovering shows the
   exact values. No library: a few scales, axes, lines and rectangles. */
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const GiB = 2 ** 30;
  // the same colour per configuration as the PNG plots (kvcalc/plots.py CONFIG_COLORS)
  const CONFIG_COLORS = {
    "baseline": "#1f77b4", "fp8-kv": "#ff7f0e", "kv4": "#8c564b", "nf4": "#2ca02c", "nf4+fp8-kv": "#d62728",
    "nf4+kv4": "#e377c2", "awq": "#9467bd",
  };
  const EXTRA_COLORS = ["#17becf", "#bcbd22", "#7f7f7f"];
  const SEGMENT_COLORS = {
    "weights": "#4c72b0", "activation peak": "#dd8452", "non-torch": "#937860", "CUDA graphs": "#8172b3",
    "KV cache": "#55a868", "unused (1 - util)": "#d5d9de", "transient": "#c44e52", "CUDA context": "#a48b62",
    "free": "#eef0f3",
  };
  const M = { left: 64, right: 16, top: 16, bottom: 44 };

  function color(key, i) { return CONFIG_COLORS[key] || EXTRA_COLORS[i % EXTRA_COLORS.length]; }

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmtTokens(n) {  // 1024 -> 1k, 131072 -> 128k (binary k, as --context takes them)
    n = Math.round(n);
    if (n >= 1048576 && n % 1048576 === 0) return (n / 1048576) + "M";
    if (n >= 1024) { const k = n / 1024; return Number.isInteger(k) ? k + "k" : k.toFixed(1) + "k"; }
    return String(n);
  }
  function fmtInt(n) { return Math.round(n).toLocaleString("en-US"); }
  function fmtNum(n, digits) {
    return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function niceStep(span, count) {
    const raw = span / Math.max(count, 1);
    const mag = 10 ** Math.floor(Math.log10(raw));
    const norm = raw / mag;
    return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  }

  // A scale: value -> pixel, and its ticks. kind "log2" or "lin".
  function scale(kind, lo, hi, p0, p1, ticksWanted) {
    if (kind === "log2") {
      lo = Math.max(lo, 1e-9); hi = Math.max(hi, lo * 2);
      const a = Math.log2(lo), b = Math.log2(hi);
      const f = (v) => p0 + (Math.log2(Math.max(v, lo)) - a) / (b - a) * (p1 - p0);
      const ticks = [];
      const stride = Math.max(1, Math.ceil((Math.floor(b) - Math.ceil(a) + 1) / ticksWanted));
      for (let e = Math.ceil(a); e <= Math.floor(b); e += stride) ticks.push(2 ** e);
      return { f, ticks, lo, hi };
    }
    hi = hi > lo ? hi : lo + 1;
    const step = niceStep(hi - lo, ticksWanted);
    hi = Math.ceil(hi / step) * step;
    const f = (v) => p0 + (v - lo) / (hi - lo) * (p1 - p0);
    const ticks = [];
    for (let v = lo; v <= hi + step / 2; v += step) ticks.push(v);
    return { f, ticks, lo, hi };
  }

  function clear(svg) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const w = svg.clientWidth || 800, h = svg.clientHeight || 320;
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    return { w, h };
  }

  function message(svg, text) {
    const { w, h } = clear(svg);
    el("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "muted" }, svg, text);
    svg.dataset.rendered = "empty";
  }

  // -- tooltip ------------------------------------------------------------------------------------------------------
  const tip = () => document.getElementById("tooltip");
  function showTip(evt, text) {
    const t = tip();
    t.textContent = text;
    t.hidden = false;
    const x = Math.min(evt.clientX + 14, window.innerWidth - t.offsetWidth - 8);
    const y = Math.min(evt.clientY + 14, window.innerHeight - t.offsetHeight - 8);
    t.style.left = x + "px";
    t.style.top = y + "px";
  }
  function hideTip() { tip().hidden = true; }

  function axes(svg, xs, ys, w, h, xFmt, yFmt, xLabel, yLabel) {
    const grid = el("g", { class: "grid" }, svg);
    const ax = el("g", { class: "axis" }, svg);
    for (const t of ys.ticks) {
      const y = ys.f(t);
      el("line", { x1: M.left, x2: w - M.right, y1: y, y2: y }, grid);
      el("text", { x: M.left - 6, y: y + 4, "text-anchor": "end" }, ax, yFmt(t));
    }
    for (const t of xs.ticks) {
      const x = xs.f(t);
      el("line", { x1: x, x2: x, y1: M.top, y2: h - M.bottom }, grid);
      el("text", { x, y: h - M.bottom + 16, "text-anchor": "middle" }, ax, xFmt(t));
    }
    el("line", { x1: M.left, x2: w - M.right, y1: h - M.bottom, y2: h - M.bottom }, ax);
    el("line", { x1: M.left, x2: M.left, y1: M.top, y2: h - M.bottom }, ax);
    el("text", { x: (M.left + w - M.right) / 2, y: h - 8, "text-anchor": "middle", class: "muted" }, ax, xLabel);
    el("text", { x: 14, y: (M.top + h - M.bottom) / 2, "text-anchor": "middle", class: "muted",
                 transform: `rotate(-90 14 ${(M.top + h - M.bottom) / 2})` }, ax, yLabel);
  }

  function legend(svg, items, w) {
    const g = el("g", { class: "legend" }, svg);
    el("rect", { x: w - M.right - 206, y: M.top - 6, width: 204, height: items.length * 16 + 6, fill: "#fff",
                 "fill-opacity": 0.85 }, g);
    let y = M.top + 4;
    for (const it of items) {
      const x = w - M.right - 200;
      if (it.line) el("line", { x1: x, x2: x + 18, y1: y, y2: y, stroke: it.color, "stroke-width": 2,
                                "stroke-dasharray": it.dash || "" }, g);
      el(it.marker === "x" ? "path" : "circle", it.marker === "x"
        ? { d: `M${x + 5},${y - 4}l8,8m0,-8l-8,8`, stroke: it.color, "stroke-width": 2 }
        : { cx: x + 9, cy: y, r: 3.5, fill: it.color }, g);
      el("text", { x: x + 24, y: y + 4 }, g, it.label);
      y += 16;
    }
  }

  // Lines with points; hovering anywhere shows the nearest point's exact values.
  function lineChart(svg, o) {
    const { w, h } = clear(svg);
    const pts = [];
    for (const s of o.series) for (const p of s.points) pts.push(p);
    if (!pts.length) { message(svg, o.empty || "nothing to draw"); return; }
    const xv = pts.map((p) => p.x), yv = pts.map((p) => p.y).filter((v) => o.yScale !== "log2" || v > 0);
    const xs = scale(o.xScale, Math.min(...xv), Math.max(...xv), M.left, w - M.right, 10);
    // log axes cannot show 0: zeros (vLLM does not start) sit on a row of their own below 1
    const zeros = o.yScale === "log2" && pts.some((p) => p.y <= 0);
    const ys = scale(o.yScale, o.yScale === "log2" ? (zeros ? 0.5 : 1) : 0,
                     Math.max(...yv, o.yScale === "log2" ? 2 : 1), h - M.bottom, M.top, 6);
    if (zeros) ys.ticks = ys.ticks.filter((t) => t >= 1);
    axes(svg, xs, ys, w, h, o.xFmt, o.yFmt, o.xLabel, o.yLabel);
    if (zeros) el("text", { x: M.left - 6, y: h - M.bottom + 4, "text-anchor": "end" }, svg, "0");
    if (o.vline !== undefined && o.vline >= xs.lo && o.vline <= xs.hi) {
      const x = xs.f(o.vline);
      el("line", { x1: x, x2: x, y1: M.top, y2: h - M.bottom, stroke: "#444", "stroke-dasharray": "3 3" }, svg);
      el("text", { x: x + 4, y: h - M.bottom - 6, class: "muted" }, svg, o.vlineLabel || "");
    }
    const placed = [];
    const g = el("g", { class: "series" }, svg);
    o.series.forEach((s) => {
      const onCurve = s.points.filter((p) => !(o.yScale === "log2" && p.y <= 0));
      if (s.line !== false && onCurve.length > 1) {
        const d = onCurve.map((p, j) => `${j ? "L" : "M"}${xs.f(p.x).toFixed(1)},${ys.f(p.y).toFixed(1)}`).join("");
        el("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || "" }, g);
      }
      for (const p of s.points) {
        const px = xs.f(p.x), py = o.yScale === "log2" && p.y <= 0 ? h - M.bottom : ys.f(p.y);
        const attrs = { class: "point", "data-series": s.key, "data-x": p.x, "data-y": p.y };
        let node;
        if (s.marker === "x") {
          node = el("path", { ...attrs, d: `M${px - 4},${py - 4}l8,8m0,-8l-8,8`, stroke: s.color, "stroke-width": 2 }, g);
        } else {
          node = el("circle", { ...attrs, cx: px, cy: py, r: 3.5, fill: p.hollow ? "#fff" : s.color, stroke: s.color,
                                "stroke-width": 1.5 }, g);
        }
        placed.push({ px, py, text: p.tip, node });
      }
    });
    legend(svg, o.series.map((s) => ({ label: s.label, color: s.color, dash: s.dash, line: s.line !== false,
                                       marker: s.marker })), w);
    const ring = el("circle", { class: "hover-ring", r: 7, visibility: "hidden" }, svg);
    const overlay = el("rect", { x: M.left, y: M.top, width: w - M.left - M.right, height: h - M.top - M.bottom,
                                 fill: "transparent" }, svg);
    overlay.addEventListener("mousemove", (evt) => {
      const box = svg.getBoundingClientRect();
      const sx = (evt.clientX - box.left) * (w / box.width), sy = (evt.clientY - box.top) * (h / box.height);
      let best = null, bd = Infinity;
      for (const p of placed) {
        const d = (p.px - sx) ** 2 + (p.py - sy) ** 2;
        if (d < bd) { bd = d; best = p; }
      }
      if (!best) return;
      ring.setAttribute("cx", best.px); ring.setAttribute("cy", best.py); ring.setAttribute("visibility", "visible");
      showTip(evt, best.text);
    });
    overlay.addEventListener("mouseleave", () => { ring.setAttribute("visibility", "hidden"); hideTip(); });
    svg.dataset.rendered = "chart";
    svg.dataset.points = String(placed.length);
  }

  function capacity(svg, data) {
    const cap = data && data.capacity;
    if (!cap || !cap.series.length) { message(svg, "no vLLM configuration to draw (engine hf, or vLLM refused it)"); return; }
    const series = cap.series.map((s, i) => ({
      key: s.config, label: s.label, color: color(s.config, i),
      points: s.points.map(([ctx, n]) => ({
        x: ctx, y: n, hollow: n === 0,
        tip: `${s.label} (vLLM)\ncontext ${fmtInt(ctx)} tokens (max_model_len)\n` +
             (n > 0 ? `${fmtInt(n)} request${n === 1 ? "" : "s"} at once` : "vLLM does not start: the KV cache cannot hold one request"),
      })),
    }));
    lineChart(svg, { series, xScale: "log2", yScale: "log2", xFmt: fmtTokens, yFmt: fmtInt,
                     xLabel: "context = max_model_len (tokens)", yLabel: "requests at once",
                     vline: data.context, vlineLabel: `context ${fmtTokens(data.context)}` });
  }

  // tokens/s per user vs requests at once, every vLLM configuration of the table (as the PNG's speed plot):
  // hollow points where vLLM's KV cache holds fewer requests of the context than the batch
  function speedByConfig(svg, data, sp) {
    const series = sp.by_config.map((s, i) => ({
      key: s.config, color: color(s.config, i), dash: s.capacity < data.batch ? "6 3" : "",
      label: `${s.label}: ${s.capacity === 0 ? "does not start" : s.capacity < data.batch
        ? `holds ${s.capacity} of ${data.batch} at once` : "fits"}`,
      points: s.points.map((p) => ({
        x: p.batch, y: p.tokens_per_s / p.batch, hollow: !p.fits,
        tip: `${s.label}\nbatch ${p.batch} at context ${fmtInt(sp.context)}\n` +
             `${fmtNum(p.tokens_per_s / p.batch, 1)} tokens/s per user, ${fmtNum(p.tokens_per_s, 1)} all requests ` +
             `(${p.bound}-bound)` + (p.fits ? "" : "\nmore requests of this context than vLLM's KV cache holds"),
      })),
    }));
    lineChart(svg, { series, xScale: "log2", yScale: "lin", xFmt: fmtInt, yFmt: fmtInt,
                     xLabel: "requests decoding together (batch)", yLabel: "decode tokens/s per user",
                     vline: data.batch, vlineLabel: `${data.batch} asked` });
  }

  function speed(svg, data) {
    const sp = data && data.speed;
    if (!sp || !sp.series.length) { message(svg, "no vLLM speed to draw (engine hf, or vLLM refused it)"); return; }
    if (sp.by_config && sp.by_config.length) { speedByConfig(svg, data, sp); return; }
    const series = sp.series.map((s, i) => ({
      key: s.kv, label: `${s.label} (predicted)`, color: i ? "#ff7f0e" : "#1f77b4", dash: i ? "6 3" : "",
      points: s.points.map((p) => ({
        x: p.batch, y: p.tokens_per_s, hollow: !p.fits,
        tip: `${s.label}, ${sp.weights} weights\nbatch ${p.batch} at context ${fmtInt(sp.context)}\n` +
             `${fmtNum(p.tokens_per_s, 1)} tokens/s decode (${p.bound}-bound)` +
             (p.fits ? "" : "\ndoes not fit: vLLM holds fewer requests of this context"),
      })),
    }));
    const measured = sp.measured || [];
    for (const kv of [...new Set(measured.map((m) => m.kv))]) {
      series.push({
        key: "measured-" + kv, label: `measured ${kv === "auto" ? "BF16" : kv.toUpperCase()} KV (${measured[0].gpu})`,
        color: kv === "auto" ? "#0b3d91" : "#a34700", line: false, marker: "x",
        points: measured.filter((m) => m.kv === kv).map((m) => ({
          x: m.batch, y: m.tokens_per_s,
          tip: `measured, vLLM ${m.vllm_version} on ${m.gpu} (${m.case})\nbatch ${m.batch}, prompt ${fmtInt(m.prompt_len)}` +
               ` + ${fmtInt(m.new_tokens)} new tokens\n${fmtNum(m.tokens_per_s, 1)} tokens/s decode`,
        })),
      });
    }
    lineChart(svg, { series, xScale: "log2", yScale: "lin", xFmt: fmtInt, yFmt: fmtInt,
                     xLabel: "batch (concurrent requests)", yLabel: "decode tokens/s",
                     vline: data.batch, vlineLabel: `batch ${data.batch}` });
  }

  function memory(svg, data) {
    const mem = data && data.memory;
    if (!mem || !mem.bars.length) { message(svg, "no rows to draw"); return; }
    const { w, h } = clear(svg);
    const bars = mem.bars;
    const left = 130, top = M.top + 6, bottom = h - M.bottom;
    const band = (bottom - top) / bars.length;
    const short = (b) => (b.fits || (b.engine === "vllm" && b.starts !== false) ? 0 : b.shortfall_bytes || 0);
    const maxBytes = Math.max(mem.total_bytes, ...bars.map((b) => b.total + short(b)));
    const xs = scale("lin", 0, maxBytes / GiB, left, w - M.right - 150, 8);
    const grid = el("g", { class: "grid" }, svg), ax = el("g", { class: "axis" }, svg);
    for (const t of xs.ticks) {
      el("line", { x1: xs.f(t), x2: xs.f(t), y1: top, y2: bottom }, grid);
      el("text", { x: xs.f(t), y: bottom + 16, "text-anchor": "middle" }, ax, String(+t.toFixed(2)));
    }
    el("line", { x1: left, x2: xs.f(xs.hi), y1: bottom, y2: bottom }, ax);
    el("text", { x: (left + xs.f(xs.hi)) / 2, y: h - 8, "text-anchor": "middle", class: "muted" }, ax, "GiB");
    const gx = xs.f(mem.total_bytes / GiB);
    el("line", { x1: gx, x2: gx, y1: top - 4, y2: bottom, stroke: "#b42318", "stroke-dasharray": "4 3" }, svg);
    el("text", { x: gx - 3, y: top - 6, fill: "#b42318", "text-anchor": "end" }, svg,
       `GPU ${(mem.total_bytes / GiB).toFixed(2)} GiB`);
    const g = el("g", { class: "bars" }, svg);
    let segments = 0;
    // a bar's answer, as plots.bar_status: vLLM that starts but holds fewer requests than asked is not short
    const holds = (b) => b.engine === "vllm" && b.starts !== false && !b.fits;
    const status = (b) => b.fits ? "" : holds(b) ? ` (holds ${b.held} of ${data.batch})`
                                                : b.engine === "vllm" ? " (does not start)" : " (out of memory)";
    bars.forEach((b, i) => {
      const y = top + i * band + band * 0.15, hh = band * 0.7;
      el("text", { x: left - 6, y: y + hh / 2 + 4, "text-anchor": "end", class: b.fits ? "" : "muted" }, g,
         b.label.replace(/\s+/g, " ") + status(b));
      let acc = 0;
      for (const [name, bytes] of b.segments) {
        if (bytes <= 0) continue;
        const x0 = xs.f(acc / GiB), x1 = xs.f((acc + bytes) / GiB);
        const rect = el("rect", { class: "seg", x: x0, y, width: Math.max(x1 - x0, 0.5), height: hh,
                                  fill: SEGMENT_COLORS[name] || "#999", "data-row": b.label, "data-segment": name,
                                  "data-bytes": bytes }, g);
        const text = `${b.label.replace(/\s+/g, " ")}: ${name}\n${fmtInt(bytes)} bytes = ${(bytes / GiB).toFixed(2)} GiB` +
          (name === "KV cache" && b.engine === "vllm" ? `\n${fmtInt(b.kv_tokens)} tokens (vLLM's KV cache size)` : "") +
          (name === "KV cache" && b.engine === "hf" ? `\n${fmtInt(b.kv_tokens)} tokens held (context x batch)` : "") +
          (b.fits ? "" : holds(b) ? `\nvLLM starts and holds ${b.held} of the ${data.batch} requests at once`
                              : `\ndoes not fit: needs ${(b.shortfall_bytes / GiB).toFixed(2)} GiB more`);
        rect.addEventListener("mousemove", (evt) => showTip(evt, text));
        rect.addEventListener("mouseleave", hideTip);
        acc += bytes;
        segments += 1;
      }
      if (!b.fits && !holds(b) && b.shortfall_bytes > 0) {
        const x0 = xs.f(acc / GiB), x1 = xs.f((acc + b.shortfall_bytes) / GiB);
        const r = el("rect", { x: x0, y, width: Math.max(x1 - x0, 0.5), height: hh, fill: "none", stroke: "#b42318",
                               "stroke-dasharray": "3 2" }, g);
        const text = `${b.label.replace(/\s+/g, " ")}: short by ${fmtInt(b.shortfall_bytes)} bytes = ` +
                     `${(b.shortfall_bytes / GiB).toFixed(2)} GiB`;
        r.addEventListener("mousemove", (evt) => showTip(evt, text));
        r.addEventListener("mouseleave", hideTip);
      }
    });
    const names = [...new Set(bars.flatMap((b) => b.segments.filter(([, v]) => v > 0).map(([n]) => n)))];
    const lg = el("g", { class: "legend" }, svg);
    names.forEach((n, i) => {
      const x = w - M.right - 140, y = top + i * 16;
      el("rect", { x, y, width: 12, height: 10, fill: SEGMENT_COLORS[n] || "#999" }, lg);
      el("text", { x: x + 18, y: y + 9 }, lg, n);
    });
    svg.dataset.rendered = "chart";
    svg.dataset.points = String(segments);
  }

  window.KvPlots = { capacity, speed, memory, message, fmtTokens };
})();
