//! Trace replay: what each tool call of a harness session did to the files it names, rebuilt
//! from the session log alone where that is exact, and said to be unknown everywhere else. A
//! `write` gives the whole new content; an `edit` (or a `str_replace_editor` command) applies to
//! a known base — the content an earlier node of the session left, or the file as the newest
//! real checkpoint taken before the call wrote (by the logged times; by its label where the log
//! has none) holds it, when no shell call ran in between; a checkpoint taken after the replay
//! last settled a file wins over it. A failed content call changes nothing (a failed shell call
//! still blinds); a call whose outcome is unknown, an edit whose text is not found exactly once
//! (or not at all with `replace_all`), two calls on one file that ran at once, and every file
//! after a shell call (`bash`, `pwsh`, ...) or any other tool that is neither replayed nor known
//! to be read-only are unknown until a later `write` or checkpoint pins them. Pure logic: the caller reads
//! the log and the checkpoints; nothing here reads a file (only where the workspace's path
//! resolves, to place a path named through it).

mod backwards;
mod diff;
mod restore;
pub mod sessions;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use backwards::{work_backwards, FileNow};
pub use diff::{DiffAgainst, Side, TraceDiff};
pub use restore::RestorePlan;

use serde_json::Value;

use crate::records::sessionlog::{CallOutcome, ToolCall};
use crate::records::Record;
use crate::verbs::RepoPath;

/// What the trace knows of one file after a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Exactly these bytes (`None`: the file does not exist).
    Content(Option<Vec<u8>>),
    /// Not rebuildable, and why.
    Unknown(String),
}

/// One tool call of a session, with what it did to the files it names.
#[derive(Debug, Clone)]
pub struct TraceNode<'a> {
    pub call: &'a ToolCall,
    /// The file the call names, when it names one inside the workspace.
    pub path: Option<RepoPath>,
    /// Why the call's path was refused or could not be read, if it was.
    pub refused: Option<String>,
    /// The files this node changed (or made unknown), with what is known of each after it.
    pub files: NodeFiles,
    /// What the replay took each replayed file to hold just before this call (the base of an
    /// edit, from an earlier node or a checkpoint), where it looked.
    pub before: NodeFiles,
    /// The files whose content after this call was worked back from the worktree.
    pub worked_back: BTreeSet<RepoPath>,
}

/// What a node knows of each file it changed, by path: a map kept as one sorted vector, since a
/// node names a file or two and a log holds up to millions of nodes (a tree map allocates a
/// whole node for even one entry, and each call holds two).
pub type NodeFiles = litemap::LiteMap<RepoPath, Known>;

/// The tools the trace replays: their arguments say exactly which file they change and how.
fn is_content_tool(tool: &str) -> bool {
    matches!(tool, "write" | "edit" | "str_replace_editor")
}

/// The tools known to change no file.
fn is_read_only(tool: &str) -> bool {
    matches!(
        tool,
        "read"
            | "glob"
            | "grep"
            | "ls"
            | "list"
            | "find"
            | "web_fetch"
            | "web_search"
            | "todo_read"
            | "todo_write"
            | "think"
    )
}

/// Calls whose arguments say nothing certain about which files they change: the shells, and
/// every tool that is neither replayed nor known to be read-only (a patch tool, a subagent...).
pub fn blinds_the_trace(tool: &str) -> bool {
    !is_content_tool(tool) && !is_read_only(tool)
}

/// Where a call is, for ordering against checkpoints: (turn, step).
fn position(call: &ToolCall) -> (u64, u64) {
    (call.turn.unwrap_or(0), call.step.unwrap_or(0))
}

/// The workspace path a tool argument names: absolute inside `workdir`, or relative to the
/// session's `cwd` (itself inside `workdir`; `workdir` itself when the log names none).
pub fn workspace_path(workdir: &Path, cwd: Option<&str>, named: &str) -> Result<RepoPath, String> {
    let named_path = Path::new(named);
    let full = if named_path.is_absolute() {
        named_path.to_path_buf()
    } else {
        // A log without a cwd is still this workspace's (its directory is named after it).
        cwd.map(Path::new).unwrap_or(workdir).join(named_path)
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in full.components() {
        match component {
            std::path::Component::RootDir | std::path::Component::Prefix(_) | std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(part) => parts.push(part),
        }
    }
    let normal: std::path::PathBuf = std::iter::once(std::ffi::OsStr::new("/")).chain(parts).collect();
    // The workspace may be named by the path it resolves to (`/private/tmp` for `/tmp`).
    let resolved;
    let relative = match normal.strip_prefix(workdir) {
        Ok(relative) => relative,
        Err(_) => {
            resolved = std::fs::canonicalize(workdir).ok();
            resolved
                .as_deref()
                .and_then(|real| normal.strip_prefix(real).ok())
                .ok_or_else(|| format!("{named} is outside the workspace {}", workdir.display()))?
        }
    };
    RepoPath::new(relative.as_os_str().as_encoded_bytes().to_vec())
        .map_err(|e| format!("{named} is not a workspace file: {e}"))
}

/// What a content tool asks for, from its arguments.
enum Change<'a> {
    Write(&'a str),
    Replace {
        old: &'a str,
        new: &'a str,
        all: bool,
    },
    Insert {
        after_line: usize,
        text: &'a str,
    },
    /// A command that reads only.
    Nothing,
    /// A command whose effect the trace cannot rebuild (`undo_edit`, an unknown command).
    Opaque(String),
}

fn change_of<'a>(tool: &str, args: &'a Value) -> Option<(&'a str, Change<'a>)> {
    let s = |key: &str| args.get(key).and_then(Value::as_str);
    match tool {
        "write" => Some((s("file_path").or(s("path"))?, Change::Write(s("content")?))),
        "edit" => Some((
            s("file_path").or(s("path"))?,
            Change::Replace {
                old: s("old_string")?,
                new: s("new_string")?,
                all: args.get("replace_all").and_then(Value::as_bool).unwrap_or(false),
            },
        )),
        "str_replace_editor" => {
            let path = s("path")?;
            let change = match s("command")? {
                "create" => Change::Write(s("file_text")?),
                "str_replace" => Change::Replace {
                    old: s("old_str")?,
                    new: s("new_str").unwrap_or_default(),
                    all: false,
                },
                "insert" => Change::Insert {
                    after_line: args.get("insert_line").and_then(Value::as_u64)? as usize,
                    text: s("new_str")?,
                },
                "view" => Change::Nothing,
                other => Change::Opaque(format!("str_replace_editor {other} cannot be replayed")),
            };
            Some((path, change))
        }
        _ => None,
    }
}

