// Pure pieces, no ckpt binary: the point grammar (every label the list shows is accepted; only
// listed points resolve, never a guard), rendering from JSON records, the notice, the binary
// resolution order, and the checkpoints projection's fold.

import assert from 'node:assert/strict'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'

import { resolveBinary } from '../lib/ckpt.mjs'
import { checkpointsProjection } from '../lib/projection.mjs'
import { describePoint, parseTarget, renderDiff, renderRestore, renderStatus, resolvePoint, restoreNotice, rewindPoints } from '../lib/render.mjs'

const cp = (id, turn, step, kind = 'auto') => ({ type: 'checkpoint', id, short: id.slice(0, 8), turn, step, kind, time: 't' })
const records = [cp('aaaa1111', 1, 1), cp('bbbb2222', 1, 3), cp('cccc3333', 2, 1), cp('dddd4444', null, null, 'guard')]
const points = rewindPoints(records)

test('every form the list shows is accepted; only listed points resolve', () => {
  for (const [words, id] of [[['1'], 'aaaa1111'], [['turn', '1'], 'aaaa1111'], [['turn:1'], 'aaaa1111'], [['1.3'], 'bbbb2222'], [['turn', '1.3'], 'bbbb2222'], [['turn:1.3'], 'bbbb2222'], [['bbbb'], 'bbbb2222'], [['latest'], 'cccc3333']]) {
    const target = parseTarget(words)
    assert.equal(target.error, undefined, words.join(' '))
    assert.equal(resolvePoint(target, points, records).point?.id, id, words.join(' '))
  }
  assert.match(resolvePoint(parseTarget(['1.2']), points, records).error, /no rewind point for turn 1\.2 \(points of turn 1: 1\.1, 1\.3\)/)
  assert.match(resolvePoint(parseTarget(['dddd']), points, records).error, /guard checkpoint/)
  assert.match(parseTarget(['yesterday']).error, /bad target/)
  assert.equal(resolvePoint(parseTarget(['latest']), points, records).point.kind, 'auto', 'latest is never a guard')
})

test('an id that is all digits names its checkpoint, and reads as that step, not as a whole turn', () => {
  const digits = rewindPoints([cp('11112222', 1, 1), cp('99050444', 1, 3)])
  const reads = (words) => describePoint(resolvePoint(parseTarget(words), digits).point)
  assert.equal(reads(['1']), 'before turn 1 (checkpoint 11112222)')
  assert.equal(reads(['99050444']), 'before turn 1.3 (checkpoint 99050444)', 'an id is not a whole turn')
  assert.equal(reads(['1.3']), 'before turn 1.3 (checkpoint 99050444)')
  const withGuard = [cp('11112222', 1, 1), cp('82842621', null, null, 'guard'), cp('0012aaaa', 2, 1), cp('0012bbbb', 2, 2)]
  const guardPick = resolvePoint(parseTarget(['82842621']), rewindPoints(withGuard), withGuard)
  assert.match(guardPick.error ?? '', /82842621 is a guard checkpoint .*use \/rewind undo/, 'an all-digit guard id is refused as a guard')
  assert.match(resolvePoint(parseTarget(['0012']), rewindPoints(withGuard), withGuard).error ?? '', /ambiguous id 0012/, 'leading zeros are kept')
  assert.match(resolvePoint(parseTarget(['7777']), rewindPoints(withGuard), withGuard).error ?? '', /no rewind point for turn 7777/)
})

test('restore, status and diff render from their records; the notice says exactly what changed', () => {
  const point = { ...points[2], wholeTurn: true }
  const restore = { type: 'restore', guard: 'eeee5555ffff', written: [], deleted: [], left: ['made.txt'], failed: [], unchanged: 3, verified: true }
  const text = renderRestore(restore, point, 'rewind', false)
  assert.match(text, /nothing needed changing/)
  assert.match(text, /left in place, created after that point \(1\):\n {4}made\.txt/)
  const notice = restoreNotice(restore, point, '/w', { forked: true })
  assert.equal(notice, 'The user rewound this conversation and the files in /w to before turn 2 (checkpoint cccc3333). No file needed changing. Left in place (created after that point, not removed): made.txt. Re-read any file before editing it.')
  assert.doesNotMatch(notice, /restored to/, 'no overstatement')
  const unprotected = { ...restore, left: [], not_protected: [{ path: 'dump.bin', reason: 'too_large: 500 bytes, limit 100' }] }
  assert.match(renderRestore(unprotected, point, 'rewind', false), /left in place, not protected \(1\):\n {4}dump\.bin {2}\[too_large: 500 bytes, limit 100\]/)
  assert.match(restoreNotice(unprotected, point, '/w', { forked: true }), /Left as they are, never checkpointed \(too large or unreadable\): dump\.bin\./)
  const status = renderStatus({ provider: 'git', workspace: '/w', protected: 4, not_protected: [{ path: { bytes_b64: '/w==' }, reason: 'ignored' }], checkpoints: 9, sessions: [{}, {}], ckpt_only_bytes: 2048, shared_bytes: 10, blobs: 5 }, { points: 3, guards: 1 })
  assert.match(status, /not protected \(1\):\n {2}<non-UTF-8 name, base64 \/w==> {2}\[ignored\]/)
  assert.match(status, /disk: 2\.0 KiB kept alive only by ckpt, 10 B shared/)
  const diff = renderDiff([{ type: 'diff.file', path: 'a', status: 'M', added: 2, removed: 1, old_mode: '100644', new_mode: '100755' }, { type: 'diff', files: 1, added: 2, removed: 1 }], point)
  assert.match(diff, / {2}M a {2}\+2 -1 {2}mode 100644 → 100755/)
})

