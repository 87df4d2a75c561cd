// @jupyterlab/services 7 (KernelManager, SessionManager) against a real
// glovebox, over both WebSocket formats: the v1.kernel.websocket.jupyter.org
// subprotocol (what the client negotiates when offered) and the default JSON
// format (forced by a WebSocket subclass that offers no subprotocol).
//
// The test starts its own glovebox (GLOVEBOX_BUILD, default /work/main/build)
// on a free 127.0.0.1 port with a random token and stops it at the end.

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import WebSocket from 'ws';
import { coldArgs, freePort } from '../glovebox.mjs';
import {
  KernelManager,
  SessionManager,
  SessionAPI,
  KernelAPI,
  ServerConnection
} from '@jupyterlab/services';

const V1 = 'v1.kernel.websocket.jupyter.org';
const BUILD = process.env.GLOVEBOX_BUILD || '/work/main/build';
const BINARY = path.join(BUILD, 'glovebox');
const TOKEN = crypto.randomBytes(16).toString('hex');

let gb = null; // the glovebox child process
let gbLog = ''; // everything it printed
let logFile = null;
let baseUrl = null;
let gbExit = null; // how glovebox exited

// ---------------------------------------------------------------- helpers

function sleep(ms) {
  return new Promise(r => setTimeout(r, ms));
}

