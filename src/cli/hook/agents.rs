//! The coding agents whose hook interfaces ckpt serves, as data: each one's event and tool names,
//! where its settings live, and how one of its hook events reads. Pure: nothing here touches a
//! file or runs anything.

use std::path::PathBuf;

pub use crate::cli::args::Agent;

/// How an agent states a hook's timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutUnit {
    Seconds,
    Milliseconds,
}

/// What ckpt needs to know about one agent's hooks.
#[derive(Debug)]
pub struct AgentSpec {
    /// As on ckpt's command line.
    pub name: &'static str,
    pub product: &'static str,
    /// The event fired when the user submits a prompt: a new turn.
    pub prompt_event: &'static str,
    /// The event fired before a tool call, which may block it.
    pub tool_event: &'static str,
    /// The tools (as the agent names them in its events) that change files or run commands:
    /// a checkpoint is taken before each of these, and only these.
    pub mutating_tools: &'static [&'static str],
    /// The environment variable the agent sets to its project directory for hooks.
    pub project_dir_env: Option<&'static str>,
    /// The field of its events that names the current turn, where it has one.
    pub turn_key_field: Option<&'static str>,
    /// The field of its tool events that names the tool call, where it has one.
    pub call_id_field: Option<&'static str>,
    /// Without a turn id: a field its prompt events carry that is the same when one prompt is
    /// announced twice (ckpt's hook in both the user's and the project's settings).
    pub prompt_key_field: Option<&'static str>,
    pub timeout_unit: TimeoutUnit,
    /// Per hook entry, a `name` field (Gemini CLI shows it).
    pub names_entries: bool,
}

const CLAUDE: AgentSpec = AgentSpec {
    name: "claude",
    product: "Claude Code",
    prompt_event: "UserPromptSubmit",
    tool_event: "PreToolUse",
    mutating_tools: &["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"],
    project_dir_env: Some("CLAUDE_PROJECT_DIR"),
    turn_key_field: Some("prompt_id"),
    call_id_field: Some("tool_use_id"),
    prompt_key_field: None,
    timeout_unit: TimeoutUnit::Seconds,
    names_entries: false,
};

const CODEX: AgentSpec = AgentSpec {
    name: "codex",
    product: "Codex CLI",
    prompt_event: "UserPromptSubmit",
    tool_event: "PreToolUse",
    // File edits arrive as `apply_patch`, every shell command (exec_command too) as `Bash`.
    mutating_tools: &["apply_patch", "Bash"],
    project_dir_env: None,
    turn_key_field: Some("turn_id"),
    call_id_field: Some("tool_use_id"),
    prompt_key_field: None,
    timeout_unit: TimeoutUnit::Seconds,
    names_entries: false,
};

const GEMINI: AgentSpec = AgentSpec {
    name: "gemini",
    product: "Gemini CLI",
    prompt_event: "BeforeAgent",
    tool_event: "BeforeTool",
    mutating_tools: &["write_file", "replace", "run_shell_command"],
    project_dir_env: Some("GEMINI_PROJECT_DIR"),
    turn_key_field: None,
    call_id_field: None,
    prompt_key_field: Some("timestamp"),
    timeout_unit: TimeoutUnit::Milliseconds,
    names_entries: true,
};

impl Agent {
    pub fn spec(self) -> &'static AgentSpec {
        match self {
            Agent::Claude => &CLAUDE,
            Agent::Codex => &CODEX,
            Agent::Gemini => &GEMINI,
        }
    }
}

impl AgentSpec {
    /// The hook matcher for the tool event: the mutating tools, as the agent's regex.
    pub fn tool_matcher(&self) -> String {
        self.mutating_tools.join("|")
    }
}

/// One hook event, as far as checkpoints go.
#[derive(Debug, PartialEq, Eq)]
pub enum HookEvent {
    /// A prompt was submitted: the session's next turn begins.
    Prompt { session: String, turn_key: Option<String> },
    /// A mutating tool is about to run: a checkpoint first.
    ToolCall {
        session: String,
        tool: String,
        turn_key: Option<String>,
        call_id: Option<String>,
    },
    /// Anything else (another event, a tool that changes nothing): no checkpoint.
    Ignored { what: String },
}

/// An event and the directory the agent said it runs in.
#[derive(Debug)]
pub struct ParsedEvent {
    pub event: HookEvent,
    pub cwd: EventCwd,
}

