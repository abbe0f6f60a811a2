// The ckpt web view: renders the v1 records the server's API answers with. Every text from the
// repository (paths, file lines, triggers, sessions) goes into the page through textContent,
// never as HTML. State changes are POSTs carrying the token in a header; a restore is sent only
// after the in-page confirmation.
'use strict'

const token = document.querySelector('meta[name="ckpt-token"]').content
// `#session=ID` (the harness adapter's /rewind ui) opens on that session's part of the timeline.
const focusSession = new URLSearchParams(location.hash.slice(1)).get('session')
history.replaceState(null, '', '/') // the token leaves the address bar (and the history)

const state = {
  records: [],
  signature: '',
  selected: null, // checkpoint id
  other: null, // second checkpoint id, or 'worktree'
  compare: false,
  files: [],
  picked: new Set(), // paths (as JSON) chosen for a partial preview/restore
  view: 'unified',
  lastGuard: null,
  trace: [], // trace.node records: the tool calls of the harness sessions' logs
  traceSignature: null,
  traceLoading: false, // a request for the session logs is under way
  windows: new Map(), // session -> how many of its newest entries are drawn
}

/** How many of a session's newest entries are drawn at first, and how many more each "show earlier" adds. */
const WINDOW = 500

const $ = (id) => document.getElementById(id)

function el (tag, attrs = {}, ...children) {
  const node = document.createElement(tag)
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value)
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? '' : String(value))
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue
    node.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
  return node
}

async function api (method, path, body) {
  const init = { method, headers: { 'X-Ckpt-Token': token } }
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  const response = await fetch(path, init)
  const value = await response.json()
  if (!response.ok) throw new Error(value.message || `HTTP ${response.status}`)
  return value
}

/** A contract path: a string, or {bytes_b64} for a name that is not UTF-8. */
function pathText (path) {
  if (typeof path === 'string') return path
  if (path && typeof path.bytes_b64 === 'string') return `<non-UTF-8 name, base64 ${path.bytes_b64}>`
  return String(path)
}

function bytesText (n) {
  if (!Number.isFinite(n)) return '?'
  const units = ['B', 'KiB', 'MiB', 'GiB']
  let value = n
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1 }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`
}

function ago (time) {
  const at = typeof time === 'number' ? time : Date.parse(time)
  const seconds = Math.round((Date.now() - at) / 1000)
  if (!Number.isFinite(seconds)) return '?'
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`
  return `${Math.round(seconds / 86400)} d ago`
}

function byId (id) { return state.records.find((r) => r.id === id) }

function label (record) {
  if (!record) return '?'
  const at = record.turn === null || record.turn === undefined ? '' : ` turn ${record.turn}${record.step === null || record.step === undefined ? '' : `.${record.step}`}`
  return `${record.short}${at}`
}

/** The checkpoint a node's changes are measured from: the one before it in its session, or before it at all. */
function previousOf (record) {
  const index = state.records.indexOf(record)
  for (let i = index - 1; i >= 0; i--) {
    if (state.records[i].session === record.session) return state.records[i]
  }
  return index > 0 ? state.records[index - 1] : null
}

// ---- timeline ---------------------------------------------------------------------------

