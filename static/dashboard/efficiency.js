// Efficiency: each site's stacked bars of GPU-hours by ledger state per team (per rack where
// no workload ran), Plotly when it loaded, from the figures, state names and colours the
// server sent (dashboard/efficiency.py). The page computes nothing: the tables beside it
// hold the same figures.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("efficiency-data").textContent);
  const byKey = new Map(state.states.map((s) => [s.key, s]));

  function drawChart(id, chart) {
    const traces = chart.states.map((key) => ({
      type: "bar",
      name: byKey.get(key).name,
      x: chart.names,
      y: chart.hours[key],
      marker: { color: byKey.get(key).colour },
    }));
    window.FleetCharts.draw(id, traces, {
      barmode: "stack",
      xaxis: { type: "category" },
      yaxis: { title: { text: state.axis }, rangemode: "tozero" },
    });
  }

  for (const [id, chart] of Object.entries(state.charts)) drawChart(id, chart);
})();
