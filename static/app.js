'use strict';
// Glovebox's page: kernels, cells and files over the gateway's own API
// (REST with the token in a header, the kernel WebSocket in the JSON
// format). Plain JavaScript, no build step. Kernel output is never put into
// this page as markup: text is text, images are <img> from data: URLs,
// Markdown is built from DOM nodes, HTML goes to a sandboxed frame.
(() => {
  const base = new URL('.', location.href); // "<base-url>/": every route is relative to it
  const storeKey = (what) => `glovebox.${what}:${base.pathname}`;
  const MAX_TEXT = 1 << 20; // characters of stream text shown per cell

  const $ = (id) => document.getElementById(id);
  const ui = {
    kernelSelect: $('kernel-select'),
    kernelState: $('kernel-state'),
    specSelect: $('spec-select'),
    start: $('start'),
    interrupt: $('interrupt'),
    restart: $('restart'),
    shutdown: $('shutdown'),
    connection: $('connection'),
    notice: $('notice'),
    noticeText: $('notice-text'),
    cells: $('cells'),
    files: $('files'),
    filesPath: $('files-path'),
    fileList: $('file-list'),
    uploadInput: $('upload-input'),
    uploadStatus: $('upload-status'),
    tokenDialog: $('token-dialog'),
    tokenMessage: $('token-message'),
    tokenInput: $('token-input')
  };

  const state = {
    token: null,
    specs: [],
    defaultSpec: null,
    kernels: [],
    kernel: null, // the selected kernel's id
    executionState: 'none',
    reason: '', // why the selected kernel last died, as the gateway tells it
    ws: null,
    outbox: [], // messages not yet sent: the socket is down, or a restart is on
    restarting: false,
    retries: 0,
    reconnectTimer: null,
    // This page's client session: the gateway keeps the kernel's outputs
    // for it while the socket is down and replays them on reconnect.
    session: uuid(),
    pending: new Map(), // execute msg_id -> cell
    displays: new Map(), // display_id -> Set of output elements
    cells: [],
    filesDir: '' // below /home/user
  };

  function uuid () {
    return crypto.randomUUID ? crypto.randomUUID().replace(/-/g, '')
      : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function el (tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  function notice (text) {
    ui.noticeText.textContent = text;
    ui.notice.hidden = !text;
  }
  $('notice-close').addEventListener('click', () => notice(''));

  // ---- the token ---------------------------------------------------------

  // The printed URL carries ?token=: keep it (in this browser's storage for
  // this gateway) and take it out of the address bar and the history.
  function takeTokenFromUrl () {
    const url = new URL(location.href);
    const token = url.searchParams.get('token');
    if (token === null) return null;
    url.searchParams.delete('token');
    history.replaceState(null, '', url.pathname + url.search + url.hash);
    return token;
  }

  function askToken (message, bad) {
    return new Promise((resolve) => {
      ui.tokenMessage.textContent = message;
      ui.tokenMessage.classList.toggle('bad', !!bad);
      ui.tokenInput.value = '';
      const form = $('token-form');
      form.onsubmit = (ev) => {
        ev.preventDefault();
        const token = ui.tokenInput.value.trim();
        if (!token) return;
        ui.tokenDialog.close();
        resolve(token);
      };
      if (!ui.tokenDialog.open) ui.tokenDialog.showModal();
      ui.tokenInput.focus();
    });
  }

  class ApiError extends Error {
    constructor (status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api (method, path, body) {
    const headers = { Authorization: `token ${state.token}` };
    let payload;
    if (body instanceof Blob) {
      payload = body;
    } else if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    const res = await fetch(new URL(path, base), { method, headers, body: payload, cache: 'no-store' });
    if (!res.ok) {
      let message = `${res.status} ${res.statusText}`;
      try { message = (await res.json()).message || message; } catch (e) { /* not JSON */ }
      if (res.status === 401) signIn('That token was not accepted. Enter the one glovebox printed.', true);
      throw new ApiError(res.status, message);
    }
    if (res.status === 204) return null;
    return (res.headers.get('content-type') || '').includes('application/json') ? res.json() : res;
  }

  let signingIn = null;
  // Asks for a token until the gateway accepts one, then (re)starts.
  function signIn (message, bad) {
    if (signingIn) return signingIn;
    signingIn = (async () => {
      for (;;) {
        state.token = await askToken(message, bad);
        const res = await fetch(new URL('api/kernels', base), { headers: { Authorization: `token ${state.token}` } });
        if (res.ok) break;
        message = res.status === 401 ? 'That token was not accepted. Try again.' : `The gateway answered ${res.status}.`;
        bad = true;
      }
      localStorage.setItem(storeKey('token'), state.token);
      signingIn = null;
      await boot();
    })();
    return signingIn;
  }

  // ---- kernels -------------------------------------------------------------

  function kernelLabel (k) {
    return `${k.name} · ${k.id.slice(0, 8)}`;
  }

  function renderKernels () {
    const sel = ui.kernelSelect;
    sel.replaceChildren();
    if (!state.kernels.length) sel.append(el('option', { value: '', text: 'no kernel running' }));
    for (const k of state.kernels) {
      const opt = el('option', { value: k.id, text: `${kernelLabel(k)} (${k.execution_state})` });
      if (k.id === state.kernel) opt.selected = true;
      sel.append(opt);
    }
    const has = !!state.kernel;
    ui.interrupt.disabled = ui.restart.disabled = ui.shutdown.disabled = !has;
  }

  function setExecutionState (s) {
    state.executionState = s;
    ui.kernelState.dataset.state = s;
    ui.kernelState.textContent = s === 'none' ? 'no kernel' : s;
    ui.kernelState.title = state.reason ? `last died: ${state.reason}` : '';
    const k = state.kernels.find((x) => x.id === state.kernel);
    if (k && s !== 'none') {
      k.execution_state = s;
      const opt = [...ui.kernelSelect.options].find((o) => o.value === k.id);
      if (opt) opt.textContent = `${kernelLabel(k)} (${s})`;
    }
  }

  function showReason (reason) {
    if (reason && reason !== state.reason) notice(`The kernel died: ${reason}. It was restarted; its variables are gone, its files are kept.`);
    state.reason = reason || '';
    ui.kernelState.title = state.reason ? `last died: ${state.reason}` : '';
  }

  async function refreshKernels () {
    state.kernels = await api('GET', 'api/kernels');
    const current = state.kernels.find((k) => k.id === state.kernel);
    if (state.kernel && !current) {
      notice('The kernel was shut down.');
      selectKernel(state.kernels[0] ? state.kernels[0].id : null);
    } else if (current) {
      showReason(current.reason);
      // The socket's status messages are live; the list fills in between.
      if (!state.ws || state.ws.readyState !== WebSocket.OPEN) setExecutionState(current.execution_state);
    }
    renderKernels();
  }

  async function startKernel () {
    ui.start.disabled = true;
    setExecutionState('starting');
    try {
      const k = await api('POST', 'api/kernels', { name: ui.specSelect.value || state.defaultSpec });
      state.kernels.push(k);
      selectKernel(k.id);
    } catch (e) {
      notice(`Could not start a kernel: ${e.message}`);
      setExecutionState(state.kernel ? state.executionState : 'none');
    } finally {
      ui.start.disabled = false;
    }
  }

  function selectKernel (id) {
    if (id === state.kernel && state.ws) return;
    closeSocket();
    state.kernel = id;
    state.reason = '';
    state.pending.clear();
    state.outbox = [];
    for (const c of state.cells) setRunning(c, false);
    if (id) sessionStorage.setItem(storeKey('kernel'), id);
    renderKernels();
    const k = state.kernels.find((x) => x.id === id);
    if (k) showReason(k.reason);
    setExecutionState(k ? k.execution_state : 'none');
    state.filesDir = '';
    if (id) connect();
    else setConnection('offline');
    refreshFiles();
  }

  async function kernelAction (what) {
    const id = state.kernel;
    if (!id) return;
    try {
      if (what === 'interrupt') {
        await api('POST', `api/kernels/${id}/interrupt`);
      } else if (what === 'restart') {
        // Until the new process is ready, statuses are the old one's and
        // cells run meanwhile wait in the outbox.
        state.restarting = true;
        setExecutionState('restarting');
        let model;
        try {
          model = await api('POST', `api/kernels/${id}/restart`);
        } finally {
          state.restarting = false;
        }
        abandonPending('Restarted');
        state.reason = '';
        notice('');
        if (state.kernel === id) {
          setExecutionState(model.execution_state);
          flushOutbox();
        }
      } else if (what === 'shutdown') {
        closeSocket();
        await api('DELETE', `api/kernels/${id}`);
        state.kernels = state.kernels.filter((k) => k.id !== id);
        selectKernel(state.kernels[0] ? state.kernels[0].id : null);
      }
    } catch (e) {
      notice(`${what} failed: ${e.message}`);
    }
  }

  // ---- the WebSocket -------------------------------------------------------

  function setConnection (s) {
    ui.connection.dataset.state = s;
    ui.connection.textContent = s === 'reconnecting' ? 'reconnecting…' : s;
  }

  function closeSocket () {
    clearTimeout(state.reconnectTimer);
    const ws = state.ws;
    state.ws = null;
    if (ws) ws.close(1000);
  }

  function connect () {
    const id = state.kernel;
    const url = new URL(`api/kernels/${id}/channels`, base);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('session_id', state.session);
    // A browser cannot set headers on a WebSocket: the token goes in the
    // query, which the gateway never logs.
    url.searchParams.set('token', state.token);
    const ws = new WebSocket(url);
    state.ws = ws;
    setConnection(state.retries ? 'reconnecting' : 'connecting');
    ws.onopen = () => {
      if (state.ws !== ws) return;
      state.retries = 0;
      setConnection('connected');
      flushOutbox();
      // A list fetched before the kernel was ready may have said
      // "starting", and a ready kernel sends no status until it works:
      // its state now, then the socket's live ones.
      api('GET', `api/kernels/${id}`).then((k) => {
        if (state.ws === ws && !state.restarting && state.executionState === 'starting') setExecutionState(k.execution_state);
      }).catch(() => {});
    };
    ws.onmessage = (ev) => {
      if (state.ws !== ws || typeof ev.data !== 'string') return;
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      onMessage(msg);
    };
    ws.onclose = () => {
      if (state.ws !== ws) return; // closed on purpose
      state.ws = null;
      setConnection('reconnecting');
      reconnectLater(id);
    };
  }

  // Retries with backoff; the gateway replays what was published meanwhile.
  function reconnectLater (id) {
    const delay = Math.min(250 * 2 ** state.retries, 4000);
    state.retries++;
    state.reconnectTimer = setTimeout(async () => {
      if (state.kernel !== id) return;
      if (state.retries > 3) {
        try {
          await api('GET', `api/kernels/${id}`);
        } catch (e) {
          if (e.status === 404) {
            state.retries = 0;
            await refreshKernels().catch(() => {});
            return;
          }
        }
      }
      if (state.kernel === id && !state.ws) connect();
    }, delay);
  }

  function send (channel, msgType, content, parent) {
    const msg = {
      header: {
        msg_id: uuid(),
        msg_type: msgType,
        username: 'glovebox-page',
        session: state.session,
        date: new Date().toISOString(),
        version: '5.3'
      },
      parent_header: parent || {},
      metadata: {},
      content,
      channel,
      buffers: []
    };
    state.outbox.push(msg);
    flushOutbox();
    return msg.header.msg_id;
  }

  function flushOutbox () {
    if (state.restarting || !state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    const out = state.outbox;
    state.outbox = [];
    for (const m of out) state.ws.send(JSON.stringify(m));
  }

  function onMessage (msg) {
    const type = msg.header && msg.header.msg_type;
    const parentId = msg.parent_header && msg.parent_header.msg_id;
    const cell = parentId ? state.pending.get(parentId) : undefined;
    const c = msg.content || {};
    switch (type) {
      case 'status':
        if (!state.restarting) setExecutionState(c.execution_state);
        if (c.execution_state === 'idle' && cell) {
          // Some kernels (tslab) go idle before their reply: the reply
          // still finds the cell, for its count.
          if (cell.count.textContent === '[*]') cell.replyDue = parentId;
          else state.pending.delete(parentId);
          setRunning(cell, false);
          refreshFiles();
        } else if (['dead', 'restarting', 'starting'].includes(c.execution_state)) {
          // The gateway has already answered the executions the old
          // process had (an error each); no more output comes for them.
          abandonPending(`Kernel ${c.execution_state}`);
          refreshKernels().catch(() => {});
        }
        break;
      case 'execute_input':
        if (cell) cell.count.textContent = `[${c.execution_count}]`;
        break;
      case 'stream':
        if (cell) addStream(cell, c.name, c.text || '');
        break;
      case 'execute_result':
      case 'display_data':
        if (cell) addDisplay(cell, c);
        break;
      case 'update_display_data':
        updateDisplay(c);
        break;
      case 'error':
        if (cell) addError(cell, c);
        break;
      case 'clear_output':
        if (cell) clearOutputs(cell, c.wait);
        break;
      case 'input_request':
        if (cell) askInput(cell, c, msg.header);
        break;
      case 'execute_reply':
        if (cell) {
          if (c.execution_count != null) cell.count.textContent = `[${c.execution_count}]`;
          if (cell.replyDue === parentId) state.pending.delete(parentId);
          // Errors the gateway makes (a kernel that died) come only here.
          if (c.status === 'error' && !cell.hadError && c.ename) addError(cell, c);
        }
        break;
    }
  }

  // The cells still waiting when the kernel restarts or dies will get no
  // more output.
  function abandonPending (why) {
    for (const [id, cell] of state.pending) {
      setRunning(cell, false);
      if (cell.count.textContent === '[*]') cell.count.textContent = '[ ]';
      cell.outputs.title = why;
      state.pending.delete(id);
    }
  }

  // ---- cells ---------------------------------------------------------------

  function saveCells () {
    localStorage.setItem(storeKey('cells'), JSON.stringify(state.cells.map((c) => c.input.value)));
  }

  function autosize (ta) {
    ta.style.height = 'auto';
    ta.style.height = `${ta.scrollHeight}px`;
  }

  function addCell (source, after) {
    const cell = {};
    cell.input = el('textarea', {
      class: 'source',
      spellcheck: 'false',
      autocapitalize: 'off',
      autocomplete: 'off',
      rows: '1',
      'aria-label': 'Code',
      placeholder: 'Python code — Shift+Enter to run'
    });
    cell.input.value = source || '';
    cell.count = el('span', { class: 'count', text: '[ ]' });
    cell.outputs = el('div', { class: 'outputs', 'aria-live': 'polite' });
    const run = el('button', { type: 'button', class: 'run', title: 'Run (Shift+Enter)', 'aria-label': 'Run cell', text: '▶' });
    const del = el('button', { type: 'button', class: 'delete', title: 'Delete cell', 'aria-label': 'Delete cell', text: '✕' });
    cell.el = el('div', { class: 'cell' },
      el('div', { class: 'prompt' }, cell.count),
      el('div', { class: 'cell-body' },
        el('div', { class: 'editor-row' }, cell.input, el('div', { class: 'cell-actions' }, run, del)),
        cell.outputs));
    run.addEventListener('click', () => runCell(cell));
    del.addEventListener('click', () => deleteCell(cell));
    cell.input.addEventListener('keydown', (ev) => onKey(cell, ev));
    cell.input.addEventListener('input', () => { autosize(cell.input); saveCells(); });
    const at = after ? state.cells.indexOf(after) + 1 : state.cells.length;
    state.cells.splice(at, 0, cell);
    if (after) after.el.after(cell.el);
    else ui.cells.append(cell.el);
    autosize(cell.input);
    saveCells();
    return cell;
  }

  function deleteCell (cell) {
    const i = state.cells.indexOf(cell);
    state.cells.splice(i, 1);
    cell.el.remove();
    if (!state.cells.length) addCell('');
    const next = state.cells[Math.min(i, state.cells.length - 1)];
    next.input.focus();
    saveCells();
  }

  // Tab indents (the selected lines, or at the caret), Shift+Tab dedents,
  // Shift+Enter runs and moves on, Ctrl/Cmd+Enter runs in place, Esc leaves
  // the editor (so Tab can move focus again).
  function onKey (cell, ev) {
    const ta = cell.input;
    if (ev.key === 'Enter' && ev.shiftKey) {
      ev.preventDefault();
      runCell(cell);
      const i = state.cells.indexOf(cell);
      const next = state.cells[i + 1] || addCell('', cell);
      next.input.focus();
      next.el.scrollIntoView({ block: 'nearest' });
    } else if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      runCell(cell);
    } else if (ev.key === 'Tab') {
      ev.preventDefault();
      indent(ta, ev.shiftKey);
    } else if (ev.key === 'Escape') {
      ta.blur();
    }
  }

  function indent (ta, out) {
    const { selectionStart: s, selectionEnd: e, value } = ta;
    const lineStart = value.lastIndexOf('\n', s - 1) + 1;
    if (s === e && !out) {
      ta.setRangeText('    ', s, e, 'end');
    } else {
      // Every line the selection (or the caret) touches.
      const lines = value.slice(lineStart, e).split('\n');
      const changed = lines.map((l) => out ? l.replace(/^ {1,4}/, '') : `    ${l}`);
      const text = changed.join('\n');
      ta.setRangeText(text, lineStart, e, s === e ? 'end' : 'select');
      if (s === e) {
        const caret = Math.max(lineStart, s - (lines[0].length - changed[0].length));
        ta.setSelectionRange(caret, caret);
      }
    }
    ta.dispatchEvent(new Event('input'));
  }

  function setRunning (cell, running) {
    cell.el.classList.toggle('running', running);
  }

  function runCell (cell) {
    const code = cell.input.value;
    if (!state.kernel) {
      notice('Start a kernel first.');
      return;
    }
    clearOutputs(cell, false);
    cell.hadError = false;
    cell.count.textContent = '[*]';
    setRunning(cell, true);
    const id = send('shell', 'execute_request', {
      code,
      silent: false,
      store_history: true,
      user_expressions: {},
      allow_stdin: true,
      stop_on_error: true
    });
    state.pending.set(id, cell);
  }

  // ---- outputs -------------------------------------------------------------

  function clearOutputs (cell, wait) {
    if (wait) {
      cell.clearOnNext = true;
      return;
    }
    cell.clearOnNext = false;
    cell.outputs.replaceChildren();
    cell.stream = null;
    cell.textShown = 0;
  }

  function output (cell, node) {
    if (cell.clearOnNext) clearOutputs(cell, false);
    cell.outputs.append(node);
    return node;
  }

  function addStream (cell, name, text) {
    if (cell.clearOnNext) clearOutputs(cell, false);
    if (cell.textShown >= MAX_TEXT) return;
    if (cell.textShown + text.length > MAX_TEXT) {
      text = text.slice(0, MAX_TEXT - cell.textShown);
      cell.textShown = MAX_TEXT;
      appendText(cell, name, text);
      output(cell, el('div', { class: 'output truncated', text: 'More output was cut here (the page shows 1 MiB per cell).' }));
      return;
    }
    cell.textShown += text.length;
    appendText(cell, name, text);
  }

  // Consecutive output of one stream goes to one block; a carriage return
  // rewrites its line, as in a terminal (progress bars).
  function appendText (cell, name, text) {
    let block = cell.stream;
    if (!block || block.name !== name || !block.pre.isConnected) {
      const pre = el('pre');
      output(cell, el('div', { class: `output stream ${name}` }, pre));
      block = cell.stream = { name, pre, text: '' };
    }
    if (text.includes('\r') || block.text.endsWith('\r')) {
      block.text = carriageReturns(block.text + text);
      block.pre.replaceChildren(ansi(block.text));
    } else {
      block.text += text;
      block.pre.append(ansi(text));
    }
  }

  function carriageReturns (text) {
    return text.replace(/\r\n/g, '\n').split('\n').map((line) => {
      const parts = line.split('\r');
      let out = '';
      for (const p of parts) out = p + out.slice(p.length);
      return line.endsWith('\r') ? `${out}\r` : out;
    }).join('\n');
  }

  function addError (cell, c) {
    cell.hadError = true;
    const tb = Array.isArray(c.traceback) && c.traceback.length ? c.traceback.join('\n')
      : `${c.ename}: ${c.evalue}`;
    output(cell, el('div', { class: 'output error' }, el('pre', {}, ansi(tb))));
  }

  function addDisplay (cell, c) {
    const node = el('div', { class: 'output display' });
    node.append(mimeElement(c.data || {}, c.metadata || {}));
    output(cell, node);
    const displayId = c.transient && c.transient.display_id;
    if (displayId) {
      if (!state.displays.has(displayId)) state.displays.set(displayId, new Set());
      state.displays.get(displayId).add(node);
    }
  }

  function updateDisplay (c) {
    const displayId = c.transient && c.transient.display_id;
    const nodes = displayId && state.displays.get(displayId);
    if (!nodes) return;
    for (const node of nodes) {
      if (!node.isConnected) nodes.delete(node);
      else node.replaceChildren(mimeElement(c.data || {}, c.metadata || {}));
    }
  }

  const MIME_ORDER = ['text/html', 'text/markdown', 'image/svg+xml', 'image/png', 'image/jpeg',
    'application/json', 'text/plain'];

  function mimeElement (data, metadata) {
    const type = MIME_ORDER.find((t) => t in data) || Object.keys(data).find((t) => t.startsWith('text/'));
    if (!type) return el('pre', { class: 'hint', text: `(no way to show ${Object.keys(data).join(', ') || 'empty output'})` });
    const value = data[type];
    const meta = metadata[type] || {};
    switch (type) {
      case 'text/html':
        return htmlFrame(joined(value));
      case 'text/markdown':
        return markdown(joined(value));
      case 'image/svg+xml':
        return image(`data:image/svg+xml;charset=utf-8,${encodeURIComponent(joined(value))}`, meta, 'svg');
      case 'image/png':
      case 'image/jpeg':
        return image(`data:${type};base64,${joined(value).replace(/\s+/g, '')}`, meta, '');
      case 'application/json':
        return el('div', { class: 'json' }, el('pre', { text: JSON.stringify(value, null, 2) }));
      default:
        return el('pre', {}, ansi(joined(value)));
    }
  }

  function joined (v) {
    return Array.isArray(v) ? v.join('') : String(v);
  }

  function image (src, meta, cls) {
    const img = el('img', { src, alt: 'output image', class: cls });
    if (meta.width) img.width = meta.width;
    if (meta.height) img.height = meta.height;
    return img;
  }

  // A kernel's HTML runs in frame.html: an opaque origin (sandboxed by the
  // iframe attribute and by that file's own CSP), so it can reach neither
  // this page nor the token.
  function htmlFrame (html) {
    const frame = el('iframe', { sandbox: 'allow-scripts', src: 'static/frame.html', title: 'HTML output', loading: 'eager' });
    frame.gloveboxHtml = html;
    return frame;
  }

  // Messages from the frames: "ready" (send the HTML) and their height.
  window.addEventListener('message', (ev) => {
    const frame = [...ui.cells.querySelectorAll('iframe')].find((f) => f.contentWindow === ev.source);
    if (!frame || !ev.data) return;
    if (ev.data.type === 'ready') {
      ev.source.postMessage({ type: 'render', html: frame.gloveboxHtml }, '*');
    } else if (ev.data.type === 'height') {
      frame.style.height = `${Math.min(Math.max(Number(ev.data.height) || 0, 20), 4000)}px`;
    }
  });

  function askInput (cell, c, header) {
    const input = el('input', { type: c.password ? 'password' : 'text', 'aria-label': c.prompt || 'input' });
    const row = el('div', { class: 'output stdin' }, el('span', { text: c.prompt || '' }), input);
    output(cell, row);
    cell.stream = null;
    input.addEventListener('keydown', (ev) => {
      if (ev.key !== 'Enter') return;
      ev.preventDefault();
      const value = input.value;
      send('stdin', 'input_reply', { value }, header);
      input.replaceWith(el('span', { text: c.password ? '••••••' : value }));
    });
    input.focus();
  }

  // ---- ANSI escapes: colours and bold become classes; every other escape
  // sequence is dropped, never shown. ---------------------------------------

  const ESCAPES = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;
  const BASIC = [0, 1, 2, 3, 4, 5, 6, 7];

  function ansi (text) {
    const frag = document.createDocumentFragment();
    let fg = null; let bg = null; let bold = false; let last = 0;
    const flush = (s) => {
      if (!s) return;
      if (fg === null && bg === null && !bold) { frag.append(s); return; }
      const span = el('span', { text: s });
      if (bold) span.classList.add('ansi-bold');
      if (typeof fg === 'number') span.classList.add(`ansi-fg-${fg}`);
      else if (fg) span.style.color = fg;
      if (typeof bg === 'number') span.classList.add(`ansi-bg-${bg}`);
      frag.append(span);
    };
    for (const m of text.matchAll(ESCAPES)) {
      flush(text.slice(last, m.index));
      last = m.index + m[0].length;
      if (m[2] !== 'm') continue;
      const codes = (m[1] || '0').split(';').map((x) => Number(x) || 0);
      for (let i = 0; i < codes.length; i++) {
        const n = codes[i];
        if (n === 0) { fg = bg = null; bold = false; } else if (n === 1) bold = true;
        else if (n === 22) bold = false;
        else if (n >= 30 && n <= 37) fg = BASIC[n - 30];
        else if (n >= 90 && n <= 97) fg = BASIC[n - 90];
        else if (n === 39) fg = null;
        else if (n >= 40 && n <= 47) bg = n - 40;
        else if (n === 49) bg = null;
        else if ((n === 38 || n === 48) && codes[i + 1] === 5) {
          if (n === 38) fg = xterm256(codes[i + 2]);
          i += 2;
        } else if ((n === 38 || n === 48) && codes[i + 1] === 2) {
          if (n === 38) fg = `rgb(${codes[i + 2]}, ${codes[i + 3]}, ${codes[i + 4]})`;
          i += 4;
        }
      }
    }
    flush(text.slice(last));
    return frag;
  }

  function xterm256 (n) {
    if (n < 16) return BASIC[n % 8];
    if (n >= 232) {
      const v = 8 + (n - 232) * 10;
      return `rgb(${v}, ${v}, ${v})`;
    }
    const c = n - 16;
    const level = (x) => (x ? 55 + x * 40 : 0);
    return `rgb(${level(Math.floor(c / 36))}, ${level(Math.floor(c / 6) % 6)}, ${level(c % 6)})`;
  }

  // ---- Markdown, built as DOM nodes (no markup from the kernel reaches
  // innerHTML): headings, paragraphs, lists, quotes, fenced code, inline
  // code, bold, italics, links (http, https, mailto). ------------------------

  function markdown (src) {
    const root = el('div', { class: 'markdown' });
    const lines = src.replace(/\r\n/g, '\n').split('\n');
    let para = []; let list = null;
    const endPara = () => {
      if (para.length) root.append(inline(el('p'), para.join(' ')));
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if (/^```/.test(line)) {
        endPara(); list = null;
        const code = [];
        for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
        root.append(el('pre', {}, el('code', { text: code.join('\n') })));
      } else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
        endPara(); list = null;
        root.append(inline(el(`h${m[1].length}`), m[2]));
      } else if ((m = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line))) {
        endPara();
        const tag = m[1] ? 'ol' : 'ul';
        if (!list || list.tagName.toLowerCase() !== tag) {
          list = el(tag);
          root.append(list);
        }
        list.append(inline(el('li'), m[2]));
      } else if ((m = /^>\s?(.*)$/.exec(line))) {
        endPara(); list = null;
        root.append(inline(el('blockquote'), m[1]));
      } else if (!line.trim()) {
        endPara(); list = null;
      } else {
        list = null;
        para.push(line.trim());
      }
    }
    endPara();
    return root;
  }

  const INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*]+)\*|_([^_]+)_|\[([^\]]+)\]\(([^)\s]+)\)/g;

  function inline (parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      parent.append(text.slice(last, m.index));
      last = m.index + m[0].length;
      if (m[1]) parent.append(el('code', { text: m[1] }));
      else if (m[2] || m[3]) parent.append(inline(el('strong'), m[2] || m[3]));
      else if (m[4] || m[5]) parent.append(inline(el('em'), m[4] || m[5]));
      else if (/^(https?:|mailto:)/i.test(m[7])) parent.append(el('a', { href: m[7], target: '_blank', rel: 'noopener noreferrer', text: m[6] }));
      else parent.append(m[6]);
    }
    parent.append(text.slice(last));
    return parent;
  }

  // ---- files -----------------------------------------------------------------

  function filesUrl (path) {
    return `api/kernels/${state.kernel}/files/${path.split('/').map(encodeURIComponent).join('/')}`;
  }

  function joinPath (dir, name) {
    return dir ? `${dir}/${name}` : name;
  }

  function humanSize (n) {
    if (n < 1024) return `${n} B`;
    const units = ['KiB', 'MiB', 'GiB'];
    let v = n; let u = -1;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`;
  }

  let filesSeq = 0;
  async function refreshFiles () {
    const seq = ++filesSeq;
    ui.filesPath.textContent = `/home/user${state.filesDir ? `/${state.filesDir}` : ''}`;
    if (!state.kernel) {
      ui.fileList.replaceChildren(el('li', { class: 'empty', text: 'No kernel: no sandbox.' }));
      return;
    }
    let listing;
    try {
      listing = await api('GET', filesUrl(state.filesDir));
    } catch (e) {
      if (seq === filesSeq) ui.fileList.replaceChildren(el('li', { class: 'empty', text: e.message }));
      return;
    }
    if (seq !== filesSeq) return;
    const rows = [];
    if (state.filesDir) {
      rows.push(el('li', { class: 'dir' }, el('button', {
        type: 'button',
        class: 'name',
        text: '..',
        onclick: () => { state.filesDir = state.filesDir.split('/').slice(0, -1).join('/'); refreshFiles(); }
      })));
    }
    // Dot files (.cache, .ipython) are there but not shown, as in Jupyter.
    for (const f of (listing.entries || []).filter((e) => !e.name.startsWith('.'))) {
      const isDir = f.type === 'FILE_TYPE_DIRECTORY';
      const path = joinPath(state.filesDir, f.name);
      const name = el('button', {
        type: 'button',
        class: 'name',
        title: isDir ? `Open ${f.name}` : `Download ${f.name}`,
        text: isDir ? `${f.name}/` : f.name,
        onclick: () => isDir ? (state.filesDir = path, refreshFiles()) : download(path, f.name)
      });
      const remove = el('button', {
        type: 'button',
        class: 'remove',
        title: `Delete ${f.name}`,
        'aria-label': `Delete ${f.name}`,
        text: '✕',
        onclick: () => removeFile(path, f.name)
      });
      rows.push(el('li', { class: isDir ? 'dir' : 'file' }, name,
        isDir ? null : el('span', { class: 'size', text: humanSize(f.size) }), remove));
    }
    if (!rows.length) rows.push(el('li', { class: 'empty', text: 'empty' }));
    ui.fileList.replaceChildren(...rows);
  }

  async function download (path, name) {
    try {
      const res = await api('GET', filesUrl(path));
      const url = URL.createObjectURL(await res.blob());
      const a = el('a', { href: url, download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      notice(`Download failed: ${e.message}`);
    }
  }

  async function removeFile (path, name) {
    if (!confirm(`Delete ${name}?`)) return;
    try {
      await api('DELETE', filesUrl(path));
    } catch (e) {
      notice(`Delete failed: ${e.message}`);
    }
    refreshFiles();
  }

  async function upload (files) {
    if (!state.kernel) {
      notice('Start a kernel first: files live in its sandbox.');
      return;
    }
    for (const f of files) {
      ui.uploadStatus.textContent = `Uploading ${f.name}…`;
      try {
        await api('PUT', filesUrl(joinPath(state.filesDir, f.name)), f);
        ui.uploadStatus.textContent = `Uploaded ${f.name} (${humanSize(f.size)}).`;
      } catch (e) {
        ui.uploadStatus.textContent = '';
        notice(`Upload of ${f.name} failed: ${e.message}`);
      }
    }
    refreshFiles();
  }

  ui.uploadInput.addEventListener('change', () => {
    upload([...ui.uploadInput.files]);
    ui.uploadInput.value = '';
  });
  ui.files.addEventListener('dragover', (ev) => {
    if (!ev.dataTransfer || ![...ev.dataTransfer.types].includes('Files')) return;
    ev.preventDefault();
    ev.dataTransfer.dropEffect = 'copy';
    ui.files.classList.add('dragging');
  });
  ui.files.addEventListener('dragleave', (ev) => {
    if (!ui.files.contains(ev.relatedTarget)) ui.files.classList.remove('dragging');
  });
  ui.files.addEventListener('drop', (ev) => {
    ev.preventDefault();
    ui.files.classList.remove('dragging');
    if (ev.dataTransfer && ev.dataTransfer.files.length) upload([...ev.dataTransfer.files]);
  });

  // ---- start -----------------------------------------------------------------

  ui.start.addEventListener('click', startKernel);
  ui.interrupt.addEventListener('click', () => kernelAction('interrupt'));
  ui.restart.addEventListener('click', () => kernelAction('restart'));
  ui.shutdown.addEventListener('click', () => kernelAction('shutdown'));
  ui.kernelSelect.addEventListener('change', () => selectKernel(ui.kernelSelect.value || null));
  $('files-refresh').addEventListener('click', refreshFiles);
  $('add-cell').addEventListener('click', () => addCell('').input.focus());
  $('run-all').addEventListener('click', () => state.cells.forEach(runCell));

  // The kernel types, each with its language; asked again whenever the
  // list is opened, so that a kernelspec installed since shows up.
  async function loadSpecs () {
    const specs = await api('GET', 'api/kernelspecs');
    const chosen = ui.specSelect.value;
    state.defaultSpec = specs.default;
    state.specs = Object.values(specs.kernelspecs || {})
      .sort((a, b) => (a.name === specs.default ? -1 : b.name === specs.default ? 1 : a.name.localeCompare(b.name)));
    ui.specSelect.replaceChildren(...state.specs.map((s) => {
      const name = (s.spec && s.spec.display_name) || s.name;
      const language = s.spec && s.spec.language;
      return el('option', {
        value: s.name,
        text: language && !name.toLowerCase().includes(language.toLowerCase()) ? `${name} (${language})` : name
      });
    }));
    ui.specSelect.value = state.specs.some((s) => s.name === chosen) ? chosen : state.defaultSpec;
  }
  ui.specSelect.addEventListener('focus', () => { loadSpecs().catch(() => {}); });

  let polling = null;
  async function boot () {
    try {
      await loadSpecs();
      state.kernels = await api('GET', 'api/kernels');
    } catch (e) {
      if (e.status !== 401) notice(`Cannot reach the gateway: ${e.message}`);
      return;
    }
    const remembered = sessionStorage.getItem(storeKey('kernel'));
    const pick = state.kernels.find((k) => k.id === remembered) || state.kernels[0];
    if (pick) selectKernel(pick.id);
    else await startKernel(); // a first visit: a kernel of the default kind
    if (!polling) {
      polling = setInterval(() => {
        if (!document.hidden && state.token) refreshKernels().catch(() => {});
      }, 4000);
    }
  }

  function init () {
    let saved = [];
    try { saved = JSON.parse(localStorage.getItem(storeKey('cells')) || '[]'); } catch (e) { /* none */ }
    if (!Array.isArray(saved) || !saved.length) saved = [''];
    for (const s of saved) addCell(String(s));
    state.cells[0].input.focus();
    renderKernels();
    refreshFiles();
    const fromUrl = takeTokenFromUrl();
    if (fromUrl) localStorage.setItem(storeKey('token'), fromUrl);
    state.token = fromUrl || localStorage.getItem(storeKey('token'));
    if (!state.token) signIn('Enter the token glovebox printed when it started (the ?token= of its URL).', false);
    else boot();
  }

  init();
})();
