// ckpt adapter for the DeepSeek Harness: a checkpoint before every workspace mutation (write,
// edit and str_replace_editor through the fs intents; shell tools on tools/execute) and a
// /rewind command. All engine logic stays in the ckpt binary, driven as a subprocess through its
// JSON Lines contract; this file only maps harness events to ckpt commands.

import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { Config as ConfigSchema } from './lib/config.mjs'
import { checkpointsProjection } from './lib/projection.mjs'
import { errorText, one, resolveBinary, run, startWebView } from './lib/ckpt.mjs'
import {
  failureText,
  firstOfEachTurn,
  parseTarget,
  pointLabel,
  renderDiff,
  renderPreview,
  renderRestore,
  renderStatus,
  resolvePoint,
  restoreNotice,
  rewindPoints,
  renderTraceNodes,
  renderTracePlan,
  traceNodes,
  traceRestoreNotice,
} from './lib/render.mjs'

export const name = 'ckpt'
const NOTICE_TAG = '[ckpt] '
export const inject = []
export const Config = ConfigSchema

const INSTALL_HINT =
  'install ckpt (cargo install --path . in the ckpt checkout), or set the CKPT_BIN environment ' +
  'variable (or the plugin config "binary") to its path.'

/** Where an exec (fs actor or tool execution) sits: session, cwd, turn and step. */
function position(exec) {
  const session = exec?.agent?.session
  if (!session) return undefined
  const callId = exec.rootCallId ?? exec.callId
  const events = session.events ?? []
  const call = [...events].reverse().find((e) => e?.type === 'tool/call' && e?.data?.callId === callId)
  return { session, id: String(session.id), cwd: session.header?.cwd, turn: call?.data?.turn, step: call?.data?.step, callId }
}

/**
 * The paths a restore wrote or deleted, as arguments for an undo limited to them; undefined (the
 * whole guard) when one is not UTF-8 or there are too many for a command line.
 */
function touchedPaths(report) {
  const paths = [...(report.written ?? []), ...(report.deleted ?? [])]
  if (paths.length > 2000 || paths.some((p) => typeof p !== 'string')) return undefined
  return paths
}

/** A restore is never cut short by the per-call timeout: killing it mid-way leaves a mix. */
const RESTORE_TIMEOUT_MS = 30 * 60 * 1000
/** How long a confirmation question waits for an answer before it counts as Cancel. */
const CONFIRM_TIMEOUT_MS = 5 * 60 * 1000

