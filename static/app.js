// Glovebox's page: notebooks, kernels and files over the gateway's own API
// (REST with the token in a header, the kernel WebSocket in the JSON
// format). Plain JavaScript modules, no build step. Kernel output is never
// put into this page as markup: text is text, images are <img> from data:
// URLs, Markdown is built from DOM nodes, HTML goes to a sandboxed frame.
// This file: the token, the API, kernels, the WebSocket, files, start-up;
// cells.js has the cells and their outputs, document.js the notebook as a
// document (storage, tabs, .ipynb).
import { el } from './render.js';
import { $, base, confirmDialog, notice, state, storeKey, ui, uuid } from './shared.js';
import { shortId } from './ids.js';
import { addCell, addOutput, askInput, clearAllOutputs, clearOutputs, drawSource, request, restartAndRunAll, runCells, select, setCount, setRunning, updateDisplay } from './cells.js';
import { cleanName, downloadNotebook, kernelFromAnotherTab, loadNotebook, newNotebook, openFile, openNotebook, renameNotebook, saveNotebook, tellTabs, updateUrl } from './document.js';
import { terminalFollowKernel } from './terminal.js';

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
  return `${k.name} · ${shortId(k.id)}`;
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
export async function startKernel (name) {
  ui.start.disabled = true;
  const before = state.executionState;
  if (!state.kernel) setExecutionState('starting');
  ui.start.textContent = 'Starting…';
  state.starting = true;
  tellTabs('starting');
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
    state.starting = false;
    state.finding = false;
    // The tabs waiting for it (or, when it failed, to start their own).
    tellTabs('kernel');
  }
}

export function selectKernel (id) {
  if (id === state.kernel && state.ws) return;
  closeSocket();
  terminalFollowKernel(id);
  state.kernel = id;
  state.finding = false;
  if (id) tellTabs('kernel');
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
    // Saved at once, not with the edits' delay: a second tab opened on the
    // notebook meanwhile would start a kernel of its own.
    saveNotebook(true);
  }
  updateUrl();
  if (k) showReason(k.reason);
  setExecutionState(k ? k.execution_state : 'none');
  state.filesDir = '';
  if (id) connect();
  else setConnection('offline');
  refreshFiles();
}

export async function kernelAction (what) {
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
      // A kernel that took its time to exit: the page may have moved on to
      // another meanwhile (the list no longer showed this one), which
      // stays.
      if (state.kernel === id) selectKernel(null);
      else renderKernels();
    }
  } catch (e) {
    notice(`${what} failed: ${e.message}`);
    return false;
  }
  return true;
}

export function displayName (specName) {
  const s = state.specs.find((x) => x.name === specName);
  return (s && s.spec && s.spec.display_name) || specName;
}

// This tab's client session on a kernel: kept across a reload (so the
// gateway replays what the kernel published meanwhile, and replies to
// cells still running reach them), but not shared with a duplicated tab:
// it is taken out of sessionStorage while the page lives and put back
// when it goes.
function sessionFor (kernel) {
  state.lastMsgId = null;
  if (!kernel) return uuid();
  let saved = null;
  try { saved = JSON.parse(sessionStorage.getItem(storeKey('session')) || 'null'); } catch (e) { /* none */ }
  sessionStorage.removeItem(storeKey('session'));
  if (saved && saved.kernel === kernel && saved.notebook === state.name && typeof saved.session === 'string') {
    state.resumed = saved.running || {};
    if (typeof saved.lastMsgId === 'string') state.lastMsgId = saved.lastMsgId;
    return saved.session;
  }
  return uuid();
}

// Going away (a reload, another notebook): the notebook as drawn now, and
// this tab's session, running cells and last message handled for the page
// that comes next. What arrives between now and the end of the page is
// kept the same way, at once; what reaches the socket too late to be
// handled, the gateway sends the next page again (it replays from the
// last message handled).
function persistForReload () {
  saveNotebook(true);
  if (!state.kernel) return;
  const running = {};
  for (const [id, cell] of state.pending) running[id] = cell.id;
  sessionStorage.setItem(storeKey('session'), JSON.stringify({ kernel: state.kernel, session: state.session, notebook: state.name, running, lastMsgId: state.lastMsgId }));
}

window.addEventListener('pagehide', () => {
  state.leaving = true;
  persistForReload();
});
window.addEventListener('pageshow', () => { state.leaving = false; });

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
  // (A Glovebox extension: what the gateway wrote after this message,
  // this page may not have read; it sends it again, once.)
  if (state.lastMsgId) url.searchParams.set('last_msg_id', state.lastMsgId);
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
    if (msg.header && typeof msg.header.msg_id === 'string') state.lastMsgId = msg.header.msg_id;
    if (state.leaving) persistForReload();
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

export function send (channel, msgType, content, parent) {
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
  // A kernel killed as the cell began (out of memory) may never have
  // published execute_input, and the gateway's reply for it has no count.
  if (cell.count === '*') setCount(cell, null);
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
export function showTiming (cell) {
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
    const isDir = f.type === 'dir';
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
// This tab will not get a kernel by itself now (it has no token, or the
// gateway did not answer): the tabs waiting for it start their own.
function giveUpFinding () {
  state.finding = false;
  tellTabs('kernel');
}

async function boot () {
  try {
    await loadSpecs();
    state.kernels = await api('GET', 'api/kernels');
  } catch (e) {
    if (e.status !== 401) notice(`Cannot reach the gateway: ${e.message}`);
    giveUpFinding();
    return;
  }
  // The notebook's own kernel (named in the address, or remembered with
  // the notebook), never just any running one: it may be an agent's.
  const wanted = state.urlKernel || state.metadata.glovebox_kernel;
  if (wanted && state.kernels.some((k) => k.id === wanted)) {
    selectKernel(wanted);
  } else {
    // Another tab on this notebook, opened at the same moment, may be
    // starting its kernel: one kernel for both.
    const other = await kernelFromAnotherTab();
    if (other) state.kernels = await api('GET', 'api/kernels').catch(() => state.kernels);
    if (other && state.kernels.some((k) => k.id === other)) {
      selectKernel(other);
    } else {
      if (wanted) notice(`This notebook's kernel (${shortId(wanted)}) is gone: a new one was started. Variables must be made again (Run all).`);
      const spec = state.metadata.kernelspec && state.metadata.kernelspec.name;
      await startKernel(state.specs.some((s) => s.name === spec) ? spec : state.defaultSpec);
    }
  }
  if (!polling) {
    polling = setInterval(() => {
      if (!document.hidden && state.token) refreshKernels().catch(() => {});
    }, 4000);
  }
}

function init () {
  const params = new URL(location.href).searchParams;
  state.urlKernel = params.get('kernel');
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
  if (!state.token) {
    giveUpFinding();
    signIn('Enter the token glovebox printed when it started (the ?token= of its URL).', false);
  } else {
    boot();
  }
}

init();
