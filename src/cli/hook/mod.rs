//! `ckpt hook <agent>`: ckpt behind a coding agent's documented hook interface. It reads one hook
//! event (JSON on stdin), counts the session's turns (prompt events) and steps (tool calls), and
//! takes a checkpoint before each tool call that changes files or runs a command, labelled with
//! the agent's session id, the turn, the step and the tool. It never prints on stdout (agents
//! read it as their protocol) and never blocks a tool unless asked to (`--fail-closed`) and no
//! checkpoint could be taken. `ckpt integrate` installs it ([`integrate`]).

mod agents;
pub(super) mod integrate;
mod jsonedit;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;

pub use agents::Agent;
use agents::{AgentSpec, EventCwd, HookEvent};

use super::args::Cli;
use super::exit::Exit;
use crate::provider::scan::DEFAULT_MAX_FILE_SIZE;
use crate::provider::{CkptError, Provider, SnapshotRequest};
use crate::records::hooks::{Advance, SessionEvent};
use crate::records::Kind;

/// How long a hook waits for a workspace lock another ckpt holds.
const HOOK_LOCK_TIMEOUT_SECS: &str = "30";

/// How long a hook waits for the agent to close stdin.
const STDIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest hook event read: a `Write` event carries the whole new file.
const MAX_EVENT_BYTES: u64 = 256 << 20;

/// Why no checkpoint was taken, and whether the event was a tool call that may be blocked.
struct Failure {
    /// The tool about to run, when the event was read that far.
    tool: Option<String>,
    session: Option<String>,
    /// A prompt event: never blocked (that would drop the user's prompt).
    prompt: bool,
    /// Whether the event is, or may be, a mutating tool call: only those are blocked.
    may_block: bool,
    message: String,
}

impl Failure {
    fn before_reading(message: String) -> Self {
        Failure {
            tool: None,
            session: None,
            prompt: false,
            may_block: true,
            message,
        }
    }
}

/// Runs one hook event of `agent`; the exit status the agent reads: 0 go on, 1 go on but say
/// why there is no checkpoint, 2 block the tool call (only with `fail_closed`).
pub(super) fn run(cli: &Cli, agent: Agent, fail_closed: bool, no_watch: bool) -> Exit {
    let spec = agent.spec();
    // An agent kills a hook at its timeout (120 s as `ckpt integrate` sets it) and runs the tool
    // anyway, unprotected and unexplained: a held workspace lock is given up on well before,
    // with a reason the agent shows. Set before any thread exists.
    if std::env::var_os("CKPT_LOCK_TIMEOUT_SECS").is_none() {
        std::env::set_var("CKPT_LOCK_TIMEOUT_SECS", HOOK_LOCK_TIMEOUT_SECS);
    }
    let input = match read_event() {
        Ok(input) => input,
        Err(message) => return report(Failure::before_reading(message), fail_closed),
    };
    let parsed = match agents::parse_event(spec, &input) {
        Ok(parsed) => parsed,
        Err(message) => {
            // Broken as it is, it may still say it is a prompt or a harmless call.
            let (prompt, may_block) = agents::could_be_a_mutating_call(spec, &input);
            let failure = Failure {
                prompt,
                may_block,
                ..Failure::before_reading(message)
            };
            return report(failure, fail_closed);
        }
    };
    // What a failure past here is about (a crash included): a prompt is never blocked.
    let (tool, session, prompt) = match &parsed.event {
        HookEvent::Ignored { .. } => return Exit::Ok,
        HookEvent::Prompt { session, .. } => (None, session.clone(), true),
        HookEvent::ToolCall { session, tool, .. } => (Some(tool.clone()), session.clone(), false),
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handle_event(cli, spec, parsed, no_watch)
    }));
    let failure = match outcome {
        Ok(Ok(())) => return Exit::Ok,
        Ok(Err(failure)) => failure,
        // The panic message is already on stderr; any status but 0, 1 and 2 would block in
        // some agents, so a crash is a failure like any other.
        Err(_) => Failure {
            tool,
            session: Some(session),
            prompt,
            may_block: !prompt,
            message: "ckpt crashed (the message above says where)".into(),
        },
    };
    report(failure, fail_closed)
}

