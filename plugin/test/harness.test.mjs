// The adapter in a real DeepSeek Harness agent loop (real cordis, session store, tool runtime,
// fs-local, fs-observation-policy, write/read/edit tools, commands, agent loop) with a scripted
// model across three turns, and the real ckpt binary: every mutation is preceded by a
// checkpoint, /rewind 2 restores the files to before turn 2 and forks the conversation, and
// /rewind undo brings the later state back byte-exact.

import '../test-support/shim.mjs'

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'

import { tempDir } from '../test-support/tmp.mjs'

import { Context } from '@deepseek-ai/cordis'
import AgentRegistry from '@deepseek-ai/dsh-agent'
import AgentLoop from '@deepseek-ai/dsh-agent-loop'
import Commands from '@deepseek-ai/dsh-commands'
import LocalFileSystem from '@deepseek-ai/dsh-fs-local'
import * as FsPolicy from '@deepseek-ai/dsh-fs-observation-policy'
import LlmRuntime, { CallId, createUserMessage, LlmAdapter } from '@deepseek-ai/dsh-llm'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import SystemPrompt from '@deepseek-ai/dsh-system-prompt'
import * as ToolFs from '@deepseek-ai/dsh-tool-fs'
import * as StrReplaceEditor from '@deepseek-ai/dsh-tool-str-replace-editor'
import ToolRuntime, { defineContentToolFixture } from '@deepseek-ai/dsh-tools'

import * as ckptPlugin from '../index.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const CKPT = process.env.CKPT_BIN ?? resolve(here, '../../target/debug/ckpt')

function text(body) {
  return [
    { type: 'block-start', index: 0, blockType: 'text' },
    { type: 'block-end', index: 0, block: { type: 'text', text: body } },
    { type: 'usage', usage: { inputTokens: 1, outputTokens: 1 } },
    { type: 'finish', reason: { kind: 'stop' } },
  ]
}

function call(id, name, args) {
  return [
    { type: 'block-start', index: 0, blockType: 'tool-call' },
    { type: 'block-end', index: 0, block: { type: 'tool-call', id: CallId(id), name, arguments: JSON.stringify(args) } },
    { type: 'usage', usage: { inputTokens: 1, outputTokens: 1 } },
    { type: 'finish', reason: { kind: 'tool-calls' } },
  ]
}

class ScriptedModel extends LlmAdapter {
  constructor(script) {
    super()
    this.script = script
  }
  resolveModel(provider, model) {
    return Promise.resolve({ provider, id: model, name: model })
  }
  async *stream() {
    const next = this.script.shift()
    if (!next) throw new Error('script exhausted')
    yield* next
  }
}

function idle(ctx, agent) {
  return new Promise((done) => {
    const dispose = ctx.on('agent/status', ({ agent: subject, status }) => {
      if (subject === agent && status === 'idle') {
        dispose()
        done()
      }
    })
  })
}

