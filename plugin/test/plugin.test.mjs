// Adapter tests with a fake harness context and the real ckpt binary (CKPT_BIN, else the debug
// build): config validation, pre-mutation capture on every hook path, shared in-flight captures,
// failure policies, and /rewind list, preview, confirm-or-refuse, restore + fork, undo.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync, mkdirSync, chmodSync, existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'

import { tempDir } from '../test-support/tmp.mjs'

import { apply, Config } from '../index.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const CKPT = process.env.CKPT_BIN ?? resolve(here, '../../target/debug/ckpt')

function repo() {
  const dir = tempDir('ckpt-plugin-')
  const git = (...args) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], { cwd: dir, env: { ...process.env, HOME: dir } })
  git('init', '-q')
  writeFileSync(join(dir, 'a.txt'), 'original\n')
  git('add', '-A')
  git('commit', '-qm', 'init')
  return dir
}

function checkpoints(dir) {
  const out = execFileSync(CKPT, ['-C', dir, '--json', 'list'], { encoding: 'utf8' })
  return out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))
}

/** Just enough of a cordis context: listeners by event, services by name. */
function fakeContext(services = {}) {
  const listeners = {}
  const effects = []
  const ctx = {
    on(event, listener, options) {
      ;(listeners[event] ??= []).push({ listener, options })
    },
    effect(execute) {
      effects.push(execute())
    },
    effects,
    get: (name) => services[name],
    logger: () => ({ info() {}, warn() {}, error() {} }),
    listeners,
  }
  return ctx
}

function session(dir, events = []) {
  return { id: 's1', header: { cwd: dir }, events }
}

function toolCall(seq, callId, turn, step) {
  return { type: 'tool/call', seq, data: { callId, turn, step } }
}

test('config: defaults, unknown keys and bad values name the key', () => {
  const { validate } = Config['~standard']
  assert.equal(validate(undefined).value.commandName, 'rewind')
  assert.deepEqual(validate({ failurePolicy: 'closed' }).value.shellTools, ['bash', 'pwsh', 'terminal_send'])
  for (const [bad, key] of [[{ binry: 'x' }, 'binry'], [{ timeoutMs: -1 }, 'timeoutMs'], [{ commandName: 'Re wind' }, 'commandName'], [{ failurePolicy: 'maybe' }, 'failurePolicy'], [{ shellTools: 'bash' }, 'shellTools']]) {
    const result = validate(bad)
    assert.ok(result.issues?.some((i) => i.path?.[0] === key && i.message.includes(key)), JSON.stringify(result))
  }
})

test('every hook path takes a checkpoint before the mutation and passes next() through', async () => {
  const dir = repo()
  const ctx = fakeContext()
  apply(ctx, { binary: CKPT })
  for (const event of ['fs/write-intent', 'fs/edit-intent', 'tools/execute']) {
    assert.equal(ctx.listeners[event][0].options.prepend, true, `${event} must be prepended`)
  }
  const s = session(dir, [toolCall(1, 'c1', 1, 1), toolCall(2, 'c2', 1, 2), toolCall(3, 'c3', 2, 1), toolCall(4, 'c4', 2, 2)])
  const agent = { session: s, status: 'running' }
  const paths = [
    ['fs/write-intent', (l) => l({ displayPath: 'a.txt' }, { agent, callId: 'c1' }, () => 'write-intent'), 'write-intent', 1, 1, 'write'],
    ['fs/edit-intent', (l) => l({ displayPath: 'a.txt' }, { agent, callId: 'c2' }, () => ({ version: 7 })), { version: 7 }, 1, 2, 'edit'],
    ['fs/write-intent (str_replace_editor create)', (l) => l({ displayPath: 'b.txt' }, { agent, callId: 'c3' }, () => ({ kind: 'createIfAbsent' })), { kind: 'createIfAbsent' }, 2, 1, 'write'],
    ['tools/execute (bash)', (l) => l({ agent, callId: 'c4', name: 'bash' }, async () => 'ran'), 'ran', 2, 2, 'bash'],
  ]
  let content = 0
  for (const [label, call, expected, turn, step, trigger] of paths) {
    const event = label.split(' ')[0]
    writeFileSync(join(dir, 'a.txt'), `state before ${label}\n`)
    content += 1
    const result = await call(ctx.listeners[event][0].listener)
    assert.deepEqual(result, expected, `${label}: next()'s result is returned unchanged`)
    const last = checkpoints(dir).at(-1)
    assert.equal(last.turn, turn, label)
    assert.equal(last.step, step, label)
    assert.equal(last.trigger, trigger, label)
    assert.equal(last.session, 's1', label)
    const shown = execFileSync('git', ['-C', dir, 'show', `${last.id}:a.txt`], { encoding: 'utf8' })
    assert.equal(shown, `state before ${label}\n`, `${label}: the checkpoint holds the pre-mutation bytes`)
  }
  assert.equal(checkpoints(dir).length, content)
})

