// pinfed UI: live updates. A page whose <main> names a topic (data-live) follows the
// server's events for it and replaces its body with a fresh server rendering on every
// change, and every 15 s (ages move). An expired session sends the browser to the login.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || !main.dataset.live) {
    return;
  }
  var busy = false;
  var again = false;
  var login = "/ui/login?next=" + encodeURIComponent(location.pathname + location.search);

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    var url = new URL(location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) {
        if (r.status === 401) {
          location.href = login;
          return null;
        }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          var open = Array.prototype.map.call(main.querySelectorAll("details[open]"), function (d) {
            return d.parentElement ? d.parentElement.id : "";
          });
          // What the user chose in a form (an undo's revision) survives the update.
          var chosen = Array.prototype.map.call(main.querySelectorAll("select[id]"), function (e) {
            return [e.id, e.value];
          });
          main.innerHTML = html;
          chosen.forEach(function (c) {
            var e = document.getElementById(c[0]);
            if (e && Array.prototype.some.call(e.options, function (o) { return o.value === c[1]; })) {
              e.value = c[1];
            }
          });
          open.forEach(function (id) {
            var d = id && document.querySelector("#" + CSS.escape(id) + " > details");
            if (d) {
              d.open = true;
            }
          });
          main.dataset.refreshed = String((Number(main.dataset.refreshed) || 0) + 1);
        }
      })
      .catch(function () {
        // The JSS is unreachable for now: the next event or tick tries again.
      })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  var events = null;
  function connect() {
    events = new EventSource("/ui/live?topic=" + encodeURIComponent(main.dataset.live));
    events.addEventListener("change", refresh);
    events.addEventListener("open", function () {
      main.dataset.connected = "true";
    });
  }
  connect();
  // A page left for another keeps no connection open: the browser may keep it (the
  // back/forward cache), and a browser holds only six connections to one server, so a
  // few pages visited in a row would otherwise leave the next one without any.
  window.addEventListener("pagehide", function () {
    if (events) {
      events.close();
      events = null;
      main.dataset.connected = "false";
    }
  });
  window.addEventListener("pageshow", function (e) {
    if (e.persisted && !events) {
      connect();
      refresh();
    }
  });
  setInterval(refresh, 15000);
})();