export function apply(ctx, rawConfig) {
  const checked = ConfigSchema['~standard'].validate(rawConfig)
  if (checked.issues) throw new Error(`invalid ckpt config: ${checked.issues.map((i) => i.message).join('; ')}`)
  const config = checked.value
  const log = typeof ctx.logger === 'function' ? ctx.logger('ckpt') : { info() {}, warn() {}, error() {} }
  const inflight = new Map()
  const lastGuard = new Map()
  // Sessions owed a notice (a fork, or a restore under a live conversation): the notices join
  // that session's next step's messages, once.
  const pendingNotices = new Map()
  // Per session: how many mutations ran without a checkpoint, the first and last reason.
  const failures = new Map()
  // Per workspace: the rewind under way. Mutations wait for it (a tool call never races a
  // restore), and a second rewind of the same workspace is refused meanwhile.
  const rewinding = new Map()
  // Per workspace: the sessions whose watched snapshots use its watch daemon. The daemon is
  // stopped when the last of them is disposed, and when the plugin unloads (a later watched
  // snapshot, by anyone, simply starts it again).
  const watchers = new Map()
  // Per workspace: the web view `/rewind ui` started ({ child, url }), reused while it runs and
  // stopped when the plugin unloads.
  const webViews = new Map()
  const name = config.commandName

  // Resolved on first use and kept while it works; an unusable binary is looked for again on the
  // next call (it may have been installed since), never replaced by a lower-priority source.
  let resolved
  const binaryReady = async () => {
    if (resolved?.binary) return resolved
    resolved = await resolveBinary(config.binary)
    return resolved
  }

  const ckpt = async (cwd, args, signal, timeoutMs = config.timeoutMs) => {
    const found = await binaryReady()
    if (!found.binary) throw new Error(`${found.error}; ${INSTALL_HINT}`)
    try {
      return await run(found.binary, ['-C', cwd, '--json', ...args], { timeoutMs, signal })
    } catch (error) {
      if (/ENOENT|EACCES/.test(error.message)) resolved = undefined // gone since: look again next time
      throw error
    }
  }

  /**
   * `ckpt trace ...` for session `sid`, reading its log through the host's session query
   * service where there is one (the file under the harness home lags the live log by a write
   * batch), else from the file.
   */
  const traceCkpt = async (cwd, sid, args, signal, timeoutMs) => {
    const query = ctx.get?.('sessionQuery')
    let dir
    const extra = []
    if (typeof query?.readSession === 'function') {
      try {
        const { session, events } = await query.readSession(sid)
        dir = mkdtempSync(join(tmpdir(), 'ckpt-session-log-'))
        const file = join(dir, 'session.jsonl')
        const lines = [JSON.stringify({ ...session, type: 'session' }), ...events.map((e) => JSON.stringify(e))]
        writeFileSync(file, `${lines.join('\n')}\n`, { mode: 0o600 })
        extra.push('--session-log', file)
      } catch (error) {
        log.warn('ckpt: the session query service could not give session %s (%s); reading its log file', sid, error.message)
      }
    }
    try {
      return await ckpt(cwd, ['trace', ...args, ...extra], signal, timeoutMs)
    } finally {
      if (dir) rmSync(dir, { recursive: true, force: true })
    }
  }

  /** The first failure of a session is said where a person sees it (stderr), the rest counted. */
  function noteFailure(sessionId, trigger, pos, message) {
    const entry = { trigger, time: new Date().toISOString(), turn: pos?.turn, step: pos?.step, message }
    const known = failures.get(sessionId)
    if (known) {
      known.count += 1
      known.last = entry
      log.warn('ckpt: no checkpoint before %s: %s', trigger, message)
      return
    }
    failures.set(sessionId, { count: 1, first: entry, last: entry })
    const line = `ckpt: WARNING: no checkpoint was taken before ${trigger} in session ${sessionId}${config.failurePolicy === 'open' ? ' (the tool ran anyway, failurePolicy=open)' : ''}: ${message}. /${name} status shows this; later failures of this session are counted there.\n`
    try {
      process.stderr.write(line)
    } catch {}
    log.warn(line.trim())
  }

  /** One snapshot per (session, turn, step): concurrent intents share the capture in flight. */
  const capture = async (exec, trigger) => {
    const pos = position(exec)
    if (!pos?.cwd) return
    await rewinding.get(pos.cwd)?.catch(() => {})
    // Without a position in the log, a call is its own step: sharing by an unknown (turn, step)
    // would silently skip every later mutation of the session.
    const known = pos.turn !== undefined && pos.step !== undefined
    const key = known ? `${pos.id}\u0000${pos.turn}\u0000${pos.step}` : `${pos.id}\u0000call\u0000${pos.callId}`
    if (!inflight.has(key)) {
      const args = ['snapshot', '--kind', 'auto', '--session', pos.id, '--trigger', trigger]
      // The workspace's watch daemon (started by the first such snapshot) answers an unchanged
      // worktree without a walk; ckpt falls back to a full scan whenever it cannot vouch.
      if (config.watch) args.push('--watch')
      // --opens-turn: a turn whose first change finds the tree as an earlier turn (or another
      // session) left it still gets a checkpoint of its own, so "before turn T" is that state.
      if (pos.turn !== undefined) args.push('--turn', String(pos.turn), '--opens-turn')
      if (pos.step !== undefined) args.push('--step', String(pos.step))
      if (config.watch) {
        if (!watchers.has(pos.cwd)) watchers.set(pos.cwd, new Set())
        watchers.get(pos.cwd).add(pos.id)
      }
      const pending = ckpt(pos.cwd, args).then((result) => {
        if (result.code !== 0) throw new Error(errorText(result))
        const snapshot = one(result, 'snapshot')
        // Exit 0 without the record is no checkpoint either (a broken or foreign binary).
        if (!snapshot) throw new Error(`ckpt answered without a snapshot record (exit 0): ${result.stdout.slice(0, 200).trim() || 'no output'}`)
        return snapshot
      })
      inflight.set(key, pending)
      if (inflight.size > 256) inflight.delete(inflight.keys().next().value)
    }
    try {
      return await inflight.get(key)
    } catch (error) {
      inflight.delete(key)
      noteFailure(pos.id, trigger, pos, error.message)
      if (config.failurePolicy === 'closed') throw new Error(`ckpt: no checkpoint could be taken before ${trigger}: ${error.message}`)
      return undefined
    }
  }

  const intent = (trigger) => async (target, actor, next) => {
    await capture(actor, trigger)
    return next()
  }
  const stopWatching = (cwd) =>
    ckpt(cwd, ['watch', 'stop'], undefined, 10000).then(
      (result) => result.code !== 0 && log.warn('ckpt: could not stop the watch daemon of %s: %s', cwd, errorText(result)),
      (error) => log.warn('ckpt: could not stop the watch daemon of %s: %s', cwd, error.message),
    )
  ctx.on('session/disposed', (session) => {
    const id = session?.id
    for (const [cwd, sessions] of watchers) {
      if (sessions.delete(id) && sessions.size === 0) {
        watchers.delete(cwd)
        void stopWatching(cwd)
      }
    }
  })
  ctx.effect?.(() => async () => {
    const cwds = [...watchers.keys()]
    watchers.clear()
    for (const { child } of webViews.values()) {
      try { child.kill('SIGTERM') } catch {}
    }
    webViews.clear()
    await Promise.all(cwds.map(stopWatching))
  })

  /** The running web view of `cwd`, started on first use (and again if it has exited). */
  const webView = async (cwd) => {
    const known = webViews.get(cwd)
    if (known && known.child.exitCode === null && known.child.signalCode === null) return known
    const found = await binaryReady()
    if (!found.binary) throw new Error(`${found.error}; ${INSTALL_HINT}`)
    const started = await startWebView(found.binary, cwd)
    webViews.set(cwd, started)
    started.child.on('exit', () => { if (webViews.get(cwd) === started) webViews.delete(cwd) })
    return started
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
    name,
    description: 'Rewind the workspace (and the conversation) to before a turn, with preview and undo',
    input: { hint: '[all | preview <point> | <point> [--exact] [--yes] [--into <fork>] | undo | diff <point> | status | ui | clear]   point: 2, 2.1, turn 2.1, an id, latest' },
    handler: async (invocation) => {
      const cwd = invocation?.agent?.session?.header?.cwd
      if (cwd && rewinding.has(cwd)) return { kind: 'error', text: `another /${name} is still running on ${cwd}; nothing was changed` }
      const done = rewind(invocation)
      if (cwd) rewinding.set(cwd, done)
      try {
        return await done
      } catch (error) {
        const failure = failures.get(String(invocation?.agent?.session?.id ?? ''))
        return { kind: 'error', text: `${failure ? `${failureText(failure)}\n` : ''}/${name} failed: ${error.message}` }
      } finally {
        if (cwd && rewinding.get(cwd) === done) rewinding.delete(cwd)
      }
    },
  }

  const notify = (sessionId, text) => {
    const list = pendingNotices.get(sessionId) ?? []
    list.push(text)
    pendingNotices.set(sessionId, list)
  }

  /**
   * The rewind points of a session: its own checkpoints, and — for a fork — those of the parent
   * conversation for the turns its seed holds (they are this conversation's history too; a fork
   * up several levels is followed while the parent is live).
   */
  async function listPoints(cwd, session, signal) {
    const all = []
    let current = session
    // Turns below `below` are shared with the ancestor being read: the seed holds them.
    let below = Infinity
    for (let depth = 0; current && depth < 8; depth++) {
      const listed = await ckpt(cwd, ['list', '--session', String(current.id)], signal)
      if (listed.code !== 0) return { error: errorText(listed) }
      const records = listed.records.filter((r) => r.type === 'checkpoint')
      if (depth === 0) all.push(...records)
      else all.unshift(...records.filter((r) => Number.isInteger(r.turn) && r.turn < below).map((r) => ({ ...r, inherited: true })))
      const parentId = current.header?.parentSession
      if (!parentId) break
      const seededTurns = (current.events ?? []).slice(0, current.header?.seedLength ?? 0).filter((e) => e?.type === 'turn/end' && Number.isInteger(e?.data?.turn)).map((e) => e.data.turn)
      if (!seededTurns.length) break
      below = Math.min(below, Math.max(...seededTurns) + 1)
      current = ctx.get?.('sessions')?.get?.(parentId) ?? { id: parentId, header: {}, events: [] }
    }
    return { all, points: rewindPoints(all) }
  }

  async function rewind({ agent, rawInput = '', signal }) {
    const session = agent?.session
    const cwd = session?.header?.cwd
    if (!session || !cwd) return { kind: 'error', text: 'no session with a workspace to rewind' }
    if (agent.status === 'running') return { kind: 'error', text: 'the agent is running; rewind between turns' }
    const sid = String(session.id)
    const words = rawInput.trim().split(/\s+/u).filter(Boolean)
    // --into <session>: file the rewind into a fork the caller already made (the web order:
    // fork first, then rewind into the child, then open it) instead of forking here.
    const intoAt = words.indexOf('--into')
    const into = intoAt >= 0 ? words[intoAt + 1] : undefined
    if (intoAt >= 0) words.splice(intoAt, 2)
    if (intoAt >= 0 && (!into || into.startsWith('--'))) return { kind: 'error', text: `usage: /${name} <point> --into <session id> [--yes]` }
    const flags = new Set(words.filter((w) => w.startsWith('--')))
    const unknown = [...flags].filter((f) => f !== '--exact' && f !== '--yes')
    if (unknown.length) return { kind: 'error', text: `unknown option ${unknown.join(' ')} (known: --exact, --yes, --into <fork>); nothing was changed` }
    const positional = words.filter((w) => !w.startsWith('--'))
    const verb = positional[0]
    const rest = positional.slice(1)
    const failure = failures.get(sid)
    const found = await binaryReady()
    if (!found.binary) {
      const lines = [`ckpt cannot run, so no checkpoint is being taken: ${found.error}.`, INSTALL_HINT]
      if (failure) lines.push(failureText(failure))
      return { kind: 'error', text: lines.join('\n') }
    }
    const warning = failure ? `${failureText(failure)}\n` : ''

    if (verb === undefined || verb === 'all' || verb === 'list') {
      const listed = await listPoints(cwd, session, signal)
      if (listed.error) return { kind: 'error', text: listed.error }
      const shown = verb === 'all' ? listed.points : firstOfEachTurn(listed.points)
      if (!shown.length) {
        // No checkpoint in this session: what its own log can rebuild is still a way back.
        const traced = await traceCkpt(cwd, sid, ['list', '--session', sid], signal)
        const nodes = traced.code === 0 ? traceNodes(traced.records) : []
        if (!nodes.length) return { kind: 'success', text: `${warning}no rewind points yet` }
        return { kind: 'success', text: `${warning}no checkpoints in this session, but its log rebuilds these files:\n${renderTraceNodes(nodes)}\n/${name} trace <turn.step> puts them back as they were after that call` }
      }
      const lines = shown.map((r) => `${pointLabel(r, verb === 'all')}  ${r.short}  ${r.time}  ${r.trigger ?? ''}  ${turnText(session, r.turn)}${r.inherited ? '  (before the fork)' : ''}`.trimEnd())
      const hint = verb === 'all' ? `/${name} preview <point>, /${name} <point> --yes (a point: 2, 2.1, turn 2.1, an id, latest)` : `/${name} preview <turn>, /${name} <turn> --yes; /${name} all lists every step`
      return { kind: 'success', text: `${warning}${lines.join('\n')}\n${hint}` }
    }
    if (verb === 'trace') {
      if (!rest.length) {
        const traced = await traceCkpt(cwd, sid, ['list', '--session', sid], signal)
        if (traced.code !== 0) return { kind: 'error', text: `${warning}${errorText(traced)}` }
        const nodes = traceNodes(traced.records)
        if (!nodes.length) return { kind: 'success', text: `${warning}this session's log rebuilds no file exactly (a shell call, or edits of files it never saw, hide their content)` }
        return { kind: 'success', text: `${warning}${renderTraceNodes(nodes)}\n/${name} trace <turn.step> [--yes] puts the files back as they were after that call (/${name} trace preview <turn.step> shows what it would write)` }
      }
      const previewOnly = rest[0] === 'preview'
      const label = previewOnly ? rest[1] : rest[0]
      if (!label || !/^(\d+\.\d+|[\w-]+)$/u.test(label)) return { kind: 'error', text: `bad call ${label}: a call is turn.step (1.2) or a call id, as /${name} trace lists them` }
      const node = `trace:${sid}:${label}`
      const planned = await traceCkpt(cwd, sid, ['restore', node, '--dry-run'], signal)
      const plan = one(planned, 'trace.restore')
      // Exit 3: some files it knows of cannot be rebuilt there; the plan names them.
      if ((planned.code !== 0 && planned.code !== 3) || !plan) return { kind: 'error', text: `${warning}${errorText(planned)}` }
      const planText = renderTracePlan(plan, label)
      if (previewOnly) return { kind: 'success', text: `${warning}${planText}` }
      if (!plan.rebuilt?.length) return { kind: 'error', text: `${planText}\nnothing can be put back; nothing was changed` }
      if (!flags.has('--yes') && !(await confirm(agent, `${planText}\n\nPut these files back?`, signal))) {
        return { kind: 'error', text: `not confirmed; nothing was changed.\n${planText}` }
      }
      if (agent.status === 'running') return { kind: 'error', text: 'the agent started a turn while the question was open; nothing was changed (ask again between turns)' }
      const restored = await traceCkpt(cwd, sid, ['restore', node, '--yes'], signal, RESTORE_TIMEOUT_MS)
      const report = one(restored, 'restore')
      if (!report) return { kind: 'error', text: `${warning}${errorText(restored)}` }
      const made = one(restored, 'trace.restore')
      const title = `Put back the files as they were after tool call ${label} (rebuilt from the session log as checkpoint ${String(made?.checkpoint ?? '').slice(0, 8)})`
      notify(sid, traceRestoreNotice(report, label, cwd))
      if (report.guard) lastGuard.set(sid, { id: report.guard, sessions: [sid], paths: touchedPaths(report) })
      return { kind: restored.code === 0 ? 'success' : 'error', text: `${warning}${renderRestore(report, {}, name, restored.code === 3, title)}` }
    }
    if (verb === 'ui') {
      try {
        const view = await webView(cwd)
        // The page opens on this session's part of the timeline.
        const url = `${view.url}#session=${encodeURIComponent(sid)}`
        return { kind: 'success', text: `${warning}ckpt web view of ${cwd}:\n${url}\n(open it in a browser on this machine; it runs until the harness stops)` }
      } catch (error) {
        return { kind: 'error', text: `${warning}${error.message}` }
      }
    }
    if (verb === 'status') {
      const [status, listed] = await Promise.all([ckpt(cwd, ['status'], signal), listPoints(cwd, session, signal)])
      if (status.code !== 0) return { kind: 'error', text: `${warning}${errorText(status)}` }
      const points = listed.points?.length ?? 0
      const guards = (listed.all?.length ?? 0) - points
      return { kind: 'success', text: renderStatus(one(status, 'status'), { points, guards, failure }) }
    }
    if (verb === 'undo') {
      const guard = lastGuard.get(sid)
      if (!guard) return { kind: 'error', text: 'nothing to undo in this session' }
      const point = { id: guard.id, short: guard.id.slice(0, 8), turn: null }
      // Only the paths the rewind wrote or deleted go back (files made since are the user's and
      // stay), after a preview and a confirmation: what the user did since is shown first.
      const only = guard.paths ? ['--', ...guard.paths] : []
      const previewed = await ckpt(cwd, ['preview', guard.id, '--exact', ...only], signal)
      if (previewed.code !== 0) return { kind: 'error', text: `${errorText(previewed)} (the guard checkpoint ${point.short} of the last rewind; \`ckpt list\` shows it)` }
      const previewText = renderPreview(one(previewed, 'preview'), point, true)
      if (!flags.has('--yes') && !(await confirm(agent, `${previewText}\n\nUndo the last rewind?`, signal))) {
        return { kind: 'error', text: `not confirmed; nothing was changed.\n${previewText}` }
      }
      if (agent.status === 'running') return { kind: 'error', text: 'the agent started a turn meanwhile; nothing was changed' }
      const undone = await ckpt(cwd, ['restore', guard.id, '--session', sid, '--exact', '--yes', ...only], signal, RESTORE_TIMEOUT_MS)
      const report = one(undone, 'restore')
      if (!report) return { kind: 'error', text: errorText(undone) }
      for (const id of guard.sessions) lastGuard.delete(id)
      // The undo took a guard of its own: undoing the undo is the next /rewind undo.
      if (report.guard) for (const id of guard.sessions) lastGuard.set(id, { id: report.guard, sessions: guard.sessions, paths: touchedPaths(report) })
      const text = renderRestore(report, point, name, undone.code === 3, `Undid the last rewind: the files are back to guard checkpoint ${point.short}`)
      for (const id of guard.sessions) notify(id, restoreNotice(report, point, cwd, { undo: true }))
      return { kind: undone.code === 0 ? 'success' : 'error', text: `${warning}${text}` }
    }
    if (verb === 'clear') {
      if (!flags.has('--yes') && !(await confirm(agent, `Delete every checkpoint of this session?`, signal))) {
        return { kind: 'error', text: 'not confirmed; nothing was deleted' }
      }
      const cleared = await ckpt(cwd, ['delete', '--session', sid, '--yes'], signal)
      if (cleared.code !== 0) return { kind: 'error', text: errorText(cleared) }
      lastGuard.delete(sid)
      return { kind: 'success', text: `deleted ${one(cleared, 'delete')?.removed?.length ?? 0} checkpoint(s) of this session` }
    }

    // The rest name a point: preview <point>, diff <point>, <point>.
    const targetWords = verb === 'preview' || verb === 'diff' ? rest : positional
    if (!targetWords.length) return { kind: 'error', text: `usage: /${name} ${verb} <point>   (a point: 2, 2.1, turn 2.1, an id, latest)` }
    const target = parseTarget(targetWords)
    if (target.error) return { kind: 'error', text: `${target.error}: a point is a turn (2), a step (2.1, turn 2.1), an id shown by /${name} all, or latest` }
    const listed = await listPoints(cwd, session, signal)
    if (listed.error) return { kind: 'error', text: listed.error }
    const picked = resolvePoint(target, listed.points, listed.all)
    if (picked.error) return { kind: 'error', text: picked.error }
    const point = picked.point

    if (verb === 'diff') {
      const diffed = await ckpt(cwd, ['diff', point.id], signal)
      if (diffed.code !== 0) return { kind: 'error', text: errorText(diffed) }
      return { kind: 'success', text: `${warning}${renderDiff(diffed.records, point)}` }
    }
    const exact = flags.has('--exact') || config.exact
    const previewArgs = ['preview', point.id]
    if (exact) previewArgs.push('--exact')
    const previewed = await ckpt(cwd, previewArgs, signal)
    if (previewed.code !== 0) return { kind: 'error', text: errorText(previewed) }
    const previewText = renderPreview(one(previewed, 'preview'), point, exact)
    if (verb === 'preview') return { kind: 'success', text: `${warning}${previewText}` }

    // /rewind <point> [--exact] [--yes] [--into <session>]
    let intoSession
    if (into !== undefined) {
      intoSession = ctx.get?.('sessions')?.get?.(into)
      if (!intoSession) return { kind: 'error', text: `no live session ${into} to rewind into` }
      if (String(intoSession.header?.parentSession ?? '') !== sid) return { kind: 'error', text: `session ${into} is not a fork of this session; nothing was changed` }
      // The fork must hold only the turns before the point, or its conversation would not match
      // the files it is told were rewound.
      const held = (intoSession.events ?? []).filter((e) => e?.type === 'turn/end' && Number.isInteger(e?.data?.turn)).map((e) => e.data.turn)
      if (!Number.isInteger(point.turn) || held.some((t) => t >= point.turn)) {
        return { kind: 'error', text: `session ${into} was not forked before turn ${point.turn ?? '?'} (it holds turn ${Math.max(...held)}); fork at the end of the turn before the point, or rewind without --into. Nothing was changed` }
      }
    }
    if (!flags.has('--yes') && !(await confirm(agent, `${previewText}\n\nRestore these files?`, signal))) {
      return { kind: 'error', text: `not confirmed; nothing was changed.\n${previewText}` }
    }
    // The question may have waited through a turn: what it showed is no longer what is there.
    if (agent.status === 'running') return { kind: 'error', text: 'the agent started a turn while the question was open; nothing was changed (ask again between turns)' }
    // --session files the guard checkpoint under this session (its retention, and /rewind status).
    const restoreArgs = ['restore', point.id, '--session', sid, '--yes']
    if (exact) restoreArgs.push('--exact')
    const restored = await ckpt(cwd, restoreArgs, signal, RESTORE_TIMEOUT_MS).catch((error) => ({ error }))
    if (restored.error) {
      return {
        kind: 'error',
        text: `${restored.error.message}\nThe files may be partly restored: \`ckpt -C ${cwd} doctor\` shows what the interrupted restore left and settles it; its guard checkpoint (\`ckpt -C ${cwd} list\`) holds the state before it. The conversation was not forked.`,
      }
    }
    const report = one(restored, 'restore')
    if (!report) return { kind: 'error', text: errorText(restored) }
    const nothingLanded = !report.written?.length && !report.deleted?.length && report.failed?.length > 0
    const guardSessions = [sid]
    let text = renderRestore(report, point, name, restored.code === 3)
    // The conversation is cut only at whole turns: `/rewind 2` forks at the turn/end before turn 2.
    // A restore that changed nothing and failed somewhere forks nothing: the fork would be told
    // about files that were not rewound.
    const boundary = target.kind === 'turn' && into === undefined && !nothingLanded ? turnBoundary(session, point.turn) : undefined
    let forked
    if (into !== undefined) {
      forked = { id: into }
      text += `\nrewound into ${into}, the fork made for it; this conversation is unchanged`
      notify(into, restoreNotice(report, point, cwd, { forked: true }))
      guardSessions.push(into)
    } else if (boundary) {
      forked = await forkConversation(session, boundary, cwd).catch((error) => ({ error }))
      if (forked?.error) text += `\nthe files stay restored, but the conversation could not be forked: ${forked.error.message}`
      else {
        text += `\nconversation forked before turn ${point.turn} as ${forked.id}${forked.how ? ` (${forked.how})` : ''}; this conversation is unchanged`
        notify(forked.id, restoreNotice(report, point, cwd, { forked: true }))
        guardSessions.push(forked.id)
      }
    }
    if (!forked?.id) notify(sid, restoreNotice(report, point, cwd, { forked: false }))
    if (report.guard) for (const id of guardSessions) lastGuard.set(id, { id: report.guard, sessions: guardSessions, paths: touchedPaths(report) })
    return { kind: restored.code === 0 ? 'success' : 'error', text: `${warning}${text}` }
  }

  async function confirm(agent, question, signal) {
    const questions = ctx.get?.('userQuestions')
    if (!questions?.ask) return false
    // A question nobody answers is a "no" after a while, not a command that never ends.
    const timeout = AbortSignal.timeout(CONFIRM_TIMEOUT_MS)
    try {
      const answer = await questions.ask({
        questions: [{ id: 'ckpt-rewind', question, options: [{ label: 'Restore' }, { label: 'Cancel' }] }],
        agent,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      })
      return answer?.answers?.[0]?.selected?.includes('Restore') === true
    } catch {
      return false // fail closed: no UI, no answer, any error
    }
  }

  /**
   * Forks the conversation at `boundary` (the turn/end before the rewound turn) the way dsh's own
   * session fork does: through the host's fork service when it has one (the web app's
   * `apiProxy.sessions.fork`: agent preset, setup, model selection, workspace), else with the same
   * composition by hand (agent preset mounted in setup, the default model, the workspace attached).
   * The files are already restored.
   */
  async function forkConversation(session, boundary, cwd) {
    const api = ctx.get?.('apiProxy')
    if (typeof api?.sessions?.fork === 'function') {
      const answer = await api.sessions.fork({ rpcId: `ckpt-fork-${randomUUID()}`, payload: { sessionId: String(session.id), atSeq: boundary.seq } })
      if (answer?.result?.ok && answer.result.value?.sessionId) return { id: String(answer.result.value.sessionId) }
      throw new Error(answer?.result?.error?.message ?? `the host's fork service refused: ${JSON.stringify(answer?.result ?? answer)}`)
    }
    const events = session.events ?? []
    let cut = events.indexOf(boundary) + 1
    while (cut < events.length && events[cut]?.type !== 'turn/start') cut++
    const agents = ctx.get?.('agents')
    if (typeof agents?.create === 'function') {
      const sessionId = `session-${randomUUID()}`
      const presets = ctx.get?.('agentPresets')
      let agentPreset
      let setup
      if (typeof presets?.resolve === 'function' && typeof presets?.mount === 'function') {
        agentPreset = (await presets.resolve(sessionPreset(session)))?.id
        if (agentPreset !== undefined) setup = async (agentCtx) => presets.mount(agentCtx, agentPreset)
      }
      const selection = ctx.get?.('agentDefaultModel')?.currentSelection?.()
      await agents.create({
        sessionId,
        seed: events.slice(0, cut),
        meta: { cwd, parentSession: session.id, seedLength: cut, ...(agentPreset === undefined ? {} : { agentPreset }) },
        ...(selection ? { agentOptions: { provider: selection.provider, model: selection.model } } : {}),
        ...(setup ? { setup } : {}),
      })
      const workspace = ctx.get?.('workspaceRegistry')?.list?.()?.find((w) => w?.sessionIds?.includes?.(session.id))
      if (workspace?.attachSession) await workspace.attachSession(sessionId)
      return { id: sessionId }
    }
    const sessions = ctx.get?.('sessions')
    if (sessions?.fork) {
      const child = sessions.fork(session, boundary.seq)
      return { id: String(child?.id), how: 'a bare session: this host has no agents service, so nothing will answer in it' }
    }
    throw new Error('no fork service, agents or sessions service to fork with')
  }

  // The notices owed to a session join, as one user message, the messages of its next step.
  ctx.on('agent/pre-step', async (payload, next) => {
    const decision = await next()
    const id = String(payload?.agent?.session?.id ?? payload?.agent?.id ?? '')
    const notices = pendingNotices.get(id)
    if (notices === undefined || decision?.kind !== 'enter') return decision
    pendingNotices.delete(id)
    const message = Object.freeze({
      id: randomUUID(),
      role: 'user',
      // One text block: providers may concatenate blocks without a separator.
      content: Object.freeze([Object.freeze({ type: 'text', text: notices.map((text) => `${NOTICE_TAG}${text}`).join('\n') })]),
      source: Object.freeze({ kind: 'user' }),
    })
    return { ...decision, messages: [message, ...decision.messages] }
  })

  if (typeof ctx.inject === 'function') {
    ctx.inject(['commands'], (c) => c.commands.register(command))
    // The checkpoint strip for the web shell, where the host has session projections. Folded
    // from events the log already holds: the plugin appends no session event of its own.
    ctx.inject(['sessionProjections'], (c) => {
      try {
        c.sessionProjections.register(checkpointsProjection({ shellTools: config.shellTools, commandName: name }))
      } catch (error) {
        log.warn('ckpt: no checkpoints projection: %s', error.message)
      }
    })
  } else {
    ctx.get?.('commands')?.register(command)
  }
  return { command, capture }
}

