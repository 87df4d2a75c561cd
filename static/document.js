// The notebook as a document: kept in this browser's storage (merged with
// other tabs' edits), named in the address, opened from and saved to .ipynb.
import { el } from './render.js';
import { parseIpynb, toIpynb, boundedOutputs, newCellId } from './notebook.js';
import { base, notice, state, storeKey, ui } from './shared.js';
import { displayName, selectKernel } from './app.js';
import { addOutput, autosize, clearOutputs, drawSource, makeCell, renderMarkdownCell, setCount, setType } from './cells.js';

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
export function saveNotebook (now) {
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
// The other tabs on this notebook, by tab id: their kernel, whether they
// are finding or starting one; and this tab's waits for another's kernel.
const peers = new Map();
const kernelWaits = [];
// Tells the other tabs on this notebook what this one is at ("hello" when
// it opens, "here" in answer, "starting", "kernel" once it has one).
export function tellTabs (type) {
  if (channel) channel.postMessage({ type, notebook: state.name, tab: state.tab, kernel: state.kernel || null, finding: state.finding, starting: state.starting });
}
if (channel) {
  channel.onmessage = (ev) => {
    const m = ev.data || {};
    if (m.notebook !== state.name || m.tab === state.tab) return;
    peers.set(m.tab, { kernel: m.kernel || null, finding: !!m.finding, starting: !!m.starting });
    if (m.type === 'hello') tellTabs('here');
    if (m.type === 'hello' || m.type === 'here') tellOtherTab();
    if (m.type === 'kernel') for (const done of kernelWaits.splice(0)) done(m.kernel || null);
  };
}

// For a notebook without a kernel, before starting one: another tab on it
// may have one, or be starting one (two tabs opened at once, neither
// finding a kernel in the notebook). Resolves with that kernel's id, or
// null when this tab is to start it: one already starting goes on, else
// the first by tab id of those finding one starts and the others wait for
// it (a minute at most).
export async function kernelFromAnotherTab () {
  if (!channel) return null;
  await new Promise((resolve) => setTimeout(resolve, 150)); // their answers to our hello
  const others = [...peers.entries()];
  const has = others.find(([, p]) => p.kernel);
  if (has) return has[1].kernel;
  if (!others.some(([tab, p]) => p.starting || (p.finding && tab < state.tab))) return null;
  return new Promise((resolve) => {
    const done = (id) => { clearTimeout(timer); resolve(id); };
    const timer = setTimeout(() => { kernelWaits.splice(kernelWaits.indexOf(done), 1); resolve(null); }, 60000);
    kernelWaits.push(done);
  });
}

// The address names the notebook and its kernel: a reload or a copied
// link comes back to both.
export function updateUrl () {
  const url = new URL(location.href);
  url.searchParams.set('notebook', state.name);
  if (state.kernel) url.searchParams.set('kernel', state.kernel);
  else url.searchParams.delete('kernel');
  history.replaceState(null, '', url.pathname + url.search + url.hash);
  document.title = `${state.name.replace(/\.ipynb$/, '')} · Glovebox`;
}

export function cleanName (name) {
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
export function openNotebook (name) {
  saveNotebook(true);
  const url = new URL(location.href);
  url.search = '';
  url.searchParams.set('notebook', name);
  location.assign(url.pathname + url.search);
}

export function loadNotebook (name) {
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
  tellTabs('hello');
}

function renderNotebookList () {
  ui.notebookSelect.replaceChildren(...storedNames().map((n) => {
    const opt = el('option', { value: n, text: n.replace(/\.ipynb$/, '') });
    if (n === state.name) opt.selected = true;
    return opt;
  }), el('option', { value: '', text: '+ New notebook' }));
}

export function renameNotebook () {
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

export function newNotebook () {
  const name = uniqueName('Untitled.ipynb');
  localStorage.setItem(notebookKey(name), JSON.stringify({ rev: 1, tab: state.tab, nb: toIpynb([{ id: newCellId(), type: 'code', source: '', outputs: [] }], {}) }));
  openNotebook(name);
}

// Opens an .ipynb file (from the picker or a drop) as a new notebook of
// this browser, with a kernel of its own.
export async function openFile (file) {
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

export function downloadNotebook () {
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
