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
  ctx.setDefaultTimeout(T)
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
  assert.equal(new URL(page.url()).search, '', 'the token left the address bar')
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

test('Tab indents in the editor, Shift+Tab dedents', { timeout: T }, async () => {
  const ta = page.locator('.cell').last().locator('textarea')
  await ta.focus()
  await page.keyboard.type('for i in range(2):')
  await page.keyboard.press('Enter')
  await page.keyboard.press('Tab')
  await page.keyboard.type('print("row", i)')
  assert.equal(await ta.inputValue(), 'for i in range(2):\n    print("row", i)')
  await page.keyboard.press('Shift+Tab')
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
  assert.equal(await page.title(), 'Glovebox', 'the output\'s scripts did not run')
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

test('New kernel and Shut down from the page', { timeout: T }, async () => {
  const before = (await api('GET', 'api/kernels')).length
  await page.click('#start')
  await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option').length === n + 1, before)
  await idle(page)
  const id = await page.locator('#kernel-select').inputValue()
  assert.ok((await api('GET', 'api/kernels')).some((k) => k.id === id))
  await page.click('#shutdown')
  await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option').length === n, before)
  assert.ok(!(await api('GET', 'api/kernels')).some((k) => k.id === id), 'shut down in the gateway')
  assert.deepEqual(page.errors, [], 'no script errors in the page')
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

test('light and dark, wide and phone-width: screenshots', { timeout: 2 * T }, async () => {
  for (const colorScheme of ['light', 'dark']) {
    const { ctx, p } = await newPage({ colorScheme })
    await p.goto(`${pageUrl}?token=${token}`)
    await idle(p)
    await run('import numpy as np\nprint("numpy", np.__version__, "in a sandbox")', { p })
    await run('import matplotlib.pyplot as plt\nx = np.linspace(0, 6, 200)\nplt.figure(figsize=(6, 2.4))\nplt.plot(x, np.sin(x)); plt.plot(x, np.cos(x)); plt.show()', { p })
    await run('import pandas as pd\npd.DataFrame({"kernel": ["python3"], "sandboxed": [True]})', { p })
    await run('1 / 0', { p })
    await p.evaluate(() => { document.activeElement.blur(); window.scrollTo(0, 0) })
    const bg = await p.evaluate(() => getComputedStyle(document.body).backgroundColor)
    const dark = bg.match(/\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0) < 200
    assert.equal(dark, colorScheme === 'dark', `background ${bg} follows the ${colorScheme} setting`)
    await p.screenshot({ path: path.join(shots, `page-${colorScheme}.png`) })
    await ctx.close()
  }
  const { ctx, p } = await newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true })
  await p.goto(`${pageUrl}?token=${token}`)
  await idle(p)
  await run('print("hello from a phone")', { p })
  const widths = await p.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth])
  assert.ok(widths[0] <= widths[1], `no sideways scrolling at phone width (${widths})`)
  await p.screenshot({ path: path.join(shots, 'page-phone.png'), fullPage: true })
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
    await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option').length === n + 1, before)
    await idle(page)
    const id = await page.locator('#kernel-select').inputValue()
    assert.equal((await api('GET', `api/kernels/${id}`)).name, name)
    const cell = await run(code)
    assert.equal((await outputText(cell)).trim(), '42', name)
    await page.click('#shutdown')
    await page.waitForFunction((n) => document.querySelectorAll('#kernel-select option').length === n, before)
  }
  assert.deepEqual(page.errors, [], 'no script errors in the page')
})
