// Efficiency: each site's stacked bars of GPU-hours by ledger state per team (per rack where
// no workload ran), Plotly when it loaded, from the figures, state names and colours the
// server sent (dashboard/efficiency.py). The page computes nothing: the tables beside it
// hold the same figures.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("efficiency-data").textContent);
  const byKey = new Map(state.states.map((s) => [s.key, s]));

  function drawChart(id, chart) {
    const el = document.getElementById("chart-" + id);
    if (!el) return;
    if (typeof window.Plotly === "undefined") { el.dataset.chart = "unavailable"; return; }
    const note = el.querySelector(".chart-note");
    if (note) note.remove();
    const css = getComputedStyle(document.body);
    const traces = chart.states.map((key) => ({
      type: "bar",
      name: byKey.get(key).name,
      x: chart.names,
      y: chart.hours[key],
      marker: { color: byKey.get(key).colour },
    }));
    window.Plotly.react(el, traces, {
      barmode: "stack",
      margin: { t: 10, r: 10, b: 60, l: 60 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: css.color },
      xaxis: { type: "category" },
      yaxis: { title: { text: state.axis }, rangemode: "tozero" },
      legend: { orientation: "h" },
    }, { displaylogo: false, responsive: true });
    el.dataset.chart = "drawn";
  }

  for (const [id, chart] of Object.entries(state.charts)) drawChart(id, chart);
})();
