// An agent written for E2B, run unchanged against a real glovebox: only the
// three environment variables point the unmodified @e2b/code-interpreter
// SDK at Glovebox.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import http from 'node:http'
import { startGlovebox } from '../glovebox.mjs'

let gateway
let Sandbox, CommandExitError, SandboxError, NotFoundError, TimeoutError

before(async () => {
  gateway = await startGlovebox()
  // The three variables, and nothing else, make an E2B agent a Glovebox one.
  process.env.E2B_API_URL = `${gateway.url}e2b`
  process.env.E2B_SANDBOX_URL = `${gateway.url}e2b`
  process.env.E2B_API_KEY = gateway.token
  ;({ Sandbox, CommandExitError, SandboxError, NotFoundError, TimeoutError } =
    await import('@e2b/code-interpreter'))
})

after(async () => {
  await gateway?.stop()
})

test('code, plots, DataFrames, errors, state, files, commands, contexts', async () => {
  const sbx = await Sandbox.create()
  try {
    let ex = await sbx.runCode('print("hello from glovebox")')
    assert.deepEqual(ex.logs.stdout, ['hello from glovebox\n'])

    ex = await sbx.runCode('x = 41\nx + 1')
    assert.equal(ex.text, '42')
    ex = await sbx.runCode('x * 2')
    assert.equal(ex.text, '82', 'state survives between calls')

    ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()')
    const png = Buffer.from(ex.results[0].png, 'base64')
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.ok(png.readUInt32BE(16) > 100 && png.readUInt32BE(20) > 100, 'a real image')

    ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})')
    assert.match(ex.results[0].html, /<table/)
    assert.match(ex.results[0].text, /a\s+b/)

    ex = await sbx.runCode('1 / 0')
    assert.equal(ex.error.name, 'ZeroDivisionError')
    assert.match(ex.error.value, /division by zero/)

    await sbx.files.write('/home/user/from-sdk.txt', 'written by files.write')
    ex = await sbx.runCode('print(open("/home/user/from-sdk.txt").read())')
    assert.deepEqual(ex.logs.stdout, ['written by files.write\n'])
    await sbx.runCode('open("/home/user/from-code.txt", "w").write("written by code")')
    assert.equal(await sbx.files.read('/home/user/from-code.txt'), 'written by code')
    const names = (await sbx.files.list('/home/user')).map((e) => e.name)
    assert.ok(names.includes('from-sdk.txt') && names.includes('from-code.txt'), names)
    assert.equal(await sbx.files.exists('/home/user/nope'), false)
    assert.equal(await sbx.files.makeDir('/home/user/d'), true)
    assert.equal(await sbx.files.makeDir('/home/user/d'), false, 'already there')
    await sbx.files.rename('/home/user/from-sdk.txt', '/home/user/d/moved.txt')
    assert.equal((await sbx.files.getInfo('/home/user/d/moved.txt')).type, 'file')
    await sbx.files.remove('/home/user/d')
    assert.equal(await sbx.files.exists('/home/user/d/moved.txt'), false)

    const ls = await sbx.commands.run('ls -la /home/user')
    assert.equal(ls.exitCode, 0)
    assert.match(ls.stdout, /from-code\.txt/)
    const who = await sbx.commands.run('id -un; echo $FOO; pwd', { envs: { FOO: 'bar' }, cwd: '/tmp' })
    assert.equal(who.stdout, 'user\nbar\n/tmp\n', 'same user as the kernel, envs and cwd')
    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'oops\n')
      return true
    })

    // A second context has its own variables and shares the files.
    const ctx = await sbx.createCodeContext()
    ex = await sbx.runCode('print(x)', { context: ctx })
    assert.equal(ex.error.name, 'NameError')
    ex = await sbx.runCode('print(open("/home/user/from-code.txt").read())', { context: ctx })
    assert.deepEqual(ex.logs.stdout, ['written by code\n'])
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  } finally {
    await sbx.kill()
  }
})

test('stdout arrives while the cell runs', async () => {
  const sbx = await Sandbox.create()
  try {
    const seen = []
    await sbx.runCode('import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.6)',
      { onStdout: (m) => seen.push([m.line.trim(), Date.now()]) })
    assert.deepEqual(seen.map((s) => s[0]), ['0', '1', '2'])
    assert.ok(seen[2][1] - seen[0][1] > 900, 'callbacks came as the lines were printed')
  } finally {
    await sbx.kill()
  }
})

