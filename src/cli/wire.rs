//! The JSON Lines contract (v1), in one place: every record `--json` prints is a struct here,
//! built from the provider's reports. Each line is `{"v":1,"type":<TYPE>, ...fields}`. Field
//! names are the contract docs/json.md documents: add fields freely, never rename one. Nothing here
//! decides what a command does, and nothing outside this file writes a JSON record by hand.

use serde::Serialize;

use crate::provider::watch::StatusAnswer;
use crate::provider::{FileDiff, Preview, Problem, RestoreReport, ScanMode, SnapshotOutcome};
use crate::records::{Record, Skipped, WirePath};
use crate::verbs::{EntryKind, RepoPath};

/// The contract's version, the `"v"` of every record.
pub const VERSION: u8 = 1;

/// A record of the contract: its fields, and the `"type"` it is printed under.
pub trait WireRecord: Serialize {
    fn record_type(&self) -> &'static str;
}

/// What one JSON Lines line holds: version and type first, then the record's own fields.
#[derive(Serialize)]
pub struct Envelope<'a, T: Serialize> {
    pub v: u8,
    #[serde(rename = "type")]
    pub record_type: &'static str,
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: WireRecord> Envelope<'a, T> {
    pub fn of(body: &'a T) -> Self {
        Envelope {
            v: VERSION,
            record_type: body.record_type(),
            body,
        }
    }
}

macro_rules! record_type {
    ($name:ident, $type:literal) => {
        impl WireRecord for $name<'_> {
            fn record_type(&self) -> &'static str {
                $type
            }
        }
    };
}

/// A path and why it was not (or could not be) handled.
#[derive(Serialize)]
pub struct PathReason<'a> {
    pub path: WirePath,
    pub reason: &'a str,
}

/// A path that failed, and the error.
#[derive(Serialize)]
pub struct PathError<'a> {
    pub path: WirePath,
    pub error: &'a str,
}

fn paths(list: &[RepoPath]) -> Vec<WirePath> {
    list.iter().map(WirePath::from_repo_path).collect()
}

fn reasons(list: &[(RepoPath, String)]) -> Vec<PathReason<'_>> {
    list.iter()
        .map(|(path, reason)| PathReason {
            path: WirePath::from_repo_path(path),
            reason,
        })
        .collect()
}

fn skipped(list: &[Skipped]) -> Vec<PathReason<'_>> {
    list.iter()
        .map(|s| PathReason {
            path: s.path.clone(),
            reason: &s.reason,
        })
        .collect()
}

/// How a capture was served: by the watch daemon's answer, or by a walk.
#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum ScanWay {
    Watch,
    Full,
}

/// How a snapshot's capture was served: `mode` is `watch` when the watch daemon vouched that
/// nothing changed, `full` for a walk (with `--watch`, `fallback` says why).
#[derive(Serialize)]
pub struct ScanCounts<'a> {
    pub mode: ScanWay,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a str>,
    pub from_cache: u64,
    pub from_index: u64,
    pub read: u64,
}

/// `snapshot`: the checkpoint taken (or the existing one, `created: false`).
#[derive(Serialize)]
pub struct SnapshotRecord<'a> {
    pub id: &'a str,
    pub short: &'a str,
    pub created: bool,
    pub provider: &'a str,
    pub commit: Option<&'a str>,
    pub kind: crate::records::Kind,
    pub files: u64,
    pub total_files: u64,
    pub bytes: u64,
    pub skipped: Vec<PathReason<'a>>,
    pub scan: ScanCounts<'a>,
    /// Checkpoints the configured automatic prune removed after this one was taken.
    pub pruned: &'a [String],
}
record_type!(SnapshotRecord, "snapshot");

