#!/usr/bin/env node
/*
 * Glovebox's JavaScript and TypeScript kernel: npm's ijavascript (its
 * jp-kernel and nel, which run each cell in a Node.js session and keep its
 * state), with each cell first made runnable the way E2B's template makes
 * it (E2B runs a fork of ijavascript that does the same with Babel):
 *
 *   - TypeScript: its types are taken out (npm's typescript, its
 *     transpileModule); nothing is type-checked, as in E2B.
 *   - `import` (ESM) becomes require(): `import {a as b} from 'm'` is
 *     `var {a: b} = require('m')`, a default import the module's default
 *     export (or the module, for CommonJS), `import * as ns` the module.
 *   - top-level `await`: the cell runs in an async function whose value is
 *     its last expression's, sent as the cell's result once it settles;
 *     its top-level declarations are declared outside it first (as `let`,
 *     `var` or the function itself), so later cells see them.
 *
 * A cell that Node.js compiles as it is (plain JavaScript, the common case)
 * runs untouched, as in ijavascript, and never loads the TypeScript
 * compiler; one that neither Node.js nor TypeScript can read also runs
 * untouched, so that Node.js reports its syntax error as usual.
 *
 * usage: glovebox_javascript_kernel.js [--language=typescript] CONNECTION_FILE
 */
"use strict";

const fs = require("fs");
const path = require("path");
const vm = require("vm");

/* ---- finding npm's packages ---------------------------------------------- */

// ijavascript's directory, from its ijskernel program on the PATH (npm
// links it there from wherever its global packages are).
function ijavascriptDir() {
    const dirs = (process.env.PATH || "/usr/local/bin:/usr/bin:/bin").split(":");
    for (const dir of dirs) {
        try {
            return path.dirname(path.dirname(fs.realpathSync(path.join(dir, "ijskernel"))));
        } catch (e) {
            // Not in this one.
        }
    }
    throw new Error("ijavascript is not installed (npm install -g ijavascript)");
}

const IJAVASCRIPT = ijavascriptDir();
// ijavascript's own dependencies, then the global packages beside it.
const SEARCH = [IJAVASCRIPT, path.dirname(path.dirname(IJAVASCRIPT))];

let typescript;

// npm's typescript, loaded on the first cell that needs it (a few hundred
// milliseconds); null when it is not installed.
function loadTypeScript() {
    if (typescript === undefined) {
        try {
            typescript = require(require.resolve("typescript", {paths: SEARCH}));
        } catch (e) {
            process.stderr.write("glovebox: typescript is not installed " +
                                 "(npm install -g typescript@5): cells run as they are\n");
            typescript = null;
        }
    }
    return typescript;
}

/* ---- the cell transform --------------------------------------------------- */

// Whether node (a statement) awaits outside any function of its own.
function awaitsAtTopLevel(ts, node) {
    let found = false;
    const visit = (n) => {
        if (found || ts.isFunctionLike(n) || ts.isClassStaticBlockDeclaration(n))
            return;
        if (ts.isAwaitExpression(n) || (ts.isForOfStatement(n) && n.awaitModifier)) {
            found = true;
            return;
        }
        ts.forEachChild(n, visit);
    };
    visit(node);
    return found;
}

// The names a binding (a name, or an object or array pattern) declares.
function boundNames(ts, name, out) {
    if (ts.isIdentifier(name)) {
        out.push(name.text);
    } else {
        for (const element of name.elements) {
            if (!ts.isOmittedExpression(element))
                boundNames(ts, element.name, out);
        }
    }
    return out;
}

// An import declaration as require() code.
function importAsRequire(ts, sf, decl) {
    const spec = decl.moduleSpecifier.getText(sf);
    const clause = decl.importClause;
    const parts = [];

    if (!clause)
        return `require(${spec});`;
    if (clause.isTypeOnly)
        return "";
    if (clause.name) {
        parts.push(`${clause.name.text} = ((m) => m && m.__esModule ? m.default : m)` +
                   `(require(${spec}))`);
    }
    const bindings = clause.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) {
        parts.push(`${bindings.name.text} = require(${spec})`);
    } else if (bindings) {
        const names = bindings.elements.filter((e) => !e.isTypeOnly).map((e) =>
            e.propertyName ? `${e.propertyName.getText(sf)}: ${e.name.text}` : e.name.text);
        if (names.length)
            parts.push(`{${names.join(", ")}} = require(${spec})`);
    }
    // var: running the cell again must not fail on names already declared.
    return parts.length ? `var ${parts.join(", ")};` : `require(${spec});`;
}

// Replaces the ranges of edits ({start, end, text}, in order) in code.
function applyEdits(code, edits) {
    let out = "", at = 0;
    for (const e of edits) {
        out += code.slice(at, e.start) + e.text;
        at = e.end;
    }
    return out + code.slice(at);
}

// Imports as require(), export keywords and bare export lists gone.
function withoutModuleSyntax(ts, sf, code) {
    const edits = [];
    for (const st of sf.statements) {
        if (ts.isImportDeclaration(st)) {
            edits.push({start: st.getStart(sf), end: st.end, text: importAsRequire(ts, sf, st)});
        } else if (ts.isExportDeclaration(st) && !st.moduleSpecifier) {
            edits.push({start: st.getStart(sf), end: st.end, text: ""});
        } else if (ts.canHaveModifiers(st) && ts.getModifiers(st)) {
            for (const m of ts.getModifiers(st)) {
                if (m.kind === ts.SyntaxKind.ExportKeyword ||
                    m.kind === ts.SyntaxKind.DefaultKeyword)
                    edits.push({start: m.getStart(sf), end: m.end, text: ""});
            }
        }
    }
    return applyEdits(code, edits);
}

