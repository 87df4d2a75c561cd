// The terminal panel: a login shell in the selected kernel's sandbox
// (POST api/terminals {"kernel_id"}), drawn by xterm.js (static/vendor/,
// as npm publishes it) over terminado's WebSocket protocol: ["stdin",
// text] and ["set_size", rows, cols] out, ["setup"], ["stdout", text] and
// ["disconnect"] in. The terminal belongs to one kernel: choosing another
// kernel, or closing the panel, ends it.
import { Terminal } from './vendor/xterm.mjs';
import { FitAddon } from './vendor/addon-fit.mjs';
import { $, base, notice, state } from './shared.js';

const ui = {
  panel: $('terminal'),
  title: $('terminal-title'),
  screen: $('terminal-screen'),
  close: $('terminal-close'),
  toggle: $('terminal-toggle')
};

let current = null; // { name, kernel, term, fit, ws, styles, sheets, ended }

// xterm.js styles its rows with <style> elements it writes and rewrites;
// the page's CSP (style-src 'self', no inline styles) leaves those
// unapplied. Their text is copied into constructed style sheets, which
// the CSP does not govern (they are CSSOM, not markup), whenever it changes.
function mirrorStyles (root) {
  const sheets = new Map();
  const sync = () => {
    for (const el of root.querySelectorAll('style')) {
      let sheet = sheets.get(el);
      if (!sheet) {
        sheet = new CSSStyleSheet();
        sheets.set(el, sheet);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      sheet.replaceSync(el.textContent);
    }
  };
  const observer = new MutationObserver(sync);
  observer.observe(root, { subtree: true, childList: true, characterData: true });
  sync();
  return {
    stop () {
      observer.disconnect();
      const gone = new Set(sheets.values());
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !gone.has(s));
    }
  };
}

async function apiCall (method, path, body) {
  const res = await fetch(new URL(path, base), {
    method,
    headers: { Authorization: `token ${state.token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store'
  });
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try { message = (await res.json()).message || message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return res.status === 204 ? null : res.json();
}

function send (t, msg) {
  if (t.ws && t.ws.readyState === WebSocket.OPEN) t.ws.send(JSON.stringify(msg));
}

function sendSize (t) {
  send(t, ['set_size', t.term.rows, t.term.cols, ui.screen.clientHeight, ui.screen.clientWidth]);
}

function fit () {
  if (current && !ui.panel.hidden) current.fit.fit();
}

function connect (t) {
  const url = new URL(`terminals/websocket/${encodeURIComponent(t.name)}`, base);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  // A browser cannot set headers on a WebSocket: the token goes in the query.
  url.searchParams.set('token', state.token);
  const ws = new WebSocket(url);
  t.ws = ws;
  ws.onopen = () => sendSize(t);
  ws.onmessage = (ev) => {
    if (current !== t || typeof ev.data !== 'string') return;
    let msg;
    try { msg = JSON.parse(ev.data); } catch (e) { return; }
    if (!Array.isArray(msg)) return;
    if (msg[0] === 'stdout' && typeof msg[1] === 'string') t.term.write(msg[1]);
    else if (msg[0] === 'disconnect') ended(t);
  };
  ws.onclose = () => {
    if (current === t && !t.ended) ended(t);
  };
}

function ended (t) {
  t.ended = true;
  t.term.write('\r\n\x1b[2m[the terminal ended]\x1b[0m\r\n');
  ui.title.textContent = `Terminal ${t.name} · ended`;
}

export async function openTerminal () {
  if (current) {
    ui.panel.hidden = false;
    current.term.focus();
    return;
  }
  const kernel = state.kernel;
  if (!kernel) {
    notice('Start a kernel first: the terminal opens in its sandbox.');
    return;
  }
  let model;
  try {
    model = await apiCall('POST', 'api/terminals', { kernel_id: kernel });
  } catch (e) {
    notice(`Cannot open a terminal: ${e.message}`);
    return;
  }
  if (state.kernel !== kernel) {
    apiCall('DELETE', `api/terminals/${encodeURIComponent(model.name)}`).catch(() => {});
    return;
  }
  ui.panel.hidden = false;
  ui.toggle.setAttribute('aria-pressed', 'true');
  ui.title.textContent = `Terminal ${model.name} · in the sandbox of ${kernel.slice(0, 8)}`;
  const dark = matchMedia('(prefers-color-scheme: dark)').matches;
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: getComputedStyle(document.documentElement).getPropertyValue('--mono'),
    fontSize: 13,
    scrollback: 5000,
    theme: dark ? { background: '#11151c' } : { background: '#fbfcfd', foreground: '#1c2230', cursor: '#1c2230', selectionBackground: '#c8d7f5' }
  });
  const fitAddon = new FitAddon();
  term.loadAddon(fitAddon);
  const t = { name: model.name, kernel, term, fit: fitAddon, ws: null, styles: null, ended: false };
  current = t;
  t.styles = mirrorStyles(ui.screen);
  term.open(ui.screen);
  fitAddon.fit();
  term.onData((data) => send(t, ['stdin', data]));
  term.onResize(() => sendSize(t));
  connect(t);
  term.focus();
}

// Ends the terminal (its shell too) and hides the panel.
export function closeTerminal () {
  const t = current;
  current = null;
  ui.panel.hidden = true;
  ui.toggle.setAttribute('aria-pressed', 'false');
  if (!t) return;
  if (t.ws) t.ws.close(1000);
  if (!t.ended) apiCall('DELETE', `api/terminals/${encodeURIComponent(t.name)}`).catch(() => {});
  t.term.dispose();
  t.styles.stop();
  ui.screen.replaceChildren();
}

// The selected kernel changed: a terminal of another kernel's sandbox ends.
export function terminalFollowKernel (id) {
  if (current && current.kernel !== id) closeTerminal();
}

ui.toggle.addEventListener('click', () => {
  if (current && !ui.panel.hidden) closeTerminal();
  else openTerminal();
});
ui.close.addEventListener('click', closeTerminal);
window.addEventListener('resize', fit);
