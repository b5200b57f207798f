// Capacity: each site's bars of rack budget against p95 and p99 draw (Plotly, when it
// loaded), from the figures and legend names the server sent (dashboard/capacity.py).
// The page computes nothing: the table beside it holds the same figures in words.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("capacity-data").textContent);

  function drawChart(id, chart) {
    const traces = state.bars.map((bar) => ({ type: "bar", name: bar.name, x: chart.racks, y: chart[bar.key] }));
    window.FleetCharts.draw(id, traces, {
      barmode: "group",
      xaxis: { type: "category" },
      yaxis: { title: { text: "kW" }, rangemode: "tozero" },
    });
  }

  for (const [id, chart] of Object.entries(state.charts)) drawChart(id, chart);
})();