impl<'a> SnapshotRecord<'a> {
    pub fn new(outcome: &'a SnapshotOutcome, pruned: &'a [String]) -> Self {
        let record = &outcome.record;
        SnapshotRecord {
            id: &record.id,
            short: record.short(),
            created: outcome.created,
            provider: &record.provider,
            commit: record.commit.as_deref(),
            kind: record.kind,
            // A no-op reports what it added (nothing), not the previous checkpoint's numbers.
            files: if outcome.created { record.files } else { 0 },
            total_files: record.total_files,
            bytes: if outcome.created { record.bytes } else { 0 },
            skipped: skipped(&outcome.not_protected),
            scan: ScanCounts {
                mode: match outcome.scan_mode {
                    ScanMode::Watch => ScanWay::Watch,
                    ScanMode::Full { .. } => ScanWay::Full,
                },
                fallback: match &outcome.scan_mode {
                    ScanMode::Full { fallback } => fallback.as_deref(),
                    ScanMode::Watch => None,
                },
                from_cache: outcome.scan.from_cache,
                from_index: outcome.scan.from_index,
                read: outcome.scan.read,
            },
            pruned,
        }
    }
}

/// `list` (one per checkpoint) and `show` (with `tree`, `workspace` and `skipped`).
#[derive(Serialize)]
pub struct CheckpointRecord<'a> {
    pub id: &'a str,
    pub short: &'a str,
    pub provider: &'a str,
    pub commit: Option<&'a str>,
    pub time: &'a str,
    pub session: Option<&'a str>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub trigger: Option<&'a str>,
    pub kind: crate::records::Kind,
    pub files: u64,
    pub total_files: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<&'a WirePath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Vec<PathReason<'a>>>,
}
record_type!(CheckpointRecord, "checkpoint");

impl<'a> CheckpointRecord<'a> {
    /// The record as `list` prints it.
    pub fn listed(record: &'a Record) -> Self {
        CheckpointRecord {
            id: &record.id,
            short: record.short(),
            provider: &record.provider,
            commit: record.commit.as_deref(),
            time: &record.time,
            session: record.session.as_deref(),
            turn: record.turn,
            step: record.step,
            trigger: record.trigger.as_deref(),
            kind: record.kind,
            files: record.files,
            total_files: record.total_files,
            bytes: record.bytes,
            tree: None,
            workspace: None,
            skipped: None,
        }
    }

    /// The record as `show` prints it: everything `list` says, plus tree, workspace and skipped.
    pub fn shown(record: &'a Record) -> Self {
        CheckpointRecord {
            tree: Some(&record.tree),
            workspace: Some(&record.workspace),
            skipped: Some(skipped(&record.skipped)),
            ..Self::listed(record)
        }
    }
}

/// `preview`: the read-only plan of a restore.
#[derive(Serialize)]
pub struct PreviewRecord<'a> {
    pub id: &'a str,
    pub overwrite: Vec<WirePath>,
    pub unchanged: usize,
    pub created_after: Vec<WirePath>,
    pub delete: Vec<WirePath>,
    pub conflicts: Vec<PathReason<'a>>,
    pub not_protected: Vec<PathReason<'a>>,
    pub exact: bool,
}
record_type!(PreviewRecord, "preview");

impl<'a> PreviewRecord<'a> {
    pub fn new(preview: &'a Preview) -> Self {
        PreviewRecord {
            id: &preview.id,
            overwrite: paths(&preview.overwrite),
            unchanged: preview.unchanged,
            created_after: paths(&preview.created_after),
            delete: paths(&preview.delete),
            conflicts: reasons(&preview.conflicts),
            not_protected: reasons(&preview.not_protected),
            exact: preview.exact,
        }
    }
}

/// `restore` (and `doctor --fix` settling an interrupted restore): what was done.
#[derive(Serialize)]
pub struct RestoreRecord<'a> {
    pub id: &'a str,
    pub guard: Option<&'a str>,
    pub guard_created: bool,
    /// How the guard was taken: `watch` (the daemon named the changed paths) or `full`; null
    /// without a guard.
    pub guard_scan: Option<ScanWay>,
    /// With `guard_scan: "full"` where the daemon was asked: why its answer was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_fallback: Option<&'a str>,
    pub written: Vec<WirePath>,
    pub deleted: Vec<WirePath>,
    pub left: Vec<WirePath>,
    /// Paths the guard could not protect, so the restore never touched them (with why).
    pub not_protected: Vec<PathReason<'a>>,
    pub unchanged: usize,
    pub failed: Vec<PathError<'a>>,
    pub verified: bool,
}
record_type!(RestoreRecord, "restore");

