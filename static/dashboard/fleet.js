// Fleet overview: renders the rack states the server pushes (fleet/state.py derives
// every figure and level through fleet/health.py). The page computes nothing but how
// old a figure is, so a quiet rack shows its age instead of frozen numbers.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("fleet-data").textContent);
  const racks = new Map(Object.entries(state.racks));
  const staleAfter = state.stale_after_s;
  const status = document.getElementById("live-status");
  let clockSkew = Date.now() / 1000 - state.now;
  const SOURCE_LABELS = {
    pdu: "measured at the PDU", nodes: "sum of node meters",
    gpus: "sum of GPU power only", none: "no live data",
  };
  const LEVEL_LABELS = { ok: "OK", warn: "Warning", crit: "Critical", unknown: "No data" };

  function nowS() { return Date.now() / 1000 - clockSkew; }
  function fmtAge(s) { return s < 90 ? Math.round(s) + " s" : Math.round(s / 60) + " min"; }

  function render(id, r, now) {
    const el = document.getElementById("rack-" + id);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = r.ts ? now - r.ts : null;
    const old = age === null || age >= staleAfter;
    field("power").textContent = r.power_kw === null ? "–" : r.power_kw.toFixed(1);
    field("pct").textContent = r.power_pct === null ? "" : r.power_pct.toFixed(0) + "%";
    field("bar").style.width = (r.power_pct === null ? 0 : Math.min(r.power_pct, 100)) + "%";
    field("headroom").textContent = r.min_headroom_c === null ? "no data"
      : r.min_headroom_c < 0 ? (-r.min_headroom_c).toFixed(0) + " °C past slowdown"
      : r.min_headroom_c.toFixed(0) + " °C to slowdown";
    const throttle = [];
    if (r.throttling_thermal) throttle.push(r.throttling_thermal + " GPU(s) in thermal slowdown");
    if (r.throttling_power) throttle.push(r.throttling_power + " at their power limit");
    field("throttle").textContent = throttle.join(" · ");
    let label = LEVEL_LABELS[r.level] || r.level;
    if (r.reasons && r.reasons.length) label += ": " + r.reasons.join(" · ");
    if (old) label += age === null ? "" : " · last data " + fmtAge(age) + " ago";
    field("state").textContent = label;
    field("source").textContent = SOURCE_LABELS[r.power_source] || "";
    el.dataset.level = old ? "unknown" : r.level;
    el.dataset.powerLevel = r.power_level;
    el.dataset.heat = r.headroom_level;
    el.dataset.updated = String(now);
    el.setAttribute("aria-label", "Rack " + r.name + ": " + label + ", " +
      (r.power_kw === null ? "no power data" : r.power_kw.toFixed(1) + " of " + r.budget_kw + " kW") +
      ", hottest GPU " + (r.min_headroom_c === null ? "no data" : r.min_headroom_c.toFixed(0) + " °C below slowdown"));
  }

  function renderAll() { const now = nowS(); racks.forEach((r, id) => render(id, r, now)); }

  function apply(update) {
    for (const [id, r] of Object.entries(update.racks || {})) racks.set(id, r);
    if (update.ts) clockSkew = Date.now() / 1000 - update.ts;
    renderAll();
    document.body.dataset.lastUpdate = String(update.ts || "");
  }

  let backoff = 500;
  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(proto + location.host + "/ws/live/fleet");
    ws.onopen = () => { backoff = 500; status.textContent = "live"; status.dataset.state = "live"; };
    ws.onmessage = (e) => apply(JSON.parse(e.data));
    ws.onclose = (e) => {
      if (e.code === 4401) { location.reload(); return; } // logged out: back to the login
      if (e.code === 4000) { connect(); return; }          // routine session re-check
      status.textContent = "reconnecting…"; status.dataset.state = "down";
      setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 10000);
    };
  }
  renderAll();
  setInterval(renderAll, 5000); // age out racks whose data went stale
  connect();
})();
