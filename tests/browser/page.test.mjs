// Glovebox's own page (static/) in Debian's headless Chromium, driven like a
// person would drive it, against a real glovebox with sandboxed kernels. The
// page is reached through a TCP proxy the test can cut, to prove that it
// reconnects without losing output.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { chromium } from 'playwright-core'
import { build, freePort, startGlovebox } from '../glovebox.mjs'

const shots = path.join(build, 'browser')
const T = 60000
let gateway, token, proxy, gatewayUrl, pageUrl, browser, context, page

// Forwards 127.0.0.1:port to the gateway; cut() drops every connection.
async function startProxy (target) {
  const sockets = new Set()
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1')
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    sockets.add(client)
    sockets.add(upstream)
    client.pipe(upstream)
    upstream.pipe(client)
    for (const s of [client, upstream]) {
      s.on('error', end)
      s.on('close', end)
    }
  })
  const port = await freePort()
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve))
  return {
    port,
    cut: () => { for (const s of sockets) s.destroy() },
    close: () => new Promise((resolve) => { for (const s of sockets) s.destroy(); server.close(resolve) })
  }
}

async function newPage (options = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true, ...options })
  // Shorter than a test's own: a wait that never ends says what it waited for.
  ctx.setDefaultTimeout(T * 3 / 4)
  const p = await ctx.newPage()
  p.errors = []
  p.on('pageerror', (e) => p.errors.push(e.message))
  return { ctx, p }
}

function idle (p) {
  return p.waitForSelector('#kernel-state[data-state="idle"]')
}

// Types code into the last (empty) cell, runs it with Shift+Enter and waits
// for the kernel to finish it. Returns that cell's locator.
async function run (code, { wait = true, p = page } = {}) {
  const n = await p.locator('.cell').count()
  const cell = p.locator('.cell').nth(n - 1)
  await cell.locator('textarea').fill(code)
  await cell.locator('textarea').press('Shift+Enter')
  if (wait) await done(n - 1, p)
  return cell
}

function done (n, p = page) {
  return p.waitForFunction((i) => {
    const c = document.querySelectorAll('.cell')[i]
    return c && !c.classList.contains('running') && !c.querySelector('.count').textContent.includes('*')
  }, n)
}

async function outputText (cell) {
  return cell.locator('.outputs').innerText()
}

async function api (method, route, body) {
  const res = await fetch(new URL(route, gatewayUrl), {
    method,
    headers: { Authorization: `token ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  assert.ok(res.ok, `${method} ${route}: ${res.status}`)
  return res.status === 204 ? null : res.json()
}

before(async () => {
  mkdirSync(shots, { recursive: true })
  // Debug logging: the token must not show up even there.
  gateway = await startGlovebox(['--log-level', 'debug'])
  token = gateway.token
  gatewayUrl = gateway.url
  proxy = await startProxy(gateway.port)
  pageUrl = `http://127.0.0.1:${proxy.port}/`
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage']
  })
  ;({ ctx: context, p: page } = await newPage())
})

after(async () => {
  await browser?.close()
  await proxy?.close()
  await gateway?.stop()
})

test('the page is served with a CSP, takes the token out of the URL, starts a kernel', { timeout: T }, async () => {
  const res = await page.goto(`${pageUrl}?token=${token}`)
  assert.equal(res.status(), 200)
  const csp = res.headers()['content-security-policy']
  assert.match(csp, /script-src 'self'/)
  assert.match(csp, /default-src 'none'/)
  assert.doesNotMatch(csp, /unsafe-inline/, 'no inline script or style in the page')
  for (const file of ['static/app.js', 'static/style.css', 'static/frame.html']) {
    const r = await fetch(new URL(file, gatewayUrl))
    assert.equal(r.status, 200, file)
    assert.ok(r.headers.get('content-security-policy'), `${file} has a CSP`)
  }
  const frameCsp = (await fetch(new URL('static/frame.html', gatewayUrl))).headers.get('content-security-policy')
  assert.match(frameCsp, /^sandbox allow-scripts;/, 'the output frame is sandboxed by its own CSP too')
  // Without a token the API stays closed; the page itself does not need one.
  assert.equal((await fetch(new URL('api/kernels', gatewayUrl))).status, 401)

  await idle(page)
  assert.equal(new URL(page.url()).searchParams.get('token'), null, 'the token left the address bar')
  assert.ok(!(await page.evaluate(() => location.href)).includes(token))
  const kernels = await api('GET', 'api/kernels')
  assert.equal(kernels.length, 1, 'a first visit starts one kernel')
  assert.equal(await page.locator('#kernel-select').inputValue(), kernels[0].id)
  assert.equal(await page.locator('#connection').getAttribute('data-state'), 'connected')
})

test('print and Shift+Enter: the output shows, focus moves to the next cell', { timeout: T }, async () => {
  const cell = await run('print("hi")')
  assert.equal((await outputText(cell)).trim(), 'hi')
  assert.match(await cell.locator('.count').innerText(), /^\[\d+\]$/)
  const focused = await page.evaluate(() => {
    const areas = [...document.querySelectorAll('textarea.source')]
    return [areas.indexOf(document.activeElement), areas.length]
  })
  assert.deepEqual(focused, [focused[1] - 1, focused[1]], 'the new last cell has the focus')
})

test('Tab indents at the start of a line, Ctrl+[ dedents', { timeout: T }, async () => {
  const ta = page.locator('.cell').last().locator('textarea')
  await ta.focus()
  await page.keyboard.type('for i in range(2):')
  await page.keyboard.press('Enter')
  await page.keyboard.press('Tab')
  await page.keyboard.type('print("row", i)')
  assert.equal(await ta.inputValue(), 'for i in range(2):\n    print("row", i)')
  await page.keyboard.press('Control+BracketLeft')
  assert.equal(await ta.inputValue(), 'for i in range(2):\nprint("row", i)')
  await page.keyboard.press('Home')
  await page.keyboard.press('Tab')
  assert.equal(await ta.inputValue(), 'for i in range(2):\n    print("row", i)')
  const n = await page.locator('.cell').count()
  await ta.press('Shift+Enter')
  await done(n - 1)
  assert.equal((await outputText(page.locator('.cell').nth(n - 1))).trim(), 'row 0\nrow 1')
})

