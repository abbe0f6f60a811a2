//! Merging ckpt's own packs: the watch daemon and, past a limit, a snapshot fold the small
//! packs snapshots wrote into one, compressed, so git never needs an automatic gc for them. It
//! touches only packs ckpt wrote (never a kept, promised, cruft or delta-holding one, whatever
//! its list says), removes them only after the new pack is verified, and never while a `git gc`
//! or `git maintenance` runs beside it.

use std::collections::HashSet;

use super::packfile::{pack_name, PackCompression, PackStream};
use super::Vault;
use crate::verbs::types::ObjectId;
use crate::verbs::VerbError;

/// Whether a lock file `meta` describes was made less than [`GC_PID_TRUSTED_FOR`] ago (one
/// dated in the future counts, as git counts it).
fn is_fresh(meta: &std::fs::Metadata) -> bool {
    meta.modified()
        .map(|at| match at.elapsed() {
            Ok(age) => age < GC_PID_TRUSTED_FOR,
            Err(_) => true,
        })
        .unwrap_or(false)
}

/// How long a `gc.pid` says a gc is running: git itself trusts one for 12 hours
/// (`builtin/gc.c`), and takes an older one for a gc that died.
const GC_PID_TRUSTED_FOR: std::time::Duration = std::time::Duration::from_secs(12 * 60 * 60);

/// What [`Vault::merge_packs`] did.
#[derive(Debug, Default)]
pub struct PacksMerged {
    /// The new pack, if it made one.
    pub into: Option<ObjectId>,
    /// The packs merged into it and removed (none when a git gc started meanwhile).
    pub merged: Vec<ObjectId>,
    /// Named packs that are git's, not ckpt's (a file only git writes next to them, or deltas):
    /// left alone, and no business of ckpt's list.
    pub not_ckpts: Vec<ObjectId>,
}