test('a timeout keeps the partial output, and the sandbox carries on', async () => {
  const sbx = await Sandbox.create()
  try {
    const seen = []
    await assert.rejects(
      sbx.runCode('import time\nprint("partial", flush=True)\ntime.sleep(60)',
        { timeoutMs: 2000, onStdout: (m) => seen.push(m.line) }),
      (err) => err.name === 'TimeoutError')
    assert.deepEqual(seen, ['partial\n'])
    // The abandoned cell was interrupted: the next one runs at once.
    const start = Date.now()
    const ex = await sbx.runCode('print("next")')
    assert.deepEqual(ex.logs.stdout, ['next\n'])
    assert.ok(Date.now() - start < 10000)
  } finally {
    await sbx.kill()
  }
})

test('100 MiB files in both directions', async () => {
  const sbx = await Sandbox.create()
  try {
    const data = randomBytes(100 * 1024 * 1024)
    const digest = createHash('sha256').update(data).digest('hex')
    await sbx.files.write('/home/user/big.bin', data)
    const ex = await sbx.runCode(
      'import hashlib\nprint(hashlib.sha256(open("/home/user/big.bin", "rb").read()).hexdigest())')
    assert.deepEqual(ex.logs.stdout, [digest + '\n'])
    const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' })
    assert.equal(back.length, data.length)
    assert.equal(createHash('sha256').update(back).digest('hex'), digest)
  } finally {
    await sbx.kill()
  }
})

test('control plane: info, list, timeout, kill, unknown template', async () => {
  const sbx = await Sandbox.create({ metadata: { owner: 'tests' }, timeoutMs: 60_000 })
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { owner: 'tests' })
  const listed = await Sandbox.list({ query: { metadata: { owner: 'tests' } } }).nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId))
  await sbx.setTimeout(30_000)
  assert.ok((await sbx.getInfo()).endAt - Date.now() < 31_000)
  assert.equal(await sbx.isRunning(), true)
  await sbx.kill()
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'already gone')
  await assert.rejects(Sandbox.create('no-such-template'),
    (err) => err instanceof SandboxError && /404/.test(err.message))
})

test('a sandbox ends at its timeout', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 2000 })
  await new Promise((resolve) => setTimeout(resolve, 3500))
  await assert.rejects(sbx.getInfo(), (err) => err instanceof NotFoundError || /not found/i.test(err.message))
  assert.equal(await sbx.isRunning(), false)
})

test('no path leads out of the sandbox', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.runCode('import os\nos.symlink("/etc/shadow", "/home/user/shadow")\n' +
      'os.symlink("/proc/1/root/etc", "/home/user/procroot")')
    await assert.rejects(sbx.files.read('/home/user/shadow'), /not|no such/i)
    await assert.rejects(sbx.files.read('/home/user/procroot/hostname'), /not|no such|levels|permission denied/i)
    // ".." stops at the sandbox's root: its /etc/hostname is its own.
    assert.equal(await sbx.files.read('../../../../etc/hostname'), 'glovebox\n')
    // Writes through a planted link land inside too, or fail.
    await sbx.runCode('os.symlink("/etc", "/home/user/etc-link")')
    await assert.rejects(sbx.files.write('/home/user/etc-link/passwd', 'x'))
  } finally {
    await sbx.kill()
  }
})

