// The web view (`ckpt ui`) in a real headless Chromium, driven by puppeteer-core, on a real
// repository made with git: the HTTP edge refuses what it must (no token, a foreign Host or
// Origin, a restore without confirmation, the wrong method or type); the timeline shows the
// sessions, turns and steps; a known edit's diff shows its exact lines; a binary file is
// summarised; preview lists the right paths; restore needs the in-page confirmation and then
// the files equal the checkpoint; Undo brings the state before it back byte-exact; a new
// checkpoint appears without a reload; the user's git state is unchanged throughout.
// Screenshots go to $CKPT_UI_SHOTS (docs/ when refreshing the README's pictures).
//
// usage: node tests/browser/ui-browser.mjs   (CKPT_BIN = the ckpt binary; CHROMIUM optional)
// Exit 77: no browser can be had (the npm registry is unreachable and no CHROMIUM is given).

import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

import { ensureBrowser, Unreachable } from '../../plugin/e2e/setup.mjs'
import { fingerprint } from '../../plugin/test-support/gitstate.mjs'
import { tempDir } from '../../plugin/test-support/tmp.mjs'

const CKPT = process.env.CKPT_BIN
if (!CKPT) throw new Error('CKPT_BIN must name the ckpt binary')
const shots = process.env.CKPT_UI_SHOTS
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const cleanups = []
const step = (text) => console.log(`[ui-browser] ${text}`)

function git (cwd, ...args) {
  return execFileSync('git', ['-c', 'user.name=u', '-c', 'user.email=u@e', ...args], { cwd, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } })
}

function ckpt (cwd, ...args) {
  return execFileSync(CKPT, ['-C', cwd, '--json', ...args], { encoding: 'utf8' }).split('\n').filter(Boolean).map((l) => JSON.parse(l))
}

/** Every file under `root` (not .git) with its bytes, for byte-exact comparisons. */
function files (root, dir = root, out = {}) {
  for (const name of readdirSync(dir).sort()) {
    if (dir === root && name === '.git') continue
    const p = join(dir, name)
    if (statSync(p).isDirectory()) files(root, p, out)
    else out[p.slice(root.length + 1)] = readFileSync(p).toString('base64')
  }
  return out
}

function write (root, rel, content) {
  mkdirSync(join(root, rel, '..'), { recursive: true })
  writeFileSync(join(root, rel), content)
}

/** A raw request, so Host and Origin can be whatever a hostile page would send. */
function raw (port, { method = 'GET', path, headers = {}, body }) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, setHost: false, agent: false }, (res) => {
      let text = ''
      res.on('data', (c) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }))
    })
    req.on('error', reject)
    if (body) req.write(body)
    req.end()
  })
}

async function launchBrowser () {
  const dir = ensureBrowser()
  const need = createRequire(join(dir, 'package.json'))
  const load = async (name) => {
    const mod = await import(pathToFileURL(need.resolve(name)).href)
    return mod.default ?? mod
  }
  const puppeteer = await load('puppeteer-core')
  // Debian's chromium where it is installed (CI installs it); otherwise the one @sparticuz ships.
  const system = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p))
  if (system) {
    return { browser: await puppeteer.launch({ executablePath: system, headless: true, args: ['--no-sandbox', '--disable-gpu'] }), which: system }
  }
  const chromium = await load('@sparticuz/chromium')
  return { browser: await puppeteer.launch({ executablePath: await chromium.executablePath(), args: chromium.args, headless: true }), which: '@sparticuz/chromium' }
}

