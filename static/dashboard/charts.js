// The pages' Plotly charts drawn alike (power, capacity, efficiency): the placeholder
// note while the charting script is missing, the theme's colours, the toolbar without the
// logo. A page hands over its traces and axes, made from the figures the server sent;
// nothing here decides a figure, a word or a level.
window.FleetCharts = (function () {
  "use strict";

  // Draws `traces` into the element `chart-<id>` and returns it (null: no such element,
  // or Plotly did not load, which the element then says in data-chart="unavailable").
  function draw(id, traces, layout) {
    const el = document.getElementById("chart-" + id);
    if (!el) return null;
    if (typeof window.Plotly === "undefined") { el.dataset.chart = "unavailable"; return null; }
    const note = el.querySelector(".chart-note"); // only the placeholder: a drawn plot stays
    if (note) note.remove();
    const css = getComputedStyle(document.body);
    window.Plotly.react(el, traces, Object.assign({
      margin: { t: 10, r: 10, b: 60, l: 60 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: css.color },
      legend: { orientation: "h" },
    }, layout), { displaylogo: false, responsive: true });
    el.dataset.chart = "drawn";
    return el;
  }

  return { draw: draw };
})();