impl Vault {
    /// Writes the pack `stream` holds, with the index gix builds from its bytes, into the pack
    /// directory; that index must name exactly `expected`, or the pack is removed and this
    /// fails. The pack's name when this call created it (`None`: an identical pack was there
    /// already, and is not ours).
    fn index_pack(
        &self,
        stream: &mut dyn std::io::BufRead,
        expected: &HashSet<ObjectId>,
    ) -> Result<Option<ObjectId>, VerbError> {
        let directory = self.repo.objects.store_ref().path().join("pack");
        std::fs::create_dir_all(&directory).map_err(|e| VerbError::git("creating the pack directory", e))?;
        let interrupt = std::sync::atomic::AtomicBool::new(false);
        let options = gix_pack::bundle::write::Options {
            thread_limit: Some(1),
            ..Default::default()
        };
        let outcome = gix_pack::Bundle::write_to_directory(
            stream,
            Some(&directory),
            &mut gix::progress::Discard,
            &interrupt,
            None::<gix::objs::find::Never>,
            self.repo.object_hash(),
            options,
        )
        .map_err(|e| VerbError::git("writing a pack", e))?;
        // The keep file guards a fetched pack until refs point to it. A merge runs only under
        // the workspace lock after the pins of the packs it merges were written, so its objects
        // are reachable already; kept, git would never repack them, even once pruned.
        if let Some(keep) = &outcome.keep_path {
            std::fs::remove_file(keep).map_err(|e| VerbError::git("removing the pack's keep file", e))?;
        }
        let indexed: Option<HashSet<ObjectId>> = outcome.index_path.as_ref().and_then(|path| {
            let index = gix_pack::index::File::at(path, self.repo.object_hash()).ok()?;
            Some(index.iter().map(|entry| ObjectId(entry.oid)).collect())
        });
        if indexed.as_ref() != Some(expected) {
            // Removed only if this call created it (an identical pack already there is not ours).
            if outcome.keep_path.is_some() {
                for path in [&outcome.index_path, &outcome.data_path].into_iter().flatten() {
                    std::fs::remove_file(path).ok();
                }
            }
            return Err(VerbError::git_because(
                "writing a pack",
                "its index does not name exactly the objects it was written for",
            ));
        }
        if outcome.keep_path.is_some() {
            // Written 0600 by the temp file; given the mode git gives a new pack.
            use std::os::unix::fs::PermissionsExt;
            let mode = self.new_pack_mode();
            for path in [&outcome.index_path, &outcome.data_path].into_iter().flatten() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| VerbError::git("making a new pack read-only", e))?;
            }
        }
        Ok(outcome
            .keep_path
            .as_ref()
            .and(outcome.data_path.as_deref())
            .and_then(pack_name))
    }

    /// The size of each named pack's data file; `None` for one that is gone (git repacked it).
    /// Read-only.
    pub fn pack_sizes(&self, packs: &[ObjectId]) -> Vec<(ObjectId, Option<u64>)> {
        let directory = self.repo.objects.store_ref().path().join("pack");
        packs
            .iter()
            .map(|name| {
                let data = directory.join(format!("pack-{}.pack", name.to_hex()));
                let size = std::fs::symlink_metadata(&data)
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| m.len());
                (*name, size)
            })
            .collect()
    }

    /// Merges packs ckpt wrote (named by the caller, which keeps the list; a pack git marks as
    /// kept, promised or cruft, or one holding a delta, is never ckpt's and is skipped) into one new pack:
    /// every object of each, reachable or not, is copied (compressed at zlib's fastest level:
    /// a single uncompressed pack is "merged" to compress it), the new pack is verified as any
    /// batch is, and only then are the old packs' index and data files removed (index first, so
    /// no reader finds an index without its data). Packs that are gone are skipped. Nothing is
    /// removed when fewer than `at_least` (one at least) were there or the new pack is one of
    /// them, and nothing is merged while a git gc runs ([`Self::git_gc_running`]); one that
    /// starts during the merge leaves the merged packs in place.
    pub fn merge_packs(&self, packs: &[ObjectId], at_least: usize) -> Result<PacksMerged, VerbError> {
        if self.git_gc_running() {
            return Ok(PacksMerged::default());
        }
        let directory = self.repo.objects.store_ref().path().join("pack");
        let path_of = |name: &ObjectId, ext: &str| directory.join(format!("pack-{}.{ext}", name.to_hex()));
        let mut merged = Vec::new();
        let mut not_ckpts = Vec::new();
        let mut ids: Vec<gix::ObjectId> = Vec::new();
        for name in packs {
            // A pack with a file next to it that only git writes is never ckpt's: kept
            // (`.keep`), a partial clone's promise (`.promisor`), a cruft pack's times
            // (`.mtimes`), a reverse index (`.rev`, git's default since 2.41) or a bitmap. Left
            // as it is, whatever a list in ckpt's state says: a tampered list would otherwise
            // make ckpt rewrite a user's no-delta pack and drop its `.rev` and bitmap.
            if ["keep", "promisor", "mtimes", "rev", "bitmap"]
                .iter()
                .any(|ext| path_of(name, ext).exists())
            {
                not_ckpts.push(*name);
                continue;
            }
            let Ok(index) = gix_pack::index::File::at(path_of(name, "idx"), self.repo.object_hash()) else {
                continue;
            };
            let Ok(data) = gix_pack::data::File::at(path_of(name, "pack"), self.repo.object_hash()) else {
                continue;
            };
            // ckpt writes whole objects only: a pack with a delta in it is git's, whatever a
            // list in ckpt's state says, and is left alone.
            let whole_objects_only = index.iter().all(|entry| {
                data.entry(entry.pack_offset)
                    .is_ok_and(|object| !object.header.is_delta())
            });
            if !whole_objects_only {
                not_ckpts.push(*name);
                continue;
            }
            ids.extend(index.iter().map(|entry| entry.oid));
            merged.push(*name);
        }
        let untouched = |not_ckpts| PacksMerged {
            into: None,
            merged: Vec::new(),
            not_ckpts,
        };
        if merged.len() < at_least.max(1) {
            return Ok(untouched(not_ckpts));
        }
        let mut expected = HashSet::new();
        ids.retain(|id| expected.insert(ObjectId(*id)));
        let count = u32::try_from(ids.len())
            .map_err(|_| VerbError::git_because("merging ckpt's packs", "too many objects for one pack"))?;
        // Streamed through a temp file in the pack directory, one object at a time: merges run
        // in the watch daemon, which must not hold every object of the packs it merges (holding
        // them, one merge left it at 140 MB). A leftover has the pack writer's temp name.
        let failed = |e: std::io::Error| VerbError::git("writing a merged pack", e);
        let mut temp = tempfile::NamedTempFile::new_in(&directory).map_err(failed)?;
        let mut pack = PackStream::new(
            std::io::BufWriter::new(temp.as_file_mut()),
            self.repo.object_hash(),
            count,
            PackCompression::Fastest,
        )
        .map_err(failed)?;
        for id in &ids {
            let object = self
                .repo
                .find_object(*id)
                .map_err(|e| VerbError::git(format!("reading object {id} to merge ckpt's packs"), e))?;
            pack.object(object.kind, &object.data).map_err(failed)?;
        }
        pack.finish().map_err(failed)?;
        let written = temp.reopen().map_err(failed)?;
        let new = self.index_pack(&mut std::io::BufReader::new(written), &expected)?;
        drop(temp);
        let Some(new) = new else {
            return Ok(untouched(not_ckpts));
        };
        if merged.contains(&new) {
            return Ok(untouched(not_ckpts));
        }
        // A gc that started while this merge ran has listed the packs merged: they stay (their
        // objects are in the new pack too) and are merged again next time.
        if self.git_gc_running() {
            return Ok(PacksMerged {
                into: Some(new),
                merged: Vec::new(),
                not_ckpts,
            });
        }
        for name in &merged {
            for ext in ["idx", "rev", "bitmap", "pack"] {
                match std::fs::remove_file(path_of(name, ext)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(VerbError::git(format!("removing merged pack {name}"), e))
                    }
                    _ => {}
                }
            }
        }
        Ok(PacksMerged {
            into: Some(new),
            merged,
            not_ckpts,
        })
    }

    /// Whether a `git gc` (its `gc.pid`, written when it starts and removed when it ends) or a
    /// `git maintenance run` (its `objects/maintenance.lock`) is running in this repository. A
    /// gc lists the packs when it starts and asks for them by name later: a cruft repack dies
    /// with "could not find pack" when one is gone, so ckpt removes none meanwhile. `gc.pid` is
    /// judged as git judges it: older than 12 hours, not a regular file, not `<pid> <host>`, or
    /// naming a process of this machine that is gone, it is no running gc's. It is never opened
    /// unless it is a regular file, and then without blocking. Read-only.
    pub fn git_gc_running(&self) -> bool {
        let objects = self.repo.objects.store_ref().path();
        let lock = std::fs::metadata(objects.join("maintenance.lock"));
        if lock.is_ok_and(|meta| is_fresh(&meta)) {
            return true;
        }
        let gc_pid = self.repo.common_dir().join("gc.pid");
        let Ok(meta) = std::fs::metadata(&gc_pid) else {
            return false;
        };
        if !meta.is_file() || !is_fresh(&meta) {
            return false;
        }
        let text = {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            let mut text = String::new();
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&gc_pid);
            match opened {
                Ok(file) => {
                    // A pid and a host name are a few dozen bytes; more is no gc.pid of git's.
                    file.take(512).read_to_string(&mut text).ok();
                }
                Err(_) => return false,
            }
            text
        };
        let mut fields = text.split_whitespace();
        let (Some(pid), Some(host)) = (fields.next().and_then(|p| p.parse::<u32>().ok()), fields.next()) else {
            return false;
        };
        let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        if host != this_host.trim() {
            return true;
        }
        // A pid the kernel cannot have (past i32) names no process; 0 is taken as running,
        // as git takes it.
        match i32::try_from(pid).ok().map(rustix::process::Pid::from_raw) {
            Some(Some(pid)) => !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH)),
            Some(None) => true,
            None => false,
        }
    }
}