/// The event's `cwd` field, as given: whether it can name a workspace is the caller's question
/// (the agent's project directory, where it sets one, makes it unneeded).
#[derive(Debug, PartialEq, Eq)]
pub enum EventCwd {
    Given(PathBuf),
    Missing,
    /// Present but no path: what it is instead.
    Unusable(String),
}

/// One top-level field of an event: its text, or what it holds instead.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Text(String),
    /// Not text (a number, an object, ...), or text JSON cannot decode: what it is instead.
    Other(String),
}

impl Field {
    fn of(value: serde_json::Value) -> Field {
        use serde_json::Value;
        match value {
            Value::String(text) => Field::Text(text),
            Value::Null => Field::Other("null, not text".into()),
            Value::Bool(_) => Field::Other("true or false, not text".into()),
            Value::Number(_) => Field::Other("a number, not text".into()),
            Value::Array(_) => Field::Other("an array, not text".into()),
            Value::Object(_) => Field::Other("an object, not text".into()),
        }
    }
}

type Fields = std::collections::HashMap<String, Field>;

/// Where `name`'s value is not non-empty text, what it is instead; `None` when it is absent.
fn not_text(fields: &Fields, name: &str) -> Option<String> {
    match fields.get(name)? {
        Field::Text(text) if text.is_empty() => Some("empty".into()),
        Field::Text(_) => None,
        Field::Other(what) => Some(what.clone()),
    }
}

