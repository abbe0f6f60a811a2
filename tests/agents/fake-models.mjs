// Local stand-ins for the three model APIs the real agent CLIs call (Anthropic Messages for
// Claude Code, OpenAI Responses for Codex CLI, Gemini generateContent for Gemini CLI), all
// playing one script. The answer is decided from the conversation each request carries (never
// from a counter kept here), so retries and side requests cannot shift it:
//   the last user prompt says PROMPT1: write notes.txt, then edit it, then a final text;
//   the last user prompt says PROMPT2: run `rm tracked.txt`, then a final text.
// The step within a prompt is the number of tool results after it. Requests that offer no file
// or shell tool (titles, summaries, routing) get a plain answer. Every request is logged.

import http from 'node:http'
import { appendFileSync } from 'node:fs'
import { join } from 'node:path'

export const WRITTEN = 'first line\nsecond line\n'
export const EDITED = 'first line\nsecond line EDITED\n'

/** What the script does next, from the prompt in force and the tool results since it. */
function next(prompt, results) {
  if (/PROMPT1/.test(prompt)) {
    if (results === 0) return { tool: 'write' }
    if (results === 1) return { tool: 'edit' }
    return { text: 'Done: wrote notes.txt and edited it.' }
  }
  if (/PROMPT2/.test(prompt)) {
    if (results === 0) return { tool: 'shell', command: 'rm tracked.txt' }
    return { text: 'Done: removed tracked.txt.' }
  }
  return { text: 'Nothing is scripted for that.' }
}

// ---- Anthropic Messages API (Claude Code) ----

const blocksOf = (m) => (typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content || [])

function claudeDecide(body, cwd) {
  const tools = (body.tools || []).map((t) => t.name)
  if (!tools.includes('Write') && !tools.includes('Bash')) return { text: 'A fake title.' }
  const messages = body.messages || []
  let last = -1
  messages.forEach((m, i) => {
    const blocks = blocksOf(m)
    if (m.role === 'user' && !blocks.some((b) => b.type === 'tool_result') && blocks.some((b) => b.type === 'text' && /PROMPT[12]/.test(b.text))) last = i
  })
  if (last < 0) return { text: 'Nothing is scripted for that.' }
  const prompt = blocksOf(messages[last]).map((b) => b.text || '').join('\n')
  const results = messages.slice(last + 1).flatMap(blocksOf).filter((b) => b.type === 'tool_result').length
  const step = next(prompt, results)
  const notes = join(cwd, 'notes.txt')
  if (step.tool === 'write') return { name: 'Write', input: { file_path: notes, content: WRITTEN } }
  if (step.tool === 'edit') return { name: 'Edit', input: { file_path: notes, old_string: 'second line', new_string: 'second line EDITED' } }
  if (step.tool === 'shell') return { name: 'Bash', input: { command: step.command, description: 'Delete tracked.txt' } }
  return step
}

function claudeAnswer(req, res, body, state) {
  const url = req.url.split('?')[0]
  if (req.method !== 'POST' || url !== '/v1/messages') {
    if (url === '/v1/messages/count_tokens') return json(res, 200, { input_tokens: 100 })
    return json(res, 404, { type: 'error', error: { type: 'not_found_error', message: `no ${req.method} ${url}` } })
  }
  const d = claudeDecide(body, state.cwd)
  const n = ++state.seq
  const content = d.name ? [{ type: 'tool_use', id: `toolu_fake_${n}`, name: d.name, input: d.input }] : [{ type: 'text', text: d.text }]
  const stop = d.name ? 'tool_use' : 'end_turn'
  // What the user's last message said, as the model received it (a slash command's expansion).
  const users = (body.messages || []).filter((m) => m.role === 'user')
  const lastUser = users.length ? blocksOf(users[users.length - 1]).map((b) => b.text || '').join('\n') : ''
  state.log({ api: 'anthropic', decision: d, lastUser })
  if (!body.stream) {
    return json(res, 200, { id: `msg_${n}`, type: 'message', role: 'assistant', model: body.model, content, stop_reason: stop, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 20 } })
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  event('message_start', { message: { id: `msg_${n}`, type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } })
  content.forEach((block, index) => {
    if (block.type === 'text') {
      event('content_block_start', { index, content_block: { type: 'text', text: '' } })
      event('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } })
    } else {
      event('content_block_start', { index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } })
      event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } })
    }
    event('content_block_stop', { index })
  })
  event('message_delta', { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 20 } })
  event('message_stop', {})
  res.end()
}