function watchRunning(dir) {
  const out = execFileSync(CKPT, ['-C', dir, '--json', 'watch', 'status'], { encoding: 'utf8' })
  return JSON.parse(out.trim().split('\n').at(-1)).running
}

async function eventually(check, what) {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((r) => setTimeout(r, 50))
  assert.ok(check(), what)
}

test('the watch daemon the snapshots started stops with the last session using it, and on unload', async () => {
  const dir = repo()
  const ctx = fakeContext()
  apply(ctx, { binary: CKPT })
  const listener = ctx.listeners['fs/write-intent'][0].listener
  const s1 = { id: 's1', header: { cwd: dir }, events: [toolCall(1, 'c1', 1, 1)] }
  const s2 = { id: 's2', header: { cwd: dir }, events: [toolCall(1, 'd1', 1, 1)] }
  await listener({}, { agent: { session: s1 }, callId: 'c1' }, () => 1)
  await listener({}, { agent: { session: s2 }, callId: 'd1' }, () => 1)
  assert.equal(watchRunning(dir), true, 'a watched snapshot started the daemon')
  const disposed = ctx.listeners['session/disposed'][0].listener
  disposed({ id: 's1' })
  await new Promise((r) => setTimeout(r, 300))
  assert.equal(watchRunning(dir), true, 'another session still uses it')
  disposed({ id: 's2' })
  await eventually(() => !watchRunning(dir), 'the last session ended: the daemon is stopped')

  // Started again by a later snapshot, it is stopped when the plugin unloads.
  writeFileSync(join(dir, 'a.txt'), 'again\n')
  const s3 = { id: 's3', header: { cwd: dir }, events: [toolCall(1, 'e1', 1, 1)] }
  await listener({}, { agent: { session: s3 }, callId: 'e1' }, () => 1)
  assert.equal(watchRunning(dir), true)
  for (const dispose of await Promise.all(ctx.effects)) await dispose()
  assert.equal(watchRunning(dir), false, 'unloading the plugin stops the daemon')
})

test('with watch off, no daemon is started or stopped', async () => {
  const dir = repo()
  const ctx = fakeContext()
  apply(ctx, { binary: CKPT, watch: false })
  const listener = ctx.listeners['fs/write-intent'][0].listener
  await listener({}, { agent: { session: session(dir, [toolCall(1, 'c1', 1, 1)]) }, callId: 'c1' }, () => 1)
  assert.equal(watchRunning(dir), false)
  assert.equal(checkpoints(dir).length, 1)
})

test('concurrent intents in one step share the capture in flight', async () => {
  const dir = repo()
  const tools = tempDir('ckpt-wrapper-')
  const counter = join(tools, 'calls')
  const wrapper = join(tools, 'ckpt-wrapper.sh')
  writeFileSync(wrapper, `#!/bin/sh\necho x >> "${counter}"\nexec "${CKPT}" "$@"\n`)
  chmodSync(wrapper, 0o755)
  const ctx = fakeContext()
  apply(ctx, { binary: wrapper })
  const agent = { session: session(dir, [toolCall(1, 'c1', 1, 1)]) }
  const listener = ctx.listeners['fs/write-intent'][0].listener
  await listener({}, { agent, callId: 'c1' }, () => 1) // resolves the binary (one --version call)
  const before = readFileSync(counter, 'utf8').split('\n').filter(Boolean).length
  writeFileSync(join(dir, 'a.txt'), 'changed\n')
  const agent2 = { session: session(dir, [toolCall(1, 'c9', 3, 1)]) }
  await Promise.all([1, 2, 3].map((n) => listener({}, { agent: agent2, callId: 'c9' }, () => n)))
  const after = readFileSync(counter, 'utf8').split('\n').filter(Boolean).length
  assert.equal(after - before, 1, 'three intents in one step spawn one snapshot')
})

