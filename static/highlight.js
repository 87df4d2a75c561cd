// A small syntax highlighter for the code cells: one regular expression
// splits the source into comments, strings, numbers, decorators and names;
// names that are keywords, constants or builtins get a class. The result is
// a fragment of text nodes and spans (no markup), drawn in a <pre> under a
// transparent <textarea>, so typing, selection, undo and IME stay the
// browser's own. Python is highlighted fully; other languages get comments,
// strings and numbers.

const PY_KEYWORDS = new Set(('and as assert async await break class continue def del elif else except ' +
  'finally for from global if import in is lambda match case nonlocal not or pass raise return try ' +
  'while with yield').split(' '));
const PY_CONSTANTS = new Set(['True', 'False', 'None', 'self', 'cls']);
const PY_BUILTINS = new Set(('abs all any bin bool bytearray bytes callable chr classmethod dict dir ' +
  'divmod enumerate eval exec filter float format frozenset getattr globals hasattr hash help hex id ' +
  'input int isinstance issubclass iter len list locals map max min next object oct open ord pow ' +
  'print property range repr reversed round set setattr slice sorted staticmethod str sum super ' +
  'tuple type vars zip Exception ValueError TypeError KeyError IndexError RuntimeError').split(' '));

const STRING = String.raw`(?:[rRbBuUfF]{1,2})?(?:'''[\s\S]*?(?:'''|$(?![\s\S]))|"""[\s\S]*?(?:"""|$(?![\s\S]))|'(?:\\.|[^'\\\n])*'?|"(?:\\.|[^"\\\n])*"?)`;
const NUMBER = String.raw`\b(?:0[xXoObB][\da-fA-F_]+|\d[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?[jJ]?)|\.\d[\d_]*(?:[eE][+-]?\d+)?`;

function rules (comment) {
  return new RegExp(`(${comment}[^\\n]*)|(${STRING})|(${NUMBER})|(@[A-Za-z_][\\w.]*)|([A-Za-z_]\\w*)`, 'g');
}

const LANGUAGES = {
  python: { re: rules('#'), names: true },
  javascript: { re: rules('//'), names: false },
  other: { re: rules('#'), names: false }
};

// Above this many characters a cell is drawn plain: typing must stay quick.
const MAX_HIGHLIGHT = 50000;

// The highlighted fragment of `code` in `language` (a kernelspec's language).
export function highlight (code, language) {
  const frag = document.createDocumentFragment();
  const lang = LANGUAGES[language] || (language === 'js' ? LANGUAGES.javascript : LANGUAGES.other);
  if (code.length > MAX_HIGHLIGHT) {
    frag.append(code);
    return frag;
  }
  const span = (cls, text) => {
    const s = document.createElement('span');
    s.className = `hl-${cls}`;
    s.textContent = text;
    return s;
  };
  let last = 0;
  let previous = '';
  for (const m of code.matchAll(lang.re)) {
    if (m.index > last) frag.append(code.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[1]) frag.append(span('comment', m[1]));
    else if (m[2]) frag.append(span('string', m[2]));
    else if (m[3]) frag.append(span('number', m[3]));
    else if (m[4]) frag.append(span('decorator', m[4]));
    else if (!lang.names) frag.append(m[5]);
    else if (previous === 'def' || previous === 'class') frag.append(span('def', m[5]));
    else if (PY_KEYWORDS.has(m[5])) frag.append(span('keyword', m[5]));
    else if (PY_CONSTANTS.has(m[5])) frag.append(span('constant', m[5]));
    else if (PY_BUILTINS.has(m[5])) frag.append(span('builtin', m[5]));
    else frag.append(m[5]);
    previous = m[5] || '';
  }
  frag.append(code.slice(last));
  // A final newline would be swallowed by the <pre>; the textarea shows the
  // empty line, so the <pre> must too.
  if (code.endsWith('\n') || !code) frag.append(' ');
  return frag;
}
