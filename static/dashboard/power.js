// Power & PUE: draws each site's IT-against-facility chart (Plotly, when it loaded) and
// keeps the "now" figures live from the site payloads pushed on /ws/live/fleet
// (fleet/read/site_summary.py derives them, and their words, through fleet/health and
// fleet/words.py). The page computes nothing but ages: a figure older than the freshness
// target shows its age in the server's words (FleetLive, live.js), not a frozen number.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("power-data").textContent);
  const sites = new Map(Object.entries(state.sites));
  const staleAfter = state.stale_after_s;
  const status = document.getElementById("live-status");
  const CHART_POINT_EVERY_S = 60; // the chart holds 1-minute means; live points as often
  const lastPoint = new Map();
  let clockSkew = Date.now() / 1000 - state.now;

  function nowS() { return Date.now() / 1000 - clockSkew; }

  function renderSite(id, s, now) {
    const el = document.getElementById("power-site-" + id);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = s.ts ? now - s.ts : null;
    if (age === null || age >= staleAfter) {
      const quiet = FleetLive.quietWords(age);
      for (const name of ["total_power", "it_power", "cooling_power", "pue"]) field(name).textContent = quiet;
      field("cooling_source").textContent = "";
      return;
    }
    field("total_power").textContent = s.total_power_words;
    field("it_power").textContent = s.it_power_words;
    field("cooling_power").textContent = s.cooling_power_words;
    field("cooling_source").textContent = s.cooling_source_words;
    field("pue").textContent = s.pue_words;
  }

  function renderAll() { const now = nowS(); sites.forEach((s, id) => renderSite(id, s, now)); }

  // ---- the chart

  function drawChart(id, span) {
    const series = state.charts[id][span];
    const when = series.t.map((t) => new Date(t * 1000));
    const kw = (values) => values.map((w) => (w === null ? null : w / 1000));
    const el = window.FleetCharts.draw(id, [
      { x: when, y: kw(series.facility_w), name: "Facility power (kW)", mode: "lines" },
      { x: when, y: kw(series.it_w), name: "IT power (kW)", mode: "lines", line: { dash: "dot" } },
    ], {
      margin: { t: 10, r: 10, b: 40, l: 60 },
      // The window the server sent, not the data's extent: a minute of history in a 24 h
      // chart is a minute at its right end, not a chart one minute wide.
      xaxis: { type: "date", range: [series.start * 1000, series.end * 1000] },
      yaxis: { title: { text: "kW" }, rangemode: "tozero" },
    });
    if (el) el.dataset.span = span;
  }

  function extendChart(id, s) {
    if (s.ts === null || s.ts - (lastPoint.get(id) || 0) < CHART_POINT_EVERY_S) return;
    if (s.total_power_w === null && s.it_power_w === null) return;
    lastPoint.set(id, s.ts);
    // Live points join the 1-minute series (kept for when that view is drawn again),
    // not the 30-day one, which holds hourly means.
    const day = state.charts[id].day;
    day.t.push(s.ts); day.facility_w.push(s.total_power_w); day.it_w.push(s.it_power_w);
    // The window slides with the pushes, keeping the width the server gave it.
    if (s.ts > day.end) { day.start += s.ts - day.end; day.end = s.ts; }
    const el = document.getElementById("chart-" + id);
    if (!el || el.dataset.chart !== "drawn" || el.dataset.span !== "day") return;
    const at = [new Date(s.ts * 1000)];
    const kw = (w) => (w === null ? null : w / 1000);
    window.Plotly.extendTraces(el, { x: [at, at], y: [[kw(s.total_power_w)], [kw(s.it_power_w)]] }, [0, 1]);
    window.Plotly.relayout(el, { "xaxis.range": [day.start * 1000, day.end * 1000] });
  }

  // ---- live

  function apply(update) {
    const pushed = update.site ? [update.site] : Object.values(update.sites || {});
    for (const s of pushed) {
      const id = String(s.site_id);
      if (!sites.has(id)) continue; // a site this page does not show
      sites.set(id, s);
      extendChart(id, s);
    }
    if (update.ts) clockSkew = Date.now() / 1000 - update.ts;
    renderAll();
  }


  for (const id of Object.keys(state.charts)) drawChart(id, "day");
  document.querySelectorAll(".chart-spans input").forEach((input) => {
    input.addEventListener("change", () => drawChart(input.dataset.site, input.value));
  });
  for (const [id, s] of sites) if (s.ts) lastPoint.set(id, s.ts);
  renderAll();
  setInterval(renderAll, 5000); // age out figures that stopped arriving
  FleetLive.connect("/ws/live/fleet", apply, status); // static/dashboard/live.js
})();