test('calls with no position in the session log each get their own checkpoint', async () => {
  const dir = repo()
  const ctx = fakeContext()
  apply(ctx, { binary: CKPT })
  const agent = { session: session(dir, []) } // no tool/call events: turn and step unknown
  const listener = ctx.listeners['fs/write-intent'][0].listener
  for (const [n, callId] of ['x1', 'x2', 'x3'].entries()) {
    writeFileSync(join(dir, 'a.txt'), `version ${n}\n`)
    await listener({}, { agent, callId }, () => undefined)
  }
  assert.equal(checkpoints(dir).length, 3, 'every mutation was preceded by a checkpoint')
})

test('failure policy: open lets the tool run, closed fails the call', async () => {
  const dir = repo()
  const agent = { session: session(dir, [toolCall(1, 'c1', 1, 1)]) }
  const open = fakeContext()
  apply(open, { binary: '/nonexistent/ckpt' })
  const env = process.env.CKPT_BIN
  delete process.env.CKPT_BIN
  const savedPath = process.env.PATH
  process.env.PATH = '/nonexistent'
  try {
    assert.equal(await open.listeners['fs/write-intent'][0].listener({}, { agent, callId: 'c1' }, () => 'went ahead'), 'went ahead')
    const closed = fakeContext()
    apply(closed, { binary: '/nonexistent/ckpt', failurePolicy: 'closed' })
    await assert.rejects(closed.listeners['fs/write-intent'][0].listener({}, { agent, callId: 'c1' }, () => 'never'), /no checkpoint could be taken/)
  } finally {
    process.env.PATH = savedPath
    if (env !== undefined) process.env.CKPT_BIN = env
  }
})

test('/rewind lists, previews, refuses without confirmation, restores, forks and undoes', async () => {
  const dir = repo()
  const created = []
  let answer = 'Cancel'
  const ctx = fakeContext({
    userQuestions: { ask: async () => ({ answers: [{ id: 'ckpt-rewind', selected: [answer] }] }) },
    agents: { create: async (options) => created.push(options) },
  })
  const { command, capture } = apply(ctx, { binary: CKPT })
  const events = [
    { type: 'turn/start', seq: 0, data: { turn: 1, text: 'please edit a.txt' } },
    toolCall(1, 'c1', 1, 1),
    { type: 'turn/end', seq: 2, data: { turn: 1 } },
    { type: 'turn/start', seq: 3, data: { turn: 2, text: 'now break everything' } },
    toolCall(4, 'c2', 2, 1),
    { type: 'turn/end', seq: 5, data: { turn: 2 } },
  ]
  const s = session(dir, events)
  const agent = { session: s, status: 'idle' }
  await capture({ agent, callId: 'c1' }, 'write')
  writeFileSync(join(dir, 'a.txt'), 'after turn 1\n')
  await capture({ agent, callId: 'c2' }, 'bash')
  writeFileSync(join(dir, 'a.txt'), 'after turn 2\n')
  mkdirSync(join(dir, 'made'), { recursive: true })
  writeFileSync(join(dir, 'made', 'new.txt'), 'created in turn 2\n')

  const listed = await command.handler({ agent, rawInput: '' })
  assert.equal(listed.kind, 'success')
  assert.match(listed.text, /turn 1 .*please edit a\.txt/)
  assert.match(listed.text, /turn 2 .*now break everything/)

  const preview = await command.handler({ agent, rawInput: ' preview 2' })
  assert.equal(preview.kind, 'success')
  assert.match(preview.text, /a\.txt/)

  const running = await command.handler({ agent: { ...agent, status: 'running' }, rawInput: ' 2' })
  assert.equal(running.kind, 'error')

  const refused = await command.handler({ agent, rawInput: ' 2 --exact' })
  assert.equal(refused.kind, 'error')
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n', 'no confirmation, nothing changed')

  answer = 'Restore'
  const restored = await command.handler({ agent, rawInput: ' 2 --exact' })
  assert.equal(restored.kind, 'success', restored.text)
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 1\n')
  assert.equal(existsSync(join(dir, 'made', 'new.txt')), false, '--exact removed what turn 2 created')
  assert.equal(created.length, 1, 'the conversation was forked')
  assert.equal(created[0].seed.length, 3, 'at the turn/end before turn 2')
  assert.match(restored.text, /undo/)

  const undone = await command.handler({ agent, rawInput: ' undo --yes' })
  assert.equal(undone.kind, 'success', undone.text)
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n')
  assert.equal(readFileSync(join(dir, 'made', 'new.txt'), 'utf8'), 'created in turn 2\n', 'undo is byte-exact')

  const noUi = fakeContext()
  const bare = apply(noUi, { binary: CKPT })
  const failClosed = await bare.command.handler({ agent, rawInput: ' 1' })
  assert.equal(failClosed.kind, 'error', 'no question provider: fail closed')
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n')
})

