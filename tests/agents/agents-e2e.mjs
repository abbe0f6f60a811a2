// ckpt's hooks in the real agent programs: Claude Code, Codex CLI and Gemini CLI, each installed
// from the npm registry at a pinned version into a cache (default target/agents-e2e, reused by
// later runs), run non-interactively against a local fake model (fake-models.mjs) that scripts
// a write and an edit in a first prompt and a shell command deleting a tracked file in a second
// prompt of the same session. For each agent it checks, on a scratch repository made with git:
//   - `ckpt integrate` merges into a settings file that already has the user's own hook, is
//     idempotent, and `--remove` gives the original back;
//   - the agent really ran through ckpt's hooks: one checkpoint before each mutation, labelled
//     with the agent's session id, turn.step and tool, each holding the state just before it;
//   - `ckpt restore turn:1 --session <id> --exact --yes` brings the files back byte-exact;
//   - the user's git state (HEAD, index, refs outside refs/ckpt, reflogs, stash, config, hooks)
//     is unchanged throughout.
// Usage: CKPT_BIN=/path/to/ckpt node tests/agents/agents-e2e.mjs [claude|codex|gemini ...]
// Exits 77 (skip) only when an agent is not installed and the registry cannot be reached.

import { spawn, spawnSync } from 'node:child_process'
import { createHash, randomUUID } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { EDITED, WRITTEN, startFakeModel } from './fake-models.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const CKPT = process.env.CKPT_BIN ?? resolve(here, '..', '..', 'target', 'debug', 'ckpt')
const cacheDir = resolve(process.env.CKPT_AGENTS_E2E_CACHE ?? join(here, '..', '..', 'target', 'agents-e2e'))

/** The agents, each at the version tested, with how to drive it. */
const AGENTS = {
  claude: {
    package: '@anthropic-ai/claude-code',
    version: '2.1.332',
    bin: 'claude',
    triggers: ['Write', 'Edit', 'Bash'],
    scope: [],
    settingsFile: ({ repo }) => join(repo, '.claude', 'settings.local.json'),
    userSettings: { permissions: { allow: ['Bash(ls:*)'] }, hooks: { PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'true' }] }] } },
    env: ({ home, url }) => ({
      HOME: home,
      ANTHROPIC_BASE_URL: url,
      ANTHROPIC_API_KEY: 'dummy',
      // bypassPermissions is refused to root unless the run says it is sandboxed.
      IS_SANDBOX: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_ERROR_REPORTING: '1',
    }),
    unsetEnv: ['CLAUDE_CONFIG_DIR', 'CLAUDE_PROJECT_DIR', 'CLAUDECODE'],
    prepare() {},
    first: (sid) => ['-p', 'PROMPT1: write notes.txt, then edit it', '--session-id', sid, '--permission-mode', 'bypassPermissions', '--output-format', 'json'],
    second: (sid) => ['-p', 'PROMPT2: delete tracked.txt', '--resume', sid, '--permission-mode', 'bypassPermissions', '--output-format', 'json'],
    sessionOf: (_out, sid) => sid,
    // ckpt integrate also installs Claude Code's /ckpt command.
    slashCommand: ({ repo }) => join(repo, '.claude', 'commands', 'ckpt.md'),
    third: (sid) => ['-p', '/ckpt', '--resume', sid, '--permission-mode', 'bypassPermissions', '--output-format', 'json'],
  },
  codex: {
    package: '@openai/codex',
    version: '0.171.0',
    bin: 'codex',
    triggers: ['apply_patch', 'apply_patch', 'Bash'],
    // Codex reads a project's hooks only from a trusted project: the user file is the plain case.
    scope: ['--user'],
    settingsFile: ({ home }) => join(home, '.codex', 'hooks.json'),
    userSettings: { hooks: { Stop: [{ hooks: [{ type: 'command', command: 'true' }] }] } },
    env: ({ home }) => ({ HOME: home, CODEX_HOME: join(home, '.codex'), FAKE_API_KEY: 'dummy' }),
    unsetEnv: ['OPENAI_API_KEY', 'OPENAI_BASE_URL'],
    prepare({ home, url }) {
      mkdirSync(join(home, '.codex'), { recursive: true })
      // A model of Codex's bundled catalog: only those are offered the apply_patch tool.
      writeFileSync(
        join(home, '.codex', 'config.toml'),
        [
          'model = "gpt-5.5"',
          'model_provider = "fake"',
          'check_for_update_on_startup = false',
          '',
          '[model_providers.fake]',
          'name = "fake"',
          `base_url = "${url}/v1"`,
          'env_key = "FAKE_API_KEY"',
          'wire_api = "responses"',
          '',
        ].join('\n'),
      )
    },
    // Codex runs a hook only once the user trusted it (its /hooks review); a test run says so
    // with the flag Codex has for exactly that.
    first: () => ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '--dangerously-bypass-hook-trust', '--json', 'PROMPT1: write notes.txt, then edit it'],
    second: (sid) => ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '--dangerously-bypass-hook-trust', '--json', 'resume', sid, 'PROMPT2: delete tracked.txt'],
    sessionOf: (out) => {
      for (const line of out.split('\n')) {
        try {
          const event = JSON.parse(line)
          if (event.type === 'thread.started' && event.thread_id) return event.thread_id
        } catch {}
      }
      return undefined
    },
  },
  gemini: {
    package: '@google/gemini-cli',
    version: '0.61.0',
    bin: 'gemini',
    triggers: ['write_file', 'replace', 'run_shell_command'],
    scope: [],
    settingsFile: ({ repo }) => join(repo, '.gemini', 'settings.json'),
    userSettings: { hooks: { AfterTool: [{ matcher: '*', hooks: [{ name: 'mine', type: 'command', command: 'true', timeout: 5000 }] }] } },
    env: ({ home, url }) => ({
      HOME: home,
      GEMINI_CLI_HOME: home,
      GEMINI_API_KEY: 'dummy',
      GOOGLE_GEMINI_BASE_URL: url,
      // A project's hooks run only in a trusted folder.
      GEMINI_CLI_TRUST_WORKSPACE: 'true',
    }),
    unsetEnv: ['GOOGLE_API_KEY', 'GOOGLE_CLOUD_PROJECT', 'GEMINI_PROJECT_DIR'],
    prepare({ home }) {
      mkdirSync(join(home, '.gemini'), { recursive: true })
      // The base URL alone would select "gateway" auth, which headless mode refuses.
      const settings = {
        security: { auth: { selectedType: 'gemini-api-key' } },
        privacy: { usageStatisticsEnabled: false },
        telemetry: { enabled: false },
        general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      }
      writeFileSync(join(home, '.gemini', 'settings.json'), JSON.stringify(settings, null, 2))
    },
    first: () => ['-p', 'PROMPT1: write notes.txt, then edit it', '--yolo', '-o', 'json'],
    second: (sid) => ['--resume', sid, '-p', 'PROMPT2: delete tracked.txt', '--yolo', '-o', 'json'],
    sessionOf: (out) => {
      try {
        return JSON.parse(out).session_id
      } catch {
        return undefined
      }
    },
  },
}