test('cells are added and deleted; their code survives a reload', { timeout: T }, async () => {
  const count = () => page.locator('.cell').count()
  const n = await count()
  await page.click('#add-cell')
  assert.equal(await count(), n + 1)
  await page.keyboard.type('# to be deleted')
  await page.locator('.cell').last().locator('button.delete').click()
  assert.equal(await count(), n)
  // Deleting asks nothing but can be undone, from the notice or with Z.
  await page.locator('#notice-action', { hasText: 'Undo' }).click()
  assert.equal(await count(), n + 1)
  assert.equal(await page.locator('textarea.source').last().inputValue(), '# to be deleted')
  await page.locator('.cell').last().locator('button.delete').click()
  assert.equal(await count(), n)
  const sources = await page.locator('textarea.source').evaluateAll((a) => a.map((t) => t.value))
  await page.reload()
  await idle(page)
  assert.deepEqual(await page.locator('textarea.source').evaluateAll((a) => a.map((t) => t.value)), sources)
})

test('a matplotlib plot is an image with pixels', { timeout: T }, async () => {
  const cell = await run('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16]); plt.title("glovebox"); plt.show()')
  const img = cell.locator('.outputs img')
  await img.waitFor()
  const size = await img.evaluate(async (i) => { await i.decode(); return [i.naturalWidth, i.naturalHeight] })
  assert.ok(size[0] > 100 && size[1] > 100, `natural size ${size}`)
  assert.match(await img.getAttribute('src'), /^data:image\/png;base64,iVBOR/)
})

test('an exception shows its traceback in colour, without escape codes', { timeout: T }, async () => {
  const cell = await run('def f():\n    return 1 / 0\nf()')
  const error = cell.locator('.output.error')
  await error.waitFor()
  const text = await error.innerText()
  assert.match(text, /ZeroDivisionError/)
  assert.match(text, /division by zero/)
  assert.ok(!text.includes('\x1b'), 'no ESC characters')
  assert.doesNotMatch(text, /\[[0-9;]*m/, 'no leftover SGR codes')
  assert.ok(await error.locator('span[class*="ansi-fg"]').count() > 0, 'the colours are rendered')
})

test('HTML output runs in a sandboxed frame, never in the page', { timeout: T }, async () => {
  const cell = await run(
    'from IPython.display import HTML\n' +
    'HTML("<b id=\'bold\'>bold</b><script>parent.document.title=\'owned\'</script>' +
    '<img src=x onerror=\\"parent.document.title=\'owned2\'\\">")')
  const iframe = cell.locator('iframe')
  await iframe.waitFor()
  assert.equal(await iframe.getAttribute('sandbox'), 'allow-scripts', 'no allow-same-origin')
  const frame = await (await iframe.elementHandle()).contentFrame()
  await frame.waitForSelector('#bold')
  assert.equal(await frame.locator('#bold').innerText(), 'bold')
  const seen = await frame.evaluate(() => {
    const tryIt = (f) => { try { return String(f()) } catch (e) { return 'blocked' } }
    return {
      origin: self.origin,
      parentDocument: tryIt(() => parent.document.title),
      storage: tryIt(() => localStorage.length),
      cookie: tryIt(() => document.cookie)
    }
  })
  assert.deepEqual(seen, { origin: 'null', parentDocument: 'blocked', storage: 'blocked', cookie: 'blocked' })
  await page.waitForTimeout(300)
  assert.doesNotMatch(await page.title(), /owned/, 'the output\'s scripts did not run')
  const height = await iframe.evaluate((f) => f.getBoundingClientRect().height)
  assert.ok(height >= 15 && height < 200, `the frame fits its content (${height}px)`)
})

test('Markdown, SVG, JPEG, JSON and plain text outputs', { timeout: T }, async () => {
  const cell = await run([
    'import io, matplotlib.pyplot as plt',
    'from IPython.display import display, Markdown, SVG, JSON, Image',
    'display(Markdown("# Title\\n**strong** and `code` and [a link](https://example.org) <i>raw</i>"))',
    'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20" fill="teal"/></svg>\'))',
    'buf = io.BytesIO(); plt.figure(figsize=(2, 1)); plt.plot([1, 2]); plt.savefig(buf, format="jpeg"); plt.close()',
    'display(Image(data=buf.getvalue(), format="jpeg"))',
    'display(JSON({"key": [1, 2]}))',
    'print("plain")'
  ].join('\n'))
  const out = cell.locator('.outputs')
  assert.equal(await out.locator('.markdown h1').innerText(), 'Title')
  assert.equal(await out.locator('.markdown strong').innerText(), 'strong')
  assert.equal(await out.locator('.markdown code').innerText(), 'code')
  assert.equal(await out.locator('.markdown a').getAttribute('href'), 'https://example.org')
  assert.equal(await out.locator('.markdown i').count(), 0, 'raw HTML in Markdown stays text')
  const sizes = await out.locator('img').evaluateAll(async (imgs) => Promise.all(imgs.map(async (i) => {
    await i.decode()
    return [i.src.slice(0, 19), i.naturalWidth]
  })))
  assert.deepEqual(sizes.map((s) => s[0]), ['data:image/svg+xml;', 'data:image/jpeg;bas'])
  assert.ok(sizes.every((s) => s[1] > 0), JSON.stringify(sizes))
  assert.match(await out.locator('.json').innerText(), /"key": \[\s*1,\s*2\s*\]/)
  assert.match(await out.innerText(), /plain/)
})

test('update_display_data replaces a display, clear_output clears', { timeout: T }, async () => {
  let cell = await run('h = display("one", display_id=True)\nimport time; time.sleep(0.3)\nh.update("two")')
  assert.equal((await outputText(cell)).trim(), "'two'")
  cell = await run('from IPython.display import clear_output\nprint("before", flush=True)\nclear_output()\nprint("after")')
  assert.equal((await outputText(cell)).trim(), 'after')
  cell = await run('for i in range(3):\n    clear_output(wait=True)\n    print("step", i, flush=True)')
  assert.equal((await outputText(cell)).trim(), 'step 2')
})

test('input() asks in the page', { timeout: T }, async () => {
  const cell = await run('name = input("Your name: ")\nprint("hello", name)', { wait: false })
  const n = await page.locator('.cell').count()
  const box = cell.locator('.stdin input')
  await box.waitFor()
  assert.match(await cell.locator('.stdin').innerText(), /Your name:/)
  await box.fill('Ada')
  await box.press('Enter')
  await done(n - 2)
  assert.match(await outputText(cell), /hello Ada/)
})

test('Interrupt stops a running cell', { timeout: T }, async () => {
  const cell = await run('import time\nprint("sleeping", flush=True)\ntime.sleep(60)', { wait: false })
  const n = await page.locator('.cell').count()
  await cell.locator('.outputs', { hasText: 'sleeping' }).waitFor()
  assert.equal(await page.locator('#kernel-state').getAttribute('data-state'), 'busy')
  const t0 = Date.now()
  await page.click('#interrupt')
  await done(n - 2)
  assert.ok(Date.now() - t0 < 20000)
  assert.match(await outputText(cell), /KeyboardInterrupt/)
  await idle(page)
})

// The terminal panel: a shell in the selected kernel's sandbox, drawn by
// the vendored xterm.js under the page's strict CSP.
test('Terminal: a shell in the kernel\'s sandbox, typed into, closed', { timeout: T }, async () => {
  await run('open("/home/user/from-cell.txt", "w").write("made by a cell")')
  const kernel = await page.locator('#kernel-select').inputValue()
  await page.click('#terminal-toggle')
  const rows = page.locator('#terminal .xterm-rows')
  await page.waitForFunction(() => /\$\s*$/m.test(document.querySelector('#terminal .xterm-rows')?.innerText || ''))
  await page.locator('#terminal-screen').click()
  await page.keyboard.type('echo $((6*7)); cat from-cell.txt; echo; id -un')
  await page.keyboard.press('Enter')
  await page.waitForFunction(() => /^42\s*$/m.test(document.querySelector('#terminal .xterm-rows').innerText) &&
    /^user\s*$/m.test(document.querySelector('#terminal .xterm-rows').innerText))
  const text = await rows.innerText()
  assert.match(text, /^made by a cell\s*$/m, 'the kernel\'s files: its sandbox')
  assert.match(text, /^user\s*$/m, 'as the sandbox\'s user')
  // xterm.js's own styles apply despite the CSP (mirrored into constructed sheets).
  const display = await page.evaluate(() => getComputedStyle(document.querySelector('#terminal .xterm-rows span')).display)
  assert.equal(display, 'inline-block')
  const listed = await api('GET', 'api/terminals')
  assert.equal(listed.length, 1)
  assert.equal(listed[0].kernel_id, kernel)
  await page.screenshot({ path: path.join(shots, 'page-terminal.png') })

  await page.click('#terminal-close')
  assert.equal(await page.locator('#terminal').isHidden(), true)
  for (let i = 0; i < 400 && (await api('GET', 'api/terminals')).length; i++) await new Promise((resolve) => setTimeout(resolve, 50))
  assert.deepEqual(await api('GET', 'api/terminals'), [], 'closing the panel ends the terminal')
  assert.deepEqual(page.errors, [], 'no script errors in the page')
})

test('upload with the button and by dropping, read from a cell, download', { timeout: T }, async () => {
  await page.setInputFiles('#upload-input', { name: 'data.txt', mimeType: 'text/plain', buffer: Buffer.from('uploaded by the page\n') })
  await page.locator('#file-list button.name', { hasText: 'data.txt' }).waitFor()
  let cell = await run('print(open("data.txt").read(), end="")')
  assert.equal((await outputText(cell)).trim(), 'uploaded by the page')

  // A drop of a file on the files panel, as the browser makes it.
  await page.evaluate(() => {
    const dt = new DataTransfer()
    dt.items.add(new File(['dropped here'], 'dropped.txt', { type: 'text/plain' }))
    const files = document.getElementById('files')
    files.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }))
    files.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
  })
  await page.locator('#file-list button.name', { hasText: 'dropped.txt' }).waitFor()
  cell = await run('print(open("/home/user/dropped.txt").read())')
  assert.equal((await outputText(cell)).trim(), 'dropped here')

  // A file a cell wrote shows in the list and downloads with its bytes.
  await run('open("made.csv", "w").write("a,b\\n1,2\\n")')
  const item = page.locator('#file-list button.name', { hasText: 'made.csv' })
  await item.waitFor()
  const [download] = await Promise.all([page.waitForEvent('download'), item.click()])
  assert.equal(download.suggestedFilename(), 'made.csv')
  assert.equal(readFileSync(await download.path(), 'utf8'), 'a,b\n1,2\n')
})