test('/rewind refuses what it cannot do honestly: unknown options, a turn started during the question, a second rewind at once; undo keeps work made since', async () => {
  const dir = repo()
  let agent
  let during = async () => {}
  const ctx = fakeContext({
    userQuestions: {
      ask: async () => {
        await during()
        return { answers: [{ id: 'ckpt-rewind', selected: ['Restore'] }] }
      },
    },
    agents: { create: async () => {} },
  })
  const { command, capture } = apply(ctx, { binary: CKPT })
  const events = [
    { type: 'turn/start', seq: 0, data: { turn: 1, text: 'one' } },
    toolCall(1, 'c1', 1, 1),
    { type: 'turn/end', seq: 2, data: { turn: 1 } },
    { type: 'turn/start', seq: 3, data: { turn: 2, text: 'two' } },
    toolCall(4, 'c2', 2, 1),
    { type: 'turn/end', seq: 5, data: { turn: 2 } },
  ]
  agent = { session: session(dir, events), status: 'idle' }
  await capture({ agent, callId: 'c1' }, 'write')
  writeFileSync(join(dir, 'a.txt'), 'after turn 1\n')
  await capture({ agent, callId: 'c2' }, 'write')
  writeFileSync(join(dir, 'a.txt'), 'after turn 2\n')

  const typo = await command.handler({ agent, rawInput: ' 2 --exatc --yes' })
  assert.equal(typo.kind, 'error')
  assert.match(typo.text, /unknown option --exatc/)
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n')

  // The user answers Restore only after a new turn began: nothing is changed.
  during = async () => {
    agent.status = 'running'
  }
  const late = await command.handler({ agent, rawInput: ' 2' })
  assert.equal(late.kind, 'error')
  assert.match(late.text, /started a turn/)
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n')
  agent.status = 'idle'

  // A second rewind while the first waits for its answer is refused.
  let second
  during = async () => {
    second = await command.handler({ agent, rawInput: ' 1 --yes' })
  }
  const first = await command.handler({ agent, rawInput: ' 2' })
  assert.equal(first.kind, 'success', first.text)
  assert.equal(second.kind, 'error')
  assert.match(second.text, /still running/)
  during = async () => {}

  // Work made after the rewind survives its undo; what the rewind wrote goes back.
  writeFileSync(join(dir, 'mine.txt'), 'made after the rewind\n')
  const undone = await command.handler({ agent, rawInput: ' undo --yes' })
  assert.equal(undone.kind, 'success', undone.text)
  assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'after turn 2\n')
  assert.equal(readFileSync(join(dir, 'mine.txt'), 'utf8'), 'made after the rewind\n', 'undo left the new file alone')
})

test('a missing binary: the plugin loads, and /rewind says how to install', async () => {
  const dir = repo()
  const savedPath = process.env.PATH
  const env = process.env.CKPT_BIN
  delete process.env.CKPT_BIN
  process.env.PATH = '/nonexistent'
  try {
    const ctx = fakeContext()
    const { command } = apply(ctx, { binary: '/nonexistent/ckpt' })
    const answer = await command.handler({ agent: { session: session(dir), status: 'idle' }, rawInput: '' })
    assert.equal(answer.kind, 'error')
    assert.match(answer.text, /ckpt cannot run/)
    assert.match(answer.text, /\/nonexistent\/ckpt/)
  } finally {
    process.env.PATH = savedPath
    if (env !== undefined) process.env.CKPT_BIN = env
  }
})