impl<'a> RestoreRecord<'a> {
    pub fn new(report: &'a RestoreReport) -> Self {
        RestoreRecord {
            id: &report.id,
            guard: report.guard.as_deref(),
            guard_created: report.guard_created,
            guard_scan: report.guard.as_ref().map(|_| {
                if report.guard_watched {
                    ScanWay::Watch
                } else {
                    ScanWay::Full
                }
            }),
            guard_fallback: report.guard_fallback.as_deref(),
            written: paths(&report.written),
            deleted: paths(&report.deleted),
            left: paths(&report.left),
            not_protected: reasons(&report.not_protected),
            unchanged: report.unchanged,
            failed: report
                .failed
                .iter()
                .map(|(path, error)| PathError {
                    path: WirePath::from_repo_path(path),
                    error,
                })
                .collect(),
            verified: report.verified,
        }
    }
}

/// Git's mode for an entry kind, as `diff` shows it.
pub fn mode(kind: Option<EntryKind>) -> Option<&'static str> {
    kind.map(|k| match k {
        EntryKind::File => "100644",
        EntryKind::Executable => "100755",
        EntryKind::Symlink => "120000",
        EntryKind::Gitlink => "160000",
    })
}

/// `diff.file`: one changed path.
#[derive(Serialize)]
pub struct DiffFileRecord {
    pub path: WirePath,
    pub status: &'static str,
    pub added: usize,
    pub removed: usize,
    pub binary: bool,
    pub old_mode: Option<&'static str>,
    pub new_mode: Option<&'static str>,
}

impl WireRecord for DiffFileRecord {
    fn record_type(&self) -> &'static str {
        "diff.file"
    }
}

impl DiffFileRecord {
    pub fn new(file: &FileDiff) -> Self {
        DiffFileRecord {
            path: WirePath::from_repo_path(&file.change.path),
            status: file.change.status.letter(),
            added: file.added,
            removed: file.removed,
            binary: file.binary,
            old_mode: mode(file.change.old.map(|i| i.kind)),
            new_mode: mode(file.change.new.map(|i| i.kind)),
        }
    }
}

/// `diff`: the totals, after the `diff.file` records.
#[derive(Serialize)]
pub struct DiffRecord<'a> {
    pub from: &'a str,
    /// None: the worktree as it is now.
    pub to: Option<&'a str>,
    pub files: usize,
    pub added: usize,
    pub removed: usize,
}
record_type!(DiffRecord, "diff");

/// Checkpoints of one session, in `status`.
#[derive(Serialize)]
pub struct SessionCount<'a> {
    pub session: Option<&'a str>,
    pub count: usize,
}

/// `status`: what is protected now, the checkpoints, and disk use.
#[derive(Serialize)]
pub struct StatusRecord<'a> {
    pub provider: &'a str,
    pub workspace: WirePath,
    pub protected: usize,
    pub not_protected: Vec<PathReason<'a>>,
    pub checkpoints: usize,
    pub sessions: Vec<SessionCount<'a>>,
    pub oldest: Option<&'a str>,
    pub newest: Option<&'a str>,
    pub ckpt_only_bytes: u64,
    pub shared_bytes: u64,
    pub blobs: usize,
    /// Whether snapshots ask a watch daemon what changed.
    pub watch: WatchUse,
    pub retention: RetentionStatus<'a>,
}
record_type!(StatusRecord, "status");

/// `status.retention`: when retention runs on its own, its policy, and what it last removed.
#[derive(Serialize)]
pub struct RetentionStatus<'a> {
    pub auto: AutoRetention,
    /// With `auto: "periodic"`: at most this often.
    pub interval_secs: Option<u64>,
    /// 0: no age limit.
    pub max_age_secs: u64,
    pub max_per_session: usize,
    pub quota_bytes: u64,
    pub last_removal: Option<&'a crate::records::retention::AutoRemoval>,
}

/// `status.retention.auto`.
#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AutoRetention {
    /// `retention.auto_prune = true`: after every snapshot that created a checkpoint.
    EverySnapshot,
    /// The default: after a snapshot that created a checkpoint, at most every `interval_secs`.
    Periodic,
    /// `retention.auto_prune = false`: only `ckpt prune`.
    Off,
}