test('a dropped connection reconnects by itself; nothing is lost or repeated', { timeout: T }, async () => {
  const cell = await run('import time\nfor i in range(40):\n    print("line", i, flush=True)\n    time.sleep(0.05)', { wait: false })
  const n = await page.locator('.cell').count()
  await cell.locator('.outputs', { hasText: 'line 2' }).waitFor()
  proxy.cut()
  await page.waitForSelector('#connection[data-state="reconnecting"]')
  await page.waitForSelector('#connection[data-state="connected"]')
  await done(n - 2)
  const lines = (await outputText(cell)).trim().split('\n')
  assert.deepEqual(lines, Array.from({ length: 40 }, (_, i) => `line ${i}`))
})

test('Restart: the state goes through restarting to idle; variables are gone, files stay', { timeout: T }, async () => {
  await run('x = 5')
  await page.click('#restart')
  // Asked first, naming what is lost; Cancel keeps the kernel as it is.
  const message = page.locator('#confirm-dialog[open] #confirm-message')
  assert.match(await message.innerText(), /loses every variable.*files in \/home\/user stay/s)
  await page.click('#confirm-cancel')
  assert.equal((await outputText(await run('print(x)'))).trim(), '5', 'Cancel restarted nothing')
  await page.click('#restart')
  await page.click('#confirm-ok')
  await page.waitForSelector('#kernel-state[data-state="restarting"]')
  await idle(page)
  const cell = await run('print("x" in globals(), open("data.txt").read().strip())')
  assert.equal((await outputText(cell)).trim(), 'False uploaded by the page')
  assert.equal(await cell.locator('.count').innerText(), '[1]', 'a fresh kernel counts from 1')
})

test('a kernel that runs out of memory: the error, the reason, then idle again', { timeout: T }, async () => {
  const small = await api('POST', 'api/kernels', { name: 'python3', limits: { memory_mb: 160 } })
  await page.locator(`#kernel-select option[value="${small.id}"]`).waitFor({ state: 'attached' })
  await page.selectOption('#kernel-select', small.id)
  await idle(page)
  const cell = await run('x = b"x" * (600 * 2**20)')
  assert.match(await outputText(cell), /KernelOutOfMemory/)
  await page.locator('#notice', { hasText: 'out of memory' }).waitFor()
  assert.match(await page.locator('#kernel-state').getAttribute('title'), /out of memory/)
  await idle(page)
  await api('DELETE', `api/kernels/${small.id}`)
})

