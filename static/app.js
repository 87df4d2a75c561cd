// Glovebox's page: notebooks, kernels and files over the gateway's own API
// (REST with the token in a header, the kernel WebSocket in the JSON
// format). Plain JavaScript modules, no build step. Kernel output is never
// put into this page as markup: text is text, images are <img> from data:
// URLs, Markdown is built from DOM nodes, HTML goes to a sandboxed frame.
import { el, ansi, markdown, mimeElement, joined, carriageReturns } from './render.js';
import { highlight } from './highlight.js';
import { parseIpynb, toIpynb, boundedOutputs, newCellId } from './notebook.js';

{
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
    tokenInput: $('token-input'),
    bar: $('bar'),
    notebookName: $('notebook-name'),
    notebookSelect: $('notebook-select'),
    openInput: $('open-input'),
    notebook: $('notebook'),
    noticeAction: $('notice-action'),
    confirmDialog: $('confirm-dialog')
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
    session: null,
    pending: new Map(), // execute msg_id -> cell
    requests: new Map(), // complete/inspect msg_id -> resolve
    displays: new Map(), // display_id -> Set of output elements
    cells: [],
    active: null, // the selected cell
    mode: 'command', // or 'edit', as in Jupyter
    deleted: [], // [{cell, index}] for undo
    filesDir: '', // below /home/user
    // The notebook: its name (in the URL), its revision in this browser's
    // storage, this tab's id (so two tabs on one notebook know each other).
    name: null,
    rev: 0,
    tab: uuid(),
    dirty: new Set(), // ids of cells this tab changed since it last saved
    removed: new Set(), // ids of cells this tab deleted since it last saved
    metadata: {},
    language: 'python'
  };

  function uuid () {
    return crypto.randomUUID ? crypto.randomUUID().replace(/-/g, '')
      : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
  }


  // One line of news at the top; `action` is an optional [label, fn] button.
  function notice (text, action) {
    ui.noticeText.textContent = text;
    ui.notice.hidden = !text;
    ui.noticeAction.hidden = !action;
    if (action) {
      ui.noticeAction.textContent = action[0];
      ui.noticeAction.onclick = () => { notice(''); action[1](); };
    }
  }
  $('notice-close').addEventListener('click', () => notice(''));

  // Asks before something is lost, naming what: resolves true to go on.
  function confirmDialog (title, message, action) {
    return new Promise((resolve) => {
      const d = ui.confirmDialog;
      $('confirm-title').textContent = title;
      $('confirm-message').textContent = message;
      $('confirm-ok').textContent = action;
      d.returnValue = '';
      d.onclose = () => resolve(d.returnValue === 'ok');
      d.showModal();
      $('confirm-cancel').focus();
    });
  }

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
    if (!state.kernel) sel.append(el('option', { value: '', text: state.kernels.length ? 'no kernel: pick one' : 'no kernel running' }));
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
      // Never another kernel by itself: it may be someone else's (an
      // agent's, another notebook's).
      notice('This notebook\'s kernel was shut down. Start a new one, or pick a running one.', ['New kernel', startKernel]);
      selectKernel(null);
    } else if (current) {
      showReason(current.reason);
      // The socket's status messages are live; the list fills in between.
      if (!state.ws || state.ws.readyState !== WebSocket.OPEN) setExecutionState(current.execution_state);
    }
    renderKernels();
  }

  // Starts a kernel for this notebook. The pill shows "starting" only when
  // there is no kernel yet: a failed start leaves the current one's state
  // as it was.
  async function startKernel (name) {
    ui.start.disabled = true;
    const before = state.executionState;
    if (!state.kernel) setExecutionState('starting');
    ui.start.textContent = 'Starting…';
    try {
      const k = await api('POST', 'api/kernels', { name: (typeof name === 'string' && name) || ui.specSelect.value || state.defaultSpec });
      state.kernels.push(k);
      selectKernel(k.id);
    } catch (e) {
      notice(`Could not start a kernel: ${e.message}`);
      setExecutionState(state.kernel ? before : 'none');
    } finally {
      ui.start.disabled = false;
      ui.start.textContent = 'New kernel';
    }
  }

  function selectKernel (id) {
    if (id === state.kernel && state.ws) return;
    closeSocket();
    state.kernel = id;
    state.reason = '';
    abandonPending('Kernel changed');
    state.outbox = [];
    state.session = sessionFor(id);
    // Cells that were running when this tab reloaded: their replies come
    // to this session, and the gateway replays the outputs between.
    for (const [msgId, cellId] of Object.entries(state.resumed || {})) {
      const c = state.cells.find((x) => x.id === cellId);
      if (!c) continue;
      Object.assign(c, { idle: false, replied: null, started: null, sent: null });
      setCount(c, '*');
      setRunning(c, true);
      state.pending.set(msgId, c);
    }
    state.resumed = null;
    renderKernels();
    const k = state.kernels.find((x) => x.id === id);
    if (k) {
      const spec = state.specs.find((s) => s.name === k.name);
      state.language = (spec && spec.spec && spec.spec.language) || state.language;
      for (const c of state.cells) drawSource(c);
    }
    if (state.metadata.glovebox_kernel !== (id || undefined)) {
      if (id) state.metadata.glovebox_kernel = id;
      else delete state.metadata.glovebox_kernel;
      if (k) state.metadata.kernelspec = { name: k.name, display_name: displayName(k.name), language: state.language };
      saveNotebook();
    }
    updateUrl();
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
        const k = state.kernels.find((x) => x.id === id);
        const ran = state.cells.filter((c) => c.count !== null).length;
        if (!await confirmDialog('Restart the kernel?',
          `Restarting ${k ? kernelLabel(k) : id} loses every variable, import and function defined in it` +
          `${ran ? ` (by the ${ran} cell${ran > 1 ? 's' : ''} run so far)` : ''}. The files in /home/user stay.`, 'Restart')) return false;
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
        const k = state.kernels.find((x) => x.id === id);
        let files = [];
        try {
          files = ((await api('GET', filesUrl('', id))).entries || []).filter((f) => !f.name.startsWith('.')).map((f) => f.name);
        } catch (e) { /* unknown: said as such below */ }
        const shown = files.slice(0, 5).join(', ') + (files.length > 5 ? ` and ${files.length - 5} more` : '');
        if (!await confirmDialog('Shut the kernel down?',
          `Shutting down ${k ? kernelLabel(k) : id} loses its variables and deletes its sandbox: ` +
          (files.length ? `${files.length} file${files.length > 1 ? 's' : ''} in /home/user (${shown}) are lost. ` : 'its /home/user (now empty) is deleted. ') +
          'Download what you need first.', 'Shut down')) return false;
        closeSocket();
        await api('DELETE', `api/kernels/${id}`);
        state.kernels = state.kernels.filter((x) => x.id !== id);
        selectKernel(null);
      }
    } catch (e) {
      notice(`${what} failed: ${e.message}`);
      return false;
    }
    return true;
  }

  function displayName (specName) {
    const s = state.specs.find((x) => x.name === specName);
    return (s && s.spec && s.spec.display_name) || specName;
  }

  // This tab's client session on a kernel: kept across a reload (so the
  // gateway replays what the kernel published meanwhile, and replies to
  // cells still running reach them), but not shared with a duplicated tab:
  // it is taken out of sessionStorage while the page lives and put back
  // when it goes.
  function sessionFor (kernel) {
    if (!kernel) return uuid();
    let saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(storeKey('session')) || 'null'); } catch (e) { /* none */ }
    sessionStorage.removeItem(storeKey('session'));
    if (saved && saved.kernel === kernel && saved.notebook === state.name && typeof saved.session === 'string') {
      state.resumed = saved.running || {};
      return saved.session;
    }
    return uuid();
  }

  window.addEventListener('pagehide', () => {
    saveNotebook(true);
    if (!state.kernel) return;
    const running = {};
    for (const [id, cell] of state.pending) running[id] = cell.id;
    sessionStorage.setItem(storeKey('session'), JSON.stringify({ kernel: state.kernel, session: state.session, notebook: state.name, running }));
  });

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
      // The kernel's answer brings a fresh "busy" then "idle": the pill
      // shows the kernel's state now, not the list's from a moment ago.
      request('kernel_info_request', {}).then((info) => {
        const lang = info && info.language_info;
        if (!lang || !lang.name || state.ws !== ws) return;
        if (lang.name !== state.language) {
          state.language = lang.name;
          for (const c of state.cells) drawSource(c);
        }
        if (JSON.stringify(state.metadata.language_info) !== JSON.stringify(lang)) {
          state.metadata.language_info = lang;
          saveNotebook();
        }
      });
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
    const c = msg.content || {};
    if (parentId && state.requests.has(parentId) && type.endsWith('_reply')) {
      state.requests.get(parentId)(c);
      state.requests.delete(parentId);
      return;
    }
    const cell = parentId ? state.pending.get(parentId) : undefined;
    switch (type) {
      case 'status':
        if (!state.restarting) setExecutionState(c.execution_state);
        if (c.execution_state === 'busy' && cell && !cell.started) {
          cell.started = msg.header.date || new Date().toISOString();
        } else if (c.execution_state === 'idle' && cell) {
          cell.idle = true;
          if (cell.replied) finishCell(parentId, cell);
        } else if (['dead', 'restarting', 'starting'].includes(c.execution_state)) {
          // The gateway has already answered the executions the old
          // process had (an error each); no more output comes for them.
          abandonPending(`Kernel ${c.execution_state}`);
          refreshKernels().catch(() => {});
        }
        break;
      case 'execute_input':
        if (cell) setCount(cell, c.execution_count);
        break;
      case 'stream':
        if (cell) addOutput(cell, { output_type: 'stream', name: c.name === 'stderr' ? 'stderr' : 'stdout', text: c.text || '' });
        break;
      case 'execute_result':
      case 'display_data':
        if (cell) {
          addOutput(cell, {
            output_type: type,
            data: c.data || {},
            metadata: c.metadata || {},
            ...(type === 'execute_result' ? { execution_count: c.execution_count ?? null } : {})
          }, c.transient && c.transient.display_id);
        }
        break;
      case 'update_display_data':
        updateDisplay(c);
        break;
      case 'error':
        if (cell) addOutput(cell, { output_type: 'error', ename: c.ename || '', evalue: c.evalue || '', traceback: c.traceback || [] });
        break;
      case 'clear_output':
        if (cell) clearOutputs(cell, c.wait);
        break;
      case 'input_request':
        if (cell) askInput(cell, c, msg.header);
        break;
      case 'execute_reply':
        if (cell) {
          if (c.execution_count != null) setCount(cell, c.execution_count);
          cell.replied = c;
          cell.ended = msg.header.date || new Date().toISOString();
          // The reply may come before the iopub messages it answers (other
          // channel): the cell is done when both it and "idle" are in.
          // Replies the gateway makes (a kernel that died) come alone.
          if (cell.idle) finishCell(parentId, cell);
          else setTimeout(() => { if (state.pending.get(parentId) === cell) finishCell(parentId, cell); }, 2000);
        }
        break;
    }
  }

  // A cell's execution is over: its reply and its "idle" are both in, so
  // every output it had has been drawn. An error the reply carries shows
  // only when no iopub error did (one traceback per error); an aborted
  // cell (an earlier one failed) is shown as not run.
  function finishCell (msgId, cell) {
    state.pending.delete(msgId);
    setRunning(cell, false);
    const r = cell.replied || {};
    if (r.status === 'aborted') {
      setCount(cell, null);
      cell.el.classList.add('aborted');
      cell.timing.textContent = 'not run';
      cell.timing.title = 'Not run: an earlier cell failed (stop on error)';
    } else {
      if (r.status === 'error' && r.ename && !cell.outputsData.some((o) => o.output_type === 'error')) {
        addOutput(cell, { output_type: 'error', ename: r.ename, evalue: r.evalue || '', traceback: r.traceback || [] });
      }
      showTiming(cell);
    }
    refreshFiles();
    saveNotebook();
  }

  // The run time, from the kernel's "busy" to its reply, kept in the cell's
  // metadata as JupyterLab does.
  function showTiming (cell) {
    const times = cell.metadata.execution || {};
    const start = Date.parse(cell.started || cell.sent || times['iopub.status.busy']);
    const end = Date.parse(cell.ended || times['shell.execute_reply']);
    if (!(end >= start)) return;
    const s = (end - start) / 1000;
    cell.timing.textContent = s < 10 ? `${s.toFixed(s < 1 ? 2 : 1)} s` : s < 120 ? `${Math.round(s)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    cell.timing.title = `Ran in ${s.toFixed(3)} s, finished ${new Date(end).toLocaleTimeString()}`;
    cell.metadata.execution = { 'iopub.status.busy': new Date(start).toISOString(), 'shell.execute_reply': new Date(end).toISOString() };
  }

  // The cells still waiting when the kernel restarts or dies will get no
  // more output (the gateway's error reply, if it came, is drawn).
  function abandonPending (why) {
    for (const [id, cell] of state.pending) {
      if (cell.replied) {
        finishCell(id, cell);
        continue;
      }
      state.pending.delete(id);
      setRunning(cell, false);
      if (cell.count === '*') setCount(cell, null);
      cell.timing.textContent = why.toLowerCase();
    }
  }

  // ---- cells ---------------------------------------------------------------

  function setCount (cell, n) {
    cell.count = n;
    cell.countEl.textContent = n === '*' ? '[*]' : n == null ? '[ ]' : `[${n}]`;
  }

  function autosize (ta) {
    ta.style.height = 'auto';
    ta.style.height = `${ta.scrollHeight}px`;
  }

  // The <pre> under the textarea shows the same text, coloured.
  function drawSource (cell) {
    const code = cell.input.value;
    if (cell.type === 'code') cell.hl.replaceChildren(highlight(code, state.language));
    else cell.hl.replaceChildren(code.endsWith('\n') || !code ? `${code} ` : code);
  }

  function setType (cell, type) {
    cell.type = type;
    cell.el.classList.toggle('markdown-cell', type === 'markdown');
    cell.el.classList.toggle('code-cell', type === 'code');
    cell.typeButton.textContent = type === 'code' ? 'M↓' : '{ }';
    cell.typeButton.title = type === 'code' ? 'Make this a Markdown cell (M)' : 'Make this a code cell (Y)';
    cell.input.setAttribute('aria-label', type === 'code' ? 'Code' : 'Markdown');
    cell.input.placeholder = type === 'code' ? 'Code · Shift+Enter runs · Tab completes' : 'Markdown · Shift+Enter shows it';
    if (type === 'markdown') {
      clearOutputs(cell, false);
      setCount(cell, null);
      cell.timing.textContent = '';
    }
    drawSource(cell);
  }

  // A Markdown cell shows its rendering, except while it is being edited.
  function renderMarkdownCell (cell) {
    cell.editing = false;
    cell.el.classList.remove('editing');
    const src = cell.input.value;
    cell.view.replaceChildren(src.trim() ? markdown(src) : el('p', { class: 'hint', text: 'Empty Markdown cell: double-click or Enter to write.' }));
  }

  function editMarkdownCell (cell) {
    cell.editing = true;
    cell.el.classList.add('editing');
    autosize(cell.input);
  }

  function cellButton (cls, text, title, onclick) {
    return el('button', { type: 'button', class: cls, title, 'aria-label': title, text, onclick });
  }

  // A cell from {id, type, source, outputs, count, metadata}, put after
  // `after` (or at the end). Its outputs are drawn; nothing is saved.
  function makeCell (data, after) {
    const cell = {
      id: data.id || newCellId(),
      metadata: { ...(data.metadata || {}) },
      outputsData: [],
      textShown: 0
    };
    cell.input = el('textarea', {
      class: 'source',
      spellcheck: 'false',
      autocapitalize: 'off',
      autocomplete: 'off',
      rows: '1'
    });
    cell.input.value = data.source || '';
    cell.hl = el('pre', { class: 'highlight', 'aria-hidden': 'true' });
    cell.editor = el('div', { class: 'editor' }, cell.hl, cell.input);
    cell.view = el('div', { class: 'markdown-view' });
    cell.countEl = el('span', { class: 'count', text: '[ ]' });
    cell.timing = el('span', { class: 'timing' });
    cell.outputs = el('div', { class: 'outputs', 'aria-live': 'polite' });
    cell.toggle = cellButton('output-toggle quiet', '', '', () => { cell.expanded = !cell.expanded; checkLong(cell); });
    cell.typeButton = cellButton('type', 'M↓', '', () => { setType(cell, cell.type === 'code' ? 'markdown' : 'code'); if (cell.type === 'markdown') editMarkdownCell(cell); touched(cell); });
    const run = cellButton('run', '▶', 'Run (Shift+Enter)', () => { select(cell); runCell(cell); });
    // The delete button sits at the far end, away from ▶ (in the prompt).
    cell.editorRow = el('div', { class: 'editor-row' }, cell.editor, cell.view,
      el('div', { class: 'cell-actions' },
        cellButton('up', '↑', 'Move up', () => moveCell(cell, -1)),
        cellButton('down', '↓', 'Move down', () => moveCell(cell, 1)),
        cell.typeButton,
        el('span', { class: 'gap' }),
        cellButton('delete', '✕', 'Delete cell (D, D; Z undoes)', () => deleteCell(cell))));
    cell.el = el('div', { class: 'cell', tabindex: '-1' },
      el('div', { class: 'prompt' }, cell.countEl, run, cell.timing),
      el('div', { class: 'cell-body' }, cell.editorRow, cell.outputs, el('div', { class: 'outputs-bar' }, cell.toggle)));
    cell.input.addEventListener('keydown', (ev) => onKey(cell, ev));
    cell.input.addEventListener('input', () => {
      autosize(cell.input);
      drawSource(cell);
      closePopups(cell);
      touched(cell);
    });
    cell.input.addEventListener('focus', () => select(cell, 'edit'));
    cell.el.addEventListener('mousedown', (ev) => { if (!ev.target.closest('textarea, button, input, a, iframe')) select(cell); });
    cell.view.addEventListener('dblclick', () => { editMarkdownCell(cell); cell.input.focus(); });
    setType(cell, data.type === 'markdown' ? 'markdown' : 'code');
    setCount(cell, data.count ?? null);
    if (cell.metadata.execution) showTiming(cell);
    for (const o of data.outputs || []) addOutput(cell, o, null, true);
    // `after`: a cell, 'first', or nothing for the end.
    const at = after === 'first' ? 0 : after ? state.cells.indexOf(after) + 1 : state.cells.length;
    state.cells.splice(at, 0, cell);
    if (after === 'first') ui.cells.prepend(cell.el);
    else if (after) after.el.after(cell.el);
    else ui.cells.append(cell.el);
    if (cell.type === 'markdown') renderMarkdownCell(cell);
    autosize(cell.input);
    return cell;
  }

  function addCell (source, after, type) {
    const cell = makeCell({ source, type }, after);
    touched(cell);
    return cell;
  }

  // The selected cell; in edit mode its editor has the focus, in command
  // mode the cell itself (so the keys are commands).
  function select (cell, mode) {
    if (state.active && state.active !== cell) {
      state.active.el.classList.remove('selected');
      if (state.active.type === 'markdown' && state.active.editing) renderMarkdownCell(state.active);
    }
    state.active = cell;
    cell.el.classList.add('selected');
    if (!mode) return;
    state.mode = mode;
    document.body.dataset.mode = mode;
    if (mode === 'edit') {
      if (cell.type === 'markdown' && !cell.editing) editMarkdownCell(cell);
      if (document.activeElement !== cell.input) cell.input.focus();
    } else {
      closePopups(cell);
      if (cell.type === 'markdown' && cell.editing) renderMarkdownCell(cell);
      cell.el.focus({ preventScroll: true });
      cell.el.scrollIntoView({ block: 'nearest' });
    }
  }

  // This tab changed the cell: saved soon, and kept over another tab's
  // version of it when the two are merged.
  function touched (cell) {
    state.dirty.add(cell.id);
    saveNotebook();
  }

  function deleteCell (cell) {
    const i = state.cells.indexOf(cell);
    if (i < 0) return;
    closePopups(cell);
    state.cells.splice(i, 1);
    cell.el.remove();
    state.deleted.push({ cell, index: i });
    state.removed.add(cell.id);
    state.dirty.delete(cell.id);
    if (!state.cells.length) addCell('');
    select(state.cells[Math.min(i, state.cells.length - 1)], 'command');
    notice(`Cell ${i + 1} deleted${cell.input.value.trim() ? ` (${cell.input.value.trim().split('\n')[0].slice(0, 40)})` : ''}.`, ['Undo', undoDelete]);
    saveNotebook();
  }

  function undoDelete () {
    const d = state.deleted.pop();
    if (!d) return;
    const at = Math.min(d.index, state.cells.length);
    state.cells.splice(at, 0, d.cell);
    if (at + 1 < state.cells.length) state.cells[at + 1].el.before(d.cell.el);
    else ui.cells.append(d.cell.el);
    state.removed.delete(d.cell.id);
    autosize(d.cell.input);
    select(d.cell, 'command');
    notice('');
    touched(d.cell);
  }

  function moveCell (cell, delta) {
    const i = state.cells.indexOf(cell);
    const j = i + delta;
    if (j < 0 || j >= state.cells.length) return;
    state.cells.splice(i, 1);
    state.cells.splice(j, 0, cell);
    if (delta < 0) state.cells[j + 1].el.before(cell.el);
    else state.cells[j - 1].el.after(cell.el);
    state.orderChanged = true;
    select(cell, document.activeElement === cell.input ? 'edit' : 'command');
    touched(cell);
  }

  // Tab completes (or indents at the start of a line, or a selection),
  // Shift+Tab shows the signature and docstring (a multi-line selection is
  // dedented), Ctrl+] and Ctrl+[ indent and dedent, Shift+Enter runs and
  // moves on, Ctrl/Cmd+Enter runs in place, Alt+Enter runs and inserts a
  // cell, Esc goes to command mode.
  function onKey (cell, ev) {
    const ta = cell.input;
    if (cell.popup && handlePopupKey(cell, ev)) return;
    if (ev.key === 'Enter' && ev.shiftKey) {
      ev.preventDefault();
      runCell(cell);
      const i = state.cells.indexOf(cell);
      const next = state.cells[i + 1] || addCell('', cell);
      select(next, 'edit');
      next.el.scrollIntoView({ block: 'nearest' });
    } else if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      runCell(cell);
      if (cell.type === 'markdown') select(cell, 'command');
    } else if (ev.key === 'Enter' && ev.altKey) {
      ev.preventDefault();
      runCell(cell);
      select(addCell('', cell), 'edit');
    } else if (ev.key === 'Tab' && !ev.shiftKey) {
      ev.preventDefault();
      const before = ta.value.slice(ta.value.lastIndexOf('\n', ta.selectionStart - 1) + 1, ta.selectionStart);
      if (ta.selectionStart !== ta.selectionEnd || !before.trim() || cell.type !== 'code') indent(ta, false);
      else complete(cell);
    } else if (ev.key === 'Tab' && ev.shiftKey) {
      ev.preventDefault();
      if (ta.value.slice(ta.selectionStart, ta.selectionEnd).includes('\n') || cell.type !== 'code') indent(ta, true);
      else inspect(cell);
    } else if ((ev.key === ']' || ev.key === '[') && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      indent(ta, ev.key === '[');
    } else if (ev.key === 'Escape') {
      ev.preventDefault();
      if (closePopups(cell)) return;
      select(cell, 'command');
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

  // Command mode, as in Jupyter: A/B insert above/below, D D deletes, Z
  // undoes that, M/Y make Markdown/code, Enter edits, Shift+Enter runs and
  // selects the next, Ctrl+Enter runs, ↑/K and ↓/J move the selection.
  let lastD = 0;
  document.addEventListener('keydown', (ev) => {
    const cell = state.active;
    const t = ev.target;
    if (!cell || ev.defaultPrevented || ev.altKey || document.querySelector('dialog[open]')) return;
    if (t !== document.body && !(t.classList && t.classList.contains('cell'))) return;
    const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;
    const i = state.cells.indexOf(cell);
    const commands = {
      a: () => select(addCell('', i > 0 ? state.cells[i - 1] : 'first'), 'edit'),
      b: () => select(addCell('', cell), 'edit'),
      m: () => { setType(cell, 'markdown'); renderMarkdownCell(cell); touched(cell); },
      y: () => { setType(cell, 'code'); touched(cell); },
      z: undoDelete,
      Enter: () => select(cell, 'edit'),
      ArrowUp: () => i > 0 && select(state.cells[i - 1], 'command'),
      k: () => i > 0 && select(state.cells[i - 1], 'command'),
      ArrowDown: () => i + 1 < state.cells.length && select(state.cells[i + 1], 'command'),
      j: () => i + 1 < state.cells.length && select(state.cells[i + 1], 'command')
    };
    if (ev.ctrlKey || ev.metaKey) {
      if (key !== 'Enter') return;
      ev.preventDefault();
      runCell(cell);
      return;
    }
    if (key === 'Enter' && ev.shiftKey) {
      ev.preventDefault();
      runCell(cell);
      select(state.cells[i + 1] || addCell('', cell), 'command');
      return;
    }
    if (key === 'd') {
      ev.preventDefault();
      if (Date.now() - lastD < 1000) { lastD = 0; deleteCell(cell); } else lastD = Date.now();
      return;
    }
    if (ev.shiftKey || !commands[key]) return;
    ev.preventDefault();
    commands[key]();
  });

  function setRunning (cell, running) {
    cell.el.classList.toggle('running', running);
  }

  function runCell (cell) {
    if (cell.type === 'markdown') {
      renderMarkdownCell(cell);
      return;
    }
    const code = cell.input.value;
    if (!state.kernel) {
      notice('Start a kernel first.', ['New kernel', startKernel]);
      return;
    }
    for (const [id, c] of state.pending) if (c === cell) state.pending.delete(id);
    clearOutputs(cell, false);
    cell.el.classList.remove('aborted');
    cell.replied = null;
    cell.idle = false;
    cell.started = null;
    cell.ended = null;
    cell.sent = new Date().toISOString();
    cell.timing.textContent = '';
    cell.timing.title = '';
    delete cell.metadata.execution;
    setCount(cell, '*');
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
    touched(cell);
  }

  function runCells (cells) {
    for (const c of cells) runCell(c);
  }

  async function restartAndRunAll () {
    if (await kernelAction('restart')) runCells(state.cells);
  }

  function clearAllOutputs () {
    for (const c of state.cells) {
      if (c.type === 'code' && !c.el.classList.contains('running')) {
        clearOutputs(c, false);
        setCount(c, null);
        c.timing.textContent = '';
        c.el.classList.remove('aborted');
        delete c.metadata.execution;
        touched(c);
      }
    }
  }

  // ---- completion (Tab) and inspection (Shift+Tab) --------------------------

  // Asks the kernel; resolves with the reply's content, or null when there
  // is no kernel or no answer within 5 s.
  function request (type, content) {
    if (!state.kernel || !state.ws || state.ws.readyState !== WebSocket.OPEN) return Promise.resolve(null);
    return new Promise((resolve) => {
      const id = send('shell', type, content);
      state.requests.set(id, resolve);
      setTimeout(() => { if (state.requests.delete(id)) resolve(null); }, 5000);
    });
  }

  // Jupyter counts cursor positions in Unicode code points, JavaScript in
  // UTF-16 units.
  const toCodePoints = (s, i) => [...s.slice(0, i)].length;
  function fromCodePoints (s, n) {
    let i = 0;
    for (const ch of s) {
      if (n-- <= 0) break;
      i += ch.length;
    }
    return i;
  }

  function closePopups (cell) {
    let closed = false;
    for (const p of [cell.popup, cell.tooltip]) {
      if (p) { p.remove(); closed = true; }
    }
    cell.popup = cell.tooltip = null;
    return closed;
  }

  async function complete (cell) {
    const ta = cell.input;
    const code = ta.value;
    const pos = ta.selectionStart;
    const reply = await request('complete_request', { code, cursor_pos: toCodePoints(code, pos) });
    if (ta.value !== code || ta.selectionStart !== pos) return;
    const matches = reply && reply.status === 'ok' ? [...new Set(reply.matches || [])] : [];
    if (!reply) {
      showTooltip(cell, state.kernel ? 'The kernel did not answer (busy?).' : 'No kernel: nothing to complete from.');
      return;
    }
    if (!matches.length) {
      showTooltip(cell, 'No completions.');
      return;
    }
    const start = fromCodePoints(code, reply.cursor_start ?? toCodePoints(code, pos));
    const end = fromCodePoints(code, reply.cursor_end ?? toCodePoints(code, pos));
    if (matches.length === 1) {
      accept(cell, matches[0], start, end);
      return;
    }
    closePopups(cell);
    const list = el('ul', { class: 'completions', role: 'listbox', 'aria-label': 'Completions' });
    for (const m of matches.slice(0, 200)) {
      list.append(el('li', { role: 'option', text: m, onmousedown: (ev) => { ev.preventDefault(); accept(cell, m, start, end); } }));
    }
    cell.popup = list;
    cell.popupState = { index: 0, start, end };
    list.firstChild.classList.add('active');
    cell.editorRow.after(list);
  }

  function accept (cell, text, start, end) {
    closePopups(cell);
    cell.input.setRangeText(text, start, end, 'end');
    cell.input.dispatchEvent(new Event('input'));
    cell.input.focus();
  }

  function handlePopupKey (cell, ev) {
    const items = [...cell.popup.children];
    const st = cell.popupState;
    if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
      ev.preventDefault();
      items[st.index].classList.remove('active');
      st.index = (st.index + (ev.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
      items[st.index].classList.add('active');
      items[st.index].scrollIntoView({ block: 'nearest' });
      return true;
    }
    if (ev.key === 'Enter' || ev.key === 'Tab') {
      ev.preventDefault();
      accept(cell, items[st.index].textContent, st.start, st.end);
      return true;
    }
    if (ev.key === 'Escape') {
      ev.preventDefault();
      closePopups(cell);
      return true;
    }
    return false;
  }

  async function inspect (cell) {
    const ta = cell.input;
    const code = ta.value;
    const reply = await request('inspect_request', { code, cursor_pos: toCodePoints(code, ta.selectionStart), detail_level: 0 });
    if (ta.value !== code) return;
    if (!reply) showTooltip(cell, state.kernel ? 'The kernel did not answer (busy?).' : 'No kernel to ask.');
    else if (!reply.found || !reply.data) showTooltip(cell, 'Nothing known about this name.');
    else showTooltip(cell, joined(reply.data['text/plain'] || ''), true);
  }

  function showTooltip (cell, text, rich) {
    closePopups(cell);
    const tip = el('div', { class: `tooltip${rich ? '' : ' quiet-tip'}`, role: 'status' },
      el('pre', {}, ansi(text)),
      cellButton('close quiet', '✕', 'Close (Esc)', () => closePopups(cell)));
    cell.tooltip = tip;
    cell.editorRow.after(tip);
    if (!rich) setTimeout(() => { if (cell.tooltip === tip) closePopups(cell); }, 2500);
  }

  // ---- outputs -------------------------------------------------------------

  function clearOutputs (cell, wait) {
    if (wait) {
      cell.clearOnNext = true;
      return;
    }
    cell.clearOnNext = false;
    cell.outputs.replaceChildren();
    cell.outputsData = [];
    cell.stream = null;
    cell.textShown = 0;
    cell.expanded = false;
    checkLong(cell);
  }

  // Records an output of the cell (nbformat 4) and draws it. Stream text
  // past MAX_TEXT per cell is cut, in the page and in the notebook.
  function addOutput (cell, o, displayId, restoring) {
    if (cell.clearOnNext) clearOutputs(cell, false);
    const data = cell.outputsData;
    if (o.output_type === 'stream') {
      let text = String(o.text);
      if (cell.textShown >= MAX_TEXT) return;
      const cut = cell.textShown + text.length > MAX_TEXT;
      if (cut) text = text.slice(0, MAX_TEXT - cell.textShown);
      cell.textShown += text.length;
      const last = data[data.length - 1];
      if (last && last.output_type === 'stream' && last.name === o.name) last.text += text;
      else data.push({ output_type: 'stream', name: o.name, text });
      appendText(cell, o.name, text);
      if (cut) output(cell, el('div', { class: 'output truncated', text: 'More output was cut here (the page keeps 1 MiB of text per cell).' }));
    } else if (o.output_type === 'error') {
      data.push(o);
      const tb = Array.isArray(o.traceback) && o.traceback.length ? o.traceback.join('\n') : `${o.ename}: ${o.evalue}`;
      output(cell, el('div', { class: 'output error' }, el('pre', {}, ansi(tb))));
    } else {
      data.push(o);
      const node = el('div', { class: 'output display' }, mimeElement(o.data || {}, o.metadata || {}));
      output(cell, node);
      if (displayId) {
        if (!state.displays.has(displayId)) state.displays.set(displayId, new Set());
        state.displays.get(displayId).add({ node, o, cell });
      }
    }
    if (!restoring) {
      state.dirty.add(cell.id);
      saveNotebook();
    }
    scheduleLongCheck(cell);
  }

  function output (cell, node) {
    cell.outputs.append(node);
    return node;
  }

  // Consecutive output of one stream goes to one block; a carriage return
  // rewrites its line, as in a terminal (progress bars).
  function appendText (cell, name, text) {
    let block = cell.stream;
    if (!block || block.name !== name || !block.pre.isConnected || cell.outputs.lastChild !== block.pre.parentNode) {
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

  function updateDisplay (c) {
    const displayId = c.transient && c.transient.display_id;
    const entries = displayId && state.displays.get(displayId);
    if (!entries) return;
    for (const entry of entries) {
      if (!entry.node.isConnected) {
        entries.delete(entry);
        continue;
      }
      entry.o.data = c.data || {};
      entry.o.metadata = c.metadata || {};
      entry.node.replaceChildren(mimeElement(entry.o.data, entry.o.metadata));
      state.dirty.add(entry.cell.id);
      saveNotebook();
    }
  }

  // Long outputs scroll inside the cell (as in Jupyter), with a toggle to
  // show them whole.
  const LONG_OUTPUT = 640; // px
  function scheduleLongCheck (cell) {
    if (cell.longCheck) return;
    cell.longCheck = requestAnimationFrame(() => { cell.longCheck = 0; checkLong(cell); });
  }

  function checkLong (cell) {
    const box = cell.outputs;
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    const long = box.scrollHeight > LONG_OUTPUT + 40;
    box.classList.toggle('scrolled', long && !cell.expanded);
    cell.toggle.hidden = !long;
    cell.toggle.textContent = cell.expanded ? '▴ Scroll the output' : '▾ Show the whole output';
    cell.toggle.title = cell.expanded ? 'Show the output in a scrolling box' : 'Show every line of the output';
    // A streaming output that was followed to its end stays followed.
    if (long && !cell.expanded && (atBottom || cell.el.classList.contains('running'))) box.scrollTop = box.scrollHeight;
  }

  // Messages from the frames: "ready" (send the HTML) and their height.
  window.addEventListener('message', (ev) => {
    const frame = [...ui.cells.querySelectorAll('iframe')].find((f) => f.contentWindow === ev.source);
    if (!frame || !ev.data) return;
    if (ev.data.type === 'ready') {
      ev.source.postMessage({ type: 'render', html: frame.gloveboxHtml }, '*');
    } else if (ev.data.type === 'height') {
      frame.style.height = `${Math.min(Math.max(Number(ev.data.height) || 0, 20), 4000)}px`;
      const cell = state.cells.find((c) => c.outputs.contains(frame));
      if (cell) scheduleLongCheck(cell);
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

  // ---- files -----------------------------------------------------------------

  function filesUrl (path, kernel) {
    return `api/kernels/${kernel || state.kernel}/files/${path.split('/').map(encodeURIComponent).join('/')}`;
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

  // ---- the notebook as a document -------------------------------------------

  const NOTEBOOK_PREFIX = 'glovebox.notebook.';
  const notebookKey = (name) => storeKey(`notebook.${name}`);

  function storedNames () {
    const suffix = `:${base.pathname}`;
    const names = [];
    for (let i = 0; i < localStorage.length; i++) {
      const k = localStorage.key(i);
      if (k.startsWith(NOTEBOOK_PREFIX) && k.endsWith(suffix)) names.push(k.slice(NOTEBOOK_PREFIX.length, -suffix.length));
    }
    return names.sort();
  }

  function readStored (name) {
    try {
      const doc = JSON.parse(localStorage.getItem(notebookKey(name)) || 'null');
      return doc && doc.nb ? doc : null;
    } catch (e) {
      return null;
    }
  }

  function cellData (c) {
    return { id: c.id, type: c.type, source: c.input.value, outputs: c.type === 'code' ? c.outputsData : [], count: typeof c.count === 'number' ? c.count : null, metadata: c.metadata };
  }

  let saveTimer = null;
  let quotaWarned = false;
  // Writes the notebook to this browser's storage, soon (or now). Another
  // tab's newer version is merged in first, so neither loses the other's
  // edits.
  function saveNotebook (now) {
    clearTimeout(saveTimer);
    if (!now) {
      saveTimer = setTimeout(() => saveNotebook(true), 300);
      return;
    }
    if (!state.name) return;
    const stored = readStored(state.name);
    if (stored && stored.rev !== state.rev && stored.tab !== state.tab) mergeFrom(stored);
    const cells = state.cells.map(cellData);
    const outputs = boundedOutputs(cells);
    const doc = { rev: Math.max(stored ? stored.rev : 0, state.rev) + 1, tab: state.tab, nb: toIpynb(cells.map((c, i) => ({ ...c, outputs: outputs[i] })), state.metadata) };
    try {
      localStorage.setItem(notebookKey(state.name), JSON.stringify(doc));
    } catch (e) {
      // Full: keep the code at least.
      doc.nb = toIpynb(cells.map((c) => ({ ...c, outputs: [] })), state.metadata);
      try { localStorage.setItem(notebookKey(state.name), JSON.stringify(doc)); } catch (e2) { /* nothing more to drop */ }
      if (!quotaWarned) notice('The browser\'s storage is full: this notebook\'s outputs are not kept across reloads. Download it to keep them.');
      quotaWarned = true;
    }
    state.rev = doc.rev;
    state.dirty.clear();
    state.removed.clear();
    localStorage.setItem(storeKey('last-notebook'), state.name);
  }

  // Takes another tab's version of this notebook: its cells and order, but
  // this tab's own unsaved changes (edited, added, deleted cells) stay.
  function mergeFrom (doc) {
    let theirs;
    try { theirs = parseIpynb(doc.nb); } catch (e) { return; }
    const mine = new Map(state.cells.map((c) => [c.id, c]));
    const theirIds = new Set(theirs.cells.map((c) => c.id));
    const focused = document.activeElement;
    const selection = focused && focused.tagName === 'TEXTAREA' ? [focused.selectionStart, focused.selectionEnd] : null;
    const result = [];
    for (const t of theirs.cells) {
      if (state.removed.has(t.id)) continue;
      const m = mine.get(t.id);
      if (m && state.dirty.has(t.id)) result.push(m);
      else if (m) { updateCell(m, t); result.push(m); }
      else {
        const c = makeCell(t);
        state.cells.pop(); // makeCell put it at the end; its place is set below
        result.push(c);
      }
    }
    state.cells.forEach((c, i) => {
      if (theirIds.has(c.id) || !state.dirty.has(c.id)) return;
      const prev = state.cells.slice(0, i).reverse().find((p) => result.includes(p));
      result.splice(prev ? result.indexOf(prev) + 1 : 0, 0, c);
    });
    for (const c of state.cells) if (!result.includes(c)) c.el.remove();
    if (!result.length) result.push(makeCell({ source: '' }));
    state.cells = result;
    result.forEach((c, i) => { if (ui.cells.children[i] !== c.el) ui.cells.insertBefore(c.el, ui.cells.children[i] || null); });
    if (focused && focused.isConnected && document.activeElement !== focused) {
      focused.focus();
      if (selection) focused.setSelectionRange(...selection);
    }
    if (!result.includes(state.active)) state.active = null;
    const kernelBefore = state.metadata.glovebox_kernel;
    state.metadata = theirs.metadata;
    state.rev = doc.rev;
    const k = state.metadata.glovebox_kernel;
    if (k && k !== kernelBefore && k !== state.kernel && state.kernels.some((x) => x.id === k)) selectKernel(k);
    else if (state.kernel) state.metadata.glovebox_kernel = state.kernel;
  }

  // Another tab's version of a cell this tab did not change.
  function updateCell (cell, t) {
    if (cell.input.value !== t.source) {
      const ta = cell.input;
      const sel = document.activeElement === ta ? [ta.selectionStart, ta.selectionEnd] : null;
      ta.value = t.source;
      if (sel) ta.setSelectionRange(...sel);
      drawSource(cell);
      autosize(ta);
    }
    if (cell.type !== t.type) setType(cell, t.type);
    if (cell.type === 'markdown' && !cell.editing) renderMarkdownCell(cell);
    cell.metadata = { ...t.metadata };
    if (cell.el.classList.contains('running')) return;
    if (JSON.stringify(cell.outputsData) !== JSON.stringify(t.outputs)) {
      clearOutputs(cell, false);
      for (const o of t.outputs) addOutput(cell, o, null, true);
    }
    setCount(cell, t.count);
  }

  // Another tab saved: take its changes; a tab that opens this notebook
  // says so, and the tabs already on it answer, so each tells its user.
  window.addEventListener('storage', (ev) => {
    if (!state.name || ev.key !== notebookKey(state.name) || !ev.newValue) return;
    let doc;
    try { doc = JSON.parse(ev.newValue); } catch (e) { return; }
    if (!doc || doc.tab === state.tab || doc.rev === state.rev) return;
    mergeFrom(doc);
    if (state.dirty.size || state.removed.size) saveNotebook(true);
  });

  const channel = 'BroadcastChannel' in window ? new BroadcastChannel(storeKey('tabs')) : null;
  function tellOtherTab () {
    notice(`"${state.name}" is open in another tab too. Edits in either show in both; neither overwrites the other.`);
  }
  if (channel) {
    channel.onmessage = (ev) => {
      const m = ev.data || {};
      if (m.notebook !== state.name || m.tab === state.tab) return;
      if (m.type === 'hello') channel.postMessage({ type: 'here', notebook: state.name, tab: state.tab });
      if (m.type === 'hello' || m.type === 'here') tellOtherTab();
    };
  }

  // The address names the notebook and its kernel: a reload or a copied
  // link comes back to both.
  function updateUrl () {
    const url = new URL(location.href);
    url.searchParams.set('notebook', state.name);
    if (state.kernel) url.searchParams.set('kernel', state.kernel);
    else url.searchParams.delete('kernel');
    history.replaceState(null, '', url.pathname + url.search + url.hash);
    document.title = `${state.name.replace(/\.ipynb$/, '')} · Glovebox`;
  }

  function cleanName (name) {
    const n = String(name).replace(/[\u0000-\u001f/\\:]/g, '').trim().slice(0, 100) || 'Untitled';
    return n.endsWith('.ipynb') ? n : `${n}.ipynb`;
  }

  function uniqueName (name) {
    const names = new Set(storedNames());
    if (!names.has(name)) return name;
    const stem = name.replace(/\.ipynb$/, '');
    for (let i = 2; ; i++) if (!names.has(`${stem} (${i}).ipynb`)) return `${stem} (${i}).ipynb`;
  }

  // Goes to another notebook: a page load of its address.
  function openNotebook (name) {
    saveNotebook(true);
    const url = new URL(location.href);
    url.search = '';
    url.searchParams.set('notebook', name);
    location.assign(url.pathname + url.search);
  }

  function loadNotebook (name) {
    state.name = name;
    let doc = readStored(name);
    let cells = [];
    if (doc) {
      try {
        const nb = parseIpynb(doc.nb);
        cells = nb.cells;
        state.metadata = nb.metadata;
        state.rev = doc.rev;
      } catch (e) {
        notice(`The stored notebook "${name}" could not be read (${e.message}); it starts empty.`);
        doc = null;
      }
    } else {
      // The page kept only the cells' code before notebooks had names.
      try {
        const old = JSON.parse(localStorage.getItem(storeKey('cells')) || '[]');
        if (Array.isArray(old) && name === 'Untitled.ipynb') cells = old.map((s) => ({ source: String(s) }));
      } catch (e) { /* none */ }
      localStorage.removeItem(storeKey('cells'));
    }
    if (!cells.length) cells = [{ source: '' }];
    for (const c of cells) makeCell(c);
    ui.notebookName.value = name.replace(/\.ipynb$/, '');
    if (!doc) saveNotebook(true);
    renderNotebookList();
    localStorage.setItem(storeKey('last-notebook'), name);
    if (channel) channel.postMessage({ type: 'hello', notebook: name, tab: state.tab });
  }

  function renderNotebookList () {
    ui.notebookSelect.replaceChildren(...storedNames().map((n) => {
      const opt = el('option', { value: n, text: n.replace(/\.ipynb$/, '') });
      if (n === state.name) opt.selected = true;
      return opt;
    }), el('option', { value: '', text: '+ New notebook' }));
  }

  function renameNotebook () {
    const name = cleanName(ui.notebookName.value);
    if (name === state.name) return;
    if (storedNames().includes(name)) {
      notice(`There is already a notebook "${name}" in this browser: pick another name.`);
      ui.notebookName.value = state.name.replace(/\.ipynb$/, '');
      return;
    }
    const old = state.name;
    state.name = name;
    saveNotebook(true);
    localStorage.removeItem(notebookKey(old));
    renderNotebookList();
    updateUrl();
  }

  function newNotebook () {
    const name = uniqueName('Untitled.ipynb');
    localStorage.setItem(notebookKey(name), JSON.stringify({ rev: 1, tab: state.tab, nb: toIpynb([{ id: newCellId(), type: 'code', source: '', outputs: [] }], {}) }));
    openNotebook(name);
  }

  // Opens an .ipynb file (from the picker or a drop) as a new notebook of
  // this browser, with a kernel of its own.
  async function openFile (file) {
    let nb;
    try {
      nb = parseIpynb(await file.text());
    } catch (e) {
      notice(`${file.name} is not a notebook this page can open: ${e.message}.`);
      return;
    }
    const name = uniqueName(cleanName(file.name));
    const metadata = { ...nb.metadata };
    delete metadata.glovebox_kernel;
    const outputs = boundedOutputs(nb.cells);
    localStorage.setItem(notebookKey(name), JSON.stringify({ rev: 1, tab: state.tab, nb: toIpynb(nb.cells.map((c, i) => ({ ...c, outputs: outputs[i] })), metadata) }));
    openNotebook(name);
  }

  function downloadNotebook () {
    const metadata = { ...state.metadata };
    delete metadata.glovebox_kernel;
    const k = state.kernels.find((x) => x.id === state.kernel);
    if (k) metadata.kernelspec = { name: k.name, display_name: displayName(k.name), language: state.language };
    const nb = toIpynb(state.cells.map(cellData), metadata);
    const url = URL.createObjectURL(new Blob([`${JSON.stringify(nb, null, 1)}\n`], { type: 'application/x-ipynb+json' }));
    const a = el('a', { href: url, download: state.name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // ---- start -----------------------------------------------------------------

  ui.start.addEventListener('click', () => startKernel());
  ui.interrupt.addEventListener('click', () => kernelAction('interrupt'));
  ui.restart.addEventListener('click', () => kernelAction('restart'));
  ui.shutdown.addEventListener('click', () => kernelAction('shutdown'));
  ui.kernelSelect.addEventListener('change', () => selectKernel(ui.kernelSelect.value || null));
  $('files-refresh').addEventListener('click', refreshFiles);
  $('add-cell').addEventListener('click', () => select(addCell('', state.cells[state.cells.length - 1]), 'edit'));
  $('add-markdown').addEventListener('click', () => select(addCell('', state.cells[state.cells.length - 1], 'markdown'), 'edit'));
  $('run-all').addEventListener('click', () => runCells(state.cells));
  $('run-above').addEventListener('click', () => {
    const i = state.active ? state.cells.indexOf(state.active) : -1;
    runCells(state.cells.slice(0, Math.max(i, 0)));
  });
  $('restart-run-all').addEventListener('click', restartAndRunAll);
  $('clear-outputs').addEventListener('click', clearAllOutputs);
  $('download').addEventListener('click', downloadNotebook);
  $('menu').addEventListener('click', () => {
    const open = ui.bar.classList.toggle('open');
    $('menu').setAttribute('aria-expanded', String(open));
  });
  ui.notebookName.addEventListener('change', renameNotebook);
  ui.notebookName.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') ui.notebookName.blur(); });
  ui.notebookSelect.addEventListener('change', () => {
    if (ui.notebookSelect.value) openNotebook(ui.notebookSelect.value);
    else newNotebook();
  });
  ui.openInput.addEventListener('change', () => {
    if (ui.openInput.files[0]) openFile(ui.openInput.files[0]);
    ui.openInput.value = '';
  });
  // A notebook file dropped on the cells opens; other files go to the
  // sandbox, as on the files panel.
  ui.notebook.addEventListener('dragover', (ev) => {
    if (!ev.dataTransfer || ![...ev.dataTransfer.types].includes('Files')) return;
    ev.preventDefault();
    ev.dataTransfer.dropEffect = 'copy';
  });
  ui.notebook.addEventListener('drop', (ev) => {
    const files = ev.dataTransfer ? [...ev.dataTransfer.files] : [];
    if (!files.length) return;
    ev.preventDefault();
    const nb = files.find((f) => f.name.endsWith('.ipynb'));
    if (nb) openFile(nb);
    else upload(files);
  });
  // Ctrl+S, as in Jupyter: the notebook is saved (in this browser) now.
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 's' || !(ev.ctrlKey || ev.metaKey) || ev.altKey || ev.shiftKey) return;
    ev.preventDefault();
    saveNotebook(true);
    notice(`Saved "${state.name}" in this browser.`, ['Download', downloadNotebook]);
  });
  $('confirm-form').addEventListener('submit', () => { ui.confirmDialog.returnValue = 'ok'; });
  $('confirm-cancel').addEventListener('click', () => ui.confirmDialog.close('cancel'));

  let polling = null;
  async function boot () {
    try {
      const specs = await api('GET', 'api/kernelspecs');
      state.defaultSpec = specs.default;
      state.specs = Object.values(specs.kernelspecs || {});
      ui.specSelect.replaceChildren(...state.specs.map((s) => el('option', {
        value: s.name,
        text: (s.spec && s.spec.display_name) || s.name
      })));
      ui.specSelect.value = state.defaultSpec;
      state.kernels = await api('GET', 'api/kernels');
    } catch (e) {
      if (e.status !== 401) notice(`Cannot reach the gateway: ${e.message}`);
      return;
    }
    // The notebook's own kernel (named in the address, or remembered with
    // the notebook), never just any running one: it may be an agent's.
    const wanted = new URL(location.href).searchParams.get('kernel') || state.metadata.glovebox_kernel;
    if (wanted && state.kernels.some((k) => k.id === wanted)) {
      selectKernel(wanted);
    } else {
      if (wanted) notice(`This notebook's kernel (${wanted.slice(0, 8)}) is gone: a new one was started. Variables must be made again (Run all).`);
      const spec = state.metadata.kernelspec && state.metadata.kernelspec.name;
      await startKernel(state.specs.some((s) => s.name === spec) ? spec : state.defaultSpec);
    }
    if (!polling) {
      polling = setInterval(() => {
        if (!document.hidden && state.token) refreshKernels().catch(() => {});
      }, 4000);
    }
  }

  function init () {
    const params = new URL(location.href).searchParams;
    loadNotebook(cleanName(params.get('notebook') || localStorage.getItem(storeKey('last-notebook')) || 'Untitled.ipynb'));
    // The first cell, its start in view: a code cell to type in, a
    // Markdown cell shown rendered.
    const first = state.cells[0];
    select(first, first.type === 'code' ? 'edit' : 'command');
    first.input.setSelectionRange(0, 0);
    updateUrl();
    renderKernels();
    refreshFiles();
    const fromUrl = takeTokenFromUrl();
    if (fromUrl) localStorage.setItem(storeKey('token'), fromUrl);
    state.token = fromUrl || localStorage.getItem(storeKey('token'));
    if (!state.token) signIn('Enter the token glovebox printed when it started (the ?token= of its URL).', false);
    else boot();
  }

  init();
}
