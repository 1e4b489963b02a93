// sandfleet console: a part of a page kept live. An element with an id and
// data-refresh-part="N" is fetched again (the whole page, parsed, never
// run) every N seconds while the page is shown, and its children swapped
// for the fresh ones when they differ: a session's cells arrive while the
// rest of its page (its terminal) stays as it is. The server escaped
// every value; nothing here makes HTML of text.
(function () {
  'use strict';
  if (!window.fetch || !window.DOMParser) return;
  Array.prototype.forEach.call(document.querySelectorAll('[data-refresh-part][id]'), function (part) {
    var every = Math.max(2, parseInt(part.dataset.refreshPart, 10) || 5) * 1000;
    var busy = false;
    // Compared with what the server sent last, not the live DOM, which a
    // viewer changes (a traceback opened stays open).
    var last = part.innerHTML;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(location.href, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById(part.id);
          if (!fresh || fresh.innerHTML === last) return;
          last = fresh.innerHTML;
          part.replaceChildren.apply(part, Array.prototype.map.call(fresh.childNodes, function (n) { return document.importNode(n, true); }));
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, every);
  });
})();
