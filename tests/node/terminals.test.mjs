// Jupyter Server's terminals API, as @jupyterlab/services 7's
// TerminalManager uses it, against a real glovebox: a login shell on a
// terminal of a sandbox, its own or a kernel's (the Glovebox "kernel_id"
// extension), terminado's messages, the ends of a terminal, and bad input.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import WebSocket from 'ws'
import { PageConfig } from '@jupyterlab/coreutils'
import { ServerConnection, TerminalManager } from '@jupyterlab/services'
import { startGlovebox } from '../glovebox.mjs'

let gateway, settings, manager

function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

async function waitFor (pred, what, ms = 20_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await pred()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

async function api (method, path, body) {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { Authorization: `token ${gateway.token}` },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body)
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null }
}

// What a terminal connection printed so far, as one string.
function follow (term) {
  const seen = { text: '', disconnected: false }
  term.messageReceived.connect((_, msg) => {
    if (msg.type === 'stdout') seen.text += msg.content[0]
  })
  term.disposed.connect(() => { seen.disconnected = true })
  return seen
}

async function run (term, seen, line, re, what) {
  term.send({ type: 'stdin', content: [line + '\r'] })
  await waitFor(() => re.test(seen.text), what)
    .catch((err) => assert.fail(`${err.message}: ${re} in ${JSON.stringify(seen.text.slice(-400))}`))
}

// A raw WebSocket to a terminal: resolves with the refusal's status, or
// with the open socket.
function rawSocket (name, token = gateway.token) {
  const url = `${gateway.url.replace(/^http/, 'ws')}terminals/websocket/${name}` +
    (token ? `?token=${token}` : '')
  const ws = new WebSocket(url)
  // Frames may arrive with the handshake: kept from the start.
  const frames = []
  ws.on('message', (d) => frames.push(JSON.parse(String(d))))
  return new Promise((resolve) => {
    ws.on('unexpected-response', (_, res) => resolve({ status: res.statusCode }))
    ws.on('open', () => resolve({ ws, frames }))
  })
}

before(async () => {
  gateway = await startGlovebox()
  PageConfig.setOption('terminalsAvailable', 'true')
  settings = ServerConnection.makeSettings({
    baseUrl: gateway.url,
    wsUrl: gateway.url.replace(/^http/, 'ws'),
    token: gateway.token,
    appendToken: true,
    WebSocket,
    fetch,
    Request,
    Headers
  })
  manager = new TerminalManager({ serverSettings: settings, standby: 'never' })
  await manager.ready
})

after(async () => {
  manager?.dispose()
  await gateway?.stop()
})

test('TerminalManager: a login shell in a sandbox of its own, set_size, list, shutdown', async () => {
  const term = await manager.startNew()
  const seen = follow(term)
  await waitFor(() => term.connectionStatus === 'connected', 'connected')
  await run(term, seen, 'echo T$((6*7)) $(id -un) $PWD $TERM; tty',
    /T42 user \/home\/user xterm-256color\r\n\/dev\/pts\/\d+/, 'the shell')
  term.send({ type: 'set_size', content: [40, 120, 600, 900] })
  await run(term, seen, 'stty size', /\s40 120\r\n/, 'the size set')
  // Its own devpts: the one terminal there is, none of the host's.
  await run(term, seen, "echo D$(ls /dev/pts | tr '\\n' ' ')", /D0 ptmx\r\n/, 'the sandbox devpts')
  // Not the host's: the sandbox's root, its own pid namespace.
  await run(term, seen, "echo P$(tr -d '\\0' < /proc/1/cmdline)", /Pglovebox-init\r\n/,
    'the sandbox init')

  const listed = await manager.refreshRunning().then(() => [...manager.running()])
  assert.ok(listed.some((m) => m.name === term.name), JSON.stringify(listed))
  const model = await api('GET', `api/terminals/${term.name}`)
  assert.equal(model.status, 200)
  assert.equal(model.body.name, term.name)
  assert.match(model.body.last_activity, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)

  // A second client gets terminado's greeting and the recent output.
  const other = manager.connectTo({ model: { name: term.name } })
  const otherSeen = follow(other)
  await waitFor(() => /T42/.test(otherSeen.text), 'the replayed output')

  await manager.shutdown(term.name)
  await waitFor(() => seen.disconnected && otherSeen.disconnected, 'both clients told')
  assert.equal((await api('GET', `api/terminals/${term.name}`)).status, 404)
  assert.ok(!(await api('GET', 'api/terminals')).body.some((m) => m.name === term.name))
  assert.equal((await api('DELETE', `api/terminals/${term.name}`)).status, 404)
})