test('charts, DataFrame data, commands in the background, lifetimes', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 900_000 })
  try {
    assert.equal((await sbx.getInfo()).allowInternetAccess, false, 'no network, said truthfully')
    let ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [3, 5])\n' +
      'plt.title("T")\nplt.show()')
    const chart = ex.results.find((r) => r.chart).chart
    assert.equal(chart.type, 'bar')
    assert.equal(chart.title, 'T')
    assert.deepEqual(chart.elements.map((e) => [e.label, e.value]), [['a', 3], ['b', 5]])
    ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"x": [1, 2]})')
    assert.deepEqual(ex.results[0].data, { x: [1, 2] })

    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    await sbx.runCode('v = 1', { context: ctx })
    await sbx.restartCodeContext(ctx)
    ex = await sbx.runCode('import os\nos.getcwd()', { context: ctx })
    assert.equal(ex.text, '/tmp', 'the context keeps its directory across a restart')

    const bg = await sbx.commands.run('read x; echo got $x; sleep 30', { background: true, stdin: true })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
    await sbx.commands.sendStdin(bg.pid, 'hi\n')
    await new Promise((resolve) => setTimeout(resolve, 500))
    assert.equal(await sbx.commands.kill(bg.pid), true)
    await assert.rejects(bg.wait(), (err) => err instanceof CommandExitError && err.stdout === 'got hi\n')
    await assert.rejects(sbx.commands.run('sleep 10', { timeoutMs: 1000 }),
      (err) => err instanceof TimeoutError)

    // connect never shortens a lifetime; setTimeout sets it.
    const end = (await sbx.getInfo()).endAt
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
    assert.ok((await sbx.getInfo()).endAt >= end)
    await sbx.setTimeout(60_000)
    assert.ok((await sbx.getInfo()).endAt - Date.now() < 61_000)
  } finally {
    await sbx.kill()
  }
})

// One GET to the gateway's own address with Host set to name, as a
// wildcard DNS name (or curl --resolve) sends it: [status, body].
function getByHost (name, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: gateway.port, path, headers: { Host: name, ...headers } },
      (res) => {
        let body = ''
        res.on('data', (d) => { body += d })
        res.on('end', () => resolve([res.statusCode, body]))
      })
    req.on('error', reject)
    req.end()
  })
}

test('getHost names the gateway, and reaches a server in the sandbox', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('/home/user/site/index.txt', 'from the JS SDK')
    await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/site',
      { background: true })
    const host = sbx.getHost(8000)
    assert.equal(host, `8000-${sbx.sandboxId}.localhost:${gateway.port}`, 'not E2B\'s domain')
    const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
    let status, body
    for (let i = 0; i < 150; i++) {
      ;[status, body] = await getByHost(host, '/index.txt', token)
      if (status !== 502) break
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    assert.equal(status, 200, body)
    assert.equal(body, 'from the JS SDK')
    assert.equal((await getByHost(host, '/index.txt'))[0], 403, 'a token is needed (E2B answers 403)')
  } finally {
    await sbx.kill()
  }
})

test('getMetrics reports the sandbox, and memory grows with a cell', async () => {
  const sbx = await Sandbox.create()
  try {
    // Oldest first; the last one is taken now.
    const first = (await sbx.getMetrics()).at(-1)
    assert.ok(first.cpuCount >= 1 && first.cpuUsedPct >= 0 && first.cpuUsedPct <= 100)
    assert.equal(first.memTotal, 1024 * 1024 * 1024)
    assert.ok(first.memUsed > 0 && first.diskTotal > 0 && first.diskUsed >= 0)
    const ex = await sbx.runCode('held = bytearray(100 * 1024 * 1024)')
    assert.equal(ex.error, undefined)
    const later = (await sbx.getMetrics()).at(-1)
    assert.ok(later.memUsed - first.memUsed > 90 * 1024 * 1024, JSON.stringify([first, later]))
  } finally {
    await sbx.kill()
  }
})

