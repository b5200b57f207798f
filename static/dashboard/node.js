// The node page, live: each signal on its rack's /changed socket (FleetLive, live.js) says
// something in the rack changed; the page then fetches itself again (at most every 2 s) and morphs
// the node's region in, so every word and unit stays the server's.
(function () {
  "use strict";
  const region = document.getElementById("node-live");
  if (!region || !window.FleetLive) return;
  const EVERY_MS = 2000;
  const QUIET_REFRESH_MS = 10000;
  let busy = false;
  let fetchedAt = 0;

  async function refresh() {
    const now = Date.now();
    if (busy || now - fetchedAt < EVERY_MS) return;
    busy = true;
    fetchedAt = now;
    try {
      const response = await fetch(location.pathname, { credentials: "same-origin" });
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.getElementById("node-live");
      if (fresh) FleetLive.morph(region, fresh.innerHTML);
      const asOf = doc.querySelector("#as-of time");
      const here = document.querySelector("#as-of time");
      if (asOf && here) here.textContent = asOf.textContent;
      document.body.dataset.lastUpdate = String(now / 1000);
    } finally {
      busy = false;
    }
  }

  FleetLive.connect(`/ws/live/rack/${region.dataset.rack}/changed`, refresh);
  // No signal while the node is quiet: refresh anyway, so its figures turn into their age.
  setInterval(() => { if (Date.now() - fetchedAt >= QUIET_REFRESH_MS) refresh(); }, QUIET_REFRESH_MS);
})();
