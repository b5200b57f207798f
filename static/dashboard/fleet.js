// Fleet overview: renders the rack states and site strips the server pushes
// (fleet/read/state.py and fleet/read/site_summary.py derive every figure and level through
// fleet/health). The heat map's mode picks which of those levels colours a tile; the
// page computes nothing but ages and the GPUs throttling per site (a sum of its racks').
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("fleet-data").textContent);
  const racks = new Map(Object.entries(state.racks));
  const sites = new Map(Object.entries(state.sites || {}));
  const places = state.places || {}; // rack id -> [site id, loop id]
  const staleAfter = state.stale_after_s;
  const status = document.getElementById("live-status");
  let clockSkew = Date.now() / 1000 - state.now;
  const SOURCE_LABELS = {
    pdu: "measured at the PDU", nodes: "sum of node meters",
    gpus: "sum of GPU power only", none: "no live data",
  };
  const LEVEL_LABELS = { ok: "OK", warn: "Warning", crit: "Critical", unknown: "No data" };
  const SEVERITY_LEVELS = { critical: "crit", warning: "warn", info: "ok" };
  const MODES = ["overall", "power", "headroom", "throttling", "alerts"];
  let mode = modeFromUrl();

  function nowS() { return Date.now() / 1000 - clockSkew; }
  function fmtAge(s) { return s < 90 ? Math.round(s) + " s" : Math.round(s / 60) + " min"; }
  function powerWords(w) {
    if (w === null || w === undefined) return "no data";
    return w >= 1e6 ? (w / 1e6).toFixed(2) + " MW" : (w / 1e3).toFixed(1) + " kW";
  }
  function headroomWords(h) {
    if (h === null || h === undefined) return "no data";
    return h < 0 ? (-h).toFixed(0) + " °C past slowdown" : h.toFixed(0) + " °C to slowdown";
  }

  function modeFromUrl() {
    const wanted = new URLSearchParams(location.search).get("mode");
    return MODES.includes(wanted) ? wanted : "overall";
  }

  // ---- what each mode shows: a level (from the payload) and the figure behind it

  function alertsAt(id) {
    const [siteId, loopId] = places[id] || [];
    const alerts = (sites.get(String(siteId)) || {}).alerts || { racks: {}, loops: {} };
    return { own: alerts.racks[id], loop: loopId === null ? undefined : alerts.loops[loopId] };
  }

  function worstSeverity(entries) {
    const levels = entries.filter(Boolean).map((e) => SEVERITY_LEVELS[e.severity] || "ok");
    return levels.includes("crit") ? "crit" : levels.includes("warn") ? "warn" : "ok";
  }

  const MODE_VIEWS = {
    overall(r) {
      // As dashboard/overview.py's overall_figure: a quiet loop is not among the reasons.
      let figure = (r.reasons || []).join(" · ");
      if (!figure && r.loop_level === "unknown") figure = "no fresh data from its cooling loop " + r.loop;
      if (!figure && r.level === "ok") figure = "every signal OK";
      return { level: r.level, figure: figure };
    },
    power(r) {
      if (r.power_kw === null) return { level: "unknown", figure: "no power data" };
      const pct = r.power_pct === null ? "" : " (" + r.power_pct.toFixed(0) + " % of budget)";
      return { level: r.power_level, figure: r.power_kw.toFixed(1) + " of " + r.budget_kw + " kW" + pct };
    },
    headroom(r) {
      if (r.min_headroom_c === null && r.lost_gpus) return { level: r.lost_level, figure: r.lost_words };
      if (r.min_headroom_c === null) return { level: "unknown", figure: "no GPU temperature" };
      return { level: r.headroom_level, figure: "hottest GPU " + headroomWords(r.min_headroom_c) };
    },
    throttling(r) {
      // The level is the server's (fleet/health throttling_level), never judged here.
      const figure = r.throttling_thermal + " in thermal slowdown · " +
        r.throttling_power + " at their power limit";
      return { level: r.throttling_level, figure: figure };
    },
    alerts(r, id) {
      const { own, loop } = alertsAt(id);
      const parts = [];
      if (own) parts.push(own.n + " firing on the rack (worst " + own.severity + ")");
      if (loop) parts.push(loop.n + " on its loop " + r.loop + " (worst " + loop.severity + ")");
      return { level: worstSeverity([own, loop]), figure: parts.join(" · ") || "no alerts firing",
        ageless: true };
    },
  };

  function render(id, r, now) {
    const el = document.getElementById("rack-" + id);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = r.ts ? now - r.ts : null;
    const old = age === null || age >= staleAfter;
    field("power").textContent = r.power_kw === null ? "–" : r.power_kw.toFixed(1);
    field("pct").textContent = r.power_pct === null ? "" : r.power_pct.toFixed(0) + "%";
    field("bar").style.width = (r.power_pct === null ? 0 : Math.min(r.power_pct, 100)) + "%";
    // Lost GPUs (off the bus while their node reports) are not "no data": the server's words.
    field("headroom").textContent = r.min_headroom_c === null && r.lost_gpus
      ? r.lost_words : headroomWords(r.min_headroom_c);
    const lost = field("lost");
    if (lost) {
      lost.textContent = r.lost_words || "";
      lost.dataset.level = r.lost_gpus ? r.lost_level : "ok";
    }
    const throttle = [];
    if (r.throttling_thermal) throttle.push(r.throttling_thermal + " GPU(s) in thermal slowdown");
    if (r.throttling_power) throttle.push(r.throttling_power + " at their power limit");
    field("throttle").textContent = throttle.join(" · ");
    field("source").textContent = SOURCE_LABELS[r.power_source] || "";
    const loopWord = field("loop-word");
    if (loopWord) {
      loopWord.textContent = r.loop_level ? LEVEL_LABELS[r.loop_level] : "";
      loopWord.dataset.level = r.loop_level || "";
    }
    const view = MODE_VIEWS[mode](r, id);
    let level = view.level;
    let figure = view.figure;
    if (old && !view.ageless) {
      level = "unknown";
      figure = age === null ? "no data yet" : "no data for " + fmtAge(age);
    }
    const word = LEVEL_LABELS[level] || level;
    field("mode-word").textContent = word;
    field("mode-figure").textContent = figure;
    el.dataset.level = old ? "unknown" : r.level;
    el.dataset.modeLevel = level;
    el.dataset.powerLevel = r.power_level;
    el.dataset.heat = r.headroom_level;
    el.dataset.updated = String(now);
    el.setAttribute("aria-label", "Rack " + r.name + ": " + word + ", " + figure +
      (r.loop ? ", cooled by " + r.loop : ""));
  }

  // ---- the site strips

  function siteThrottling(siteId) {
    // Sums of the site's racks; its level is the worst of theirs (judged on the server).
    let thermal = 0, power = 0, level = "ok", lost = 0, lostLevel = "ok";
    racks.forEach((r, id) => {
      if ((places[id] || [])[0] !== Number(siteId)) return;
      thermal += r.throttling_thermal;
      power += r.throttling_power;
      if (r.throttling_level === "crit") level = "crit";
      if (r.lost_gpus) { lost += r.lost_gpus; lostLevel = r.lost_level; }
    });
    return { thermal: thermal, power: power, level: level, lost: lost, lostLevel: lostLevel };
  }

  function renderSite(siteId, s, now) {
    const el = document.getElementById("site-" + siteId);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = s.ts ? now - s.ts : null;
    if (age === null || age >= staleAfter) {
      const quiet = age === null ? "no data yet" : "no data for " + fmtAge(age);
      field("total_power").textContent = quiet;
      field("it_power").textContent = quiet;
      field("pue").textContent = quiet;
    } else {
      field("total_power").textContent = powerWords(s.total_power_w);
      field("it_power").textContent = powerWords(s.it_power_w);
      field("pue").textContent = s.pue === null ? "no data"
        : s.pue.toFixed(2) + " (category " + s.pue_category + ": " + s.pue_category_words + ")";
    }
    const t = siteThrottling(siteId);
    const throttling = field("throttling");
    throttling.textContent = t.thermal + " in thermal slowdown · " + t.power + " at their power limit";
    throttling.dataset.level = t.level;
    const lost = field("lost");
    if (lost) {
      lost.textContent = String(t.lost);
      lost.dataset.level = t.lostLevel;
    }
    // Incidents lead (the server's words), alert instances second.
    const incidents = field("incidents");
    if (incidents && s.alerts.incident_words !== undefined) {
      incidents.textContent = s.alerts.incident_words;
      incidents.dataset.level = s.alerts.incident_level;
    }
    const alerts = field("alerts");
    alerts.querySelector("a").textContent = String(s.alerts.firing);
    alerts.lastChild.textContent = " (" + s.alerts.critical + " critical)";
    alerts.dataset.level = s.alerts.critical ? "crit" : s.alerts.firing ? "warn" : "ok";
    const agents = field("agents");
    agents.textContent = s.agents.stale + " of " + s.agents.nodes + " nodes" +
      (s.agents.never ? " · " + s.agents.never + " never sent data" : "");
    agents.dataset.level = s.agents.stale ? "warn" : "ok";
    // The counts are refreshed with each facility push; say so when those stop.
    const counted = now - s.computed_at;
    field("age").textContent = counted >= staleAfter
      ? "Alert and agent counts as of " + fmtAge(counted) + " ago (no facility data since)" : "";
  }

  function renderAll() {
    const now = nowS();
    racks.forEach((r, id) => render(id, r, now));
    sites.forEach((s, id) => renderSite(id, s, now));
  }

  function apply(update) {
    for (const [id, r] of Object.entries(update.racks || {})) {
      if (typeof r.power_source === "string") racks.set(id, r); // live.fleet sends summaries
    }
    const pushed = update.site ? [update.site] : Object.values(update.sites || {});
    for (const s of pushed) if (s.site_id !== undefined) sites.set(String(s.site_id), s);
    if (update.ts) clockSkew = Date.now() / 1000 - update.ts;
    renderAll();
    document.body.dataset.lastUpdate = String(update.ts || "");
  }

  // ---- the mode switch: client-side, remembered in ?mode=

  function setMode(next) {
    mode = MODES.includes(next) ? next : "overall";
    document.body.dataset.mode = mode;
    const url = new URL(location.href);
    if (mode === "overall") url.searchParams.delete("mode"); else url.searchParams.set("mode", mode);
    history.replaceState(null, "", url);
    renderAll();
  }

  const modes = document.getElementById("modes");
  if (modes) {
    const checked = modes.querySelector('input[value="' + mode + '"]');
    if (checked) checked.checked = true;
    modes.addEventListener("change", (e) => setMode(e.target.value));
  }
  document.body.dataset.mode = mode;

  renderAll();
  setInterval(renderAll, 5000); // age out racks and sites whose data went stale
  FleetLive.connect("/ws/live/fleet", apply, status); // static/dashboard/live.js
})();
