// Web view benchmark: a workspace of N files (the shared 70k fixture by default) with C
// checkpoints (1,000 by default, across 10 sessions), served by `ckpt ui` and opened in headless
// Chromium: how long until the timeline shows every checkpoint, and how long the first diff takes
// to open (the file list of the newest checkpoint, then one file's lines), with `git status` on
// the same tree in the same run as a yardstick.
//
// usage: node bench/ui-bench.mjs [--files N] [--checkpoints C] [--ckpt PATH] [--repo DIR]
//   --repo: use this existing repository (a scratch clone is made; it is never written)

import { execFileSync, spawn } from 'node:child_process'
import { appendFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

import { ensureBrowser } from '../plugin/e2e/setup.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const args = process.argv.slice(2)
const option = (name, fallback) => {
  const at = args.indexOf(name)
  return at >= 0 ? args[at + 1] : fallback
}
const files = Number(option('--files', '70000'))
const checkpoints = Number(option('--checkpoints', '1000'))
const CKPT = resolve(option('--ckpt', join(here, '..', 'target', 'release', 'ckpt')))
const work = mkdtempSync(join(tmpdir(), 'ckpt-ui-bench-'))
process.on('exit', () => rmSync(work, { recursive: true, force: true }))
const ms = (t) => `${t.toFixed(0)} ms`

function sh (cmd, argv, options = {}) {
  return execFileSync(cmd, argv, { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024, ...options })
}

let origin = option('--repo')
if (!origin) {
  const shared = [join(here, '..', '..', 'shared', 'bench'), join(here, '..', 'shared', 'bench')].find((d) => existsSync(join(d, 'gen-repo.sh')))
  if (!shared) throw new Error('cannot find shared/bench/gen-repo.sh; pass --repo DIR')
  origin = join(work, `origin-${files}`)
  console.log(`generating a ${files}-file fixture…`)
  sh('bash', [join(shared, 'gen-repo.sh'), origin, String(files)])
}
const repo = join(work, 'repo')
sh('git', ['clone', '-q', origin, repo])
const tracked = sh('git', ['-C', repo, 'ls-files']).split('\n').filter((p) => p.endsWith('.txt') || p.endsWith('.md') || p.endsWith('.rs'))
if (!tracked.length) throw new Error('no text files to edit in the fixture')

console.log(`taking ${checkpoints} checkpoints (watched snapshots, one edit each)…`)
sh(CKPT, ['-C', repo, 'watch', 'start'])
const started = performance.now()
for (let i = 0; i < checkpoints; i++) {
  appendFileSync(join(repo, tracked[(i * 7919) % tracked.length]), `edit ${i}\n`)
  const session = `session-${i % 10}`
  const turn = Math.floor(i / 10) + 1
  sh(CKPT, ['-C', repo, 'snapshot', '--watch', '--kind', 'auto', '--session', session, '--turn', String(turn), '--step', '1', '--trigger', i % 3 ? 'edit' : 'bash'], { stdio: ['ignore', 'ignore', 'ignore'] })
}
console.log(`  ${ms(performance.now() - started)} for ${checkpoints} checkpoints`)
sh(CKPT, ['-C', repo, 'watch', 'stop'])
const listed = sh(CKPT, ['-C', repo, '--json', 'list']).split('\n').filter(Boolean).length
if (listed !== checkpoints) throw new Error(`expected ${checkpoints} checkpoints, ckpt list has ${listed}`)

const statusTimes = []
for (let i = 0; i < 5; i++) {
  const t = performance.now()
  sh('git', ['-C', repo, 'status', '--porcelain'])
  statusTimes.push(performance.now() - t)
}
statusTimes.sort((a, b) => a - b)

const server = spawn(CKPT, ['-C', repo, 'ui', '--no-open', '--exit-with-parent'], { stdio: ['ignore', 'pipe', 'inherit'] })
process.on('exit', () => server.kill('SIGKILL'))
let url
for await (const chunk of server.stdout) {
  url = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32})/.exec(String(chunk))?.[1]
  if (url) break
}

const need = createRequire(join(ensureBrowser(), 'package.json'))
const load = async (name) => {
  const mod = await import(pathToFileURL(need.resolve(name)).href)
  return mod.default ?? mod
}
const puppeteer = await load('puppeteer-core')
const system = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p))
const chromium = system ? null : await load('@sparticuz/chromium')
const browser = await puppeteer.launch(system
  ? { executablePath: system, headless: true, args: ['--no-sandbox', '--disable-gpu'] }
  : { executablePath: await chromium.executablePath(), args: chromium.args, headless: true })
const results = []
try {
  for (let run = 0; run < 3; run++) {
    const page = await browser.newPage()
    await page.setViewport({ width: 1400, height: 900 })
    let t = performance.now()
    await page.goto(url)
    await page.waitForFunction((n) => document.querySelectorAll('.node').length === n, { timeout: 60_000 }, checkpoints)
    const timeline = performance.now() - t
    // Clicks are dispatched in the page and timed there, from the click to the rendered answer
    // (puppeteer's own click first scrolls and waits for a stable layout, which is not the
    // user's wait).
    const timed = (click, shown) => page.evaluate((click, shown) => new Promise((resolve) => {
      const t = performance.now()
      ;[...document.querySelectorAll(click)].at(-1).click()
      const check = () => (document.querySelector(shown) ? resolve(performance.now() - t) : requestAnimationFrame(check))
      check()
    }), click, shown)
    const fileList = await timed('.node', '.file-list tr .path a')
    const fileLines = await timed('.file-list tr .path a', '#file-body .lines')
    results.push({ timeline, fileList, fileLines })
    await page.close()
  }
} finally {
  await browser.close()
  server.kill('SIGTERM')
}
const median = (key) => results.map((r) => r[key]).sort((a, b) => a - b)[1]
console.log(`\nckpt ui bench: ${files} files, ${checkpoints} checkpoints, median of 3 page loads, browser ${system ?? '@sparticuz/chromium'}`)
console.log(`git status --porcelain (median of 5)            ${ms(statusTimes[2])}`)
console.log(`timeline: page load until all ${checkpoints} nodes shown   ${ms(median('timeline'))}  (target < 1000 ms)`)
console.log(`first diff: click a node until its file list      ${ms(median('fileList'))}`)
console.log(`first diff: click a file until its lines          ${ms(median('fileLines'))}`)
console.log(`first diff, both steps                            ${ms(median('fileList') + median('fileLines'))}  (target < 300 ms)`)