/** Resolve with `p`, or reject after `ms` with a message naming `what`. */
function within(p, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** A raw REST call, independent of @jupyterlab/services. */
async function api(method, route, body) {
  const init = { method, headers: { Authorization: `token ${TOKEN}` } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(baseUrl + route, init);
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  return { status: res.status, json, text };
}

async function kernelIds() {
  const r = await api('GET', 'api/kernels');
  assert.equal(r.status, 200, `GET /api/kernels: ${r.status} ${r.text}`);
  assert.ok(Array.isArray(r.json), `GET /api/kernels is not a list: ${r.text}`);
  return r.json.map(k => k.id);
}

/**
 * A `ws` WebSocket subclass that records what each connection offered, what
 * the server chose and whether the frames it received were text or binary.
 * In 'json' mode it drops the offered subprotocols, so the server must fall
 * back to the default JSON format.
 */
function recordingWebSocket(mode, connections) {
  return class RecordingWebSocket extends WebSocket {
    constructor(url, protocols, options) {
      const offered = protocols === undefined ? [] : [].concat(protocols);
      const sent = mode === 'json' ? [] : offered;
      super(url, sent, options);
      const entry = {
        url: String(url),
        offered,
        sent,
        protocol: null,
        textFrames: 0,
        binaryFrames: 0
      };
      connections.push(entry);
      this.on('open', () => {
        entry.protocol = this.protocol;
      });
      this.on('message', (_data, isBinary) => {
        if (isBinary) entry.binaryFrames++;
        else entry.textFrames++;
      });
    }
  };
}

/** Collect everything a future publishes, and its reply. */
async function execute(kernel, code, ms = 20000) {
  const iopub = [];
  const future = kernel.requestExecute({ code });
  future.onIOPub = msg => {
    iopub.push(msg);
  };
  const reply = await within(future.done, ms, `execute ${JSON.stringify(code)}`);
  return { future, iopub, reply };
}

function ofType(msgs, type) {
  return msgs.filter(m => m.header.msg_type === type);
}

// ---------------------------------------------------------------- glovebox

before(async () => {
  assert.ok(fs.existsSync(BINARY), `no glovebox binary at ${BINARY}`);
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}/`;
  logFile = path.join(os.tmpdir(), `glovebox-node-${port}.log`);
  const out = fs.createWriteStream(logFile);
  gb = spawn(
    BINARY,
    ['--listen', `127.0.0.1:${port}`, '--token', TOKEN, '--log-level', 'debug', ...coldArgs()],
    { stdio: ['ignore', 'pipe', 'pipe'] }
  );
  const onData = d => {
    gbLog += d.toString();
    out.write(d);
  };
  gb.stdout.on('data', onData);
  gb.stderr.on('data', onData);
  await within(
    new Promise((resolve, reject) => {
      gb.on('exit', code => reject(new Error(`glovebox exited (${code}):\n${gbLog}`)));
      const check = () => {
        if (gbLog.includes('Glovebox is serving at')) resolve();
        else setTimeout(check, 20);
      };
      check();
    }),
    15000,
    'glovebox to start'
  );
  gb.removeAllListeners('exit');
  gb.on('exit', (code, signal) => {
    gbExit = { code, signal };
  });
});

// If this process is stopped early, do not leave glovebox behind.
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    if (gb && gb.exitCode === null) gb.kill('SIGKILL');
    process.exit(130);
  });
}
process.once('exit', () => {
  if (gb && gb.exitCode === null && gb.signalCode === null) gb.kill('SIGKILL');
});

after(async () => {
  if (gb && gb.exitCode === null) {
    gb.kill('SIGTERM');
    const timer = setTimeout(() => gb.kill('SIGKILL'), 5000);
    await once(gb, 'exit');
    clearTimeout(timer);
  }
  console.log(`glovebox log: ${logFile}; exit ${JSON.stringify(gbExit)}`);
});

/** The format glovebox logged for a client session ("v1" or "json"). */
function loggedFormats(clientId) {
  const re = /client connected \((\w+) format, session (\S+)\)/g;
  const found = [];
  for (const m of gbLog.matchAll(re)) {
    if (clientId.startsWith(m[2])) found.push(m[1]);
  }
  return found;
}

// ---------------------------------------------------------------- the scenarios

/**
 * The kernel life cycle, on a kernel connection obtained by `start`.
 * `ctx` is shared with the caller: ctx.kernel, ctx.statuses, ...
 */
function lifecycle(mode, ctx, { start, shutdown, statusSignal, deadAfterShutdown }) {
  test('start a kernel', { timeout: 30000 }, async () => {
    await start();
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel connection');
    assert.match(kernel.id, /^[0-9a-f-]{32,36}$/);
    assert.equal(kernel.name, 'python3');
    ctx.statuses = [];
    ctx.iopubStatuses = [];
    statusSignal().connect((_, s) => ctx.statuses.push(s));
    kernel.iopubMessage.connect((_, msg) => {
      if (msg.header.msg_type === 'status') ctx.iopubStatuses.push(msg.content.execution_state);
    });
    const info = await within(kernel.info, 20000, 'kernel_info_reply');
    assert.equal(info.status, 'ok');
    assert.equal(info.language_info.name, 'python');
    assert.equal(kernel.connectionStatus, 'connected');
    assert.ok((await kernelIds()).includes(kernel.id), 'kernel not in GET /api/kernels');
  });

  test(`the connection negotiated the ${mode === 'v1' ? V1 : 'JSON'} format`, () => {
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel');
    const mine = ctx.connections.filter(c => c.url.includes(`/api/kernels/${kernel.id}/channels`));
    assert.ok(mine.length >= 1, 'no WebSocket opened for the kernel');
    const c = mine[mine.length - 1];
    // What the client offered: services 7 always offers v1.
    assert.deepEqual(c.offered, [V1]);
    assert.match(c.url, new RegExp(`session_id=${kernel.clientId}`));
    const expected = mode === 'v1' ? V1 : '';
    // What the server chose, as the ws handshake saw it and as the
    // KernelConnection itself uses it to pick its serializer.
    assert.equal(c.protocol, expected);
    assert.equal(kernel._ws.protocol, expected);
    assert.equal(kernel._selectedProtocol, expected);
    // What actually came over the wire (no message here carries buffers).
    if (mode === 'v1') {
      assert.ok(c.binaryFrames > 0, 'no binary frame received');
      assert.equal(c.textFrames, 0, 'text frames received on a v1 connection');
    } else {
      assert.ok(c.textFrames > 0, 'no text frame received');
      assert.equal(c.binaryFrames, 0, 'binary frames received on a JSON connection');
    }
    // And what glovebox says it chose.
    const formats = loggedFormats(kernel.clientId);
    assert.ok(formats.length >= 1, `glovebox logged no connection for session ${kernel.clientId}`);
    assert.deepEqual([...new Set(formats)], [mode === 'v1' ? 'v1' : 'json']);
  });

  test('execute print("hi") and 1+1: iopub stream, execute_result and reply', { timeout: 30000 }, async () => {
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel');
    const before = ctx.statuses.length;
    const { future, iopub, reply } = await execute(kernel, 'print("hi")\n1+1');
    const id = future.msg.header.msg_id;
    assert.ok(iopub.length > 0, 'no iopub message');
    for (const m of iopub) assert.equal(m.parent_header.msg_id, id);
    const streams = ofType(iopub, 'stream');
    assert.equal(streams.length, 1, `streams: ${JSON.stringify(streams.map(m => m.content))}`);
    assert.equal(streams[0].content.name, 'stdout');
    assert.equal(streams[0].content.text, 'hi\n');
    const results = ofType(iopub, 'execute_result');
    assert.equal(results.length, 1);
    assert.equal(results[0].content.data['text/plain'], '2');
    const inputs = ofType(iopub, 'execute_input');
    assert.equal(inputs.length, 1);
    assert.equal(inputs[0].content.code, 'print("hi")\n1+1');
    const states = ofType(iopub, 'status').map(m => m.content.execution_state);
    assert.deepEqual(states, ['busy', 'idle']);
    assert.equal(reply.header.msg_type, 'execute_reply');
    assert.equal(reply.channel, 'shell');
    assert.equal(reply.parent_header.msg_id, id);
    assert.equal(reply.content.status, 'ok');
    assert.equal(reply.content.execution_count, results[0].content.execution_count);
    ctx.execStatuses = ctx.statuses.slice(before);
  });

  test('a kernel status change is seen on the connection', () => {
    assert.ok(ctx.kernel, 'no kernel');
    const seen = ctx.execStatuses || [];
    const busy = seen.indexOf('busy');
    assert.ok(busy >= 0, `no busy status: ${JSON.stringify(seen)}`);
    assert.ok(seen.indexOf('idle', busy) > busy, `no idle after busy: ${JSON.stringify(seen)}`);
    assert.ok(ctx.iopubStatuses.includes('busy') && ctx.iopubStatuses.includes('idle'));
    assert.equal(ctx.kernel.status, 'idle');
  });

  test('interrupt time.sleep(60): KeyboardInterrupt within 5 s', { timeout: 30000 }, async () => {
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel');
    const iopub = [];
    const future = kernel.requestExecute({ code: 'import time\ntime.sleep(60)' });
    future.onIOPub = msg => {
      iopub.push(msg);
    };
    // The cell is running once the kernel has published its execute_input.
    await waitFor(() => ofType(iopub, 'execute_input').length > 0, 10000, 'execute_input');
    await sleep(300);
    const t0 = Date.now();
    await kernel.interrupt();
    const reply = await within(future.done, 5000, 'the interrupted execute_reply');
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 5000, `took ${elapsed} ms`);
    assert.equal(reply.content.status, 'error');
    assert.equal(reply.content.ename, 'KeyboardInterrupt');
    const errors = ofType(iopub, 'error');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].content.ename, 'KeyboardInterrupt');
    // The kernel survived the interrupt.
    const after = await execute(kernel, '6*7');
    assert.equal(after.reply.content.status, 'ok');
    assert.equal(ofType(after.iopub, 'execute_result')[0]?.content.data['text/plain'], '42');
  });

  test('restart: a variable set before is gone after (NameError)', { timeout: 60000 }, async () => {
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel');
    const id = kernel.id;
    const set = await execute(kernel, 'glovebox_x = 1234\nglovebox_x');
    assert.equal(set.reply.content.status, 'ok');
    assert.equal(ofType(set.iopub, 'execute_result')[0]?.content.data['text/plain'], '1234');
    assert.ok(set.reply.content.execution_count > 1);
    const mark = ctx.statuses.length;
    await within(kernel.restart(), 30000, 'kernel.restart()');
    assert.equal(kernel.id, id, 'the kernel id changed on restart');
    const after = await execute(kernel, 'glovebox_x');
    assert.equal(after.reply.content.status, 'error');
    assert.equal(after.reply.content.ename, 'NameError');
    // A fresh interpreter counts executions from 1 again.
    assert.equal(after.reply.content.execution_count, 1);
    const errors = ofType(after.iopub, 'error');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].content.ename, 'NameError');
    assert.equal(kernel.connectionStatus, 'connected');
    const r = await api('GET', `api/kernels/${id}`);
    assert.equal(r.status, 200);
    assert.equal(r.json.id, id);
    ctx.restartStatuses = ctx.statuses.slice(mark);
  });

  // KernelConnection treats an iopub status "restarting" as the server's
  // automatic restart of a dead kernel (status "autorestarting", state
  // cleared, a second reconnect). Jupyter Server publishes it only from its
  // auto-restarter, never for POST /api/kernels/{id}/restart.
  test('a requested restart is not reported as an automatic restart', () => {
    assert.ok(ctx.restartStatuses, 'the restart test did not run to its end');
    assert.ok(ctx.restartStatuses.includes('restarting'), JSON.stringify(ctx.restartStatuses));
    assert.ok(
      !ctx.restartStatuses.includes('autorestarting'),
      `statuses during kernel.restart(): ${JSON.stringify(ctx.restartStatuses)}`
    );
  });

  test('shutdown: the kernel disappears from GET /api/kernels', { timeout: 30000 }, async () => {
    const kernel = ctx.kernel;
    assert.ok(kernel, 'no kernel');
    const id = kernel.id;
    assert.ok((await kernelIds()).includes(id), 'kernel not listed before shutdown');
    await within(shutdown(), 20000, 'shutdown');
    assert.ok(kernel.isDisposed, 'kernel connection not disposed');
    // KernelConnection.shutdown() marks the kernel dead; a session's
    // shutdown only disposes of its kernel connection.
    if (deadAfterShutdown) assert.equal(kernel.status, 'dead');
    assert.ok(!(await kernelIds()).includes(id), 'kernel still in GET /api/kernels');
    const r = await api('GET', `api/kernels/${id}`);
    assert.equal(r.status, 404);
    await ctx.kernelManager.refreshRunning();
    assert.ok(![...ctx.kernelManager.running()].some(m => m.id === id));
  });
}

function suite(mode) {
  describe(`${mode === 'v1' ? 'v1 subprotocol' : 'JSON format'}`, () => {
    const connections = [];
    let serverSettings, kernelManager, sessionManager;

    before(() => {
      serverSettings = ServerConnection.makeSettings({
        baseUrl,
        wsUrl: baseUrl.replace(/^http/, 'ws'),
        token: TOKEN,
        appendToken: true,
        WebSocket: recordingWebSocket(mode, connections),
        fetch,
        Request,
        Headers
      });
      kernelManager = new KernelManager({ serverSettings, standby: 'never' });
      sessionManager = new SessionManager({ kernelManager, serverSettings, standby: 'never' });
    });

    after(() => {
      sessionManager?.dispose();
      kernelManager?.dispose();
    });

    describe('KernelManager', () => {
      const ctx = { connections };
      lifecycle(mode, ctx, {
        start: async () => {
          ctx.kernelManager = kernelManager;
          ctx.kernel = await kernelManager.startNew({ name: 'python3' });
        },
        shutdown: () => ctx.kernel.shutdown(),
        statusSignal: () => ctx.kernel.statusChanged,
        deadAfterShutdown: true
      });
    });

    describe('SessionManager', () => {
      const ctx = { connections };
      lifecycle(mode, ctx, {
        start: async () => {
          ctx.kernelManager = kernelManager;
          ctx.session = await sessionManager.startNew({
            path: `glovebox-${mode}.ipynb`,
            type: 'notebook',
            name: `glovebox-${mode}`,
            kernel: { name: 'python3' }
          });
          assert.equal(ctx.session.path, `glovebox-${mode}.ipynb`);
          assert.equal(ctx.session.type, 'notebook');
          ctx.kernel = ctx.session.kernel;
        },
        // DELETE /api/sessions/{id}: Jupyter Server shuts the kernel down too.
        shutdown: async () => {
          const sid = ctx.session.id;
          await ctx.session.shutdown();
          const r = await api('GET', `api/sessions/${sid}`);
          assert.equal(r.status, 404, `GET /api/sessions/${sid} after DELETE: ${r.status} ${r.text}`);
        },
        statusSignal: () => ctx.session.statusChanged,
        deadAfterShutdown: false
      });

      test('sessions REST: GET list and one, PATCH path/name/type, kernel.id, change kernel, DELETE', { timeout: 60000 }, async () => {
        const client = new SessionAPI.SessionAPIClient({ serverSettings });
        // POST with kernel.id: attach a session to a running kernel.
        const k = await kernelManager.startNew({ name: 'python3' });
        const path1 = `by-id-${mode}.ipynb`;
        const s = await sessionManager.startNew({
          path: path1,
          type: 'notebook',
          name: 'by-id',
          kernel: { id: k.id }
        });
        assert.equal(s.kernel.id, k.id, 'the session did not take the kernel it was given');
        assert.equal(s.path, path1);
        assert.equal(s.name, 'by-id');
        assert.equal(s.type, 'notebook');
        // The session's kernel works.
        const run = await execute(s.kernel, '3*3');
        assert.equal(ofType(run.iopub, 'execute_result')[0]?.content.data['text/plain'], '9');

        // GET one and GET list.
        const one = await client.getModel(s.id);
        assert.equal(one.id, s.id);
        assert.equal(one.path, path1);
        assert.equal(one.kernel.id, k.id);
        const list = await client.listRunning();
        assert.ok(list.some(m => m.id === s.id && m.kernel.id === k.id), 'session not in GET /api/sessions');
        await sessionManager.refreshRunning();
        assert.ok([...sessionManager.running()].some(m => m.id === s.id));
        assert.ok(await sessionManager.findByPath(path1));

        // PATCH path, name, type.
        const path2 = `renamed-${mode}.ipynb`;
        await s.setPath(path2);
        await s.setName('renamed');
        await s.setType('console');
        const patched = await client.getModel(s.id);
        assert.equal(patched.path, path2);
        assert.equal(patched.name, 'renamed');
        assert.equal(patched.type, 'console');
        assert.equal(patched.kernel.id, k.id, 'PATCH of the path changed the kernel');
        assert.equal(s.path, path2);

        // PATCH kernel.name: a new kernel, the old one shut down.
        const newKernel = await within(s.changeKernel({ name: 'python3' }), 30000, 'changeKernel');
        assert.ok(newKernel, 'changeKernel gave no kernel');
        assert.notEqual(newKernel.id, k.id, 'changeKernel kept the old kernel');
        const ids = await kernelIds();
        assert.ok(ids.includes(newKernel.id), 'the new kernel is not running');
        assert.ok(!ids.includes(k.id), 'the old kernel is still running after changeKernel');
        const changed = await client.getModel(s.id);
        assert.equal(changed.kernel.id, newKernel.id);
        assert.equal(changed.path, path2);
        const run2 = await execute(newKernel, '5*5');
        assert.equal(ofType(run2.iopub, 'execute_result')[0]?.content.data['text/plain'], '25');

        // DELETE: the session and its kernel are gone.
        const sid = s.id;
        await s.shutdown();
        const gone = await api('GET', `api/sessions/${sid}`);
        assert.equal(gone.status, 404);
        assert.ok(!(await client.listRunning()).some(m => m.id === sid));
        assert.ok(!(await kernelIds()).includes(newKernel.id), 'the session kernel survived DELETE');
        k.dispose();
      });
    });
  });
}

suite('v1');
suite('json');

// REST only, so it runs once. fetch sends "Content-Length: 0" with a POST
// that has no body, which is how KernelConnection.restart() asks for a
// restart (restartKernel in lib/kernel/restapi.js).
describe('REST', () => {
  test('two concurrent restarts of one kernel are both answered', { timeout: 30000 }, async () => {
    const settings = (signal) =>
      ServerConnection.makeSettings({
        baseUrl,
        wsUrl: baseUrl.replace(/^http/, 'ws'),
        token: TOKEN,
        init: { cache: 'no-store', credentials: 'same-origin', signal },
        fetch,
        Request,
        Headers
      });
    const started = await api('POST', 'api/kernels', { name: 'python3' });
    assert.equal(started.status, 201, started.text);
    const id = started.json.id;
    const aborts = [new AbortController(), new AbortController()];
    try {
      const results = await Promise.allSettled(
        aborts.map((ac, i) =>
          within(KernelAPI.restartKernel(id, settings(ac.signal)), 10000, `restart #${i + 1}`)
        )
      );
      const failed = results
        .map((r, i) => (r.status === 'rejected' ? `#${i + 1}: ${r.reason.message}` : null))
        .filter(Boolean);
      assert.deepEqual(failed, [], 'a restart request was not answered');
      const r = await api('GET', `api/kernels/${id}`);
      assert.equal(r.status, 200);
      assert.equal(r.json.execution_state, 'idle');
    } finally {
      // Close any request still waiting while its kernel exists.
      for (const ac of aborts) ac.abort();
      await sleep(100);
      await api('DELETE', `api/kernels/${id}`);
    }
  });
});

