// sandfleet console: live updates, nothing else. Every value from a job
// reaches the page as text (textContent, createTextNode), never as HTML.
(function () {
  'use strict';

  // A job's live output: the gateway's Server-Sent Events, from the start.
  var out = document.getElementById('live-output');
  if (out && out.dataset.events) {
    var status = document.getElementById('job-status');
    var cancel = document.getElementById('cancel');
    var setStatus = function (s) {
      if (!status) return;
      status.textContent = s;
      status.className = 'st ' + (s === 'succeeded' ? 'ok' : (s === 'queued' || s === 'running') ? 'live' : (s === 'canceled' ? 'meh' : 'bad'));
    };
    var append = function (cls, text) {
      var span = document.createElement('span');
      span.className = cls;
      span.textContent = text;
      var follow = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.appendChild(span);
      if (follow) out.scrollTop = out.scrollHeight;
    };
    var data = function (e) {
      try { return JSON.parse(e.data); } catch (err) { return {}; }
    };
    var es = new EventSource(out.dataset.events);
    es.addEventListener('queued', function () { setStatus('queued'); });
    es.addEventListener('started', function () { setStatus('running'); });
    es.addEventListener('stdout', function (e) { append('stdout', data(e).text || ''); });
    es.addEventListener('stderr', function (e) { append('stderr', data(e).text || ''); });
    es.addEventListener('redelivered', function (e) {
      append('note', '\n[attempt ' + data(e).attempt + ': redelivered; the output starts again]\n');
    });
    es.addEventListener('gap', function (e) {
      var d = data(e);
      append('note', '\n[' + d.bytes + ' bytes of ' + d.stream + ' not shown: the stream fell behind]\n');
    });
    es.addEventListener('output_truncated', function (e) {
      append('note', '\n[' + data(e).stream + ' cut at the output cap]\n');
    });
    ['timeout', 'oom', 'canceled'].forEach(function (t) {
      es.addEventListener(t, function (e) { append('note', '\n[' + t + ': ' + (data(e).error || '') + ']\n'); });
    });
    es.addEventListener('finished', function (e) {
      es.close();
      var r = data(e).result || {};
      setStatus(r.status || 'finished');
      if (cancel) cancel.remove();
      // The page of a finished job has its result, artifacts and figures.
      setTimeout(function () { location.reload(); }, 500);
    });
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED) append('note', '\n[the live stream closed; reload for the result]\n');
    };
  }

  // Pages with <main data-refresh="N">: fetch the page again every N
  // seconds and swap in its <main>.
  var main = document.querySelector('main[data-refresh]');
  if (main && window.fetch && window.DOMParser) {
    var every = Math.max(2, parseInt(main.dataset.refresh, 10) || 5) * 1000;
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(location.href, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, 'text/html').querySelector('main[data-refresh]');
          if (fresh) main.replaceChildren.apply(main, Array.prototype.map.call(fresh.childNodes, function (n) { return document.importNode(n, true); }));
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, every);
  }
})();