/// Says why there is no checkpoint, the way the agents show a hook's stderr, and picks the
/// exit status: block (2) only when failing closed and not for a prompt.
fn report(failure: Failure, fail_closed: bool) -> Exit {
    let before = failure
        .tool
        .as_deref()
        .map(printable)
        .unwrap_or_else(|| "this tool call".into());
    let session = failure
        .session
        .as_deref()
        .map(|s| format!(" in session {}", printable(s)))
        .unwrap_or_default();
    if fail_closed && failure.may_block && !failure.prompt {
        sayln!(
            "ckpt: blocked {before}{session}: no checkpoint could be taken first: {}. (The hook runs with --fail-closed; fix the cause, or drop --fail-closed to let tools run unprotected.)",
            failure.message
        );
        Exit::BlockTool
    } else if failure.prompt {
        sayln!(
            "ckpt: could not count this prompt{session} as a new turn: {}. Checkpoints still follow; their turn numbers may be off.",
            failure.message
        );
        Exit::Failed
    } else {
        sayln!(
            "ckpt: WARNING: no checkpoint was taken before {before}{session}; it runs unprotected: {}",
            failure.message
        );
        Exit::Failed
    }
}

/// Text from an event as it may go to a terminal: control characters escaped, and cut short.
fn printable(text: &str) -> String {
    const LONGEST: usize = 80;
    let mut shown: String = text.chars().take(LONGEST).flat_map(char::escape_debug).collect();
    if text.chars().count() > LONGEST {
        shown.push('…');
    }
    shown
}

fn handle_event(cli: &Cli, spec: &AgentSpec, parsed: agents::ParsedEvent, no_watch: bool) -> Result<(), Failure> {
    let (session, tool, turn_key, call_id, advance) = match parsed.event {
        HookEvent::Ignored { .. } => return Ok(()),
        HookEvent::Prompt { session, turn_key } => (session, None, turn_key, None, Advance::Prompt),
        HookEvent::ToolCall {
            session,
            tool,
            turn_key,
            call_id,
        } => (session, Some(tool), turn_key, call_id, Advance::ToolCall),
    };
    let fail = |message: String| Failure {
        tool: tool.clone(),
        session: Some(session.clone()),
        prompt: advance == Advance::Prompt,
        may_block: advance == Advance::ToolCall,
        message,
    };
    crate::records::validate_new_label("session", &session).map_err(&fail)?;
    let dir = workspace_dir(cli, spec, &parsed.cwd).map_err(|e| fail(e.to_string()))?;
    let (config, provider) = super::open_workspace(cli, &dir, false).map_err(|e| fail(e.to_string()))?;
    let mut slot = None;
    let provider = super::for_this_command(provider, &mut slot);
    let position = provider
        .hook_positions()
        .advance(
            &SessionEvent {
                agent: spec.name,
                session: &session,
                advance,
                turn_key: turn_key.as_deref(),
                call_id: call_id.as_deref(),
            },
            || turn_after_checkpoints(provider, &session),
            chrono::Utc::now().timestamp(),
        )
        .map_err(|e| fail(e.to_string()))?;
    // A call announced twice was checkpointed by its first announcement.
    let Some(tool) = tool.clone().filter(|_| !position.repeated) else {
        return Ok(());
    };
    let request = SnapshotRequest {
        session: Some(session.clone()),
        turn: Some(position.turn),
        step: Some(position.step),
        trigger: Some(tool),
        kind: Kind::Auto,
        max_file_size: config.max_file_size.unwrap_or(DEFAULT_MAX_FILE_SIZE),
        watch: !no_watch,
        opens_turn: position.step == 1,
    };
    // Nothing on stdout: the agent reads it as its hook protocol; warnings go to stderr.
    let settled = crate::provider::settle::snapshot(provider, &request, &super::followups(provider, &config))
        .map_err(|e| fail(e.to_string()))?;
    if let Some(why) = &settled.daemon_not_started {
        sayln!("ckpt: warning: could not start the watch daemon: {why}");
    }
    for warning in &settled.outcome.warnings {
        sayln!("ckpt: warning: {warning}");
    }
    Ok(())
}