// Every language's kernelspec through KernelManager, as JupyterLab starts
// them: Glovebox's own bash kernel, Debian's IRkernel, npm's ijavascript
// and tslab (TCP-only kernels, bridged to the gateway's ipc sockets inside
// their sandbox). scripts/test installs them; a missing one is skipped.
describe('every language', () => {
  let kernelManager, specs;
  before(async () => {
    const serverSettings = ServerConnection.makeSettings({
      baseUrl,
      wsUrl: baseUrl.replace(/^http/, 'ws'),
      token: TOKEN,
      appendToken: true,
      WebSocket: recordingWebSocket('v1', []),
      fetch,
      Request,
      Headers
    });
    kernelManager = new KernelManager({ serverSettings, standby: 'never' });
    specs = (await api('GET', 'api/kernelspecs')).json.kernelspecs;
  });
  after(() => kernelManager?.dispose());

  const cases = [
    ['python3', 'python', 'print(6 * 7)'],
    ['bash', 'bash', 'echo $((6 * 7))'],
    ['ir', 'R', 'cat(6 * 7, "\\n")'],
    ['javascript', 'javascript', 'console.log(6 * 7)'],
    ['tslab', 'typescript', 'const n: number = 6 * 7; console.log(n)']
  ];
  for (const [name, language, code] of cases) {
    test(`${name} (${language})`, { timeout: 60000 }, async (t) => {
      if (!specs[name]) {
        t.skip(`kernelspec ${name} is not installed`);
        return;
      }
      assert.equal(specs[name].spec.language, language);
      const kernel = await within(kernelManager.startNew({ name }), 30000, `start ${name}`);
      try {
        const info = await within(kernel.info, 20000, `${name} kernel_info`);
        assert.equal(info.status, 'ok');
        assert.equal(info.language_info.name.toLowerCase(), language.toLowerCase());
        const run = await execute(kernel, code, 30000);
        assert.equal(run.reply.content.status, 'ok', JSON.stringify(run.reply.content));
        const text = ofType(run.iopub, 'stream').map(m => m.content.text).join('');
        assert.equal(text.trim(), '42');
      } finally {
        await kernel.shutdown();
        kernel.dispose();
      }
    });
  }
});