test('New kernel and Shut down from the page; Shut down names the files it deletes', { timeout: T }, async () => {
  const before = (await api('GET', 'api/kernels')).map((k) => k.id)
  before.push(await page.locator('#kernel-select').inputValue())
  await page.click('#start')
  await page.waitForFunction((old) => {
    const v = document.getElementById('kernel-select').value
    return v && !old.includes(v)
  }, before)
  await idle(page)
  const id = await page.locator('#kernel-select').inputValue()
  assert.ok((await api('GET', 'api/kernels')).some((k) => k.id === id))
  assert.equal(new URL(page.url()).searchParams.get('kernel'), id, 'the address names the kernel')
  await run('open("results.csv", "w").write("1,2\\n")')
  await page.click('#shutdown')
  const message = await page.locator('#confirm-dialog[open] #confirm-message').innerText()
  assert.match(message, /deletes its sandbox/)
  assert.match(message, /results\.csv/, 'the files that would be lost are named')
  await page.click('#confirm-cancel')
  assert.ok((await api('GET', 'api/kernels')).some((k) => k.id === id), 'Cancel shut nothing down')
  await page.click('#shutdown')
  await page.click('#confirm-ok')
  await page.waitForFunction(() => document.getElementById('kernel-select').value === '')
  assert.ok(!(await api('GET', 'api/kernels')).some((k) => k.id === id), 'shut down in the gateway')
  assert.equal(await page.locator('#kernel-state').getAttribute('data-state'), 'none', 'no other kernel was taken')
  assert.deepEqual(page.errors, [], 'no script errors in the page')
})

// ---- notebooks (issue 13) ----------------------------------------------------

// A tab of its own (a fresh browser profile unless `ctx` is given) on
// notebook `name`, its kernel idle.
async function notebookTab (name, { ctx, options } = {}) {
  let p
  if (ctx) {
    p = await ctx.newPage()
    p.errors = []
    p.on('pageerror', (e) => p.errors.push(e.message))
  } else {
    ({ ctx, p } = await newPage(options))
  }
  await p.goto(`${pageUrl}?token=${token}&notebook=${encodeURIComponent(name)}`)
  await idle(p)
  return { ctx, p, kernel: () => p.locator('#kernel-select').inputValue() }
}

async function sources (p) {
  return p.locator('textarea.source').evaluateAll((a) => a.map((t) => t.value))
}

async function shutDown (id) {
  if (id) await fetch(new URL(`api/kernels/${id}`, gatewayUrl), { method: 'DELETE', headers: { Authorization: `token ${token}` } })
}

test('a reload keeps outputs, counts and run times, and the notebook\'s own kernel with its state', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('reload.ipynb')
  const id = await kernel()
  await run('x = 41\nprint("kept", x + 1)', { p })
  await run('import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1)); plt.plot([1, 2]); plt.show()', { p })
  await p.locator('.cell').nth(1).locator('.outputs img').waitFor()
  const counts = await p.locator('.count').allInnerTexts()
  const timing = await p.locator('.timing').first().innerText()
  assert.match(timing, /^\d+(\.\d+)? s$/, `a run time is shown (${timing})`)
  const url = new URL(p.url())
  assert.equal(url.searchParams.get('notebook'), 'reload.ipynb')
  assert.equal(url.searchParams.get('kernel'), id)
  // Another kernel, as an agent would start one through the API: a reload
  // (or a new tab) must not attach to it.
  const agent = await api('POST', 'api/kernels', { name: 'python3' })
  await p.reload()
  await idle(p)
  assert.equal(await kernel(), id, 'the same kernel after the reload')
  assert.deepEqual(await p.locator('.count').allInnerTexts(), counts, 'execution counts kept')
  assert.equal((await p.locator('.cell').first().locator('.outputs').innerText()).trim(), 'kept 42')
  assert.ok(await p.locator('.cell').nth(1).locator('.outputs img[src^="data:image/png"]').count() === 1, 'the plot is back')
  assert.equal(await p.locator('.timing').first().innerText(), timing, 'the run time is kept')
  assert.equal((await outputText(await run('print(x)', { p }))).trim(), '41', 'the kernel still holds the state')

  // A new tab without a kernel in its address: the notebook's kernel, not
  // the agent's nor any other.
  const tab = await notebookTab('reload.ipynb', { ctx })
  assert.equal(await tab.kernel(), id)
  // A new notebook gets a kernel of its own.
  const other = await notebookTab('other.ipynb', { ctx })
  const otherId = await other.kernel()
  assert.ok(otherId !== id && otherId !== agent.id, 'a new notebook starts its own kernel')
  assert.deepEqual([...p.errors, ...tab.p.errors, ...other.p.errors], [])
  await ctx.close()
  await Promise.all([shutDown(otherId), shutDown(agent.id), shutDown(id)])
})