class Unreachable extends Error {}

function run(cmd, args, options = {}) {
  const out = spawnSync(cmd, args, { encoding: 'utf8', timeout: 600_000, maxBuffer: 64 << 20, ...options })
  return { code: out.status, stdout: out.stdout ?? '', stderr: `${out.stderr ?? ''}${out.error ? `\n${out.error.message}` : ''}` }
}

function must(cmd, args, options) {
  const out = run(cmd, args, options)
  if (out.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${out.code}:\n${out.stdout}\n${out.stderr}`)
  return out
}

/** The agent's program, installed on first use. */
function ensureAgent(name) {
  const agent = AGENTS[name]
  const dir = join(cacheDir, `${name}-${agent.version}`)
  const bin = join(dir, 'node_modules', '.bin', agent.bin)
  const works = () => existsSync(bin) && run(bin, ['--version'], { timeout: 60_000 }).code === 0
  if (works()) return bin
  const ping = run('npm', ['ping', '--fetch-retries=0', '--fetch-timeout=15000'], { timeout: 30_000 })
  if (ping.code !== 0) throw new Unreachable(`${agent.package} is not installed and the npm registry is unreachable`)
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `ckpt-agents-e2e-${name}`, private: true }))
  // Not --ignore-scripts: Claude Code's install script puts its native binary in place.
  must('npm', ['install', '--no-audit', '--no-fund', '--no-save', `${agent.package}@${agent.version}`], { cwd: dir })
  if (!works()) throw new Error(`${agent.package}@${agent.version} installed but \`${agent.bin} --version\` fails`)
  return bin
}

/** Runs `cmd` with stdin closed, without blocking the event loop (the fake model serves meanwhile). */
function runAsync(cmd, args, options) {
  return new Promise((done) => {
    const child = spawn(cmd, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), 300_000)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      done({ code: code ?? `signal ${signal}`, stdout, stderr })
    })
  })
}

function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex')
}

/** Every file under `dir` (paths relative to it), with its bytes' hash; `.git` left out. */
function worktree(dir) {
  const files = {}
  const walk = (at) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const full = join(at, entry.name)
      if (entry.name === '.git' && at === dir) continue
      if (entry.isDirectory()) walk(full)
      else files[relative(dir, full)] = sha256(readFileSync(full))
    }
  }
  walk(dir)
  return files
}