/// `status.watch`: whether a watch daemon runs for the workspace and whether snapshots ask it.
#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WatchUse {
    /// A daemon runs and every snapshot asks it first.
    Used,
    /// None runs: snapshots walk the worktree.
    NotRunning,
    /// The config says `watch = false`: snapshots walk, whether a daemon runs or not.
    TurnedOff,
    /// One runs but did not answer (stopped, or wedged): snapshots wait for it, then walk.
    NotAnswering,
}

impl<'a> StatusRecord<'a> {
    pub fn not_protected(list: &'a [(RepoPath, String)], unnamable: &'a [Skipped]) -> Vec<PathReason<'a>> {
        let mut all = reasons(list);
        all.extend(skipped(unnamable));
        all
    }
}

/// `prune.remove`: one checkpoint the retention plan removes (or would, `done: false`).
#[derive(Serialize)]
pub struct PruneRemoveRecord<'a> {
    pub id: &'a str,
    pub rule: &'a str,
    pub done: bool,
}
record_type!(PruneRemoveRecord, "prune.remove");

/// `prune`: the totals.
#[derive(Serialize)]
pub struct PruneRecord {
    pub removed: usize,
    pub planned: usize,
    pub kept: usize,
    pub dry_run: bool,
}

impl WireRecord for PruneRecord {
    fn record_type(&self) -> &'static str {
        "prune"
    }
}

/// Which command removed checkpoints.
#[derive(Clone, Copy)]
pub enum Removal {
    Delete,
    Clear,
}

impl Removal {
    pub fn name(self) -> &'static str {
        match self {
            Removal::Delete => "delete",
            Removal::Clear => "clear",
        }
    }
}

/// `delete` and `clear`: the ids removed.
#[derive(Serialize)]
pub struct RemovedRecord<'a> {
    #[serde(skip)]
    pub by: Removal,
    pub removed: &'a [String],
}

impl WireRecord for RemovedRecord<'_> {
    fn record_type(&self) -> &'static str {
        self.by.name()
    }
}

/// `gc`: the copy store's garbage collection.
#[derive(Serialize)]
pub struct GcRecord {
    pub live_objects: usize,
    pub removed: usize,
    pub removed_bytes: u64,
    pub kept_young: usize,
    pub dry_run: bool,
}

impl WireRecord for GcRecord {
    fn record_type(&self) -> &'static str {
        "gc"
    }
}

/// Which health command found a problem.
#[derive(Clone, Copy)]
pub enum Check {
    Audit,
    Doctor,
}

/// `audit.problem` and `doctor.problem`; also an entry of doctor's `remaining`.
#[derive(Serialize)]
pub struct ProblemRecord<'a> {
    #[serde(skip)]
    pub found_by: Check,
    pub code: &'a str,
    pub message: &'a str,
    pub id: Option<&'a str>,
}

impl WireRecord for ProblemRecord<'_> {
    fn record_type(&self) -> &'static str {
        match self.found_by {
            Check::Audit => "audit.problem",
            Check::Doctor => "doctor.problem",
        }
    }
}

impl<'a> ProblemRecord<'a> {
    pub fn new(found_by: Check, problem: &'a Problem) -> Self {
        ProblemRecord {
            found_by,
            code: problem.code,
            message: &problem.message,
            id: problem.id.as_deref(),
        }
    }
}

/// `audit`: the verdict.
#[derive(Serialize)]
pub struct AuditRecord {
    pub ok: bool,
    pub records: usize,
    pub refs: usize,
    pub problems: usize,
}

impl WireRecord for AuditRecord {
    fn record_type(&self) -> &'static str {
        "audit"
    }
}

/// `doctor`: what it did (or would do) and what is left.
#[derive(Serialize)]
pub struct DoctorRecord<'a> {
    pub fixed: bool,
    pub problems: usize,
    pub actions: &'a [String],
    pub remaining: Vec<ProblemRecord<'a>>,
}
record_type!(DoctorRecord, "doctor");

/// `demo`: the guided demo passed every check (a failed check is an `error`, `demo_failed`).
#[derive(Serialize)]
pub struct DemoRecord {
    pub ok: bool,
    /// Where the scratch repository was kept (`--keep`), else none: it was removed.
    pub kept: Option<WirePath>,
}