test('a reload while a cell runs: its output goes on in the same cell (the session is replayed)', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('running.ipynb')
  await run('import time\nfor i in range(30):\n    print("tick", i, flush=True)\n    time.sleep(0.1)', { p, wait: false })
  await p.locator('.outputs', { hasText: 'tick 3' }).waitFor()
  await p.reload()
  await idle(p)
  await done(0, p)
  const ticks = (await outputText(p.locator('.cell').first())).trim().split('\n').map((l) => Number(l.split(' ')[1]))
  // Every line, in order, once, in the same cell: what reached the old page
  // as it unloaded, too late to be handled, the new page gets again (it
  // names the last message it handled, and the gateway replays from there).
  assert.deepEqual(ticks, Array.from({ length: 30 }, (_, i) => i))
  assert.match(await p.locator('.count').first().innerText(), /^\[\d+\]$/)
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('two tabs on one notebook are told, and keep each other\'s edits', { timeout: T }, async () => {
  const a = await notebookTab('shared.ipynb')
  await a.p.locator('textarea.source').first().fill('a = 1')
  await a.p.click('#add-cell')
  await a.p.locator('textarea.source').nth(1).fill('b = 2')
  const b = await notebookTab('shared.ipynb', { ctx: a.ctx })
  for (const t of [a.p, b.p]) await t.locator('#notice', { hasText: 'open in another tab' }).waitFor()
  // A's edits are saved 300 ms after the last one: B has them by then.
  await b.p.waitForFunction(() => document.querySelectorAll('textarea.source').length === 2)
  assert.deepEqual(await sources(b.p), ['a = 1', 'b = 2'])
  assert.equal(await b.kernel(), await a.kernel(), 'B opened on A\'s kernel, not a new one')
  // Each edits its own cell, adds one: both see everything.
  await a.p.locator('textarea.source').first().fill('a = 10')
  await b.p.locator('textarea.source').nth(1).fill('b = 20')
  await b.p.click('#add-cell')
  await b.p.keyboard.type('c = 30')
  const want = ['a = 10', 'b = 20', 'c = 30']
  for (const t of [a.p, b.p]) {
    await t.waitForFunction((w) => JSON.stringify([...document.querySelectorAll('textarea.source')].map((x) => x.value)) === JSON.stringify(w), want)
  }
  await a.p.reload()
  await idle(a.p)
  assert.deepEqual(await sources(a.p), want, 'the stored notebook has both tabs\' edits')
  const id = await a.kernel()
  assert.equal(await b.kernel(), id, 'both tabs on the notebook\'s kernel')
  await a.ctx.close()
  await shutDown(id)
})

test('two tabs opened at once on a new notebook share one kernel', { timeout: T }, async () => {
  // Neither has a kernel to find when it opens: one starts it, the other
  // takes it, rather than each starting its own.
  const before = new Set((await api('GET', 'api/kernels')).map((k) => k.id))
  const { ctx } = await newPage()
  const [a, b] = await Promise.all([notebookTab('at-once.ipynb', { ctx }), notebookTab('at-once.ipynb', { ctx })])
  const id = await a.kernel()
  assert.ok(id, 'a kernel')
  await b.p.waitForFunction((k) => document.querySelector('#kernel-select').value === k, id)
  const started = (await api('GET', 'api/kernels')).filter((k) => !before.has(k.id))
  assert.deepEqual(started.map((k) => k.id), [id], 'one kernel started for the two tabs')
  assert.deepEqual([...a.p.errors, ...b.p.errors], [])
  await ctx.close()
  await shutDown(id)
})

test('.ipynb: download with outputs, open by the file picker and by a drop', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('export.ipynb')
  await run('print("to the file")', { p })
  await p.click('#add-markdown')
  await p.keyboard.type('# A heading')
  await p.keyboard.press('Shift+Enter')
  const [download] = await Promise.all([p.waitForEvent('download'), p.click('#download')])
  assert.equal(download.suggestedFilename(), 'export.ipynb')
  const nb = JSON.parse(readFileSync(await download.path(), 'utf8'))
  assert.equal(nb.nbformat, 4)
  assert.equal(nb.metadata.kernelspec.name, 'python3')
  const cells = nb.cells.filter((c) => c.source.length)
  assert.deepEqual(cells.map((c) => c.cell_type), ['code', 'markdown'])
  assert.deepEqual(cells[0].outputs, [{ output_type: 'stream', name: 'stdout', text: ['to the file\n'] }])
  assert.equal(cells[0].execution_count, 1)
  assert.deepEqual(cells[1].source, ['# A heading'])
  assert.ok(nb.cells.every((c) => typeof c.id === 'string'), 'cell ids (nbformat 4.5)')

  const made = {
    nbformat: 4,
    nbformat_minor: 4,
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3' } },
    cells: [
      { cell_type: 'markdown', metadata: {}, source: ['## From a file\n', 'with <b>raw</b> HTML'] },
      { cell_type: 'code', metadata: {}, execution_count: 7, source: ['print("old")'], outputs: [{ output_type: 'stream', name: 'stdout', text: ['old output\n'] }] }
    ]
  }
  await p.setInputFiles('#open-input', { name: 'opened.ipynb', mimeType: 'application/x-ipynb+json', buffer: Buffer.from(JSON.stringify(made)) })
  await p.waitForURL(/notebook=opened\.ipynb/)
  await idle(p)
  assert.equal(await p.locator('#notebook-name').inputValue(), 'opened')
  assert.equal(await p.locator('.markdown-view h2').innerText(), 'From a file')
  assert.ok(await p.locator('.markdown-view h2').isVisible(), 'a first Markdown cell is shown rendered')
  assert.equal(await p.locator('.markdown-view b').count(), 0, 'raw HTML in Markdown stays text')
  assert.equal(await p.locator('.count').nth(1).innerText(), '[7]')
  assert.equal((await outputText(p.locator('.cell').nth(1))).trim(), 'old output')
  const openedKernel = await kernel()

  // Dropped on the cells.
  made.cells[0].source = ['# Dropped']
  await p.evaluate((json) => {
    const dt = new DataTransfer()
    dt.items.add(new File([json], 'dropped.ipynb', { type: 'application/x-ipynb+json' }))
    const nbEl = document.getElementById('notebook')
    nbEl.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }))
    nbEl.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
  }, JSON.stringify(made))
  await p.waitForURL(/notebook=dropped\.ipynb/)
  await idle(p)
  assert.equal(await p.locator('.markdown-view h1').innerText(), 'Dropped')
  // Not a notebook: said so, nothing replaced.
  await p.setInputFiles('#open-input', { name: 'bad.ipynb', mimeType: 'application/json', buffer: Buffer.from('{"cells": 3}') })
  await p.locator('#notice', { hasText: 'not a notebook' }).waitFor()
  assert.deepEqual(p.errors, [])
  const droppedKernel = await kernel()
  await ctx.close()
  await Promise.all([shutDown(droppedKernel), shutDown(openedKernel)])
})

test('a notebook is renamed in place, and a new one gets a kernel of its own', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('draft.ipynb')
  await run('print("renamed")', { p })
  const id = await kernel()
  await p.fill('#notebook-name', 'Final report')
  await p.press('#notebook-name', 'Enter')
  await p.waitForURL(/notebook=Final\+report\.ipynb|notebook=Final%20report\.ipynb/)
  assert.deepEqual(await p.locator('#notebook-select option').allInnerTexts(), ['Final report', '+ New notebook'], 'the old name is gone')
  await p.reload()
  await idle(p)
  assert.equal(await p.locator('#notebook-name').inputValue(), 'Final report')
  assert.equal((await outputText(p.locator('.cell').first())).trim(), 'renamed')
  assert.equal(await kernel(), id, 'the same kernel under the new name')
  await p.selectOption('#notebook-select', '')
  await p.waitForURL(/notebook=Untitled\.ipynb/)
  await idle(p)
  const fresh = await kernel()
  assert.notEqual(fresh, id)
  assert.deepEqual(await sources(p), [''])
  assert.deepEqual(p.errors, [])
  await ctx.close()
  await Promise.all([shutDown(id), shutDown(fresh)])
})

