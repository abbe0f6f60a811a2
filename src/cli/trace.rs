//! `ckpt trace ...`: the harness session logs of this workspace, replayed call by call
//! (`provider::trace`), as `trace.session`, `trace.node` and `trace.diff` records and human
//! text. `list` and `diff` are read-only; `restore` writes only through the provider's restore
//! transaction, and only files the trace rebuilds exactly.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::args::TraceAction;
use super::exit::Exit;
use super::output::Output;
use super::wire::{
    LogProblem, NotRestored, TraceDiffFile, TraceDiffRecord, TraceFile, TraceNodeRecord, TraceOutcome,
    TraceRestoreRecord, TraceSessionRecord,
};
use crate::provider::trace::{self, Known, TraceNode};
use crate::provider::{diff, CkptError, Confirmation, Provider, Selection, SnapshotRequest};
use crate::records::sessionlog::{self, SessionLog};
use crate::records::{Kind, Record, WirePath};
use crate::verbs::RepoPath;

/// How much all session logs of a workspace may hold, decoded, before `ckpt trace` refuses
/// rather than hold them all in memory.
const MAX_LOGS_BYTES: u64 = 1024 * 1024 * 1024;

/// What a trace restore's guard snapshot uses, from the command line and the config.
pub(super) struct GuardSettings {
    pub max_file_size: u64,
    pub watch: bool,
}

/// Where the session logs come from: the harness's home, and optionally one session's log read
/// from a file of the caller's instead (the harness adapter passes the live log the host gives
/// it, which the file under the home may lag).
#[derive(Clone, Copy, Default)]
pub(super) struct LogSource<'a> {
    pub dsh_home: Option<&'a Path>,
    pub session_log: Option<&'a Path>,
}