/// Reads one hook event of `spec`'s agent. Unknown fields are ignored; a missing or non-text
/// `hook_event_name`, or a prompt or mutating tool call without a text `session_id`, is refused,
/// saying which it is. Only top-level fields matter, so an event serde cannot take whole (a lone
/// surrogate in a file's new content, input nested too deep) is still read for them.
pub fn parse_event(spec: &AgentSpec, input: &[u8]) -> Result<ParsedEvent, String> {
    let fields: Fields = match serde_json::from_slice::<serde_json::Value>(input) {
        Ok(serde_json::Value::Object(object)) => {
            object.into_iter().map(|(key, value)| (key, Field::of(value))).collect()
        }
        Ok(_) => return Err("the hook event on stdin is not a JSON object".into()),
        Err(e) => top_level_fields(input).ok_or_else(|| format!("the hook event on stdin is not JSON: {e}"))?,
    };
    let text = |field: &str| match fields.get(field) {
        Some(Field::Text(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    };
    let name = match (text("hook_event_name"), not_text(&fields, "hook_event_name")) {
        (Some(name), _) => name,
        (None, Some(what)) => return Err(format!("the hook event's \"hook_event_name\" is {what}")),
        (None, None) => return Err("the hook event has no \"hook_event_name\"".into()),
    };
    let cwd = match (text("cwd"), not_text(&fields, "cwd")) {
        (Some(cwd), _) => EventCwd::Given(PathBuf::from(cwd)),
        (None, Some(what)) => EventCwd::Unusable(format!("the {name} event's \"cwd\" is {what}")),
        (None, None) => EventCwd::Missing,
    };
    let turn_key = spec.turn_key_field.and_then(text).map(str::to_owned);
    let session = || match (text("session_id"), not_text(&fields, "session_id")) {
        (Some(session), _) => Ok(session.to_owned()),
        (None, Some(what)) => Err(format!("the {name} event's \"session_id\" is {what}")),
        (None, None) => Err(format!("the {name} event has no \"session_id\"")),
    };
    let event = if name == spec.prompt_event {
        HookEvent::Prompt {
            session: session()?,
            turn_key: turn_key.or_else(|| spec.prompt_key_field.and_then(text).map(str::to_owned)),
        }
    } else if name == spec.tool_event {
        let tool = match (text("tool_name"), not_text(&fields, "tool_name")) {
            (Some(tool), _) => tool,
            (None, Some(what)) => return Err(format!("the {name} event's \"tool_name\" is {what}")),
            (None, None) => return Err(format!("the {name} event has no \"tool_name\"")),
        };
        if spec.mutating_tools.contains(&tool) {
            HookEvent::ToolCall {
                session: session()?,
                tool: tool.to_owned(),
                turn_key,
                call_id: spec.call_id_field.and_then(text).map(str::to_owned),
            }
        } else {
            HookEvent::Ignored {
                what: format!("{name} of {tool}, which changes no files"),
            }
        }
    } else {
        HookEvent::Ignored {
            what: format!("the {name} event"),
        }
    };
    Ok(ParsedEvent { event, cwd })
}

/// A JSON object's top-level fields, found by scanning its structure without building the
/// rest: nested values are skipped whatever they hold, and only text is read. `None` when the
/// input is not an object with balanced brackets and closed strings.
fn top_level_fields(input: &[u8]) -> Option<Fields> {
    let (fields, whole) = scan_top_level(input);
    whole.then_some(fields)
}

/// What an event that could not be read at all still shows of itself: whether it is a prompt
/// (never blocked), or plainly not a mutating tool call (nothing to block), from the top-level
/// fields seen before it broke off.
pub fn could_be_a_mutating_call(spec: &AgentSpec, input: &[u8]) -> (bool, bool) {
    let (fields, _) = scan_top_level(input);
    let text = |field: &str| match fields.get(field) {
        Some(Field::Text(text)) => Some(text.as_str()),
        _ => None,
    };
    let name = text("hook_event_name");
    let prompt = name == Some(spec.prompt_event);
    let tool = text("tool_name");
    let other_event = name.is_some() && name != Some(spec.tool_event);
    let harmless_tool = name == Some(spec.tool_event) && tool.is_some_and(|t| !spec.mutating_tools.contains(&t));
    (prompt, !(prompt || other_event || harmless_tool))
}

/// The top-level text fields found, and whether the input was one whole object.
fn scan_top_level(input: &[u8]) -> (Fields, bool) {
    let mut fields = Fields::new();
    let mut depth = 0usize;
    let mut expect_key = false;
    let mut key: Option<String> = None;
    let mut seen_object = false;
    let mut at = 0;
    while at < input.len() {
        match input[at] {
            b'"' => {
                let start = at;
                at += 1;
                loop {
                    match input.get(at) {
                        None => return (fields, false),
                        Some(b'"') => break,
                        Some(b'\\') => at += 2,
                        Some(_) => at += 1,
                    }
                }
                if depth == 1 {
                    let raw = input.get(start..=at).unwrap_or_default();
                    let text = serde_json::from_slice::<String>(raw);
                    if expect_key {
                        key = text.ok();
                        expect_key = false;
                    } else if let Some(name) = key.take() {
                        // Often why serde refused the whole event: a lone surrogate, which
                        // the message names rather than calling the field missing.
                        let field = text.map_or_else(|e| Field::Other(undecodable(raw, &e)), Field::Text);
                        fields.insert(name, field);
                    }
                }
            }
            b'{' if depth == 0 && !seen_object => {
                seen_object = true;
                depth = 1;
                expect_key = true;
            }
            b'{' | b'[' if depth > 0 => {
                if let Some(name) = key.take().filter(|_| depth == 1) {
                    let what = if input[at] == b'{' { "an object" } else { "an array" };
                    fields.insert(name, Field::Other(format!("{what}, not text")));
                }
                depth += 1;
            }
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                key = None;
            }
            b',' if depth == 1 => {
                expect_key = true;
                key = None;
            }
            b' ' | b'\t' | b'\n' | b'\r' | b':' => {}
            _ if depth == 0 && at == 0 && input.starts_with("\u{feff}".as_bytes()) => at += 2,
            _ if depth == 0 => return (fields, false),
            first => {
                if let Some(name) = key.take().filter(|_| depth == 1) {
                    let what = match first {
                        b'-' | b'0'..=b'9' => "a number",
                        b't' | b'f' => "true or false",
                        b'n' => "null",
                        _ => "no JSON value",
                    };
                    fields.insert(name, Field::Other(format!("{what}, not text")));
                }
            }
        }
        at += 1;
    }
    let whole = seen_object && depth == 0;
    (fields, whole)
}

/// What is wrong with the JSON string `raw`, which serde refused, without its position in the
/// snippet (which would mislead): a lone surrogate, the usual cause, is named as such.
fn undecodable(raw: &[u8], error: &serde_json::Error) -> String {
    if has_lone_surrogate(raw) {
        return "not valid text: it holds a lone UTF-16 surrogate escape (\\uD800 to \\uDFFF without its pair)".into();
    }
    let message = error.to_string();
    let cause = message.split(" at line ").next().unwrap_or(&message);
    format!("not valid text ({cause})")
}

/// Whether the JSON string `raw` escapes half of a UTF-16 surrogate pair without the other.
fn has_lone_surrogate(raw: &[u8]) -> bool {
    let mut high_pending = false;
    let mut at = 0;
    while at < raw.len() {
        if raw[at] != b'\\' {
            if high_pending {
                return true;
            }
            at += 1;
            continue;
        }
        let unit = (raw.get(at + 1) == Some(&b'u'))
            .then(|| raw.get(at + 2..at + 6))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u16::from_str_radix(hex, 16).ok());
        match unit {
            Some(0xD800..=0xDBFF) if high_pending => return true,
            Some(0xD800..=0xDBFF) => high_pending = true,
            Some(0xDC00..=0xDFFF) if !high_pending => return true,
            Some(0xDC00..=0xDFFF) => high_pending = false,
            _ if high_pending => return true,
            _ => {}
        }
        at += if unit.is_some() { 6 } else { 2 };
    }
    high_pending
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes of events the real programs sent (tests/agents records them; trimmed here).
    const CLAUDE_EDIT: &str = r#"{"session_id":"41c3f61b-528f-41e1-9e69-7e9f4007f98f","transcript_path":"/h/.claude/projects/-r/41c3f61b.jsonl","cwd":"/r","prompt_id":"f2f2d7ed","permission_mode":"bypassPermissions","hook_event_name":"PreToolUse","tool_name":"Edit","tool_input":{"file_path":"/r/notes.txt","old_string":"a","new_string":"b","replace_all":false},"tool_use_id":"toolu_1"}"#;
    const CODEX_PROMPT: &str = r#"{"session_id":"01a23363-1f73","turn_id":"01a23363-1fb7","transcript_path":null,"cwd":"/r","hook_event_name":"UserPromptSubmit","model":"gpt-5.5","prompt":"PROMPT1"}"#;
    const GEMINI_SHELL: &str = r#"{"session_id":"6b0d3c32","transcript_path":"/h/chats/s.jsonl","cwd":"/r","hook_event_name":"BeforeTool","timestamp":"2026-12-01T20:56:00Z","tool_name":"run_shell_command","tool_input":{"command":"rm tracked.txt"}}"#;

    #[test]
    fn real_events_of_each_agent_read_as_what_they_mean() {
        let edit = parse_event(Agent::Claude.spec(), CLAUDE_EDIT.as_bytes()).expect("claude");
        assert_eq!(
            edit.event,
            HookEvent::ToolCall {
                session: "41c3f61b-528f-41e1-9e69-7e9f4007f98f".into(),
                tool: "Edit".into(),
                turn_key: Some("f2f2d7ed".into()),
                call_id: Some("toolu_1".into()),
            }
        );
        assert_eq!(edit.cwd, EventCwd::Given(PathBuf::from("/r")));
        let prompt = parse_event(Agent::Codex.spec(), CODEX_PROMPT.as_bytes()).expect("codex");
        assert_eq!(
            prompt.event,
            HookEvent::Prompt {
                session: "01a23363-1f73".into(),
                turn_key: Some("01a23363-1fb7".into()),
            }
        );
        let shell = parse_event(Agent::Gemini.spec(), GEMINI_SHELL.as_bytes()).expect("gemini");
        assert!(
            matches!(shell.event, HookEvent::ToolCall { ref tool, turn_key: None, .. } if tool == "run_shell_command")
        );
    }

    #[test]
    fn other_events_and_tools_that_change_nothing_are_ignored() {
        let read = CLAUDE_EDIT.replace(r#""tool_name":"Edit""#, r#""tool_name":"Read""#);
        assert!(matches!(
            parse_event(Agent::Claude.spec(), read.as_bytes()).expect("read").event,
            HookEvent::Ignored { .. }
        ));
        let stop = r#"{"session_id":"s","hook_event_name":"Stop"}"#;
        assert!(matches!(
            parse_event(Agent::Claude.spec(), stop.as_bytes()).expect("stop").event,
            HookEvent::Ignored { .. }
        ));
        // Another agent's event name means nothing here.
        assert!(matches!(
            parse_event(Agent::Gemini.spec(), CLAUDE_EDIT.as_bytes())
                .expect("foreign")
                .event,
            HookEvent::Ignored { .. }
        ));
    }

    #[test]
    fn an_event_serde_cannot_take_whole_is_still_read_for_its_top_level_fields() {
        // A lone surrogate in the new content (what JSON.stringify gives for broken text), and
        // content nested far past serde's recursion limit.
        let surrogate = CLAUDE_EDIT.replace(r#""new_string":"b""#, r#""new_string":"b\ud83d""#);
        assert!(serde_json::from_str::<serde_json::Value>(&surrogate).is_err());
        let deep = CLAUDE_EDIT.replace(
            r#""replace_all":false"#,
            &format!(r#""x":{}1{}"#, "[".repeat(500), "]".repeat(500)),
        );
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
        for input in [surrogate, deep] {
            let event = parse_event(Agent::Claude.spec(), input.as_bytes()).expect("read").event;
            assert!(
                matches!(event, HookEvent::ToolCall { ref tool, .. } if tool == "Edit"),
                "{event:?}"
            );
        }
        // Field names inside nested values or escaped in strings do not count.
        let spoof = r#"{"tool_input":{"hook_event_name":"UserPromptSubmit"},"x":"\"hook_event_name\":\"Stop\"","hook_event_name":"PreToolUse","tool_name":"Bash","session_id":"s","bad":"\ud800"}"#;
        let event = parse_event(Agent::Claude.spec(), spoof.as_bytes()).expect("read").event;
        assert!(
            matches!(event, HookEvent::ToolCall { ref tool, .. } if tool == "Bash"),
            "{event:?}"
        );
        // Still refused: not an object, or cut short.
        assert!(top_level_fields(b"[1]").is_none());
        assert!(top_level_fields(br#"{"a":"b"#).is_none());
        assert!(top_level_fields(br#"{"a":{"b":1}"#).is_none());
    }

    #[test]
    fn malformed_events_are_refused_with_what_is_wrong() {
        let spec = Agent::Claude.spec();
        assert!(parse_event(spec, b"not json").unwrap_err().contains("not JSON"));
        assert!(parse_event(spec, b"[1]").unwrap_err().contains("not a JSON object"));
        assert!(parse_event(spec, br#"{"session_id":"s"}"#)
            .unwrap_err()
            .contains("hook_event_name"));
        let no_session = CLAUDE_EDIT.replace(r#""session_id":"41c3f61b-528f-41e1-9e69-7e9f4007f98f","#, "");
        assert!(parse_event(spec, no_session.as_bytes())
            .unwrap_err()
            .contains("session_id"));
        let no_tool = r#"{"session_id":"s","hook_event_name":"PreToolUse"}"#;
        assert!(parse_event(spec, no_tool.as_bytes()).unwrap_err().contains("tool_name"));
        // A field that is there but not text is named as what it is, whichever way it was read.
        let numbered = CLAUDE_EDIT.replace(
            r#""session_id":"41c3f61b-528f-41e1-9e69-7e9f4007f98f""#,
            r#""session_id":7"#,
        );
        let deep = numbered.replace(
            r#""replace_all":false"#,
            &format!(r#""x":{}1{}"#, "[".repeat(500), "]".repeat(500)),
        );
        for input in [&numbered, &deep] {
            let refused = parse_event(spec, input.as_bytes()).unwrap_err();
            assert!(refused.ends_with(r#""session_id" is a number, not text"#), "{refused}");
        }
        let surrogate = CLAUDE_EDIT.replace("41c3f61b-528f", r"41c3\udc00");
        let refused = parse_event(spec, surrogate.as_bytes()).unwrap_err();
        assert!(refused.contains("lone UTF-16 surrogate"), "{refused}");
    }

    #[test]
    fn a_cwd_is_given_missing_or_named_as_what_it_is_instead() {
        let spec = Agent::Claude.spec();
        let cwd = |from: &str, to: &str| {
            parse_event(spec, CLAUDE_EDIT.replace(from, to).as_bytes())
                .expect("read")
                .cwd
        };
        assert_eq!(cwd(r#""cwd":"/r","#, ""), EventCwd::Missing);
        assert_eq!(
            cwd(r#""cwd":"/r""#, r#""cwd":5"#),
            EventCwd::Unusable(r#"the PreToolUse event's "cwd" is a number, not text"#.into())
        );
        assert_eq!(
            cwd(r#""cwd":"/r""#, r#""cwd":"""#),
            EventCwd::Unusable(r#"the PreToolUse event's "cwd" is empty"#.into())
        );
    }

    #[test]
    fn lone_surrogates_are_told_from_pairs() {
        assert!(has_lone_surrogate(br#""a\ud800""#));
        assert!(has_lone_surrogate(br#""\udc00a""#));
        assert!(has_lone_surrogate(br#""\ud800\ud800\udc00""#));
        assert!(has_lone_surrogate(br#""\ud800\n""#));
        assert!(!has_lone_surrogate(br#""\ud83d\ude00 \u00e9""#));
        assert!(!has_lone_surrogate(br#""\\ud800""#), "an escaped backslash, then text");
    }
}
