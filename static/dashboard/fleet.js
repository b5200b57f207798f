// Fleet overview: applies pushed per-node and per-rack updates to the rack tiles.
// The rules mirror dashboard/overview.py (apply_live): PDU power when fresh,
// else the nodes' own power, else the sum of GPU power; headroom is the least
// headroom of any fresh GPU in the rack.
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("fleet-data").textContent);
  const racks = new Map(state.racks.map((r) => [String(r.id), r]));
  const nodes = new Map(Object.entries(state.nodes));
  const pdu = new Map(Object.entries(state.pdu));
  const staleAfter = state.stale_after_s;
  const status = document.getElementById("live-status");
  let clockSkew = Date.now() / 1000 - state.now;
  const SOURCE_LABELS = {
    pdu: "measured at the PDU", nodes: "sum of node meters",
    gpus: "sum of GPU power only", none: "no live data",
  };

  function nowS() { return Date.now() / 1000 - clockSkew; }

  function compute(rack, now) {
    const fresh = rack.nodes.map((n) => nodes.get(String(n)))
      .filter((s) => s && s.ts && now - s.ts < staleAfter);
    const heads = fresh.map((s) => s.min_headroom_c).filter((v) => v !== null && v !== undefined);
    const out = { headroom: heads.length ? Math.min(...heads) : null, power: null, source: "none" };
    const measured = pdu.get(String(rack.id));
    if (measured && now - measured.ts < staleAfter) {
      out.power = measured.p / 1000; out.source = "pdu";
    } else if (fresh.length && fresh.every((s) => s.power_w !== null && s.power_w !== undefined)) {
      out.power = fresh.reduce((a, s) => a + s.power_w, 0) / 1000; out.source = "nodes";
    } else if (fresh.length) {
      out.power = fresh.reduce((a, s) => a + (s.gpu_power_w || 0), 0) / 1000; out.source = "gpus";
    }
    return out;
  }

  function render(rack, now) {
    const el = document.getElementById("rack-" + rack.id);
    if (!el) return;
    const v = compute(rack, now);
    const pct = v.power !== null && rack.budget_kw ? (100 * v.power) / rack.budget_kw : null;
    el.querySelector('[data-field="power"]').textContent = v.power === null ? "–" : v.power.toFixed(1);
    el.querySelector('[data-field="pct"]').textContent = pct === null ? "" : pct.toFixed(0) + "%";
    el.querySelector('[data-field="bar"]').style.width = (pct === null ? 0 : Math.min(pct, 100)) + "%";
    el.querySelector('[data-field="headroom"]').textContent =
      v.headroom === null ? "no data" : v.headroom.toFixed(0) + " °C to slowdown";
    el.querySelector('[data-field="source"]').textContent = SOURCE_LABELS[v.source];
    el.dataset.level = pct === null ? "none" : pct >= 95 ? "crit" : pct >= 85 ? "warn" : "ok";
    el.dataset.heat = v.headroom === null ? "none" : v.headroom <= 3 ? "crit" : v.headroom <= 10 ? "warn" : "ok";
    el.dataset.updated = String(now);
    el.setAttribute("aria-label", "Rack " + rack.name + ": " +
      (v.power === null ? "no power data" : v.power.toFixed(1) + " of " + rack.budget_kw + " kW") +
      ", hottest GPU " + (v.headroom === null ? "no data" : v.headroom.toFixed(0) + " °C below slowdown"));
  }

  function renderAll() { const now = nowS(); racks.forEach((r) => render(r, now)); }

  function apply(update) {
    for (const [id, s] of Object.entries(update.nodes || {})) nodes.set(id, s);
    for (const [id, s] of Object.entries(update.racks || {})) pdu.set(id, { p: s.p, ts: s.ts });
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