test('files as envd 0.6.4 serves them: metadata, streams and gzip, signed URLs', async () => {
  const sbx = await Sandbox.create()
  try {
    const info = await sbx.files.write('/home/user/m.txt', 'meta', { metadata: { Author: 'ann' } })
    assert.deepEqual(info.metadata, { author: 'ann' })
    assert.deepEqual((await sbx.files.getInfo('/home/user/m.txt')).metadata, { author: 'ann' })
    // A stream goes as octet-stream, gzip compressed when asked.
    await sbx.files.write('/home/user/s.txt', new Blob(['streamed']).stream())
    await sbx.files.write('/home/user/g.txt', 'zipped', { gzip: true })
    assert.equal(await sbx.files.read('/home/user/s.txt'), 'streamed')
    assert.equal(await sbx.files.read('/home/user/g.txt'), 'zipped')
    // Signed URLs, fetched with nothing of the sandbox's.
    let res = await fetch(await sbx.downloadUrl('/home/user/m.txt'))
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'meta')
    const form = new FormData()
    form.append('file', new Blob(['up and in']), 'up.txt')
    res = await fetch(await sbx.uploadUrl('/home/user/up dir/up.txt', { useSignatureExpiration: 60 }),
      { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal(await sbx.files.read('/home/user/up dir/up.txt'), 'up and in')
    res = await fetch(await sbx.downloadUrl('/home/user/m.txt', { useSignatureExpiration: -120 }))
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
  } finally {
    await sbx.kill()
  }
})

test('a snapshot of the files starts a new sandbox with them', async () => {
  const sbx = await Sandbox.create()
  let copy
  try {
    await sbx.files.write('/home/user/kept.txt', 'from the snapshot')
    const snap = await sbx.createSnapshot()
    copy = await Sandbox.create(snap.snapshotId)
    assert.notEqual(copy.sandboxId, sbx.sandboxId)
    assert.equal(await copy.files.read('/home/user/kept.txt'), 'from the snapshot')
    await Sandbox.deleteSnapshot(snap.snapshotId)
  } finally {
    await copy?.kill()
    await sbx.kill()
  }
})

test('pause keeps the memory, fork and snapshots copy it, auto-resume wakes it', async () => {
  const sbx = await Sandbox.create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  const made = []
  try {
    assert.equal((await sbx.runCode('import random\nx = 41\nx')).text, '41')
    // Forks, with the memory, each with its own random draws.
    const forks = await sbx.fork({ count: 2 })
    const draws = new Set()
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, String(f))
      made.push(f)
      assert.equal((await f.runCode('x + 1')).text, '42')
      draws.add((await f.runCode('random.random()')).text)
    }
    assert.equal(draws.size, 2)
    // A snapshot with the memory; a sandbox made from it.
    const snap = await sbx.createSnapshot()
    const listed = await sbx.listSnapshots().nextItems()
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
    const copy = await Sandbox.create(snap.snapshotId)
    made.push(copy)
    assert.equal((await copy.runCode('x')).text, '41')
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.deepEqual(await sbx.listSnapshots().nextItems(), [])
    // Paused at its timeout with the memory, woken by the next call. (None
    // of its commands is followed here: an open command handle's own
    // requests would wake it as soon as it paused.)
    await sbx.setTimeout(1000)
    const deadline = Date.now() + 30000
    while ((await Sandbox.getInfo(sbx.sandboxId)).state !== 'paused') {
      assert.ok(Date.now() < deadline, 'it never paused')
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    assert.equal((await sbx.runCode('x')).text, '41')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  } finally {
    for (const s of made) await s.kill().catch(() => {})
    await sbx.kill()
  }
})

test('what Glovebox lacks is refused by name', async () => {
  const sbx = await Sandbox.create()
  try {
    const calls = {
      // The SDK keeps only "400 Bad Request" of a 400's body (the Python
      // SDK shows its "languages: ..." list).
      'runCode(language: cobol)': () => sbx.runCode('1', { language: 'cobol' })
    }
    for (const [name, call] of Object.entries(calls)) {
      await assert.rejects(call(), (err) => {
        assert.match(err.message, name.includes('cobol') ? /^400 / : /not supported/, name)
        return true
      })
    }
    assert.equal((await sbx.runCode('1 + 1')).text, '2', 'the sandbox carries on')
  } finally {
    await sbx.kill()
  }
})

