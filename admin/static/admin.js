// IdKeeper admin web: the only script. No framework, nothing from the network
// but this server. Every page works without it; it adds two things:
//   - a copy button for the secret of a new API key (data-copy);
//   - the self-refresh of the leases page (data-refresh-url): it fetches the
//     server-rendered fragment every few seconds and swaps it in when it changed.
(function () {
  "use strict";

  function setText(el, text) { if (el) { el.textContent = text; } }

  // Copy to clipboard: <button data-copy="ID"> copies the text of #ID and says so
  // in the element named by data-copy-status.
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    return new Promise(function (resolve, reject) {
      var ta = document.createElement("textarea");
      ta.value = text;
      ta.setAttribute("readonly", "");
      ta.setAttribute("aria-hidden", "true");
      ta.style.position = "fixed";
      ta.style.left = "-9999px";
      document.body.appendChild(ta);
      ta.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      document.body.removeChild(ta);
      if (ok) { resolve(); } else { reject(new Error("copy refused")); }
    });
  }

  function initCopy() {
    var buttons = document.querySelectorAll("button[data-copy]");
    Array.prototype.forEach.call(buttons, function (btn) {
      btn.hidden = false;
      btn.addEventListener("click", function () {
        var src = document.getElementById(btn.getAttribute("data-copy"));
        var status = document.getElementById(btn.getAttribute("data-copy-status"));
        if (!src) { return; }
        copyText(src.textContent.trim()).then(function () {
          setText(status, "Copied to the clipboard.");
        }, function () {
          setText(status, "Copying failed: select the key and copy it by hand.");
        });
      });
    });
  }

  // Self-refresh: the element [data-refresh-url] names the URL of the page's live
  // parts (its every [data-live] element, by id), fetched every data-refresh-every
  // ms and swapped in when they changed. [data-refresh-toggle] pauses and resumes,
  // [data-refresh-status] tells the last update. A part is not swapped while the
  // keyboard focus is in it, so nobody loses their place.
  function initRefresh() {
    var ctl = document.querySelector("[data-refresh-url]");
    var parts = document.querySelectorAll("[data-live]");
    if (!ctl || !parts.length || !window.fetch || !window.DOMParser) { return; }
    var url = ctl.getAttribute("data-refresh-url");
    var every = parseInt(ctl.getAttribute("data-refresh-every"), 10) || 5000;
    var toggle = ctl.querySelector("[data-refresh-toggle]");
    var status = ctl.querySelector("[data-refresh-status]");
    var paused = false, busy = false, stopped = false, timer = null;

    function stamp() { return new Date().toISOString().slice(11, 19) + "Z"; }
    function schedule() {
      if (!stopped) { timer = window.setTimeout(tick, every); }
    }
    function swap(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var held = false;
      Array.prototype.forEach.call(parts, function (part) {
        var fresh = doc.getElementById(part.id);
        if (!fresh) { return; }
        if (part.contains(document.activeElement)) { held = true; return; }
        part.innerHTML = fresh.innerHTML;
      });
      return held;
    }
    function tick() {
      timer = null;
      if (paused || stopped || document.hidden || busy) { schedule(); return; }
      busy = true;
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" }, redirect: "manual" })
        .then(function (res) {
          if (res.type === "opaqueredirect" || res.status === 401 || res.status === 403) {
            stopped = true;
            setText(status, "Your session has ended: reload the page to log in again.");
            return null;
          }
          if (!res.ok) { throw new Error("HTTP " + res.status); }
          return res.text();
        })
        .then(function (html) {
          if (html === null) { return; }
          var held = swap(html);
          ctl.setAttribute("data-refreshed", String(Date.now()));
          setText(status, held ? "Updated " + stamp() + ", except the part that has the focus."
            : "Updated " + stamp() + "; updates every " + Math.round(every / 1000) + " s.");
        })
        .catch(function () {
          setText(status, "Update failed at " + stamp() + "; retrying.");
        })
        .then(function () { busy = false; schedule(); });
    }

    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () {
        paused = !paused;
        toggle.setAttribute("aria-pressed", paused ? "true" : "false");
        setText(status, paused ? "Updates paused." : "Updates resumed.");
        if (!paused && timer === null && !busy) { tick(); }
      });
    }
    setText(status, "Updates every " + Math.round(every / 1000) + " s.");
    schedule();
  }

  function init() {
    initCopy();
    initRefresh();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
