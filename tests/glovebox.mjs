// What the Node suites (tests/node, tests/e2b, tests/browser) share: a free
// loopback port, and a real glovebox from the build tree started on one.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'

export const build = process.env.GLOVEBOX_BUILD ?? path.resolve(import.meta.dirname, '../build')

export function freePort () {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

// Starts glovebox with a random token on a free port and resolves once it
// prints its URL. log() is what it wrote to stderr so far; stop() ends it.
// --zygote none and --pool none, each unless args name their own: a
// test's gateway starts kernels cold and keeps no pool, as the test says
// (gbclient.py's cold_args does the same for the Python suites).
export function coldArgs (args = []) {
  const named = (flag) => args.some((a) => a === flag || a.startsWith(flag + '='))
  return [...(named('--zygote') ? [] : ['--zygote', 'none']),
    ...(named('--pool') ? [] : ['--pool', 'none'])]
}

export async function startGlovebox (args = []) {
  const port = await freePort()
  const token = randomBytes(16).toString('hex')
  // Its own state directory (paused sandboxes), unless args name one: as
  // root the default, /var/lib/glovebox, is every gateway's.
  const stateDir = args.some((a) => a.startsWith('--state-dir'))
    ? null
    : mkdtempSync(path.join(os.tmpdir(), 'glovebox-state-'))
  const proc = spawn(path.join(build, 'glovebox'),
    ['--listen', `127.0.0.1:${port}`, '--token', token,
      ...(stateDir ? ['--state-dir', stateDir] : []), ...args, ...coldArgs(args)],
    { stdio: ['ignore', 'pipe', 'pipe'] })
  let log = ''
  proc.stderr.on('data', (d) => { log += d; process.stderr.write(d) })
  proc.on('exit', () => { if (stateDir) rmSync(stateDir, { recursive: true, force: true }) })
  await new Promise((resolve, reject) => {
    proc.stdout.on('data', (d) => { if (String(d).includes('serving at')) resolve() })
    proc.on('exit', (code) => reject(new Error(`glovebox exited with ${code}: ${log}`)))
  })
  return {
    proc,
    port,
    token,
    url: `http://127.0.0.1:${port}/`,
    log: () => log,
    stop: () => new Promise((resolve) => {
      if (proc.exitCode !== null) return resolve()
      proc.on('exit', resolve)
      proc.kill('SIGTERM')
    })
  }
}