// Waits until the text a terminal wrote so far matches re.
async function until (read, re, what) {
  const end = Date.now() + 20_000
  while (!re.test(read())) {
    if (Date.now() > end) assert.fail(`${what}: no ${re} in ${JSON.stringify(read())}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

test('pty: a login shell on a terminal of the sandbox, input, resize, connect, ^C, kill', async () => {
  const sbx = await Sandbox.create()
  try {
    const decoder = new TextDecoder()
    const enc = (text) => new TextEncoder().encode(text)
    let out = ''
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += decoder.decode(d) } })
    await sbx.pty.sendInput(term.pid, enc('echo A$((6*7)) $(id -un) $(stat -c %U $(tty)) $PWD $TERM; tty\n'))
    await until(() => out, /A42 user user \/home\/user xterm-256color\s+\/dev\/pts\/\d+/,
      'the shell runs as the user on a terminal it owns')
    await sbx.pty.sendInput(term.pid, enc('stty size\n'))
    await until(() => out, /\s24 80\r\n/, 'the size asked at create')
    await sbx.pty.resize(term.pid, { cols: 132, rows: 40 })
    await sbx.pty.sendInput(term.pid, enc('stty size\n'))
    await until(() => out, /\s40 132\r\n/, 'the size after resize')

    // A second client follows the same terminal.
    let seen = ''
    const other = await sbx.pty.connect(term.pid, { onData: (d) => { seen += decoder.decode(d) } })
    assert.equal(other.pid, term.pid)
    await sbx.pty.sendInput(term.pid, enc('echo B$((2+3))\n'))
    await until(() => seen, /B5/, 'the connected client sees the output')
    await until(() => out, /B5/, 'and so does the first')
    await other.disconnect()

    // ^C interrupts the foreground job, and the shell goes on.
    // (A ^C that comes before the sleep starts ends the list instead.)
    await sbx.pty.sendInput(term.pid, enc('echo S$((1+1)); sleep 100\n'))
    await until(() => out, /S2\r\n/, 'the list started')
    await new Promise((resolve) => setTimeout(resolve, 100))
    await sbx.pty.sendInput(term.pid, enc('\x03'))
    await sbx.pty.sendInput(term.pid, enc('echo C$((3*3))\n'))
    await until(() => out, /C9/, 'the shell after ^C')

    assert.ok((await sbx.commands.list()).some((p) => p.pid === term.pid), 'listed')
    assert.equal(await sbx.pty.kill(term.pid), true)
    await assert.rejects(term.wait(), (err) => err instanceof CommandExitError && err.exitCode === -1)
    assert.equal(await sbx.pty.kill(term.pid), false, 'gone after the kill')

    // A shell that exits ends its terminal with its status.
    const second = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
    await sbx.pty.sendInput(second.pid, enc('exit 7\n'))
    await assert.rejects(second.wait(), (err) => err instanceof CommandExitError && err.exitCode === 7)

    // Bad input: a size past 4096, a resize of a command without a terminal.
    await assert.rejects(sbx.pty.create({ cols: 5000, rows: 24, onData: () => {} }), /pty.size/)
    const plain = await sbx.commands.run('sleep 30', { background: true })
    await assert.rejects(sbx.pty.resize(plain.pid, { cols: 10, rows: 10 }), /no terminal/)
    await assert.rejects(sbx.pty.sendInput(plain.pid, enc('x')), /no terminal/)
    await sbx.commands.kill(plain.pid)
  } finally {
    await sbx.kill()
  }
})

test('pty: a shell on a terminal runs on through a pause with the memory and into a fork', async () => {
  const sbx = await Sandbox.create()
  const decoder = new TextDecoder()
  const enc = (text) => new TextEncoder().encode(text)
  try {
    let out = ''
    const term = await sbx.pty.create({ cols: 90, rows: 30, onData: (d) => { out += decoder.decode(d) } })
    await sbx.pty.sendInput(term.pid, enc('KEPT=$((40+2)); echo set$KEPT\n'))
    await until(() => out, /set42/, 'the shell set its variable')
    await term.disconnect()
    assert.equal(await sbx.pause(), true)
    const info = await fetch(`${gateway.url}e2b/sandboxes/${sbx.sandboxId}`,
      { headers: { 'X-API-Key': gateway.token } }).then((r) => r.json())
    assert.deepEqual(info.glovebox, { memoryKept: true })
    const back = await Sandbox.connect(sbx.sandboxId)
    let after = ''
    await back.pty.connect(term.pid, { onData: (d) => { after += decoder.decode(d) } })
    await back.pty.sendInput(term.pid, enc('echo kept$KEPT $(stty size)\n'))
    await until(() => after, /kept42 30 90/, 'the shell, its variable and its size after the resume')
    // A fork's copy of the shell answers on a terminal of its own.
    const [fork] = await back.fork({ count: 1 })
    try {
      let theirs = ''
      await fork.pty.connect(term.pid, { onData: (d) => { theirs += decoder.decode(d) } })
      await fork.pty.sendInput(term.pid, enc('echo fork$KEPT\n'))
      await until(() => theirs, /fork42\r\n/, "the fork's shell")
      assert.doesNotMatch(after, /fork42\r\n/, "the source's terminal is its own")
    } finally {
      await fork.kill()
    }
    assert.equal(await back.pty.kill(term.pid), true)
    // betaPause keeps the memory as pause does; keepMemory: false the files only.
    assert.equal((await back.runCode('z = 5\nz')).text, '5')
    assert.equal(await back.betaPause(), true)
    const kept = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await kept.runCode('z')).text, '5')
    await kept.files.write('/home/user/left.txt', 'the files stay')
    assert.equal(await kept.pause({ keepMemory: false }), true)
    const fresh = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await fresh.runCode('z')).error?.name, 'NameError')
    assert.equal(await fresh.files.read('/home/user/left.txt'), 'the files stay')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('commands in the background: connect follows one, wait gets its end', async () => {
  const sbx = await Sandbox.create()
  try {
    const bg = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.4; done; exit 4',
      { background: true })
    let streamed = ''
    const again = await sbx.commands.connect(bg.pid, { onStdout: (d) => { streamed += d } })
    assert.equal(again.pid, bg.pid)
    await assert.rejects(again.wait(), (err) => {
      assert.ok(err instanceof CommandExitError)
      assert.equal(err.exitCode, 4)
      assert.match(err.stdout, /line3\n$/)
      return true
    })
    assert.match(streamed, /line3/)
    await assert.rejects(bg.wait(), (err) => err instanceof CommandExitError && err.exitCode === 4,
      'the first handle hears the end too')
    await assert.rejects(sbx.commands.connect(999999), /not found/)
  } finally {
    await sbx.kill()
  }
})

// files.watchDir: WatchDir's stream, its events named relative to the
// watched directory; a recursive watch follows subdirectories made later.
test('files.watchDir sees a create, a write and a remove, recursively too', async () => {
  const sbx = await Sandbox.create()
  const waitFor = async (events, wanted) => {
    const deadline = Date.now() + 20000
    const has = ([n, t]) => events.some(([name, type]) => name === n && type === t)
    while (!wanted.every(has)) {
      if (Date.now() > deadline) throw new Error(`wanted ${JSON.stringify(wanted)}, saw ${JSON.stringify(events)}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  try {
    await sbx.files.makeDir('/home/user/w')
    const flat = []
    const handle = await sbx.files.watchDir('/home/user/w', (e) => flat.push([e.name, e.type]))
    await sbx.files.write('/home/user/w/a.txt', 'one')
    await sbx.commands.run('echo two >> /home/user/w/a.txt')
    await sbx.files.remove('/home/user/w/a.txt')
    await waitFor(flat, [['a.txt', 'create'], ['a.txt', 'write'], ['a.txt', 'remove']])

    const deep = []
    const recursive = await sbx.files.watchDir('/home/user/w', (e) => deep.push([e.name, e.type]),
      { recursive: true })
    await sbx.files.makeDir('/home/user/w/sub')
    await waitFor(deep, [['sub', 'create']])
    await sbx.commands.run('echo x > /home/user/w/sub/b.txt; rm /home/user/w/sub/b.txt')
    await waitFor(deep, [['sub/b.txt', 'create'], ['sub/b.txt', 'write'], ['sub/b.txt', 'remove']])
    await waitFor(flat, [['sub', 'create']])
    assert.ok(!flat.some(([name]) => name.startsWith('sub/')), JSON.stringify(flat))
    await handle.stop()
    await recursive.stop()

    await assert.rejects(sbx.files.watchDir('/home/user/nope', () => {}), NotFoundError)
    await sbx.files.write('/home/user/plain.txt', 'x')
    await assert.rejects(sbx.files.watchDir('/home/user/plain.txt', () => {}), /not a directory/)
  } finally {
    await sbx.kill()
  }
})

// user: 'root' is the sandbox's own root (uid 0 of its user namespace).
test("user: 'root' runs as the sandbox's root; other names are refused", async () => {
  const sbx = await Sandbox.create()
  try {
    assert.equal((await sbx.commands.run('id -u; whoami', { user: 'root' })).stdout, '0\nroot\n')
    assert.equal((await sbx.commands.run('id -u; whoami')).stdout, '1000\nuser\n')
    await sbx.files.write('/home/user/by-root.txt', 'r', { user: 'root' })
    assert.equal((await sbx.files.getInfo('/home/user/by-root.txt')).owner, 'root')
    assert.equal(await sbx.files.read('/home/user/by-root.txt', { user: 'root' }), 'r')
    await sbx.commands.run('echo s > /home/user/mine && chmod 600 /home/user/mine')
    assert.equal((await sbx.commands.run('cat /home/user/mine', { user: 'root' })).stdout, 's\n')
    await assert.rejects(sbx.commands.run('id', { user: 'admin' }), /use 'user' or 'root'/)
    await assert.rejects(sbx.files.read('/home/user/mine', { user: 'admin' }),
      /use 'user' or 'root'/)
  } finally {
    await sbx.kill()
  }
})

// Every language the SDK names, each by the kernelspec installed for it
// (scripts/test installs r-cran-irkernel, ijavascript and tslab; the bash
// kernel is Glovebox's own): the first run of a language makes its
// default context, as E2B's code interpreter does.
test('every language: python, js, ts, r, bash', async () => {
  const sbx = await Sandbox.create()
  try {
    const cases = {
      python: 'print(6 * 7)',
      js: 'console.log(6 * 7)',
      javascript: 'console.log(6 * 7)',
      ts: 'const n: number = 6 * 7; console.log(n)',
      typescript: 'console.log(6 * 7)',
      r: 'cat(6 * 7, "\\n")',
      bash: 'echo $((6 * 7))'
    }
    for (const [language, code] of Object.entries(cases)) {
      const ex = await sbx.runCode(code, { language })
      assert.equal(ex.error, undefined, `${language}: ${ex.error?.value}`)
      assert.equal(ex.logs.stdout.join('').trim(), '42', language)
    }
    // State lives in each language's default context.
    await sbx.runCode('let kept = 41', { language: 'ts' })
    assert.equal((await sbx.runCode('console.log(kept + 1)', { language: 'typescript' }))
      .logs.stdout.join('').trim(), '42')
    await sbx.runCode('x=41', { language: 'bash' })
    assert.deepEqual((await sbx.runCode('echo $((x + 1))', { language: 'bash' })).logs.stdout,
      ['42\n'])

    const r = await sbx.runCode('plot(1:10)', { language: 'r' })
    const png = Buffer.from(r.results.find((x) => x.png).png, 'base64')
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47])
    const df = await sbx.runCode('data.frame(a = 1:2, b = c("x", "y"))', { language: 'r' })
    assert.match(df.results[0].html, /<table/)

    const ctx = await sbx.createCodeContext({ language: 'bash', cwd: '/tmp' })
    assert.equal(ctx.language, 'bash')
    const failed = await sbx.runCode('false', { context: ctx })
    assert.match(failed.error.value, /exit status 1/)

    const contexts = (await sbx.listCodeContexts()).map((c) => c.language).sort()
    assert.deepEqual([...new Set(contexts)],
      ['bash', 'javascript', 'python', 'r', 'typescript'])
  } finally {
    await sbx.kill()
  }
})