/// The hook event on stdin, whole. Agents close stdin after the event; one that does not is
/// waited for [`STDIN_WAIT`], then what arrived is taken if it is a whole JSON value (a hook
/// that hangs until the agent's timeout lets the tool run unprotected, unexplained).
fn read_event() -> Result<Vec<u8>, String> {
    if std::io::stdin().is_terminal() {
        return Err(
            "`ckpt hook` reads the agent's hook event (JSON) on stdin; the agent runs it (see `ckpt integrate`)".into(),
        );
    }
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (done, finished) = std::sync::mpsc::channel();
    let sink = received.clone();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut chunk = vec![0u8; 64 << 10];
        let outcome = loop {
            match stdin.read(&mut chunk) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    let mut all = sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    all.extend_from_slice(&chunk[..n]);
                    if all.len() as u64 > MAX_EVENT_BYTES {
                        break Err(format!(
                            "the hook event on stdin is larger than {MAX_EVENT_BYTES} bytes"
                        ));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(format!("reading the hook event on stdin: {e}")),
            }
        };
        let _ = done.send(outcome);
    });
    let outcome = finished.recv_timeout(STDIN_WAIT);
    let input = std::mem::take(&mut *received.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    match outcome {
        Ok(Ok(())) => Ok(input),
        Ok(Err(message)) => Err(message),
        Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(&input).is_ok() => Ok(input),
        Err(_) => Err(format!(
            "the agent did not close stdin within {} s, and what it sent is no whole JSON event",
            STDIN_WAIT.as_secs()
        )),
    }
}

/// The workspace the event is about: `-C DIR`, else the project directory the agent gives its
/// hooks, else the event's `cwd`. Never the directory the hook happens to run in: an agent
/// starts hooks wherever it likes (the system's temp dir would be checkpointed whole), so
/// an event that names no usable directory is refused, as is one that names a directory that is
/// not there.
fn workspace_dir(cli: &Cli, spec: &AgentSpec, event_cwd: &EventCwd) -> Result<PathBuf, CkptError> {
    if cli.dir.is_some() {
        return super::working_dir(cli);
    }
    let from_env = spec
        .project_dir_env
        .and_then(std::env::var_os)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from);
    let named = match (from_env, event_cwd) {
        (Some(dir), _) => dir,
        (None, EventCwd::Given(dir)) => dir.clone(),
        (None, EventCwd::Unusable(why)) => {
            return Err(CkptError::InvalidInput(format!(
                "{why}: ckpt does not know which workspace to protect"
            )))
        }
        (None, EventCwd::Missing) => {
            let env = spec
                .project_dir_env
                .map(|var| format!(" and {var} is not set"))
                .unwrap_or_default();
            return Err(CkptError::InvalidInput(format!(
                "the event has no \"cwd\"{env}: ckpt does not know which workspace to protect"
            )));
        }
    };
    if !named.is_absolute() {
        return Err(CkptError::InvalidInput(format!(
            "the agent names {} as the workspace, a relative path; only an absolute one is taken (read from where the hook runs, it would be a guess)",
            named.display()
        )));
    }
    if !named.is_dir() {
        return Err(CkptError::InvalidInput(format!(
            "the agent names {} as the workspace, which is not an existing directory",
            named.display()
        )));
    }
    named
        .canonicalize()
        .map_err(|source| CkptError::Io { path: named, source })
}

/// The turn a session ckpt has no position for starts at: past the turns its checkpoints
/// already have (positions lost, or the session went on after ckpt forgot it), else 1.
fn turn_after_checkpoints(provider: &dyn Provider, session: &str) -> u64 {
    provider
        .checkpoints(false)
        .ok()
        .and_then(|records| {
            records
                .iter()
                .filter(|r| r.session.as_deref() == Some(session))
                .filter_map(|r| r.turn)
                .max()
        })
        .map_or(1, |turn| turn.saturating_add(1))
}