test('a terminal in a kernel\'s sandbox sees the kernel, and ends with it', async () => {
  const kernel = await api('POST', 'api/kernels', { name: 'python3' })
  assert.equal(kernel.status, 201)
  const made = await api('POST', 'api/terminals', { kernel_id: kernel.body.id, name: 'beside-kernel' })
  assert.equal(made.status, 200)
  assert.equal(made.body.name, 'beside-kernel')
  assert.equal(made.body.kernel_id, kernel.body.id)
  const term = manager.connectTo({ model: { name: 'beside-kernel' } })
  const seen = follow(term)
  await waitFor(() => term.connectionStatus === 'connected', 'connected')
  // ('ipykerne[l]': the grep's own command line, read by cat, must not match.)
  await run(term, seen, "echo K$(cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'ipykerne[l]')",
    /K[1-9]/, 'the kernel in the same sandbox')

  const own = await manager.startNew()
  const ownSeen = follow(own)
  await waitFor(() => own.connectionStatus === 'connected', 'connected')
  await run(own, ownSeen, "echo K$(cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'ipykerne[l]')",
    /K0\r\n/, 'no kernel in a sandbox of its own')
  await manager.shutdown(own.name)

  // A restart keeps the sandbox, and so the terminal.
  assert.equal((await api('POST', `api/kernels/${kernel.body.id}/restart`)).status, 200)
  await run(term, seen, 'echo R$((5*5))', /R25\r\n/, 'the terminal after a kernel restart')

  assert.equal((await api('DELETE', `api/kernels/${kernel.body.id}`)).status, 204)
  await waitFor(() => seen.disconnected, 'the terminal ends with the sandbox')
  assert.equal((await api('GET', 'api/terminals/beside-kernel')).status, 404)
})

test('a shell that exits ends its terminal', async () => {
  const term = await manager.startNew()
  const seen = follow(term)
  await waitFor(() => term.connectionStatus === 'connected', 'connected')
  term.send({ type: 'stdin', content: ['exit 3\r'] })
  await waitFor(() => seen.disconnected, 'disconnect after exit')
  assert.equal((await api('GET', `api/terminals/${term.name}`)).status, 404)
})

test('bad requests get clear errors, and the gateway carries on', async () => {
  let r = await api('POST', 'api/terminals', { kernel_id: '00000000-0000-4000-8000-000000000000' })
  assert.equal(r.status, 404)
  assert.match(r.body.message, /Kernel does not exist/)
  r = await api('POST', 'api/terminals', { name: '../x' })
  assert.equal(r.status, 400)
  r = await api('POST', 'api/terminals', { cwd: 'relative' })
  assert.equal(r.status, 400)
  r = await api('POST', 'api/terminals', { name: 7 })
  assert.equal(r.status, 400)
  r = await api('POST', 'api/terminals', '{"name":')
  assert.equal(r.status, 400)
  r = await api('PUT', 'api/terminals')
  assert.equal(r.status, 405)

  const first = await api('POST', 'api/terminals', { name: 'twice', cwd: '/tmp' })
  assert.equal(first.status, 200)
  r = await api('POST', 'api/terminals', { name: 'twice' })
  assert.equal(r.status, 409)

  assert.equal((await rawSocket('no-such')).status, 404)
  assert.equal((await rawSocket('twice', 'wrong')).status, 401)
  const noToken = await fetch(`${gateway.url}api/terminals`)
  assert.equal(noToken.status, 401)

  // Raw terminado messages: the greeting, a cwd, and a frame that is not
  // a JSON array closes with 1007.
  const { ws, frames } = await rawSocket('twice')
  await waitFor(() => frames.length >= 1, 'the setup message')
  assert.deepEqual(frames[0], ['setup', {}])
  ws.send(JSON.stringify(['stdin', 'pwd\r']))
  const stdout = () => frames.filter((f) => f[0] === 'stdout').map((f) => f[1]).join('')
  await waitFor(() => /\s\/tmp\r\n/.test(stdout()), 'cwd /tmp')
    .catch((err) => assert.fail(`${err.message}: ${JSON.stringify(frames)}`))
  const closed = new Promise((resolve) => ws.on('close', (code) => resolve(code)))
  ws.send('not json')
  assert.equal(await closed, 1007)

  assert.equal((await api('DELETE', 'api/terminals/twice')).status, 204)
  assert.equal((await api('GET', 'api')).status, 200, 'the gateway is fine')
})
