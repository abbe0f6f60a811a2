// ckpt adapter for the DeepSeek Harness: a checkpoint before every workspace mutation (write,
// edit and str_replace_editor through the fs intents; shell tools on tools/execute) and a
// /rewind command. All engine logic stays in the ckpt binary, driven as a subprocess through its
// JSON Lines contract; this file only maps harness events to ckpt commands.

import { randomUUID } from 'node:crypto'

import { Config as ConfigSchema } from './lib/config.mjs'
import { errorText, one, resolveBinary, run } from './lib/ckpt.mjs'

export const name = 'ckpt'
export const inject = []
export const Config = ConfigSchema

const INSTALL_HINT =
  'ckpt is not installed or not runnable: install it (cargo install --path . in the ckpt checkout), ' +
  'or set the plugin config "binary" or the CKPT_BIN environment variable to its path.'

/** Where an exec (fs actor or tool execution) sits: session, cwd, turn and step. */
function position(exec) {
  const session = exec?.agent?.session
  if (!session) return undefined
  const callId = exec.rootCallId ?? exec.callId
  const events = session.events ?? []
  const call = [...events].reverse().find((e) => e?.type === 'tool/call' && e?.data?.callId === callId)
  return { session, id: String(session.id), cwd: session.header?.cwd, turn: call?.data?.turn, step: call?.data?.step, callId }
}

