// The run page's output (awooop/http/console_output.py): follow the run's output stream and
// append each chunk to its attempt's block; mark abandoned attempts; close at the end. A chunk
// whose seq the section already shows (its data-after) is skipped, so a page swapped in by the
// live poller is never appended twice. Without this script the page is whole as served.
(function () {
  "use strict";
  var me = document.currentScript;
  var root = document.documentElement;
  if (!me || !window.EventSource) { return; }
  function section() { return document.getElementById("output"); }
  var first = section();
  if (!first || first.getAttribute("data-done") === "1") { return; }
  var source = new EventSource(first.getAttribute("data-src") + "?after=" +
    encodeURIComponent(first.getAttribute("data-after") || "0"));
  root.setAttribute("data-output", "open");

  function block(sec, attempt) {
    var blocks = sec.querySelectorAll(".output-attempt");
    for (var i = 0; i < blocks.length; i++) {
      if (blocks[i].getAttribute("data-attempt") === String(attempt)) { return blocks[i]; }
    }
    var none = sec.querySelector(".output-none");
    if (none) { none.parentNode.removeChild(none); }
    var div = document.createElement("div");
    div.className = "output-attempt";
    div.setAttribute("data-attempt", String(attempt));
    var head = document.createElement("p");
    head.className = "output-head";
    head.textContent = "attempt " + attempt;
    var pre = document.createElement("pre");
    pre.className = "output-text";
    div.appendChild(head);
    div.appendChild(pre);
    sec.insertBefore(div, sec.querySelector(".output-end"));
    return div;
  }

  function note(sec, text, cls) {
    var p = document.createElement("p");
    p.className = cls;
    p.textContent = text;
    sec.insertBefore(p, sec.querySelector(".output-end"));
  }

  function fresh(sec, e) {
    var seq = parseInt(e.lastEventId, 10);
    if (!(seq > (parseInt(sec.getAttribute("data-after"), 10) || 0))) { return false; }
    sec.setAttribute("data-after", String(seq));
    root.setAttribute("data-output-seq", String(seq));
    return true;
  }

  source.addEventListener("output", function (e) {
    var sec = section();
    if (!sec || !fresh(sec, e)) { return; }
    var d = JSON.parse(e.data);
    block(sec, d.attempt).querySelector("pre").appendChild(document.createTextNode(d.text));
  });
  source.addEventListener("abandoned", function (e) {
    var sec = section();
    if (!sec) { return; }
    var d = JSON.parse(e.data);
    var div = block(sec, d.attempt);
    if (div.className.indexOf("abandoned") < 0) {
      div.className += " abandoned";
      var span = document.createElement("span");
      span.className = "output-abandoned";
      span.textContent = " (abandoned: the run went on in attempt " + d.by + ")";
      div.querySelector(".output-head").appendChild(span);
    }
  });
  source.addEventListener("truncated", function (e) {
    var sec = section();
    if (sec && fresh(sec, e)) { note(sec, "The output reached its limit here: the rest was dropped.", "output-truncated"); }
  });
  source.addEventListener("end", function () {
    source.close();
    root.setAttribute("data-output", "end");
  });
}());