/// Applies an edit to a known base, or says why it cannot be rebuilt exactly.
fn apply(base: &[u8], change: &Change<'_>) -> Result<Vec<u8>, String> {
    match change {
        Change::Write(text) => Ok(text.as_bytes().to_vec()),
        Change::Replace { old, new, all } => {
            let base = std::str::from_utf8(base)
                .map_err(|_| "the base is not UTF-8 text, an edit cannot be replayed on it".to_owned())?;
            let count = if old.is_empty() { 0 } else { base.matches(old).count() };
            match (count, all) {
                (0, _) => Err(
                    "the edit's text is not in the base (the base the trace knows is not the file the tool saw)".into(),
                ),
                (1, _) | (_, true) => Ok(base.replace(old, new).into_bytes()),
                (n, false) => Err(format!("the edit's text occurs {n} times in the base: ambiguous")),
            }
        }
        Change::Insert { after_line, text } => {
            let base = std::str::from_utf8(base).map_err(|_| "the base is not UTF-8 text".to_owned())?;
            let lines: Vec<&str> = base.split_inclusive('\n').collect();
            if *after_line > lines.len() {
                return Err(format!(
                    "insert after line {after_line}, but the base has {} lines",
                    lines.len()
                ));
            }
            let mut out: String = lines[..*after_line].concat();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&lines[*after_line..].concat());
            Ok(out.into_bytes())
        }
        Change::Nothing | Change::Opaque(_) => Err("not a content change".into()),
    }
}

/// When a call ran, in milliseconds since the epoch: the harness logs epoch milliseconds (an
/// RFC 3339 text is read too).
pub fn call_millis(call: &ToolCall) -> Option<i64> {
    millis_of(call.time.as_deref()?)
}

fn millis_of(time: &str) -> Option<i64> {
    time.parse::<i64>().ok().or_else(|| {
        chrono::DateTime::parse_from_rfc3339(time)
            .ok()
            .map(|t| t.timestamp_millis())
    })
}

/// When a call's result was logged, in milliseconds since the epoch.
pub fn result_millis(call: &ToolCall) -> Option<i64> {
    millis_of(call.result_time.as_deref()?)
}

/// A call of another session of the same workspace that may have changed files there: one file
/// (a content tool) or any (`path: None`: a shell, or a tool the trace cannot replay).
#[derive(Debug, Clone)]
pub struct ForeignChange {
    /// When it ran (ms since the epoch); `None`: unknown, so possibly before any call.
    pub at: Option<i64>,
    /// When its result was logged; `None`: unknown, so possibly still running.
    pub until: Option<i64>,
    pub session: String,
    pub tool: String,
    pub path: Option<RepoPath>,
}

/// The calls of another session (`session`, whose log names `cwd`) that may have changed files
/// of the workspace: every call that is not read-only and did not fail (a shell that failed
/// counts: it may have changed files first).
pub fn foreign_changes<'c>(
    workdir: &Path,
    session: &str,
    cwd: Option<&str>,
    calls: impl Iterator<Item = &'c ToolCall>,
) -> Vec<ForeignChange> {
    calls
        // A shell that failed may still have changed files (a command that exits non-zero).
        .filter(|call| {
            (call.outcome != CallOutcome::Failed || blinds_the_trace(&call.name)) && !is_read_only(&call.name)
        })
        .filter_map(|call| {
            let path = if blinds_the_trace(&call.name) {
                None
            } else {
                match call
                    .arguments
                    .as_ref()
                    .ok()
                    .and_then(|args| change_of(&call.name, args))
                {
                    Some((_, Change::Nothing)) => return None,
                    Some((named, _)) => match workspace_path(workdir, cwd, named) {
                        Ok(path) => Some(path),
                        // Outside this workspace: it changed nothing here.
                        Err(_) => return None,
                    },
                    None => None,
                }
            };
            Some(ForeignChange {
                at: call_millis(call),
                until: result_millis(call),
                session: session.to_owned(),
                tool: call.name.clone(),
                path,
            })
        })
        .collect()
}

/// Replays the calls of one session (in log order). `checkpoints` are that session's real
/// checkpoints; `content_at` reads one file as a checkpoint holds it (`Ok(None)`: absent).
#[cfg(test)]
pub fn replay<'a>(
    workdir: &Path,
    cwd: Option<&str>,
    calls: &'a [ToolCall],
    checkpoints: &[Record],
    content_at: impl FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
) -> Vec<TraceNode<'a>> {
    replay_among(workdir, cwd, calls, checkpoints, &[], content_at)
}

