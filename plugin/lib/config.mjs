// Plugin config as a zero-dependency Standard Schema: defaults filled, unknown keys and bad
// values refused with the key named. Owns no behaviour.

export const DEFAULTS = Object.freeze({
  binary: undefined,
  timeoutMs: 30000,
  commandName: 'rewind',
  shellTools: ['bash', 'pwsh', 'terminal_send'],
  exact: false,
  failurePolicy: 'open',
  watch: true,
})

const CHECKS = {
  binary: (v) => (typeof v === 'string' && v.length > 0) || 'must be a non-empty string',
  timeoutMs: (v) => (Number.isInteger(v) && v > 0) || 'must be a positive integer (milliseconds)',
  commandName: (v) => (typeof v === 'string' && /^[a-z][a-z0-9_-]*$/.test(v)) || 'must match /^[a-z][a-z0-9_-]*$/',
  shellTools: (v) => (Array.isArray(v) && v.every((t) => typeof t === 'string' && t.length > 0)) || 'must be a list of tool names',
  exact: (v) => typeof v === 'boolean' || 'must be true or false',
  failurePolicy: (v) => v === 'open' || v === 'closed' || 'must be "open" or "closed"',
  watch: (v) => typeof v === 'boolean' || 'must be true or false',
}

export function validate(input) {
  if (input === undefined || input === null) return { value: { ...DEFAULTS } }
  if (typeof input !== 'object' || Array.isArray(input)) {
    return { issues: [{ message: 'config must be an object' }] }
  }
  const issues = []
  const given = {}
  for (const [key, value] of Object.entries(input)) {
    // An absent key and one set to undefined are the same: the loader hands back the validated
    // config (with `binary: undefined`) when it applies the plugin.
    if (value === undefined) continue
    given[key] = value
    const check = CHECKS[key]
    if (!check) {
      issues.push({ message: `unknown key "${key}"`, path: [key] })
      continue
    }
    const ok = check(value)
    if (ok !== true) issues.push({ message: `${key} ${ok}`, path: [key] })
  }
  if (issues.length) return { issues }
  return { value: { ...DEFAULTS, ...given } }
}

export const Config = { '~standard': { version: 1, vendor: 'ckpt', validate } }