function renderTimeline () {
  const root = $('timeline')
  root.replaceChildren()
  if (!state.records.length && !state.trace.length) {
    root.append(el('p', { class: 'empty' }, 'No checkpoints yet. Take one with: ckpt snapshot'))
    return
  }
  // Checkpoints and the tool calls of the session logs, per session and turn; in a turn, the
  // checkpoint taken before step S comes before call S.
  const sessions = new Map()
  const entries = [...state.records.map((record) => ({ record })), ...state.trace.map((call) => ({ call }))]
  for (const entry of entries) {
    const key = (entry.record ?? entry.call).session ?? ''
    if (!sessions.has(key)) sessions.set(key, [])
    sessions.get(key).push(entry)
  }
  for (const [session, items] of sessions) {
    const turns = new Map()
    for (const entry of items) {
      const key = (entry.record ?? entry.call).turn ?? ''
      if (!turns.has(key)) turns.set(key, [])
      turns.get(key).push(entry)
    }
    const open = !focusSession || focusSession === session || !sessions.has(focusSession)
    const checkpoints = items.filter((e) => e.record).length
    const calls = items.length - checkpoints
    const block = el('details', { class: 'session', open, 'data-session': session },
      el('summary', {}, session ? `session ${session}` : 'no session (manual and other checkpoints)', el('span', { class: 'count' }, ` ${checkpoints}${calls ? ` · ${calls} call(s) in its log` : ''}`)))
    const order = (entry) => {
      const item = entry.record ?? entry.call
      return [item.step ?? -1, entry.record ? 0 : 1]
    }
    // Only the newest entries are drawn (a long session's log holds hundreds of thousands of
    // calls, which the browser cannot lay out at once); "show earlier" draws more.
    let budget = state.windows.get(session) ?? WINDOW
    const drawn = []
    const turnKeys = [...turns.keys()].sort((a, b) => (a === '' ? -1 : b === '' ? 1 : a - b))
    for (let i = turnKeys.length - 1; i >= 0 && budget > 0; i--) {
      const turn = turnKeys[i]
      // Stable: checkpoints keep their own order, calls theirs.
      const sorted = turns.get(turn).map((entry, at) => ({ entry, at })).sort((a, b) => {
        const [x, y] = [order(a.entry), order(b.entry)]
        return x[0] - y[0] || x[1] - y[1] || a.at - b.at
      })
      const shown = sorted.slice(Math.max(0, sorted.length - budget))
      budget -= shown.length
      drawn.unshift([turn, shown])
    }
    const hidden = items.length - drawn.reduce((n, [, shown]) => n + shown.length, 0)
    if (hidden > 0) {
      block.append(el('button', {
        type: 'button',
        class: 'earlier',
        onclick: () => { state.windows.set(session, (state.windows.get(session) ?? WINDOW) + 4 * WINDOW); renderTimeline() },
      }, `show earlier (${hidden} not drawn)`))
    }
    for (const [turn, shown] of drawn) {
      const list = el('ol', { class: 'steps' })
      for (const { entry } of shown) list.append(entry.record ? node(entry.record) : callNode(entry.call))
      block.append(el('div', { class: 'turn', 'data-turn': turn }, el('div', { class: 'turn-label' }, turn === '' ? '' : `turn ${turn}`), list))
    }
    root.append(block)
  }
}

/** A tool call of a session log: what it did, and which files the log rebuilds after it. */
function callNode (call) {
  const rebuilt = (call.files ?? []).filter((f) => f.rebuildable).length
  const unknown = (call.files ?? []).length - rebuilt
  const what = [rebuilt ? `rebuilds ${rebuilt}` : '', unknown ? `${unknown} unknown` : ''].filter(Boolean).join(', ')
  const item = el('li', {
    class: `node trace outcome-${call.outcome}`,
    'data-node': call.node,
    tabindex: 0,
    onclick: () => pickCall(call),
    onkeydown: (e) => { if (e.key === 'Enter') pickCall(call) },
  },
  el('span', { class: 'badge' }, 'call'),
  el('span', { class: 'where' }, call.step === null || call.step === undefined ? '' : `.${call.step}`),
  el('span', { class: 'trigger' }, call.tool),
  el('span', { class: 'id' }, call.path ? pathText(call.path) : ''),
  el('span', { class: 'time', title: call.time ?? '' }, call.time ? ago(Number(call.time) || call.time) : ''),
  el('span', { class: 'files' }, what || (call.outcome === 'ok' ? 'changes no file' : call.outcome)),
  )
  item.title = 'a tool call from the session log (replayed: no checkpoint was taken here)'
  return item
}

/** `word` as one shell word, as `shell_word` in src/cli/output.rs writes it: a command the page shows is pasted into shells, and its arguments come from logs anyone could write. */
function shellWord (word) {
  const text = String(word)
  if (text !== '' && !text.startsWith('=') && /^[A-Za-z0-9\/._\-+=:@%,]+$/.test(text)) return text
  return `'${text.replaceAll("'", "'\\''")}'`
}