/// [`replay`] in a workspace where other sessions ran too: each of their `foreign` changes
/// that came before a call (by time; one of unknown time comes before every call, and a call of
/// unknown time comes after every change) makes its file unknown, or every file for a shell,
/// and no checkpoint taken before it is a base any more.
pub fn replay_among<'a>(
    workdir: &Path,
    cwd: Option<&str>,
    calls: &'a [ToolCall],
    checkpoints: &[Record],
    foreign: &[ForeignChange],
    content_at: impl FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
) -> Vec<TraceNode<'a>> {
    let own_untimed = calls.iter().any(|c| call_millis(c).is_none());
    let placed = ForeignPlaced::of(foreign, own_untimed);
    let mut replay = Replay {
        workdir,
        cwd,
        checkpoints,
        content_at,
        known: BTreeMap::new(),
        known_at: BTreeMap::new(),
        setter: BTreeMap::new(),
        nodes: Vec::new(),
        last_shell: None,
        own_shell_end: i64::MIN,
        steps: first_of_each_step(calls),
        foreign_shell_at: placed.always_blind.as_ref().map(|_| i64::MAX),
    };
    let mut pending = placed.timed.into_iter().peekable();
    // An unreadable line has no position: the next call's is the first it cannot be after.
    let mut blind_from_next = false;
    for call in calls {
        let mut node = TraceNode {
            call,
            path: None,
            refused: None,
            files: NodeFiles::new(),
            before: NodeFiles::new(),
            worked_back: BTreeSet::new(),
        };
        if blind_from_next && call.turn.is_some() {
            replay.last_shell = replay.last_shell.max(Some(position(call)));
            replay.own_shell_end = replay.own_shell_end.max(call_millis(call).unwrap_or(i64::MAX));
            blind_from_next = false;
        }
        let ties = replay.foreign_changes_before(call, &mut node, &mut pending);
        if blinds_the_trace(&call.name) {
            // Even a failed one: a command that exits non-zero may have changed files first.
            let ended = replay.ran_blind(call);
            blind_from_next |= call.turn.is_none();
            replay.forget_all(
                &mut node,
                &format!("a {} call ran after the last known content", call.name),
                Some(ended),
            );
            replay.nodes.push(node);
            continue;
        }
        let args = match &call.arguments {
            Ok(args) => args,
            Err(why) => {
                node.refused = Some(why.clone());
                replay.unreadable(call, &mut node, why);
                replay.nodes.push(node);
                continue;
            }
        };
        let Some((named, change)) = change_of(&call.name, args) else {
            if is_content_tool(&call.name) {
                let why = "its arguments lack a field the tool needs, or have the wrong type";
                node.refused = Some(why.to_owned());
                replay.unreadable(call, &mut node, why);
            }
            replay.nodes.push(node);
            continue;
        };
        let path = match workspace_path(replay.workdir, replay.cwd, named) {
            Ok(path) => path,
            Err(why) => {
                node.refused = Some(why);
                replay.nodes.push(node);
                continue;
            }
        };
        node.path = Some(path.clone());
        if matches!(change, Change::Nothing) || call.outcome == CallOutcome::Failed {
            replay.nodes.push(node);
            continue;
        }
        let after = replay.after_change(call, &mut node, &path, &change);
        replay.settle(call, node, path, after, &ties);
    }
    let mut nodes = replay.nodes;
    if placed.always_blind.is_some() || !placed.always_unknown.is_empty() {
        for node in &mut nodes {
            for (path, state) in node.files.iter_mut().chain(node.before.iter_mut()) {
                if let Some(why) = placed.always_unknown.get(path).or(placed.always_blind.as_ref()) {
                    *state = Known::Unknown(why.clone());
                }
            }
        }
    }
    nodes
}

/// For each turn.step with a time, how many calls it has and when the first of them began:
/// calls of one step may run at once, so where a step has several, only a checkpoint taken
/// before the first of them began is a base for any of them (one taken meanwhile may already
/// hold another's write).
fn first_of_each_step(calls: &[ToolCall]) -> std::collections::HashMap<(u64, u64), (usize, i64)> {
    let mut steps = std::collections::HashMap::new();
    for call in calls {
        if let (Some(turn), Some(step), Some(at)) = (call.turn, call.step, call_millis(call)) {
            let entry = steps.entry((turn, step)).or_insert((0, i64::MAX));
            *entry = (entry.0 + 1, entry.1.min(at));
        }
    }
    steps
}

/// Other sessions' changes, as the replay can place them among this session's calls.
struct ForeignPlaced<'f> {
    /// Those with a time, when every call of this session has one: in time order.
    timed: Vec<&'f ForeignChange>,
    /// The files of the others, unknown at every node whatever this session wrote.
    always_unknown: BTreeMap<RepoPath, String>,
    /// Why every file is unknown at every node (another session's shell that cannot be placed).
    always_blind: Option<String>,
}

impl<'f> ForeignPlaced<'f> {
    /// Another session's change whose time is unknown (or any change, when a call of this
    /// session has no time) may lie anywhere between this session's calls.
    fn of(foreign: &'f [ForeignChange], own_untimed: bool) -> Self {
        let mut placed = ForeignPlaced {
            timed: Vec::new(),
            always_unknown: BTreeMap::new(),
            always_blind: None,
        };
        for change in foreign {
            if change.at.is_some() && !own_untimed {
                placed.timed.push(change);
                continue;
            }
            let why = format!(
                "session {} ran {} at a time that cannot be placed among this session's calls",
                change.session, change.tool
            );
            match &change.path {
                Some(path) => {
                    placed.always_unknown.insert(path.clone(), why);
                }
                None => placed.always_blind = Some(why),
            }
        }
        placed.timed.sort_by_key(|change| change.at.unwrap_or(i64::MIN));
        placed
    }
}