test('command mode: Esc then A, B, D D, Z, M, Y, Enter, Shift+Enter', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('keys.ipynb')
  const ta = () => p.locator('textarea.source')
  await ta().first().fill('first')
  await ta().first().press('Escape')
  assert.equal(await p.evaluate(() => document.activeElement.classList.contains('cell')), true, 'the cell, not its editor, has the focus')
  await p.keyboard.press('b')
  await p.keyboard.type('below')
  await p.keyboard.press('Escape')
  await p.keyboard.press('a')
  await p.keyboard.type('between')
  await p.keyboard.press('Escape')
  assert.deepEqual(await sources(p), ['first', 'between', 'below'])
  await p.keyboard.press('d')
  await p.keyboard.press('d')
  assert.deepEqual(await sources(p), ['first', 'below'])
  await p.keyboard.press('z')
  assert.deepEqual(await sources(p), ['first', 'between', 'below'], 'Z undid the delete')
  // M makes a Markdown cell, rendered by the page's safe renderer.
  await p.keyboard.press('ArrowUp')
  await p.keyboard.press('Enter')
  await p.keyboard.press('Control+a')
  await p.keyboard.type('**bold** and <img src=x onerror=alert(1)>')
  await p.keyboard.press('Escape')
  await p.keyboard.press('m')
  const md = p.locator('.cell').first().locator('.markdown-view')
  assert.equal(await md.locator('strong').innerText(), 'bold')
  assert.equal(await md.locator('img').count(), 0)
  // Enter edits it again; Y makes it code again.
  await p.keyboard.press('Enter')
  assert.ok(await p.locator('.cell').first().locator('textarea').isVisible())
  await p.keyboard.press('Escape')
  await p.keyboard.press('y')
  assert.equal(await p.locator('.markdown-cell').count(), 0)
  // Shift+Enter in command mode runs and selects the next cell.
  await p.keyboard.press('ArrowDown')
  await p.keyboard.press('Enter')
  await p.keyboard.press('Control+a')
  await p.keyboard.type('print("from command mode")')
  await p.keyboard.press('Escape')
  await p.keyboard.press('Shift+Enter')
  await done(1, p)
  assert.equal((await outputText(p.locator('.cell').nth(1))).trim(), 'from command mode')
  assert.ok(await p.locator('.cell').nth(2).evaluate((c) => c.classList.contains('selected')))
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('cell toolbar and notebook actions: move, Run above, Clear outputs, Restart & run all', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('toolbar.ipynb')
  await run('v = 1', { p })
  await run('v = v * 10', { p })
  await run('print(v)', { p })
  assert.equal((await outputText(p.locator('.cell').nth(2))).trim(), '10')
  await p.locator('.cell').nth(1).locator('button.down').click()
  assert.deepEqual((await sources(p)).slice(0, 3), ['v = 1', 'print(v)', 'v = v * 10'])
  await p.locator('.cell').nth(2).locator('button.up').click()
  assert.deepEqual((await sources(p)).slice(0, 3), ['v = 1', 'v = v * 10', 'print(v)'])
  await p.click('#clear-outputs')
  assert.equal(await p.locator('.outputs .output').count(), 0)
  assert.deepEqual((await p.locator('.count').allInnerTexts()).slice(0, 3), ['[ ]', '[ ]', '[ ]'])
  // Run above the third cell: the first two only.
  await p.locator('.cell').nth(2).click({ position: { x: 5, y: 5 } })
  await p.click('#run-above')
  await done(1, p)
  assert.equal(await p.locator('.count').nth(2).innerText(), '[ ]')
  assert.match(await p.locator('.count').nth(1).innerText(), /^\[\d+\]$/)
  await p.click('#restart-run-all')
  assert.match(await p.locator('#confirm-dialog[open] #confirm-message').innerText(), /loses every variable/)
  await p.click('#confirm-ok')
  await p.waitForFunction(() => document.querySelectorAll('.count')[2].textContent === '[3]')
  await done(2, p)
  assert.equal((await outputText(p.locator('.cell').nth(2))).trim(), '10')
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('Tab completes from the kernel, Shift+Tab shows the signature', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('complete.ipynb')
  await run('import collections\ndef glovebox_helper(alpha, beta=2):\n    "Adds alpha and beta."\n    return alpha + beta', { p })
  const ta = p.locator('textarea.source').last()
  await ta.focus()
  await p.keyboard.type('glovebox_hel')
  await p.keyboard.press('Tab')
  await p.waitForFunction(() => [...document.querySelectorAll('textarea.source')].pop().value === 'glovebox_helper')
  // Several matches: a list to choose from with the arrows and Enter.
  await p.keyboard.type('\ncollections.Ord')
  await p.keyboard.press('Tab')
  await p.waitForFunction(() => [...document.querySelectorAll('textarea.source')].pop().value.endsWith('OrderedDict'))
  await p.keyboard.type('\ncollections.de')
  await p.keyboard.press('Tab')
  await p.locator('.completions li').first().waitFor()
  const [rowBottom, listTop, listWidth, rowWidth] = await p.evaluate(() => {
    const list = document.querySelector('.completions')
    const row = list.previousElementSibling.getBoundingClientRect()
    return [row.bottom, list.getBoundingClientRect().top, list.getBoundingClientRect().width, row.width]
  })
  assert.ok(listTop >= rowBottom - 1 && listWidth >= rowWidth - 2, 'the list sits under the editor, as wide as it')
  const items = await p.locator('.completions li').allInnerTexts()
  assert.ok(items.includes('defaultdict') && items.includes('deque'), items.join(' '))
  while (await p.locator('.completions li.active').innerText() !== 'deque') await p.keyboard.press('ArrowDown')
  await p.keyboard.press('Enter')
  assert.ok((await ta.inputValue()).endsWith('collections.deque'))
  assert.equal(await p.locator('.completions').count(), 0)
  // Shift+Tab inside the call: the signature and docstring.
  await p.keyboard.type('\nglovebox_helper(')
  await p.keyboard.press('Shift+Tab')
  const tip = p.locator('.tooltip pre')
  await tip.waitFor()
  assert.match(await tip.innerText(), /glovebox_helper\(alpha, beta=2\)/)
  assert.match(await tip.innerText(), /Adds alpha and beta/)
  await p.keyboard.press('Escape')
  assert.equal(await p.locator('.tooltip').count(), 0)
  assert.equal(await p.evaluate(() => document.activeElement.tagName), 'TEXTAREA', 'the first Esc closes the tip only')
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('code is highlighted, wraps, and the editor shows exactly its text', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('highlight.ipynb', { options: { viewport: { width: 700, height: 800 } } })
  const code = 'def area(r):  # a comment\n    return 3.14 * r ** 2 if r else None\n' + `s = "${'long string '.repeat(20)}"`
  const cell = p.locator('.cell').first()
  await cell.locator('textarea').fill(code)
  const hl = cell.locator('pre.highlight')
  assert.equal((await hl.innerText()).trimEnd(), code, 'the coloured copy is the same text')
  assert.equal(await hl.locator('.hl-keyword', { hasText: 'def' }).count(), 1)
  assert.equal(await hl.locator('.hl-def').innerText(), 'area')
  assert.equal(await hl.locator('.hl-comment').innerText(), '# a comment')
  assert.equal(await hl.locator('.hl-number').first().innerText(), '3.14')
  assert.equal(await hl.locator('.hl-constant').innerText(), 'None')
  assert.ok((await hl.locator('.hl-string').innerText()).startsWith('"long string'))
  const colours = await hl.evaluate((pre) => new Set([...pre.querySelectorAll('span')].map((s) => getComputedStyle(s).color)).size)
  assert.ok(colours >= 4, `${colours} colours`)
  // Long lines wrap (no sideways scrolling), and the textarea and its
  // coloured copy are the same height, so the caret sits on the text.
  const box = await cell.locator('textarea').evaluate((t) => [t.scrollWidth, t.clientWidth, t.offsetHeight, t.previousSibling.offsetHeight])
  assert.ok(box[0] <= box[1], `no horizontal overflow (${box})`)
  assert.equal(box[2], box[3], 'editor and highlight heights')
  assert.ok(box[2] > 4 * 20, 'the long line wrapped onto more rows')
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('Run all with an error: one traceback, later cells shown as not run', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('errors.ipynb')
  const ta = () => p.locator('textarea.source')
  await ta().first().fill('print("ok")')
  await p.click('#add-cell')
  await ta().nth(1).fill('1 / 0')
  await p.click('#add-cell')
  await ta().nth(2).fill('print("never")')
  await p.click('#run-all')
  await p.waitForFunction(() => [...document.querySelectorAll('.cell')].every((c) => !c.classList.contains('running')))
  assert.deepEqual(await p.locator('.count').allInnerTexts(), ['[1]', '[2]', '[ ]'], 'no cell left at [*]')
  assert.equal(await p.locator('.cell').nth(1).locator('.output.error').count(), 1)
  assert.ok(await p.locator('.cell').nth(2).evaluate((c) => c.classList.contains('aborted')))
  assert.equal(await p.locator('.cell').nth(2).locator('.timing').innerText(), 'not run')
  assert.equal(await p.locator('.cell').nth(2).locator('.output').count(), 0)
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('one traceback even when the reply comes before the iopub error', { timeout: T }, async () => {
  const { ctx, p } = await newPage()
  // The gateway's frames pass through unchanged, except that every iopub
  // "error" is held back 500 ms: the shell reply (which carries the
  // traceback too) arrives first.
  let held = 0
  await ctx.routeWebSocket(/\/channels/, (ws) => {
    const server = ws.connectToServer()
    ws.onMessage((m) => server.send(m))
    server.onMessage((m) => {
      if (typeof m === 'string' && m.includes('"msg_type":"error"') && m.includes('"channel":"iopub"')) {
        held++
        setTimeout(() => ws.send(m), 500)
      } else {
        ws.send(m)
      }
    })
  })
  await p.goto(`${pageUrl}?token=${token}&notebook=order.ipynb`)
  await idle(p)
  const cell = await run('raise ValueError("once")', { p })
  await p.waitForTimeout(800)
  assert.equal(held, 1, 'the error was held back')
  assert.equal(await cell.locator('.output.error').count(), 1)
  assert.equal((await outputText(cell)).match(/ValueError/g).length >= 1, true)
  assert.equal((await outputText(cell)).match(/once/g).length, (await cell.locator('.output.error').innerText()).match(/once/g).length)
  const id = await p.locator('#kernel-select').inputValue()
  await ctx.close()
  await shutDown(id)
})

test('a kernel that fails to start leaves the running one\'s state as it is', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('failstart.ipynb')
  await p.evaluate(() => {
    const sel = document.getElementById('spec-select')
    sel.append(new Option('No such kernel', 'no-such-kernelspec'))
    sel.value = 'no-such-kernelspec'
  })
  await p.click('#start')
  await p.locator('#notice', { hasText: 'Could not start a kernel' }).waitFor()
  assert.equal(await p.locator('#kernel-state').getAttribute('data-state'), 'idle')
  assert.equal(await p.locator('#start').isEnabled(), true)
  const id = await kernel()
  // An address naming a kernel that is gone: said so, and a new kernel of
  // the notebook's own (never another running one).
  await p.goto(`${pageUrl}?notebook=failstart.ipynb&kernel=00000000-0000-4000-8000-000000000000`)
  await p.locator('#notice', { hasText: 'is gone: a new one was started' }).waitFor()
  await idle(p)
  const replacement = await kernel()
  assert.ok(replacement && replacement !== id, 'a new kernel, not the running one')
  await shutDown(replacement)
  await ctx.close()
  await shutDown(id)
})

test('a long output scrolls inside its cell, with a toggle', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('long.ipynb')
  const cell = await run('for i in range(200000):\n    print("line", i)', { p })
  const out = cell.locator('.outputs')
  await out.locator('.truncated').waitFor()
  const [h, sh] = await out.evaluate((o) => [o.getBoundingClientRect().height, o.scrollHeight])
  assert.ok(h < 700, `the box is ${h}px tall`)
  assert.ok(sh > 100000, `it scrolls over ${sh}px`)
  assert.ok(await out.evaluate((o) => o.scrollTop > 0), 'it follows the end of the output')
  await cell.locator('.output-toggle').click()
  assert.ok(await out.evaluate((o) => o.getBoundingClientRect().height) > 100000, 'the toggle shows it whole')
  await cell.locator('.output-toggle').click()
  assert.ok(await out.evaluate((o) => o.getBoundingClientRect().height) < 700)
  // A short output has no box and no toggle.
  const short = await run('print("short")', { p })
  assert.equal(await short.locator('.output-toggle').isVisible(), false)
  // The long output is not kept in the browser's storage whole: a reload
  // says so instead of filling the storage.
  await p.reload()
  await idle(p)
  assert.match(await outputText(p.locator('.cell').first()), /not kept in the browser/)
  assert.equal((await outputText(p.locator('.cell').nth(1))).trim(), 'short')
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('phone width: a compact header, wrapped code, the first cell not scrolled sideways', { timeout: T }, async () => {
  const { ctx, p, kernel } = await notebookTab('phone.ipynb', { options: { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true } })
  const header = await p.locator('header.bar').evaluate((h) => h.getBoundingClientRect().height)
  assert.ok(header <= 844 * 0.1, `the header is ${header}px tall`)
  assert.ok(await p.locator('#kernel-state').isVisible(), 'the kernel\'s state stays in sight')
  assert.equal(await p.locator('#restart').isVisible(), false)
  await p.click('#menu')
  assert.ok(await p.locator('#restart').isVisible(), 'the menu shows the rest')
  await p.click('#menu')
  const cell = p.locator('.cell').first()
  await cell.locator('textarea').fill(`x = "${'wrap me '.repeat(30)}"`)
  await cell.locator('textarea').press('Shift+Enter')
  await p.reload()
  await idle(p)
  const sideways = await p.locator('textarea.source').first().evaluate((t) => [t.scrollLeft, t.scrollWidth - t.clientWidth])
  assert.deepEqual(sideways, [0, 0], 'no sideways scroll in the editor')
  // Every editor is as tall as its text, selected (tools shown) or not.
  // A line that wraps only while the cell shows its tools (selected),
  // typed and run within one task: the tools, and the editor's narrower
  // width, come and go within one frame.
  const n = await p.locator('.cell').count()
  await p.locator('.cell').nth(n - 1).locator('textarea').evaluate((t, code) => {
    t.focus()
    t.value = code
    t.dispatchEvent(new Event('input', { bubbles: true }))
    t.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', shiftKey: true, bubbles: true, cancelable: true }))
  }, `x = "${'y'.repeat(29)}"`)
  await done(n - 1, p)
  // (The text's own height: that of the coloured copy's contents, plus the
  // editor's padding.)
  const fits = await p.locator('textarea.source').evaluateAll((all) => all.filter((t) => t.value).map((t) => {
    const range = document.createRange()
    range.selectNodeContents(t.previousSibling)
    return t.offsetHeight - Math.round(range.getBoundingClientRect().height) - 16
  }))
  assert.ok(fits.every((d) => Math.abs(d) <= 10), `editor heights fit their text, within half a line (${fits})`)
  const widths = await p.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth])
  assert.ok(widths[0] <= widths[1], `no sideways scrolling of the page (${widths})`)
  const id = await kernel()
  await ctx.close()
  await shutDown(id)
})

test('a wrong or missing token: the page asks, with a clear message', { timeout: T }, async () => {
  const { ctx, p } = await newPage()
  await p.goto(`${pageUrl}?token=wrong`)
  await p.locator('#token-dialog[open]').waitFor()
  assert.match(await p.locator('#token-message').innerText(), /not accepted/)
  await p.fill('#token-input', token)
  await p.press('#token-input', 'Enter')
  await idle(p)
  assert.equal(await p.locator('#token-dialog[open]').count(), 0)
  await ctx.close()

  const fresh = await newPage()
  await fresh.p.goto(pageUrl)
  await fresh.p.locator('#token-dialog[open]').waitFor()
  assert.match(await fresh.p.locator('#token-message').innerText(), /token/)
  await fresh.ctx.close()
})

// The pictures of README.md and docs/page.md: build/browser/page-{light,dark,phone}.png.
async function tour (p) {
  const first = p.locator('textarea.source').first()
  await first.fill('# A notebook in a sandbox\nPlots, DataFrames and tracebacks from a **Python kernel** that has no network and its own `/home/user`.')
  await first.press('Escape')
  await p.keyboard.press('m')
  await p.keyboard.press('b')
}

test('light and dark, wide and phone-width: screenshots', { timeout: 2 * T }, async () => {
  for (const colorScheme of ['light', 'dark']) {
    const { ctx, p } = await newPage({ colorScheme })
    await p.goto(`${pageUrl}?token=${token}&notebook=Tour.ipynb`)
    await idle(p)
    await tour(p)
    await run('import numpy as np\n\ndef wave(x, k=1):\n    """A sine, k times as fast."""\n    return np.sin(k * x)  # vectorised\n\nprint("numpy", np.__version__, "in a sandbox")', { p })
    await run('import matplotlib.pyplot as plt\nx = np.linspace(0, 6, 200)\nplt.figure(figsize=(6, 2.4))\nplt.plot(x, wave(x)); plt.plot(x, wave(x, 2)); plt.show()', { p })
    await run('import pandas as pd\npd.DataFrame({"kernel": ["python3"], "sandboxed": [True]})', { p })
    await run('1 / 0', { p })
    await p.evaluate(() => { document.activeElement.blur(); window.scrollTo(0, 0) })
    const bg = await p.evaluate(() => getComputedStyle(document.body).backgroundColor)
    const dark = bg.match(/\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0) < 200
    assert.equal(dark, colorScheme === 'dark', `background ${bg} follows the ${colorScheme} setting`)
    await p.setViewportSize({ width: 1280, height: 1000 })
    await p.screenshot({ path: path.join(shots, `page-${colorScheme}.png`) })
    const id = await p.locator('#kernel-select').inputValue()
    await ctx.close()
    await api('DELETE', `api/kernels/${id}`)
  }
  const { ctx, p } = await newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true })
  await p.goto(`${pageUrl}?token=${token}&notebook=Phone.ipynb`)
  await idle(p)
  await tour(p)
  await run('import numpy as np\nprint("hello from a phone:", np.arange(5) ** 2)', { p })
  await run('import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 2.4)); plt.plot(np.sin(np.linspace(0, 6, 100))); plt.show()', { p })
  await p.evaluate(() => { document.activeElement.blur(); window.scrollTo(0, 0) })
  const widths = await p.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth])
  assert.ok(widths[0] <= widths[1], `no sideways scrolling at phone width (${widths})`)
  await p.screenshot({ path: path.join(shots, 'page-phone.png') })
  await ctx.close()
})

