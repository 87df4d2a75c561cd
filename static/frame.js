'use strict';
// Inside the sandboxed frame: shows the HTML the page sends and tells the
// page how tall it is. Scripts in that HTML do not run (it is set as
// innerHTML, and the frame's CSP allows this file only).
(() => {
  function report () {
    parent.postMessage({ type: 'height', height: Math.ceil(document.documentElement.scrollHeight) }, '*');
  }
  window.addEventListener('message', (ev) => {
    if (ev.source !== parent || !ev.data || ev.data.type !== 'render') return;
    document.body.innerHTML = String(ev.data.html);
    report();
  });
  document.addEventListener('DOMContentLoaded', () => {
    new ResizeObserver(report).observe(document.body);
    parent.postMessage({ type: 'ready' }, '*');
  });
})();
