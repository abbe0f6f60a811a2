//! `ckpt trace ...`: the harness session logs of this workspace, replayed call by call
//! (`provider::trace`), as `trace.session`, `trace.node` and `trace.diff` records and human
//! text. `list` and `diff` are read-only; `restore` writes only through the provider's restore
//! transaction, and only files the trace rebuilds exactly.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::args::TraceAction;
use super::exit::Exit;
use super::output::Output;
use super::wire::{
    LogProblem, NotRestored, TraceDiffFile, TraceDiffRecord, TraceFile, TraceNodeRecord, TraceOutcome,
    TraceRestoreRecord, TraceSessionRecord,
};
pub(super) use crate::provider::trace::sessions::LogSource;
use crate::provider::trace::sessions::{
    find_node, load_session, node_address, parse_node, replay_sessions, session_matches, session_prefix, turn_step,
};
use crate::provider::trace::{self, DiffAgainst, Known, RestorePlan, Side, TraceDiff, TraceNode};
use crate::provider::{diff, CkptError, Confirmation, Provider, SnapshotRequest};
use crate::records::sessionlog;
use crate::records::{Kind, Record, WirePath};
use crate::verbs::RepoPath;

/// Where a warning about a session log goes: stderr, as every other warning.
fn warn_on_stderr(text: &str) {
    sayln!("ckpt: warning: {text}");
}

/// What a trace restore's guard snapshot uses, from the command line and the config.
pub(super) struct GuardSettings {
    pub max_file_size: u64,
    pub watch: bool,
}

pub(super) fn trace(
    provider: &dyn Provider,
    cwd: &Path,
    action: &TraceAction,
    guard: &GuardSettings,
    out: &Output,
) -> Result<Exit, CkptError> {
    match action {
        TraceAction::List {
            session,
            dsh_home,
            session_log,
        } => list(
            provider,
            cwd,
            session.as_deref(),
            LogSource::new(dsh_home, session_log),
            out,
        ),
        TraceAction::Diff {
            node,
            other,
            session,
            dsh_home,
            session_log,
        } => trace_diff(
            provider,
            cwd,
            node,
            other.as_deref(),
            session,
            LogSource::new(dsh_home, session_log),
            out,
        ),
        TraceAction::Restore {
            node,
            yes,
            dry_run,
            dsh_home,
            session_log,
            paths,
            ..
        } => {
            let how = if *dry_run {
                RestoreHow::DryRun
            } else if *yes {
                RestoreHow::Confirmed
            } else {
                RestoreHow::Ask
            };
            let logs = LogSource::new(dsh_home, session_log);
            trace_restore(provider, cwd, node, paths, how, logs, guard, out)
        }
    }
}

fn list(
    provider: &dyn Provider,
    cwd: &Path,
    session: Option<&str>,
    logs: LogSource<'_>,
    out: &Output,
) -> Result<Exit, CkptError> {
    let logs = logs.warning_to(&warn_on_stderr);
    let workdir = provider.workdir();
    let (root, sessions) = replay_sessions(provider, cwd, logs, |id| session.is_none_or(|s| session_matches(id, s)))?;
    let mut text = String::new();
    let shown = sessions.len();
    for replayed in &sessions {
        let (log, own, path) = (&replayed.log, &replayed.checkpoints, &replayed.path);
        let id = log.header.id.as_str();
        let nodes = replayed.nodes(provider);
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
                .map(|p| LogProblem {
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
            if human {
                text.push_str(&format!("  {}\n", node_text(node)));
            }
            out.record(&node_record(provider, id, node)?);
        }
    }
    if shown == 0 && session.is_some() {
        text.push_str(&format!(
            "no harness session of this workspace starts with {:?} (under {})\n",
            session.unwrap_or_default(),
            root.display()
        ));
    } else if shown == 0 {
        text.push_str(&format!(
            "no harness session logs for this workspace under {} (looked for {})\n",
            root.display(),
            root.join(sessionlog::project_key(&workdir.to_string_lossy())).display()
        ));
    }
    out.human(text.trim_end());
    Ok(Exit::Ok)
}

/// The `trace.node` record of one node of session `session`.
fn node_record<'a>(
    provider: &dyn Provider,
    session: &'a str,
    node: &'a TraceNode<'a>,
) -> Result<TraceNodeRecord<'a>, CkptError> {
    let call = node.call;
    let mut files: Vec<TraceFile> = Vec::new();
    for (path, known) in &node.files {
        files.push(match known {
            Known::Content(content) => TraceFile {
                path: WirePath::from_repo_path(path),
                rebuildable: true,
                bytes: content.as_ref().map(Vec::len),
                id: content.as_deref().map(|c| provider.content_id(c)).transpose()?,
                worked_back: node.worked_back.contains(path),
                reason: None,
            },
            Known::Unknown(why) => TraceFile {
                path: WirePath::from_repo_path(path),
                rebuildable: false,
                bytes: None,
                id: None,
                worked_back: false,
                reason: Some(why),
            },
        });
    }
    Ok(TraceNodeRecord {
        session,
        node: node_address(session, call),
        turn: call.turn,
        step: call.step,
        call_id: &call.call_id,
        tool: &call.name,
        time: call.time.as_deref(),
        outcome: TraceOutcome::of(call.outcome),
        path: node.path.as_ref().map(WirePath::from_repo_path),
        refused: node.refused.as_deref(),
        files,
    })
}

