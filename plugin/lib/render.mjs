// Everything a person reads from /rewind, rendered from ckpt's JSON Lines records (never from its
// human text on stderr), and the rewind-point grammar: the points a user can name are exactly the
// points the list shows. No engine logic lives here.

const MAX_PATHS = 20

/** A JSON path: a string, or {bytes_b64} for a name that is not valid UTF-8. */
export function pathText(path) {
  if (typeof path === 'string') return path
  if (path && typeof path.bytes_b64 === 'string') return `<non-UTF-8 name, base64 ${path.bytes_b64}>`
  return String(path)
}

function paths(list, describe = pathText) {
  const items = (list ?? []).slice(0, MAX_PATHS).map((p) => `    ${describe(p)}`)
  if ((list ?? []).length > MAX_PATHS) items.push(`    … and ${list.length - MAX_PATHS} more`)
  return items
}

const withReason = (key) => (entry) => `${pathText(entry?.path)}  [${entry?.[key] ?? 'unknown'}]`

export function bytesText(n) {
  if (!Number.isFinite(n)) return '?'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let value = n
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit += 1
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`
}

/** The label the list shows for a point, which is also a target the user can type. */
export function pointLabel(point, withStep) {
  if (point?.turn === null || point?.turn === undefined) return point?.short ?? String(point?.id).slice(0, 8)
  return withStep && point.step !== null && point.step !== undefined ? `turn ${point.turn}.${point.step}` : `turn ${point.turn}`
}

/** The rewind points of a session: its checkpoints minus guards (the undo of an earlier rewind). */
export function rewindPoints(records) {
  return (records ?? []).filter((r) => r?.type === 'checkpoint' && r.kind !== 'guard')
}

/** /rewind shows one point per turn: the first checkpoint of that turn. */
export function firstOfEachTurn(points) {
  return points.filter((p, i) => p.turn === null || p.turn === undefined || points.findIndex((q) => q.turn === p.turn) === i)
}

/**
 * Parses the target words of a /rewind command. Accepted: `2`, `turn 2`, `turn:2` (a turn);
 * `2.1`, `turn 2.1`, `turn:2.1` (a step); `latest`; an id prefix of at least 4 hex digits.
 */
export function parseTarget(words) {
  if (!words.length) return { error: 'no rewind point given' }
  let text = words.join(' ').trim().toLowerCase()
  let m = /^turn[\s:]*(.+)$/u.exec(text)
  if (m) text = m[1].trim()
  if (text === 'latest') return { kind: 'latest', text: 'latest' }
  m = /^(\d+)(?:\.(\d+))?$/u.exec(text)
  if (m) return m[2] === undefined ? { kind: 'turn', turn: Number(m[1]), digits: m[1] } : { kind: 'step', turn: Number(m[1]), step: Number(m[2]) }
  if (/^[0-9a-f]{4,64}$/u.test(text) && !/^turn/u.test(words[0] ?? '')) return { kind: 'id', prefix: text }
  return { error: `bad target "${words.join(' ')}"` }
}

/**
 * Resolves a parsed target against the points the list shows; never a guard. The point carries
 * `wholeTurn` when the user named a turn (not a step, nor an id that happens to be all digits), so
 * that it reads as the turn.
 */
export function resolvePoint(target, points, allCheckpoints = points) {
  const turns = [...new Set(points.map((p) => p.turn).filter((t) => t !== null && t !== undefined))]
  if (target.kind === 'latest') {
    const last = points.at(-1)
    return last ? { point: last } : { error: 'no rewind points in this session yet' }
  }
  if (target.kind === 'turn') {
    const point = points.find((p) => p.turn === target.turn)
    if (point) return { point: { ...point, wholeTurn: true } }
    // Digits that name no turn may be an id prefix (ids are hex, so some are all digits): resolve
    // them as an id, guards and ambiguity included, when some checkpoint starts with them.
    const digits = target.digits ?? String(target.turn)
    if (digits.length >= 4 && allCheckpoints.some((r) => String(r.id).startsWith(digits))) return resolvePoint({ kind: 'id', prefix: digits }, points, allCheckpoints)
    return { error: `no rewind point for turn ${target.turn}${turns.length ? ` (turns with points: ${turns.join(', ')})` : ''}` }
  }
  if (target.kind === 'step') {
    const point = points.find((p) => p.turn === target.turn && p.step === target.step)
    if (point) return { point }
    const steps = points.filter((p) => p.turn === target.turn && p.step !== null && p.step !== undefined).map((p) => `${p.turn}.${p.step}`)
    return { error: `no rewind point for turn ${target.turn}.${target.step}${steps.length ? ` (points of turn ${target.turn}: ${steps.join(', ')})` : ''}; /rewind all lists every point` }
  }
  if (target.kind === 'id') {
    const matches = points.filter((p) => String(p.id).startsWith(target.prefix))
    if (matches.length === 1) return { point: matches[0] }
    if (matches.length > 1) return { error: `ambiguous id ${target.prefix}: ${matches.map((p) => `${p.short} (${pointLabel(p, true)})`).join(', ')}` }
    const other = allCheckpoints.find((r) => String(r.id).startsWith(target.prefix))
    if (other?.kind === 'guard') return { error: `${target.prefix} is a guard checkpoint (the state before an earlier rewind), not a rewind point; use /rewind undo` }
    return { error: `no rewind point of this session has id ${target.prefix}; /rewind all lists them` }
  }
  return { error: target.error ?? 'bad target' }
}

/** How a point reads in a sentence: "before turn 2 (checkpoint ab12cd34)". */
export function describePoint(point) {
  if (point?.turn === null || point?.turn === undefined) return `checkpoint ${point?.short}`
  if (point.wholeTurn || point.step === null || point.step === undefined) return `before turn ${point.turn} (checkpoint ${point.short})`
  return `before turn ${point.turn}.${point.step} (checkpoint ${point.short})`
}

export function renderPreview(preview, point, exact) {
  if (!preview) return 'ckpt gave no preview record'
  const lines = [`Rewinding to ${describePoint(point)}, taken ${point.time ?? '?'}, would:`]
  const overwrite = preview.overwrite ?? []
  const remove = preview.delete ?? []
  const after = preview.created_after ?? []
  if (overwrite.length) lines.push(`  overwrite or recreate (${overwrite.length}):`, ...paths(overwrite))
  if (remove.length) lines.push(`  delete, created after that point (${remove.length}):`, ...paths(remove))
  const left = exact ? after.filter((p) => !remove.some((d) => pathText(d) === pathText(p))) : after
  if (left.length) lines.push(`  leave in place, created after that point (${left.length})${exact ? '' : '; add --exact to delete them'}:`, ...paths(left))
  if (!overwrite.length && !remove.length) lines.push('  change nothing: every protected file already matches')
  lines.push(`  ${preview.unchanged ?? 0} path(s) already match`)
  const conflicts = preview.conflicts ?? []
  if (conflicts.length) lines.push(`  conflicts, not written (${conflicts.length}):`, ...paths(conflicts, withReason('reason')))
  const unprotected = preview.not_protected ?? []
  if (unprotected.length) lines.push(`  not protected, never touched (${unprotected.length}):`, ...paths(unprotected, withReason('reason')))
  return lines.join('\n')
}

export function renderRestore(restore, point, commandName, partial, title = `Rewound the files to ${describePoint(point)}`) {
  if (!restore) return 'ckpt gave no restore record'
  const lines = [`${partial ? 'PARTIAL: ' : ''}${title}:`]
  const written = restore.written ?? []
  const deleted = restore.deleted ?? []
  const left = restore.left ?? []
  const failed = restore.failed ?? []
  if (written.length) lines.push(`  written (${written.length}):`, ...paths(written))
  if (deleted.length) lines.push(`  deleted (${deleted.length}):`, ...paths(deleted))
  if (!written.length && !deleted.length && !failed.length) lines.push('  nothing needed changing: every protected file already matched')
  if (left.length) lines.push(`  left in place, created after that point (${left.length}):`, ...paths(left))
  const unprotected = restore.not_protected ?? []
  if (unprotected.length) lines.push(`  left in place, not protected (${unprotected.length}):`, ...paths(unprotected, withReason('reason')))
  if (restore.unchanged) lines.push(`  ${restore.unchanged} path(s) already matched`)
  if (failed.length) lines.push(`  FAILED (${failed.length}):`, ...paths(failed, withReason('error')))
  lines.push(restore.verified ? '  verified: every written path matches the checkpoint' : '  NOT verified: some written paths do not match the checkpoint')
  if (restore.guard) lines.push(`  guard checkpoint ${String(restore.guard).slice(0, 8)} holds the state before this rewind; undo with /${commandName} undo`)
  return lines.join('\n')
}

/** What the model is told after a rewind: exactly what was written, deleted and left. */
export function restoreNotice(restore, point, cwd, { forked, undo }) {
  const list = (xs) => (xs?.length ? xs.slice(0, MAX_PATHS).map(pathText).join(', ') + (xs.length > MAX_PATHS ? ` and ${xs.length - MAX_PATHS} more` : '') : 'none')
  const written = restore?.written ?? []
  const deleted = restore?.deleted ?? []
  const parts = [
    undo
      ? `The user undid the last rewind: the files in ${cwd} are back to how they were before it (guard checkpoint ${point.short}); this conversation was not rewound.`
      : forked
      ? `The user rewound this conversation and the files in ${cwd} to ${describePoint(point)}.`
      : `The user restored the files in ${cwd} to ${describePoint(point)}; this conversation was not rewound, so earlier messages may describe file contents that no longer hold.`,
  ]
  const failed = restore?.failed ?? []
  if (!written.length && !deleted.length) parts.push(failed.length ? 'No file was changed.' : 'No file needed changing.')
  else parts.push(`Written back: ${list(written)}. Deleted: ${list(deleted)}.`)
  if (restore?.left?.length) parts.push(`Left in place (created after that point, not removed): ${list(restore.left)}.`)
  if (restore?.not_protected?.length) parts.push(`Left as they are, never checkpointed (too large or unreadable): ${list(restore.not_protected.map((f) => f.path))}.`)
  if (restore?.failed?.length) parts.push(`Could not be restored: ${list(restore.failed.map((f) => f.path))}.`)
  parts.push('Re-read any file before editing it.')
  return parts.join(' ')
}

export function renderDiff(records, point) {
  const files = records.filter((r) => r.type === 'diff.file')
  const total = records.find((r) => r.type === 'diff')
  if (!files.length) return `no differences between ${describePoint(point)} and the files now`
  const lines = [`Changes since ${describePoint(point)} (${files.length} file(s), +${total?.added ?? 0} -${total?.removed ?? 0}):`]
  const shown = files.slice(0, 50).map((f) => {
    const counts = f.binary ? 'binary' : `+${f.added ?? 0} -${f.removed ?? 0}`
    const mode = f.old_mode && f.new_mode && f.old_mode !== f.new_mode ? `  mode ${f.old_mode} → ${f.new_mode}` : ''
    return `  ${f.status ?? '?'} ${pathText(f.path)}  ${counts}${mode}`
  })
  if (files.length > 50) shown.push(`  … and ${files.length - 50} more`)
  return [...lines, ...shown, '  (A added, D deleted, M modified, T type changed)'].join('\n')
}

export function renderStatus(status, { points, guards, failure }) {
  const lines = []
  if (failure) lines.push(failureText(failure))
  if (!status) return [...lines, 'ckpt gave no status record'].join('\n')
  lines.push(`ckpt (${status.provider} provider) for ${pathText(status.workspace)}`)
  lines.push(`protected now: ${status.protected} file(s)`)
  const unprotected = status.not_protected ?? []
  if (unprotected.length) lines.push(`not protected (${unprotected.length}):`, ...paths(unprotected, withReason('reason')).map((l) => l.slice(2)))
  else lines.push('not protected: nothing')
  lines.push(`rewind points in this session: ${points}${guards ? ` (plus ${guards} guard checkpoint(s) from rewinds)` : ''}`)
  lines.push(`checkpoints of this workspace: ${status.checkpoints} in ${(status.sessions ?? []).length} session(s)`)
  lines.push(`disk: ${bytesText(status.ckpt_only_bytes)} kept alive only by ckpt, ${bytesText(status.shared_bytes)} shared with your repository (${status.blobs ?? '?'} distinct files)`)
  if (!failure) lines.push('checkpoints in this session: every one so far was taken')
  return lines.join('\n')
}

export function failureText(failure) {
  return `WARNING: ${failure.count} mutation(s) in this session ran without a checkpoint; first before ${failure.first.trigger} at ${failure.first.time}: ${failure.first.message}${failure.count > 1 ? `; last: ${failure.last.message}` : ''}`
}

/** The trace nodes of a session that rebuild at least one file, as /rewind trace lists them. */
export function traceNodes(records) {
  return (records ?? []).filter((r) => r?.type === 'trace.node' && (r.files ?? []).some((f) => f.rebuildable))
}

/** One line per trace node: `call 1.2  write  a.txt  rebuilds a.txt`. */
export function renderTraceNodes(nodes) {
  return nodes
    .map((n) => {
      const rebuilt = (n.files ?? []).filter((f) => f.rebuildable).map((f) => pathText(f.path))
      return `call ${n.turn ?? '?'}.${n.step ?? '?'}  ${n.tool}${n.path ? `  ${pathText(n.path)}` : ''}  rebuilds ${rebuilt.join(', ')}`
    })
    .join('\n')
}

/** What a trace restore would put back and what it cannot (from its dry-run record). */
export function renderTracePlan(plan, label) {
  const rebuilt = plan?.rebuilt ?? []
  const left = plan?.not_restored ?? []
  const lines = [`Putting back the files as they were after tool call ${label}, rebuilt from the session log, would:`]
  if (rebuilt.length) lines.push(`  write (${rebuilt.length}):`, ...paths(rebuilt))
  if (left.length) lines.push(`  leave as they are, the log cannot rebuild them there (${left.length}):`, ...paths(left, withReason('reason')))
  return lines.join('\n')
}

/** What the model is told after a trace restore. */
export function traceRestoreNotice(restore, label, cwd) {
  const written = restore?.written ?? []
  const list = written.length ? written.slice(0, MAX_PATHS).map(pathText).join(', ') + (written.length > MAX_PATHS ? ` and ${written.length - MAX_PATHS} more` : '') : 'none'
  return `The user put back files in ${cwd} as they were after tool call ${label} of this session (rebuilt from the session log); this conversation was not rewound. Written back: ${list}. Re-read any file before editing it.`
}