test('three scripted turns, /rewind 2 with fork, and /rewind undo, byte-exact', { timeout: 60000 }, async () => {
  const cwd = tempDir('ckpt-harness-')
  execFileSync('git', ['init', '-q'], { cwd })
  writeFileSync(join(cwd, 'a.txt'), 'v0\n')
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qam', 'init', '--allow-empty'], { cwd })
  execFileSync('git', ['add', 'a.txt'], { cwd })
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'a'], { cwd })

  const a = join(cwd, 'a.txt')
  const b = join(cwd, 'b.txt')
  const model = new ScriptedModel([
    call('t1-read', 'read', { file_path: a }),
    call('t1-write', 'write', { file_path: a, content: 'v1\n' }),
    text('turn 1 done'),
    call('t2-read', 'read', { file_path: a }),
    call('t2-edit', 'edit', { file_path: a, old_string: 'v1', new_string: 'v2' }),
    text('turn 2 done'),
    call('t3-create', 'str_replace_editor', { command: 'create', path: b, file_text: 'created in turn 3\n' }),
    call('t3-bash', 'bash', { command: `printf 'from bash\\n' > ${join(cwd, 'c.txt')}` }),
    text('turn 3 done'),
    text('understood, the files were restored'),
  ])

  const ctx = new Context()
  await ctx.plugin(LlmRuntime)
  await ctx.plugin(SessionStore)
  await ctx.plugin(SystemPrompt, { persona: '' })
  await ctx.plugin(ToolRuntime)
  await ctx.plugin(AgentRegistry)
  await ctx.plugin(AgentLoop, { agents: [] })
  await ctx.plugin(LocalFileSystem, { cwd })
  await ctx.plugin(FsPolicy)
  await ctx.plugin(ToolFs)
  await ctx.plugin(StrReplaceEditor)
  await ctx.plugin(Commands)
  await ctx.plugin(ckptPlugin, { binary: CKPT })
  ctx.llm.registerAdapter(['mock'], model)
  // A stand-in `bash` tool: the real tools/execute dispatch runs it, so the adapter's shell hook
  // sees exactly what it would see for the real bash tool (which needs a shell service).
  ctx.tools.register(
    defineContentToolFixture({
      name: 'bash',
      description: 'run a shell command',
      parameters: { command: { type: 'string', required: true } },
      async execute(args) {
        execFileSync('sh', ['-c', args.command], { cwd })
        return [{ type: 'text', text: 'ok' }]
      },
    }),
  )

  const agent = ctx.agentLoop.create(SessionId('s1'), { provider: 'mock', model: 'mock' }, { cwd })
  const states = []
  for (const prompt of ['please update a', 'now edit a again', 'add b']) {
    states.push({ a: readFileSync(a, 'utf8'), b: existsSync(b) ? readFileSync(b, 'utf8') : null })
    const done = idle(ctx, agent)
    agent.followup(createUserMessage({ content: [{ type: 'text', text: prompt }], source: { kind: 'user' } }))
    await done
  }
  assert.equal(readFileSync(a, 'utf8'), 'v2\n', 'the scripted edits ran')
  assert.equal(readFileSync(b, 'utf8'), 'created in turn 3\n')
  assert.equal(readFileSync(join(cwd, 'c.txt'), 'utf8'), 'from bash\n')

  const listed = JSON.parse(`[${execFileSync(CKPT, ['-C', cwd, '--json', 'list'], { encoding: 'utf8' }).trim().split('\n').join(',')}]`)
  const seen = listed.map((r) => `${r.turn}.${r.step}:${r.trigger}`)
  // write (turn 1), edit (turn 2), str_replace_editor create (fs write intent) and bash (turn 3)
  assert.deepEqual(seen, ['1.2:write', '2.2:edit', '3.1:write', '3.2:bash'], JSON.stringify(listed))
  assert.ok(listed.every((r) => r.session === 's1' && r.kind === 'auto'))
  // Each checkpoint holds the bytes from before its mutation.
  const show = (id, path) => execFileSync('git', ['-C', cwd, 'show', `${id}:${path}`], { encoding: 'utf8' })
  assert.equal(show(listed[0].id, 'a.txt'), 'v0\n')
  assert.equal(show(listed[1].id, 'a.txt'), 'v1\n')
  assert.throws(() => show(listed[2].id, 'b.txt'), 'b.txt did not exist before str_replace_editor created it')
  assert.throws(() => show(listed[3].id, 'c.txt'), 'c.txt did not exist before bash wrote it')

  const c = join(cwd, 'c.txt')
  const before = { a: readFileSync(a, 'utf8'), b: readFileSync(b, 'utf8'), c: readFileSync(c, 'utf8') }
  const points = await ctx.commands.execute(agent, '/rewind', [], new AbortController().signal)
  assert.match(points.result.text, /turn 1 .*please update a/, points.result.text)
  assert.match(points.result.text, /turn 3 .*add b/, points.result.text)
  const signal = new AbortController().signal
  const rewound = await ctx.commands.execute(agent, '/rewind 2 --exact --yes', [], signal)
  assert.ok(rewound, 'the command ran')
  const result = rewound.result ?? rewound
  assert.equal(readFileSync(a, 'utf8'), states[1].a, `a.txt is as before turn 2: ${JSON.stringify(result)}`)
  assert.equal(existsSync(b), false, 'b.txt, created later, is gone with --exact')
  assert.equal(existsSync(c), false, 'c.txt, created later, is gone with --exact')
  assert.match(result.text, /conversation forked before turn 2 as session-/)
  const childId = result.text.match(/(session-[0-9a-f-]+)/)[1]
  const child = ctx.agents.get?.(childId) ?? [...(ctx.agents.list?.() ?? [])].find((x) => String(x.id) === childId)
  assert.ok(child, 'the forked agent exists')
  assert.equal(child.session.events.filter((e) => e.type === 'turn/start').length, 1, 'the fork holds turn 1 only')
  const childIdle = idle(ctx, child)
  child.followup(createUserMessage({ content: [{ type: 'text', text: 'continue' }], source: { kind: 'user' } }))
  await childIdle
  const userTexts = child.session.events
    .filter((e) => e.type === 'user/message')
    .flatMap((e) => e.data.content.map((block) => block.text))
  assert.ok(userTexts.some((t) => /\[ckpt\] The user rewound this conversation and the files in .* to before turn 2 \(checkpoint [0-9a-f]{8}\)\. Written back: a\.txt\. Deleted: b\.txt, c\.txt\. Re-read/.test(t)), `the notice reached the fork: ${JSON.stringify(userTexts)}`)

  const undone = await ctx.commands.execute(agent, '/rewind undo --yes', [], signal)
  assert.ok(undone)
  assert.equal(readFileSync(a, 'utf8'), before.a, 'undo restores a.txt byte-exact')
  assert.equal(readFileSync(b, 'utf8'), before.b, 'undo restores b.txt byte-exact')
  assert.equal(readFileSync(c, 'utf8'), before.c, 'undo restores c.txt byte-exact')
})
