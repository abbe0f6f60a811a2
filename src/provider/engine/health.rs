//! `audit` and `doctor` for the git provider: checks that registry, refs, objects and journal
//! agree, and (doctor `--fix`) repairs what can be repaired — rebuilding records from pinned
//! commits, re-pinning or dropping records whose ref is gone, finishing or rolling back an
//! interrupted restore, removing temp files of dead processes. Audit never writes anything.

use std::collections::HashSet;

use super::restore::STAGING_DIR;
use super::{Engine, Reconciled};
use crate::provider::{
    AuditReport, CkptError, Confirmation, DoctorReport, JournalFix, Problem, Selection, SnapshotRequest,
};
use crate::records::{JournalOp, Kind, Record, RecordsError, RestoreJournal};
use crate::verbs::{temp_file_owner, DiskItem, IdSet, ObjectId, PinRef, RepoPath};

/// A pack writer's temp file untouched this long is a killed write's leftover: no pack write
/// pauses for a day, ckpt's own last seconds.
/// A write in progress keeps touching its temp file; none leaves it untouched for an hour.
pub(super) const STALE_PACK_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A `packed-refs.lock` older than this was left by a killed process (git holds it for
/// milliseconds).
const STALE_PACKED_REFS_LOCK: std::time::Duration = std::time::Duration::from_secs(600);

fn problem(code: &'static str, message: String, id: Option<&str>) -> Problem {
    Problem {
        code,
        message,
        id: id.map(str::to_owned),
    }
}

impl Engine {
    /// Points the pin of checkpoint `id` at it: made if absent, moved (compare-and-swap) from
    /// whatever it points at now.
    /// Makes `id`'s pin point at it again. Whatever stands at the pin and reads as no ref
    /// (garbage, a link, a FIFO) is first moved into the state directory, never deleted; where it
    /// went is returned.
    fn repin(&self, id: &ObjectId) -> Result<Option<std::path::PathBuf>, CkptError> {
        let pin = PinRef::for_checkpoint(&self.workspace, id);
        let (current, aside) = match self.vault.read_pin(&pin) {
            Ok(current) => (current, None),
            Err(unreadable) => match self.vault.set_aside_unreadable_pin(&pin, &self.state_dir)? {
                Some(aside) => (self.vault.read_pin(&pin)?, Some(aside)),
                None => return Err(unreadable.into()),
            },
        };
        match current {
            Some(current) if current == *id => {}
            current => self.vault.pin(&pin, id, current.as_ref())?,
        }
        Ok(aside)
    }

    /// Every object a checkpoint needs must be readable and hash to its id: commit, all trees,
    /// every blob. `verified` carries what earlier checkpoints already proved.
    fn check_objects(&self, record: &Record, verified: &mut IdSet) -> Result<(), String> {
        let commit = record.object_id()?;
        let info = self.vault.read_commit(&commit).map_err(|e| e.to_string())?;
        if info.tree.to_hex() != record.tree {
            return Err(format!(
                "record says tree {} but the commit has {}",
                record.tree, info.tree
            ));
        }
        // Names first (hostile entries), then every object's content against its id.
        self.vault.validate_tree(&info.tree).map_err(|e| e.to_string())?;
        self.vault.verify_objects(&commit, verified).map_err(|e| e.to_string())
    }

    /// Why checkpoint `commit` cannot be read whole because an object of it is missing (not
    /// merely damaged), if it cannot.
    fn missing_object_of(&self, commit: &ObjectId) -> Option<String> {
        match self.unusable_object_of(commit) {
            Some((ObjectFailure::Missing, why)) => Some(why),
            _ => None,
        }
    }

    /// Why checkpoint `commit` cannot be read whole, if it cannot, and whether an object of it
    /// is missing or damaged (there, but its bytes are not what its id says, or not of its
    /// kind: git's fsck reports such an object whatever holds it). A hostile tree, whose
    /// objects hash right, is neither.
    fn unusable_object_of(&self, commit: &ObjectId) -> Option<(ObjectFailure, String)> {
        if !self.vault.has_object(commit) {
            return Some((ObjectFailure::Missing, format!("its commit {commit} is gone")));
        }
        let failure = self.vault.verify_objects(commit, &mut IdSet::default()).err()?;
        let kind = match failure.error {
            crate::verbs::VerbError::MissingObject { .. } => ObjectFailure::Missing,
            crate::verbs::VerbError::UnusableObject { .. } => ObjectFailure::Damaged,
            _ => return None,
        };
        Some((kind, failure.to_string()))
    }

    fn pending_journal(&self) -> Result<Option<RestoreJournal>, CkptError> {
        match crate::records::Registry::open_existing(&self.state_dir)? {
            Some(registry) => Ok(registry.read_journal()?),
            None => Ok(None),
        }
    }

    /// Temp files an interrupted restore left in the worktree, as far as there is evidence that
    /// ckpt made them: a restore journal is pending, the name carries that restore's pid, the
    /// file sits in a directory that restore was writing to, and its content is (a beginning
    /// of) what that restore wrote or moved aside there — the target's or the guard's content
    /// of a path in that directory. Anything else that merely looks like a temp file is the
    /// user's and is never listed (so never removed).
    pub(super) fn stale_temp_files(&self, journal: Option<&RestoreJournal>) -> Result<Vec<RepoPath>, CkptError> {
        let Some(journal) = journal else {
            return Ok(Vec::new());
        };
        let pid = journal.pid;
        let op_paths: Vec<RepoPath> = journal.ops.iter().map(|(_, path)| path.clone()).collect();
        let dirs: HashSet<Option<RepoPath>> = op_paths.iter().map(RepoPath::parent).collect();
        let listing = self.vault.list_worktree()?;
        let named: Vec<RepoPath> = listing
            .untracked
            .into_iter()
            .filter(|p| p.components().last().and_then(temp_file_owner) == Some(pid) && dirs.contains(&p.parent()))
            .collect();
        if named.is_empty() {
            return Ok(named);
        }
        // The content each side of the interrupted restore has at the paths it was changing,
        // read one blob at a time for the temp files of that path's directory.
        let mut trees = Vec::new();
        let records = self.records()?;
        for id in [&journal.guard, &journal.target] {
            if let Some(record) = records.iter().find(|r| r.id == id.to_string()) {
                trees.push(self.checkpoint_tree(record)?);
            }
        }
        let mut made_by_the_restore = Vec::new();
        for temp in named {
            let full = self.workdir.join(temp.to_os_path());
            let content = match std::fs::symlink_metadata(&full) {
                Ok(meta) if meta.file_type().is_symlink() => std::fs::read_link(&full)
                    .map(|target| target.as_os_str().as_encoded_bytes().to_vec())
                    .ok(),
                Ok(meta) if meta.is_file() => crate::verbs::open_no_follow(&full)
                    .and_then(|mut file| {
                        let mut bytes = Vec::new();
                        std::io::Read::read_to_end(&mut file, &mut bytes).map(|_| bytes)
                    })
                    .ok(),
                _ => None,
            };
            let Some(content) = content else { continue };
            let mut matched = false;
            'paths: for path in op_paths.iter().filter(|p| p.parent() == temp.parent()) {
                for item in trees.iter().filter_map(|tree| tree.get(path)) {
                    if self.vault.read_blob(&item.id)?.starts_with(&content) {
                        matched = true;
                        break 'paths;
                    }
                }
            }
            if matched {
                made_by_the_restore.push(temp);
            }
        }
        Ok(made_by_the_restore)
    }

    pub(super) fn audit_report(&self) -> Result<AuditReport, CkptError> {
        let mut report = AuditReport::default();
        if let Err(error) = crate::records::Registry::check_not_linked(&self.state_dir) {
            // Nothing is read through the link; remove it, then run ckpt again.
            report
                .problems
                .push(problem("unsafe_state_dir", error.to_string(), None));
            return Ok(report);
        }
        for error in crate::records::Registry::unsafe_lock_files(&self.state_dir) {
            // Every command refuses it; the user removes it (it is never removed for them).
            report
                .problems
                .push(problem("unsafe_state_dir", error.to_string(), None));
        }
        let stored = match self.stored_records() {
            Ok(records) => records,
            Err(error @ CkptError::Records(RecordsError::UnsupportedVersion { .. })) => {
                // Written by a newer ckpt: nothing else can be judged, and nothing is rebuilt.
                report.problems.push(problem(
                    "unsupported_version",
                    format!("{error}; use the ckpt that wrote it (nothing here will rewrite it)"),
                    None,
                ));
                return Ok(report);
            }
            Err(error) => {
                report
                    .problems
                    .push(problem("corrupt_registry", error.to_string(), None));
                Vec::new()
            }
        };
        let reconciled = self.reconcile_every_pin(stored)?;
        report.records = reconciled.records.len() - reconciled.rebuilt.len();
        let unpinned: HashSet<&String> = reconciled.unpinned.iter().collect();
        report.refs = reconciled.records.len() - unpinned.len() + reconciled.unreadable_pins.len();
        self.pin_problems(&reconciled, &mut report.problems);
        self.checkpoint_problems(&reconciled, &mut report.problems)?;
        self.leftover_problems(&mut report.problems)?;
        Ok(report)
    }

    /// Pins and records that do not match: a pin with no record, a record with no pin, pins
    /// that cannot be read or are no pin of ckpt's.
    fn pin_problems(&self, reconciled: &Reconciled, problems: &mut Vec<Problem>) {
        for id in &reconciled.rebuilt {
            problems.push(problem(
                "ref_without_record",
                format!("checkpoint {id} is pinned but missing from the registry (doctor --fix rebuilds it from the commit)"),
                Some(id),
            ));
        }
        for id in &reconciled.unpinned {
            problems.push(problem(
                "record_without_ref",
                format!("record {id} has no ref under refs/ckpt/, so git gc may drop it"),
                Some(id),
            ));
        }
        for (name, why) in &reconciled.unreadable_pins {
            problems.push(problem("bad_ref", format!("{name}: {why}"), None));
        }
        for (name, what) in self.vault.unreadable_loose_pins(&self.workspace) {
            let id = name.rsplit('/').next().filter(|id| ObjectId::from_hex(id).is_ok());
            problems.push(problem(
                "unreadable_pin",
                match id {
                    Some(_) => format!("{name} is {what}, not a ref file ckpt wrote; every use of its checkpoint refuses it (doctor --fix moves it into the state directory and re-pins)"),
                    None => format!("{name} is {what}; ckpt does not follow it (replace the link with the directory itself)"),
                },
                id,
            ));
        }
        for name in &reconciled.foreign_refs {
            problems.push(problem("foreign_ref", format!("{name} is not a ckpt pin"), None));
        }
    }

    /// Checkpoints that cannot be restored (a damaged or missing object, a hostile tree), and
    /// quarantined ones whose objects are gone.
    fn checkpoint_problems(&self, reconciled: &Reconciled, problems: &mut Vec<Problem>) -> Result<(), CkptError> {
        let unpinned: HashSet<&String> = reconciled.unpinned.iter().collect();
        let mut verified = IdSet::default();
        for record in reconciled.records.iter().filter(|r| !unpinned.contains(&r.id)) {
            if let Err(why) = self.check_objects(record, &mut verified) {
                let pin = record
                    .object_id()
                    .map(|id| PinRef::for_checkpoint(&self.workspace, &id).as_str().to_owned())
                    .unwrap_or_default();
                problems.push(problem(
                    "unreadable_checkpoint",
                    format!(
                        "{} ({pin}): {why}; it cannot be restored (doctor --fix moves the ref aside to refs/ckpt/quarantine/, keeping its objects)",
                        record.short()
                    ),
                    Some(&record.id),
                ));
            }
        }
        // A quarantined checkpoint keeps its objects for a look, but one whose objects are gone
        // keeps nothing: its ref makes git's own gc and fsck fail. One with a damaged object
        // (its bytes do not hash to its id) is kept, but git's fsck reports that object whatever
        // holds it, so the repository is not called consistent while it is there.
        for (aside, commit) in self.vault.quarantined_pins(&self.workspace)? {
            let Some((failure, why)) = self.unusable_object_of(&commit) else {
                continue;
            };
            if failure == ObjectFailure::Missing {
                problems.push(problem(
                    "quarantined_missing_objects",
                    format!(
                        "{} keeps a checkpoint whose objects are gone ({why}); git's gc and fsck fail on it (doctor --fix removes the ref)",
                        aside.as_str()
                    ),
                    Some(&commit.to_hex()),
                ));
            } else {
                problems.push(problem(
                    "quarantined_damaged_objects",
                    format!(
                        "{} keeps a checkpoint with a damaged object ({why}); git fsck reports that object whichever ref holds it. ckpt never deletes object files: replace or remove the damaged one (git fsck names it), and `git update-ref -d {}` drops the quarantined checkpoint",
                        aside.as_str(),
                        aside.as_str()
                    ),
                    Some(&commit.to_hex()),
                ));
            }
        }
        Ok(())
    }

    /// What killed commands left: an interrupted or unreadable restore journal, temp files of
    /// restores, pack writes, staged writes and state writes, keep files, state files that are
    /// not regular files.
    fn leftover_problems(&self, problems: &mut Vec<Problem>) -> Result<(), CkptError> {
        let journal = match self.pending_journal() {
            Ok(journal) => journal,
            Err(CkptError::Records(
                error @ (RecordsError::Corrupt { .. } | RecordsError::UnsupportedVersion { .. }),
            )) => {
                problems.push(problem(
                    "corrupt_journal",
                    format!("{error}; the restore it describes cannot be settled from it (doctor --fix sets it aside; the worktree is left as it is)"),
                    None,
                ));
                None
            }
            Err(error) => return Err(error),
        };
        for path in self.stale_temp_files(journal.as_ref())? {
            problems.push(problem(
                "temp_file",
                format!("leftover temp file {}", path.display()),
                None,
            ));
        }
        for temp in self.vault.stale_pack_temps(STALE_PACK_TEMP_AGE) {
            problems.push(problem(
                "pack_temp_file",
                format!(
                    "temp file objects/{} in the object database ({} bytes, untouched for {} h): left by a pack or object write that was killed; it holds no object git uses (doctor --fix removes it, and so does the next snapshot)",
                    temp.name,
                    temp.bytes,
                    temp.untouched.as_secs() / 3600
                ),
                None,
            ));
        }
        for keep in self.vault.stale_pack_keeps(super::STALE_PACK_KEEP) {
            problems.push(problem(
                "stale_keep_file",
                format!(
                    "keep file {keep} in the object database's pack directory, ckpt's own and older than {} min: left by a snapshot killed before its pin; while it stays, git's repack keeps that pack for good (doctor --fix removes it, and so does the next snapshot)",
                    super::STALE_PACK_KEEP.as_secs() / 60
                ),
                None,
            ));
        }
        let stale_pin_locks = self.vault.stale_pin_locks(&self.workspace, super::STALE_PIN_LOCK);
        if let Some(first) = stale_pin_locks.first() {
            problems.push(problem(
                "stale_pin_lock",
                format!(
                    "{} lock file(s) on this workspace's pins, such as {}, older than {} s: left by a ckpt update of its refs (a prune, delete or snapshot) that was killed. Until they go, those checkpoints cannot be pruned and the user's `git gc` fails on them (doctor --fix removes them, and so does the next walking snapshot)",
                    stale_pin_locks.len(),
                    first.display(),
                    super::STALE_PIN_LOCK.as_secs()
                ),
                None,
            ));
        }
        if let Some(age) = self.vault.stale_packed_refs_lock(STALE_PACKED_REFS_LOCK) {
            problems.push(problem(
                "stale_packed_refs_lock",
                format!(
                    "packed-refs.lock in the git directory is {} min old: a git (or ckpt) process that held it was killed. Until it goes, git cannot delete or pack refs (`git branch -d`, `git gc` fail) and ckpt cannot pack its pins; remove it yourself once no git command is running (ckpt never does: whose it is cannot be known)",
                    age.as_secs() / 60
                ),
                None,
            ));
        }
        for (name, bytes) in crate::verbs::dead_staged_files(&self.state_dir.join(STAGING_DIR)) {
            problems.push(problem(
                "staged_temp_file",
                format!(
                    "temp file {} ({bytes} bytes) in the restore staging directory {}: staged by a restore whose process is gone and never moved into place; it holds checkpoint content only, not yours (doctor --fix or the next restore removes it)",
                    String::from_utf8_lossy(&name),
                    self.state_dir.join(STAGING_DIR).display()
                ),
                None,
            ));
        }
        if let Ok(Some(registry)) = crate::records::Registry::open_existing(&self.state_dir) {
            for path in registry.unusable_state_files() {
                problems.push(problem(
                    "unusable_state_file",
                    format!(
                        "{} is not a regular file, so ckpt cannot read the state it holds (doctor --fix sets it aside; that state starts afresh)",
                        path.display()
                    ),
                    None,
                ));
            }
            for temp in registry.abandoned_temp_files() {
                problems.push(problem(
                    "state_temp_file",
                    format!(
                        "temp file {} of a state write whose process is gone (killed mid-write; the file it replaced is whole): clutter only (doctor --fix removes it)",
                        temp.display()
                    ),
                    None,
                ));
            }
        }
        if let Some(journal) = journal {
            let guard = &journal.guard;
            if crate::verbs::process_is_alive(journal.pid) {
                problems.push(problem(
                    "restore_in_progress",
                    format!(
                        "a restore (process {}) is running, or its process id now belongs to another program; its guard {guard} holds the state before it. Run doctor again once it has finished",
                        journal.pid
                    ),
                    None,
                ));
            } else {
                problems.push(problem(
                    "pending_journal",
                    format!("a restore was interrupted; its guard {guard} holds the state before it (doctor --fix rolls back, --fix --complete finishes)"),
                    None,
                ));
            }
        }
        Ok(())
    }

    /// Rolls an interrupted restore back to its guard, or (`Complete`) finishes it — but only
    /// for the paths the journal says it was changing, and only where the disk still shows
    /// either the state before it or its own doing. A path changed since (by the user) is left
    /// as it is and reported; files it never touched are never looked at.
    fn finish_journal(
        &self,
        journal: &RestoreJournal,
        fix: JournalFix,
    ) -> Result<crate::provider::RestoreReport, CkptError> {
        let record_of = |id: &ObjectId| -> Result<Record, CkptError> {
            let id = id.to_string();
            self.records()?
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| CkptError::NotFound(format!("the journal's checkpoint {id} is not in the registry")))
        };
        let guard = record_of(&journal.guard)?;
        let target = record_of(&journal.target)?;
        let before_tree = self.checkpoint_tree(&guard)?;
        let after_tree = self.checkpoint_tree(&target)?;
        let ops = journal
            .ops
            .iter()
            .filter(|(op, _)| matches!(op, JournalOp::Write | JournalOp::Remove));
        let mut eligible = Vec::new();
        let mut changed_since = Vec::new();
        for (op, path) in ops.cloned() {
            let before = before_tree.get(&path).copied();
            let after = if op == JournalOp::Write {
                after_tree.get(&path).copied()
            } else {
                None
            };
            let now = match self.vault.read_worktree_item(&path)? {
                DiskItem::Entry(item) => Some(Some(item)),
                DiskItem::Missing => Some(None),
                _ => None, // a directory, special file or unreachable path: neither side's
            };
            let (undone, done) = match fix {
                JournalFix::RollBack => (before, after),
                JournalFix::Complete => (after, before),
            };
            if now == Some(done) {
                eligible.push(path);
            } else if now != Some(undone) {
                changed_since.push((
                    path,
                    "changed on disk after the restore was interrupted; left as it is".to_owned(),
                ));
            }
        }
        let wanted = match fix {
            JournalFix::RollBack => guard,
            JournalFix::Complete => target,
        };
        let mut report = if eligible.is_empty() {
            // Nothing of the interrupted restore is left to undo (or do): settle its journal,
            // if it is still the one looked at.
            let registry = self.registry()?;
            let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            if registry.read_journal()?.as_ref() == Some(journal) {
                registry.clear_journal(&lock)?;
            }
            crate::provider::RestoreReport {
                id: wanted.id.clone(),
                guard: None,
                guard_created: false,
                guard_watched: false,
                guard_fallback: None,
                written: Vec::new(),
                deleted: Vec::new(),
                left: Vec::new(),
                not_protected: Vec::new(),
                unchanged: 0,
                failed: Vec::new(),
                verified: true,
            }
        } else {
            let request = SnapshotRequest {
                session: None,
                turn: None,
                step: None,
                trigger: Some("doctor".into()),
                kind: Kind::Guard,
                max_file_size: crate::provider::scan::DEFAULT_MAX_FILE_SIZE,
                watch: false,
                opens_turn: false,
            };
            let selection = Selection {
                paths: eligible,
                exact: true,
            };
            self.restore_settling(&wanted, &selection, &request, Confirmation::Given, Some(journal))?
        };
        if !changed_since.is_empty() {
            report.verified = false;
            report.failed.extend(changed_since);
        }
        Ok(report)
    }

    pub(super) fn doctor_report(&self, fix: Option<JournalFix>) -> Result<DoctorReport, CkptError> {
        let audit = self.audit_report()?;
        let mut report = DoctorReport {
            problems: audit.problems.clone(),
            ..DoctorReport::default()
        };
        let has = |code: &str| audit.problems.iter().any(|p| p.code == code);
        if fix.is_some() && has("unsupported_version") {
            return Err(CkptError::Refused(
                "the registry was written by a newer ckpt; doctor --fix will not rebuild it in an older format. Use the newer ckpt".into(),
            ));
        }
        let Some(fix) = fix else {
            report.actions = audit.problems.iter().map(planned_action).collect();
            return Ok(report);
        };
        self.fix_leftovers(&audit, &mut report.actions)?;
        if has("pending_journal") {
            if let Some(journal) = self.pending_journal()? {
                let restored = self.finish_journal(&journal, fix)?;
                report.actions.push(match fix {
                    JournalFix::RollBack => "rolled the interrupted restore back to its guard".into(),
                    JournalFix::Complete => "finished the interrupted restore".into(),
                });
                report.restore = Some(restored);
            }
        }
        self.fix_unusable_checkpoints(&audit, &mut report.actions)?;
        if has("ref_without_record") || has("record_without_ref") || has("corrupt_registry") {
            self.fix_registry(&mut report.actions)?;
        }
        report.fixed = true;
        report.remaining = self.audit_report()?.problems;
        Ok(report)
    }

    /// Removes or sets aside what killed commands left: an unreadable journal, temp files of
    /// restores, state writes, staged writes and pack writes, unreadable pin files (re-pinned)
    /// and the keep files of killed snapshots.
    fn fix_leftovers(&self, audit: &AuditReport, actions: &mut Vec<String>) -> Result<(), CkptError> {
        let has = |code: &str| audit.problems.iter().any(|p| p.code == code);
        if has("corrupt_journal") {
            let registry = self.registry()?;
            let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            if let Some(aside) = registry.set_aside_journal(&lock)? {
                actions.push(format!(
                    "moved the unreadable restore journal to {} (the worktree was left as it is)",
                    aside.display()
                ));
            }
        }
        for path in self.stale_temp_files(self.pending_journal()?.as_ref())? {
            if self.vault.remove_stale_temp(&path, false)? {
                actions.push(format!("removed leftover temp file {}", path.display()));
            }
        }
        for problem in audit.problems.iter().filter(|p| p.code == "unreadable_pin") {
            let Some(id) = problem.id.as_deref().and_then(|id| ObjectId::from_hex(id).ok()) else {
                continue;
            };
            let short = &problem.id.as_deref().unwrap_or_default()[..8];
            actions.push(match self.repin(&id) {
                Ok(Some(aside)) => format!(
                    "moved the unreadable pin of {short} to {} and re-pinned it",
                    aside.display()
                ),
                Ok(None) => format!("re-pinned {short}"),
                Err(e) => format!("could not repair the pin of {short} ({e})"),
            });
        }
        if has("unusable_state_file") {
            let registry = self.registry()?;
            let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            for path in registry.unusable_state_files() {
                let aside = registry.set_aside_state_file(&path, &lock)?;
                actions.push(format!(
                    "moved {}, which was not a regular file, to {}",
                    path.display(),
                    aside.display()
                ));
            }
        }
        if has("stale_pin_lock") {
            let registry = self.registry()?;
            let _lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            for removed in self
                .vault
                .remove_stale_pin_locks(&self.workspace, super::STALE_PIN_LOCK)
            {
                actions.push(format!("removed the stale pin lock {}", removed.display()));
            }
        }
        if has("state_temp_file") {
            let registry = self.registry()?;
            let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            for temp in registry.remove_abandoned_temp_files(&lock)? {
                actions.push(format!(
                    "removed the state write's leftover temp file {}",
                    temp.display()
                ));
            }
        }
        let staging = self.state_dir.join(STAGING_DIR);
        if crate::verbs::any_staged_files(&staging) {
            // Every restore holds this lock while its files are staged: with it, a staged file
            // whose pid is in use again by another process is known for a leftover too.
            let registry = self.registry()?;
            let _lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            for name in crate::verbs::remove_staged_files(&staging, true) {
                actions.push(format!(
                    "removed the restore's leftover staged file {}",
                    String::from_utf8_lossy(&name)
                ));
            }
        }
        for temp in self.vault.stale_pack_temps(STALE_PACK_TEMP_AGE) {
            if self.vault.remove_stale_pack_temp(&temp.name, STALE_PACK_TEMP_AGE)? {
                actions.push(format!(
                    "removed a killed write's leftover temp file {} ({} bytes)",
                    temp.name, temp.bytes
                ));
            }
        }
        let keeps = self.vault.remove_stale_pack_keeps(super::STALE_PACK_KEEP);
        if keeps > 0 {
            actions.push(format!("removed {keeps} keep file(s) of killed snapshots"));
        }
        Ok(())
    }

    /// Checkpoints that cannot be restored: a ref whose objects are gone is removed (it keeps
    /// nothing and breaks git's gc), any other is moved aside to `refs/ckpt/quarantine/` with
    /// its objects kept; their records are dropped.
    fn fix_unusable_checkpoints(&self, audit: &AuditReport, actions: &mut Vec<String>) -> Result<(), CkptError> {
        let has = |code: &str| audit.problems.iter().any(|p| p.code == code);
        let unusable: Vec<&str> = audit
            .problems
            .iter()
            .filter(|p| p.code == "unreadable_checkpoint")
            .filter_map(|p| p.id.as_deref())
            .collect();
        if !unusable.is_empty() {
            let registry = self.registry()?;
            let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
            for id in &unusable {
                let Ok(commit) = ObjectId::from_hex(id) else { continue };
                let pin = PinRef::for_checkpoint(&self.workspace, &commit);
                if self.vault.read_pin(&pin)? != Some(commit) {
                    continue;
                }
                // A ref to a checkpoint whose objects are gone keeps nothing and breaks git's own
                // gc and fsck: it is removed, not moved aside.
                if let Some(why) = self.missing_object_of(&commit) {
                    self.vault.unpin(&pin, &commit)?;
                    actions.push(format!(
                        "removed {} ({why}; the ref kept nothing and broke git's gc) and dropped its record",
                        pin.as_str()
                    ));
                    continue;
                }
                let aside = self.vault.quarantine(&pin, &commit)?;
                actions.push(format!(
                    "moved {} aside to {} (nothing deleted; its objects are kept) and dropped its record",
                    pin.as_str(),
                    aside.as_str()
                ));
            }
            if let Ok(stored) = registry.load() {
                let kept: Vec<Record> = stored
                    .into_iter()
                    .filter(|r| !unusable.contains(&r.id.as_str()))
                    .collect();
                registry.save(&kept, &lock)?;
            }
        }
        if has("quarantined_missing_objects") {
            for (aside, commit) in self.vault.quarantined_pins(&self.workspace)? {
                if let Some(why) = self.missing_object_of(&commit) {
                    self.vault.unpin(&aside, &commit)?;
                    actions.push(format!("removed {} ({why}; it broke git's gc)", aside.as_str()));
                }
            }
        }
        Ok(())
    }

    /// The registry rebuilt from the pins: an unreadable one set aside, a record of an intact
    /// checkpoint re-pinned (never dropped), one whose commit is gone dropped, and a record
    /// rebuilt from its commit for a pin that has none.
    fn fix_registry(&self, actions: &mut Vec<String>) -> Result<(), CkptError> {
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        let stored = match registry.load() {
            Ok(records) => records,
            Err(_) => {
                for aside in registry.set_aside_corrupt(&lock)? {
                    actions.push(format!("moved the unreadable registry to {}", aside.display()));
                }
                Vec::new()
            }
        };
        let reconciled = self.reconcile_every_pin(stored)?;
        let unpinned: HashSet<String> = reconciled.unpinned.iter().cloned().collect();
        let mut kept = Vec::new();
        for record in reconciled.records {
            if !unpinned.contains(&record.id) {
                kept.push(record);
                continue;
            }
            let intact = record
                .object_id()
                .ok()
                .filter(|_| self.check_objects(&record, &mut IdSet::default()).is_ok());
            let Some(id) = intact else {
                actions.push(format!("dropped record {} (its commit is gone)", record.short()));
                continue;
            };
            // A record whose checkpoint is intact is never dropped, or its checkpoint would
            // be left to git's gc: its pin is made, or moved back from whatever it was made
            // to point at.
            match self.repin(&id) {
                Ok(None) => actions.push(format!("re-pinned {}", record.short())),
                Ok(Some(aside)) => actions.push(format!(
                    "re-pinned {} (what stood at its pin held no ref; moved to {})",
                    record.short(),
                    aside.display()
                )),
                Err(e) => actions.push(format!("could not re-pin {} ({e}); its record is kept", record.short())),
            }
            kept.push(record);
        }
        for id in &reconciled.rebuilt {
            actions.push(format!("rebuilt the record of {} from its commit", &id[..8]));
        }
        registry.save(&kept, &lock)?;
        Ok(())
    }
}

