// The `checkpoints` session-projection unit (for hosts with `ctx.sessionProjections`): the
// checkpoint strip of a session, folded from events the session log already holds — the
// `tool/call` of every tool the plugin takes a checkpoint before, and the `command/run` /
// `command/done` pair of every /rewind — so the plugin appends no event of its own (dsh 0.1.0-rc.8
// cannot mark a plugin event ignorable, and a log with an unknown event type no longer loads).
// The checkpoint ids live in ckpt's store (`ckpt list --session <id>`), not in the log.
// Pure, synchronous, plain JSON, and it never throws (a projection runs inside the host's drive).

export const PROJECTION_KEY = 'checkpoints'
const MAX_ENTRIES = 500

const FS_TOOLS = new Set(['write', 'edit'])
const EDITOR_MUTATIONS = new Set(['create', 'str_replace', 'insert', 'undo_edit'])

function mutates(name, rawArguments, shellTools) {
  if (FS_TOOLS.has(name) || shellTools.includes(name)) return true
  if (name !== 'str_replace_editor') return false
  try {
    const args = typeof rawArguments === 'string' ? JSON.parse(rawArguments) : rawArguments
    return EDITOR_MUTATIONS.has(args?.command)
  } catch {
    return true // a checkpoint was due if the call could mutate
  }
}

function firstWords(content) {
  const blocks = Array.isArray(content) ? content : []
  const text = blocks.filter((b) => b?.type === 'text' && typeof b.text === 'string').map((b) => b.text).join(' ')
  return text.split(/\s+/u).filter(Boolean).slice(0, 12).join(' ').slice(0, 120)
}

function validView(value) {
  return (
    value !== null &&
    typeof value === 'object' &&
    typeof value.command === 'string' &&
    Array.isArray(value.points) &&
    Array.isArray(value.rewinds) &&
    Array.isArray(value.turns) &&
    value.points.every((p) => Number.isInteger(p.seq) && typeof p.tool === 'string') &&
    value.rewinds.every((r) => Number.isInteger(r.seq) && typeof r.args === 'string')
  )
}

/** The projection definition: { key, schema, init, apply, view, stateVersion }. */
export function checkpointsProjection({ shellTools, commandName }) {
  const init = () => ({ command: commandName, points: [], rewinds: [], turns: [] })
  return {
    key: PROJECTION_KEY,
    stateVersion: 1,
    schema: {
      parse(value) {
        if (!validView(value)) throw new Error('ckpt: invalid checkpoints projection value')
        return value
      },
      safeParse(value) {
        return validView(value) ? { success: true, data: value } : { success: false, error: new Error('invalid checkpoints projection value') }
      },
    },
    init,
    apply(state, event) {
      try {
        const data = event?.data
        if (event?.type === 'tool/call' && mutates(data?.name, data?.arguments, shellTools)) {
          const turn = Number.isInteger(data.turn) ? data.turn : null
          const step = Number.isInteger(data.step) ? data.step : null
          // One checkpoint per (turn, step): a second mutation in the step shares it.
          if (state.points.some((p) => p.turn !== null && p.turn === turn && p.step === step)) return state
          return { ...state, points: [...state.points, { seq: event.seq, turn, step, tool: data.name, callId: String(data.callId ?? '') }].slice(-MAX_ENTRIES) }
        }
        // Turns, for a per-turn control: where each starts and ends (a fork cuts at the turn/end
        // before a turn), the ids of its assistant messages, and its first words.
        if (event?.type === 'turn/start' && Number.isInteger(data?.turn)) {
          return { ...state, turns: [...state.turns, { turn: data.turn, startSeq: event.seq, endSeq: null, messageIds: [], prompt: '' }].slice(-MAX_ENTRIES) }
        }
        if ((event?.type === 'turn/end' || event?.type === 'assistant/message' || event?.type === 'user/message') && state.turns.length) {
          const at = Number.isInteger(data?.turn) ? state.turns.findLastIndex((t) => t.turn === data.turn) : state.turns.length - 1
          if (at < 0) return state
          const turn = state.turns[at]
          let next
          if (event.type === 'turn/end') next = { ...turn, endSeq: event.seq }
          else if (event.type === 'assistant/message' && typeof data?.message?.id === 'string') next = { ...turn, messageIds: [...turn.messageIds, data.message.id].slice(-50) }
          else if (event.type === 'user/message' && turn.prompt === '' && data?.source?.kind === 'user' && !firstWords(data?.content).startsWith('[ckpt]')) next = { ...turn, prompt: firstWords(data?.content) }
          if (!next) return state
          const turns = state.turns.slice()
          turns[at] = next
          return { ...state, turns }
        }
        if (event?.type === 'command/run' && data?.name === commandName) {
          const args = typeof data.args === 'string' ? data.args.trim() : ''
          return { ...state, rewinds: [...state.rewinds, { seq: event.seq, commandId: String(data.commandId ?? ''), args, kind: null, summary: null }].slice(-MAX_ENTRIES) }
        }
        if (event?.type === 'command/done') {
          const at = state.rewinds.findIndex((r) => r.commandId === String(data?.commandId ?? '') && r.kind === null)
          if (at < 0) return state
          const rewinds = state.rewinds.slice()
          const text = typeof data?.text === 'string' ? data.text : ''
          rewinds[at] = { ...rewinds[at], kind: data?.kind === 'success' ? 'success' : 'error', summary: text.split('\n')[0].slice(0, 200) }
          return { ...state, rewinds }
        }
        return state
      } catch {
        return state
      }
    },
    view(state) {
      return state
    },
  }
}
