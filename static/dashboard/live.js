// FleetLive: the browser side of every live page. No framework, no build step; load it
// with <script src="{% static 'dashboard/live.js' %}"></script> before the page's own script.
//
// API (kept stable: the node, GPU, power, rack and cooling pages use it)
//
//   FleetLive.connect(path, onMessage, statusEl) -> {close()}
//     Opens ws(s)://<host><path> (e.g. "/ws/live/rack/12", see dashboard/routing.py) and
//     calls onMessage(update) with each JSON message. statusEl (default #live-status)
//     says in words where the socket stands: "connecting…", "live", "reconnecting in
//     N s", "signed out", "not allowed", "paused while the tab is hidden"; its data-state
//     is connecting / live / down / signed-out / refused / paused (body[data-live] too).
//     A tab hidden for 60 s lets its sockets go and reopens them when it is shown again
//     (FleetLive.setHiddenPause(s) changes the 60 s). Several sockets may share one statusEl:
//     it shows the worst. Lost sockets come back after 1 s, doubling to 30 s (±20 %
//     jitter so a restarted server is not stormed). Close codes: 4401 signed out (the
//     page reloads, which leads to the login), 4000 routine session re-check (reconnect
//     at once), 4403 not allowed (a site or rack the user may not see, or none such: no
//     retry). A message's "ts" (server epoch s) sets the page clock (FleetLive.now).
//
//   FleetLive.watchStale(staleAfterS, serverNowS)
//     Every second, each element with data-ts="<epoch s of its newest sample>" (empty:
//     never reported) that is staleAfterS or more old gets class "is-stale" and
//     data-stale="1", its [data-fresh] children are hidden (no frozen numbers), and its
//     [data-age] child (made if missing: span.last-data) reads "last data N s ago" (or
//     "no data yet"), in the server's words. An element may carry its own data-stale-after. serverNowS is the
//     page's render time, so a browser clock that is off does not age figures wrongly.
//   FleetLive.refreshStale()   run that pass now (call it after rendering an update).
//   FleetLive.now()            server time now, epoch seconds.
//
//   Words: this script holds none. The page embeds fleet/words.py's `browser_words()` as
//   <script id="fleet-words" type="application/json"> ({% fleet_words_json %}, from
//   dashboard/templatetags/fleet_words.py), and these say everything by it:
//   FleetLive.ageWords(s)      "14 s", "3 min", "2 h", "2 d": the server's age table.
//   FleetLive.levelWord(level) the server's word for a level it sent ("Warning" for warn).
//   FleetLive.say(phrase, values) one of the server's phrases, {name}s filled from values.
//   FleetLive.quietWords(age)  "no data yet" (age null) or "no data for <age>".
//   FleetLive.worst(levels)    the most severe of levels the server sent, by its order
//                              (the least severe when none).
//   FleetLive.staleLevel()     the level a figure takes once it is stale.
//   FleetLive.morph(region, html) make region's content look like html, moving only
//     what changed (focus, scroll and selection stay).
//
// A page the server renders needs no script of its own: <div id="live-page"
// data-live-path="/ws/live/..."> is connected by itself; each push carries {ts, as_of,
// html} and the region is morphed to it (dashboard/live_pages.py).
(function () {
  "use strict";
  const CLOSE_SIGNED_OUT = 4401;
  const CLOSE_RECHECK = 4000;
  const CLOSE_NOT_ALLOWED = 4403;
  const CLOSE_NOT_FOUND = 4404; // older servers said this for "not allowed"
  const FIRST_RETRY_S = 1;
  const MAX_RETRY_S = 30;
  const wordsEl = document.getElementById("fleet-words");
  const WORDS = wordsEl ? JSON.parse(wordsEl.textContent)
    : { levels: {}, level_order: [], stale_level: null, ages: [], phrases: {} };
  // Worst first: what a status shared by several sockets shows.
  const SEVERITY = ["signed-out", "refused", "down", "paused", "connecting", "live"];
  // A tab hidden this long lets its sockets go (the server renders and sends nothing for
  // it) and takes them back when shown again: dashboards left open in background tabs
  // cost nothing. FleetLive.setHiddenPause(s) changes it (tests).
  let hiddenPauseS = 60;

  let clockSkewS = 0; // browser clock minus server clock
  function now() { return Date.now() / 1000 - clockSkewS; }
  function syncClock(serverS) {
    if (typeof serverS === "number" && isFinite(serverS) && serverS > 0) {
      clockSkewS = Date.now() / 1000 - serverS;
    }
  }

  // The server's age table: [below s (null: no bound), unit s, word] rows in order.
  function ageWords(s) {
    for (const [below, unit, word] of WORDS.ages) {
      if (below === null || s < below) return Math.round(s / unit) + " " + word;
    }
    return String(Math.round(s));
  }
  function levelWord(level) { return WORDS.levels[level] || String(level); }
  function say(phrase, values) {
    const text = WORDS.phrases[phrase] || phrase;
    return text.replace(/\{(\w+)\}/g, (_, name) => String((values || {})[name]));
  }
  function quietWords(age) {
    return age === null ? say("no_data_yet") : say("no_data_for", { age: ageWords(age) });
  }
  function worst(levels) {
    const order = WORDS.level_order;
    return levels.filter(Boolean).reduce(
      (a, b) => (order.indexOf(b) > order.indexOf(a) ? b : a), order[0]);
  }
  function staleLevel() { return WORDS.stale_level; }

  // -- status, shared by the sockets that name the same element ----------------------
  const statusEls = new Set();
  function renderStatus(el) {
    const conns = Array.from(el.__fleetLive.values());
    if (!conns.length) return;
    let worst = conns[0];
    for (const c of conns) {
      if (SEVERITY.indexOf(c.state) < SEVERITY.indexOf(worst.state)) worst = c;
    }
    let words = { live: "live", connecting: "connecting…", "signed-out": "signed out",
      refused: "not allowed", paused: "paused while the tab is hidden" }[worst.state];
    if (worst.state === "down") {
      const left = Math.max(1, Math.ceil((worst.retryAt - Date.now()) / 1000));
      words = "reconnecting in " + left + " s";
    }
    if (el.dataset.state !== worst.state) announce(el, worst.state);
    el.dataset.state = worst.state;
    if (el.textContent !== words) el.textContent = words;
    document.body.dataset.live = worst.state;
  }

  // A screen reader hears each change of state once ("reconnecting", "live"), not the
  // countdown ticking every second: the visible status stops being a live region and a
  // visually hidden one beside it is told only the state.
  const ANNOUNCED = { live: "live", connecting: "connecting", down: "connection lost, reconnecting",
    "signed-out": "signed out", refused: "not allowed", paused: "paused" };
  function announce(el, state) {
    if (!el.__fleetSaid) {
      el.removeAttribute("aria-live");
      el.removeAttribute("role");
      const said = document.createElement("span");
      said.className = "sr";
      said.setAttribute("role", "status");
      said.setAttribute("aria-live", "polite");
      if (el.parentNode) el.parentNode.insertBefore(said, el.nextSibling);
      el.__fleetSaid = said;
    }
    el.__fleetSaid.textContent = ANNOUNCED[state] || state;
  }

  function connect(path, onMessage, statusEl) {
    const el = statusEl || document.getElementById("live-status") || document.createElement("span");
    if (!el.__fleetLive) el.__fleetLive = new Map();
    statusEls.add(el);
    const conn = { state: "connecting", retryAt: 0 };
    const key = {};
    el.__fleetLive.set(key, conn);
    let retryS = FIRST_RETRY_S;
    let ws = null;
    let timer = null;
    let closed = false;
    let paused = false;
    let hiddenTimer = null;

    function set(state) { conn.state = state; renderStatus(el); }
    function pause() {
      if (closed || paused || conn.state === "refused" || conn.state === "signed-out") return;
      paused = true;
      clearTimeout(timer);
      if (ws) { ws.onclose = null; ws.close(1000); }
      set("paused");
    }
    function resume() {
      clearTimeout(hiddenTimer);
      if (!paused || closed) return;
      paused = false;
      retryS = FIRST_RETRY_S;
      set("connecting");
      open();
    }
    function onVisibility() {
      if (!document.hidden) { resume(); return; }
      clearTimeout(hiddenTimer);
      hiddenTimer = setTimeout(pause, hiddenPauseS * 1000);
    }
    document.addEventListener("visibilitychange", onVisibility);
    function open() {
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      ws = new WebSocket(proto + location.host + path);
      ws.onopen = () => { retryS = FIRST_RETRY_S; set("live"); };
      ws.onmessage = (e) => {
        const update = JSON.parse(e.data);
        syncClock(update.ts);
        onMessage(update);
      };
      ws.onclose = (e) => {
        if (closed) return;
        if (e.code === CLOSE_SIGNED_OUT) { set("signed-out"); location.reload(); return; }
        if (e.code === CLOSE_RECHECK) { open(); return; }
        if (e.code === CLOSE_NOT_ALLOWED || e.code === CLOSE_NOT_FOUND) { set("refused"); return; }
        const waitS = retryS * (0.8 + 0.4 * Math.random());
        retryS = Math.min(retryS * 2, MAX_RETRY_S);
        conn.retryAt = Date.now() + waitS * 1000;
        set("down");
        timer = setTimeout(open, waitS * 1000);
      };
    }
    set("connecting");
    open();
    return {
      close() {
        closed = true;
        clearTimeout(timer);
        clearTimeout(hiddenTimer);
        document.removeEventListener("visibilitychange", onVisibility);
        if (ws) ws.close();
        el.__fleetLive.delete(key);
        renderStatus(el);
      },
    };
  }

  // The countdown of "reconnecting in N s" moves on by itself.
  setInterval(() => statusEls.forEach(renderStatus), 1000);

  // -- stale ticker ---------------------------------------------------------------------
  let staleAfterDefaultS = null;
  function owned(el, selector) {
    return Array.from(el.querySelectorAll(selector)).filter((c) => c.parentElement.closest("[data-ts]") === el);
  }
  function ageElement(el) {
    const found = owned(el, "[data-age]")[0];
    if (found) return found;
    const span = document.createElement("span");
    span.className = "last-data";
    span.dataset.age = "";
    el.appendChild(span);
    return span;
  }
  function refreshStale() {
    if (staleAfterDefaultS === null) return;
    const t = now();
    document.querySelectorAll("[data-ts]").forEach((el) => {
      const ts = parseFloat(el.dataset.ts);
      const after = parseFloat(el.dataset.staleAfter || staleAfterDefaultS);
      const age = isFinite(ts) ? Math.max(0, t - ts) : null;
      const stale = age === null || age >= after;
      el.classList.toggle("is-stale", stale);
      if (stale) el.dataset.stale = "1"; else delete el.dataset.stale;
      owned(el, "[data-fresh]").forEach((c) => { c.hidden = stale; });
      const words = !stale ? "" : age === null ? say("no_data_yet") : say("last_data", { age: ageWords(age) });
      const ageEl = stale ? ageElement(el) : owned(el, "[data-age]")[0];
      if (ageEl && ageEl.textContent !== words) ageEl.textContent = words;
    });
  }
  function watchStale(staleAfterS, serverNowS) {
    staleAfterDefaultS = staleAfterS;
    syncClock(serverNowS);
    refreshStale();
    setInterval(refreshStale, 1000);
  }

  // -- pages the server renders -------------------------------------------------------
  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName &&
      (a.nodeType !== Node.ELEMENT_NODE || a.id === b.id);
  }

  // Make `from` look like `to`, keeping every node whose kind did not change.
  function morphNode(from, to) {
    if (from.nodeType !== Node.ELEMENT_NODE) {
      if (from.nodeValue !== to.nodeValue) from.nodeValue = to.nodeValue;
      return;
    }
    // A <details> the person opened stays open (the server renders them closed).
    const keepOpen = from.nodeName === "DETAILS";
    for (const a of Array.from(from.attributes)) {
      if (!to.hasAttribute(a.name) && !(keepOpen && a.name === "open")) from.removeAttribute(a.name);
    }
    for (const a of Array.from(to.attributes)) {
      if (from.getAttribute(a.name) !== a.value) from.setAttribute(a.name, a.value);
    }
    const olds = Array.from(from.childNodes);
    const news = Array.from(to.childNodes);
    news.forEach((next, i) => {
      const old = olds[i];
      if (!old) from.appendChild(next);
      else if (sameKind(old, next)) morphNode(old, next);
      else from.replaceChild(next, old);
    });
    for (let i = olds.length - 1; i >= news.length; i--) from.removeChild(olds[i]);
  }

  function morph(region, html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    const next = region.cloneNode(false);
    next.appendChild(template.content);
    morphNode(region, next);
  }

  function servedPage(region) {
    const asOf = document.querySelector("#as-of time");
    connect(region.dataset.livePath, (update) => {
      if (typeof update.html !== "string") return;
      morph(region, update.html);
      if (asOf && update.as_of) asOf.textContent = update.as_of;
      document.body.dataset.lastUpdate = String(update.ts);
      refreshStale();
    });
  }

  window.FleetLive = {
    connect: connect,
    watchStale: watchStale,
    refreshStale: refreshStale,
    now: now,
    ageWords: ageWords,
    levelWord: levelWord,
    say: say,
    quietWords: quietWords,
    worst: worst,
    staleLevel: staleLevel,
    morph: morph,
    setHiddenPause(seconds) { hiddenPauseS = seconds; },
  };
  const region = document.getElementById("live-page");
  if (region && region.dataset.livePath) servedPage(region);
})();