// ---- OpenAI Responses API (Codex CLI) ----

const textOfItem = (item) => (typeof item.content === 'string' ? item.content : (item.content || []).map((c) => c.text || '').join(''))

function codexDecide(body) {
  const tools = body.tools || []
  if (!tools.length) return [message('OK.')]
  const input = Array.isArray(body.input) ? body.input : []
  let last = -1
  input.forEach((item, i) => {
    if (item.type === 'message' && item.role === 'user' && /PROMPT[12]/.test(textOfItem(item))) last = i
  })
  if (last < 0) return [message('Nothing is scripted for that.')]
  const results = input.slice(last + 1).filter((item) => /_call_output$/.test(item.type || '')).length
  const step = next(textOfItem(input[last]), results)
  const id = `call_${step.tool ?? 'text'}_${results}`
  const patch = tools.find((t) => t.name === 'apply_patch')
  if (step.tool === 'write' || step.tool === 'edit') {
    const text = step.tool === 'write'
      ? `*** Begin Patch\n*** Add File: notes.txt\n${WRITTEN.split('\n').filter(Boolean).map((l) => `+${l}`).join('\n')}\n*** End Patch\n`
      : '*** Begin Patch\n*** Update File: notes.txt\n@@\n first line\n-second line\n+second line EDITED\n*** End Patch\n'
    // The model's catalog entry decides how apply_patch is offered; without it, no patch tool.
    if (patch?.type === 'custom') return [{ type: 'custom_tool_call', id: `ctc_${id}`, status: 'completed', call_id: id, name: 'apply_patch', input: text }]
    if (patch) return [{ type: 'function_call', id: `fc_${id}`, status: 'completed', call_id: id, name: 'apply_patch', arguments: JSON.stringify({ input: text }) }]
    return [message('apply_patch was not offered')]
  }
  if (step.tool === 'shell') {
    const names = tools.map((t) => t.name)
    const shell = ['exec_command', 'shell_command', 'shell'].find((n) => names.includes(n)) ?? 'shell'
    const args = shell === 'exec_command' ? { cmd: step.command } : shell === 'shell_command' ? { command: step.command } : { command: ['bash', '-lc', step.command] }
    return [{ type: 'function_call', id: `fc_${id}`, status: 'completed', call_id: id, name: shell, arguments: JSON.stringify(args) }]
  }
  return [message(step.text)]
}

function message(text) {
  return { type: 'message', role: 'assistant', id: `msg_${text.length}`, status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] }
}

function codexAnswer(req, res, body, state) {
  if (req.method === 'GET' && req.url.startsWith('/v1/models')) return json(res, 200, { object: 'list', data: [], models: [] })
  if (req.method !== 'POST' || !req.url.startsWith('/v1/responses')) return json(res, 404, { error: { message: `no ${req.method} ${req.url}` } })
  const items = codexDecide(body)
  state.log({ api: 'openai', decision: items })
  const id = `resp_${++state.seq}`
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  event('response.created', { response: { id, object: 'response', status: 'in_progress', output: [] } })
  items.forEach((item, i) => {
    event('response.output_item.added', { output_index: i, item })
    if (item.type === 'message') event('response.output_text.delta', { output_index: i, content_index: 0, item_id: item.id, delta: item.content[0].text })
    event('response.output_item.done', { output_index: i, item })
  })
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 }
  event('response.completed', { response: { id, object: 'response', status: 'completed', output: items, usage } })
  res.end()
}

// ---- Gemini API (Gemini CLI) ----

const partsText = (c) => (c.parts || []).filter((p) => typeof p.text === 'string').map((p) => p.text).join('')

