// Notebooks as documents: nbformat 4 in and out, and the copy kept in this
// browser's storage (bounded: see STORED_OUTPUT_CHARS).

// Outputs kept in the browser per cell, and for the whole notebook, in
// characters of JSON. localStorage holds about 5 MB per origin for every
// notebook and the token together; a cell whose outputs are larger keeps a
// note saying so instead (the downloaded .ipynb keeps them whole).
export const STORED_OUTPUT_CHARS = 256 * 1024;
export const STORED_NOTEBOOK_CHARS = 2 * 1024 * 1024;

export function newCellId () {
  return Math.random().toString(36).slice(2, 10) + Date.now().toString(36).slice(-4);
}

function text (v) {
  if (Array.isArray(v)) return v.map(String).join('');
  return v == null ? '' : String(v);
}

// nbformat stores multi-line strings as lists of lines, each with its "\n".
function lines (s) {
  return s.match(/[^\n]*\n|[^\n]+$/g) || [];
}

function cleanOutput (o) {
  if (!o || typeof o !== 'object') return null;
  switch (o.output_type) {
    case 'stream':
      return { output_type: 'stream', name: o.name === 'stderr' ? 'stderr' : 'stdout', text: text(o.text) };
    case 'display_data':
    case 'execute_result': {
      const data = {};
      for (const [k, v] of Object.entries(o.data || {})) data[k] = typeof v === 'object' && !Array.isArray(v) ? v : text(v);
      const out = { output_type: o.output_type, data, metadata: o.metadata && typeof o.metadata === 'object' ? o.metadata : {} };
      if (o.output_type === 'execute_result') out.execution_count = Number.isInteger(o.execution_count) ? o.execution_count : null;
      return out;
    }
    case 'error':
      return {
        output_type: 'error',
        ename: text(o.ename),
        evalue: text(o.evalue),
        traceback: Array.isArray(o.traceback) ? o.traceback.map(String) : []
      };
    default:
      return null;
  }
}

// Reads an .ipynb (nbformat 4) into the page's cells:
// [{id, type, source, outputs, count, metadata}]. Throws with a reason a
// person can act on.
export function parseIpynb (json) {
  let nb;
  try {
    nb = typeof json === 'string' ? JSON.parse(json) : json;
  } catch (e) {
    throw new Error(`not JSON (${e.message})`);
  }
  if (!nb || typeof nb !== 'object' || !Array.isArray(nb.cells)) throw new Error('no "cells" list: not a notebook');
  if (nb.nbformat !== 4) throw new Error(`nbformat ${nb.nbformat} (this page reads nbformat 4)`);
  const seen = new Set();
  const cells = nb.cells.filter((c) => c && ['code', 'markdown', 'raw'].includes(c.cell_type)).map((c) => {
    let id = typeof c.id === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(c.id) ? c.id : newCellId();
    if (seen.has(id)) id = newCellId();
    seen.add(id);
    return {
      id,
      type: c.cell_type === 'code' ? 'code' : 'markdown',
      source: text(c.source),
      outputs: c.cell_type === 'code' && Array.isArray(c.outputs) ? c.outputs.map(cleanOutput).filter(Boolean) : [],
      count: Number.isInteger(c.execution_count) ? c.execution_count : null,
      metadata: c.metadata && typeof c.metadata === 'object' ? c.metadata : {}
    };
  });
  return { cells, metadata: nb.metadata && typeof nb.metadata === 'object' ? nb.metadata : {} };
}

// The page's cells as an nbformat 4.5 notebook (an object; JSON.stringify
// it with one space of indent, as Jupyter does).
export function toIpynb (cells, metadata) {
  return {
    cells: cells.map((c) => {
      const cell = { cell_type: c.type, id: c.id, metadata: c.metadata || {}, source: lines(c.source) };
      if (c.type === 'code') {
        cell.execution_count = c.count ?? null;
        cell.outputs = (c.outputs || []).map((o) => {
          const out = { ...o };
          if (out.output_type === 'stream') out.text = lines(out.text);
          if (out.data) {
            out.data = { ...out.data };
            for (const [k, v] of Object.entries(out.data)) if (typeof v === 'string' && k.startsWith('text/')) out.data[k] = lines(v);
          }
          return out;
        });
      }
      return cell;
    }),
    metadata: metadata || {},
    nbformat: 4,
    nbformat_minor: 5
  };
}

// Outputs as kept in the browser: each cell's up to STORED_OUTPUT_CHARS,
// the notebook's up to STORED_NOTEBOOK_CHARS (the largest dropped first).
export function boundedOutputs (cells) {
  const sizes = cells.map((c) => (c.outputs && c.outputs.length ? JSON.stringify(c.outputs).length : 0));
  const keep = sizes.map((n) => n <= STORED_OUTPUT_CHARS);
  let total = sizes.reduce((a, n, i) => a + (keep[i] ? n : 0), 0);
  const bySize = sizes.map((n, i) => i).sort((a, b) => sizes[b] - sizes[a]);
  for (const i of bySize) {
    if (total <= STORED_NOTEBOOK_CHARS) break;
    if (keep[i]) { keep[i] = false; total -= sizes[i]; }
  }
  return cells.map((c, i) => keep[i] || !sizes[i] ? c.outputs || []
    : [{ output_type: 'stream', name: 'stdout', text: `(${Math.round(sizes[i] / 1024)} KiB of output is not kept in the browser across reloads; download the notebook to keep it)\n` }]);
}