/** Shows what one tool call changed, as the trace replays it (`ckpt trace diff NODE`). */
async function pickCall (call) {
  state.selected = null
  state.other = null
  state.picked.clear()
  markSelected()
  for (const n of document.querySelectorAll('.node.trace.selected')) n.classList.remove('selected')
  document.querySelector(`.node.trace[data-node="${CSS.escape(call.node)}"]`)?.classList.add('selected')
  $('actions').hidden = true
  $('outcome').replaceChildren()
  $('file-head').replaceChildren()
  $('file-body').replaceChildren()
  $('selection').replaceChildren(el('span', {}, 'Tool call ', el('b', {}, `${call.turn ?? '?'}.${call.step ?? '?'} ${call.tool}`), ' as the session log replays it (', el('code', {}, `ckpt trace restore ${shellWord(call.node)}`), ' puts its files back)'),
    el('div', { class: 'call-actions' },
      el('button', { type: 'button', id: 'trace-preview', onclick: () => tracePreview(call) }, 'Preview restore'),
      el('button', { type: 'button', id: 'trace-restore', class: 'danger', onclick: () => traceRestore(call) }, 'Restore…')))
  const files = $('files')
  files.replaceChildren(el('p', { class: 'loading' }, 'loading…'))
  try {
    const answer = await api('GET', `/api/trace-diff?node=${encodeURIComponent(call.node)}`)
    const diff = answer.records.find((r) => r.type === 'trace.diff')
    const letters = { added: 'A', deleted: 'D', modified: 'M', same: '=', unknown: '?' }
    const table = el('table', { class: 'file-list trace-files' })
    for (const file of diff?.files ?? []) {
      table.append(el('tr', { class: `status-${file.status}`, 'data-path': pathText(file.path) },
        el('td', {}, ''),
        el('td', { class: 'letter' }, letters[file.status] ?? '?'),
        el('td', { class: 'path' }, pathText(file.path)),
        el('td', { class: 'counts' }, file.status === 'unknown' ? (file.rebuildable ? `no diff, the older side is unknown: ${file.reason}` : `not rebuildable: ${file.reason}`) : file.binary ? 'binary' : `+${file.added} −${file.removed}`)))
    }
    files.replaceChildren(table)
    if (!diff?.files?.length) files.append(el('p', {}, 'This call changed no file the trace knows of.'))
  } catch (error) {
    files.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

function node (record) {
  const selected = record.id === state.selected || record.id === state.other
  const item = el('li', {
    class: `node kind-${record.kind}${selected ? ' selected' : ''}`,
    'data-id': record.id,
    tabindex: 0,
    onclick: () => pick(record.id),
    onkeydown: (e) => { if (e.key === 'Enter') pick(record.id) },
  },
  el('span', { class: 'badge' }, record.kind),
  el('span', { class: 'where' }, record.step === null || record.step === undefined ? '' : `.${record.step}`),
  el('span', { class: 'trigger' }, record.trigger ?? ''),
  el('span', { class: 'id' }, record.short),
  el('span', { class: 'time', title: record.time }, ago(record.time)),
  el('span', { class: 'files' }, `${record.files} file(s)`),
  el('span', { class: 'bytes' }, `+${bytesText(record.bytes)}`),
  )
  if (record.kind === 'guard') item.title = 'guard: the state just before a restore (restore it to undo that restore)'
  return item
}

function pick (id) {
  if (state.compare && state.selected && id !== state.selected) {
    state.other = id
  } else {
    state.selected = id
    state.other = null
  }
  state.picked.clear()
  markSelected()
  loadDiff()
}

/** Moves the selection marks without rebuilding the timeline (1,000 nodes cost ~80 ms). */
function markSelected () {
  for (const node of document.querySelectorAll('.node.selected')) node.classList.remove('selected')
  for (const id of [state.selected, state.other]) {
    if (id && id !== 'worktree') document.querySelector(`.node[data-id="${id}"]`)?.classList.add('selected')
  }
}

// ---- diff -------------------------------------------------------------------------------

/** From and to of the current view: [older, newer] ids ('worktree' for now). */
function range () {
  const selected = byId(state.selected)
  if (!selected) return null
  if (state.other === 'worktree') return [selected.id, 'worktree']
  if (state.other) {
    const a = state.records.indexOf(selected)
    const b = state.records.indexOf(byId(state.other))
    return a < b ? [selected.id, state.other] : [state.other, selected.id]
  }
  const previous = previousOf(selected)
  return previous ? [previous.id, selected.id] : null
}

async function loadDiff () {
  const selected = byId(state.selected)
  $('actions').hidden = !selected
  $('outcome').replaceChildren()
  $('file-head').replaceChildren()
  $('file-body').replaceChildren()
  const heading = $('selection')
  if (!selected) return
  const span = range()
  const describe = (id) => id === 'worktree' ? 'the worktree now' : label(byId(id))
  heading.replaceChildren(span
    ? el('span', {}, 'Changes from ', el('b', {}, describe(span[0])), ' to ', el('b', {}, describe(span[1])))
    : el('span', {}, el('b', {}, label(selected)), ' is the first checkpoint of its session: nothing earlier to compare with. Try "Compare with the worktree now".'))
  const files = $('files')
  files.replaceChildren()
  if (!span) return
  files.append(el('p', { class: 'loading' }, 'loading…'))
  try {
    const answer = await api('GET', `/api/diff?from=${encodeURIComponent(span[0])}&to=${encodeURIComponent(span[1])}`)
    state.files = answer.records.filter((r) => r.type === 'diff.file')
    const total = answer.records.find((r) => r.type === 'diff')
    files.replaceChildren(el('p', { class: 'summary' }, `${total?.files ?? 0} file(s), +${total?.added ?? 0} −${total?.removed ?? 0}`))
    const table = el('table', { class: 'file-list' })
    for (const file of state.files) {
      const key = JSON.stringify(file.path)
      const modes = file.old_mode && file.new_mode && file.old_mode !== file.new_mode ? ` mode ${file.old_mode} → ${file.new_mode}` : ''
      table.append(el('tr', { class: `status-${file.status}`, 'data-path': pathText(file.path) },
        el('td', {}, el('input', { type: 'checkbox', title: 'include in a partial preview/restore', onchange: (e) => { if (e.target.checked) state.picked.add(key); else state.picked.delete(key) } })),
        el('td', { class: 'letter' }, file.status),
        el('td', { class: 'path' }, el('a', { href: '#', onclick: (e) => { e.preventDefault(); showFile(file, span) } }, pathText(file.path))),
        el('td', { class: 'counts' }, file.binary ? 'binary' : `+${file.added} −${file.removed}${modes}`)))
    }
    files.append(table)
    if (!state.files.length) files.append(el('p', {}, 'No differences.'))
  } catch (error) {
    files.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

async function showFile (file, span) {
  const head = $('file-head')
  const body = $('file-body')
  head.replaceChildren(el('b', {}, pathText(file.path)), ' ',
    el('button', { type: 'button', id: 'view-toggle', onclick: () => { state.view = state.view === 'unified' ? 'split' : 'unified'; showFile(file, span) } },
      state.view === 'unified' ? 'side by side' : 'unified'))
  body.replaceChildren(el('p', { class: 'loading' }, 'loading…'))
  const started = performance.now()
  try {
    const answer = await api('GET', `/api/file?from=${encodeURIComponent(span[0])}&to=${encodeURIComponent(span[1])}&path=${encodeURIComponent(JSON.stringify(file.path))}`)
    body.replaceChildren()
    const notes = []
    if (answer.old_mode !== answer.new_mode && answer.old_mode && answer.new_mode) notes.push(`mode ${answer.old_mode} → ${answer.new_mode}`)
    if (answer.new_mode === '120000' || answer.old_mode === '120000') notes.push('symbolic link: the lines are its target')
    if (notes.length) body.append(el('p', { class: 'note' }, notes.join('; ')))
    if (answer.binary) {
      body.append(el('p', { class: 'binary' }, `Binary file: ${bytesText(answer.old_size ?? 0)} → ${bytesText(answer.new_size ?? 0)}`))
    } else if (answer.too_large) {
      body.append(el('p', { class: 'too-large' }, `Too large to show here (${bytesText(answer.old_size ?? 0)} → ${bytesText(answer.new_size ?? 0)}); use ckpt diff in a terminal.`))
    } else if (state.view === 'unified') {
      const table = el('table', { class: 'lines unified' })
      for (const [sign, oldNo, newNo, text] of answer.lines) {
        table.append(el('tr', { class: sign === '+' ? 'add' : sign === '-' ? 'del' : 'same' },
          el('td', { class: 'no' }, oldNo ?? ''), el('td', { class: 'no' }, newNo ?? ''), el('td', { class: 'sign' }, sign), el('td', { class: 'text' }, text)))
      }
      body.append(table)
    } else {
      const table = el('table', { class: 'lines split' })
      for (const [sign, oldNo, newNo, text] of answer.lines) {
        const left = sign === '+' ? [el('td', { class: 'no' }), el('td', { class: 'text' })] : [el('td', { class: 'no' }, oldNo), el('td', { class: `text ${sign === '-' ? 'del' : ''}` }, text)]
        const right = sign === '-' ? [el('td', { class: 'no' }), el('td', { class: 'text' })] : [el('td', { class: 'no' }, newNo), el('td', { class: `text ${sign === '+' ? 'add' : ''}` }, text)]
        table.append(el('tr', {}, ...left, ...right))
      }
      body.append(table)
    }
    body.dataset.ms = String(Math.round(performance.now() - started))
  } catch (error) {
    body.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

// ---- preview and restore ----------------------------------------------------------------

function pickedPaths () {
  return [...state.picked].map((key) => JSON.parse(key))
}

function pathList (title, paths, cls) {
  if (!paths?.length) return null
  return el('div', { class: `paths ${cls}` }, el('h4', {}, `${title} (${paths.length})`),
    el('ul', {}, paths.map((p) => el('li', {}, typeof p === 'object' && p && 'reason' in p ? `${pathText(p.path)}  [${p.reason}]` : pathText(p)))))
}

function previewView (preview) {
  return el('div', { class: 'preview' },
    pathList('overwrite or recreate', preview.overwrite, 'overwrite'),
    pathList(preview.exact ? 'delete (created after it)' : 'left in place, created after it (exact deletes them)', preview.exact ? preview.delete : preview.created_after, preview.exact ? 'delete' : 'created-after'),
    pathList('conflicts', preview.conflicts, 'conflicts'),
    pathList('not protected, never touched', preview.not_protected, 'not-protected'),
    el('p', {}, `${preview.unchanged} path(s) already match`))
}

async function runPreview (id, exact) {
  const answer = await api('POST', '/api/preview', { id, exact, paths: pickedPaths() })
  return answer.records.find((r) => r.type === 'preview')
}

async function previewSelected () {
  const outcome = $('outcome')
  try {
    const preview = await runPreview(state.selected, $('exact').checked)
    outcome.replaceChildren(el('h3', {}, `Restoring to ${label(byId(state.selected))} would:`), previewView(preview))
  } catch (error) {
    outcome.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

/** Asks in the page; resolves true only on the explicit "Yes, restore". */
function confirmInPage (title, body) {
  const dialog = $('confirm')
  $('confirm-title').textContent = title
  $('confirm-body').replaceChildren(body)
  return new Promise((resolve) => {
    const done = (answer) => { dialog.close(); $('confirm-yes').onclick = null; $('confirm-cancel').onclick = null; resolve(answer) }
    $('confirm-yes').onclick = () => done(true)
    $('confirm-cancel').onclick = () => done(false)
    dialog.oncancel = () => done(false)
    dialog.showModal()
  })
}

/** A restore's report: what it wrote, `more` lists, what failed, and Undo through its guard. */
function restoredView (report, heading, more) {
  const lines = [
    el('h3', {}, heading),
    pathList('written', report.written, 'written'),
    ...more,
    pathList('failed', (report.failed ?? []).map((f) => ({ path: f.path, reason: f.error })), 'failed'),
    el('p', {}, `${report.unchanged} path(s) already matched`),
  ]
  if (report.guard) {
    lines.push(el('p', { class: 'guard' }, `Guard checkpoint ${report.guard.slice(0, 8)} holds the files as they were before. `,
      el('button', { type: 'button', id: 'undo', onclick: () => restoreTo(report.guard, true, [], `the state before that restore (guard ${report.guard.slice(0, 8)})`) }, 'Undo')))
  }
  return el('div', { class: 'restored' }, lines)
}

async function restoreTo (id, exact, paths, what) {
  const outcome = $('outcome')
  try {
    const preview = (await api('POST', '/api/preview', { id, exact, paths })).records.find((r) => r.type === 'preview')
    const yes = await confirmInPage(`Restore ${what}? A guard checkpoint of the current files is taken first.`, previewView(preview))
    if (!yes) {
      outcome.replaceChildren(el('p', { class: 'cancelled' }, 'Not restored; nothing was changed.'))
      return
    }
    const answer = await api('POST', '/api/restore', { id, exact, paths, confirm: true })
    const report = answer.records.find((r) => r.type === 'restore')
    state.lastGuard = report.guard
    outcome.replaceChildren(restoredView(report, report.verified ? 'Restored, and verified.' : 'Restored with problems:', [
      pathList('deleted', report.deleted, 'deleted'),
      pathList('left in place, created after it', report.left, 'left'),
      pathList('left in place, not protected', report.not_protected, 'not-protected'),
    ]))
    await refresh()
  } catch (error) {
    outcome.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

/** What a trace restore would do (`ckpt trace restore NODE --dry-run`): the files it puts back and the ones it leaves, with why. */
function tracePlanView (plan) {
  return el('div', { class: 'preview trace-plan' },
    pathList('put back as the session log rebuilds them', plan.rebuilt, 'rebuilt'),
    pathList('left as they are', plan.not_restored, 'not-restored'),
    el('p', {}, 'A trace restore never deletes a file.'))
}

async function tracePlan (call) {
  const answer = await api('POST', '/api/trace-preview', { node: call.node })
  return answer.records.find((r) => r.type === 'trace.restore')
}

async function tracePreview (call) {
  const outcome = $('outcome')
  try {
    const plan = await tracePlan(call)
    outcome.replaceChildren(el('h3', {}, `Putting back the files as they were after call ${call.turn ?? '?'}.${call.step ?? '?'} would:`), tracePlanView(plan))
  } catch (error) {
    outcome.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

/** The files as the log rebuilds them after a call, through the same confirmed, guarded transaction as the CLI. */
async function traceRestore (call) {
  const outcome = $('outcome')
  try {
    const plan = await tracePlan(call)
    const yes = await confirmInPage(`Put back the files as they were after call ${call.turn ?? '?'}.${call.step ?? '?'}? A guard checkpoint of the current files is taken first.`, tracePlanView(plan))
    if (!yes) {
      outcome.replaceChildren(el('p', { class: 'cancelled' }, 'Not restored; nothing was changed.'))
      return
    }
    const answer = await api('POST', '/api/trace-restore', { node: call.node, confirm: true })
    const done = answer.records.find((r) => r.type === 'trace.restore')
    const report = answer.records.find((r) => r.type === 'restore')
    const heading = report.verified && !done.not_restored.length ? 'Restored, and verified.' : report.verified ? 'Restored and verified, but not every file:' : 'Restored with problems:'
    outcome.replaceChildren(restoredView(report, heading, [pathList('left as they are', done.not_restored, 'not-restored')]))
    await refresh()
  } catch (error) {
    outcome.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

// ---- status -----------------------------------------------------------------------------

async function loadStatus () {
  const root = $('status')
  root.replaceChildren(el('p', { class: 'loading' }, 'loading…'))
  try {
    const answer = await api('GET', '/api/status')
    const status = answer.status.find((r) => r.type === 'status')
    const removals = answer.prune.filter((r) => r.type === 'prune.remove')
    root.replaceChildren(
      el('h2', {}, `${status.provider} provider for ${pathText(status.workspace)}`),
      el('p', {}, `protected now: ${status.protected} file(s)`),
      pathList('not protected', status.not_protected, 'not-protected') ?? el('p', {}, 'Everything on disk is protected.'),
      el('p', { class: 'disk' }, `disk: ${bytesText(status.ckpt_only_bytes)} kept alive only by ckpt, ${bytesText(status.shared_bytes)} shared with your repository (${status.blobs} distinct files)`),
      el('h3', {}, `checkpoints: ${status.checkpoints}`),
      el('ul', { class: 'sessions' }, status.sessions.map((s) => el('li', {}, `${s.session ?? 'no session'}: ${s.count}`))),
      el('h3', {}, 'prune, dry run'),
      removals.length
        ? el('ul', { class: 'prune' }, removals.map((r) => el('li', {}, `would remove ${r.id.slice(0, 8)} [${r.rule}]`)))
        : el('p', {}, 'The retention policy would remove nothing now.'))
  } catch (error) {
    root.replaceChildren(el('p', { class: 'error' }, error.message))
  }
}

// ---- wiring -----------------------------------------------------------------------------

async function refresh () {
  try {
    const answer = await api('GET', '/api/checkpoints')
    const records = answer.records.filter((r) => r.type === 'checkpoint')
    $('workspace').textContent = `${answer.provider} · ${answer.workspace}`
    const signature = records.map((r) => r.id).join(',')
    $('live').className = 'ok'
    // The session logs are read again only every 10 s (a log can be large), or with new
    // checkpoints, and never hold up the checkpoints: the timeline is drawn first, and again
    // when the calls arrive.
    const traceDue = state.traceSignature === null || signature !== state.signature || Date.now() - state.traceAt > 10_000
    if (traceDue && !state.traceLoading) loadTrace()
    if (signature === state.signature) return
    state.records = records
    state.signature = signature
    if (state.selected && !byId(state.selected)) { state.selected = null; state.other = null }
    renderTimeline()
    document.body.dataset.rendered = String(records.length)
  } catch (error) {
    $('live').className = 'down'
    $('live').title = error.message
  }
}

/** Reads the session logs' calls, saying so while it waits, and draws the timeline again if they changed. */
async function loadTrace () {
  state.traceLoading = true
  state.traceAt = Date.now()
  $('trace-loading').hidden = false
  try {
    const calls = await api('GET', '/api/trace').then((a) => a.records.filter((r) => r.type === 'trace.node')).catch(() => [])
    const traceSignature = calls.map((c) => `${c.node}:${c.outcome}:${c.files?.length}`).join(',')
    if (traceSignature !== state.traceSignature) {
      state.trace = calls
      state.traceSignature = traceSignature
      renderTimeline()
    }
  } finally {
    state.traceLoading = false
    state.traceAt = Date.now()
    $('trace-loading').hidden = true
  }
}

function showTab (name) {
  $('view-timeline').hidden = name !== 'timeline'
  $('view-status').hidden = name !== 'status'
  $('tab-timeline').classList.toggle('active', name === 'timeline')
  $('tab-status').classList.toggle('active', name === 'status')
  if (name === 'status') loadStatus()
}

$('tab-timeline').addEventListener('click', () => showTab('timeline'))
$('tab-status').addEventListener('click', () => showTab('status'))
$('compare').addEventListener('change', (e) => { state.compare = e.target.checked; if (!state.compare) { state.other = null; loadDiff() } })
$('vs-worktree').addEventListener('click', () => { state.other = 'worktree'; markSelected(); loadDiff() })
$('preview').addEventListener('click', previewSelected)
$('restore').addEventListener('click', () => {
  const record = byId(state.selected)
  if (record) restoreTo(record.id, $('exact').checked, pickedPaths(), `to ${label(record)}${state.picked.size ? ` (${state.picked.size} path(s))` : ''}`)
})

const started = performance.now()
refresh().then(() => { document.body.dataset.firstRenderMs = String(Math.round(performance.now() - started)) })
setInterval(refresh, 2000)