async function main () {
  const ws = join(tempDir('ckpt-ui-'), 'work')
  mkdirSync(ws, { recursive: true })
  git(ws, 'init', '-q', '-b', 'main')
  write(ws, '.gitignore', 'build.log\n')
  write(ws, 'a.txt', 'alpha\nbeta\ngamma\n')
  write(ws, 'notes.md', '# notes\n')
  write(ws, 'img.bin', Buffer.from([0, 1, 2, 3, 255, 0, 7]))
  git(ws, 'add', '-A')
  git(ws, 'commit', '-qm', 'start')
  write(ws, 'build.log', 'ignored\n')
  const before = fingerprint(ws)

  // Two sessions; session s1 has two turns.
  const snap = (...args) => ckpt(ws, 'snapshot', '--kind', 'auto', ...args).find((r) => r.type === 'snapshot')
  const c1 = snap('--session', 's1', '--turn', '1', '--step', '1', '--trigger', 'write')
  const state0 = files(ws)
  write(ws, 'a.txt', 'alpha\nBETA\ngamma\n')
  write(ws, 'new.txt', 'created in turn 1\n')
  write(ws, 'img.bin', Buffer.from([0, 1, 2, 3, 254, 0, 7, 9]))
  const c2 = snap('--session', 's1', '--turn', '1', '--step', '2', '--trigger', 'edit')
  write(ws, 'a.txt', 'alpha\nBETA\ngamma\ndelta\n')
  rmSync(join(ws, 'notes.md'))
  const c3 = snap('--session', 's1', '--turn', '2', '--step', '1', '--trigger', 'bash')
  const c4 = snap('--session', 's2', '--turn', '1', '--step', '1', '--trigger', 'write')
  assert.equal(c4.created, false, 'the same state makes no new checkpoint')
  write(ws, 'a.txt', 'alpha\nchanged after the last checkpoint\n')
  const worktree = files(ws)

  // The harness's log of session s1: a write and an edit in turn 1, a shell call in turn 2.
  const dshHome = join(ws, '..', 'dsh')
  const logDir = join(dshHome, 'sessions', `--${ws.replace(/^\//, '').replaceAll('/', '-')}--`, 's1')
  mkdirSync(logDir, { recursive: true })
  const at = Date.now() - 60_000
  const logCall = (seq, turn, stepNo, id, name, args) => JSON.stringify({ type: 'tool/call', seq, time: at + seq, data: { turn, step: stepNo, callId: id, name, arguments: JSON.stringify(args) } })
  const logResult = (seq, id) => JSON.stringify({ type: 'tool/result', seq, data: { message: { source: { kind: 'tool', callId: id }, content: [{ type: 'tool-result', toolCallId: id, isError: false }] } } })
  writeFileSync(join(logDir, 'session.jsonl'), [
    JSON.stringify({ type: 'session', id: 's1', cwd: ws }),
    logCall(1, 1, 1, 'w1', 'write', { file_path: 'new.txt', content: 'created in turn 1\n' }), logResult(2, 'w1'),
    logCall(3, 1, 2, 'e1', 'edit', { file_path: 'a.txt', old_string: 'BETA', new_string: 'Beta' }), logResult(4, 'e1'),
    logCall(5, 2, 1, 'b1', 'bash', { command: 'rm notes.md' }), logResult(6, 'b1'),
  ].join('\n') + '\n')

  step('starting ckpt ui')
  const server = spawn(CKPT, ['-C', ws, 'ui', '--no-open'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, DSH_HOME: dshHome } })
  cleanups.push(() => server.kill('SIGKILL'))
  let url
  let stderr = ''
  server.stderr.on('data', (c) => { stderr += c })
  for await (const chunk of server.stdout) {
    const m = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32})/.exec(String(chunk))
    if (m) { url = m[1]; break }
  }
  assert.ok(url, `ckpt ui printed no address: ${stderr}`)
  const { port } = new URL(url)
  const token = new URL(url).searchParams.get('token')
  const host = `127.0.0.1:${port}`

  step('the HTTP edge')
  const ok = await raw(port, { path: '/api/checkpoints', headers: { Host: host, 'X-Ckpt-Token': token } })
  assert.equal(ok.status, 200, ok.text)
  assert.match(ok.headers['content-security-policy'], /default-src 'none'/)
  assert.equal(ok.headers['access-control-allow-origin'], undefined, 'no CORS header')
  const listed = JSON.parse(ok.text).records
  assert.deepEqual(listed.map((r) => r.id), [c1.id, c2.id, c3.id], 'the same records as ckpt --json list')
  assert.deepEqual(listed, ckpt(ws, 'list', '--all'), 'byte for byte the JSON Lines records')
  for (const [what, request, status] of [
    ['no token', { path: '/api/checkpoints', headers: { Host: host } }, 403],
    ['a wrong token', { path: '/api/checkpoints', headers: { Host: host, 'X-Ckpt-Token': token.replace(/.$/, (c) => (c === '0' ? '1' : '0')) } }, 403],
    ['a foreign Host (DNS rebinding)', { path: '/api/checkpoints', headers: { Host: `evil.example:${port}`, 'X-Ckpt-Token': token } }, 403],
    ['localhost is not the address it bound', { path: '/api/checkpoints', headers: { Host: `localhost:${port}`, 'X-Ckpt-Token': token } }, 403],
    ['the page without its token', { path: '/', headers: { Host: host } }, 403],
    ['a foreign Origin', { path: '/api/checkpoints', headers: { Host: host, 'X-Ckpt-Token': token, Origin: 'http://evil.example' } }, 403],
    ['a restore by GET', { path: `/api/restore?id=${c1.id}&confirm=true`, headers: { Host: host, 'X-Ckpt-Token': token } }, 404],
    ['a restore without confirmation', { method: 'POST', path: '/api/restore', headers: { Host: host, 'X-Ckpt-Token': token, 'Content-Type': 'application/json' }, body: JSON.stringify({ id: c1.id, exact: true }) }, 409],
    ['a restore as a form post', { method: 'POST', path: '/api/restore', headers: { Host: host, 'X-Ckpt-Token': token, 'Content-Type': 'application/x-www-form-urlencoded' }, body: `id=${c1.id}&confirm=true` }, 415],
    ['a trace restore without confirmation', { method: 'POST', path: '/api/trace-restore', headers: { Host: host, 'X-Ckpt-Token': token, 'Content-Type': 'application/json' }, body: JSON.stringify({ node: 'trace:s1:1.2' }) }, 409],
    ['a restore with the token in the query only', { method: 'POST', path: `/api/restore?token=${token}`, headers: { Host: host, 'Content-Type': 'application/json' }, body: JSON.stringify({ id: c1.id, confirm: true }) }, 403],
    ['a path outside the workspace', { method: 'POST', path: '/api/preview', headers: { Host: host, 'X-Ckpt-Token': token, 'Content-Type': 'application/json' }, body: JSON.stringify({ id: c1.id, paths: ['../outside'] }) }, 400],
    ['a method other than GET and POST', { method: 'DELETE', path: '/api/checkpoints', headers: { Host: host, 'X-Ckpt-Token': token } }, 405],
  ]) {
    if (process.env.UI_DEBUG) console.log('request:', what)
    const got = await raw(port, request)
    assert.equal(got.status, status, `${what}: ${got.status} ${got.text}`)
    assert.equal(got.headers['access-control-allow-origin'], undefined, what)
  }
  assert.deepEqual(files(ws), worktree, 'nothing refused wrote anything')

  step('launching headless Chromium')
  const { browser, which } = await launchBrowser()
  cleanups.unshift(() => browser.close())
  step(`browser: ${which}`)
  const page = await browser.newPage()
  // The timeline re-renders every 2 s: an element found just before it may be gone by the click
  // (puppeteer then throws before dispatching anything), so such a click is tried again.
  const click = async (selector) => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await page.click(selector)
      } catch (error) {
        if (attempt >= 10 || !/detached|No element found|not clickable/i.test(error.message)) throw error
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    }
  }
  await page.setViewport({ width: 1400, height: 900 })
  const pageErrors = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()) })
  await page.goto(url)
  await page.waitForSelector('.node')
  assert.equal(new URL(page.url()).search, '', 'the token left the address bar')

  step('the timeline')
  await page.waitForSelector('.node.trace')
  const timeline = await page.$$eval('.session', (sessions) => sessions.map((s) => ({
    session: s.dataset.session,
    turns: [...s.querySelectorAll('.turn')].map((t) => ({ turn: t.dataset.turn, nodes: [...t.querySelectorAll('.node')].map((n) => `${n.querySelector('.where').textContent}:${n.querySelector('.trigger').textContent}:${n.querySelector('.badge').textContent}`) })),
  })))
  // Each checkpoint (taken before step S) comes before the call S its log recorded.
  assert.deepEqual(timeline, [{ session: 's1', turns: [{ turn: '1', nodes: ['.1:write:auto', '.1:write:call', '.2:edit:auto', '.2:edit:call'] }, { turn: '2', nodes: ['.1:bash:auto', '.1:bash:call'] }] }])

  step('a tool call from the session log: what it changed, replayed')
  await click('.node.trace[data-node="trace:s1:1.2"]')
  await page.waitForSelector('.trace-files tr')
  const callRows = await page.$$eval('.trace-files tr', (rows) => rows.map((r) => `${r.querySelector('.letter').textContent} ${r.dataset.path} ${r.querySelector('.counts').textContent}`))
  assert.deepEqual(callRows, ['M a.txt +1 −1'], 'the edit on the base the checkpoint before it holds')
  // The command shown to paste is quoted for a shell wherever a word needs it.
  assert.equal(await page.$eval('#selection code', (e) => e.textContent), 'ckpt trace restore trace:s1:1.2')
  const quoted = await page.evaluate(() => ['trace:s1:1.2', 'trace:`id>x`:1.1', "it's $(id)", '=ls', ''].map(shellWord))
  assert.deepEqual(quoted, ['trace:s1:1.2', "'trace:`id>x`:1.1'", "'it'\\''s $(id)'", "'=ls'", "''"])
  await click('.node.trace[data-node="trace:s1:2.1"]')
  await page.waitForFunction(() => document.querySelector('.trace-files tr .counts')?.textContent.startsWith('not rebuildable'))
  assert.match(await page.$eval('.trace-files', (e) => e.textContent), /not rebuildable: a bash call ran/)
  assert.equal(await page.$eval('#actions', (e) => getComputedStyle(e).display), 'none', 'no restore controls on a call')
  if (shots) await page.screenshot({ path: join(shots, 'ui-timeline.png') })

  step('the diff of a known edit')
  await click(`.node[data-id="${c2.id}"]`)
  await page.waitForSelector('.file-list tr')
  const fileRows = await page.$$eval('.file-list tr', (rows) => rows.map((r) => `${r.querySelector('.letter').textContent} ${r.dataset.path} ${r.querySelector('.counts').textContent}`))
  assert.deepEqual(fileRows, ['M a.txt +1 −1', 'M img.bin binary', 'A new.txt +1 −0'])
  let t0 = Date.now()
  await click('.file-list tr[data-path="a.txt"] .path a')
  await page.waitForSelector('#file-body .lines')
  const firstDiffMs = Date.now() - t0
  const lines = await page.$$eval('#file-body .lines tr', (rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent).join('|')))
  assert.deepEqual(lines, ['1|1| |alpha', '2||-|beta', '|2|+|BETA', '3|3| |gamma'])
  await click('#view-toggle')
  await page.waitForSelector('#file-body .lines.split')
  const split = await page.$$eval('#file-body .lines.split tr', (rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent).join('|')))
  assert.deepEqual(split, ['1|alpha|1|alpha', '2|beta||', '||2|BETA', '3|gamma|3|gamma'])
  if (shots) await page.screenshot({ path: join(shots, 'ui-diff.png') })
  await click('.file-list tr[data-path="img.bin"] .path a')
  await page.waitForSelector('#file-body .binary')
  assert.match(await page.$eval('#file-body .binary', (e) => e.textContent), /^Binary file: 7 B → 8 B$/)

  step('preview of a restore to the first checkpoint')
  await click(`.node[data-id="${c1.id}"]`)
  await click('#exact')
  await click('#preview')
  await page.waitForSelector('#outcome .preview')
  const previewed = await page.$$eval('#outcome .paths', (blocks) => Object.fromEntries(blocks.map((b) => [b.className.replace('paths ', ''), [...b.querySelectorAll('li')].map((li) => li.textContent)])))
  assert.deepEqual(previewed, { overwrite: ['a.txt', 'img.bin', 'notes.md'], delete: ['new.txt'], 'not-protected': ['build.log  [ignored]'] })
  assert.deepEqual(files(ws), worktree, 'a preview writes nothing')

  step('restore: Cancel changes nothing, Yes restores')
  await click('#restore')
  await page.waitForSelector('#confirm[open]')
  if (shots) await page.screenshot({ path: join(shots, 'ui-restore-dialog.png') })
  await click('#confirm-cancel')
  await page.waitForSelector('#outcome .cancelled')
  assert.deepEqual(files(ws), worktree, 'cancelled: nothing changed')
  await click('#restore')
  await page.waitForSelector('#confirm[open]')
  await click('#confirm-yes')
  await page.waitForSelector('#outcome .restored')
  const restoredText = await page.$eval('#outcome .restored', (e) => e.textContent)
  assert.match(restoredText, /Restored, and verified\./)
  assert.deepEqual(files(ws), { ...state0 }, 'the files are the first checkpoint, byte-exact (the ignored build.log kept)')
  const guards = ckpt(ws, 'list').filter((r) => r.kind === 'guard')
  assert.equal(guards.length, 1, 'one guard checkpoint first')

  step('Undo through the guard')
  const firstOutcome = await page.$('#outcome .restored')
  await click('#undo')
  await page.waitForSelector('#confirm[open]')
  await click('#confirm-yes')
  // The first restore's report stays until the undo's own replaces it.
  await page.waitForFunction((old) => !old.isConnected && document.querySelector('#outcome .restored'), {}, firstOutcome)
  assert.match(await page.$eval('#outcome .restored', (e) => e.textContent), /Restored, and verified\./)
  assert.deepEqual(files(ws), worktree, 'undo: the state before the restore, byte-exact')

  step('a tool call put back from the page: preview, Cancel, Yes, Undo')
  await click('.node.trace[data-node="trace:s1:1.2"]')
  await page.waitForSelector('#trace-preview')
  await click('#trace-preview')
  await page.waitForSelector('#outcome .trace-plan')
  const plan = await page.$$eval('#outcome .trace-plan .paths', (blocks) => Object.fromEntries(blocks.map((b) => [b.className.replace('paths ', ''), [...b.querySelectorAll('li')].map((li) => li.textContent)])))
  assert.deepEqual(plan, { rebuilt: ['a.txt', 'new.txt'] }, 'the edit on its checkpoint base, and the write before it')
  assert.deepEqual(files(ws), worktree, 'a trace preview writes nothing')
  const refsBefore = ckpt(ws, 'list').length
  await click('#trace-restore')
  await page.waitForSelector('#confirm[open]')
  assert.match(await page.$eval('#confirm-body', (e) => e.textContent), /put back as the session log rebuilds them \(2\)a\.txtnew\.txt/)
  await click('#confirm-cancel')
  await page.waitForSelector('#outcome .cancelled')
  assert.deepEqual(files(ws), worktree, 'cancelled: nothing changed')
  assert.equal(ckpt(ws, 'list').length, refsBefore, 'cancelled: no checkpoint made')
  await click('#trace-restore')
  await page.waitForSelector('#confirm[open]')
  await click('#confirm-yes')
  await page.waitForSelector('#outcome .restored')
  assert.match(await page.$eval('#outcome .restored', (e) => e.textContent), /Restored, and verified\./)
  assert.deepEqual(files(ws), { ...worktree, 'a.txt': Buffer.from('alpha\nBeta\ngamma\n').toString('base64') }, 'a.txt as the log rebuilds it after call 1.2; nothing else touched')
  const traceOutcome = await page.$('#outcome .restored')
  await click('#undo')
  await page.waitForSelector('#confirm[open]')
  await click('#confirm-yes')
  await page.waitForFunction((old) => !old.isConnected && document.querySelector('#outcome .restored'), {}, traceOutcome)
  assert.deepEqual(files(ws), worktree, 'undo of the trace restore: byte-exact')

  step('a new checkpoint appears without a reload')
  write(ws, 'later.txt', 'later\n')
  const c5 = snap('--session', 's3', '--turn', '1', '--step', '1', '--trigger', 'write')
  t0 = Date.now()
  await page.waitForSelector(`.node[data-id="${c5.id}"]`, { timeout: 10_000 })
  step(`it appeared after ${Date.now() - t0} ms`)

  step('a long session log is drawn a window at a time')
  const longDir = join(dshHome, 'sessions', `--${ws.replace(/^\//, '').replaceAll('/', '-')}--`, 'long')
  mkdirSync(longDir, { recursive: true })
  const longLines = [JSON.stringify({ type: 'session', id: 'long', cwd: ws })]
  for (let n = 0; n < 1200; n++) {
    longLines.push(logCall(10 + 2 * n, Math.floor(n / 10) + 1, (n % 10) + 1, `r${n}`, 'read', { file_path: 'a.txt' }), logResult(11 + 2 * n, `r${n}`))
  }
  writeFileSync(join(longDir, 'session.jsonl'), longLines.join('\n') + '\n')
  write(ws, 'later.txt', 'later, again\n')
  snap('--session', 's3', '--turn', '1', '--step', '2', '--trigger', 'write')
  await page.waitForSelector('.session[data-session="long"] .node', { timeout: 20_000 })
  const drawn = () => page.$eval('.session[data-session="long"]', (s) => ({ nodes: s.querySelectorAll('.node').length, earlier: s.querySelector('button.earlier')?.textContent ?? null }))
  assert.deepEqual(await drawn(), { nodes: 500, earlier: 'show earlier (700 not drawn)' })
  await page.$eval('.session[data-session="long"]', (s) => { s.open = true })
  await click('.session[data-session="long"] button.earlier')
  assert.deepEqual(await drawn(), { nodes: 1200, earlier: null })

  step('the status page')
  await click('#tab-status')
  await page.waitForSelector('#status .disk')
  const status = await page.$eval('#status', (e) => e.textContent)
  assert.match(status, /protected now: \d+ file\(s\)/)
  assert.match(status, /build\.log {2}\[ignored\]/)
  assert.match(status, /s1: 3/)

  assert.deepEqual(pageErrors, [], 'no script errors, no CSP violations')
  assert.deepEqual(fingerprint(ws), before, 'the user\'s git state is unchanged')
  const timings = { firstDiffMs, renderedNodes: await page.$$eval('.node', (n) => n.length) }
  console.log(`[ui-browser] timings ${JSON.stringify(timings)}`)
  console.log('ui-browser: all checks passed')
}

try {
  await main()
} catch (error) {
  if (error instanceof Unreachable) {
    console.error(`no browser: ${error.message}`)
    process.exitCode = 77
  } else {
    console.error(error)
    process.exitCode = 1
  }
} finally {
  for (const cleanup of cleanups) {
    try { await cleanup() } catch {}
  }
}
