// The fleet page's live updates: each server-sent event replaces one
// section with the HTML the server rendered (html/template escapes it);
// #d-<decision id> and #logs-<instance id> fetch an explanation or logs.
// Nothing here reaches beyond this origin.
"use strict";
(function () {
  const live = document.getElementById("live");
  const sections = ["node", "nodes", "declarations", "placements", "decisions", "activity", "instances"];

  function connect() {
    const es = new EventSource("/ui/events");
    es.onopen = function () { live.textContent = "live"; live.className = "live on"; };
    es.onerror = function () { live.textContent = "reconnecting"; live.className = "live off"; };
    sections.forEach(function (name) {
      es.addEventListener(name, function (ev) {
        const el = document.getElementById("sec-" + name);
        if (el) { el.innerHTML = ev.data; }
      });
    });
  }

  const shown = {}; // per panel, the latest fetch: an older answer is dropped

  async function show(panel, idEl, body, url, id, asText) {
    const n = (shown[panel.id] || 0) + 1;
    shown[panel.id] = n;
    panel.hidden = false;
    idEl.textContent = id;
    body.textContent = "loading...";
    let text, ok = false;
    try {
      const res = await fetch(url, { cache: "no-store" });
      text = await res.text();
      ok = res.ok;
    } catch (e) {
      text = "not loaded: " + e;
    }
    if (shown[panel.id] !== n) { return; }
    if (!ok || asText) { body.textContent = text; } else { body.innerHTML = text; }
  }

  function route() {
    let h;
    try { h = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; } // a malformed link
    let m = /^d-([0-9a-f]{8,64})$/.exec(h);
    const explain = document.getElementById("explain");
    if (m && explain) {
      show(explain, document.getElementById("explain-id"), document.getElementById("explain-body"),
        "/ui/decisions/" + m[1], m[1], false);
      return;
    }
    m = /^logs-([A-Za-z0-9._:-]{1,200})$/.exec(h);
    if (m) {
      show(document.getElementById("logs"), document.getElementById("logs-id"), document.getElementById("logs-body"),
        "/ui/logs/" + encodeURIComponent(m[1]), m[1], true);
    }
  }

  window.addEventListener("hashchange", route);
  route();
  connect();
})();