export function apply(ctx, rawConfig) {
  const checked = ConfigSchema['~standard'].validate(rawConfig)
  if (checked.issues) throw new Error(`invalid ckpt config: ${checked.issues.map((i) => i.message).join('; ')}`)
  const config = checked.value
  const log = typeof ctx.logger === 'function' ? ctx.logger('ckpt') : { info() {}, warn() {}, error() {} }
  const inflight = new Map()
  const lastGuard = new Map()
  // Forked sessions owed a notice: it joins their next step's messages, once.
  const pendingNotices = new Map()
  let binary
  const binaryReady = () => (binary ??= resolveBinary(config.binary).then((found) => {
    if (!found) log.warn(INSTALL_HINT)
    return found
  }))

  const ckpt = async (cwd, args, signal) => {
    const bin = await binaryReady()
    if (!bin) throw new Error(INSTALL_HINT)
    return run(bin, ['-C', cwd, '--json', ...args], { timeoutMs: config.timeoutMs, signal })
  }

  /** One snapshot per (session, turn, step): concurrent intents share the capture in flight. */
  const capture = async (exec, trigger) => {
    const pos = position(exec)
    if (!pos?.cwd) return
    // Without a position in the log, a call is its own step: sharing by an unknown (turn, step)
    // would silently skip every later mutation of the session.
    const known = pos.turn !== undefined && pos.step !== undefined
    const key = known ? `${pos.id}\u0000${pos.turn}\u0000${pos.step}` : `${pos.id}\u0000call\u0000${pos.callId}`
    if (!inflight.has(key)) {
      const args = ['snapshot', '--kind', 'auto', '--session', pos.id, '--trigger', trigger]
      if (pos.turn !== undefined) args.push('--turn', String(pos.turn))
      if (pos.step !== undefined) args.push('--step', String(pos.step))
      const pending = ckpt(pos.cwd, args).then((result) => {
        if (result.code !== 0) throw new Error(errorText(result))
        return one(result, 'snapshot')
      })
      inflight.set(key, pending)
      if (inflight.size > 256) inflight.delete(inflight.keys().next().value)
    }
    try {
      return await inflight.get(key)
    } catch (error) {
      inflight.delete(key)
      if (config.failurePolicy === 'closed') throw new Error(`ckpt: no checkpoint could be taken before ${trigger}: ${error.message}`)
      log.warn('ckpt: no checkpoint before %s (continuing, failurePolicy=open): %s', trigger, error.message)
      return undefined
    }
  }

  const intent = (trigger) => async (target, actor, next) => {
    await capture(actor, trigger)
    return next()
  }
  ctx.on('fs/write-intent', intent('write'), { prepend: true })
  ctx.on('fs/edit-intent', intent('edit'), { prepend: true })
  ctx.on(
    'tools/execute',
    async (exec, next) => {
      if (exec?.parent === undefined && config.shellTools.includes(exec?.name)) await capture(exec, exec.name)
      return next()
    },
    { prepend: true },
  )

  const command = {
    name: config.commandName,
    description: 'Rewind the workspace (and the conversation) to before a turn, with preview and undo',
    input: { hint: '[all | preview <turn|id|latest> | <turn|id|latest> [--exact] [--yes] | undo | diff <point> | status | clear]' },
    handler: (invocation) => rewind(invocation),
  }

  async function rewind({ agent, rawInput = '', signal }) {
    const session = agent?.session
    const cwd = session?.header?.cwd
    if (!session || !cwd) return { kind: 'error', text: 'no session with a workspace to rewind' }
    if (agent.status === 'running') return { kind: 'error', text: 'the agent is running; rewind between turns' }
    if (!(await binaryReady())) return { kind: 'error', text: INSTALL_HINT }
    const words = rawInput.trim().split(/\s+/u).filter(Boolean)
    const flags = new Set(words.filter((w) => w.startsWith('--')))
    const [verb, arg] = words.filter((w) => !w.startsWith('--'))
    const sid = String(session.id)
    const target = (point) => (/^\d+$/.test(point ?? '') ? `turn:${point}` : point)
    const fail = (result) => ({ kind: 'error', text: errorText(result) })

    if (verb === undefined || verb === 'all' || verb === 'list') {
      const listed = await ckpt(cwd, ['list', '--session', sid], signal)
      if (listed.code !== 0) return fail(listed)
      const points = listed.records.filter((r) => r.type === 'checkpoint' && r.kind !== 'guard')
      const shown = verb === 'all' ? points : points.filter((r, i) => points.findIndex((p) => p.turn === r.turn) === i)
      if (!shown.length) return { kind: 'success', text: 'no rewind points yet' }
      const lines = shown.map((r) => `${r.turn !== null && r.turn !== undefined ? `turn ${r.turn}${verb === 'all' ? `.${r.step ?? '-'}` : ''}` : '-'}  ${r.short}  ${r.time}  ${r.trigger ?? ''}  ${turnText(session, r.turn)}`)
      return { kind: 'success', text: lines.join('\n') }
    }
    if (verb === 'preview') {
      if (!arg) return { kind: 'error', text: `usage: /${config.commandName} preview <turn|id|latest>` }
      const args = ['preview', target(arg), '--session', sid]
      if (flags.has('--exact') || config.exact) args.push('--exact')
      const previewed = await ckpt(cwd, args, signal)
      return previewed.code === 0 ? { kind: 'success', text: previewed.stderr.trim() || describePreview(one(previewed, 'preview')) } : fail(previewed)
    }
    if (verb === 'undo') {
      const guard = lastGuard.get(sid)
      if (!guard) return { kind: 'error', text: 'nothing to undo in this session' }
      const undone = await ckpt(cwd, ['restore', guard, '--exact', '--yes'], signal)
      if (undone.code !== 0 && undone.code !== 3) return fail(undone)
      lastGuard.delete(sid)
      return { kind: 'success', text: `restored the state before the last rewind (guard ${guard.slice(0, 8)})` }
    }
    if (verb === 'diff') {
      if (!arg) return { kind: 'error', text: `usage: /${config.commandName} diff <turn|id|latest>` }
      const diffed = await ckpt(cwd, ['diff', target(arg), '--session', sid, '--stat'], signal)
      return diffed.code === 0 ? { kind: 'success', text: diffed.stdout.split('\n').filter((l) => !l.startsWith('{')).join('\n').trim() || summary(one(diffed, 'diff')) } : fail(diffed)
    }
    if (verb === 'status') {
      const status = await ckpt(cwd, ['status'], signal)
      return status.code === 0 ? { kind: 'success', text: status.stderr.trim() } : fail(status)
    }
    if (verb === 'clear') {
      if (!flags.has('--yes') && !(await confirm(agent, `Delete every checkpoint of this session?`, signal))) {
        return { kind: 'error', text: 'not confirmed; nothing was deleted' }
      }
      const cleared = await ckpt(cwd, ['delete', '--session', sid, '--yes'], signal)
      return cleared.code === 0 ? { kind: 'success', text: cleared.stderr.trim() } : fail(cleared)
    }

    // /rewind <point> [--exact] [--yes]
    const exact = flags.has('--exact') || config.exact
    const previewArgs = ['preview', target(verb), '--session', sid]
    if (exact) previewArgs.push('--exact')
    const previewed = await ckpt(cwd, previewArgs, signal)
    if (previewed.code !== 0) return fail(previewed)
    const previewText = previewed.stderr.trim() || describePreview(one(previewed, 'preview'))
    if (!flags.has('--yes') && !(await confirm(agent, `${previewText}\n\nRestore these files?`, signal))) {
      return { kind: 'error', text: `not confirmed; nothing was changed.\n${previewText}` }
    }
    const restoreArgs = ['restore', target(verb), '--session', sid, '--yes']
    if (exact) restoreArgs.push('--exact')
    const restored = await ckpt(cwd, restoreArgs, signal)
    const report = one(restored, 'restore')
    if (!report) return fail(restored)
    lastGuard.set(sid, report.guard)
    let text = `${restored.stderr.trim()}\nundo with /${config.commandName} undo`
    if (restored.code === 3) text = `PARTIAL: ${text}`
    const turn = /^\d+$/.test(verb) ? Number(verb) : undefined
    const forked = await fork(session, turn, cwd).catch((error) => ({ error }))
    if (forked?.error) text += `\nthe files stay restored, but the conversation could not be forked: ${forked.error.message}`
    else if (forked) text += `\nconversation forked before turn ${turn} as ${forked}`
    return { kind: restored.code === 0 ? 'success' : 'error', text }
  }

  async function confirm(agent, question, signal) {
    const questions = ctx.get?.('userQuestions')
    if (!questions?.ask) return false
    try {
      const answer = await questions.ask({
        questions: [{ id: 'ckpt-rewind', question, options: [{ label: 'Restore' }, { label: 'Cancel' }] }],
        agent,
        signal,
      })
      return answer?.answers?.[0]?.selected?.includes('Restore') === true
    } catch {
      return false // fail closed: no UI, no answer, any error
    }
  }

  /** Forks the conversation at the turn/end before `turn`; the files are already restored. */
  async function fork(session, turn, cwd) {
    if (turn === undefined) return undefined
    const events = session.events ?? []
    const boundary = events.findLast?.((e) => e?.type === 'turn/end' && e?.data?.turn !== undefined && e.data.turn < turn)
    if (!boundary) return undefined
    const cut = events.indexOf(boundary) + 1
    const notice = `Files in ${cwd} were restored by ckpt to how they were before turn ${turn}.`
    const agents = ctx.get?.('agents')
    if (agents?.create) {
      const sessionId = `session-${randomUUID()}`
      pendingNotices.set(sessionId, notice)
      try {
        await agents.create({ sessionId, seed: events.slice(0, cut), meta: { cwd, parentSession: session.id, seedLength: cut } })
      } catch (error) {
        pendingNotices.delete(sessionId)
        throw error
      }
      return sessionId
    }
    const sessions = ctx.get?.('sessions')
    if (sessions?.fork) {
      const child = sessions.fork(session, boundary.seq)
      return child?.id
    }
    throw new Error('no agents or sessions service to fork with')
  }

  // The model in a forked conversation learns that the files were restored: the notice is
  // prepended, as a user message, to the messages of that session's next step.
  ctx.on('agent/pre-step', async (payload, next) => {
    const decision = await next()
    const id = String(payload?.agent?.session?.id ?? payload?.agent?.id ?? '')
    const notice = pendingNotices.get(id)
    if (notice === undefined || decision?.kind !== 'enter') return decision
    pendingNotices.delete(id)
    const message = Object.freeze({
      id: randomUUID(),
      role: 'user',
      content: Object.freeze([Object.freeze({ type: 'text', text: `[ckpt] ${notice}` })]),
      source: Object.freeze({ kind: 'user' }),
    })
    return { ...decision, messages: [message, ...decision.messages] }
  })

  if (typeof ctx.inject === 'function') {
    ctx.inject(['commands'], (c) => c.commands.register(command))
  } else {
    ctx.get?.('commands')?.register(command)
  }
  return { command, capture }
}

/** The first words of the user message that opened `turn`. */
function turnText(session, turn) {
  const events = session.events ?? []
  const start = events.findIndex((e) => e?.type === 'turn/start' && e?.data?.turn === turn)
  if (start < 0) return ''
  let text = events[start]?.data?.text
  if (typeof text !== 'string') {
    const message = events.slice(start).find((e) => e?.type === 'user/message')
    const blocks = message?.data?.content ?? []
    text = blocks.filter((b) => b?.type === 'text').map((b) => b.text).join(' ')
  }
  return typeof text === 'string' ? text.split(/\s+/u).filter(Boolean).slice(0, 8).join(' ') : ''
}

function describePreview(preview) {
  if (!preview) return ''
  return `would overwrite ${preview.overwrite.length}, delete ${preview.delete.length}, keep ${preview.created_after.length} created after; ${preview.unchanged} already match; ${preview.conflicts.length} conflict(s)`
}

function summary(diff) {
  return diff ? `${diff.files} file(s), +${diff.added} -${diff.removed}` : ''
}