impl<'a> LogSource<'a> {
    pub fn new(dsh_home: &'a Option<PathBuf>, session_log: &'a Option<PathBuf>) -> Self {
        LogSource {
            dsh_home: dsh_home.as_deref(),
            session_log: session_log.as_deref(),
        }
    }
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

/// The directories above `dir`, and above the path it resolves to when that differs, nearest
/// first.
fn ancestors_of(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let resolved = std::fs::canonicalize(dir).ok().filter(|r| r != dir);
    for start in std::iter::once(dir.to_path_buf()).chain(resolved) {
        for above in start.ancestors().skip(1) {
            if !out.iter().any(|seen| seen == above) {
                out.push(above.to_path_buf());
            }
        }
    }
    out
}

/// The harness session logs of this workspace (for its root, the path it resolves to, and
/// `cwd`), each once.
fn workspace_logs(
    provider: &dyn Provider,
    cwd: &Path,
    dsh_home: Option<&Path>,
) -> Result<(PathBuf, Vec<PathBuf>), CkptError> {
    let root = sessionlog::sessions_root(dsh_home)
        .ok_or_else(|| CkptError::InvalidInput("no harness home: set DSH_HOME or HOME, or pass --dsh-home".into()))?;
    let mut logs = Vec::new();
    let resolved = std::fs::canonicalize(provider.workdir()).ok();
    for dir in [Some(provider.workdir()), resolved.as_deref(), Some(cwd)]
        .into_iter()
        .flatten()
    {
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
    Ok((root, logs))
}

/// A session id as node addresses name it: without the harness's `session-` prefix.
fn session_short(id: &str) -> &str {
    id.strip_prefix("session-").unwrap_or(id)
}

/// `text` with every character a shell, a terminal or a node address could read as more than
/// itself (anything but ASCII letters, digits, `.`, `_` and `-`) replaced by `_`: the log's
/// ids are anyone's text, and a node's name is pasted into shells.
fn safe_name(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The session part of its nodes' addresses: the first 8 characters of its id without
/// `session-`, made safe.
fn session_prefix(session: &str) -> String {
    safe_name(&session_short(session).chars().take(8).collect::<String>())
}

/// Whether `prefix`, as a user gives it or as a node address carries it, names `session`.
fn session_matches(session: &str, prefix: &str) -> bool {
    session.starts_with(prefix)
        || session_short(session).starts_with(prefix)
        || safe_name(session_short(session)).starts_with(prefix)
}

/// A node's address: `trace:<session prefix>:<turn>.<step>`, or, for a call the log gives no
/// turn and step (an unreadable line, a torn tail), `trace:<session prefix>:<its call id>`,
/// made safe.
fn node_address(session: &str, call: &sessionlog::ToolCall) -> String {
    format!("trace:{}:{}", session_prefix(session), node_name(call))
}

/// The node part of a call's address.
fn node_name(call: &sessionlog::ToolCall) -> String {
    match (call.turn, call.step, call.call_id.is_empty()) {
        (Some(turn), Some(step), _) => format!("{turn}.{step}"),
        (_, _, false) => safe_name(&call.call_id),
        (_, _, true) => turn_step(call),
    }
}

fn turn_step(call: &sessionlog::ToolCall) -> String {
    format!(
        "{}.{}",
        call.turn.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
        call.step.map(|s| s.to_string()).unwrap_or_else(|| "?".into())
    )
}

fn list(
    provider: &dyn Provider,
    cwd: &Path,
    session: Option<&str>,
    logs: LogSource<'_>,
    out: &Output,
) -> Result<Exit, CkptError> {
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

/// One session's log, replayed against its own checkpoints.
struct Replayed {
    /// Where the log was read from.
    path: PathBuf,
    log: std::sync::Arc<SessionLog>,
    checkpoints: Vec<Record>,
    /// What the other sessions of the workspace may have changed meanwhile.
    foreign: Vec<trace::ForeignChange>,
}

impl Replayed {
    /// The session's nodes, replayed forwards from its checkpoints and then worked back from
    /// the worktree where that is exact.
    fn nodes(&self, provider: &dyn Provider) -> Vec<TraceNode<'_>> {
        let mut nodes = trace::replay_among(
            provider.workdir(),
            self.log.header.cwd.as_deref(),
            &self.log.calls,
            &self.checkpoints,
            &self.foreign,
            |record, file| provider.file_at(record, file).map_err(|e| e.to_string()),
        );
        let now_ms = chrono::Utc::now().timestamp_millis();
        trace::work_backwards(&mut nodes, &self.foreign, now_ms, |path| {
            file_now(provider.workdir(), path)
        });
        // A path the log names through what is a symlink in the worktree now is another name of
        // some file: which one the call changed cannot be told, and a trace restore refuses it,
        // so the list must not say it rebuilds such a file.
        let mut linked: BTreeMap<RepoPath, Option<RepoPath>> = BTreeMap::new();
        for node in &mut nodes {
            for (path, known) in node.files.iter_mut() {
                let link = linked
                    .entry(path.clone())
                    .or_insert_with(|| crate::verbs::symlink_on_path(provider.workdir(), path));
                if let Some(link) = link {
                    *known = Known::Unknown(format!(
                        "the log names it through the symlink {}: which file the call changed cannot be told",
                        link.display()
                    ));
                    node.worked_back.remove(path);
                }
            }
        }
        nodes
    }
}

/// The largest worktree file the trace works back from.
const MAX_WORKED_BACK_BYTES: u64 = 64 * 1024 * 1024;

/// The worktree file at `path` now, for working the trace back from it (`None`: unreadable).
fn file_now(workdir: &Path, path: &RepoPath) -> Option<trace::FileNow> {
    let millis = |(secs, nanos): (i64, u32)| secs.saturating_mul(1000).saturating_add(i64::from(nanos / 1_000_000));
    match crate::verbs::read_settled_file(workdir, path, MAX_WORKED_BACK_BYTES) {
        Ok(Some((content, stat, links))) => Some(trace::FileNow {
            content: Some(content),
            links,
            // A modification time set into the future counts too.
            changed_at: millis(stat.ctime).max(millis(stat.mtime)),
        }),
        Ok(None) | Err(_) => None,
    }
}

/// True if the log's header says its session ran in this workspace (or below it).
fn ran_inside(provider: &dyn Provider, log: &SessionLog) -> bool {
    log.header
        .cwd
        .as_deref()
        .is_some_and(|c| Path::new(c).starts_with(provider.workdir()))
}

/// A session's log from a file of the caller's (`--session-log`): it must say which session it
/// is and that the session ran in this workspace.
/// What says a log file is the one read before: a file rewritten, replaced or grown has another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl LogIdentity {
    fn of(path: &Path) -> Option<LogIdentity> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(LogIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The session logs this process read, by path, with the identity each file had before it was
/// read: the web view asks for the trace every 10 s, and a log that has not changed since is not
/// read again (a small zstd bomb would otherwise cost seconds and a gigabyte on every request).
type ReadLogs = std::collections::HashMap<PathBuf, (LogIdentity, std::sync::Arc<SessionLog>)>;
static READ_LOGS: std::sync::Mutex<Option<ReadLogs>> = std::sync::Mutex::new(None);

/// A session log read (or the copy read before, if its file has not changed since), with a
/// warning on stderr when it was cut at the limit of what is read.
fn read_session_log(path: &Path) -> Result<std::sync::Arc<SessionLog>, CkptError> {
    let identity = LogIdentity::of(path);
    if let Some(identity) = identity {
        let held = READ_LOGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((seen, log)) = held.as_ref().and_then(|logs| logs.get(path)) {
            if *seen == identity {
                return Ok(std::sync::Arc::clone(log));
            }
        }
    }
    let log = std::sync::Arc::new(sessionlog::read_log(path)?);
    if let Some(identity) = identity {
        let mut held = READ_LOGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.get_or_insert_with(Default::default)
            .insert(path.to_path_buf(), (identity, std::sync::Arc::clone(&log)));
    }
    if log.cut {
        sayln!(
            "ckpt: warning: {}: the log holds more than {} MiB; ckpt trace read that much of it, and knows nothing of the calls after",
            path.display(),
            sessionlog::MAX_LOG_BYTES / (1024 * 1024)
        );
    }
    Ok(log)
}

fn given_log(provider: &dyn Provider, file: &Path) -> Result<(PathBuf, std::sync::Arc<SessionLog>), CkptError> {
    let log = read_session_log(file)?;
    let named = log.problems.iter().all(|p| p.message != "no session header line");
    if !named {
        return Err(CkptError::InvalidInput(format!(
            "{}: a session log given with --session-log needs its header line (the session's id and cwd)",
            file.display()
        )));
    }
    if !ran_inside(provider, &log) {
        return Err(CkptError::InvalidInput(format!(
            "{}: session {} did not run in this workspace ({}), by its header's cwd ({})",
            file.display(),
            log.header.id,
            provider.workdir().display(),
            log.header.cwd.as_deref().unwrap_or("none")
        )));
    }
    Ok((file.to_path_buf(), log))
}

/// Every session log of this workspace read, and the ones `keep` accepts replayed against their
/// own checkpoints and against what every other session may have changed (a call a fork's log
/// copied from its parent, known by its call id, is the session's own).
fn replay_sessions(
    provider: &dyn Provider,
    cwd: &Path,
    logs: LogSource<'_>,
    keep: impl Fn(&str) -> bool,
) -> Result<(PathBuf, Vec<Replayed>), CkptError> {
    let (root, mut paths) = workspace_logs(provider, cwd, logs.dsh_home)?;
    // Sessions started in a directory below the workspace wrote its files too.
    let below: Vec<PathBuf> = provider
        .workdir()
        .to_str()
        .map(|text| sessionlog::logs_below(&root, text))
        .unwrap_or_default();
    let first_below = paths.len();
    let below: Vec<PathBuf> = below.into_iter().filter(|p| !paths.contains(p)).collect();
    paths.extend(below);
    // Sessions started in a directory above the workspace may have changed its files too; they
    // count as other sessions, never as the workspace's own.
    let first_above = paths.len();
    let above: Vec<PathBuf> = ancestors_of(provider.workdir())
        .iter()
        .filter_map(|dir| dir.to_str())
        .flat_map(|text| sessionlog::session_logs(&root, text))
        .collect();
    let above: Vec<PathBuf> = above.into_iter().filter(|p| !paths.contains(p)).collect();
    paths.extend(above);
    let mut logs: Vec<(PathBuf, std::sync::Arc<SessionLog>)> = match logs.session_log {
        Some(file) => vec![given_log(provider, file)?],
        None => Vec::new(),
    };
    let given: Option<String> = logs.first().map(|(_, log)| log.header.id.clone());
    let mut total: u64 = logs.first().map_or(0, |(_, log)| log.bytes);
    // The logs only other sessions' changes are taken from.
    let mut foreign_only: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    for (at, path) in paths.into_iter().enumerate() {
        let log = read_session_log(&path)?;
        if at >= first_above {
            foreign_only.insert(path.clone());
        } else if at >= first_below && !ran_inside(provider, &log) {
            continue;
        }
        // The caller's copy of a session stands in for that session's file.
        if given.as_deref() == Some(log.header.id.as_str()) {
            continue;
        }
        total += log.bytes;
        if total > MAX_LOGS_BYTES {
            return Err(CkptError::Refused(format!(
                "the harness session logs of this workspace hold more than {} MiB; ckpt trace reads at most that much (under {})",
                MAX_LOGS_BYTES / (1024 * 1024),
                root.display()
            )));
        }
        logs.push((path, log));
    }
    let checkpoints = provider.checkpoints(false)?;
    let mut foreign_of: Vec<Option<Vec<trace::ForeignChange>>> = Vec::with_capacity(logs.len());
    for (at, (path, log)) in logs.iter().enumerate() {
        if !keep(&log.header.id) || foreign_only.contains(path) {
            foreign_of.push(None);
            continue;
        }
        // A fork's log repeats its parent's calls from its seed: the same id, tool and arguments.
        let seeded = |of: &SessionLog, call: &sessionlog::ToolCall| of.header.seed_length.is_none_or(|n| call.seq < n);
        let own_calls: std::collections::HashMap<&str, &sessionlog::ToolCall> =
            log.calls.iter().map(|c| (c.call_id.as_str(), c)).collect();
        let mut foreign = Vec::new();
        for (other_at, (_, other)) in logs.iter().enumerate() {
            if other_at == at {
                continue;
            }
            // Only between a fork and its parent is a shared call the same call, and only one the
            // fork copied (within its seed, where the header says how long that is).
            let other_is_fork = other.header.parent_session.as_deref() == Some(log.header.id.as_str());
            let log_is_fork = log.header.parent_session.as_deref() == Some(other.header.id.as_str());
            let same_call = |c: &sessionlog::ToolCall| {
                own_calls.get(c.call_id.as_str()).is_some_and(|own| {
                    own.name == c.name
                        && own.arguments == c.arguments
                        && (!other_is_fork || seeded(other, c))
                        && (!log_is_fork || seeded(log, own))
                })
            };
            let related = other_is_fork || log_is_fork;
            foreign.extend(trace::foreign_changes(
                provider.workdir(),
                &other.header.id,
                other.header.cwd.as_deref(),
                other.calls.iter().filter(|c| !(related && same_call(c))),
            ));
        }
        foreign_of.push(Some(foreign));
    }
    let mut kept = Vec::new();
    for ((path, log), foreign) in logs.into_iter().zip(foreign_of) {
        let Some(foreign) = foreign else { continue };
        let checkpoints = checkpoints
            .iter()
            .filter(|r| r.session.as_deref() == Some(log.header.id.as_str()))
            .cloned()
            .collect();
        kept.push(Replayed {
            path,
            log,
            checkpoints,
            foreign,
        });
    }
    Ok((root, kept))
}

/// A parsed node address: the session prefix and the turn.step or call id.
fn parse_node(text: &str) -> Result<(&str, &str), CkptError> {
    let bad = || {
        CkptError::InvalidInput(format!(
            "bad trace node {text:?}: expected trace:<session prefix>:<turn>.<step> or trace:<session prefix>:<call id> (ckpt trace list names them)"
        ))
    };
    let rest = text.strip_prefix("trace:").ok_or_else(bad)?;
    let (session, node) = rest.split_once(':').ok_or_else(bad)?;
    if session.is_empty() || node.is_empty() {
        return Err(bad());
    }
    Ok((session, node))
}

/// The session a node address names (by a prefix of its id, with or without `session-`).
fn load_session(provider: &dyn Provider, cwd: &Path, prefix: &str, logs: LogSource<'_>) -> Result<Replayed, CkptError> {
    let (root, mut found) = replay_sessions(provider, cwd, logs, |id| session_matches(id, prefix))?;
    // A session named whole wins over others it is a prefix of.
    if let Some(exact) = found.iter().position(|s| {
        let id = &s.log.header.id;
        id == prefix || session_short(id) == prefix || safe_name(session_short(id)) == prefix
    }) {
        let session = found.swap_remove(exact);
        found = vec![session];
    }
    match found.len() {
        0 => Err(CkptError::NotFound(format!(
            "no harness session of this workspace starts with {prefix:?} (under {})",
            root.display()
        ))),
        1 => Ok(found.remove(0)),
        _ => Err(CkptError::Ambiguous {
            target: format!("trace:{prefix}"),
            candidates: found.iter().map(|s| s.log.header.id.clone()).collect(),
        }),
    }
}

/// The index of the node `name` (turn.step or call id) among `nodes`.
fn find_node(nodes: &[TraceNode<'_>], name: &str, address: &str) -> Result<usize, CkptError> {
    let matches: Vec<usize> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.call.call_id == name || turn_step(n.call) == name || node_name(n.call) == name)
        .map(|(at, _)| at)
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(CkptError::NotFound(format!(
            "no tool call {name:?} in that session ({address}); ckpt trace list names its nodes"
        ))),
        _ => Err(CkptError::Ambiguous {
            target: address.to_owned(),
            candidates: matches.iter().map(|&at| nodes[at].call.call_id.clone()).collect(),
        }),
    }
}

/// What the trace knows of every file it has seen, after `nodes[..=upto]`.
fn state_after(nodes: &[TraceNode<'_>], upto: usize) -> BTreeMap<RepoPath, Known> {
    let mut state = BTreeMap::new();
    for node in &nodes[..=upto] {
        for (path, known) in &node.files {
            state.insert(path.clone(), known.clone());
        }
    }
    state
}

/// One side of a trace diff, for one file.
enum Side {
    Known(Option<Vec<u8>>),
    Unknown(String),
}

impl Side {
    fn of(known: Option<&Known>, absent_means: &str) -> Side {
        match known {
            Some(Known::Content(content)) => Side::Known(content.clone()),
            Some(Known::Unknown(why)) => Side::Unknown(why.clone()),
            None => Side::Unknown(absent_means.to_owned()),
        }
    }
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
    let (prefix, name) = parse_node(node)?;
    let replayed = load_session(provider, cwd, prefix, logs)?;
    let nodes = replayed.nodes(provider);
    let at = find_node(&nodes, name, node)?;
    let from_label = node_address(&replayed.log.header.id, nodes[at].call);
    // (path, before, after): "before" is the older side.
    let mut pairs: Vec<(RepoPath, Side, Side)> = Vec::new();
    let to_label;
    match other {
        None => {
            // What this call changed: the state before it against the state after it.
            let before = if at == 0 {
                BTreeMap::new()
            } else {
                state_after(&nodes, at - 1)
            };
            for (path, after) in &nodes[at].files {
                // The base the replay used (an earlier node, or a checkpoint) comes first.
                let was = nodes[at].before.get(path).or_else(|| before.get(path));
                pairs.push((
                    path.clone(),
                    Side::of(was, "not known to the trace before this call"),
                    Side::of(Some(after), ""),
                ));
            }
            to_label = format!("{from_label} (its own change)");
        }
        Some(text) if text.starts_with("trace:") => {
            let (other_prefix, other_name) = parse_node(text)?;
            let other_replayed;
            let (other_nodes, other_session) = if other_prefix == prefix {
                (nodes.clone(), &replayed)
            } else {
                other_replayed = load_session(provider, cwd, other_prefix, logs)?;
                (other_replayed.nodes(provider), &other_replayed)
            };
            let other_at = find_node(&other_nodes, other_name, text)?;
            let a = state_after(&nodes, at);
            let b = state_after(&other_nodes, other_at);
            let paths: std::collections::BTreeSet<&RepoPath> = a.keys().chain(b.keys()).collect();
            for path in paths {
                pairs.push((
                    path.clone(),
                    Side::of(a.get(path), "not known to the trace at this node"),
                    Side::of(b.get(path), "not known to the trace at that node"),
                ));
            }
            to_label = node_address(&other_session.log.header.id, other_nodes[other_at].call);
        }
        Some(text) => {
            let record = super::checkpoints::resolve(
                provider,
                &super::args::TargetArgs {
                    target: text.to_owned(),
                    session: session.clone(),
                },
            )?;
            for (path, known) in state_after(&nodes, at) {
                let held = provider.file_at(&record, &path)?;
                pairs.push((path, Side::of(Some(&known), ""), Side::Known(held)));
            }
            to_label = format!("checkpoint {}", record.short());
        }
    }
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
    let (prefix, name) = parse_node(node)?;
    let wanted = paths
        .iter()
        .map(|arg| crate::provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let replayed = load_session(provider, cwd, prefix, logs)?;
    let nodes = replayed.nodes(provider);
    let at = find_node(&nodes, name, node)?;
    let address = node_address(&replayed.log.header.id, nodes[at].call);
    let mut rebuilt: Vec<(RepoPath, Vec<u8>)> = Vec::new();
    let mut not_restored: Vec<(RepoPath, String)> = Vec::new();
    for (path, known) in state_after(&nodes, at) {
        if !wanted.is_empty() && !wanted.iter().any(|w| path == *w || path.is_within(w)) {
            continue;
        }
        match known {
            Known::Content(Some(bytes)) => rebuilt.push((path, bytes)),
            Known::Content(None) => {
                not_restored.push((path, "absent at that point; a trace restore never deletes".into()))
            }
            Known::Unknown(why) => not_restored.push((path, why)),
        }
    }
    // A file the trace knows below another it knows as a file (`d`, then `d/x`): one of the two
    // calls cannot have done what its arguments say, so neither is written.
    let files_known: Vec<RepoPath> = rebuilt.iter().map(|(p, _)| p.clone()).collect();
    let clashing = |path: &RepoPath| {
        files_known
            .iter()
            .any(|other| other != path && (path.is_within(other) || other.is_within(path)))
    };
    let (clash, fine): (Vec<_>, Vec<_>) = std::mem::take(&mut rebuilt).into_iter().partition(|(p, _)| clashing(p));
    rebuilt = fine;
    for (path, _) in clash {
        not_restored.push((
            path,
            "the trace knows a file both at this path and above or below it; neither is written".into(),
        ));
    }
    for path in &wanted {
        if !rebuilt.iter().any(|(p, _)| p == path || p.is_within(path))
            && !not_restored.iter().any(|(p, _)| p == path || p.is_within(path))
        {
            not_restored.push((path.clone(), "the trace knows nothing of it at that point".into()));
        }
    }
    let not_restored_text = not_restored_lines(&not_restored);
    if rebuilt.is_empty() {
        return Err(CkptError::Refused(format!(
            "{address}: the trace rebuilds no file exactly there, so nothing can be restored; nothing was changed\n{}",
            not_restored_text.trim_end()
        )));
    }
    if how == RestoreHow::DryRun {
        // The same checks the restore makes, on a listing of the worktree that stores nothing.
        let named: Vec<RepoPath> = state_after(&nodes, at).into_keys().collect();
        let paths: Vec<RepoPath> = rebuilt.iter().map(|(p, _)| p.clone()).collect();
        let refused = provider.materialize_refusals(guard.max_file_size, &paths, &named)?;
        rebuilt.retain(|(path, _)| !refused.iter().any(|(p, _)| p == path));
        not_restored.extend(refused);
        let not_restored_text = not_restored_lines(&not_restored);
        if rebuilt.is_empty() {
            return Err(CkptError::Refused(format!(
                "{address}: none of the files the trace rebuilds could be written safely now (dry run; nothing was changed)\n{}",
                not_restored_text.trim_end()
            )));
        }
        out.record(&TraceRestoreRecord {
            node: &address,
            checkpoint: None,
            rebuilt: rebuilt.iter().map(|(p, _)| WirePath::from_repo_path(p)).collect(),
            not_restored: not_restored_records(&not_restored),
        });
        let would: String = rebuilt
            .iter()
            .map(|(p, _)| format!("  put back: {}\n", super::output::human_path(p)))
            .collect();
        out.human(format!("{address} (dry run; nothing was changed):\n{would}{not_restored_text}").trim_end());
        return Ok(Exit::partial_if(!not_restored.is_empty()));
    }
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let yes = how == RestoreHow::Confirmed;
    if !yes && !interactive {
        return Err(CkptError::Refused(format!(
            "trace restore of {address} needs confirmation: pass --yes (it would put back {} file(s) as the trace rebuilds them); nothing was changed",
            rebuilt.len()
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
    let materialized_request = SnapshotRequest {
        trigger: Some(address.clone()),
        kind: Kind::Manual,
        ..guard_request.clone()
    };
    let named: Vec<RepoPath> = state_after(&nodes, at).into_keys().collect();
    let made = provider.materialize(&guard_request, &materialized_request, &rebuilt, &named)?;
    let record = made.checkpoint;
    rebuilt.retain(|(path, _)| !made.refused.iter().any(|(refused, _)| refused == path));
    not_restored.extend(made.refused);
    let not_restored_text = not_restored_lines(&not_restored);
    if rebuilt.is_empty() {
        return Err(CkptError::Refused(format!(
            "{address}: none of the files the trace rebuilds can be written safely; nothing was changed\n{}",
            not_restored_text.trim_end()
        )));
    }
    let selection = Selection {
        paths: rebuilt.iter().map(|(p, _)| p.clone()).collect(),
        exact: false,
    };
    let mut ask = super::restore::ask_on_terminal(&record);
    let confirmation = if yes {
        Confirmation::Given
    } else {
        Confirmation::Ask(&mut ask)
    };
    let report = match provider.restore(&record, &selection, &guard_request, confirmation) {
        Ok(report) => report,
        Err(CkptError::Refused(why)) => {
            // Declined, or refused before anything was written: the checkpoint of the rebuilt
            // state goes too, so nothing is left of it. (After any other error it stays: an
            // interrupted restore's journal may name it, for `doctor --fix` to complete.)
            if record.trigger.as_deref() == Some(address.as_str()) && record.kind == Kind::Manual {
                provider.remove(std::slice::from_ref(&record.id))?;
            }
            return Err(CkptError::Refused(why));
        }
        Err(error) => return Err(error),
    };
    // What the restore could not write is not restored, whatever the trace rebuilt.
    for (path, why) in &report.failed {
        if let Some(at) = rebuilt.iter().position(|(p, _)| p == path) {
            rebuilt.remove(at);
            not_restored.push((path.clone(), why.clone()));
        }
    }
    let not_restored_text = not_restored_lines(&not_restored);
    out.record(&TraceRestoreRecord {
        node: &address,
        checkpoint: Some(&record.id),
        rebuilt: rebuilt.iter().map(|(p, _)| WirePath::from_repo_path(p)).collect(),
        not_restored: not_restored_records(&not_restored),
    });
    out.record(&super::wire::RestoreRecord::new(&report));
    out.human(
        format!(
            "{address}, as the trace rebuilds it, is checkpoint {}\n{}{}",
            record.short(),
            not_restored_text,
            super::output::restore_text(&report)
        )
        .trim_end(),
    );
    Ok(Exit::partial_if(!report.failed.is_empty() || !not_restored.is_empty()))
}