test('volumes: made, written, mounted in two sandboxes at once, outliving them', async () => {
  process.env.E2B_VOLUME_API_URL = `${gateway.url}e2b`
  const { Volume } = await import('e2b')
  const vol = await Volume.create(`js-${randomBytes(4).toString('hex')}`)
  try {
    await vol.writeFile('/in.txt', 'from the api')
    const a = await Sandbox.create({ volumeMounts: { '/data': vol } })
    const b = await Sandbox.create({ volumeMounts: { '/mnt/v': vol.name } })
    try {
      let ex = await a.runCode("print(open('/data/in.txt').read()); open('/data/out.txt', 'w').write('from a')")
      assert.equal(ex.logs.stdout.join(''), 'from the api\n')
      ex = await b.runCode("print(open('/mnt/v/out.txt').read())")
      assert.equal(ex.logs.stdout.join(''), 'from a\n')
    } finally {
      await a.kill()
      await b.kill()
    }
    assert.equal(await vol.readFile('/out.txt'), 'from a')
    // Another handle on the same volume, by its id.
    const again = await Volume.connect(vol.volumeId)
    assert.equal(again.name, vol.name)
    assert.equal(await again.readFile('/in.txt'), 'from the api')
    const names = (await vol.list('/')).map((e) => e.name).sort()
    assert.deepEqual(names, ['in.txt', 'out.txt'])
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
  } finally {
    await Volume.destroy(vol.volumeId)
  }
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId))
})
