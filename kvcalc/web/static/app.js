/* kvcalc serve: the form, the URL, the decision tables, explain, downloads. Numbers come from the JSON API, which
   runs the CLI's own code; this file only formats them the way `kvcalc plan` prints them. */
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const GiB = 2 ** 30;
  const DEBOUNCE_MS = 250;
  // form fields sent to the API under the CLI's option names
  const TEXT_FIELDS = ["batch", "util", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "vllm_version",
                       "tp", "pp", "mem_fraction_static", "sglang_version", "sglang_command"];
  const SELECT_FIELDS = ["engine", "weights", "kv"];
  const CHECK_FIELDS = ["enforce_eager", "tp_sweep"];
  const MAX_LINK_CONFIG = 6000;  // a pasted config.json goes into the link only while the link stays short

  let info = null, gpus = [], models = [];
  let timer = null, generation = 0, controller = null;
  let last = { params: [], plans: [], plots: null };  // what the page shows now
  let explainKey = "";  // "gpu|config|engine" of the open explain panel

  // -- formatting, as kvcalc/render.py prints the table -------------------------------------------------------------
  const gib = (n) => (n === null || n === undefined ? "-" : (n / GiB).toFixed(2));
  const commas = (n, digits) => n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const tokens = (n) => Math.trunc(n).toLocaleString("en-US");
  // a vLLM release that does not serve the model (engines/vllm_support.py): "no (vLLM 0.10.1+)", as the CLI prints it
  const unservedCell = (r) => {
    const v = (r.verdicts || []).find((s) => s.startsWith("not served: needs "));
    return v ? `no (${v.slice("not served: needs ".length)})` : null;
  };

  // what is missing, as the CLI prints it (units.fmt_shortfall): GiB, or MiB/KiB below 0.005 GiB (never "-0.00 GiB")
  const shortfall = (n) => {
    if (n >= 0.005 * GiB) return `-${(n / GiB).toFixed(2)} GiB`;
    for (const [unit, size] of [["MiB", 1048576], ["KiB", 1024]]) if (n >= size) return `-${(n / size).toFixed(2)} ${unit}`;
    return `-${n} B`;
  };
  // the fits cell as render.fits_text: a vLLM server that starts but holds fewer requests says how many
  const fitsCell = (r, plan) => {
    if (r.fits) return "yes";
    const unserved = unservedCell(r);
    if (unserved) return unserved;
    const v = r.vllm_breakdown;
    if (v && v.fits && r.max_concurrency) return `no: ${r.max_concurrency} of ${plan.batch}`;
    if (v && !v.fits) return `no: does not start (${shortfall(r.shortfall_bytes)})`;
    return `no (${shortfall(r.shortfall_bytes)})`;
  };
  // decode tok/s of all requests, at the batch vLLM holds ("@N" when fewer than asked), as render.decode_text
  const decodeCell = (r, plan) => commas(r.decode_tokens_per_s, 1) +
    (r.decode_batch !== undefined && r.decode_batch < plan.batch ? ` @${r.decode_batch}` : "");

  // the capacity as a low-high range where the start kind leaves it open (trust.capacity_range: a cold torch.compile
  // start on vLLM 0.27-0.30, plan.capacity_range), as render.py's table prints it; the figure alone elsewhere
  const spanOf = (r) => (r.trust && r.trust.capacity_range) || null;
  const capacityCell = (r) => {
    if (r.kv_capacity_tokens === null) return "-";
    const span = spanOf(r);
    return (span ? `${tokens(span.kv_capacity_tokens_low)}-` : "") + tokens(r.kv_capacity_tokens);
  };
  const concCell = (r) => {
    if (r.max_concurrency === null) return "-";
    const span = spanOf(r);
    return (span && span.max_concurrency_low !== span.max_concurrency_high ? `${span.max_concurrency_low}-` : "") +
      String(r.max_concurrency);
  };
  // search's max conc. (all replicas), low-high where its row's capacity_range leaves it open (search_render.conc_text)
  const searchConc = (d) => {
    const span = d.capacity_range;
    return (span && span.max_concurrency_low !== span.max_concurrency_high ? `${commas(span.max_concurrency_low, 0)}-` : "") +
      commas(d.max_concurrency, 0);
  };
  const spanTitle = (span) => `low end: the freed compile segment pinned (${(span.pinned_bytes / GiB).toFixed(2)} GiB ` +
    `a rank less KV; fits: ${span.fits_low ? "yes" : "no"}), high end: not pinned (fits: ${span.fits_high ? "yes" : "no"}). ` +
    span.reason;

  const COLUMNS = [
    // [header, field, format(row, plan), numeric?]
    ["config", "config", (r) => r.config, false],
    ["engine", "engine", (r) => r.engine, false],
    ["weights GiB", "weights_bytes", (r) => gib(r.weights_bytes), true],
    ["KV B/token", "kv_bytes_per_token", (r) => commas(r.kv_bytes_per_token, 0), true],
    ["KV capacity tokens", "kv_capacity_tokens", (r) => capacityCell(r), true],
    ["max conc. @ctx", "max_concurrency", (r) => concCell(r), true],
    ["HF mem GiB", "hf_memory_bytes", (r) => gib(r.hf_memory_bytes), true],
    ["decode tok/s all requests", "decode_tokens_per_s", decodeCell, true],
    ["speed range", "trust", (r) => trustRange(r), false],
    ["fits", "fits", fitsCell, false],
    ["quality risk", "quality_risk", (r) => r.quality_risk, false],
    ["verdict", "verdicts", (r) => r.verdicts.join(", "), false],
  ];

  // -- how far to trust a row's speed (kvcalc/trust.py): the range where ~80% of held-out cases of its class fall
  function trustRange(r) {
    const t = r.trust && r.trust.speed;
    if (!t) return "-";
    if (t.low === null || t.high === null) return `no range (${t.label})`;  // SGLang: too few held-out results
    // as Python's f"{x:+.0%}" (render.py): x * 100 rounded half to even, the sign kept for -0
    const even = (v) => { const f = Math.floor(v), d = v - f; return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f; };
    const pct = (x) => `${x >= 0 ? "+" : "-"}${even(Math.abs(x) * 100)}%`;
    return `${pct(t.low)}/${pct(t.high)} (${t.label})`;
  }

  // -- a search row's TPOT range in ms, as search_render._tpot_range prints it ("no range": SGLang off its measured GPU)
  function tpotRange(d) {
    const e = d.speed_evidence;
    if (!e || e.tpot_low === undefined) return "-";
    if (e.tpot_low === null || e.tpot_high === null) return "no range";
    return `${commas(d.tpot_ms * (1 + e.tpot_low), 1)}-${commas(d.tpot_ms * (1 + e.tpot_high), 1)}`;
  }

  // -- tokens as the CLI reads them: 32k = 32768 (binary k and m) -----------------------------------------------------
  function parseTokens(text) {
    const m = /^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([kKmM]?)\s*$/.exec(String(text).replace(/[,_]/g, ""));
    if (!m) return null;
    const v = parseFloat(m[1]) * ({ "": 1, k: 1024, m: 1048576 })[m[2].toLowerCase()];
    return Number.isInteger(v) && v > 0 ? v : null;
  }

  // -- state <-> form <-> URL ---------------------------------------------------------------------------------------
  const radio = (name) => document.querySelector(`input[name=${name}]:checked`).value;
  const setRadio = (name, value) => {
    const r = document.querySelector(`input[name=${name}][value="${CSS.escape(value)}"]`);
    if (r) r.checked = true;
  };
  const selectedGpus = () => [...document.querySelectorAll("#gpu-list input:checked")].map((c) => c.value);

  function readForm() {
    const s = { source: radio("source"), lengths: radio("lengths"), gpu: selectedGpus() };
    s.model = $("model").value.trim();
    s.hub = $("hub").value.trim();
    s.config = $("config").value;
    s.config_name = $("config-name").value.trim();
    s.context = $("context").value.trim();
    s.input = $("input-len").value.trim();
    s.output = $("output-len").value.trim();
    for (const f of [...TEXT_FIELDS, ...SELECT_FIELDS]) s[f] = $(f).value.trim();
    for (const f of CHECK_FIELDS) s[f] = $(f).checked;
    s.plot = $("plot-gpu").value;
    s.bench = $("bench").checked;
    s.percentiles = $("percentiles").value.trim();
    return s;
  }

  function toQuery(s) {
    const q = new URLSearchParams();
    if (s.source !== "catalog") q.set("source", s.source);
    if (s.source === "catalog" && s.model) q.set("model", s.model);
    if (s.source === "hub" && s.hub) q.set("hub", s.hub);
    if (s.source === "config" && s.config_name) q.set("config_name", s.config_name);
    if (s.gpu.length) q.set("gpu", s.gpu.join(","));
    if (s.lengths === "io") { q.set("input", s.input); q.set("output", s.output); } else q.set("context", s.context);
    if (s.lengths === "io" && s.bench) q.set("bench", "1");
    if (s.lengths === "io" && s.bench && s.percentiles) q.set("percentiles", s.percentiles);
    for (const f of [...TEXT_FIELDS, ...SELECT_FIELDS]) {
      if (s[f] !== "" && String(s[f]) !== String(info.defaults[f] ?? "")) q.set(f, s[f]);
    }
    for (const f of CHECK_FIELDS) if (s[f]) q.set(f, "1");
    if (s.plot && s.gpu.length > 1 && s.plot !== s.gpu[0]) q.set("plot", s.plot);
    if (explainKey) q.set("explain", explainKey);
    // the search form's fields (s_*) live in the link too; they change only when a search runs
    for (const [k, v] of new URLSearchParams(location.search)) if (k.startsWith("s_") || k === "search") q.set(k, v);
    return q;
  }

  function applyQuery(q) {
    setRadio("source", q.get("source") || "catalog");
    $("model").value = q.get("model") || "";
    $("hub").value = q.get("hub") || "";
    $("config-name").value = q.get("config_name") || "";
    const wanted = (q.get("gpu") || info.defaults.gpu || "t4").split(",").filter(Boolean);
    for (const c of document.querySelectorAll("#gpu-list input")) c.checked = wanted.includes(c.value);
    if (!selectedGpus().length) {  // an alias in the link (h100): tick it anyway so the server resolves or refuses it
      for (const g of wanted) addGpuChoice(g, g, true);
    }
    if (q.has("input") || q.has("output")) {
      setRadio("lengths", "io");
      $("input-len").value = q.get("input") || "";
      $("output-len").value = q.get("output") || "";
    } else {
      setRadio("lengths", "context");
      $("context").value = q.get("context") || "8k";
    }
    for (const f of [...TEXT_FIELDS, ...SELECT_FIELDS]) {
      const d = info.defaults[f];
      $(f).value = q.get(f) ?? (d === null || d === undefined || d === false ? "" : String(d));
    }
    for (const f of CHECK_FIELDS) $(f).checked = q.get(f) === "1";
    $("bench").checked = q.get("bench") === "1";
    $("percentiles").value = q.get("percentiles") || "";
    explainKey = q.get("explain") || "";
    const hash = new URLSearchParams(location.hash.slice(1));
    if (hash.has("config")) {
      try { $("config").value = decodeURIComponent(escape(atob(hash.get("config")))); } catch (e) { /* a broken link */ }
    }
    syncVisibility();
    fillPlotChoices(q.get("plot"));
  }

  function writeUrl(s) {
    const q = toQuery(s);
    let hash = "";
    if (s.source === "config" && s.config && s.config.length <= MAX_LINK_CONFIG) {
      let compact = s.config;
      try { compact = JSON.stringify(JSON.parse(s.config)); } catch (e) { /* keep the text as typed */ }
      hash = "#" + new URLSearchParams({ config: btoa(unescape(encodeURIComponent(compact))) }).toString();
    }
    history.replaceState(null, "", "?" + q.toString() + hash);
  }

  function syncVisibility() {
    const source = radio("source"), lengths = radio("lengths");
    for (const d of document.querySelectorAll("[data-source]")) d.hidden = d.dataset.source !== source;
    for (const d of document.querySelectorAll("[data-lengths]")) d.hidden = d.dataset.lengths !== lengths;
    const m = models.find((x) => x.name === $("model").value.trim().toLowerCase());
    $("model-facts").textContent = m ? `${m.hf_id}: ${(m.params / 1e9).toFixed(2)} B params, ${m.layers} layers, ${m.model_type}` : "";
  }

  // -- API parameters from the state ----------------------------------------------------------------------------------
  function apiParams(s, gpu) {
    const p = { gpu };
    if (s.source === "catalog" && s.model) p.model = s.model;
    if (s.source === "hub" && s.hub) p.model = s.hub;
    if (s.source === "config" && s.config.trim()) {
      p.config = s.config;
      if (s.config_name) p.config_name = s.config_name;
    }
    if (s.lengths === "io") {
      const a = parseTokens(s.input), b = parseTokens(s.output);
      // both readable: context = input + output; otherwise send the bad one, so the CLI's message comes back
      p.context = a && b ? String(a + b) : (a ? s.output : s.input);
    } else p.context = s.context;
    for (const f of [...TEXT_FIELDS, ...SELECT_FIELDS]) if (s[f] !== "") p[f] = s[f];
    if (s.lengths === "io" && s.bench) {  // the workload as vllm bench serve runs it: context and batch follow
      delete p.context;
      p.input_len = s.input;
      p.output_len = s.output;
      if (p.batch !== undefined) { p.concurrency = p.batch; delete p.batch; }
      if (s.percentiles) p.percentiles = s.percentiles;
    }
    for (const f of CHECK_FIELDS) if (s[f]) p[f] = "1";
    return p;
  }

  async function call(path, params, extra, signal) {
    const all = { ...params, ...(extra || {}) };
    let resp;
    if (all.config !== undefined) {
      resp = await fetch(path, { method: "POST", headers: { "content-type": "application/json" },
                                 body: JSON.stringify(all), signal });
    } else {
      resp = await fetch(path + "?" + new URLSearchParams(all).toString(), { signal });
    }
    const text = await resp.text();
    if (!resp.ok) {
      let msg = text;
      try { msg = JSON.parse(text).error; } catch (e) { /* not JSON */ }
      const err = new Error(msg);
      err.status = resp.status;
      throw err;
    }
    return path.endsWith("/plan") && all.format === "csv" ? text : JSON.parse(text);
  }

  // -- the update cycle ---------------------------------------------------------------------------------------------
  function schedule(now) {
    clearTimeout(timer);
    timer = setTimeout(update, now ? 0 : DEBOUNCE_MS);
  }

  function setStatus(text, error) {
    $("status").textContent = text;
    $("status").classList.toggle("error", !!error);
  }

  function markInvalid(message) {
    for (const i of document.querySelectorAll("input.invalid")) i.classList.remove("invalid");
    const m = /--([a-z][a-z-]*)/.exec(message || "");
    if (!m) return;
    const id = m[1].replace(/-/g, "_");
    const target = $(id === "context" && radio("lengths") === "io" ? "input-len" : id);
    if (target) target.classList.add("invalid");
  }

  async function update() {
    const s = readForm();
    syncVisibility();
    writeUrl(s);
    if (!s.gpu.length) { setStatus("tick at least one GPU", true); return; }
    const mine = ++generation;
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    const params = s.gpu.map((g) => apiParams(s, g));
    setStatus("computing...");
    const plotGpu = s.gpu.includes(s.plot) ? s.plot : s.gpu[0];
    try {
      const [plans, plots] = await Promise.all([
        Promise.all(params.map((p) => call("/api/plan", p, null, signal))),
        call("/api/plots", params[s.gpu.indexOf(plotGpu)], null, signal),
      ]);
      if (mine !== generation) return;
      last = { params, plans, plots };
      markInvalid("");
      renderPlans(plans);
      renderPlots(plots);
      setStatus(`${plans.length} GPU${plans.length > 1 ? "s" : ""}: ${plans.map((p) => p.gpu).join(", ")}; ` +
                `${plans[0].model}, context ${tokens(plans[0].context)} tokens, batch ${plans[0].batch}`);
      document.body.dataset.state = "ready";
      if (explainKey) openExplain(...explainKey.split("|"), true);
    } catch (err) {
      if (err.name === "AbortError" || mine !== generation) return;
      setStatus(err.message, true);
      markInvalid(err.message);
      document.body.dataset.state = "error";
    }
  }

  function gpuName(id) {
    const g = gpus.find((x) => x.id === id);
    return g ? g.name : id;
  }

  function renderPlans(plans) {
    const host = $("tables");
    host.textContent = "";
    const warnings = new Set();
    for (const plan of plans) {
      for (const w of plan.warnings) warnings.add(plan.warnings.length && plans.length > 1 ? `${plan.gpu}: ${w}` : w);
      const block = document.createElement("section");
      block.className = "gpu-block";
      block.dataset.gpu = plan.gpu;
      const h = document.createElement("h2");
      h.textContent = `${gpuName(plan.gpu)} (${(plan.gpu_memory_total_bytes / GiB).toFixed(2)} GiB usable)`;
      const title = document.createElement("p");
      title.className = "title";
      const st = plan.settings;
      title.textContent = `${plan.model}, context ${tokens(plan.context)} tokens, batch ${plan.batch}` +
        (st.tp > 1 ? `, TP ${st.tp}` : "") + (st.pp > 1 ? `, PP ${st.pp}` : "") +
        `; vLLM ${st.vllm_version}, util ${st.util}, max_model_len ${tokens(st.max_model_len)}`;
      block.append(h, title);
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      wrap.appendChild(planTable(plan));
      block.appendChild(wrap);
      if (plan.tp_sweep) block.appendChild(sweepTable(plan));
      if (plan.rows.some((r) => r.bench)) block.appendChild(benchTable(plan));
      host.appendChild(block);
    }
    const ul = $("warnings");
    ul.textContent = "";
    for (const w of warnings) {
      const li = document.createElement("li");
      li.textContent = w;
      ul.appendChild(li);
    }
  }

  function planTable(plan) {
    const table = document.createElement("table");
    table.className = "plan";
    const head = table.createTHead().insertRow();
    for (const [name, , , num] of COLUMNS) {
      const th = document.createElement("th");
      th.textContent = name === "max conc. @ctx" ? `max conc. @${tokens(plan.context)}` : name;
      if (num) th.className = "num";
      head.appendChild(th);
    }
    head.appendChild(document.createElement("th"));
    const body = table.createTBody();
    for (const r of plan.rows) {
      const tr = body.insertRow();
      tr.dataset.config = r.config;
      tr.dataset.engine = r.engine;
      if (!r.fits) tr.className = "nofit";
      for (const [, field, fmt, num] of COLUMNS) {
        const td = tr.insertCell();
        td.textContent = fmt(r, plan);
        td.dataset.field = field;
        td.dataset.value = JSON.stringify(r[field]);
        td.className = (num ? "num" : "") + (field === "fits" ? (r.fits ? " fits-yes" : " fits-no") : "") +
                       (field === "verdicts" ? " verdict" : "");
        if (field === "config") td.title = r.label;
        if (field === "quality_risk" && r.quality_evidence) td.title = r.quality_evidence;
        if ((field === "kv_capacity_tokens" || field === "max_concurrency") && spanOf(r)) {
          td.title = spanTitle(spanOf(r));
        }
        if (field === "trust" && r.trust && r.trust.speed) {
          const sp = r.trust.speed;  // whose held-out errors the range is: the GPU's own, or its class's
          td.title = `${sp.label}: ${sp.backing}` + (sp.range_basis ? `; range: ${sp.range_basis}` : "");
        }
      }
      const td = tr.insertCell();
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = "explain";
      b.className = "explain-btn";
      b.addEventListener("click", () => openExplain(plan.gpu, r.config, r.engine));
      td.appendChild(b);
    }
    return table;
  }

  function sweepTable(plan) {
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    const fitting = plan.tp_sweep.filter((o) => o.fits);
    const p = document.createElement("p");
    p.className = "title";
    p.textContent = fitting.length ? `vLLM by tensor-parallel size: smallest that fits is TP ${fitting[0].tp}`
                                   : `vLLM by tensor-parallel size: does not fit on up to ${plan.tp_sweep.at(-1).tp} GPUs`;
    const table = document.createElement("table");
    table.className = "plan sweep";
    const head = table.createTHead().insertRow();
    for (const name of ["TP", "weights GiB/GPU", "KV capacity tokens", `max conc. @${tokens(plan.context)}`,
                        "decode tok/s", "fits"]) {
      const th = document.createElement("th");
      th.textContent = name;
      th.className = "num";
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const o of plan.tp_sweep) {
      const tr = body.insertRow();
      for (const text of [String(o.tp), gib(o.weights_per_gpu_bytes), tokens(o.kv_capacity_tokens),
                          String(o.max_concurrency),
                          commas(o.decode_tokens_per_s, 1) + (o.decode_batch < plan.batch ? ` @${o.decode_batch}` : ""),
                          o.fits ? "yes" : o.starts ? `no: ${o.max_concurrency} of ${plan.batch}`
                                                             : `no: does not start (${shortfall(o.shortfall_bytes)}/GPU)`]) {
        const td = tr.insertCell();
        td.textContent = text;
        td.className = "num";
      }
    }
    wrap.append(p, table);
    return wrap;
  }

  // the workload as vllm bench serve reports it (kvcalc/render.py render_bench): means, median and percentiles
  function benchTable(plan) {
    const wrap = document.createElement("div");
    wrap.className = "table-wrap bench";
    const p = document.createElement("p");
    p.className = "title";
    const wl = plan.workload;
    p.textContent = `vllm bench serve: input ${tokens(wl.input_len)} + output ${tokens(wl.output_len)} tokens, ` +
      (wl.request_rate ? `${wl.request_rate} requests/s` : `${wl.concurrency || 1} clients`) +
      " (a simulation of vLLM's scheduler, step by step)";
    const pcts = (wl.percentiles || [50, 99]).filter((x) => x !== 50);
    const fmt = (v, d) => (v === undefined || v === null ? "-" : commas(v, d));
    const cols = [["config", (r) => r.config], ["engine", (r) => r.engine],
      ["TTFT mean ms", (r) => fmt(r.bench.ttft_s * 1e3, 1)],
      ["TTFT median", (r) => fmt(r.bench.percentiles.median_ttft_ms, 1)],
      ...pcts.map((x) => [`TTFT p${x}`, (r) => fmt(r.bench.percentiles[`p${x}_ttft_ms`], 1)]),
      ["TPOT mean ms", (r) => fmt(r.bench.tpot_s * 1e3, 2)],
      ...pcts.map((x) => [`TPOT p${x}`, (r) => fmt(r.bench.percentiles[`p${x}_tpot_ms`], 2)]),
      ["ITL mean ms", (r) => fmt(r.bench.itl_s === null ? null : r.bench.itl_s * 1e3, 2)],
      ["e2e mean s", (r) => fmt(r.bench.e2e_s, 2)], ["output tok/s", (r) => fmt(r.bench.output_tokens_per_s, 1)]];
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    for (const [name] of cols) {
      const th = document.createElement("th");
      th.textContent = name;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const r of plan.rows) {
      if (!r.bench) continue;
      const tr = body.insertRow();
      for (const [, f] of cols) {
        const td = tr.insertCell();
        td.textContent = f(r);
      }
    }
    wrap.append(p, table);
    return wrap;
  }

  async function openExplain(gpu, config, engine, quiet) {
    const i = last.params.findIndex((p) => p.gpu === gpu);
    if (i < 0) { explainKey = ""; $("explain").hidden = true; return; }
    explainKey = [gpu, config, engine].join("|");
    writeUrl(readForm());
    try {
      const ex = await call("/api/explain", last.params[i], { row: config, row_engine: engine });
      $("explain-title").textContent = `explain: ${ex.label} on ${ex.engine}, ${gpuName(gpu)}`;
      $("explain-text").textContent = ex.text;
      $("explain").hidden = false;
      $("explain").dataset.key = explainKey;
      if (!quiet) $("explain").scrollIntoView({ behavior: "smooth", block: "nearest" });
    } catch (err) {
      $("explain-title").textContent = "explain";
      $("explain-text").textContent = err.message;
      $("explain").hidden = false;
    }
  }

  function renderPlots(data) {
    const sp = data.speed;
    $("speed-caption").textContent = sp
      ? `Tokens/s per user, by requests at once: every vLLM configuration at context ${tokens(sp.context)} ` +
        "(hollow: more requests than vLLM's KV cache holds; dashed: does not hold the batch asked)"
      : "vLLM decode tokens/s per user vs batch";
    window.KvPlots.capacity($("plot-capacity"), data);
    window.KvPlots.speed($("plot-speed"), data);
    window.KvPlots.memory($("plot-memory"), data);
  }

  function fillPlotChoices(wanted) {
    const sel = $("plot-gpu");
    const chosen = selectedGpus();
    const keep = wanted || sel.value;
    sel.textContent = "";
    for (const g of chosen) {
      const o = document.createElement("option");
      o.value = g;
      o.textContent = gpuName(g);
      sel.appendChild(o);
    }
    if (chosen.includes(keep)) sel.value = keep;
  }

  // -- downloads ------------------------------------------------------------------------------------------------------
  function save(name, text, type) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([text], { type }));
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  function fileStem() {
    const p = last.plans[0];
    return p ? `kvcalc-${p.model}-${last.plans.map((x) => x.gpu).join("+")}-${p.context}` : "kvcalc";
  }

  async function downloadJson() {
    if (!last.plans.length) return;
    const payload = last.plans.length === 1 ? last.plans[0] : last.plans;
    save(fileStem() + ".json", JSON.stringify(payload, null, 1) + "\n", "application/json");
  }

  async function downloadCsv() {
    if (!last.params.length) return;
    try {
      const texts = await Promise.all(last.params.map((p) => call("/api/plan", p, { format: "csv" })));
      let out = texts[0];
      if (texts.length > 1) {  // several GPUs: the CLI's CSV with a gpu column in front
        out = texts.map((t, i) => t.trimEnd().split(/\r?\n/).map((line, j) => (j === 0 ? (i ? null : "gpu," + line)
          : `${last.params[i].gpu},${line}`)).filter((l) => l !== null).join("\r\n")).join("\r\n") + "\r\n";
      }
      save(fileStem() + ".csv", out, "text/csv");
    } catch (err) { setStatus(err.message, true); }
  }

  async function downloadDeploy() {  // kvcalc plan --emit KIND for the first GPU's plan
    if (!last.params.length) return;
    try {
      const got = await call("/api/deploy", last.params[0], { kind: $("deploy-kind").value });
      save(got.filename, got.text, "text/plain");
      if (!got.fits) setStatus("the plan says this configuration does not fit; the file is written all the same", true);
    } catch (err) { setStatus(err.message, true); }
  }

  // -- set-up -----------------------------------------------------------------------------------------------------
  function addGpuChoice(id, label, checked) {
    const l = document.createElement("label");
    const c = document.createElement("input");
    c.type = "checkbox";
    c.value = id;
    c.checked = !!checked;
    const s = document.createElement("small");
    s.textContent = label;
    l.append(c, document.createTextNode(id), s);
    $("gpu-list").appendChild(l);
    c.addEventListener("change", () => {
      if (selectedGpus().length > info.max_gpus) { c.checked = false; setStatus(`at most ${info.max_gpus} GPUs at once`, true); return; }
      fillPlotChoices();
      schedule(true);
    });
  }

  async function init() {
    try {
      [info, gpus, models] = await Promise.all(["/api/info", "/api/gpus", "/api/models"].map(
        (u) => fetch(u).then((r) => r.json())));
    } catch (err) { setStatus("cannot reach the kvcalc server: " + err.message, true); return; }
    $("hub-choice").hidden = !info.allow_hub;
    $("config-cap").textContent = `${(info.max_config_bytes / 1048576).toFixed(0)} MiB`;
    for (const e of info.engines) $("engine").add(new Option(e, e));
    for (const w of info.weights) $("weights").add(new Option(`${w.name} (${w.label})`, w.name));
    for (const k of info.kv) $("kv").add(new Option(`${k.name} (${k.label})`, k.name));
    for (const m of models) {
      const o = document.createElement("option");
      o.value = m.name;
      o.label = `${m.hf_id} (${(m.params / 1e9).toFixed(1)} B)`;
      $("model-list").appendChild(o);
    }
    for (const g of gpus) addGpuChoice(g.id, `${g.name.replace(/^NVIDIA |^AMD /, "")}, ${(g.memory_total_bytes / GiB).toFixed(1)} GiB`);
    applyQuery(new URLSearchParams(location.search));
    if (!$("model").value && radio("source") === "catalog") $("model").placeholder = "llama-3.2-3b (default)";

    $("form").addEventListener("input", (e) => {
      if (e.target.id === "gpu-filter") return;
      if (e.target.type === "radio") syncVisibility();
      schedule(e.target.tagName === "SELECT" || e.target.type === "checkbox" || e.target.type === "radio");
    });
    $("form").addEventListener("submit", (e) => { e.preventDefault(); schedule(true); });
    $("gpu-filter").addEventListener("input", () => {
      const f = $("gpu-filter").value.trim().toLowerCase();
      for (const l of $("gpu-list").children) l.hidden = !!f && !l.textContent.toLowerCase().includes(f);
    });
    $("config-file").addEventListener("change", () => {
      const file = $("config-file").files[0];
      if (!file) return;
      if (file.size > info.max_config_bytes) { setStatus(`${file.name} is ${file.size.toLocaleString("en-US")} bytes; at most ${info.max_config_bytes.toLocaleString("en-US")}`, true); return; }
      file.text().then((t) => { $("config").value = t; if (!$("config-name").value) $("config-name").value = file.name.replace(/\.json$/, ""); schedule(true); });
    });
    $("plot-gpu").addEventListener("change", () => schedule(true));
    $("explain-close").addEventListener("click", () => { explainKey = ""; $("explain").hidden = true; writeUrl(readForm()); });
    $("download-json").addEventListener("click", downloadJson);
    $("download-csv").addEventListener("click", downloadCsv);
    $("download-deploy").addEventListener("click", downloadDeploy);
    $("copy-link").addEventListener("click", async () => {
      try { await navigator.clipboard.writeText(location.href); setStatus("link copied: " + location.href); }
      catch (e) { window.prompt("copy this link", location.href); }
    });
    let resizeTimer = null;
    window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => last.plots && renderPlots(last.plots), 150); });
    if (info.search) setupSearch();
    update();
  }

  // -- search (kvcalc search, when this kvcalc has it) -----------------------------------------------------------
  const SEARCH_FIELDS = ["input_len", "output_len", "concurrency", "request_rate", "max_ttft_ms", "max_tpot_ms",
                         "max_quality_risk", "search_engine"];

  function searchParams() {
    const s = readForm();
    const base = apiParams(s, s.gpu[0]);
    const p = {};
    for (const k of ["model", "config", "config_name"]) if (base[k] !== undefined) p[k] = base[k];
    for (const f of SEARCH_FIELDS) { const v = $("s_" + f).value.trim(); if (v) p[f] = v; }
    if ($("s_ticked").checked) p.gpus = s.gpu.join(",");
    return p;
  }

  async function runSearch() {
    const q = new URLSearchParams(location.search);
    for (const f of SEARCH_FIELDS) { const v = $("s_" + f).value.trim(); if (v) q.set("s_" + f, v); else q.delete("s_" + f); }
    if ($("s_ticked").checked) q.set("s_ticked", "1"); else q.delete("s_ticked");
    q.set("search", "1");
    history.replaceState(null, "", "?" + q.toString() + location.hash);
    $("search-status").textContent = "searching...";
    $("search-status").classList.remove("error");
    $("search-out").textContent = "";
    document.body.dataset.search = "busy";
    try {
      const res = await call("/api/search", searchParams());
      renderSearch(res);
      document.body.dataset.search = "ready";
    } catch (err) {
      $("search-status").textContent = err.message;
      $("search-status").classList.add("error");
      document.body.dataset.search = "error";
    }
  }

  function renderSearch(res) {
    $("search-status").textContent = `${res.model}: ${res.feasible.toLocaleString("en-US")} of ` +
      `${res.evaluated.toLocaleString("en-US")} deployments meet the targets` + (res.message ? `; ${res.message}` : "");
    const out = $("search-out");
    out.textContent = "";
    searchTable(out, res.results, res.winner_command);
    if (res.sglang) {  // --engine both: SGLang's deployments beside vLLM's (kvcalc/search_sglang.py)
      const h = document.createElement("h3");
      h.textContent = "SGLang";
      out.appendChild(h);
      searchTable(out, res.sglang, res.sglang.length ? res.sglang[0].command : "");
    }
  }

  function searchTable(out, rows, winner) {
    if (!rows.length) return;
    const table = document.createElement("table");
    table.className = "plan search";
    const cols = [
      ["rank", (d) => String(d.rank)],
      ["deployment", (d) => `${d.replicas} x ${d.gpu}` + (d.tp > 1 ? ` TP${d.tp}` : "") + (d.pp > 1 ? ` PP${d.pp}` : "")],
      ["weights", (d) => d.weights_format], ["KV", (d) => d.kv_format],
      ["util / mem frac.", (d) => String(d.util !== undefined ? d.util : d.mem_fraction_static)],
      ["max seqs / running", (d) => String(d.max_num_seqs !== undefined ? d.max_num_seqs : d.max_running_requests)],
      ["$/hour", (d) => commas(d.cost_per_hour, 2)],
      ["$/M out tokens", (d) => commas(d.usd_per_million_output_tokens, 3)],
      ["TTFT ms", (d) => commas(d.ttft_ms, 0)],
      ["p99 TTFT", (d) => (d.percentiles && d.percentiles.p99_ttft_ms !== undefined ? commas(d.percentiles.p99_ttft_ms, 0) : "-")],
      ["TPOT ms", (d) => commas(d.tpot_ms, 1)],
      ["TPOT range", (d) => tpotRange(d)],
      ["max conc.", (d) => searchConc(d)],
      ["out tok/s", (d) => commas(d.output_tokens_per_s, 0)], ["risk", (d) => d.quality_risk],
      ["speed evidence", (d) => (d.speed_evidence && d.speed_evidence.label) || "-"],
      ["Pareto", (d) => (d.pareto ? "yes" : "")],
      ["server", (d) => d.engine || "vllm"],
    ];
    const head = table.createTHead().insertRow();
    for (const [name] of cols) { const th = document.createElement("th"); th.textContent = name; head.appendChild(th); }
    const body = table.createTBody();
    for (const d of rows) {
      const tr = body.insertRow();
      tr.title = d.command;
      for (const [name, f] of cols) {
        const td = tr.insertCell();
        td.textContent = f(d);
        if (name === "max conc." && d.capacity_range) td.title = spanTitle(d.capacity_range);
      }
    }
    out.appendChild(table);
    if (winner) {
      const code = document.createElement("code");
      code.textContent = winner;
      out.appendChild(code);
    }
  }

  function setupSearch() {
    $("search").hidden = false;
    const q = new URLSearchParams(location.search);
    for (const f of SEARCH_FIELDS) if (q.has("s_" + f)) $("s_" + f).value = q.get("s_" + f);
    $("s_ticked").checked = q.get("s_ticked") === "1";
    if (q.has("s_request_rate") && !q.has("s_concurrency")) $("s_concurrency").value = "";
    $("search-form").addEventListener("submit", (e) => { e.preventDefault(); runSearch(); });
    if (q.get("search") === "1") runSearch();
  }

  window.kvcalcPage = { parseTokens, state: () => last };
  init();
})();
