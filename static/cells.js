// The cells: editing (keys, command mode, completion, inspection), running,
// and their outputs.
import { el, ansi, markdown, mimeElement, joined, carriageReturns } from './render.js';
import { highlight } from './highlight.js';
import { newCellId } from './notebook.js';
import { MAX_TEXT, notice, state, ui } from './shared.js';
import { kernelAction, send, showTiming, startKernel } from './app.js';
import { saveNotebook } from './document.js';

// ---- cells ---------------------------------------------------------------

export function setCount (cell, n) {
  cell.count = n;
  cell.countEl.textContent = n === '*' ? '[*]' : n == null ? '[ ]' : `[${n}]`;
}

// A textarea's height follows its text, and its width: when the window or
// the cell's tools change the width, wrapped lines change their number.
const widths = new WeakMap();
const resized = new ResizeObserver((entries) => {
  for (const e of entries) {
    const w = Math.round(e.contentRect.width);
    if (widths.get(e.target) === w) continue;
    widths.set(e.target, w);
    autosize(e.target);
  }
});

export function autosize (ta) {
  ta.style.height = 'auto';
  ta.style.height = `${ta.scrollHeight}px`;
}

// autosize, for an editor in sight (a hidden one measures 0).
function refit (ta) {
  if (ta.offsetParent !== null) autosize(ta);
}

// The <pre> under the textarea shows the same text, coloured.
export function drawSource (cell) {
  const code = cell.input.value;
  if (cell.type === 'code') cell.hl.replaceChildren(highlight(code, state.language));
  else cell.hl.replaceChildren(code.endsWith('\n') || !code ? `${code} ` : code);
}

export function setType (cell, type) {
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
export function renderMarkdownCell (cell) {
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
export function makeCell (data, after) {
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
  resized.observe(cell.input);
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

export function addCell (source, after, type) {
  const cell = makeCell({ source, type }, after);
  touched(cell);
  return cell;
}

// The selected cell; in edit mode its editor has the focus, in command
// mode the cell itself (so the keys are commands).
export function select (cell, mode) {
  const was = state.active;
  if (was && was !== cell) {
    was.el.classList.remove('selected');
    if (was.type === 'markdown' && was.editing) renderMarkdownCell(was);
  }
  state.active = cell;
  cell.el.classList.add('selected');
  // On a touch screen the tools come and go with the selection, and so does
  // the editor's width. The resize observer alone can miss it: a width
  // changed and changed back within one frame is never reported, and the
  // editor would keep the height measured in between.
  if (was !== cell) {
    if (was) refit(was.input);
    refit(cell.input);
  }
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
  select(cell, document.activeElement === cell.input ? 'edit' : 'command');
  // Saved at once: an order is not merged cell by cell as edits are.
  touched(cell);
  saveNotebook(true);
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

export function setRunning (cell, running) {
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

export function runCells (cells) {
  for (const c of cells) runCell(c);
}

export async function restartAndRunAll () {
  if (await kernelAction('restart')) runCells(state.cells);
}

export function clearAllOutputs () {
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
export function request (type, content) {
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

export function clearOutputs (cell, wait) {
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
export function addOutput (cell, o, displayId, restoring) {
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

export function updateDisplay (c) {
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

export function askInput (cell, c, header) {
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
