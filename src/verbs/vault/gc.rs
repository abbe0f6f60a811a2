//! Garbage collection of the copy store's shared objects: everything reachable from any
//! workspace's pins is live; other loose objects past a grace period go. Touches only files
//! named like object ids inside the object store.

use std::path::{Path, PathBuf};

use super::{Vault, CONFIG_OVERRIDES};
use crate::verbs::types::{EntryKind, ObjectId};
use crate::verbs::VerbError;

/// What `collect_private_garbage` did (or would do).
#[derive(Debug, Default, Clone)]
pub struct GarbageReport {
    pub live_objects: usize,
    pub removed: usize,
    pub removed_bytes: u64,
    /// Unreferenced but younger than the grace period.
    pub kept_young: usize,
}

/// Garbage collection for the copy provider's shared object store: every object reachable from
/// a `refs/ckpt/` pin of any private git directory in `git_dirs`, or from a commit its
/// workspace's records name (pinned or not), is live; a loose object that is
/// not live and older than `older_than` is removed (`dry_run`: only counted). Only files whose
/// names form a valid object id are ever touched. The caller must hold every workspace's lock.
pub fn collect_private_garbage(
    git_dirs: &[(PathBuf, Vec<ObjectId>)],
    objects: &Path,
    older_than: std::time::SystemTime,
    dry_run: bool,
) -> Result<GarbageReport, VerbError> {
    let mut live: std::collections::HashSet<gix::ObjectId> = std::collections::HashSet::new();
    for (git_dir, recorded) in git_dirs {
        super::private::refuse_blocking_git_files(git_dir)?;
        let repo = gix::open_opts(git_dir, super::open_options().config_overrides(CONFIG_OVERRIDES))
            .map_err(|e| VerbError::git(format!("opening {}", git_dir.display()), e))?;
        let vault = Vault {
            workdir: git_dir.to_path_buf(),
            repo,
            reserved: Vec::new(),
            batch: Default::default(),
            kept_index: Default::default(),
            prefetched_index: Default::default(),
            pending_keeps: Default::default(),
            written_loose: Default::default(),
            relied_on: Default::default(),
            levels: Default::default(),
            vouched_index: Default::default(),
        };
        // Every ref under refs/ckpt/ keeps its objects: pins, quarantined pins, anything else.
        let mut roots = vault.ckpt_ref_targets()?;
        roots.extend(recorded.iter().copied().filter(|id| vault.repo.has_object(id.0)));
        for target in roots {
            live.insert(target.0);
            let root = match vault.repo.find_header(target.0).map(|h| h.kind()) {
                Ok(gix::objs::Kind::Commit) => vault.read_commit(&target)?.tree,
                Ok(gix::objs::Kind::Tree) => target,
                _ => continue,
            };
            live.insert(root.0);
            let mut pending = vec![root];
            let mut seen = std::collections::HashSet::new();
            while let Some(tree) = pending.pop() {
                if !seen.insert(tree) {
                    continue;
                }
                for (_, kind, child) in vault.tree_level(&tree)? {
                    if kind != Some(EntryKind::Gitlink) {
                        live.insert(child.0);
                    }
                    if kind.is_none() {
                        pending.push(child);
                    }
                }
            }
        }
    }
    let mut report = GarbageReport {
        live_objects: live.len(),
        ..GarbageReport::default()
    };
    let fail = |e: std::io::Error| VerbError::git(format!("collecting garbage in {}", objects.display()), e);
    let entries = match std::fs::read_dir(objects) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(fail(e)),
    };
    for fanout in entries.flatten() {
        let prefix = fanout.file_name().to_string_lossy().into_owned();
        // A large blob's temp file that a killed snapshot left (no snapshot runs now: every
        // workspace's lock is held), once older than the grace period as objects are.
        if super::batch::is_pack_writer_temp(&prefix) {
            let meta = std::fs::symlink_metadata(fanout.path()).map_err(fail)?;
            if super::batch::is_lone_file(&meta) && meta.modified().map_err(fail)? <= older_than {
                report.removed += 1;
                report.removed_bytes += meta.len();
                if !dry_run {
                    std::fs::remove_file(fanout.path()).map_err(fail)?;
                }
            }
            continue;
        }
        if prefix.len() != 2 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        for object in std::fs::read_dir(fanout.path()).map_err(fail)?.flatten() {
            let rest = object.file_name().to_string_lossy().into_owned();
            let Ok(id) = gix::ObjectId::from_hex(format!("{prefix}{rest}").as_bytes()) else {
                continue;
            };
            if live.contains(&id) {
                continue;
            }
            let meta = object.metadata().map_err(fail)?;
            if !meta.is_file() {
                continue;
            }
            if meta.modified().map_err(fail)? > older_than {
                report.kept_young += 1;
                continue;
            }
            report.removed += 1;
            report.removed_bytes += meta.len();
            if !dry_run {
                std::fs::remove_file(object.path()).map_err(fail)?;
            }
        }
    }
    Ok(report)
}
