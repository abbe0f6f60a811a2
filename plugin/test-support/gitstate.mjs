// The user's git state as a comparable value, for tests that must prove ckpt left it alone.

import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'

function git(cwd, ...args) {
  return execFileSync('git', args, { cwd, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } })
}

/** The user's git state: HEAD, index bytes, refs outside refs/ckpt/, reflogs, stash, config. */
export function fingerprint(repo) {
  const gitDir = join(repo, '.git')
  const hash = (p) => (existsSync(p) ? createHash('sha256').update(readFileSync(p)).digest('hex') : 'absent')
  const reflogs = []
  const walk = (dir) => {
    if (!existsSync(dir)) return
    for (const entry of readdirSync(dir).sort()) {
      const p = join(dir, entry)
      if (statSync(p).isDirectory()) walk(p)
      else reflogs.push(`${p.slice(gitDir.length)} ${hash(p)}`)
    }
  }
  walk(join(gitDir, 'logs'))
  return {
    head: readFileSync(join(gitDir, 'HEAD'), 'utf8'),
    headCommit: git(repo, 'rev-parse', 'HEAD').trim(),
    index: hash(join(gitDir, 'index')),
    refs: git(repo, 'for-each-ref', '--format=%(refname) %(objectname)').split('\n').filter((l) => l && !l.startsWith('refs/ckpt/')),
    reflogs: reflogs.filter((l) => !l.startsWith('/refs/ckpt/')),
    stash: git(repo, 'stash', 'list'),
    config: hash(join(gitDir, 'config')),
  }
}