test('the fork is composed as dsh composes its own: the host fork service first, else preset, setup, model and workspace', async () => {
  const dir = repo()
  const events = [
    { type: 'turn/start', seq: 0, data: { turn: 1, text: 'one' } },
    toolCall(1, 'c1', 1, 1),
    { type: 'turn/end', seq: 2, data: { turn: 1 } },
    { type: 'command/run', seq: 3, data: {} },
    { type: 'turn/start', seq: 4, data: { turn: 2, text: 'two' } },
    toolCall(5, 'c2', 2, 1),
    { type: 'turn/end', seq: 6, data: { turn: 2 } },
  ]
  const s = { id: 's1', header: { cwd: dir, agentPreset: 'code' }, events }
  const agent = { session: s, status: 'idle' }
  const prepare = async (ctx) => {
    const { command, capture } = apply(ctx, { binary: CKPT })
    await capture({ agent, callId: 'c1' }, 'write')
    writeFileSync(join(dir, 'a.txt'), 'after turn 1\n')
    await capture({ agent, callId: 'c2' }, 'bash')
    writeFileSync(join(dir, 'a.txt'), 'after turn 2\n')
    return command
  }

  // 1. The host's own fork service (the web app's apiProxy): asked at the turn/end before turn 2.
  const asked = []
  const viaHost = fakeContext({ apiProxy: { sessions: { fork: async (request) => (asked.push(request), { rpcId: request.rpcId, result: { ok: true, value: { sessionId: 'session-from-host' } } }) } } })
  const hostCommand = await prepare(viaHost)
  const viaHostAnswer = await hostCommand.handler({ agent, rawInput: ' 2 --yes' })
  assert.equal(viaHostAnswer.kind, 'success', viaHostAnswer.text)
  assert.deepEqual(asked.map((r) => r.payload), [{ sessionId: 's1', atSeq: 2 }])
  assert.match(viaHostAnswer.text, /conversation forked before turn 2 as session-from-host; this conversation is unchanged/)

  // 2. No fork service: agents.create with the preset mounted in setup, the default model, and the
  //    workspace attached, seeded through the out-of-band events up to turn 2's start.
  writeFileSync(join(dir, 'a.txt'), 'after turn 2\n')
  const created = []
  const mounted = []
  const attached = []
  const byHand = fakeContext({
    agents: { create: async (options) => created.push(options) },
    agentPresets: { resolve: async (id) => ({ id }), mount: async (agentCtx, id) => mounted.push([agentCtx, id]) },
    agentDefaultModel: { currentSelection: () => ({ provider: 'deepseek-official', model: 'deepseek-v4-flash' }) },
    workspaceRegistry: { list: () => [{ sessionIds: ['other'] }, { sessionIds: ['s1'], attachSession: async (id) => attached.push(id) }] },
  })
  const handCommand = await prepare(byHand)
  const byHandAnswer = await handCommand.handler({ agent, rawInput: ' 2 --yes' })
  assert.equal(byHandAnswer.kind, 'success', byHandAnswer.text)
  assert.equal(created.length, 1)
  const [options] = created
  assert.equal(options.seed.length, 4, 'through the command event after turn 1, up to turn 2')
  assert.deepEqual(options.meta, { cwd: dir, parentSession: 's1', seedLength: 4, agentPreset: 'code' })
  assert.deepEqual(options.agentOptions, { provider: 'deepseek-official', model: 'deepseek-v4-flash' })
  await options.setup('agent-ctx')
  assert.deepEqual(mounted, [['agent-ctx', 'code']], 'setup joins the parent preset')
  assert.deepEqual(attached, [options.sessionId], 'the child is attached to the parent workspace')
})

