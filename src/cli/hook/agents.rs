//! The coding agents whose hook interfaces ckpt serves, as data: each one's event and tool names,
//! where its settings live, and how one of its hook events reads. Pure: nothing here touches a
//! file or runs anything.

use std::path::PathBuf;

/// An agent with a documented hook that runs before a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Code (`claude`)
    Claude,
    /// OpenAI Codex CLI (`codex`)
    Codex,
    /// Google Gemini CLI (`gemini`)
    Gemini,
}

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
    },
    /// Anything else (another event, a tool that changes nothing): no checkpoint.
    Ignored { what: String },
}

/// An event and the directory the agent said it runs in.
#[derive(Debug)]
pub struct ParsedEvent {
    pub event: HookEvent,
    pub cwd: Option<PathBuf>,
}

/// Reads one hook event of `spec`'s agent. Unknown fields are ignored; a missing or non-text
/// `hook_event_name`, or a prompt or mutating tool call without a `session_id`, is refused.
pub fn parse_event(spec: &AgentSpec, input: &[u8]) -> Result<ParsedEvent, String> {
    let value: serde_json::Value =
        serde_json::from_slice(input).map_err(|e| format!("the hook event on stdin is not JSON: {e}"))?;
    let object = value
        .as_object()
        .ok_or("the hook event on stdin is not a JSON object")?;
    let text = |field: &str| object.get(field).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
    let name = text("hook_event_name").ok_or("the hook event has no \"hook_event_name\"")?;
    let cwd = text("cwd").map(PathBuf::from);
    let turn_key = spec.turn_key_field.and_then(text).map(str::to_owned);
    let session = || {
        text("session_id")
            .map(str::to_owned)
            .ok_or_else(|| format!("the {name} event has no \"session_id\""))
    };
    let event = if name == spec.prompt_event {
        HookEvent::Prompt {
            session: session()?,
            turn_key,
        }
    } else if name == spec.tool_event {
        let tool = text("tool_name").ok_or_else(|| format!("the {name} event has no \"tool_name\""))?;
        if spec.mutating_tools.contains(&tool) {
            HookEvent::ToolCall {
                session: session()?,
                tool: tool.to_owned(),
                turn_key,
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
            }
        );
        assert_eq!(edit.cwd, Some(PathBuf::from("/r")));
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
    }
}