/// What `doctor --fix` would do about `problem`.
fn planned_action(p: &Problem) -> String {
    match p.code {
                    "ref_without_record" => format!(
                        "rebuild the record of {} from its commit",
                        p.id.as_deref().unwrap_or("?")
                    ),
                    "record_without_ref" => format!(
                        "re-pin {} if its commit is intact, else drop the record",
                        p.id.as_deref().unwrap_or("?")
                    ),
                    "corrupt_registry" => "set the registry aside and rebuild it from refs/ckpt/".into(),
                    "corrupt_journal" => {
                        "set the unreadable restore journal aside (nothing in the worktree is touched)".into()
                    }
                    "pending_journal" => "roll the interrupted restore back to its guard (or --complete it)".into(),
                    "temp_file" => format!("remove the {}", p.message),
                    "pack_temp_file" => "remove the killed write's leftover temp file".into(),
                    "stale_keep_file" => "remove the killed snapshot's keep file".into(),
                    "stale_pin_lock" => "remove the killed update's lock files on this workspace's pins".into(),
                    "state_temp_file" => "remove the state write's leftover temp file".into(),
                    "staged_temp_file" => "remove the restore's leftover staged file".into(),
                    "unusable_state_file" => "set the state file that is not a regular file aside".into(),
                    "unreadable_pin" if p.id.is_some() => {
                        "move the unreadable pin file into the state directory and re-pin".into()
                    }
                    "quarantined_missing_objects" => "remove the quarantined ref (its objects are gone)".into(),
                    "unreadable_checkpoint" if p.id.is_some() => format!(
                        "move the ref of {} aside to refs/ckpt/quarantine/ (its objects are kept), or remove it when objects of it are gone (a ref to them breaks git's gc)",
                        p.id.as_deref().unwrap_or("?")
                    ),
                    _ => format!("nothing automatic for: {}", p.message),
    }
}

/// How an object of a checkpoint fails it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectFailure {
    Missing,
    Damaged,
}
