//! Pin verbs: create, move aside and remove refs under `refs/ckpt/`, always compare-and-swap,
//! never with a reflog; list and read them. No other ref is ever written.

use gix::bstr::ByteSlice;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;

use super::Vault;
use crate::verbs::types::{ObjectId, PinRef, WorkspaceKey};
use crate::verbs::VerbError;

/// Valid pins with their targets, names under `refs/ckpt/` that are not valid pins, and why
/// refs there could not be read.
pub type PinListing = (Vec<(PinRef, ObjectId)>, Vec<String>, Vec<String>);

/// [`PinListing`] by name: a loose pin's target is not read (`None`).
pub type PinNames = (Vec<(PinRef, Option<ObjectId>)>, Vec<String>);

impl Vault {
    /// Creates `pin` pointing at `commit`; with `expected_old`, replaces only that value.
    pub fn pin(&self, pin: &PinRef, commit: &ObjectId, expected_old: Option<&ObjectId>) -> Result<(), VerbError> {
        let kind = self
            .repo
            .find_header(commit.0)
            .map_err(|_| VerbError::MissingObject {
                id: *commit,
                what: "commit to pin".into(),
            })?
            .kind();
        if kind != gix::objs::Kind::Commit {
            return Err(VerbError::git_because(
                format!("pinning {}", pin.as_str()),
                format!("{commit} is a {kind}, only commits may be pinned"),
            ));
        }
        match expected_old {
            Some(old) => self.edit_pin(
                pin,
                Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "ckpt: pin".into(),
                    },
                    expected: PreviousValue::MustExistAndMatch(Target::Object(old.0)),
                    new: Target::Object(commit.0),
                },
            )?,
            None => self.create_loose_pin(pin, commit)?,
        }
        // The new packs' objects are reachable from a ref now: git's repack keeps them.
        self.release_pack_keeps();
        // So are the new loose objects, from now on. Until the ref existed a `git prune` (which
        // deletes every unreachable loose object, however new) could take them; one that did
        // leaves a checkpoint that cannot be restored, so it is not published: its ref would also
        // break every later `git gc`.
        let written = self.take_written_loose();
        let objects = self.repo.objects.store_ref().path().to_path_buf();
        // Under `core.sharedRepository`, what ckpt made must be the group's as git makes it: an
        // `objects/xx` directory left 0755 would make a teammate's `git add` fail.
        if self.sharing() != super::shared::Sharing::Umask {
            let refs = self.repo.common_dir().to_path_buf();
            let mut made: Vec<std::path::PathBuf> = [
                "refs/ckpt".to_owned(),
                format!("refs/ckpt/{}", pin.workspace().as_str()),
            ]
            .iter()
            .map(|dir| refs.join(dir))
            .collect();
            made.push(refs.join(pin.as_str()));
            for id in &written {
                let file = super::objects::loose_path(&objects, id);
                made.extend(file.parent().map(std::path::Path::to_path_buf));
                made.push(file);
            }
            made.sort();
            made.dedup();
            self.share(&made);
        }
        // And what the snapshot relied on instead of writing it: found stored, but perhaps
        // unreachable (a dropped stash's blob, a pack a failed snapshot left) and so taken by a
        // gc that walked the refs before this pin existed.
        let relied_on = std::mem::take(&mut *self.relied_on.borrow_mut());
        let mut needed: Vec<ObjectId> = written;
        needed.extend(relied_on);
        let gone = super::objects::missing_now(&objects, self.repo.object_hash(), &needed);
        if let Some(first) = gone.first() {
            self.unpin(pin, commit).ok();
            return Err(VerbError::CollectedBeforePin {
                pin: pin.as_str().to_owned(),
                gone: gone.len(),
                first: *first,
            });
        }
        Ok(())
    }

    /// Creates `pin` as a loose ref holding `commit`, as git creates one: the content written
    /// and synced under `<name>.lock`, then linked to the name only if nothing is there (so it
    /// never replaces a ref), the lock removed. A gix transaction would also take
    /// `packed-refs.lock` to look the name up in `packed-refs` whenever that file exists: every
    /// snapshot would then wait on (and fail behind) a lock git holds or a killed process left,
    /// and a snapshot killed while holding it would break the user's `git branch -d`, `gc`
    /// and `pack-refs` until someone deleted it. `packed-refs` is read here without a lock:
    /// the name is the commit's own id, so the only value it can hold is `commit`.
    fn create_loose_pin(&self, pin: &PinRef, commit: &ObjectId) -> Result<(), VerbError> {
        use std::io::Write as _;
        let conflict = |message: String| VerbError::RefConflict {
            name: pin.as_str().to_owned(),
            message,
        };
        if let Some(existing) = self.read_pin(pin)? {
            return Err(conflict(format!("it exists already, pointing at {existing}")));
        }
        let path = self.repo.common_dir().join(pin.as_str());
        let failed = |e: std::io::Error| VerbError::git(format!("writing {}", pin.as_str()), e);
        // Never through a link: a `refs/ckpt` that leads elsewhere would put the pin there.
        let namespace = self.repo.common_dir().join(PIN_NAMESPACE_DIR);
        for dir in [namespace.clone(), namespace.join(pin.workspace().as_str())] {
            if std::fs::symlink_metadata(&dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(VerbError::git_because(
                    format!("writing {}", pin.as_str()),
                    format!(
                        "{} is a symlink, and ckpt never writes a ref through one; remove it",
                        dir.display()
                    ),
                ));
            }
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let lock = path.with_file_name(format!("{}.lock", commit.to_hex()));
        let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(conflict(format!(
                    "{} exists: another process is writing it",
                    lock.display()
                )))
            }
            Err(e) => return Err(failed(e)),
        };
        let written = file
            .write_all(format!("{}\n", commit.to_hex()).as_bytes())
            .and_then(|()| file.sync_all());
        drop(file);
        let linked = written.and_then(|()| std::fs::hard_link(&lock, &path));
        std::fs::remove_file(&lock).ok();
        match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(conflict("another process created it meanwhile".into()))
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Deletes `pin`, only if it still points at `expected`.
    pub fn unpin(&self, pin: &PinRef, expected: &ObjectId) -> Result<(), VerbError> {
        self.edit_pin(
            pin,
            Change::Delete {
                expected: PreviousValue::MustExistAndMatch(Target::Object(expected.0)),
                log: RefLog::AndReference,
            },
        )
    }

    /// Deletes each of `pins` that still points at its id, in one transaction: a pin that moved
    /// or went fails them all, so nothing is half done. Pins in `packed-refs` leave it in one
    /// rewrite, not one per pin.
    pub fn unpin_all(&self, pins: &[(PinRef, ObjectId)]) -> Result<(), VerbError> {
        if pins.is_empty() {
            return Ok(());
        }
        let mut edits = Vec::with_capacity(pins.len());
        for (pin, expected) in pins {
            edits.push(RefEdit {
                change: Change::Delete {
                    expected: PreviousValue::MustExistAndMatch(Target::Object(expected.0)),
                    log: RefLog::AndReference,
                },
                name: pin_name(pin)?,
                deref: false,
            });
        }
        let what = format!("removing {} pin(s) under refs/ckpt/", pins.len());
        self.repo
            .edit_references_as(edits, None)
            .map(drop)
            .map_err(|e| ref_failure(what, "refs/ckpt/", e))
    }

    /// Whether a loose pin of `workspace` was written after `since` (or the directory cannot
    /// be read): a snapshot killed between its pin and its record leaves one, newer than the
    /// registry's last write. Reads the directory and one stat per loose pin (at most the
    /// packing limit of them), never a ref's content.
    pub fn loose_pin_written_after(&self, workspace: &WorkspaceKey, since: std::time::SystemTime) -> bool {
        let dir = self.repo.common_dir().join(PIN_NAMESPACE_DIR).join(workspace.as_str());
        if std::fs::symlink_metadata(&dir).is_ok() && self.own_pin_dir(workspace).is_none() {
            return true;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
        };
        entries.into_iter().any(|entry| {
            let Ok(entry) = entry else { return true };
            if entry.file_name().to_str().is_some_and(|name| name.ends_with(".lock")) {
                return false;
            }
            entry
                .metadata()
                .and_then(|meta| meta.modified())
                .map_or(true, |modified| modified > since)
        })
    }

    /// Moves `workspace`'s loose pins into `packed-refs` once there are at least `at_least`:
    /// every loose ref is a file git reads for each `for-each-ref`, `log --all` or gc, so a
    /// long history of them slows the user's git. Under git's own lock protocol (the one `git
    /// pack-refs` uses): `packed-refs.lock`, each pin compared and swapped to the same value, no
    /// reflog; every other ref in `packed-refs` is written back as it was. A lock held by git
    /// makes this wait briefly, then give up (the next snapshot tries again). How many were
    /// packed.
    pub fn pack_pins(&self, workspace: &WorkspaceKey, at_least: usize) -> Result<usize, VerbError> {
        use gix::lock::acquire::Fail;
        use gix::refs::file::transaction::PackedRefs;
        let dir = self.repo.common_dir().join(PIN_NAMESPACE_DIR).join(workspace.as_str());
        let loose: Vec<PinRef> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                .filter_map(|entry| {
                    let name = entry.file_name();
                    let id = ObjectId::from_hex(name.to_str()?).ok()?;
                    Some(PinRef::for_checkpoint(workspace, &id))
                })
                .collect(),
            Err(_) => return Ok(0),
        };
        if loose.len() < at_least.max(1) || !self.packed_refs_rewritable() {
            return Ok(0);
        }
        let mut edits = Vec::with_capacity(loose.len());
        for pin in &loose {
            let Some(id) = self.read_pin(pin)? else { continue };
            edits.push(RefEdit {
                change: Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "ckpt: pack pins".into(),
                    },
                    expected: PreviousValue::MustExistAndMatch(Target::Object(id.0)),
                    new: Target::Object(id.0),
                },
                name: pin_name(pin)?,
                deref: false,
            });
        }
        let packed = edits.len();
        let objects: Box<dyn gix::objs::Find> = Box::new(self.repo.objects.clone());
        self.repo
            .refs
            .transaction()
            .packed_refs(PackedRefs::DeletionsAndNonSymbolicUpdatesRemoveLooseSourceReference(
                objects,
            ))
            .prepare(
                edits,
                Fail::Immediately,
                Fail::AfterDurationWithBackoff(std::time::Duration::from_millis(200)),
            )
            .and_then(|prepared| prepared.commit(None))
            .map_err(|e| ref_failure("packing the pins into packed-refs".into(), "packed-refs", e))?;
        self.share(&[self.repo.common_dir().join("packed-refs")]);
        Ok(packed)
    }

    /// The lock files of `workspace`'s pins (`refs/ckpt/<workspace>/<id>.lock`, regular files)
    /// older than `older_than`: a ref update killed mid-way (a prune's removals, a pin being
    /// written) leaves one, and until it goes every later update of that ref fails, ckpt's
    /// prune and the user's `git gc` alike. git holds such a lock for milliseconds.
    pub fn stale_pin_locks(
        &self,
        workspace: &WorkspaceKey,
        older_than: std::time::Duration,
    ) -> Vec<std::path::PathBuf> {
        // Never listed (nor removed from) through a link: `refs/ckpt` or the workspace's
        // directory leading elsewhere would make another directory's files these.
        let Some(dir) = self.own_pin_dir(workspace) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut stale: Vec<std::path::PathBuf> = entries
            .flatten()
            .filter(|entry| {
                let name = entry.file_name();
                let is_pin_lock = name
                    .to_str()
                    .and_then(|name| name.strip_suffix(".lock"))
                    .is_some_and(|id| ObjectId::from_hex(id).is_ok());
                is_pin_lock
                    && entry.file_type().is_ok_and(|kind| kind.is_file())
                    && entry
                        .metadata()
                        .and_then(|meta| meta.modified())
                        .ok()
                        .and_then(|modified| modified.elapsed().ok())
                        .is_some_and(|age| age > older_than)
            })
            .map(|entry| entry.path())
            .collect();
        stale.sort();
        stale
    }

    /// `refs/ckpt/<workspace>/`, when it and `refs/ckpt/` are directories of their own (not
    /// links, which lead elsewhere); `None` otherwise, or when missing.
    fn own_pin_dir(&self, workspace: &WorkspaceKey) -> Option<std::path::PathBuf> {
        let namespace = self.repo.common_dir().join(PIN_NAMESPACE_DIR);
        let dir = namespace.join(workspace.as_str());
        [&namespace, &dir]
            .iter()
            .all(|at| std::fs::symlink_metadata(at).is_ok_and(|meta| meta.is_dir()))
            .then_some(dir)
    }

    /// Removes [`Self::stale_pin_locks`] (the caller holds the workspace's lock, so no ckpt
    /// process of this workspace is updating a pin) and returns what went.
    pub fn remove_stale_pin_locks(
        &self,
        workspace: &WorkspaceKey,
        older_than: std::time::Duration,
    ) -> Vec<std::path::PathBuf> {
        self.stale_pin_locks(workspace, older_than)
            .into_iter()
            .filter(|lock| std::fs::remove_file(lock).is_ok())
            .collect()
    }

    /// How long `packed-refs.lock` has been there, when that is longer than `older_than`: git
    /// holds it for milliseconds, so an old one was left by a killed process, and until it
    /// goes git cannot delete or pack refs. Read-only: whose it is cannot be known, so it is
    /// never removed here.
    pub fn stale_packed_refs_lock(&self, older_than: std::time::Duration) -> Option<std::time::Duration> {
        let lock = self.repo.common_dir().join("packed-refs.lock");
        let age = std::fs::symlink_metadata(lock).ok()?.modified().ok()?.elapsed().ok()?;
        (age > older_than).then_some(age)
    }

    /// Whether `packed-refs` may be rewritten with every other line kept as git reads it: it is
    /// absent, or a regular file (a symlink git writes through would become a file) whose
    /// header says every ref that peels has its peeled line, which the rewrite claims for all
    /// (one from old git or another tool without that trait would lose its tags' peeled
    /// values), and whose lines end as git writes them.
    fn packed_refs_rewritable(&self) -> bool {
        use std::io::BufRead as _;
        let path = self.repo.common_dir().join("packed-refs");
        match std::fs::symlink_metadata(&path) {
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            Ok(meta) if !meta.is_file() => false,
            Ok(_) => {
                let mut header = String::new();
                std::fs::File::open(&path)
                    .map(std::io::BufReader::new)
                    .and_then(|mut file| file.read_line(&mut header))
                    .is_ok_and(|_| {
                        header.starts_with("# pack-refs with:")
                            && header.split_whitespace().any(|t| t == "fully-peeled")
                            && header.split_whitespace().any(|t| t == "sorted")
                            && !header.contains('\r')
                    })
            }
        }
    }

    /// Moves `pin` (which must point at `commit`) to its quarantine name: a new ref is made
    /// first, then the pin is removed, so the commit is referenced throughout. Returns the
    /// quarantine ref.
    pub fn quarantine(&self, pin: &PinRef, commit: &ObjectId) -> Result<PinRef, VerbError> {
        let aside = pin.quarantined();
        self.edit_pin(
            &aside,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "ckpt: quarantine".into(),
                },
                expected: PreviousValue::Any,
                new: Target::Object(commit.0),
            },
        )?;
        self.unpin(pin, commit)?;
        Ok(aside)
    }

    fn edit_pin(&self, pin: &PinRef, change: Change) -> Result<(), VerbError> {
        let edit = RefEdit {
            change,
            name: pin_name(pin)?,
            deref: false,
        };
        self.repo
            .edit_references_as(Some(edit), None)
            .map(drop)
            .map_err(|e| ref_failure(format!("writing {}", pin.as_str()), pin.as_str(), e))
    }

    /// The quarantined pins of `workspace` (`refs/ckpt/quarantine/<workspace>/<id>`), each as
    /// the ref [`PinRef::quarantined`] named it and the object it points at.
    pub fn quarantined_pins(
        &self,
        workspace: &crate::verbs::WorkspaceKey,
    ) -> Result<Vec<(PinRef, ObjectId)>, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut found = Vec::new();
        for reference in iter.flatten() {
            let name = reference.name().as_bstr().to_str_lossy().into_owned();
            let Some(id) = reference.target().try_id().map(|id| ObjectId(id.to_owned())) else {
                continue;
            };
            let pin = PinRef::for_checkpoint(workspace, &id);
            if PinRef::is_quarantine_name(&name) && pin.quarantined().as_str() == name {
                found.push((pin.quarantined(), id));
            }
        }
        Ok(found)
    }

    /// Every ref under `refs/ckpt/`, with the object it points at. Names that are not valid pin
    /// refs are returned separately so callers can report them.
    pub fn list_pins(&self) -> Result<PinListing, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut pins = Vec::new();
        let mut foreign = Vec::new();
        let mut unreadable = Vec::new();
        for reference in iter {
            // One ref that cannot be decoded (garbage in its file) is reported, not the end of
            // the listing: `audit` must name it and still judge the rest.
            let reference = match reference {
                Ok(reference) => reference,
                Err(e) => {
                    unreadable.push(crate::verbs::error_chain(&e));
                    continue;
                }
            };
            let name = reference.name().as_bstr().to_str_lossy().into_owned();
            if PinRef::is_quarantine_name(&name) {
                continue;
            }
            match (PinRef::parse(&name), reference.target().try_id()) {
                (Ok(pin), Some(id)) => pins.push((pin, ObjectId(id.to_owned()))),
                _ => foreign.push(name),
            }
        }
        Ok((pins, foreign, unreadable))
    }

    /// Every ref under `refs/ckpt/` by name, without reading a loose ref's file: loose names
    /// come from their directories, packed ones (with their targets) from `packed-refs`. A
    /// workspace of a few hundred loose pins cost each snapshot as many file reads (five
    /// syscalls each) before any of its own work. What a pin points at is for the caller to
    /// read where a checkpoint is used ([`Self::read_pin`]). Only regular files count as loose
    /// refs, and names that are not UTF-8 are not pins (ckpt writes none).
    pub fn list_pin_names(&self) -> Result<PinNames, VerbError> {
        const PREFIX: &str = PIN_NAMESPACE_DIR;
        let mut found: std::collections::BTreeMap<String, Option<ObjectId>> = std::collections::BTreeMap::new();
        let packed = self
            .repo
            .refs
            .cached_packed_buffer()
            .map_err(|e| VerbError::git("reading packed-refs", e))?;
        if let Some(packed) = packed {
            let prefixed = packed
                .iter_prefixed(format!("{PREFIX}/").into())
                .map_err(|e| VerbError::git("reading packed-refs", e))?;
            for reference in prefixed {
                let reference = reference.map_err(|e| VerbError::git("reading packed-refs", e))?;
                let name = reference.name.as_bstr().to_str_lossy().into_owned();
                found.insert(name, Some(ObjectId(reference.target())));
            }
        }
        // A loose ref overrides a packed one of the same name.
        let mut dirs = vec![(self.repo.common_dir().join(PREFIX), PREFIX.to_owned())];
        while let Some((dir, name)) = dirs.pop() {
            let listing_failed = |e| VerbError::git(format!("listing {}", dir.display()), e);
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(listing_failed(e)),
            };
            for entry in entries {
                let entry = entry.map_err(listing_failed)?;
                let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let full = format!("{name}/{file_name}");
                let kind = entry.file_type().map_err(listing_failed)?;
                if kind.is_dir() {
                    dirs.push((entry.path(), full));
                } else if kind.is_file() && !file_name.ends_with(".lock") {
                    // `<name>.lock` is a ref being written (or a write killed): git skips it too.
                    found.insert(full, None);
                }
            }
        }
        let mut pins = Vec::new();
        let mut foreign = Vec::new();
        for (name, target) in found {
            if PinRef::is_quarantine_name(&name) {
                continue;
            }
            match PinRef::parse(&name) {
                Ok(pin) => pins.push((pin, target)),
                Err(_) => foreign.push(name),
            }
        }
        Ok((pins, foreign))
    }

    /// What every ref under `refs/ckpt/` points at — pins, quarantined pins and names that are
    /// not pins alike: all of it must stay alive in a store ckpt collects itself.
    pub fn ckpt_ref_targets(&self) -> Result<Vec<ObjectId>, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut targets = Vec::new();
        for reference in iter {
            let reference = reference.map_err(|e| VerbError::git("reading a ref under refs/ckpt/", e))?;
            if let Some(id) = reference.target().try_id() {
                targets.push(ObjectId(id.to_owned()));
            }
        }
        Ok(targets)
    }

    /// Moves what stands at `pin`'s loose ref file into `into_dir` when no ref can be read from
    /// it (garbage, a symlink, a FIFO, a socket or a device), renamed, never opened or deleted,
    /// so the pin can be made again. Returns where it went; `None` when nothing stands there or
    /// it reads as a ref (that one is [`Self::pin`]'s to compare and swap).
    pub fn set_aside_unreadable_pin(
        &self,
        pin: &PinRef,
        into_dir: &std::path::Path,
    ) -> Result<Option<std::path::PathBuf>, VerbError> {
        let loose = self.repo.common_dir().join(pin.as_str());
        // Never through a linked directory: what it leads to is not the repository's, and a file
        // outside would be moved.
        let mut dir = loose.parent();
        while let Some(at) = dir.filter(|at| *at != self.repo.common_dir()) {
            if std::fs::symlink_metadata(at).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(VerbError::git_because(
                    format!("repairing {}", pin.as_str()),
                    format!(
                        "{} is a symlink; ckpt does not follow it. Replace it with the directory itself",
                        at.display()
                    ),
                ));
            }
            dir = at.parent();
        }
        let Ok(meta) = std::fs::symlink_metadata(&loose) else {
            return Ok(None);
        };
        if meta.is_dir() || (meta.is_file() && self.read_pin(pin).is_ok()) {
            return Ok(None);
        }
        let name = pin.as_str().rsplit('/').next().unwrap_or("pin");
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let aside = into_dir.join(format!("unreadable-pin-{name}-{stamp}"));
        // A hard link would open nothing either, but a rename also frees the name at once.
        std::fs::rename(&loose, &aside).map_err(|e| {
            VerbError::git(
                format!("moving the unreadable {} aside to {}", loose.display(), aside.display()),
                e,
            )
        })?;
        Ok(Some(aside))
    }

    /// The loose pin files of `workspace` that are not regular files (a symlink, FIFO, socket
    /// or device), with what each is: every use of such a checkpoint refuses the file, even
    /// where git still lists the pin from `packed-refs`. Found with `lstat` only. A pin
    /// directory that is itself a link is named too, with an empty list of its files.
    pub fn unreadable_loose_pins(&self, workspace: &WorkspaceKey) -> Vec<(String, &'static str)> {
        let dir = self
            .repo
            .common_dir()
            .join(crate::verbs::types::PIN_NAMESPACE)
            .join(workspace.as_str());
        let mut found = Vec::new();
        for at in [dir.parent().map(std::path::Path::to_path_buf), Some(dir.clone())]
            .into_iter()
            .flatten()
        {
            if std::fs::symlink_metadata(&at).is_ok_and(|meta| meta.file_type().is_symlink()) {
                found.push((at.display().to_string(), "a symlink to a directory"));
                return found;
            }
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return found;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let what = if kind.is_symlink() {
                "a symlink"
            } else if kind.is_file() || kind.is_dir() {
                continue;
            } else {
                "a FIFO, socket or device"
            };
            let name = entry.file_name();
            if ObjectId::from_hex(&name.to_string_lossy()).is_ok() {
                found.push((
                    format!(
                        "{}{}/{}",
                        crate::verbs::types::PIN_NAMESPACE,
                        workspace.as_str(),
                        name.to_string_lossy()
                    ),
                    what,
                ));
            }
        }
        found.sort();
        found
    }

    /// The object a pin ref points at now, if it exists. A loose pin that is not a regular
    /// file is refused before anything opens it: a FIFO there would make every command hang,
    /// and a symlink is not a ref ckpt wrote.
    pub fn read_pin(&self, pin: &PinRef) -> Result<Option<ObjectId>, VerbError> {
        let loose = self.repo.common_dir().join(pin.as_str());
        if let Ok(meta) = std::fs::symlink_metadata(&loose) {
            let what = if meta.file_type().is_symlink() {
                Some("a symlink")
            } else if !meta.is_file() && !meta.is_dir() {
                Some("a FIFO, socket or device")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(VerbError::git_because(
                    format!("reading {}", pin.as_str()),
                    format!("{} is {what}, not a ref file ckpt wrote; remove it (`ckpt doctor --fix` re-pins a checkpoint whose commit is intact)", loose.display()),
                ));
            }
        }
        let found = self
            .repo
            .try_find_reference(pin.as_str())
            .map_err(|e| VerbError::git(format!("reading {}", pin.as_str()), e))?;
        Ok(found.and_then(|r| r.target().try_id().map(|id| ObjectId(id.to_owned()))))
    }
}

/// Where loose pins live, below the common git directory.
const PIN_NAMESPACE_DIR: &str = "refs/ckpt";

fn pin_name(pin: &PinRef) -> Result<gix::refs::FullName, VerbError> {
    pin.as_str()
        .try_into()
        .map_err(|e| VerbError::git(format!("naming {}", pin.as_str()), e))
}

/// A failed ref edit, `action` on `name`: a failed write (full disk, no permission, a lock held)
/// is not a concurrent change.
fn ref_failure(action: String, name: &str, e: impl std::error::Error + Send + Sync + 'static) -> VerbError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = cause {
        if error.downcast_ref::<std::io::Error>().is_some() {
            return VerbError::git(action, e);
        }
        cause = error.source();
    }
    VerbError::RefConflict {
        name: name.to_owned(),
        message: crate::verbs::error_chain(&e),
    }
}