/// One node as a line of human text: turn.step, call id, tool, outcome, path, what it rebuilds.
fn node_text(node: &TraceNode<'_>) -> String {
    let call = node.call;
    let mut line = format!(
        "{:<7} {:<12} {:<18} {:<7}",
        turn_step(call),
        call.call_id.chars().take(12).collect::<String>(),
        call.name,
        TraceOutcome::of(call.outcome).as_str()
    );
    if let Some(path) = &node.path {
        line.push_str(&format!(" {}", super::output::human_path(path)));
    }
    if let Some(why) = &node.refused {
        line.push_str(&format!("  [refused: {why}]"));
    }
    for (path, known) in &node.files {
        match known {
            Known::Content(_) if node.worked_back.contains(path) => line.push_str(&format!(
                "  rebuilds {} (worked back from the worktree)",
                super::output::human_path(path)
            )),
            Known::Content(_) => line.push_str(&format!("  rebuilds {}", super::output::human_path(path))),
            Known::Unknown(why) => line.push_str(&format!("  unknown {} ({why})", super::output::human_path(path))),
        }
    }
    line
}

/// `ckpt list --trace`: this workspace's checkpoints and the tool calls of its harness sessions
/// in one time order; the record type (`checkpoint` or `trace.node`) says which is which.
pub(super) fn timeline(
    provider: &dyn Provider,
    cwd: &Path,
    session: Option<&str>,
    all: bool,
    logs: LogSource<'_>,
    out: &Output,
) -> Result<Exit, CkptError> {
    let logs = logs.warning_to(&warn_on_stderr);
    let checkpoints: Vec<Record> = provider
        .checkpoints(all)?
        .into_iter()
        .filter(|r| session.is_none_or(|s| r.session.as_deref() == Some(s)))
        .collect();
    let (_, sessions) = replay_sessions(provider, cwd, logs, |id| session.is_none_or(|s| id == s))?;
    let replayed: Vec<(&str, Vec<TraceNode<'_>>)> = sessions
        .iter()
        .map(|s| (s.log.header.id.as_str(), s.nodes(provider)))
        .collect();
    enum Entry<'a> {
        Checkpoint(&'a Record),
        Node(&'a str, &'a TraceNode<'a>),
    }
    let mut entries: Vec<(i64, Entry<'_>)> = checkpoints
        .iter()
        .map(|r| {
            let at = chrono::DateTime::parse_from_rfc3339(&r.time).map_or(i64::MAX, |t| t.timestamp_millis());
            (at, Entry::Checkpoint(r))
        })
        .collect();
    for (id, nodes) in &replayed {
        for node in nodes {
            entries.push((trace::call_millis(node.call).unwrap_or(i64::MAX), Entry::Node(id, node)));
        }
    }
    // Stable: calls of one session without times stay in log order.
    entries.sort_by_key(|(at, _)| *at);
    let mut text = format!("{:<10}  {:<9}  {}\n", "SOURCE", "ID", "WHAT");
    for (_, entry) in &entries {
        match entry {
            Entry::Checkpoint(record) => {
                out.record(&super::wire::CheckpointRecord::listed(record));
                text.push_str(&format!(
                    "checkpoint  {:<9}  {}\n",
                    record.short(),
                    super::output::list_line(record)
                ));
            }
            Entry::Node(id, node) => {
                out.record(&node_record(provider, id, node)?);
                text.push_str(&format!("trace       {:<9}  {}\n", session_prefix(id), node_text(node)));
            }
        }
    }
    if entries.is_empty() {
        text = "no checkpoints and no harness session logs for this workspace yet".to_owned();
    }
    if !out.json {
        out.paging.show_if_long(text.trim_end());
    }
    Ok(Exit::Ok)
}

pub(super) fn trace_diff(
    provider: &dyn Provider,
    cwd: &Path,
    node: &str,
    other: Option<&str>,
    session: &Option<String>,
    logs: LogSource<'_>,
    out: &Output,
) -> Result<Exit, CkptError> {
    let logs = logs.warning_to(&warn_on_stderr);
    let against = match other {
        None => DiffAgainst::OwnChange,
        Some(text) if text.starts_with("trace:") => DiffAgainst::Node(text),
        Some(text) => DiffAgainst::Checkpoint(Box::new(super::checkpoints::resolve(
            provider,
            &super::args::TargetArgs {
                target: text.to_owned(),
                session: session.clone(),
            },
        )?)),
    };
    let TraceDiff {
        from: from_label,
        to: to_label,
        pairs,
    } = TraceDiff::of(provider, cwd, node, against, logs)?;
    let mut files = Vec::new();
    let mut text = format!("trace diff {from_label} -> {to_label}\n");
    for (path, before, after) in pairs {
        let shown = super::output::human_path(&path);
        let (status, reason, counts, binary) = match (&before, &after) {
            (Side::Unknown(why), _) | (_, Side::Unknown(why)) => ("unknown", Some(why.clone()), (0, 0), false),
            (Side::Known(old), Side::Known(new)) => {
                let binary = old.as_deref().is_some_and(diff::is_binary) || new.as_deref().is_some_and(diff::is_binary);
                let old_bytes = old.as_deref().unwrap_or_default();
                let new_bytes = new.as_deref().unwrap_or_default();
                let counts = if binary {
                    (0, 0)
                } else {
                    diff::line_counts(old_bytes, new_bytes)
                };
                let status = match (old, new) {
                    (None, None) => "same",
                    (None, Some(_)) => "added",
                    (Some(_), None) => "deleted",
                    (Some(a), Some(b)) if a == b => "same",
                    _ => "modified",
                };
                if status != "same" {
                    if binary {
                        text.push_str(&format!("Binary file {shown} differs\n"));
                    } else {
                        text.push_str(&diff::unified(&shown, old_bytes, new_bytes));
                    }
                }
                (status, None, counts, binary)
            }
        };
        let rebuildable = !matches!(after, Side::Unknown(_));
        if let Some(why) = &reason {
            if rebuildable {
                text.push_str(&format!("? {shown}: no diff, the older side is unknown ({why})\n"));
            } else {
                text.push_str(&format!("? {shown}: the trace cannot rebuild it ({why})\n"));
            }
        }
        files.push(TraceDiffFile {
            path: WirePath::from_repo_path(&path),
            status,
            added: counts.0,
            removed: counts.1,
            binary,
            reason,
            rebuildable,
        });
    }
    if files.is_empty() {
        text.push_str("no file changes the trace knows of\n");
    }
    out.record(&TraceDiffRecord {
        from: from_label,
        to: to_label,
        files,
    });
    out.human(text.trim_end());
    Ok(Exit::Ok)
}

/// The files a trace restore leaves, a line each, for people.
fn not_restored_lines(not_restored: &[(RepoPath, String)]) -> String {
    not_restored
        .iter()
        .map(|(p, why)| format!("  not restored: {} ({why})\n", super::output::human_path(p)))
        .collect()
}

/// The files a trace restore leaves, as the record lists them.
fn not_restored_records(not_restored: &[(RepoPath, String)]) -> Vec<NotRestored> {
    not_restored
        .iter()
        .map(|(p, why)| NotRestored {
            path: WirePath::from_repo_path(p),
            reason: why.clone(),
        })
        .collect()
}

/// How a trace restore goes ahead: not at all (`--dry-run`), confirmed (`--yes`), or asking.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RestoreHow {
    DryRun,
    Confirmed,
    Ask,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn trace_restore(
    provider: &dyn Provider,
    cwd: &Path,
    node: &str,
    paths: &[PathBuf],
    how: RestoreHow,
    logs: LogSource<'_>,
    guard: &GuardSettings,
    out: &Output,
) -> Result<Exit, CkptError> {
    let logs = logs.warning_to(&warn_on_stderr);
    let (prefix, name) = parse_node(node)?;
    let wanted = paths
        .iter()
        .map(|arg| crate::provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let replayed = load_session(provider, cwd, prefix, logs)?;
    let nodes = replayed.nodes(provider);
    let at = find_node(&nodes, name, node)?;
    let address = node_address(&replayed.log.header.id, nodes[at].call);
    let mut plan = RestorePlan::at(&nodes, at, &wanted);
    if plan.rebuilt.is_empty() {
        return Err(CkptError::Refused(format!(
            "{address}: the trace rebuilds no file exactly there, so nothing can be restored; nothing was changed\n{}",
            not_restored_lines(&plan.not_restored).trim_end()
        )));
    }
    if how == RestoreHow::DryRun {
        plan.check(provider, guard.max_file_size)?;
        let not_restored_text = not_restored_lines(&plan.not_restored);
        if plan.rebuilt.is_empty() {
            return Err(CkptError::Refused(format!(
                "{address}: none of the files the trace rebuilds could be written safely now (dry run; nothing was changed)\n{}",
                not_restored_text.trim_end()
            )));
        }
        out.record(&TraceRestoreRecord {
            node: &address,
            checkpoint: None,
            rebuilt: plan.rebuilt.iter().map(|(p, _)| WirePath::from_repo_path(p)).collect(),
            not_restored: not_restored_records(&plan.not_restored),
        });
        let would: String = plan
            .rebuilt
            .iter()
            .map(|(p, _)| format!("  put back: {}\n", super::output::human_path(p)))
            .collect();
        out.human(format!("{address} (dry run; nothing was changed):\n{would}{not_restored_text}").trim_end());
        return Ok(Exit::partial_if(!plan.not_restored.is_empty()));
    }
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let yes = how == RestoreHow::Confirmed;
    if !yes && !interactive {
        return Err(CkptError::Refused(format!(
            "trace restore of {address} needs confirmation: pass --yes (it would put back {} file(s) as the trace rebuilds them); nothing was changed",
            plan.rebuilt.len()
        )));
    }
    let guard_request = SnapshotRequest {
        session: None,
        turn: None,
        step: None,
        trigger: Some("restore".into()),
        kind: Kind::Guard,
        max_file_size: guard.max_file_size,
        watch: guard.watch,
        opens_turn: false,
    };
    let record = plan.materialize(provider, &address, &guard_request)?;
    if plan.rebuilt.is_empty() {
        return Err(CkptError::Refused(format!(
            "{address}: none of the files the trace rebuilds can be written safely; nothing was changed\n{}",
            not_restored_lines(&plan.not_restored).trim_end()
        )));
    }
    let mut ask = super::restore::ask_on_terminal(&record);
    let confirmation = if yes {
        Confirmation::Given
    } else {
        Confirmation::Ask(&mut ask)
    };
    let report = plan.restore(provider, &record, &address, &guard_request, confirmation)?;
    out.record(&TraceRestoreRecord {
        node: &address,
        checkpoint: Some(&record.id),
        rebuilt: plan.rebuilt.iter().map(|(p, _)| WirePath::from_repo_path(p)).collect(),
        not_restored: not_restored_records(&plan.not_restored),
    });
    out.record(&super::wire::RestoreRecord::new(&report));
    out.human(
        format!(
            "{address}, as the trace rebuilds it, is checkpoint {}\n{}{}",
            record.short(),
            not_restored_lines(&plan.not_restored),
            super::output::restore_text(&report)
        )
        .trim_end(),
    );
    Ok(Exit::partial_if(
        !report.failed.is_empty() || !plan.not_restored.is_empty(),
    ))
}