/// What the replay knows as it goes through one session's calls.
struct Replay<'a, 'w, F> {
    workdir: &'w Path,
    cwd: Option<&'w str>,
    checkpoints: &'w [Record],
    content_at: F,
    known: BTreeMap<RepoPath, Known>,
    /// When what `known` says of a file was last settled (ms; `i64::MAX`: not known): a
    /// checkpoint taken after that says better what the file held then.
    known_at: BTreeMap<RepoPath, i64>,
    /// The node that last changed each file, and when its result came: a later call on the
    /// file that began before then ran at once with it, in an order the log does not say.
    setter: BTreeMap<RepoPath, (usize, i64)>,
    nodes: Vec<TraceNode<'a>>,
    /// Position of the last shell call so far: a checkpoint older than it is no base any more.
    last_shell: Option<(u64, u64)>,
    /// The same by time: when the last of them ended (`i64::MAX`: unknown).
    own_shell_end: i64,
    /// See [`first_of_each_step`].
    steps: std::collections::HashMap<(u64, u64), (usize, i64)>,
    /// The same for another session's shell, by time: checkpoints taken before it are no base.
    foreign_shell_at: Option<i64>,
}

impl<'a, F> Replay<'a, '_, F>
where
    F: FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
{
    /// Applies the other sessions' changes that came before `call` (recorded on its node too:
    /// what a restore to any later node knows is folded from the nodes' files). A change at the
    /// very millisecond of the call may have come before or after it: it is applied before, and
    /// returned, to be applied again to what the call wrote.
    fn foreign_changes_before<'f>(
        &mut self,
        call: &ToolCall,
        node: &mut TraceNode<'a>,
        pending: &mut std::iter::Peekable<std::vec::IntoIter<&'f ForeignChange>>,
    ) -> Vec<&'f ForeignChange> {
        let now = call_millis(call).unwrap_or(i64::MAX);
        let mut ties = Vec::new();
        while let Some(change) = pending.next_if(|change| change.at.unwrap_or(i64::MIN) <= now) {
            if change.at == Some(now) {
                ties.push(change);
            }
            let why = format!("session {} ran {} on it before this call", change.session, change.tool);
            let settled = change.until.unwrap_or(i64::MAX);
            match &change.path {
                Some(path) => {
                    self.known.insert(path.clone(), Known::Unknown(why.clone()));
                    self.known_at.insert(path.clone(), settled);
                    node.files.insert(path.clone(), Known::Unknown(why));
                }
                None => {
                    let at = change.at.unwrap_or(i64::MAX);
                    self.foreign_shell_at = Some(at.max(self.foreign_shell_at.unwrap_or(i64::MIN)));
                    self.forget_all(node, &why, Some(settled));
                }
            }
        }
        ties
    }

    /// Every file known so far becomes unknown for `why`, on this node too; `settled`, when
    /// given, is when that became so.
    fn forget_all(&mut self, node: &mut TraceNode<'a>, why: &str, settled: Option<i64>) {
        for (path, state) in self.known.iter_mut() {
            *state = Known::Unknown(why.to_owned());
            if let Some(settled) = settled {
                self.known_at.insert(path.clone(), settled);
            }
            node.files.insert(path.clone(), state.clone());
        }
    }

    /// Notes that `call` may have changed any file: no checkpoint taken before it is a base any
    /// more. When it ended (`i64::MAX`: unknown).
    fn ran_blind(&mut self, call: &ToolCall) -> i64 {
        let ended = result_millis(call).unwrap_or(i64::MAX);
        self.last_shell = self.last_shell.max(Some(position(call)));
        self.own_shell_end = self.own_shell_end.max(ended);
        ended
    }

    /// A content call that may have changed a file but whose arguments cannot be read says
    /// nothing certain about which one: it blinds the trace like a shell call.
    fn unreadable(&mut self, call: &ToolCall, node: &mut TraceNode<'a>, why: &str) {
        if is_content_tool(&call.name) && call.outcome != CallOutcome::Failed {
            self.ran_blind(call);
            let why = format!("a {} call whose arguments cannot be read ran ({why})", call.name);
            self.forget_all(node, &why, None);
        }
    }

    /// What `call`'s `change` left at `path`: a write's content; an edit applied to its base
    /// (what the replay knows, or a checkpoint taken before the call, whichever says better);
    /// unknown for an opaque change, an unknown outcome or an unknown base.
    fn after_change(
        &mut self,
        call: &ToolCall,
        node: &mut TraceNode<'a>,
        path: &RepoPath,
        change: &Change<'_>,
    ) -> Known {
        if call.outcome == CallOutcome::Unknown {
            return Known::Unknown("the call's outcome is unknown (no result, or interrupted)".into());
        }
        if let Change::Opaque(why) = change {
            return Known::Unknown(why.clone());
        }
        if let Change::Write(_) = change {
            if let Some(state) = self.known.get(path) {
                node.before.insert(path.clone(), state.clone());
            }
            return Known::Content(apply(&[], change).ok());
        }
        let siblings_from = call
            .turn
            .zip(call.step)
            .and_then(|at| self.steps.get(&at))
            .filter(|(count, _)| *count > 1)
            .map(|(_, first)| *first);
        let shells_end = self.own_shell_end.max(self.foreign_shell_at.unwrap_or(i64::MIN));
        let timed = timed_checkpoint_base(
            call,
            siblings_from,
            (path, change),
            self.checkpoints,
            shells_end,
            &mut self.content_at,
        );
        let settled = self.known_at.get(path).copied().unwrap_or(i64::MAX);
        let base = match (self.known.get(path), timed) {
            // A checkpoint taken after the replay last settled the file says what it held.
            (Some(_), TimedBase::Found(base, taken)) if taken > settled => base,
            (Some(state), _) => state.clone(),
            (None, TimedBase::Found(base, _)) => base,
            (None, TimedBase::NoneBefore) => {
                Known::Unknown("no earlier node, nor a checkpoint taken before this call, holds the file".into())
            }
            (None, TimedBase::Untimed) => base_from_checkpoint(
                call,
                (path, change),
                self.checkpoints,
                (self.last_shell, self.foreign_shell_at),
                &mut self.content_at,
            ),
        };
        node.before.insert(path.clone(), base.clone());
        match base {
            Known::Content(Some(bytes)) => match apply(&bytes, change) {
                Ok(rebuilt) => Known::Content(Some(rebuilt)),
                Err(why) => Known::Unknown(why),
            },
            Known::Content(None) => Known::Unknown("the file did not exist before the edit".into()),
            Known::Unknown(why) if why.starts_with("unknown base: ") => Known::Unknown(why),
            Known::Unknown(why) => Known::Unknown(format!("unknown base: {why}")),
        }
    }

    /// Records `after` as what `call` left at `path`, unless another call on it ran at once
    /// (both are then unknown) or another session changed it in the same millisecond, and adds
    /// the node.
    fn settle(
        &mut self,
        call: &'a ToolCall,
        mut node: TraceNode<'a>,
        path: RepoPath,
        after: Known,
        ties: &[&ForeignChange],
    ) {
        let at_once = self
            .setter
            .get(&path)
            .copied()
            .filter(|(_, ended)| call_millis(call).is_some_and(|started| *ended >= started));
        let after = match at_once {
            Some((earlier, _)) => {
                let why = format!(
                    "calls {} and {} on it ran at once, in an order the log does not say",
                    place_of(self.nodes[earlier].call),
                    place_of(call)
                );
                self.nodes[earlier]
                    .files
                    .insert(path.clone(), Known::Unknown(why.clone()));
                Known::Unknown(why)
            }
            None => after,
        };
        if let Some(ended) = result_millis(call) {
            self.setter.insert(path.clone(), (self.nodes.len(), ended));
        }
        let after = match ties.iter().find(|tie| tie.path.as_ref().is_none_or(|p| *p == path)) {
            Some(tie) => Known::Unknown(format!(
                "session {} ran {} in the same millisecond as this call",
                tie.session, tie.tool
            )),
            None => after,
        };
        self.known.insert(path.clone(), after.clone());
        self.known_at
            .insert(path.clone(), result_millis(call).unwrap_or(i64::MAX));
        node.files.insert(path, after);
        self.nodes.push(node);
    }
}

