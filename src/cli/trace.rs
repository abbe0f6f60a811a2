//! `ckpt trace ...`: the harness session logs of this workspace, replayed call by call
//! (`provider::trace`), as `trace.session` and `trace.node` records and human text. Read-only.

use std::path::Path;

use serde::Serialize;

use super::args::TraceAction;
use super::exit::Exit;
use super::output::Output;
use super::wire::WireRecord;
use crate::provider::trace::{self, Known};
use crate::provider::{CkptError, Provider};
use crate::records::sessionlog::{self, CallOutcome};
use crate::records::WirePath;

#[derive(Serialize)]
struct Problem<'a> {
    line: usize,
    message: &'a str,
}

/// `trace.session`: one harness session of this workspace.
#[derive(Serialize)]
struct TraceSessionRecord<'a> {
    session: &'a str,
    log: String,
    cwd: Option<&'a str>,
    created_at: Option<&'a str>,
    parent_session: Option<&'a str>,
    calls: usize,
    checkpoints: usize,
    problems: Vec<Problem<'a>>,
}

impl WireRecord for TraceSessionRecord<'_> {
    fn record_type(&self) -> &'static str {
        "trace.session"
    }
}

#[derive(Serialize)]
struct TraceFile<'a> {
    path: WirePath,
    rebuildable: bool,
    /// Bytes of the rebuilt content (`null`: the file does not exist after the call).
    bytes: Option<usize>,
    /// The rebuilt content's blob id in this repository, comparable with a checkpoint's.
    id: Option<String>,
    reason: Option<&'a str>,
}

/// `trace.node`: one tool call and what the trace knows of the files it changed.
#[derive(Serialize)]
struct TraceNodeRecord<'a> {
    session: &'a str,
    node: String,
    turn: Option<u64>,
    step: Option<u64>,
    call_id: &'a str,
    tool: &'a str,
    time: Option<&'a str>,
    outcome: &'static str,
    path: Option<WirePath>,
    refused: Option<&'a str>,
    files: Vec<TraceFile<'a>>,
}

impl WireRecord for TraceNodeRecord<'_> {
    fn record_type(&self) -> &'static str {
        "trace.node"
    }
}

fn outcome_text(outcome: CallOutcome) -> &'static str {
    match outcome {
        CallOutcome::Ok => "ok",
        CallOutcome::Failed => "failed",
        CallOutcome::Unknown => "unknown",
    }
}

pub(super) fn trace(
    provider: &dyn Provider,
    cwd: &Path,
    action: &TraceAction,
    out: &Output,
) -> Result<Exit, CkptError> {
    let TraceAction::List { session, dsh_home } = action;
    let root = sessionlog::sessions_root(dsh_home.as_deref())
        .ok_or_else(|| CkptError::InvalidInput("no harness home: set DSH_HOME or HOME, or pass --dsh-home".into()))?;
    let workdir = provider.workdir();
    let mut logs = Vec::new();
    for dir in [workdir, cwd] {
        let Some(text) = dir.to_str() else {
            return Err(CkptError::InvalidInput(format!(
                "{} is not UTF-8; the harness names its project directories after UTF-8 paths",
                dir.display()
            )));
        };
        for log in sessionlog::session_logs(&root, text) {
            if !logs.contains(&log) {
                logs.push(log);
            }
        }
    }
    let checkpoints = provider.checkpoints(false)?;
    let mut text = String::new();
    let mut shown = 0;
    for path in &logs {
        let log = sessionlog::read_log(path)?;
        let id = log.header.id.as_str();
        if session.as_deref().is_some_and(|s| !id.starts_with(s)) {
            continue;
        }
        shown += 1;
        let own: Vec<_> = checkpoints
            .iter()
            .filter(|r| r.session.as_deref() == Some(id))
            .cloned()
            .collect();
        let nodes = trace::replay(workdir, log.header.cwd.as_deref(), &log.calls, &own, |record, file| {
            provider.file_at(record, file).map_err(|e| e.to_string())
        });
        out.record(&TraceSessionRecord {
            session: id,
            log: path.display().to_string(),
            cwd: log.header.cwd.as_deref(),
            created_at: log.header.created_at.as_deref(),
            parent_session: log.header.parent_session.as_deref(),
            calls: log.calls.len(),
            checkpoints: own.len(),
            problems: log
                .problems
                .iter()
                .map(|p| Problem {
                    line: p.line,
                    message: &p.message,
                })
                .collect(),
        });
        let human = !out.json;
        text.push_str(&format!(
            "session {id} ({} call(s), {} checkpoint(s)) {}\n",
            log.calls.len(),
            own.len(),
            path.display()
        ));
        for problem in &log.problems {
            text.push_str(&format!("  problem at line {}: {}\n", problem.line, problem.message));
        }
        for node in &nodes {
            let call = &node.call;
            let label = format!(
                "{}.{}",
                call.turn.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
                call.step.map(|s| s.to_string()).unwrap_or_else(|| "?".into())
            );
            let mut files: Vec<TraceFile> = Vec::new();
            for (path, known) in &node.files {
                files.push(match known {
                    Known::Content(content) => TraceFile {
                        path: WirePath::from_repo_path(path),
                        rebuildable: true,
                        bytes: content.as_ref().map(Vec::len),
                        id: content.as_deref().map(|c| provider.content_id(c)).transpose()?,
                        reason: None,
                    },
                    Known::Unknown(why) => TraceFile {
                        path: WirePath::from_repo_path(path),
                        rebuildable: false,
                        bytes: None,
                        id: None,
                        reason: Some(why),
                    },
                });
            }
            if human {
                let mut line = format!(
                    "  {label:<7} {:<12} {:<18} {:<7}",
                    call.call_id.chars().take(12).collect::<String>(),
                    call.name,
                    outcome_text(call.outcome)
                );
                if let Some(path) = &node.path {
                    line.push_str(&format!(" {}", super::output::human_path(path)));
                }
                if let Some(why) = &node.refused {
                    line.push_str(&format!("  [refused: {why}]"));
                }
                for (path, known) in &node.files {
                    match known {
                        Known::Content(_) => line.push_str(&format!("  rebuilds {}", super::output::human_path(path))),
                        Known::Unknown(why) => {
                            line.push_str(&format!("  unknown {} ({why})", super::output::human_path(path)))
                        }
                    }
                }
                text.push_str(&line);
                text.push('\n');
            }
            out.record(&TraceNodeRecord {
                session: id,
                node: format!("trace:{}:{label}", id.chars().take(8).collect::<String>()),
                turn: call.turn,
                step: call.step,
                call_id: &call.call_id,
                tool: &call.name,
                time: call.time.as_deref(),
                outcome: outcome_text(call.outcome),
                path: node.path.as_ref().map(WirePath::from_repo_path),
                refused: node.refused.as_deref(),
                files,
            });
        }
    }
    if shown == 0 {
        text.push_str(&format!(
            "no harness session logs for this workspace under {} (looked for {})\n",
            root.display(),
            root.join(sessionlog::project_key(&workdir.to_string_lossy())).display()
        ));
    }
    out.human(text.trim_end());
    Ok(Exit::Ok)
}
