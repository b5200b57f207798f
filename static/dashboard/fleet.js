// Fleet overview: renders the rack states and site strips the server pushes
// (fleet/read/state.py and fleet/read/site_summary.py derive every figure, level and word
// through fleet/health and fleet/words.py). The heat map's mode picks which of the levels
// the payload carries colours a tile. The page judges nothing: it sums the GPUs throttling
// per site (their level: the worst the racks were sent) and ticks ages between pushes, in
// the server's words (FleetLive, live.js).
(function () {
  "use strict";
  const state = JSON.parse(document.getElementById("fleet-data").textContent);
  const racks = new Map(Object.entries(state.racks));
  const sites = new Map(Object.entries(state.sites || {}));
  const places = state.places || {}; // rack id -> [site id, loop id]
  const staleAfter = state.stale_after_s;
  const status = document.getElementById("live-status");
  let clockSkew = Date.now() / 1000 - state.now;
  const MODES = ["overall", "power", "headroom", "throttling", "alerts"];
  const say = FleetLive.say;
  let mode = modeFromUrl();

  function nowS() { return Date.now() / 1000 - clockSkew; }

  function modeFromUrl() {
    const wanted = new URLSearchParams(location.search).get("mode");
    return MODES.includes(wanted) ? wanted : MODES[0];
  }

  // ---- what each mode shows: a level and the figure behind it, both from the payload

  function alertsAt(id) {
    const [siteId, loopId] = places[id] || [];
    const alerts = (sites.get(String(siteId)) || {}).alerts || { racks: {}, loops: {} };
    return { own: alerts.racks[id], loop: loopId === null ? undefined : alerts.loops[loopId] };
  }

  function alertsView(r, id) {
    const { own, loop } = alertsAt(id);
    const parts = [];
    if (own) parts.push(say("alerts_on_rack", own));
    if (loop) parts.push(say("alerts_on_loop", { n: loop.n, severity: loop.severity, loop: r.loop }));
    return { level: FleetLive.worst([own && own.level, loop && loop.level]),
      figure: parts.join(" · ") || say("no_alerts"), ageless: true };
  }

  function render(id, r, now) {
    const el = document.getElementById("rack-" + id);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = r.ts ? now - r.ts : null;
    const old = age === null || age >= staleAfter;
    field("power").textContent = r.power_kw === null ? "–" : r.power_kw.toFixed(1);
    field("pct").textContent = r.power_pct === null ? "" : r.power_pct.toFixed(0) + "%";
    field("bar").style.width = (r.power_pct === null ? 0 : Math.min(r.power_pct, 100)) + "%";
    field("headroom").textContent = r.headroom_words;
    const lost = field("lost");
    if (lost) {
      lost.textContent = r.lost_words || "";
      lost.dataset.level = r.lost_level;
    }
    field("throttle").textContent = r.throttle_words;
    field("source").textContent = r.source_words;
    const loopWord = field("loop-word");
    if (loopWord) {
      loopWord.textContent = r.loop_level ? FleetLive.levelWord(r.loop_level) : "";
      loopWord.dataset.level = r.loop_level || "";
    }
    const view = mode === "alerts" ? alertsView(r, id) : r.modes[mode];
    let level = view.level;
    let figure = view.figure;
    if (old && !view.ageless) {
      level = FleetLive.staleLevel();
      figure = FleetLive.quietWords(age);
    }
    const word = FleetLive.levelWord(level);
    field("mode-word").textContent = word;
    field("mode-figure").textContent = figure;
    el.dataset.level = old ? FleetLive.staleLevel() : r.level;
    el.dataset.modeLevel = level;
    el.dataset.powerLevel = r.power_level;
    el.dataset.heat = r.headroom_level;
    el.dataset.updated = String(now);
    el.setAttribute("aria-label", say("rack_label", { name: r.name, word: word, figure: figure }) +
      (r.loop ? say("cooled_by", { loop: r.loop }) : ""));
  }

  // ---- the site strips

  function siteThrottling(siteId) {
    // Sums of the site's racks; its levels are the worst of theirs (judged on the server).
    let thermal = 0, power = 0, lost = 0;
    const levels = [], lostLevels = [];
    racks.forEach((r, id) => {
      if ((places[id] || [])[0] !== Number(siteId)) return;
      thermal += r.throttling_thermal;
      power += r.throttling_power;
      lost += r.lost_gpus;
      levels.push(r.throttling_level);
      lostLevels.push(r.lost_level);
    });
    return { thermal: thermal, power: power, level: FleetLive.worst(levels), lost: lost,
      lostLevel: FleetLive.worst(lostLevels) };
  }

  function renderSite(siteId, s, now) {
    const el = document.getElementById("site-" + siteId);
    if (!el) return;
    const field = (name) => el.querySelector('[data-field="' + name + '"]');
    const age = s.ts ? now - s.ts : null;
    if (age === null || age >= staleAfter) {
      const quiet = FleetLive.quietWords(age);
      field("total_power").textContent = quiet;
      field("it_power").textContent = quiet;
      field("pue").textContent = quiet;
    } else {
      field("total_power").textContent = s.total_power_words;
      field("it_power").textContent = s.it_power_words;
      field("pue").textContent = s.pue_words;
    }
    const t = siteThrottling(siteId);
    const throttling = field("throttling");
    throttling.textContent = say("throttling", t);
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
    alerts.lastChild.textContent = say("alerts_critical", s.alerts);
    alerts.dataset.level = s.alerts.level;
    const agents = field("agents");
    agents.textContent = s.agents.words;
    agents.dataset.level = s.agents.level;
    // The counts are refreshed with each facility push; say so when those stop.
    const counted = now - s.computed_at;
    field("age").textContent = counted >= staleAfter
      ? say("counts_as_of", { age: FleetLive.ageWords(counted) }) : "";
  }

  function renderAll() {
    const now = nowS();
    racks.forEach((r, id) => render(id, r, now));
    sites.forEach((s, id) => renderSite(id, s, now));
  }

  function apply(update) {
    for (const [id, r] of Object.entries(update.racks || {})) {
      if (r.modes) racks.set(id, r); // live.fleet sends summaries
    }
    const pushed = update.site ? [update.site] : Object.values(update.sites || {});
    for (const s of pushed) if (s.site_id !== undefined) sites.set(String(s.site_id), s);
    if (update.ts) clockSkew = Date.now() / 1000 - update.ts;
    renderAll();
    document.body.dataset.lastUpdate = String(update.ts || "");
  }

  // ---- the mode switch: client-side, remembered in ?mode=

  function setMode(next) {
    mode = MODES.includes(next) ? next : MODES[0];
    document.body.dataset.mode = mode;
    const url = new URL(location.href);
    if (mode === MODES[0]) url.searchParams.delete("mode"); else url.searchParams.set("mode", mode);
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