/** The turn/end event that closes the last turn before `turn`, if any. */
function turnBoundary(session, turn) {
  const events = session.events ?? []
  return [...events].reverse().find((e) => e?.type === 'turn/end' && Number.isInteger(e?.data?.turn) && e.data.turn < turn)
}

/** The agent preset a session runs: its last selection, else its header's (as dsh resolves it). */
function sessionPreset(session) {
  const events = session.events ?? []
  for (let i = events.length - 1; i >= 0; i--) if (events[i]?.type === 'agent-preset/selected') return events[i].data?.agentPreset
  return session.header?.agentPreset
}

/** The first words of the user message that opened `turn`. */
function turnText(session, turn) {
  const events = session.events ?? []
  const start = events.findIndex((e) => e?.type === 'turn/start' && e?.data?.turn === turn)
  if (start < 0) return ''
  let text = events[start]?.data?.text
  if (typeof text !== 'string') {
    // The person's words: not dsh's injected context, not this plugin's own [ckpt] notice.
    const textOf = (e) => (e?.data?.content ?? []).filter((b) => b?.type === 'text').map((b) => b.text).join(' ')
    const message = events.slice(start).find((e) => e?.type === 'user/message' && (e.data?.source?.kind ?? 'user') === 'user' && !textOf(e).startsWith(NOTICE_TAG))
    text = textOf(message)
  }
  return typeof text === 'string' ? text.split(/\s+/u).filter(Boolean).slice(0, 8).join(' ') : ''
}