/** A value that satisfies a response schema (the CLI's routing and summary side calls). */
function fromSchema(schema, key = '') {
  if (!schema || typeof schema !== 'object') return 'ok'
  const type = String(schema.type || (schema.properties ? 'object' : 'string')).toLowerCase()
  if (schema.enum?.length) return key === 'next_speaker' && schema.enum.includes('user') ? 'user' : schema.enum[0]
  if (type === 'object') return Object.fromEntries(Object.entries(schema.properties || {}).map(([k, v]) => [k, fromSchema(v, k)]))
  if (type === 'array') return []
  if (type === 'boolean') return false
  // A routing score of 0 is refused by the CLI: keep numbers at or above their minimum, and 1.
  if (type === 'number' || type === 'integer') return Math.max(1, typeof schema.minimum === 'number' ? schema.minimum : 1)
  return key === 'next_speaker' ? 'user' : 'fake'
}

function geminiDecide(body) {
  const config = body.generationConfig || {}
  const schema = config.responseJsonSchema || config.responseSchema || (config.responseMimeType === 'application/json' ? {} : null)
  if (schema) return [{ text: JSON.stringify(fromSchema(schema)) }]
  const tools = (body.tools || []).flatMap((t) => t.functionDeclarations || []).map((f) => f.name)
  if (!tools.includes('write_file') && !tools.includes('run_shell_command')) return [{ text: 'A fake summary.' }]
  const contents = body.contents || []
  let last = -1
  contents.forEach((c, i) => {
    if (c.role === 'user' && !(c.parts || []).some((p) => p.functionResponse) && /PROMPT[12]/.test(partsText(c))) last = i
  })
  if (last < 0) return [{ text: 'Nothing is scripted for that.' }]
  // A resumed session sends each earlier result twice in one turn: count turns, not parts.
  const results = contents.slice(last + 1).filter((c) => (c.parts || []).some((p) => p.functionResponse)).length
  const step = next(partsText(contents[last]), results)
  if (step.tool === 'write') return [{ functionCall: { name: 'write_file', args: { file_path: 'notes.txt', content: WRITTEN } } }]
  if (step.tool === 'edit') {
    return [{ functionCall: { name: 'replace', args: { file_path: 'notes.txt', instruction: 'Mark the second line edited.', old_string: 'second line', new_string: 'second line EDITED' } } }]
  }
  if (step.tool === 'shell') return [{ functionCall: { name: 'run_shell_command', args: { command: step.command, description: 'Delete tracked.txt' } } }]
  return [{ text: step.text }]
}

function geminiAnswer(req, res, body, state) {
  const path = new URL(req.url, 'http://localhost').pathname
  if (/:countTokens$/.test(path)) return json(res, 200, { totalTokens: 42 })
  if (!/:(stream)?[gG]enerateContent$/.test(path)) return json(res, 404, { error: { code: 404, message: `no ${req.method} ${path}`, status: 'NOT_FOUND' } })
  const parts = geminiDecide(body)
  state.log({ api: 'gemini', decision: parts })
  const answer = { candidates: [{ content: { role: 'model', parts }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 } }
  if (/:streamGenerateContent$/.test(path)) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    return res.end(`data: ${JSON.stringify(answer)}\r\n\r\n`)
  }
  json(res, 200, answer)
}

// ----

function json(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(value))
}

const ANSWERS = { claude: claudeAnswer, codex: codexAnswer, gemini: geminiAnswer }

/**
 * Starts the fake model for `agent` on 127.0.0.1 (a free port); `cwd` is the workspace the agent
 * runs in (Claude Code's tools take absolute paths). Resolves to { url, close }.
 */
export function startFakeModel(agent, { cwd, logFile }) {
  const state = {
    cwd,
    seq: 0,
    log: (entry) => appendFileSync(logFile, `${JSON.stringify({ time: new Date().toISOString(), ...entry })}\n`),
  }
  const server = http.createServer((req, res) => {
    let raw = ''
    req.on('data', (chunk) => (raw += chunk))
    req.on('end', () => {
      let body = {}
      try {
        body = raw ? JSON.parse(raw) : {}
      } catch {
        body = {}
      }
      state.log({ method: req.method, url: req.url })
      try {
        ANSWERS[agent](req, res, body, state)
      } catch (error) {
        state.log({ error: String(error?.stack ?? error) })
        json(res, 500, { error: { message: String(error) } })
      }
    })
  })
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((done) => server.close(done)) })
    })
  })
}