test('the token never appears in the gateway\'s log', { timeout: T }, async () => {
  assert.ok(gateway.log().length > 1000, 'the debug log was written')
  assert.ok(!gateway.log().includes(token))
})

// The kernel selector offers every installed kernelspec with its language;
// each starts from the page and runs a cell. scripts/test installs R's,
// ijavascript's and tslab's kernels; Glovebox's bash kernel is its own.
test('the kernel selector: every language starts and runs a cell', { timeout: 4 * T }, async () => {
  const specs = (await api('GET', 'api/kernelspecs')).kernelspecs
  const cases = [
    ['bash', 'echo $((6 * 7))'],
    ['ir', 'cat(6 * 7)'],
    ['javascript', 'console.log(6 * 7)'],
    ['tslab', 'const n: number = 6 * 7; console.log(n)']
  ].filter(([name]) => specs[name])
  assert.ok(cases.length >= 1, 'at least Glovebox\'s own bash kernel')
  await page.focus('#spec-select')
  const offered = await page.locator('#spec-select option').evaluateAll((os) => os.map((o) => [o.value, o.textContent]))
  for (const [name] of cases) {
    const option = offered.find(([value]) => value === name)
    assert.ok(option, `${name} is offered: ${JSON.stringify(offered)}`)
  }
  assert.match(offered.find(([v]) => v === 'bash')[1], /bash/i)
  for (const [name, code] of cases) {
    const before = (await api('GET', 'api/kernels')).length
    await page.selectOption('#spec-select', name)
    await page.click('#start')
    // Kernels only: without a kernel the "no kernel" placeholder alone
    // makes n + 1 options, before the new one is there.
    await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option:not([value=""])').length === n + 1, before)
    await idle(page)
    const id = await page.locator('#kernel-select').inputValue()
    assert.equal((await api('GET', `api/kernels/${id}`)).name, name)
    const cell = await run(code)
    assert.equal((await outputText(cell)).trim(), '42', name)
    await page.click('#shutdown')
    await page.click('#confirm-dialog[open] #confirm-ok')
    // (Without a kernel the list starts with a "no kernel" placeholder.)
    await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option:not([value=""])').length === n, before)
  }
  assert.deepEqual(page.errors, [], 'no script errors in the page')
})
