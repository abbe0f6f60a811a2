// The browser half for dsh's web shell (declared by package.json `dsh.client`, served by the shell
// as /plugins/@ckpt/dsh-plugin/client.js). Plain JavaScript in the shell's classic-script module
// format (no build step): the factory registers a Cordis client plugin that adds
//   - a "Rewind" control to the action strip under each turn that changed files
//     (slot conversation.chat.assistant-actions), its tooltip saying what that point covers;
//   - "Undo rewind" and "Checkpoints" controls to the session header
//     (slot conversation.session.header.actions), showing ckpt's answer.
// Everything it shows comes from the host plugin: the `checkpoints` session projection, and the
// answers of the /rewind command. The order is the web order: the shell's own fork first (at the
// turn/end before the turn), then `/rewind <turn> --into <child> --yes`, then the child is opened.
window.__ModuleLoader__.load({
  id: '@ckpt/dsh-plugin',
  factory: (require) => {
    const React = require('react')
    const h = React.createElement
    const module = { exports: {} }

    const PANEL = {
      position: 'absolute', zIndex: 100, top: 'calc(100% + 4px)', right: 0, maxWidth: 'min(560px, 90vw)',
      maxHeight: '50vh', overflow: 'auto', margin: 0, padding: '8px 10px', whiteSpace: 'pre-wrap',
      font: '12px/1.45 var(--dsw-font-mono, monospace)', background: 'var(--dsw-specific-menu, #fff)',
      color: 'var(--dsw-alias-label-primary, #111)', border: '1px solid var(--dsw-alias-border-l2, #ccc)',
      borderRadius: 8, boxShadow: 'var(--dsw-shadow-lv3, 0 4px 16px rgba(0,0,0,.15))',
    }
    const BUTTON = {
      cursor: 'pointer', background: 'none', border: 0, borderRadius: 6, padding: '3px 6px', fontSize: 12,
      lineHeight: '18px', color: 'var(--dsw-alias-label-tertiary, #666)',
    }

    /** What rewinding to before `turn` covers, from the projection (the tooltip and the question). */
    function describe(strip, turn) {
      const here = strip.points.filter((p) => p.turn === turn.turn)
      const later = strip.points.filter((p) => p.turn !== null && p.turn >= turn.turn)
      const tools = [...new Set(later.map((p) => p.tool))].join(', ')
      const previous = strip.turns.filter((t) => t.turn < turn.turn && t.endSeq !== null).at(-1)
      const prompt = turn.prompt ? ` ("${turn.prompt}")` : ''
      return (
        `Rewind to before turn ${turn.turn}${prompt}: the files as they were before its first change ` +
        `(${here[0].tool} at step ${turn.turn}.${here[0].step ?? '?'}), undoing ${later.length} checkpointed step(s) ` +
        `from this turn on (${tools}). ` +
        (previous
          ? `The conversation continues in a fork from the end of turn ${previous.turn}; this one stays as it is.`
          : 'This is the first turn: the files are restored and this conversation is told what changed.') +
        ' Files created later are left in place. Undo from the header.'
      )
    }

    function usePanel() {
      const [text, setText] = React.useState(null)
      const panel = text === null ? null : h('pre', { style: PANEL, 'data-ckpt-panel': '', onClick: () => setText(null), title: 'click to close' }, text)
      return [panel, setText]
    }

    function RewindAction({ messageId, useProjection, sessionId, run, fork, open }) {
      const strip = useProjection('checkpoints')
      const [busy, setBusy] = React.useState(false)
      const [panel, show] = usePanel()
      if (!strip || !Array.isArray(strip.turns)) return null
      const turn = strip.turns.find((t) => t.messageIds.includes(messageId))
      if (!turn || !strip.points.some((p) => p.turn === turn.turn)) return null
      const tooltip = describe(strip, turn)
      const onClick = async () => {
        if (busy) return
        setBusy(true)
        try {
          // The preview first: it refuses while the agent runs (before any fork is made) and shows
          // exactly what the restore would write, delete and leave.
          const preview = await run(sessionId, `/${strip.command} preview ${turn.turn}`)
          if (preview.kind !== 'success') {
            show(preview.text ?? '')
            return
          }
          if (!window.confirm(`${tooltip}\n\n${preview.text}\n\nRewind now?`)) return
          const previous = strip.turns.filter((t) => t.turn < turn.turn && t.endSeq !== null).at(-1)
          const child = previous ? await fork({ sessionId, atSeq: previous.endSeq }) : undefined
          const answer = await run(sessionId, `/${strip.command} ${turn.turn} --yes${child ? ` --into ${child}` : ''}`)
          show(answer.text ?? '')
          if (answer.kind === 'success' && child) open(child)
        } catch (error) {
          show(`rewind failed: ${error?.message ?? error}`)
        } finally {
          setBusy(false)
        }
      }
      return h('span', { style: { position: 'relative', display: 'inline-flex' } },
        h('button', { type: 'button', style: BUTTON, title: tooltip, 'aria-label': tooltip, 'data-ckpt-rewind': String(turn.turn), disabled: busy, onClick }, busy ? 'Rewinding…' : '⟲ Rewind'),
        panel)
    }

    function HeaderControls({ sessionId, useProjection, run }) {
      const strip = useProjection('checkpoints')
      const [panel, show] = usePanel()
      if (!strip || (!strip.points.length && !strip.rewinds.length)) return null
      const ask = (line) => async () => {
        try {
          show((await run(sessionId, `/${strip.command} ${line}`)).text ?? '')
        } catch (error) {
          show(`/${strip.command} ${line} failed: ${error?.message ?? error}`)
        }
      }
      return h('span', { style: { position: 'relative', display: 'inline-flex', gap: 2 } },
        h('button', { type: 'button', style: BUTTON, title: 'Put the files back as they were before the last rewind of this conversation', 'data-ckpt-undo': '', onClick: () => window.confirm('Put back the files the last rewind of this conversation wrote or deleted? (files made since stay; a guard checkpoint is taken first)') && ask('undo --yes')() }, 'Undo rewind'),
        h('button', { type: 'button', style: BUTTON, title: 'What ckpt protects, what it does not and why, and its disk use', 'data-ckpt-status': '', onClick: ask('status') }, 'Checkpoints'),
        panel)
    }

    const inject = ['slots', 'sessions', 'remote', 'remote.commands']

    function apply(ctx) {
      const run = async (sessionId, line) => {
        const answer = await ctx.remote.commands.execute(sessionId, line, [])
        if (!answer?.ok) throw new Error(`${answer?.error?.code ?? 'failed'}: ${answer?.error?.message ?? ''}`)
        return answer.value?.result ?? { kind: 'error', text: 'the host ran no command' }
      }
      const fork = (opts) => ctx.sessions.fork(opts)
      const open = (id) => ctx.sessions.open(id)
      ctx.slots.inject('conversation.chat.assistant-actions', () => ctx.slots.register({
        name: 'conversation.chat.assistant-actions',
        id: 'ckpt-rewind',
        order: 30,
        inject: (sessionId) => ({ sessionId, run, fork, open }),
      }, RewindAction))
      ctx.slots.inject('conversation.session.header.actions', () => ctx.slots.register({
        name: 'conversation.session.header.actions',
        id: 'ckpt',
        order: 40,
        inject: (sessionId) => ({ sessionId, run }),
      }, HeaderControls))
    }

    module.exports.inject = inject
    module.exports.apply = apply
    return module.exports
  },
})
