// The node page, live: each signal on its rack's /changed socket (FleetLive, live.js) says
// something in the rack changed; the page then fetches itself again (at most every 2 s) and morphs
// the node's region in, so every word and unit stays the server's.
(function () {
  "use strict";
  const region = document.getElementById("node-live");
  if (!region || !window.FleetLive) return;
  const EVERY_MS = 2000;
  const QUIET_REFRESH_MS = 10000;
  let busy = false;
  let fetchedAt = 0;

  // The host's last day (the one history API, 1-minute rollups), drawn once per page load.
  const CHARTS = [
    { el: "node-chart-power", unit: "W", traces: [["power_w", "input power"]] },
    { el: "node-chart-temps", unit: "°C", traces: [["temp_inlet_c", "inlet air"], ["temp_outlet_c", "outlet air"], ["temp_cpu_c", "hottest CPU"]] },
    { el: "node-chart-cpu", unit: "%", traces: [["cpu_pct", "CPU busy"]] },
  ];

  function css(name, fallback) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  function drawChart(chart, series, start, end) {
    const el = document.getElementById(chart.el);
    const traces = chart.traces
      .filter(([metric]) => series[metric] && series[metric].points.some((p) => p[1] !== null))
      .map(([metric, name]) => ({
        type: "scatter", mode: "lines", name, connectgaps: false,
        x: series[metric].points.map((p) => p[0] * 1000), y: series[metric].points.map((p) => p[1]),
      }));
    if (!traces.length) {
      el.innerHTML = '<p class="empty">Not reported by this host in the last 24 h.</p>';
      return;
    }
    const grid = css("--muted", "#9aa7b4") + "33";
    Plotly.newPlot(el, traces, {
      height: 220, margin: { l: 56, r: 12, t: 8, b: 36 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: css("--text", "#e6edf3"), size: 12 },
      // The window the server answered for, not the data's extent (a fresh host's minute
      // of history sits at the right end of its 24 h).
      xaxis: { type: "date", gridcolor: grid, range: [start * 1000, end * 1000] }, yaxis: { title: { text: chart.unit }, gridcolor: grid, rangemode: chart.unit === "°C" ? "normal" : "tozero" },
      legend: { orientation: "h", y: -0.25 }, showlegend: true,
    }, { displaylogo: false, responsive: true });
  }

  async function drawHistory() {
    const status = document.getElementById("node-chart-status");
    const q = new URLSearchParams({ kind: "node", node_id: document.getElementById("node-history").dataset.node, range: "24h" });
    CHARTS.forEach((c) => c.traces.forEach(([metric]) => q.append("metric", metric)));
    try {
      const response = await fetch("/api/v1/history?" + q.toString(), { credentials: "same-origin" });
      if (!response.ok) throw new Error(String(response.status));
      const body = await response.json();
      CHARTS.forEach((chart) => drawChart(chart, body.series, body.start, body.end));
      status.textContent = `Last 24 h: ${body.step_s} s buckets (mean per bucket).`;
      document.body.dataset.charts = "drawn";
    } catch (err) {
      status.textContent = `History could not be loaded: ${err.message}`;
    }
  }

  async function refresh() {
    const now = Date.now();
    if (busy || now - fetchedAt < EVERY_MS) return;
    busy = true;
    fetchedAt = now;
    try {
      const response = await fetch(location.pathname, { credentials: "same-origin" });
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.getElementById("node-live");
      if (fresh) FleetLive.morph(region, fresh.innerHTML);
      const asOf = doc.querySelector("#as-of time");
      const here = document.querySelector("#as-of time");
      if (asOf && here) here.textContent = asOf.textContent;
      document.body.dataset.lastUpdate = String(now / 1000);
    } finally {
      busy = false;
    }
  }

  drawHistory();
  FleetLive.connect(`/ws/live/rack/${region.dataset.rack}/changed`, refresh);
  // No signal while the node is quiet: refresh anyway, so its figures turn into their age.
  setInterval(() => { if (Date.now() - fetchedAt >= QUIET_REFRESH_MS) refresh(); }, QUIET_REFRESH_MS);
})();
