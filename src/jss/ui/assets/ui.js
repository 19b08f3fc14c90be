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
          main.innerHTML = html;
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

  var events = new EventSource("/ui/live?topic=" + encodeURIComponent(main.dataset.live));
  events.addEventListener("change", refresh);
  events.addEventListener("open", function () {
    main.dataset.connected = "true";
  });
  setInterval(refresh, 15000);
})();