// The cell as the body of an async function whose value is its last
// expression's, its declarations hoisted out, and the code that sends that
// value (or error) as the cell's result once it settles.
function inAsyncFunction(ts, sf, code) {
    const hoisted = [], functions = [], body = [];
    const text = (node) => code.slice(node.getStart(sf), node.end);
    const statements = sf.statements;

    statements.forEach((st, i) => {
        const last = i === statements.length - 1;
        if (ts.isVariableStatement(st)) {
            const list = st.declarationList;
            const isVar = !(list.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const));
            const names = [];
            for (const d of list.declarations) {
                boundNames(ts, d.name, names);
                if (d.initializer)
                    body.push(`(${text(d.name)} = ${text(d.initializer)});`);
            }
            if (names.length)
                hoisted.push(`${isVar ? "var" : "let"} ${names.join(", ")};`);
        } else if (ts.isFunctionDeclaration(st) && st.name) {
            functions.push(text(st));
        } else if (ts.isClassDeclaration(st) && st.name) {
            hoisted.push(`let ${st.name.text};`);
            body.push(`${st.name.text} = ${text(st)};`);
        } else if (last && ts.isExpressionStatement(st)) {
            body.push(`return (${text(st.expression)});`);
        } else {
            body.push(text(st));
        }
    });
    return [...hoisted, ...functions,
            "(function ($$) {",
            "$$.async();",
            "(async () => {",
            ...body,
            "})().then((value) => $$.sendResult(value), (error) => $$.sendError(error));",
            "})($$);"].join("\n");
}

function transpile(code) {
    try {
        new vm.Script(code);
        return code;
    } catch (e) {
        // Not plain JavaScript: TypeScript, an import or a top-level await.
    }
    const ts = loadTypeScript();
    if (!ts)
        return code;
    const out = ts.transpileModule(code, {
        compilerOptions: {
            target: ts.ScriptTarget.ES2022,
            module: ts.ModuleKind.ESNext,
            // Imports stay as written (none dropped for being unused).
            verbatimModuleSyntax: true,
        },
        fileName: "cell.ts",
        reportDiagnostics: true,
    });
    if (out.diagnostics.some((d) => d.category === ts.DiagnosticCategory.Error))
        return code;
    let js = out.outputText;
    let sf = ts.createSourceFile("cell.js", js, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
    js = withoutModuleSyntax(ts, sf, js);
    sf = ts.createSourceFile("cell.js", js, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
    if (sf.statements.some((st) => awaitsAtTopLevel(ts, st)))
        js = inAsyncFunction(ts, sf, js);
    return js;
}

/* ---- the kernel ------------------------------------------------------------- */

function main() {
    const Kernel = require(require.resolve("jp-kernel", {paths: SEARCH}));
    const args = process.argv.slice(2);
    const language = args.includes("--language=typescript") ? "typescript" : "javascript";
    const connectionFile = args.filter((a) => !a.startsWith("--")).pop();
    let version = "unknown";

    if (!connectionFile)
        throw new Error("usage: glovebox_javascript_kernel.js [--language=typescript] FILE");
    try {
        version = JSON.parse(fs.readFileSync(path.join(IJAVASCRIPT, "package.json"))).version;
    } catch (e) {
        // The banner says unknown.
    }
    const kernel = new Kernel({
        connection: JSON.parse(fs.readFileSync(connectionFile)),
        cwd: process.cwd(),
        hideExecutionResult: false,
        hideUndefined: true,
        protocolVersion: "5.1",
        transpile: transpile,
        startupCallback: function () {},
        kernelInfoReply: {
            protocol_version: "5.1",
            implementation: "glovebox-ijavascript",
            implementation_version: version,
            language_info: {
                name: language,
                version: process.versions.node,
                mimetype: language === "typescript" ? "text/typescript" : "application/javascript",
                file_extension: language === "typescript" ? ".ts" : ".js",
            },
            banner: `Glovebox ${language} (ijavascript ${version}, Node.js ${process.version})\n`,
        },
    });

    // As in ijavascript: a cell's completeness is whether Node.js can
    // compile it (jp-kernel's own answer is wrong, ijavascript issue 97).
    kernel.handlers.is_complete_request = function (request) {
        request.respond(this.iopubSocket, "status", {execution_state: "busy"});
        let status = "complete";
        try {
            new vm.Script(transpile(request.content.code));
        } catch (e) {
            status = "incomplete";
        }
        request.respond(this.shellSocket, "is_complete_reply",
                        status === "complete" ? {status} : {status, indent: ""}, {},
                        this.protocolVersion);
        request.respond(this.iopubSocket, "status", {execution_state: "idle"});
    };

    // As in ijavascript: an interrupt restarts the session (nel cannot
    // stop a running cell any other way).
    process.on("SIGINT", () => kernel.restart());
}

if (require.main === module)
    main();

module.exports = {transpile};
