// Driving the ckpt binary: resolution (config, CKPT_BIN, PATH), one subprocess per call with a
// timeout, and its JSON Lines answer parsed. No engine logic lives here.

import { execFile } from 'node:child_process'
import { access, constants } from 'node:fs/promises'
import { delimiter, join } from 'node:path'

function onPath(name, env) {
  if (name.includes('/')) return [name]
  return (env.PATH ?? '').split(delimiter).filter(Boolean).map((dir) => join(dir, name))
}

/** The first working binary of: config `binary`, `CKPT_BIN`, `ckpt` on PATH; else undefined. */
export async function resolveBinary(configured, env = process.env) {
  const names = [configured, env.CKPT_BIN, 'ckpt'].filter(Boolean)
  for (const candidate of names.flatMap((name) => onPath(name, env))) {
    try {
      await access(candidate, constants.X_OK)
      const version = await run(candidate, ['--version'], { timeoutMs: 10000 })
      if (version.code === 0) return candidate
    } catch {}
  }
  return undefined
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

export function errorText(result) {
  const error = one(result, 'error')
  return error ? `${error.code}: ${error.message}` : result.stderr.trim() || `exit ${result.code}`
}
