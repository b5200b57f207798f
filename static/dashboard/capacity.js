// Capacity: each site's bars of rack budget against p95 and p99 draw (Plotly, when it
// loaded), from the figures and legend names the server sent (dashboard/capacity.py).
// The page computes nothing: the table beside it holds the same figures in words.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("capacity-data").textContent);

  function drawChart(id, chart) {
    const el = document.getElementById("chart-" + id);
    if (!el) return;
    if (typeof window.Plotly === "undefined") { el.dataset.chart = "unavailable"; return; }
    const note = el.querySelector(".chart-note");
    if (note) note.remove();
    const css = getComputedStyle(document.body);
    const traces = state.bars.map((bar) => ({ type: "bar", name: bar.name, x: chart.racks, y: chart[bar.key] }));
    window.Plotly.react(el, traces, {
      barmode: "group",
      margin: { t: 10, r: 10, b: 60, l: 60 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: css.color },
      xaxis: { type: "category" },
      yaxis: { title: { text: "kW" }, rangemode: "tozero" },
      legend: { orientation: "h" },
    }, { displaylogo: false, responsive: true });
    el.dataset.chart = "drawn";
  }

  for (const [id, chart] of Object.entries(state.charts)) drawChart(id, chart);
})();
