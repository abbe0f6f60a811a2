// The packaging path: the real cordis loader and include plugin read a base config file, apply
// this package's cordis.patch.yml (plus a later layer that replaces the row's config, as a
// profile patch would), mount the adapter with that config, and its command runs.

import '../test-support/shim.mjs'

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, resolve } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'

import { tempDir } from '../test-support/tmp.mjs'

import { Context } from '@deepseek-ai/cordis'
import Include from '@deepseek-ai/cordis-plugin-include'
import Loader from '@deepseek-ai/cordis-plugin-loader'
import { SessionId } from '@deepseek-ai/dsh-session'
import yaml from 'js-yaml'

const here = dirname(fileURLToPath(import.meta.url))
const CKPT = process.env.CKPT_BIN ?? resolve(here, '../../target/debug/ckpt')
const packageRoot = resolve(here, '..')
const requireHere = createRequire(join(packageRoot, 'package.json'))

test('cordis.patch.yml mounts the adapter through the loader, with the layered config', { timeout: 30000 }, async () => {
  const dir = tempDir('ckpt-loader-')
  execFileSync('git', ['init', '-q'], { cwd: dir })
  writeFileSync(join(dir, 'a.txt'), 'a\n')
  execFileSync('git', ['add', '-A'], { cwd: dir })
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'init'], { cwd: dir })
  const base = join(dir, 'cordis.yml')
  writeFileSync(base, yaml.dump([
    { id: 'sessions', name: '@deepseek-ai/dsh-session' },
    { id: 'commands', name: '@deepseek-ai/dsh-commands' },
  ]))
  const ours = yaml.load(readFileSync(join(packageRoot, 'cordis.patch.yml'), 'utf8'))
  assert.equal(ours[0].insert[0].id, 'ckpt')
  const profileLayer = { id: 'ckpt', config: { binary: CKPT, commandName: 'ckpt-rewind' } }

  const ctx = new Context()
  ctx.baseUrl = `${pathToFileURL(dir).href}/`
  await ctx.plugin(Loader)
  ctx.loader.internal = {
    version: 'v2',
    async import(specifier) {
      if (specifier === '@ckpt/dsh-plugin') return import(pathToFileURL(join(packageRoot, 'index.mjs')).href)
      if (specifier.startsWith('file:') || specifier.startsWith('node:')) return import(specifier)
      return import(pathToFileURL(requireHere.resolve(specifier)).href)
    },
  }
  ctx.loader.builtins.include = Include
  try {
    await ctx.loader.create({ name: 'cordis:include', config: { path: pathToFileURL(base).href, patches: [...ours, profileLayer] } })
    await ctx.loader.await()
    const session = ctx.sessions.create(SessionId('loader-s1'), { meta: { cwd: dir } })
    const agent = { id: session.id, session, status: 'idle' }
    const names = ctx.commands.list(agent).map((entry) => entry.name)
    assert.ok(names.includes('ckpt-rewind'), `the layered config named the command: ${names}`)
    const execution = await ctx.commands.execute(agent, '/ckpt-rewind', [], new AbortController().signal)
    assert.equal(execution?.result?.kind, 'success', JSON.stringify(execution?.result))
    assert.match(execution.result.text, /no rewind points yet/)
  } finally {
    await ctx.fiber.dispose()
  }
})
