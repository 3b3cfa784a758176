// The console's live pages (awooop/http/console_live.py): fetch this page again every
// data-every-ms while the tab is visible and swap the regions whose ids data-live names,
// except one the person is typing in. Without this script every page is whole as served.
(function () {
  "use strict";
  var me = document.currentScript;
  if (!me || !window.fetch || !window.DOMParser) { return; }
  var root = document.documentElement;
  var every = parseInt(me.getAttribute("data-every-ms"), 10) || 2000;
  var ids = (me.getAttribute("data-live") || "").split(/\s+/).filter(Boolean);
  var etag = me.getAttribute("data-etag") || null;
  var timer = null;
  var busy = false;
  var stopped = false;
  var polls = 0;

  function stop(why) {
    stopped = true;
    root.setAttribute("data-live", why);
    if (timer !== null) { clearTimeout(timer); timer = null; }
  }

  // A region is left alone while a field in it has the focus or a value the person changed.
  function inUse(el) {
    var active = document.activeElement;
    if (active && active !== document.body && el.contains(active) &&
        /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(active.tagName)) { return true; }
    var fields = el.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) { return true; }
        }
      } else if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) { return true; }
      } else if (f.type !== "hidden" && f.value !== f.defaultValue) { return true; }
    }
    return false;
  }

  // Which <details> the person opened or closed stays so after the swap.
  function swap(old, fresh) {
    var kept = {};
    var was = old.querySelectorAll("details[id]");
    for (var i = 0; i < was.length; i++) { kept[was[i].id] = was[i].open; }
    var now = fresh.querySelectorAll("details[id]");
    for (var k = 0; k < now.length; k++) {
      if (Object.prototype.hasOwnProperty.call(kept, now[k].id)) { now[k].open = kept[now[k].id]; }
    }
    old.replaceWith(document.importNode(fresh, true));
  }

  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var next = doc.querySelector("script[data-live]");
    var final = !next || next.getAttribute("data-final") === "1";
    var main = document.querySelector("main");
    var fresh = doc.querySelector("main");
    // The run is over: the whole page changes (its result, its end), shown once, unless a
    // form on it is in use.
    if (final && main && fresh && !inUse(main)) {
      swap(main, fresh);
      root.setAttribute("data-live-updated", String(polls));
      stop("final");
      return;
    }
    for (var i = 0; i < ids.length; i++) {
      var old = document.getElementById(ids[i]);
      var region = doc.getElementById(ids[i]);
      if (old && region && !inUse(old)) { swap(old, region); }
    }
    root.setAttribute("data-live-updated", String(polls));
    if (final) { stop("final"); }
  }

  function later(ms) {
    if (!stopped && timer === null && !document.hidden) { timer = setTimeout(poll, ms); }
  }

  function poll() {
    timer = null;
    if (stopped || busy || document.hidden) { return; }
    busy = true;
    polls += 1;
    var headers = { "Accept": "text/html" };
    if (etag) { headers["If-None-Match"] = etag; }
    fetch(location.href, { headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (answer) {
        root.setAttribute("data-live-polls", String(polls));
        if (answer.redirected) { stop("logged-out"); return null; }
        if (answer.status === 304) { return null; }
        if (answer.status !== 200) { throw new Error(String(answer.status)); }
        etag = answer.headers.get("ETag");
        return answer.text();
      })
      .then(function (html) { if (html !== null) { apply(html); } busy = false; later(every); })
      .catch(function () { busy = false; later(every * 4); }); // a refusal (429) or a network error
  }

  if (me.getAttribute("data-final") === "1") { stop("final"); return; }
  root.setAttribute("data-live", "on");
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { later(0); } });
  later(every);
}());