test('/rewind ui starts the web view for the workspace once, answers with its address, and stops it on unload', async () => {
  const dir = repo()
  const ctx = fakeContext()
  const { command, capture } = apply(ctx, { binary: CKPT })
  const s = session(dir, [toolCall(1, 'c1', 1, 1)])
  const agent = { session: s, status: 'idle' }
  await capture({ agent, callId: 'c1' }, 'write')
  const first = await command.handler({ agent, rawInput: 'ui' })
  assert.equal(first.kind, 'success', first.text)
  const url = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32})#session=s1/.exec(first.text)?.[1]
  assert.ok(url, first.text)
  const token = new URL(url).searchParams.get('token')
  const api = await fetch(new URL('/api/checkpoints', url), { headers: { 'X-Ckpt-Token': token } })
  assert.equal(api.status, 200)
  const body = await api.json()
  assert.deepEqual(body.records.map((r) => r.session), ['s1'], 'the workspace of the session')
  assert.equal((await fetch(new URL('/api/checkpoints', url))).status, 403, 'no token, no answer')
  const again = await command.handler({ agent, rawInput: 'ui' })
  assert.ok(again.text.includes(url), 'the running web view is reused')
  for (const dispose of ctx.effects) await dispose()
  let stopped = false
  for (let i = 0; i < 50 && !stopped; i++) {
    try {
      await fetch(new URL('/api/checkpoints', url), { headers: { 'X-Ckpt-Token': token } })
      await new Promise((r) => setTimeout(r, 100))
    } catch {
      stopped = true
    }
  }
  assert.ok(stopped, 'the web view stops when the plugin unloads')
})

test('/rewind in a session without checkpoints offers what its log rebuilds; /rewind trace puts it back after a confirmation, undoably', async () => {
  const dir = repo()
  const home = tempDir('ckpt-plugin-dsh-')
  const logDir = join(home, 'sessions', `--${dir.replace(/^\//, '').replaceAll('/', '-')}--`, 'session-cold01')
  mkdirSync(logDir, { recursive: true })
  const call = (seq, step, name, args) => JSON.stringify({ type: 'tool/call', seq, data: { turn: 1, step, callId: `c${step}`, name, arguments: JSON.stringify(args) } })
  const result = (seq, step) => JSON.stringify({ type: 'tool/result', seq, data: { message: { source: { kind: 'tool', callId: `c${step}` }, content: [{ type: 'tool-result', toolCallId: `c${step}`, isError: false }] } } })
  const lines = [
    JSON.stringify({ type: 'session', id: 'session-cold01', cwd: dir }),
    call(1, 1, 'write', { file_path: 'a.txt', content: 'written by the agent\n' }),
    result(2, 1),
    call(3, 2, 'edit', { file_path: 'a.txt', old_string: 'agent', new_string: 'AGENT' }),
    result(4, 2),
    call(5, 3, 'bash', { command: 'make' }),
    result(6, 3),
    call(7, 4, 'write', { file_path: 'b.txt', content: 'after the shell call\n' }),
    result(8, 4),
  ]
  writeFileSync(join(logDir, 'session.jsonl'), `${lines.join('\n')}\n`)
  writeFileSync(join(dir, 'a.txt'), 'ruined later\n')
  const saved = process.env.DSH_HOME
  process.env.DSH_HOME = home
  try {
    let answer = 'Cancel'
    const ctx = fakeContext({ userQuestions: { ask: async () => ({ answers: [{ id: 'ckpt-rewind', selected: [answer] }] }) } })
    const { command } = apply(ctx, { binary: CKPT })
    const agent = { session: { id: 'session-cold01', header: { cwd: dir }, events: [] }, status: 'idle' }

    const listed = await command.handler({ agent, rawInput: '' })
    assert.equal(listed.kind, 'success', listed.text)
    assert.match(listed.text, /no checkpoints in this session, but its log rebuilds these files:\ncall 1\.1 {2}write {2}a\.txt {2}rebuilds a\.txt\ncall 1\.2 {2}edit {2}a\.txt {2}rebuilds a\.txt/)

    const previewed = await command.handler({ agent, rawInput: ' trace preview 1.2' })
    assert.equal(previewed.kind, 'success', previewed.text)
    assert.match(previewed.text, /^Putting back the files as they were after tool call 1\.2, rebuilt from the session log, would:\n {2}write \(1\):\n {4}a\.txt$/)
    const partial = await command.handler({ agent, rawInput: ' trace preview 1.4' })
    assert.equal(partial.kind, 'success', partial.text)
    assert.match(partial.text, /write \(1\):\n {4}b\.txt\n {2}leave as they are, the log cannot rebuild them there \(1\):\n {4}a\.txt {2}\[a bash call ran/)
    const refused = await command.handler({ agent, rawInput: ' trace 1.2' })
    assert.equal(refused.kind, 'error')
    assert.match(refused.text, /not confirmed; nothing was changed\.\nPutting back the files as they were after tool call 1\.2.*\n {2}write \(1\):\n {4}a\.txt/)
    assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'ruined later\n')
    assert.equal(checkpoints(dir).length, 0, 'a dry run and a refusal take no checkpoint')

    answer = 'Restore'
    const restored = await command.handler({ agent, rawInput: ' trace 1.2' })
    assert.equal(restored.kind, 'success', restored.text)
    assert.match(restored.text, /^Put back the files as they were after tool call 1\.2 \(rebuilt from the session log as checkpoint [0-9a-f]{8}\):\n {2}written \(1\):\n {4}a\.txt/)
    assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'written by the AGENT\n')

    const undone = await command.handler({ agent, rawInput: ' undo --yes' })
    assert.equal(undone.kind, 'success', undone.text)
    assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'ruined later\n', 'undo is byte-exact')

    const bad = await command.handler({ agent, rawInput: ' trace 9.9 --yes' })
    assert.equal(bad.kind, 'error')
    assert.match(bad.text, /no tool call "9\.9"/)
  } finally {
    if (saved === undefined) delete process.env.DSH_HOME
    else process.env.DSH_HOME = saved
  }
})

