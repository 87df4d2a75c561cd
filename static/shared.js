// What every part of the page shares: the base URL, the elements it
// drives, its state, and how it tells and asks the person using it.


export const base = new URL('.', location.href); // "<base-url>/": every route is relative to it
export const storeKey = (what) => `glovebox.${what}:${base.pathname}`;
export const MAX_TEXT = 1 << 20; // characters of stream text shown per cell

export const $ = (id) => document.getElementById(id);
export const ui = {
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

export const state = {
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
  // The msg_id of the last message this page handled on that session: a
  // reconnect (or the page after a reload) names it, and the gateway sends
  // again what it wrote after it, which the page may never have read.
  lastMsgId: null,
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
  // Until it has a kernel: finding one (the tabs on a notebook opened at
  // once agree on one), starting one.
  finding: true,
  starting: false,
  dirty: new Set(), // ids of cells this tab changed since it last saved
  removed: new Set(), // ids of cells this tab deleted since it last saved
  metadata: {},
  language: 'python'
};

export function uuid () {
  return crypto.randomUUID ? crypto.randomUUID().replace(/-/g, '')
    : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}


// One line of news at the top; `action` is an optional [label, fn] button.
export function notice (text, action) {
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
export function confirmDialog (title, message, action) {
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
