//! The harness sessions of a workspace: finding their logs (for the workspace, the path it
//! resolves to, directories below it and above it), reading them once per change of the file,
//! telling a fork's copied calls from its own, and replaying each against its own checkpoints
//! and what every other session may have changed; plus the addresses that name their nodes and
//! what a trace restore of a node can put back. Reads logs, checkpoints and the worktree;
//! writes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Known, TraceNode};
use crate::provider::{CkptError, Provider};
use crate::records::sessionlog::{self, SessionLog};
use crate::records::Record;
use crate::verbs::RepoPath;

/// How much all session logs of a workspace may hold, decoded, before `ckpt trace` refuses
/// rather than hold them all in memory.
const MAX_LOGS_BYTES: u64 = 1024 * 1024 * 1024;

/// Where the session logs come from: the harness's home, and optionally one session's log read
/// from a file of the caller's instead (the harness adapter passes the live log the host gives
/// it, which the file under the home may lag).
#[derive(Clone, Copy, Default)]
pub struct LogSource<'a> {
    pub dsh_home: Option<&'a Path>,
    pub session_log: Option<&'a Path>,
    /// Where a warning about a log goes (one cut at the limit of what is read); none: dropped.
    pub warn: Option<&'a dyn Fn(&str)>,
}

impl<'a> LogSource<'a> {
    pub fn new(dsh_home: &'a Option<PathBuf>, session_log: &'a Option<PathBuf>) -> Self {
        LogSource {
            dsh_home: dsh_home.as_deref(),
            session_log: session_log.as_deref(),
            warn: None,
        }
    }

    /// The same source, its warnings given to `warn`.
    pub fn warning_to(self, warn: &'a dyn Fn(&str)) -> Self {
        LogSource {
            warn: Some(warn),
            ..self
        }
    }

    fn warning(&self, text: &str) {
        if let Some(warn) = self.warn {
            warn(text);
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
pub fn session_short(id: &str) -> &str {
    id.strip_prefix("session-").unwrap_or(id)
}

/// `text` with every character a shell, a terminal or a node address could read as more than
/// itself (anything but ASCII letters, digits, `.`, `_` and `-`) replaced by `_`: the log's
/// ids are anyone's text, and a node's name is pasted into shells.
pub fn safe_name(text: &str) -> String {
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
pub fn session_prefix(session: &str) -> String {
    safe_name(&session_short(session).chars().take(8).collect::<String>())
}

/// Whether `prefix`, as a user gives it or as a node address carries it, names `session`.
pub fn session_matches(session: &str, prefix: &str) -> bool {
    session.starts_with(prefix)
        || session_short(session).starts_with(prefix)
        || safe_name(session_short(session)).starts_with(prefix)
}

/// A node's address: `trace:<session prefix>:<turn>.<step>`, or, for a call the log gives no
/// turn and step (an unreadable line, a torn tail), `trace:<session prefix>:<its call id>`,
/// made safe.
pub fn node_address(session: &str, call: &sessionlog::ToolCall) -> String {
    format!("trace:{}:{}", session_prefix(session), node_name(call))
}

/// The node part of a call's address.
pub fn node_name(call: &sessionlog::ToolCall) -> String {
    match (call.turn, call.step, call.call_id.is_empty()) {
        (Some(turn), Some(step), _) => format!("{turn}.{step}"),
        (_, _, false) => safe_name(&call.call_id),
        (_, _, true) => turn_step(call),
    }
}

pub fn turn_step(call: &sessionlog::ToolCall) -> String {
    format!(
        "{}.{}",
        call.turn.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
        call.step.map(|s| s.to_string()).unwrap_or_else(|| "?".into())
    )
}

/// One session's log, replayed against its own checkpoints.
pub struct Replayed {
    /// Where the log was read from.
    pub path: PathBuf,
    pub log: std::sync::Arc<SessionLog>,
    /// The session's own checkpoints.
    pub checkpoints: Vec<Record>,
    /// What the other sessions of the workspace may have changed meanwhile.
    foreign: Vec<super::ForeignChange>,
}

impl Replayed {
    /// The session's nodes, replayed forwards from its checkpoints and then worked back from
    /// the worktree where that is exact.
    pub fn nodes(&self, provider: &dyn Provider) -> Vec<TraceNode<'_>> {
        let mut nodes = super::replay_among(
            provider.workdir(),
            self.log.header.cwd.as_deref(),
            &self.log.calls,
            &self.checkpoints,
            &self.foreign,
            |record, file| provider.file_at(record, file).map_err(|e| e.to_string()),
        );
        let now_ms = chrono::Utc::now().timestamp_millis();
        super::work_backwards(&mut nodes, &self.foreign, now_ms, |path| {
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
fn file_now(workdir: &Path, path: &RepoPath) -> Option<super::FileNow> {
    let millis = |(secs, nanos): (i64, u32)| secs.saturating_mul(1000).saturating_add(i64::from(nanos / 1_000_000));
    match crate::verbs::read_settled_file(workdir, path, MAX_WORKED_BACK_BYTES) {
        Ok(Some((content, stat, links))) => Some(super::FileNow {
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
fn read_session_log(path: &Path, source: LogSource<'_>) -> Result<std::sync::Arc<SessionLog>, CkptError> {
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
        source.warning(&format!(
            "{}: the log holds more than {} MiB; ckpt trace read that much of it, and knows nothing of the calls after",
            path.display(),
            sessionlog::MAX_LOG_BYTES / (1024 * 1024)
        ));
    }
    Ok(log)
}

/// A session's log from a file of the caller's (`--session-log`): it must say which session it
/// is and that the session ran in this workspace.
fn given_log(
    provider: &dyn Provider,
    file: &Path,
    source: LogSource<'_>,
) -> Result<(PathBuf, std::sync::Arc<SessionLog>), CkptError> {
    let log = read_session_log(file, source)?;
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
pub fn replay_sessions(
    provider: &dyn Provider,
    cwd: &Path,
    source: LogSource<'_>,
    keep: impl Fn(&str) -> bool,
) -> Result<(PathBuf, Vec<Replayed>), CkptError> {
    let (root, mut paths) = workspace_logs(provider, cwd, source.dsh_home)?;
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
    let mut logs: Vec<(PathBuf, std::sync::Arc<SessionLog>)> = match source.session_log {
        Some(file) => vec![given_log(provider, file, source)?],
        None => Vec::new(),
    };
    let given: Option<String> = logs.first().map(|(_, log)| log.header.id.clone());
    let mut total: u64 = logs.first().map_or(0, |(_, log)| log.bytes);
    // The logs only other sessions' changes are taken from.
    let mut foreign_only: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    for (at, path) in paths.into_iter().enumerate() {
        let log = read_session_log(&path, source)?;
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
    let mut foreign_of: Vec<Option<Vec<super::ForeignChange>>> = Vec::with_capacity(logs.len());
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
            foreign.extend(super::foreign_changes(
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
pub fn parse_node(text: &str) -> Result<(&str, &str), CkptError> {
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
pub fn load_session(
    provider: &dyn Provider,
    cwd: &Path,
    prefix: &str,
    logs: LogSource<'_>,
) -> Result<Replayed, CkptError> {
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
pub fn find_node(nodes: &[TraceNode<'_>], name: &str, address: &str) -> Result<usize, CkptError> {
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
pub fn state_after(nodes: &[TraceNode<'_>], upto: usize) -> BTreeMap<RepoPath, Known> {
    let mut state = BTreeMap::new();
    for node in &nodes[..=upto] {
        for (path, known) in &node.files {
            state.insert(path.clone(), known.clone());
        }
    }
    state
}
