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

  async function show(panel, idEl, body, url, id, asText) {
    panel.hidden = false;
    idEl.textContent = id;
    body.textContent = "loading...";
    try {
      const res = await fetch(url, { cache: "no-store" });
      const text = await res.text();
      if (!res.ok || asText) { body.textContent = text; } else { body.innerHTML = text; }
    } catch (e) {
      body.textContent = "not loaded: " + e;
    }
  }

  function route() {
    const h = decodeURIComponent(location.hash.slice(1));
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