test('binary order: config binary if set, else CKPT_BIN, else PATH; a broken source is not replaced', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'ckpt-bin-order-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const fake = (name) => {
    const p = join(dir, name)
    writeFileSync(p, '#!/bin/sh\necho ckpt 0\n')
    chmodSync(p, 0o755)
    return p
  }
  const onPath = fake('ckpt')
  const viaEnv = fake('env-ckpt')
  const viaConfig = fake('config-ckpt')
  assert.equal((await resolveBinary(viaConfig, { CKPT_BIN: viaEnv, PATH: dir })).binary, viaConfig)
  assert.equal((await resolveBinary(undefined, { CKPT_BIN: viaEnv, PATH: dir })).binary, viaEnv)
  assert.equal((await resolveBinary(undefined, { PATH: dir })).binary, onPath)
  const broken = await resolveBinary(undefined, { CKPT_BIN: join(dir, 'missing'), PATH: dir })
  assert.equal(broken.binary, undefined, 'a stale ckpt on PATH does not win over a broken CKPT_BIN')
  assert.match(broken.error, /CKPT_BIN = .*missing/)
})

test('the checkpoints projection folds tool/call and /rewind events, same reference otherwise, never throws', () => {
  const unit = checkpointsProjection({ shellTools: ['bash'], commandName: 'rewind' })
  let state = unit.init()
  const feed = (event) => {
    const next = unit.apply(state, event)
    const changed = next !== state
    state = next
    return changed
  }
  assert.equal(feed({ type: 'turn/start', seq: 0, data: { turn: 1 } }), true)
  assert.equal(feed({ type: 'user/message', seq: 0, data: { content: [{ type: 'text', text: 'context' }], source: { kind: 'runtime' } } }), false)
  assert.equal(feed({ type: 'user/message', seq: 0, data: { content: [{ type: 'text', text: '[ckpt] The user rewound' }], source: { kind: 'user' } } }), false, 'the plugin\'s own notice is not the prompt')
  assert.equal(feed({ type: 'user/message', seq: 0, data: { content: [{ type: 'text', text: 'please fix it' }], source: { kind: 'user' } } }), true)
  assert.equal(feed({ type: 'tool/call', seq: 1, data: { turn: 1, step: 1, callId: 'c1', name: 'read', arguments: '{}' } }), false)
  assert.equal(feed({ type: 'tool/call', seq: 2, data: { turn: 1, step: 2, callId: 'c2', name: 'write', arguments: '{}' } }), true)
  assert.equal(feed({ type: 'tool/call', seq: 3, data: { turn: 1, step: 2, callId: 'c3', name: 'edit', arguments: '{}' } }), false, 'one checkpoint per step')
  assert.equal(feed({ type: 'tool/call', seq: 4, data: { turn: 1, step: 3, callId: 'c4', name: 'str_replace_editor', arguments: '{"command":"view"}' } }), false)
  assert.equal(feed({ type: 'tool/call', seq: 5, data: { turn: 1, step: 3, callId: 'c5', name: 'str_replace_editor', arguments: 'not json' } }), true)
  assert.equal(feed({ type: 'command/run', seq: 6, data: { commandId: 'k1', name: 'rewind', args: ' 1 --yes' } }), true)
  assert.equal(feed({ type: 'command/run', seq: 7, data: { commandId: 'k2', name: 'other', args: '' } }), false)
  assert.equal(feed({ type: 'command/done', seq: 8, data: { commandId: 'k1', kind: 'success', text: 'Rewound\nmore' } }), true)
  assert.equal(feed({ type: 'tool/call', seq: 9, data: null }), false, 'a malformed event changes nothing and does not throw')
  const view = unit.schema.parse(unit.view(state))
  assert.deepEqual(view.points.map((p) => `${p.turn}.${p.step}:${p.tool}`), ['1.2:write', '1.3:str_replace_editor'])
  feed({ type: 'assistant/message', seq: 10, data: { turn: 1, message: { id: 'm1' } } })
  feed({ type: 'turn/end', seq: 11, data: { turn: 1 } })
  assert.deepEqual(unit.view(state).turns, [{ turn: 1, startSeq: 0, endSeq: 11, messageIds: ['m1'], prompt: 'please fix it' }])
  assert.deepEqual(view.rewinds, [{ seq: 6, commandId: 'k1', args: '1 --yes', kind: 'success', summary: 'Rewound' }])
  assert.throws(() => unit.schema.parse({ points: 'x' }))
})
