// The browser side of every live page: one socket per page, reconnected with backoff,
// a status that says in words whether the page is live, and a DOM morph for pages the
// server renders (rack, cooling: dashboard/live_pages.py).
//
// FleetLive.connect(path, onUpdate) serves any page; a page holding
// <div id="live-page" data-live-path="/ws/live/..."> is wired up by itself: each push
// carries {ts, as_of, html} and the region is morphed to the new HTML, so only what
// changed moves (focus, scroll and text selection stay where they are).
(function () {
  "use strict";
  const CLOSE_LOGGED_OUT = 4401; // the session ended: back to the login
  const CLOSE_RECHECK = 4000; // the routine session re-check: reconnect at once
  const CLOSE_NOT_FOUND = 4404; // the page's subject is gone or no longer visible
  const STATUS_WORDS = {
    connecting: "connecting…",
    live: "live",
    down: "not live: reconnecting…",
    gone: "not live: no longer available",
  };

  function setStatus(state) {
    const status = document.getElementById("live-status");
    if (status && status.dataset.state !== state) {
      status.dataset.state = state;
      status.textContent = STATUS_WORDS[state];
    }
    document.body.dataset.live = state;
  }

  function connect(path, onUpdate) {
    let backoff = 500;
    function open() {
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      const ws = new WebSocket(proto + location.host + path);
      ws.onopen = () => { backoff = 500; setStatus("live"); };
      ws.onmessage = (e) => onUpdate(JSON.parse(e.data));
      ws.onclose = (e) => {
        if (e.code === CLOSE_LOGGED_OUT) { location.reload(); return; }
        if (e.code === CLOSE_RECHECK) { open(); return; }
        if (e.code === CLOSE_NOT_FOUND) { setStatus("gone"); return; }
        setStatus("down");
        setTimeout(open, backoff);
        backoff = Math.min(backoff * 2, 10000);
      };
    }
    setStatus("connecting");
    open();
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName &&
      (a.nodeType !== Node.ELEMENT_NODE || a.id === b.id);
  }

  // Make `from` look like `to`, keeping every node whose kind did not change.
  function morph(from, to) {
    if (from.nodeType !== Node.ELEMENT_NODE) {
      if (from.nodeValue !== to.nodeValue) from.nodeValue = to.nodeValue;
      return;
    }
    for (const a of Array.from(from.attributes)) {
      if (!to.hasAttribute(a.name)) from.removeAttribute(a.name);
    }
    for (const a of Array.from(to.attributes)) {
      if (from.getAttribute(a.name) !== a.value) from.setAttribute(a.name, a.value);
    }
    const olds = Array.from(from.childNodes);
    const news = Array.from(to.childNodes);
    news.forEach((next, i) => {
      const old = olds[i];
      if (!old) from.appendChild(next);
      else if (sameKind(old, next)) morph(old, next);
      else from.replaceChild(next, old);
    });
    for (let i = olds.length - 1; i >= news.length; i--) from.removeChild(olds[i]);
  }

  function morphHtml(region, html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    const next = region.cloneNode(false);
    next.appendChild(template.content);
    morph(region, next);
  }

  function servedPage(region) {
    const asOf = document.querySelector("#as-of time");
    connect(region.dataset.livePath, (update) => {
      morphHtml(region, update.html);
      if (asOf && update.as_of) asOf.textContent = update.as_of;
      document.body.dataset.lastUpdate = String(update.ts);
    });
  }

  window.FleetLive = { connect: connect, morph: morphHtml };
  const region = document.getElementById("live-page");
  if (region && region.dataset.livePath) servedPage(region);
})();
