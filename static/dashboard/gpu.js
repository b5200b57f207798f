// The GPU page's history charts (Plotly, served from /vendor/plotly.min.js) and its live
// figures. History comes from the one history API (/api/v1/history); each signal on the
// rack's /changed socket (FleetLive, live.js) says something changed, and the page fetches
// only the points newer than its last one (appended with Plotly.extendTraces, no redraw)
// and the server-rendered figures (morphed in, so the words stay the server's).
(function () {
  "use strict";
  const config = JSON.parse(document.getElementById("gpu-config").textContent);
  const status = document.getElementById("chart-status");
  const LIVE_EVERY_MS = 2000; // history points: appended at most every 2 s (figures: every push)
  const QUIET_REFRESH_MS = 10000;
  const TIER_WORDS = {
    raw: "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups",
    tsdb: "the TSDB's raw samples",
  };

  const memPct = (v) => (v === null || !config.mem_total_mib ? null : (100 * v) / config.mem_total_mib);
  // Per chart: its element, y-axis title, [metric, legend name, transform] traces, and the
  // metric whose bucket maximum is drawn too: a mean hides the spike that reached a limit.
  const CHARTS = [
    { el: "chart-temp", unit: "°C", peak: "temp_gpu_c", traces: [["temp_gpu_c", "GPU"], ["temp_mem_c", "HBM"]] },
    { el: "chart-power", unit: "W", peak: "power_w", traces: [["power_w", "power"], ["power_limit_w", "cap (enforced)"]] },
    { el: "chart-clocks", unit: "MHz", traces: [["clock_sm_mhz", "SM"], ["clock_mem_mhz", "memory"]] },
    {
      el: "chart-util", unit: "%",
      traces: [["util_gpu_pct", "GPU"], ["util_mem_pct", "memory controller"], ["mem_used_mib", "memory used", memPct]],
    },
  ];
  const METRICS = CHARTS.flatMap((c) => c.traces.map((t) => t[0]));
  // Live points are fetched from the end of the last answer on: samples before it are
  // already drawn (in its buckets), so a sample is never drawn twice.
  let appendFrom = null;
  let drawn = []; // per chart: the metrics it drew, in trace order
  let drawnSeries = {}; // the series the charts were drawn from (their limit lines follow it)
  // The time axis: the window the server answered for (start, end in epoch s), not the
  // data's extent, so a GPU with a minute of history shows it at the right end of its 24 h.
  // Live answers slide it forward, keeping the first answer's width.
  let shown = null;

  function css(name, fallback) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  function historyUrl(params) {
    const q = new URLSearchParams({ kind: "gpu", gpu_id: String(config.gpu_id), ...params });
    METRICS.forEach((m) => q.append("metric", m));
    return "/api/v1/history?" + q.toString();
  }

  // A series as Plotly x (ms) and y: its bucket means, or its bucket maxima.
  function xy(series, transform, stat) {
    const f = transform || ((v) => v);
    const ys = stat === "max" ? series.max : series.points.map((p) => p[1]);
    return { x: series.points.map((p) => p[0] * 1000), y: ys.map(f) };
  }

  // A limit as a dashed line across the chart, named in words (colour is not the signal).
  // Labels alternate right and left, so limits a few degrees apart do not overprint.
  function limitLine(value, words, colour, left) {
    return {
      shape: { type: "line", xref: "paper", x0: 0, x1: 1, y0: value, y1: value,
               line: { color: colour, width: 1.5, dash: "dash" } },
      note: { xref: "paper", x: left ? 0 : 1, xanchor: left ? "left" : "right", y: value,
              yanchor: "bottom", text: words, showarrow: false, font: { color: colour, size: 11 } },
    };
  }

  function limitsFor(chart, series) {
    const lines = [];
    if (chart.el === "chart-temp") {
      const colours = { slowdown: css("--warn", "#d29922"), shutdown: css("--crit", "#f85149") };
      const byValue = [...config.limits].sort((a, b) => a.value_c - b.value_c); // neighbours alternate
      byValue.forEach((lim, i) => {
        const colour = colours[lim.name] || css("--muted", "#9aa7b4");
        lines.push(limitLine(lim.value_c, `${lim.name} ${lim.value_c.toFixed(0)} °C`, colour, i % 2 === 1));
      });
    }
    const capSeries = series.power_limit_w;
    const capDrawn = capSeries && capSeries.points.some((p) => p[1] !== null);
    if (chart.el === "chart-power" && !capDrawn && config.power_cap_w) {
      lines.push(limitLine(config.power_cap_w, `cap ${config.power_cap_w.toFixed(0)} W`, css("--warn", "#d29922")));
    }
    return lines;
  }

  function layout(chart, lines) {
    const text = css("--text", "#e6edf3");
    const grid = css("--muted", "#9aa7b4") + "33";
    return {
      height: 260,
      margin: { l: 56, r: 12, t: 8, b: 36 },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: text, size: 12 },
      xaxis: { type: "date", gridcolor: grid, ...(shown ? { range: xRange() } : {}) },
      yaxis: { title: { text: chart.unit }, gridcolor: grid, rangemode: chart.unit === "°C" ? "normal" : "tozero" },
      legend: { orientation: "h", y: -0.2 },
      shapes: lines.map((l) => l.shape),
      annotations: lines.map((l) => l.note),
      showlegend: true,
    };
  }

  function xRange() { return [shown.start * 1000, shown.end * 1000]; }

  function draw(body) {
    shown = { start: body.start, end: body.end };
    drawn = CHARTS.map((chart) => {
      const traces = [];
      const metrics = [];
      for (const [metric, name, transform] of chart.traces) {
        const s = body.series[metric];
        if (!s || !s.points.some((p) => p[1] !== null)) continue; // not reported: no line
        if (transform === memPct && !config.mem_total_mib) continue;
        traces.push({ type: "scatter", mode: "lines", name, connectgaps: false, ...xy(s, transform) });
        metrics.push([metric, transform, "mean"]);
        if (metric === chart.peak && body.step_s > 1) {
          traces.push({ type: "scatter", mode: "lines", name: `${name}, max per bucket`, connectgaps: false,
                        line: { dash: "dot", width: 1 }, ...xy(s, transform, "max") });
          metrics.push([metric, transform, "max"]);
        }
      }
      const el = document.getElementById(chart.el);
      if (!traces.length) {
        // An empty chart would draw a meaningless axis (year 2000): say it in words.
        if (el.classList.contains("js-plotly-plot")) Plotly.purge(el);
        el.innerHTML = `<p class="empty">Not reported by this GPU in the last ${config.range}.</p>`;
        return metrics;
      }
      el.innerHTML = "";
      Plotly.newPlot(el, traces, layout(chart, limitsFor(chart, body.series)),
                     { displaylogo: false, responsive: true });
      return metrics;
    });
    appendFrom = hasPoints(body) ? body.end : null;
    drawnSeries = body.series;
    if (body.reasons) drawReasons(body.reasons.spans);
    const perBucket = body.tier === "raw" && body.step_s === 1 ? "each sample" : `${body.step_s} s buckets`;
    const sources = [...new Set(body.parts.map((p) => TIER_WORDS[p.tier]))].join(", then ");
    const note = body.note ? ` (${body.note})` : "";
    status.textContent = `Last ${config.range}: ${perBucket} (mean per bucket) from ${sources || "no stored data"}${note}.`;
    document.body.dataset.charts = "drawn";
  }

  // The clock-event reasons as a timeline: one row per reason (its name on the axis, so
  // colour is not the signal), a bar wherever the GPU reported it.
  function drawReasons(spans) {
    const el = document.getElementById("chart-reasons");
    const rows = new Map(); // reason name -> {x, y} with null breaks between spans
    for (const span of spans) {
      for (const words of span.reasons) {
        const name = words.split(":")[0];
        const row = rows.get(name) || { x: [], y: [], words };
        row.x.push(span.start * 1000, span.end * 1000, null);
        row.y.push(name, name, null);
        rows.set(name, row);
      }
    }
    if (!rows.size) {
      el.innerHTML = `<p class="empty">No clock-event reasons in the last ${config.range}: full clocks, or not reported.</p>`;
      return;
    }
    const traces = [...rows.values()].map((row) => ({
      type: "scatter", mode: "lines", name: row.words, x: row.x, y: row.y,
      line: { width: 12 }, hovertemplate: "%{y}<extra></extra>",
    }));
    const look = layout({ el: "chart-reasons", unit: "" }, []);
    look.height = 80 + 28 * rows.size;
    look.yaxis = { type: "category", automargin: true, gridcolor: look.xaxis.gridcolor };
    look.showlegend = false;
    el.innerHTML = "";
    Plotly.newPlot(el, traces, look, { displaylogo: false, responsive: true });
  }

  function hasPoints(body) {
    return Object.values(body.series).some((s) => s.points.some((p) => p[1] !== null));
  }

  // New points only, appended to the traces already drawn (no redraw).
  function extend(body) {
    drawn.forEach((metrics, i) => {
      if (!metrics.length) return;
      const update = { x: [], y: [] };
      for (const [metric, transform, stat] of metrics) {
        const { x, y } = xy(body.series[metric] || { points: [], max: [] }, transform, stat);
        update.x.push(x);
        update.y.push(y);
      }
      Plotly.extendTraces(CHARTS[i].el, update, metrics.map((_, j) => j));
    });
    if (body.end > shown.end) {
      shown = { start: shown.start + body.end - shown.end, end: body.end };
      drawn.forEach((metrics, i) => {
        if (metrics.length) Plotly.relayout(CHARTS[i].el, { "xaxis.range": xRange() });
      });
    }
    appendFrom = body.end;
  }

  async function getJson(url) {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) throw new Error(`${response.status} ${(await response.json()).error || ""}`);
    return response.json();
  }

  async function refreshFigures() {
    const response = await fetch(location.pathname + "?part=figures", { credentials: "same-origin" });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("gpu-live");
    const region = document.getElementById("gpu-live");
    if (fresh && region) {
      FleetLive.morph(region, fresh.innerHTML);
      region.dataset.level = fresh.dataset.level;
    }
    const asOf = doc.querySelector("#as-of time");
    const here = document.querySelector("#as-of time");
    if (asOf && here) here.textContent = asOf.textContent;
  }

  // Figures follow every push (one fetch at a time; a push during one fetches once more
  // after it), so a new sample shows within a push. History points are appended at most
  // every LIVE_EVERY_MS, with one trailing append so the last push is never dropped.
  let lastPushAt = 0;
  let figuresBusy = false;
  let figuresAgain = false;
  async function followFigures() {
    if (figuresBusy) { figuresAgain = true; return; }
    figuresBusy = true;
    try {
      do { figuresAgain = false; await refreshFigures(); } while (figuresAgain);
    } catch (err) {
      status.textContent = `Live figures paused: ${err.message}`;
    } finally {
      figuresBusy = false;
    }
  }

  let historyBusy = false;
  let historyAt = 0;
  let historyLater = null;
  async function followHistory() {
    const wait = historyAt + LIVE_EVERY_MS - Date.now();
    if (historyBusy || wait > 0) {
      if (historyLater === null) {
        historyLater = setTimeout(() => { historyLater = null; followHistory(); }, Math.max(wait, 200));
      }
      return;
    }
    historyBusy = true;
    historyAt = Date.now();
    try {
      if (appendFrom === null) {
        draw(await getJson(historyUrl({ range: config.range, reasons: "1" }))); // nothing yet: afresh
      } else {
        extend(await getJson(historyUrl({ start: String(appendFrom), max_points: "5000" })));
      }
    } catch (err) {
      status.textContent = `Live points paused: ${err.message}`;
    } finally {
      historyBusy = false;
    }
  }

  function onPush() {
    lastPushAt = Date.now();
    followFigures();
    followHistory();
  }

  // The theme toggle (base.html) changes the page's colours: the charts follow.
  new MutationObserver(() => {
    CHARTS.forEach((chart) => {
      const el = document.getElementById(chart.el);
      if (el.classList.contains("js-plotly-plot")) Plotly.relayout(el, layout(chart, limitsFor(chart, drawnSeries)));
    });
    const reasons = document.getElementById("chart-reasons");
    if (reasons.classList.contains("js-plotly-plot")) {
      const look = layout({ unit: "" }, []);
      Plotly.relayout(reasons, { "font.color": look.font.color, "xaxis.gridcolor": look.xaxis.gridcolor,
                                 "yaxis.gridcolor": look.xaxis.gridcolor });
    }
  }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });

  getJson(historyUrl({ range: config.range, reasons: "1" }))
    .then((body) => {
      draw(body);
      if (window.FleetLive) FleetLive.connect(`/ws/live/rack/${config.rack_id}/changed`, onPush);
      // No signal while the GPU is quiet: refresh anyway, so its figures turn into their age.
      setInterval(() => { if (Date.now() - lastPushAt >= QUIET_REFRESH_MS) onPush(); }, QUIET_REFRESH_MS);
    })
    .catch((err) => { status.textContent = `History could not be loaded: ${err.message}`; });
})();
