// A scripted stand-in for the DeepSeek chat-completions API (streaming SSE), on 127.0.0.1 only.
// A user message containing `[[name]]` selects scripts[name]; the number of assistant messages
// after that user message is the step, and scripts[name][step] is the reply: a list of tool calls
// ({name, args}) or a text. Past the end of a script the reply is the text "done". Every request
// is recorded (tool names offered, messages) for the test to inspect.

import { createServer } from 'node:http'

function textOf(message) {
  const c = message?.content
  if (typeof c === 'string') return c
  if (Array.isArray(c)) return c.map((p) => (typeof p === 'string' ? p : p?.text ?? '')).join('\n')
  return ''
}

export function startFakeModel(scripts) {
  const requests = []
  let calls = 0
  const server = createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk) => (body += chunk))
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.endsWith('/chat/completions')) {
        res.writeHead(404, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: { message: `fake model: no route ${req.method} ${req.url}` } }))
        return
      }
      let parsed
      try {
        parsed = JSON.parse(body)
      } catch {
        res.writeHead(400).end()
        return
      }
      const messages = parsed.messages ?? []
      let at = -1
      let name
      for (let i = messages.length - 1; i >= 0 && name === undefined; i--) {
        if (messages[i].role !== 'user') continue
        const m = /\[\[([a-z0-9_-]+)\]\]/.exec(textOf(messages[i]))
        if (m) {
          name = m[1]
          at = i
        }
      }
      const step = name === undefined ? 0 : messages.slice(at + 1).filter((m) => m.role === 'assistant').length
      // dsh's session-title request (no tools, quotes the first prompt) gets a plain text answer.
      const offered = parsed.tools ?? []
      const title = offered.length === 0 && /^Generate the session title/.test(textOf(messages.at(-1)))
      const reply = title ? { text: `Title ${name ?? 'untitled'}` } : ((name !== undefined && scripts[name]?.[step]) ?? { text: 'done' })
      const record = {
        script: name,
        step,
        tools: offered.map((t) => t.function?.name ?? t.name),
        messages: messages.map((m) => ({ role: m.role, text: textOf(m) })),
        sessionId: req.headers['x-deepseek-harness-session-id'],
        title,
        final: !title && !Array.isArray(reply.calls),
      }
      requests.push(record)
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      const send = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`)
      const base = { id: `fake-${requests.length}`, object: 'chat.completion.chunk', model: parsed.model }
      if (Array.isArray(reply.calls)) {
        reply.calls.forEach((call, index) => {
          calls += 1
          send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', tool_calls: [{ index, id: `call_${calls}`, type: 'function', function: { name: call.name, arguments: JSON.stringify(call.args) } }] } }] })
        })
        send({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] })
      } else {
        send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: reply.text ?? 'done' } }] })
        send({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })
      }
      send({ ...base, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })
      res.end('data: [DONE]\n\n')
    })
  })
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      resolve({
        url: `http://127.0.0.1:${port}`,
        requests,
        close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()) }),
      })
    })
  })
}
