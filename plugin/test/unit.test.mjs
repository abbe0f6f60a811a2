// Unit tests on the real cordis dispatcher and on the subprocess contract: the adapter's
// prepended listener runs before a policy that never calls next(), and JSON Lines parsing
// tolerates unknown fields and bad lines while mapping exit codes.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { chmodSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'

import { tempDir } from '../test-support/tmp.mjs'

import { Context } from '@deepseek-ai/cordis'

import * as ckptPlugin from '../index.mjs'
import { errorText, one, run } from '../lib/ckpt.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const CKPT = process.env.CKPT_BIN ?? resolve(here, '../../target/debug/ckpt')

test('prepended capture runs before a policy that never calls next(), and its decision passes through', async () => {
  const cwd = tempDir('ckpt-unit-')
  execFileSync('git', ['init', '-q'], { cwd })
  writeFileSync(join(cwd, 'a.txt'), 'before\n')
  execFileSync('git', ['add', '-A'], { cwd })
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'init'], { cwd })
  const ctx = new Context()
  const order = []
  ctx.on('fs/write-intent', () => {
    order.push('policy')
    return { kind: 'policy-decided' } // never calls next(), like fs-observation-policy
  })
  await ctx.plugin(ckptPlugin, { binary: CKPT })
  const session = { id: 's1', header: { cwd }, events: [{ type: 'tool/call', seq: 0, data: { callId: 'c1', turn: 1, step: 1 } }] }
  const exec = { agent: { session }, callId: 'c1' }
  ctx.on('fs/write-intent', (target, actor, next) => {
    order.push('late listener')
    return next()
  })
  const decision = await ctx.waterfall('fs/write-intent', { displayPath: 'a.txt' }, exec, () => undefined)
  assert.deepEqual(decision, { kind: 'policy-decided' })
  const listed = execFileSync(CKPT, ['-C', cwd, '--json', 'list'], { encoding: 'utf8' }).trim().split('\n').map((l) => JSON.parse(l))
  assert.equal(listed.length, 1, 'the checkpoint was taken although the policy ends the chain')
  assert.deepEqual(order, ['policy'], 'appended listeners never run behind the policy; ours was prepended')
})

test('JSON Lines parsing tolerates unknown fields and bad lines; exit codes are kept', async () => {
  const dir = tempDir('ckpt-fake-')
  const fake = join(dir, 'fake-ckpt')
  writeFileSync(
    fake,
    [
      '#!/bin/sh',
      'echo "not json"',
      'echo \'{"v":1,"type":"snapshot","id":"abc","created":true,"future_field":{"x":1}}\'',
      'echo \'{"broken": \'',
      'echo \'{"v":1,"type":"error","code":"refused","message":"needs --yes"}\'',
      'echo "human text" >&2',
      'exit 4',
    ].join('\n'),
  )
  chmodSync(fake, 0o755)
  const result = await run(fake, ['snapshot'])
  assert.equal(result.code, 4)
  assert.equal(result.records.length, 2)
  assert.equal(one(result, 'snapshot').future_field.x, 1)
  assert.equal(errorText(result), 'refused: needs --yes')
  await assert.rejects(run(join(dir, 'missing'), ['list']), /did not run/)
})
