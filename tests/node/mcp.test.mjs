// The official MCP TypeScript SDK's client (Client +
// StreamableHTTPClientTransport) against a real glovebox's MCP endpoint:
// each session is a real sandbox with a real python3 kernel.
//
// The test starts its own glovebox (GLOVEBOX_BUILD, default ../build) on a
// free 127.0.0.1 port with a random token and stops it at the end.

import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { randomInt } from 'node:crypto'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { startGlovebox } from '../glovebox.mjs'

let gb = null
const clients = []

async function connect (token = gb.token, name = 'glovebox-test') {
  const transport = new StreamableHTTPClientTransport(new URL(`${gb.url}mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } }
  })
  const client = new Client({ name, version: '1.0.0' })
  await client.connect(transport)
  clients.push(client)
  return { client, transport }
}

async function call (client, name, args) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: 60000 })
}

function text (result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('')
}

async function kernelIds () {
  const res = await fetch(`${gb.url}api/kernels`, {
    headers: { Authorization: `token ${gb.token}` }
  })
  assert.equal(res.status, 200)
  return (await res.json()).map((k) => k.id)
}

// Host processes whose command line contains marker (the sandboxes' pid
// namespaces are still processes of this machine).
function processesWith (marker) {
  const found = []
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
      if (cmd.includes(marker)) found.push(pid)
    } catch {}
  }
  return found
}

async function waitFor (pred, ms, what) {
  const end = Date.now() + ms
  for (;;) {
    if (await pred()) return
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

before(async () => {
  gb = await startGlovebox()
})

after(async () => {
  for (const c of clients) await c.close().catch(() => {})
  await gb?.stop()
})

describe('MCP over Streamable HTTP', () => {
  let a

  before(async () => {
    a = await connect()
  })

  test('initialize: server info, tools capability, a session id', () => {
    assert.equal(a.client.getServerVersion().name, 'glovebox')
    assert.ok(a.client.getServerCapabilities().tools, 'tools capability')
    assert.match(a.transport.sessionId, /^[0-9a-f-]{36}$/)
    assert.ok(['2025-06-18', '2025-03-26'].includes(a.transport.protocolVersion),
      `negotiated ${a.transport.protocolVersion}`)
  })

  test('tools/list: the five tools with JSON Schemas', async () => {
    const { tools } = await a.client.listTools()
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]))
    assert.deepEqual(Object.keys(byName).sort(),
      ['list_files', 'read_file', 'run_code', 'run_command', 'write_file'])
    assert.deepEqual(byName.run_code.inputSchema.required, ['code'])
    assert.deepEqual(byName.write_file.inputSchema.required, ['path', 'content'])
    assert.equal(byName.run_command.inputSchema.properties.command.type, 'string')
  })

  test('ping', async () => {
    assert.deepEqual(await a.client.ping(), {})
  })

  test('run_code keeps state across calls', async () => {
    const first = await call(a.client, 'run_code', { code: 'x = 41\nprint("set")' })
    assert.equal(first.isError, false)
    assert.equal(text(first), 'set\n')
    const second = await call(a.client, 'run_code', { code: 'x + 1' })
    assert.equal(second.isError, false)
    assert.equal(text(second), '42')
  })

  test('a matplotlib plot comes back as PNG image content', async () => {
    const r = await call(a.client, 'run_code', {
      code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()'
    })
    assert.equal(r.isError, false)
    const images = r.content.filter((c) => c.type === 'image')
    assert.equal(images.length, 1, JSON.stringify(r.content).slice(0, 300))
    assert.equal(images[0].mimeType, 'image/png')
    const png = Buffer.from(images[0].data, 'base64')
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.ok(png.length > 1000, `PNG of ${png.length} bytes`)
  })

  test('an exception is a result with isError and the traceback', async () => {
    const r = await call(a.client, 'run_code', { code: 'def f():\n    return 1 / 0\nf()' })
    assert.equal(r.isError, true)
    assert.match(text(r), /ZeroDivisionError/)
    assert.match(text(r), /division by zero/)
    assert.doesNotMatch(text(r), /\x1b\[/, 'no terminal colour codes')
  })

  test('write_file, read_file, then run_command cat', async () => {
    const content = 'city,sales\nOslo,10\nRomé,20\n'
    const w = await call(a.client, 'write_file', { path: 'data/sales.csv', content })
    assert.equal(w.isError, false, text(w))
    const r = await call(a.client, 'read_file', { path: '/home/user/data/sales.csv' })
    assert.equal(r.isError, false)
    assert.equal(text(r), content)
    const c = await call(a.client, 'run_command', { command: 'cat data/sales.csv' })
    assert.equal(c.isError, false, text(c))
    assert.equal(c.content[0].text, content)
    assert.equal(c.structuredContent.exitCode, 0)
    assert.equal(c.structuredContent.stdout, content)
    const l = await call(a.client, 'list_files', { path: 'data' })
    assert.match(text(l), /sales\.csv {2}\d+ bytes/)
  })

  test('run_command: stderr, exit code, timeout', async () => {
    const c = await call(a.client, 'run_command', { command: 'echo out; echo err >&2; exit 3' })
    assert.equal(c.isError, true)
    assert.equal(c.structuredContent.stdout, 'out\n')
    assert.equal(c.structuredContent.stderr, 'err\n')
    assert.equal(c.structuredContent.exitCode, 3)
    const t = await call(a.client, 'run_command', { command: 'sleep 30', timeout: 0.5 })
    assert.equal(t.isError, true)
    assert.equal(t.structuredContent.timedOut, true)
    assert.match(text(t), /timed out/)
  })

  test('read_file of binary bytes is a base64 resource; a missing file is an error', async () => {
    await call(a.client, 'run_code', { code: 'open("bin.dat", "wb").write(bytes(range(256)))' })
    const r = await call(a.client, 'read_file', { path: 'bin.dat' })
    assert.equal(r.isError, false)
    assert.equal(r.content[0].type, 'resource')
    assert.deepEqual([...Buffer.from(r.content[0].resource.blob, 'base64')],
      [...Array(256).keys()])
    const missing = await call(a.client, 'read_file', { path: 'no/such/file' })
    assert.equal(missing.isError, true)
    assert.match(text(missing), /No such file/)
  })

  test('two MCP sessions get separate sandboxes', async () => {
    const b = await connect(gb.token, 'second')
    assert.notEqual(b.transport.sessionId, a.transport.sessionId)
    const before = await kernelIds()
    const state = await call(b.client, 'run_code', { code: 'x' })
    assert.equal(state.isError, true)
    assert.match(text(state), /NameError/)
    const file = await call(b.client, 'read_file', { path: 'data/sales.csv' })
    assert.equal(file.isError, true)
    await call(b.client, 'write_file', { path: 'only-b.txt', content: 'b' })
    const inA = await call(a.client, 'run_command', { command: 'ls only-b.txt' })
    assert.equal(inA.isError, true)
    const after = await kernelIds()
    assert.equal(after.length, before.length + 1, `${before} -> ${after}`)
    await b.client.close()
  })

  test('a wrong token is refused with 401', async () => {
    await assert.rejects(connect('wrong-token-123'), (err) => {
      assert.equal(err.code, 401, String(err))
      return true
    })
  })

  test('closing the session kills its sandbox', async () => {
    const c = await connect(gb.token, 'closing')
    const marker = String(900000 + randomInt(90000))
    // Started by a shell that exits at once, so the sleep is no child of
    // the kernel (which signals its own children when it shuts down): only
    // the end of the sandbox ends it.
    const r = await call(c.client, 'run_code', {
      code: `import subprocess\nsubprocess.run("setsid sleep ${marker} >/dev/null 2>&1 &", shell=True)`
    })
    assert.equal(r.isError, false, text(r))
    const ids = await kernelIds()
    await waitFor(() => processesWith(`sleep ${marker}`).length === 1, 5000, 'the sleep to run')
    const sessionId = c.transport.sessionId
    await c.transport.terminateSession()
    // Its kernel is gone at once, its sandbox (and the sleep in it) soon after.
    const left = await kernelIds()
    assert.equal(left.length, ids.length - 1, `${ids} -> ${left}`)
    await waitFor(() => processesWith(`sleep ${marker}`).length === 0, 10000,
      'the sandbox\'s processes to end')
    const res = await fetch(`${gb.url}mcp`, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${gb.token}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'Mcp-Session-Id': sessionId
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' })
    })
    assert.equal(res.status, 404)
    assert.equal((await res.json()).error.code, -32001)
  })
})