impl WireRecord for DemoRecord {
    fn record_type(&self) -> &'static str {
        "demo"
    }
}

/// `completions`: the completion script for `shell`.
#[derive(Serialize)]
pub struct CompletionsRecord<'a> {
    pub shell: &'a str,
    pub script: &'a str,
}
record_type!(CompletionsRecord, "completions");

/// `man`: the manual page, as roff.
#[derive(Serialize)]
pub struct ManRecord<'a> {
    pub roff: &'a str,
}
record_type!(ManRecord, "man");

/// `integrate`: what `ckpt integrate` did (or, with `--dry-run`, would do) to an agent's
/// settings file.
#[derive(Serialize)]
pub struct IntegrateRecord<'a> {
    pub agent: &'a str,
    pub file: WirePath,
    /// `added`, `updated` (an older ckpt entry replaced), `removed` or `unchanged`.
    pub action: &'a str,
    pub written: bool,
    /// Where the old file was kept, when one was there and this wrote a new one.
    pub backup: Option<WirePath>,
    /// Claude Code's `/ckpt` command file, when this wrote (or removed) it.
    pub command_file: Option<WirePath>,
    /// The change as a unified diff (empty when unchanged).
    pub diff: &'a str,
}
record_type!(IntegrateRecord, "integrate");

/// `watch`: what `watch start` or `watch stop` did.
#[derive(Serialize)]
pub struct WatchRecord {
    pub action: &'static str,
    pub running: bool,
    pub started: bool,
}

impl WireRecord for WatchRecord {
    fn record_type(&self) -> &'static str {
        "watch"
    }
}

/// `watch.status`: the daemon's state, or `running: false`.
#[derive(Serialize)]
pub struct WatchStatusRecord<'a> {
    pub running: bool,
    pub pid: Option<u32>,
    pub token: Option<&'a str>,
    pub watched_dirs: usize,
    pub events_seen: u64,
    pub pending_changes: usize,
    pub last_fallback: Option<&'a str>,
    pub broken: Option<&'a str>,
}
record_type!(WatchStatusRecord, "watch.status");

impl<'a> WatchStatusRecord<'a> {
    pub fn new(status: Option<&'a StatusAnswer>) -> Self {
        WatchStatusRecord {
            running: status.is_some(),
            pid: status.map(|s| s.pid),
            token: status.map(|s| s.token.as_str()),
            watched_dirs: status.map_or(0, |s| s.watched_dirs),
            events_seen: status.map_or(0, |s| s.events_seen),
            pending_changes: status.map_or(0, |s| s.pending_changes),
            last_fallback: status.and_then(|s| s.last_fallback.as_deref()),
            broken: status.and_then(|s| s.broken.as_deref()),
        }
    }
}

/// `help`: `--help` or `--version` asked with `--json`: the text clap would print.
#[derive(Serialize)]
pub struct HelpRecord<'a> {
    pub text: &'a str,
}
record_type!(HelpRecord, "help");

// Trace records.

/// How a logged tool call ended, as `trace.node` says it.
#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum TraceOutcome {
    Ok,
    Failed,
    Unknown,
}

impl TraceOutcome {
    pub fn of(outcome: crate::records::sessionlog::CallOutcome) -> Self {
        use crate::records::sessionlog::CallOutcome;
        match outcome {
            CallOutcome::Ok => TraceOutcome::Ok,
            CallOutcome::Failed => TraceOutcome::Failed,
            CallOutcome::Unknown => TraceOutcome::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TraceOutcome::Ok => "ok",
            TraceOutcome::Failed => "failed",
            TraceOutcome::Unknown => "unknown",
        }
    }
}

#[derive(Serialize)]
pub struct LogProblem<'a> {
    pub line: usize,
    pub message: &'a str,
}

/// `trace.session`: one harness session of this workspace.
#[derive(Serialize)]
pub struct TraceSessionRecord<'a> {
    pub session: &'a str,
    pub log: String,
    pub cwd: Option<&'a str>,
    pub created_at: Option<&'a str>,
    pub parent_session: Option<&'a str>,
    pub calls: usize,
    pub checkpoints: usize,
    pub problems: Vec<LogProblem<'a>>,
}

