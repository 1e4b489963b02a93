// The session page's terminal: term.js on the API's WebSocket
// (GET /v1/sessions/{id}/pty): binary frames are the terminal's bytes,
// a text frame out is a resize, a text frame in is its end.
(function () {
  'use strict';
  var box = document.getElementById('terminal');
  var button = document.getElementById('terminal-open');
  var status = document.getElementById('terminal-status');
  if (!box || !button || typeof Terminal !== 'function') return;
  var cols = 100, rows = 30;
  button.addEventListener('click', function () {
    button.disabled = true;
    var term = new Terminal({cols: cols, rows: rows, screenKeys: true, useStyle: false});
    term.open(box);
    term.focus();
    var proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    var ws = new WebSocket(proto + '//' + location.host + box.dataset.pty + '?cols=' + cols + '&rows=' + rows);
    ws.binaryType = 'arraybuffer';
    var dec = new TextDecoder();
    var enc = new TextEncoder();
    ws.onopen = function () { status.textContent = 'connected'; };
    ws.onmessage = function (ev) {
      if (typeof ev.data === 'string') {
        var end = {};
        try { end = JSON.parse(ev.data); } catch (e) {}
        status.textContent = end.exit_code !== undefined ? 'the shell exited ' + end.exit_code : 'ended: ' + (end.reason || 'closed');
        return;
      }
      term.write(dec.decode(new Uint8Array(ev.data), {stream: true}));
    };
    ws.onclose = function () {
      if (status.textContent === 'connected') status.textContent = 'disconnected';
      button.disabled = false;
    };
    term.on('data', function (d) {
      if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
    });
  });
})();
