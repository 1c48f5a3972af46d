// conductor mission control: live updates over server-sent events.
// Without JavaScript every page still reads; this only keeps it current.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var conn = document.getElementById("conn");
  var transcript = document.getElementById("transcript");
  var state = {
    view: live.getAttribute("data-view"),
    id: live.getAttribute("data-id") || "",
    hash: live.getAttribute("data-hash") || "",
    offset: transcript ? transcript.getAttribute("data-offset") : ""
  };
  var es = null;
  function say(text, cls) {
    if (conn) { conn.textContent = text; conn.className = "conn " + cls; }
  }
  function connect() {
    var url = "/events?view=" + encodeURIComponent(state.view) +
      "&id=" + encodeURIComponent(state.id) +
      "&hash=" + encodeURIComponent(state.hash);
    if (state.offset !== "" && state.offset !== null) {
      url += "&offset=" + encodeURIComponent(state.offset);
    }
    es = new EventSource(url);
    es.onopen = function () { say("live", "on"); };
    es.addEventListener("live", function (ev) {
      state.hash = ev.lastEventId;
      // Keep what the operator is typing: forms outside #live are untouched.
      live.innerHTML = ev.data;
      live.setAttribute("data-hash", state.hash);
    });
    es.addEventListener("transcript", function (ev) {
      state.offset = ev.lastEventId;
      if (!transcript) { return; }
      var none = document.getElementById("no-transcript");
      if (none) { none.remove(); }
      var atEnd = (window.innerHeight + window.scrollY) >= document.body.scrollHeight - 40;
      transcript.insertAdjacentHTML("beforeend", ev.data);
      transcript.setAttribute("data-offset", state.offset);
      if (atEnd) { window.scrollTo(0, document.body.scrollHeight); }
    });
    es.onerror = function () {
      // Reconnect with what this page shows now, not the original URL.
      es.close();
      say("reconnecting…", "off");
      setTimeout(connect, 2000);
    };
  }
  connect();
})();