/** The user's git state: what ckpt must never change. */
function gitState(repo) {
  const git = (...args) => must('git', args, { cwd: repo }).stdout
  const gitDir = join(repo, '.git')
  const filesBelow = (dir) => (existsSync(dir) ? worktree(dir) : {})
  return JSON.stringify({
    head: readFileSync(join(gitDir, 'HEAD'), 'utf8'),
    headCommit: git('rev-parse', 'HEAD'),
    index: existsSync(join(gitDir, 'index')) ? sha256(readFileSync(join(gitDir, 'index'))) : null,
    refs: git('for-each-ref', '--format=%(refname) %(objectname)').split('\n').filter((l) => l && !l.startsWith('refs/ckpt/')),
    logs: filesBelow(join(gitDir, 'logs')),
    config: sha256(readFileSync(join(gitDir, 'config'))),
    hooks: filesBelow(join(gitDir, 'hooks')),
  })
}

function ckpt(args, options) {
  return run(CKPT, args, options)
}

function records(out, type) {
  return out.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line))
    .filter((r) => type === undefined || r.type === type)
}

async function testAgent(name, failures) {
  const agent = AGENTS[name]
  const check = (ok, what) => {
    if (!ok) failures.push(`${name}: ${what}`)
    return ok
  }
  const bin = ensureAgent(name)
  const scratch = mkdtempSync(join(tmpdir(), `ckpt-${name}-e2e-`))
  const home = join(scratch, 'home')
  const repo = join(scratch, 'repo')
  mkdirSync(home)
  mkdirSync(repo)
  const log = join(scratch, 'model-requests.jsonl')
  const model = await startFakeModel(name, { cwd: repo, logFile: log })
  try {
    const env = { ...process.env, ...agent.env({ home, url: model.url }) }
    for (const key of agent.unsetEnv) delete env[key]
    agent.prepare({ home, url: model.url })
    const git = (...args) => must('git', args, { cwd: repo, env })
    git('init', '-q')
    git('config', 'user.name', 'E2E')
    git('config', 'user.email', 'e2e@example.com')
    writeFileSync(join(repo, 'tracked.txt'), 'tracked content\n')
    writeFileSync(join(repo, 'keep.bin'), Buffer.from([0, 1, 2, 255, 254, 10, 13, 0]))
    git('add', '.')
    git('commit', '-qm', 'initial')
    const state0 = gitState(repo)

    // The settings file the agent reads, with a hook of the user's own already in it.
    const settings = agent.settingsFile({ home, repo })
    mkdirSync(dirname(settings), { recursive: true })
    const original = `${JSON.stringify(agent.userSettings, null, 2)}\n`
    writeFileSync(settings, original)
    const integrate = (...args) => ckpt(['--json', '-C', repo, 'integrate', name, ...agent.scope, ...args], { env })
    const added = integrate('--yes')
    const addedRecord = records(added, 'integrate')[0]
    if (!check(added.code === 0 && addedRecord?.action === 'added' && addedRecord.written, `ckpt integrate: exit ${added.code} ${added.stdout} ${added.stderr}`)) return
    const merged = JSON.parse(readFileSync(settings, 'utf8'))
    const commands = JSON.stringify(merged.hooks)
    check(commands.includes(` hook ${name}`), `the settings have no ckpt hook: ${commands}`)
    for (const [event, groups] of Object.entries(agent.userSettings.hooks)) {
      check(JSON.stringify(merged.hooks[event]).includes(JSON.stringify(groups[0].hooks[0])), `the user's own ${event} hook was not kept: ${commands}`)
    }
    const again = integrate('--yes')
    check(again.code === 0 && records(again, 'integrate')[0]?.action === 'unchanged', `a second ckpt integrate was not a no-op: ${again.stdout}`)
    check(existsSync(addedRecord.backup?.path ?? addedRecord.backup ?? ''), `no backup of the old settings: ${JSON.stringify(addedRecord.backup)}`)
    const before = worktree(repo)

    // Two prompts of one session.
    const sid0 = randomUUID()
    const first = await runAsync(bin, agent.first(sid0), { cwd: repo, env })
    const sid = agent.sessionOf(first.stdout, sid0)
    if (!check(first.code === 0 && sid, `the first prompt failed (exit ${first.code}): ${first.stdout.slice(-2000)}\n${first.stderr.slice(-2000)}`)) return
    check(readFileSync(join(repo, 'notes.txt'), 'utf8') === EDITED, 'the agent did not write and edit notes.txt')
    const second = await runAsync(bin, agent.second(sid), { cwd: repo, env })
    check(second.code === 0, `the second prompt failed (exit ${second.code}): ${second.stdout.slice(-2000)}\n${second.stderr.slice(-2000)}`)
    check(!existsSync(join(repo, 'tracked.txt')), 'the agent did not delete tracked.txt')

    // One checkpoint before each mutation, labelled and holding the state just before it.
    const listed = ckpt(['--json', '-C', repo, 'list', '--session', sid], { env })
    const points = records(listed, 'checkpoint')
    const labels = points.map((p) => `${p.turn}.${p.step} ${p.trigger} ${p.kind}`)
    const want = [`1.1 ${agent.triggers[0]} auto`, `1.2 ${agent.triggers[1]} auto`, `2.1 ${agent.triggers[2]} auto`]
    check(JSON.stringify(labels) === JSON.stringify(want), `checkpoints ${JSON.stringify(labels)}, expected ${JSON.stringify(want)}`)
    const held = (id, path) => run('git', ['cat-file', 'blob', `${id}:${path}`], { cwd: repo })
    if (points.length === 3) {
      check(held(points[0].id, 'notes.txt').code !== 0, 'the checkpoint before the write already holds notes.txt')
      check(held(points[1].id, 'notes.txt').stdout === WRITTEN, 'the checkpoint before the edit does not hold the written notes.txt')
      check(held(points[2].id, 'notes.txt').stdout === EDITED, 'the checkpoint before the shell command does not hold the edited notes.txt')
      check(held(points[2].id, 'tracked.txt').stdout === 'tracked content\n', 'the checkpoint before the shell command does not hold tracked.txt')
    }
    check(gitState(repo) === state0, 'the agent run through ckpt changed the git state')

    if (agent.slashCommand) {
      // The /ckpt command puts this session's checkpoints into the prompt the model gets.
      check(existsSync(agent.slashCommand({ repo })), 'ckpt integrate did not install the /ckpt command')
      const third = await runAsync(bin, agent.third(sid), { cwd: repo, env })
      check(third.code === 0, `/ckpt failed (exit ${third.code}): ${third.stdout.slice(-2000)}\n${third.stderr.slice(-2000)}`)
      const seen = readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((e) => e.lastUser !== undefined)
      const expanded = seen.length ? seen[seen.length - 1].lastUser : ''
      const listedAll = points.every((p) => expanded.includes(p.short)) && expanded.includes(`${agent.triggers[2]}`)
      check(listedAll && !expanded.includes('${CLAUDE_SESSION_ID}'), `/ckpt did not put the session's checkpoints before the model: ${expanded.slice(0, 3000)}`)
    }

    // Back to before the first prompt, byte-exact.
    const restored = ckpt(['--json', '-C', repo, 'restore', 'turn:1', '--session', sid, '--exact', '--yes'], { env })
    check(restored.code === 0, `ckpt restore turn:1 failed (exit ${restored.code}): ${restored.stdout}\n${restored.stderr}`)
    const after = worktree(repo)
    check(JSON.stringify(after) === JSON.stringify(before), `the restored worktree differs:\n${JSON.stringify(before)}\n${JSON.stringify(after)}`)
    check(gitState(repo) === state0, 'ckpt restore changed the git state')

    // And the settings file round-trips.
    const removed = integrate('--remove', '--yes')
    check(removed.code === 0 && records(removed, 'integrate')[0]?.action === 'removed', `ckpt integrate --remove: ${removed.stdout} ${removed.stderr}`)
    check(JSON.stringify(JSON.parse(readFileSync(settings, 'utf8'))) === JSON.stringify(agent.userSettings), `--remove did not give the original settings back: ${readFileSync(settings, 'utf8')}`)
    if (agent.slashCommand) check(!existsSync(agent.slashCommand({ repo })), '--remove left the /ckpt command')
    ckpt(['-C', repo, 'watch', 'stop'], { env })
    console.log(`${name} ${agent.version}: ${points.length} checkpoints (${labels.join(', ')}), restore and settings round trip checked`)
  } finally {
    await model.close()
    if (failures.some((f) => f.startsWith(`${name}:`))) {
      console.log(`${name}: kept ${scratch} for a look (model requests in ${log})`)
    } else {
      rmSync(scratch, { recursive: true, force: true })
    }
  }
}

async function main() {
  if (!existsSync(CKPT) || !statSync(CKPT).isFile()) throw new Error(`no ckpt binary at ${CKPT} (set CKPT_BIN)`)
  const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(AGENTS)
  const failures = []
  for (const name of names) {
    if (!AGENTS[name]) throw new Error(`unknown agent ${name}`)
    try {
      await testAgent(name, failures)
    } catch (error) {
      if (error instanceof Unreachable) throw error
      failures.push(`${name}: ${error.stack ?? error}`)
    }
  }
  if (failures.length) {
    console.log(`FAILED:\n${failures.join('\n')}`)
    process.exit(1)
  }
  console.log(`agents e2e: all checks passed (${names.map((n) => `${n} ${AGENTS[n].version}`).join(', ')})`)
}

main().catch((error) => {
  if (error instanceof Unreachable) {
    console.error(error.message)
    process.exit(77)
  }
  console.error(error.stack ?? error)
  process.exit(1)
})
