// What the page builds from text it does not trust (kernel output, notebook
// files, Markdown cells): DOM nodes only, never markup through innerHTML.
// ANSI colour escapes become classes; Markdown becomes elements.

export function el (tag, props, ...children) {
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

// ---- a kernel's outputs by MIME type ------------------------------------

const MIME_ORDER = ['text/html', 'text/markdown', 'image/svg+xml', 'image/png', 'image/jpeg',
  'application/json', 'text/plain'];

export function mimeElement (data, metadata) {
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

export function joined (v) {
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

// A carriage return rewrites its line, as in a terminal (progress bars).
export function carriageReturns (text) {
  return text.replace(/\r\n/g, '\n').split('\n').map((line) => {
    const parts = line.split('\r');
    let out = '';
    for (const p of parts) out = p + out.slice(p.length);
    return line.endsWith('\r') ? `${out}\r` : out;
  }).join('\n');
}

// ---- ANSI escapes: colours and bold become classes; every other escape
// sequence is dropped, never shown. ---------------------------------------

const ESCAPES = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;
const BASIC = [0, 1, 2, 3, 4, 5, 6, 7];

export function ansi (text) {
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

export function markdown (src) {
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
