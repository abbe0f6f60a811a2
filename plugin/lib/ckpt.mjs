// Driving the ckpt binary: resolution (config `binary` if the user set it, else CKPT_BIN, else
// `ckpt` on PATH), one subprocess per call with a timeout, and its JSON Lines answer parsed.
// No engine logic lives here.

import { execFile, spawn } from 'node:child_process'
import { access, constants } from 'node:fs/promises'
import { delimiter, join } from 'node:path'

function onPath(name, env) {
  if (name.includes('/')) return [name]
  return (env.PATH ?? '').split(delimiter).filter(Boolean).map((dir) => join(dir, name))
}

/**
 * The binary to use: exactly one source decides, in this order: the config `binary` when the user
 * set it, else `CKPT_BIN` when set, else `ckpt` on PATH. A source that is set but broken is not
 * silently replaced by a later one (a stale `ckpt` on PATH must not win over CKPT_BIN).
 * Resolves to { binary } or { error } saying what was tried.
 */
export async function resolveBinary(configured, env = process.env) {
  const [source, name] = configured ? ['the plugin config "binary"', configured] : env.CKPT_BIN ? ['CKPT_BIN', env.CKPT_BIN] : ['PATH', 'ckpt']
  const tried = []
  for (const candidate of onPath(name, env)) {
    try {
      await access(candidate, constants.X_OK)
    } catch {
      if (name.includes('/')) tried.push(`${candidate}: not found or not executable`)
      continue
    }
    try {
      const version = await run(candidate, ['--version'], { timeoutMs: 10000 })
      if (version.code === 0) return { binary: candidate, source }
      tried.push(`${candidate}: --version exited ${version.code}`)
    } catch (error) {
      tried.push(`${candidate}: ${error.message}`)
    }
  }
  const where = source === 'PATH' ? `no runnable ckpt on PATH (${env.PATH ?? ''})` : `${source} = ${name}`
  return { error: `ckpt binary not usable: ${where}${tried.length ? ` (${tried.join('; ')})` : ''}`, source }
}

/** Runs ckpt with `args`; resolves to { code, records, stderr } (never rejects on exit codes). */
export function run(binary, args, { cwd, timeoutMs = 30000, signal } = {}) {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { cwd, timeout: timeoutMs, signal, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') {
        reject(new Error(`ckpt ${args.join(' ')} did not run: ${error.killed ? `timed out after ${timeoutMs} ms` : error.message}`))
        return
      }
      const records = []
      for (const line of stdout.split('\n')) {
        if (!line.startsWith('{')) continue
        try {
          records.push(JSON.parse(line))
        } catch {}
      }
      resolve({ code: error ? error.code : 0, records, stderr, stdout })
    })
  })
}

export function one(result, type) {
  return result.records.find((r) => r.type === type)
}

/** The error record's code and message; without one (a crash), the exit code and stderr's last line. */
export function errorText(result) {
  const error = one(result, 'error')
  if (error) return `${error.code}: ${error.message}`
  const last = result.stderr.trim().split('\n').at(-1)
  return `ckpt exited ${result.code} without a JSON answer${last ? ` (${last})` : ''}`
}

/**
 * Starts `ckpt ui --no-open --exit-with-parent` for `cwd`; resolves to { child, url } once it printed its address,
 * or rejects with what it said if it exits first or stays silent for `timeoutMs`.
 */
export function startWebView(binary, cwd, { timeoutMs = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    // --exit-with-parent: a harness that is killed outright leaves no server behind.
    const child = spawn(binary, ['-C', cwd, 'ui', '--no-open', '--exit-with-parent'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    const fail = (why) => {
      clearTimeout(timer)
      try { child.kill('SIGTERM') } catch {}
      reject(new Error(`ckpt ui ${why}${stderr.trim() ? `: ${stderr.trim().split('\n').at(-1)}` : ''}`))
    }
    const timer = setTimeout(() => fail(`printed no address in ${timeoutMs} ms`), timeoutMs)
    child.on('error', (error) => fail(`did not start (${error.message})`))
    child.on('exit', (code) => fail(`exited (${code}) before it served`))
    child.stderr.on('data', (chunk) => { stderr += chunk })
    child.stdout.on('data', (chunk) => {
      stdout += chunk
      const found = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]+)/.exec(stdout)
      if (!found) return
      clearTimeout(timer)
      child.removeAllListeners('exit')
      child.stdout.removeAllListeners('data')
      child.stdout.resume()
      resolve({ child, url: found[1] })
    })
  })
}
