// The alerts page follows the fleet: on each push of the fleet socket (something was
// ingested) and every REFRESH_MS anyway (the rules run every 10 s in the worker, which
// cannot reach this page's socket), it fetches its region for this person (?part=live:
// their acknowledge and mute controls, their CSRF tokens) and morphs it in, so ticked
// boxes, a half-typed reason and focus stay. At most one fetch at a time, MIN_GAP_MS
// apart.
(function () {
  "use strict";
  const REFRESH_MS = 5000;
  const MIN_GAP_MS = 2000;
  const region = document.getElementById("alerts-live");
  const asOf = document.querySelector("#as-of time");
  if (!region || !window.FleetLive) return;

  let busy = false;
  let lastAt = 0;
  let later = null;

  async function refresh() {
    const wait = lastAt + MIN_GAP_MS - Date.now();
    if (busy || wait > 0) {
      if (later === null) later = setTimeout(() => { later = null; refresh(); }, Math.max(wait, 200));
      return;
    }
    busy = true;
    lastAt = Date.now();
    try {
      const response = await fetch(location.pathname + "?part=live", { credentials: "same-origin" });
      if (response.redirected || response.status === 401 || response.status === 403) {
        location.reload(); // signed out: the page takes them to the sign-in
        return;
      }
      if (!response.ok) return;
      FleetLive.morph(region, await response.text());
      const at = new Date();
      if (asOf) asOf.textContent = at.toISOString().slice(11, 19) + " UTC";
    } catch (err) {
      // the socket's status already says the server is away; try again on the next tick
    } finally {
      busy = false;
    }
  }

  FleetLive.connect("/ws/live/fleet", refresh, document.getElementById("live-status"));
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
})();