/// A call's place, for messages: its turn.step, or its call id.
fn place_of(call: &ToolCall) -> String {
    match (call.turn, call.step) {
        (Some(turn), Some(step)) => format!("{turn}.{step}"),
        _ => call.call_id.clone(),
    }
}

/// A checkpoint base chosen by time.
enum TimedBase {
    /// The call's times are not logged: checkpoints are placed by their labels instead.
    Untimed,
    /// No checkpoint was taken before the call.
    NoneBefore,
    /// What the newest checkpoint taken before the call says of the file, and when it was taken.
    Found(Known, i64),
}

/// The file as the newest checkpoint taken before `call` wrote holds it: taken before its
/// result (before the first call of its step began, when the step has several), and after
/// every shell (`shells_end`) that ran before it.
fn timed_checkpoint_base(
    call: &ToolCall,
    siblings_from: Option<i64>,
    (path, change): (&RepoPath, &Change<'_>),
    checkpoints: &[Record],
    shells_end: i64,
    content_at: &mut impl FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
) -> TimedBase {
    let Some(ended) = result_millis(call) else {
        return TimedBase::Untimed;
    };
    let limit = siblings_from.unwrap_or(ended);
    let taken = |r: &Record| chrono::DateTime::parse_from_rfc3339(&r.time).map_or(i64::MAX, |t| t.timestamp_millis());
    let Some((checkpoint, at)) = checkpoints
        .iter()
        .map(|r| (r, taken(r)))
        .filter(|(_, at)| *at < limit)
        .max_by_key(|(_, at)| *at)
    else {
        return TimedBase::NoneBefore;
    };
    if at <= shells_end {
        let why = format!(
            "a shell (or other unreplayable) call ran after checkpoint {}",
            checkpoint.short()
        );
        return TimedBase::Found(Known::Unknown(why), at);
    }
    // One taken while the call ran may hold its write already (times alone cannot say).
    let during = call_millis(call).is_none_or(|started| at >= started.saturating_sub(CHECKPOINT_SLACK_MS));
    TimedBase::Found(checkpoint_content(checkpoint, (path, change), during, content_at), at)
}

/// How far a checkpoint's time may lag the log's clock.
const CHECKPOINT_SLACK_MS: i64 = 20;

/// What `checkpoint` holds of `path` as a base for `change`; unknown where it may already hold
/// the change's own write (`maybe_after`: it may have been taken after the call wrote), and the
/// change, undone from it, gives a base it applies to exactly.
fn checkpoint_content(
    checkpoint: &Record,
    (path, change): (&RepoPath, &Change<'_>),
    maybe_after: bool,
    content_at: &mut impl FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
) -> Known {
    match content_at(checkpoint, path) {
        Ok(Some(bytes)) if maybe_after && backwards::unapply(&bytes, change).is_ok() => Known::Unknown(format!(
            "checkpoint {} may have been taken after the call wrote (it already looks like the call's result)",
            checkpoint.short()
        )),
        Ok(content) => Known::Content(content),
        Err(why) => Known::Unknown(format!("checkpoint {} cannot be read: {why}", checkpoint.short())),
    }
}

/// The file as the newest checkpoint at or before `call` holds it, if no shell call ran since.
fn base_from_checkpoint(
    call: &ToolCall,
    (path, change): (&RepoPath, &Change<'_>),
    checkpoints: &[Record],
    (last_shell, foreign_shell_at): (Option<(u64, u64)>, Option<i64>),
    content_at: &mut impl FnMut(&Record, &RepoPath) -> Result<Option<Vec<u8>>, String>,
) -> Known {
    let at = position(call);
    let Some(checkpoint) = checkpoints
        .iter()
        .filter(|r| r.turn.is_some() && (r.turn.unwrap_or(0), r.step.unwrap_or(0)) <= at)
        // Of several with one label (the calls of one step), the first taken.
        .max_by_key(|r| {
            (
                r.turn.unwrap_or(0),
                r.step.unwrap_or(0),
                std::cmp::Reverse(r.time.clone()),
            )
        })
    else {
        return Known::Unknown("no earlier node or checkpoint holds the file".into());
    };
    let taken = (checkpoint.turn.unwrap_or(0), checkpoint.step.unwrap_or(0));
    if last_shell.is_some_and(|shell| shell >= taken) {
        return Known::Unknown(format!(
            "a shell (or other unreplayable) call ran after checkpoint {}",
            checkpoint.short()
        ));
    }
    let taken_at = chrono::DateTime::parse_from_rfc3339(&checkpoint.time).map_or(i64::MIN, |t| t.timestamp_millis());
    if foreign_shell_at.is_some_and(|shell| shell >= taken_at) {
        return Known::Unknown(format!(
            "another session's shell (or other unreplayable) call ran after checkpoint {}",
            checkpoint.short()
        ));
    }
    // Placed by its label alone, it may have been taken after the call wrote.
    checkpoint_content(checkpoint, (path, change), true, content_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(seq: u64, turn: u64, step: u64, name: &str, args: Value, outcome: CallOutcome) -> ToolCall {
        ToolCall {
            seq,
            time: None,
            turn: Some(turn),
            step: Some(step),
            call_id: format!("c{seq}"),
            name: name.into(),
            arguments: Ok(args),
            outcome,
            result_time: None,
        }
    }

    fn p(text: &str) -> RepoPath {
        RepoPath::new(text.as_bytes().to_vec()).unwrap()
    }

    /// A checkpoint of session `s` taken before call 1.1.
    fn checkpoint_at_1_1() -> Record {
        Record {
            id: "a".repeat(40),
            provider: "git".into(),
            commit: Some("a".repeat(40)),
            tree: "b".repeat(40),
            workspace: crate::records::WirePath::Text("/w".into()),
            session: Some("s".into()),
            turn: Some(1),
            step: Some(1),
            trigger: Some("edit".into()),
            kind: crate::records::Kind::Auto,
            time: "2026-01-01T00:00:00Z".into(),
            files: 0,
            total_files: 1,
            bytes: 0,
            skipped: Vec::new(),
            narrow_modes: Vec::new(),
        }
    }

    fn content(text: &str) -> Known {
        Known::Content(Some(text.as_bytes().to_vec()))
    }

    #[test]
    fn writes_and_edits_chain_failures_change_nothing_and_shell_calls_blind_everything() {
        let ok = CallOutcome::Ok;
        let calls = vec![
            call(
                1,
                1,
                1,
                "write",
                serde_json::json!({"file_path": "/w/a.txt", "content": "one\ntwo\n"}),
                ok,
            ),
            call(
                2,
                1,
                2,
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}),
                ok,
            ),
            call(
                3,
                1,
                3,
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "absent", "new_string": "x"}),
                CallOutcome::Failed,
            ),
            call(
                4,
                1,
                4,
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "\n", "new_string": "|"}),
                ok,
            ),
            call(
                5,
                2,
                1,
                "write",
                serde_json::json!({"file_path": "b.txt", "content": "b"}),
                ok,
            ),
            call(
                6,
                2,
                2,
                "bash",
                serde_json::json!({"command": "sed -i s/b/B/ b.txt"}),
                ok,
            ),
            call(
                7,
                2,
                3,
                "edit",
                serde_json::json!({"file_path": "b.txt", "old_string": "b", "new_string": "c"}),
                ok,
            ),
            call(
                8,
                3,
                1,
                "write",
                serde_json::json!({"file_path": "../outside.txt", "content": "no"}),
                ok,
            ),
            call(
                9,
                3,
                2,
                "write",
                serde_json::json!({"file_path": "b.txt", "content": "pinned again"}),
                ok,
            ),
        ];
        let nodes = replay(Path::new("/w"), Some("/w"), &calls, &[], |_, _| Ok(None));
        assert_eq!(nodes[0].files[&p("a.txt")], content("one\ntwo\n"));
        assert_eq!(nodes[1].files[&p("a.txt")], content("one\nTWO\n"));
        assert!(nodes[2].files.is_empty(), "a failed edit changes nothing");
        assert!(
            matches!(&nodes[3].files[&p("a.txt")], Known::Unknown(why) if why.contains("ambiguous")),
            "a newline occurs twice"
        );
        assert!(matches!(&nodes[5].files[&p("b.txt")], Known::Unknown(why) if why.contains("bash")));
        assert!(matches!(&nodes[6].files[&p("b.txt")], Known::Unknown(why) if why.starts_with("unknown base")));
        assert!(nodes[7]
            .refused
            .as_deref()
            .is_some_and(|r| r.contains("outside the workspace")));
        assert_eq!(
            nodes[8].files[&p("b.txt")],
            content("pinned again"),
            "a write pins a file again"
        );
    }

    #[test]
    fn an_edit_takes_its_base_from_the_nearest_checkpoint_unless_a_shell_call_ran_since() {
        let record = checkpoint_at_1_1();
        let edit = call(
            2,
            1,
            1,
            "edit",
            serde_json::json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"}),
            CallOutcome::Ok,
        );
        let nodes = replay(
            Path::new("/w"),
            Some("/w"),
            std::slice::from_ref(&edit),
            std::slice::from_ref(&record),
            |_, _| Ok(Some(b"x\n".to_vec())),
        );
        assert_eq!(nodes[0].files[&p("a.txt")], content("y\n"));
        let shell = call(1, 1, 1, "bash", serde_json::json!({}), CallOutcome::Ok);
        let calls = [shell, edit];
        let nodes = replay(Path::new("/w"), Some("/w"), &calls, &[record], |_, _| {
            Ok(Some(b"x\n".to_vec()))
        });
        assert!(matches!(&nodes[1].files[&p("a.txt")], Known::Unknown(why) if why.contains("shell")));
    }

    #[test]
    fn a_tool_the_trace_cannot_replay_blinds_it_like_a_shell_and_a_read_does_not() {
        let ok = CallOutcome::Ok;
        let calls = vec![
            call(
                1,
                1,
                1,
                "write",
                serde_json::json!({"file_path": "a.txt", "content": "a\n"}),
                ok,
            ),
            call(2, 1, 2, "read", serde_json::json!({"file_path": "a.txt"}), ok),
            call(
                3,
                1,
                3,
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "a", "new_string": "b"}),
                ok,
            ),
            call(4, 1, 4, "apply_patch", serde_json::json!({"patch": "*** a.txt"}), ok),
            call(
                5,
                1,
                5,
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "b", "new_string": "c"}),
                ok,
            ),
        ];
        let nodes = replay(Path::new("/w"), Some("/w"), &calls, &[], |_, _| Ok(None));
        assert!(nodes[1].files.is_empty(), "a read changes nothing");
        assert_eq!(nodes[2].files[&p("a.txt")], content("b\n"));
        assert!(matches!(&nodes[3].files[&p("a.txt")], Known::Unknown(why) if why.contains("apply_patch")));
        assert!(
            matches!(&nodes[4].files[&p("a.txt")], Known::Unknown(_)),
            "no edit on top of an unknown base"
        );
    }

    #[test]
    fn an_edit_of_a_base_that_is_not_utf8_is_unknown_and_a_later_write_pins_the_file_again() {
        let ok = CallOutcome::Ok;
        let record = checkpoint_at_1_1();
        let calls = vec![
            call(
                1,
                1,
                1,
                "edit",
                serde_json::json!({"file_path": "bin.dat", "old_string": "x", "new_string": "y"}),
                ok,
            ),
            call(
                2,
                1,
                2,
                "write",
                serde_json::json!({"file_path": "bin.dat", "content": "text now\n"}),
                ok,
            ),
        ];
        let nodes = replay(Path::new("/w"), Some("/w"), &calls, &[record], |_, _| {
            Ok(Some(b"x\xff\xfe\n".to_vec()))
        });
        assert!(
            matches!(&nodes[0].files[&p("bin.dat")], Known::Unknown(why) if why.contains("not UTF-8")),
            "{:?}",
            nodes[0].files
        );
        assert_eq!(nodes[1].files[&p("bin.dat")], content("text now\n"));
    }

    #[test]
    fn a_content_call_whose_arguments_cannot_be_read_blinds_the_trace_and_a_read_does_not() {
        let ok = CallOutcome::Ok;
        let write = |seq, file: &str| {
            call(
                seq,
                1,
                seq,
                "write",
                serde_json::json!({"file_path": file, "content": "known\n"}),
                ok,
            )
        };
        let mut broken = write(2, "t.txt");
        broken.arguments = Err("arguments are not JSON".into());
        let calls = vec![
            write(1, "t.txt"),
            call(2, 1, 2, "read", serde_json::json!({"no_path": 1}), ok),
            broken,
            write(4, "z.txt"),
            call(
                5,
                1,
                5,
                "write",
                serde_json::json!({"file_path": "z.txt", "content": 123}),
                ok,
            ),
        ];
        let nodes = replay(Path::new("/w"), Some("/w"), &calls, &[], |_, _| Ok(None));
        assert!(nodes[1].files.is_empty(), "a read with odd arguments changes nothing");
        assert!(matches!(&nodes[2].files[&p("t.txt")], Known::Unknown(why) if why.contains("cannot be read")));
        assert_eq!(nodes[3].files[&p("z.txt")], content("known\n"));
        assert!(
            matches!(&nodes[4].files[&p("z.txt")], Known::Unknown(_)),
            "a write whose content is not text: {:?}",
            nodes[4].files
        );
    }

    #[test]
    fn another_session_s_changes_in_between_make_files_unknown_by_time() {
        let ok = CallOutcome::Ok;
        let timed = |seq: u64, name: &str, args: Value, at: i64| {
            let mut c = call(seq, 1, seq, name, args, ok);
            c.time = Some(at.to_string());
            c
        };
        let mine = vec![
            timed(
                1,
                "write",
                serde_json::json!({"file_path": "t.txt", "content": "mine\n"}),
                1000,
            ),
            timed(
                2,
                "write",
                serde_json::json!({"file_path": "u.txt", "content": "u\n"}),
                3000,
            ),
            timed(
                3,
                "write",
                serde_json::json!({"file_path": "v.txt", "content": "v\n"}),
                5000,
            ),
        ];
        let theirs = [
            timed(
                1,
                "write",
                serde_json::json!({"file_path": "t.txt", "content": "theirs\n"}),
                2000,
            ),
            timed(2, "read", serde_json::json!({"file_path": "u.txt"}), 2500),
            timed(3, "bash", serde_json::json!({"command": "make"}), 4000),
        ];
        let foreign = foreign_changes(Path::new("/w"), "other", Some("/w"), theirs.iter());
        assert_eq!(foreign.len(), 2, "a read changes nothing: {foreign:?}");
        let nodes = replay_among(Path::new("/w"), Some("/w"), &mine, &[], &foreign, |_, _| Ok(None));
        assert!(
            matches!(&nodes[1].files[&p("t.txt")], Known::Unknown(why) if why.contains("session other ran write")),
            "{:?}",
            nodes[1].files
        );
        assert_eq!(nodes[1].files[&p("u.txt")], content("u\n"));
        assert!(matches!(&nodes[2].files[&p("u.txt")], Known::Unknown(why) if why.contains("bash")));
        assert_eq!(nodes[2].files[&p("v.txt")], content("v\n"));

        // A change at the very millisecond of a call may have come after it.
        let tie = [timed(
            1,
            "write",
            serde_json::json!({"file_path": "u.txt", "content": "x"}),
            3000,
        )];
        let foreign = foreign_changes(Path::new("/w"), "other", Some("/w"), tie.iter());
        let nodes = replay_among(Path::new("/w"), Some("/w"), &mine, &[], &foreign, |_, _| Ok(None));
        assert!(
            matches!(&nodes[1].files[&p("u.txt")], Known::Unknown(_)),
            "{:?}",
            nodes[1].files
        );

        // One of unknown time may lie anywhere: its file is unknown at every node, even after
        // this session wrote it; a shell of unknown time blinds every node.
        let mut untimed = timed(1, "write", serde_json::json!({"file_path": "t.txt", "content": "x"}), 0);
        untimed.time = None;
        let foreign = foreign_changes(
            Path::new("/w"),
            "other",
            Some("/w"),
            std::slice::from_ref(&untimed).iter(),
        );
        let nodes = replay_among(Path::new("/w"), Some("/w"), &mine, &[], &foreign, |_, _| Ok(None));
        assert!(matches!(&nodes[0].files[&p("t.txt")], Known::Unknown(why) if why.contains("cannot be placed")));
        assert_eq!(
            nodes[1].files[&p("u.txt")],
            content("u\n"),
            "other files are not touched by it"
        );
        untimed.name = "bash".into();
        let foreign = foreign_changes(
            Path::new("/w"),
            "other",
            Some("/w"),
            std::slice::from_ref(&untimed).iter(),
        );
        let nodes = replay_among(Path::new("/w"), Some("/w"), &mine, &[], &foreign, |_, _| Ok(None));
        assert!(nodes
            .iter()
            .all(|n| n.files.values().all(|k| matches!(k, Known::Unknown(_)))));
    }

    #[test]
    fn an_unreadable_content_call_or_line_makes_older_checkpoints_no_base() {
        let ok = CallOutcome::Ok;
        let record = checkpoint_at_1_1();
        let edit = call(
            2,
            1,
            2,
            "edit",
            serde_json::json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"}),
            ok,
        );
        let mut broken = call(1, 1, 1, "write", serde_json::json!({}), ok);
        broken.arguments = Err("arguments are not JSON".into());
        let mut line = broken.clone();
        line.name = crate::records::sessionlog::UNREADABLE_LINE.into();
        (line.turn, line.step) = (None, None);
        for first in [broken, line] {
            let calls = [first, edit.clone()];
            let nodes = replay(
                Path::new("/w"),
                Some("/w"),
                &calls,
                std::slice::from_ref(&record),
                |_, _| Ok(Some(b"x\n".to_vec())),
            );
            assert!(
                matches!(&nodes[1].files[&p("a.txt")], Known::Unknown(_)),
                "{}: {:?}",
                calls[0].name,
                nodes[1].files
            );
        }
    }

    #[test]
    fn paths_resolve_inside_the_workspace_only() {
        let w = Path::new("/w");
        assert_eq!(workspace_path(w, Some("/w/sub"), "x.txt").unwrap(), p("sub/x.txt"));
        assert_eq!(workspace_path(w, Some("/w"), "/w/a/../b").unwrap(), p("b"));
        assert!(workspace_path(w, Some("/w"), "/etc/passwd").is_err());
        assert!(workspace_path(w, Some("/w"), "../w2/x").is_err());
        assert_eq!(
            workspace_path(w, None, "x.txt").unwrap(),
            p("x.txt"),
            "no cwd: the workspace"
        );
        assert!(workspace_path(w, None, "../x").is_err());
        assert!(
            workspace_path(w, Some("/w"), ".git/config").is_err(),
            "never a path into .git"
        );
    }
}