test('/rewind trace reads the live log through the host\'s session query service, ahead of the file it lags', async () => {
  const dir = repo()
  const home = tempDir('ckpt-plugin-dsh-')
  const logDir = join(home, 'sessions', `--${dir.replace(/^\//, '').replaceAll('/', '-')}--`, 'session-live01')
  mkdirSync(logDir, { recursive: true })
  const header = { id: 'session-live01', createdAt: '2026-12-01T00:00:00Z', cwd: dir }
  const call = (seq, step, content) => ({ type: 'tool/call', seq, time: 1_700_000_000_000 + seq, data: { turn: 1, step, callId: `c${step}`, name: 'write', arguments: JSON.stringify({ file_path: 'a.txt', content }) } })
  const result = (seq, step) => ({ type: 'tool/result', seq, time: 1_700_000_000_000 + seq, data: { message: { source: { kind: 'tool', callId: `c${step}` }, content: [{ type: 'tool-result', toolCallId: `c${step}`, isError: false }] } } })
  const events = [call(1, 1, 'first\n'), result(2, 1), call(3, 2, 'second\n'), result(4, 2)]
  // The file on disk has only the first call yet: the second is still in the write batch.
  writeFileSync(join(logDir, 'session.jsonl'), `${[JSON.stringify({ type: 'session', ...header }), ...events.slice(0, 2).map((e) => JSON.stringify(e))].join('\n')}\n`)
  const saved = process.env.DSH_HOME
  process.env.DSH_HOME = home
  try {
    const asked = []
    const sessionQuery = { readSession: async (id) => { asked.push(id); return { session: header, events } } }
    const { command } = apply(fakeContext({ sessionQuery }), { binary: CKPT })
    const agent = { session: { id: 'session-live01', header: { cwd: dir }, events: [] }, status: 'idle' }
    const listed = await command.handler({ agent, rawInput: ' trace' })
    assert.equal(listed.kind, 'success', listed.text)
    assert.match(listed.text, /call 1\.2 {2}write {2}a\.txt {2}rebuilds a\.txt/, 'the call only the live log has')
    const restored = await command.handler({ agent, rawInput: ' trace 1.2 --yes' })
    assert.equal(restored.kind, 'success', restored.text)
    assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'second\n')
    assert.deepEqual(asked, ['session-live01', 'session-live01', 'session-live01'], 'list, plan and restore each read it')

    // A service that fails: the file is read instead, and says what it knows.
    const broken = { readSession: async () => { throw new Error('no such session') } }
    const fallback = apply(fakeContext({ sessionQuery: broken }), { binary: CKPT }).command
    const fromFile = await fallback.handler({ agent, rawInput: ' trace' })
    assert.equal(fromFile.kind, 'success', fromFile.text)
    assert.match(fromFile.text, /call 1\.1 {2}write/)
    assert.doesNotMatch(fromFile.text, /call 1\.2/)
  } finally {
    if (saved === undefined) delete process.env.DSH_HOME
    else process.env.DSH_HOME = saved
  }
})