impl WireRecord for TraceSessionRecord<'_> {
    fn record_type(&self) -> &'static str {
        "trace.session"
    }
}

#[derive(Serialize)]
pub struct TraceFile<'a> {
    pub path: WirePath,
    pub rebuildable: bool,
    /// Bytes of the rebuilt content (`null`: the file does not exist after the call).
    pub bytes: Option<usize>,
    /// The rebuilt content's blob id in this repository, comparable with a checkpoint's.
    pub id: Option<String>,
    /// The content was worked back from the worktree file now (undoing later edits), not
    /// replayed forwards from the log.
    pub worked_back: bool,
    pub reason: Option<&'a str>,
}

/// `trace.node`: one tool call and what the trace knows of the files it changed.
#[derive(Serialize)]
pub struct TraceNodeRecord<'a> {
    pub session: &'a str,
    pub node: String,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub time: Option<&'a str>,
    pub outcome: TraceOutcome,
    pub path: Option<WirePath>,
    pub refused: Option<&'a str>,
    pub files: Vec<TraceFile<'a>>,
}

impl WireRecord for TraceNodeRecord<'_> {
    fn record_type(&self) -> &'static str {
        "trace.node"
    }
}

#[derive(Serialize)]
pub struct TraceDiffFile {
    pub path: WirePath,
    /// `added`, `deleted`, `modified`, `same`, or `unknown` (a side the trace cannot rebuild).
    pub status: &'static str,
    pub added: usize,
    pub removed: usize,
    pub binary: bool,
    pub reason: Option<String>,
    /// Whether the trace rebuilds the newer side (`false`: the file cannot be put back as it
    /// was there; `true` with status `unknown`: only the older side is unknown, so there is no
    /// diff to show).
    pub rebuildable: bool,
}

/// `trace.diff`: the files of one trace diff.
#[derive(Serialize)]
pub struct TraceDiffRecord {
    pub from: String,
    pub to: String,
    pub files: Vec<TraceDiffFile>,
}

impl WireRecord for TraceDiffRecord {
    fn record_type(&self) -> &'static str {
        "trace.diff"
    }
}

#[derive(Serialize)]
pub struct NotRestored {
    pub path: WirePath,
    pub reason: String,
}

/// `trace.restore`: which files a trace restore could put back, and the checkpoint it made of
/// them (the `restore` record that follows says what was written).
#[derive(Serialize)]
pub struct TraceRestoreRecord<'a> {
    pub node: &'a str,
    /// The checkpoint of the rebuilt state (`null` for a dry run).
    pub checkpoint: Option<&'a str>,
    pub rebuilt: Vec<WirePath>,
    pub not_restored: Vec<NotRestored>,
}

impl WireRecord for TraceRestoreRecord<'_> {
    fn record_type(&self) -> &'static str {
        "trace.restore"
    }
}

/// `error`: any failure; `code` is one of the error codes docs/json.md lists.
#[derive(Serialize)]
pub struct ErrorRecord<'a> {
    pub code: &'a str,
    pub message: &'a str,
}
record_type!(ErrorRecord, "error");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_starts_with_version_and_type_and_keeps_field_names() {
        let record = ErrorRecord {
            code: "usage",
            message: "bad",
        };
        let line = serde_json::to_string(&Envelope::of(&record)).unwrap_or_default();
        assert_eq!(line, r#"{"v":1,"type":"error","code":"usage","message":"bad"}"#);
    }

    #[test]
    fn the_type_of_a_shared_shape_follows_who_made_it() {
        let removed = ["a".to_owned()];
        let delete = RemovedRecord {
            by: Removal::Delete,
            removed: &removed,
        };
        let clear = RemovedRecord {
            by: Removal::Clear,
            removed: &removed,
        };
        let text = |r: &RemovedRecord<'_>| serde_json::to_string(&Envelope::of(r)).unwrap_or_default();
        assert_eq!(text(&delete), r#"{"v":1,"type":"delete","removed":["a"]}"#);
        assert_eq!(text(&clear), r#"{"v":1,"type":"clear","removed":["a"]}"#);
    }
}
