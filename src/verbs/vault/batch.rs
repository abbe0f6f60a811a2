//! Object batches: every object a snapshot of a repository adds (blobs, large ones streamed,
//! trees, and its commit) goes into packs that a `.keep` file holds from before they are
//! visible until the snapshot's pin makes them reachable. Nothing is written loose: a `git
//! prune` (or `gc --prune=now`) running beside a snapshot removes every unreachable loose
//! object however new, and so could take a checkpoint's objects before its pin exists; a kept
//! pack is left alone by `prune` and by `repack -a -d` (which decides what is kept when it
//! starts, and reads the refs only after).
//!
//! Objects collect in memory and are written as one pack when the batch finishes, or earlier
//! once they pass [`FLUSH_AT_BYTES`]; a file of [`super::blobs::STREAM_THRESHOLD`] or more is
//! streamed into a pack of its own, never held. gix must read each pack's index (ckpt's own,
//! [`super::packfile`]) back as naming exactly the batch's ids, so an object is only ever
//! stored under the id of its bytes. A pack already there under a new pack's name is never
//! relied on (no ref may hold it, and a repack that listed it deletes it after any check): the
//! new one is encoded again under a name of its own. An unfinished batch leaves only packs no
//! ref needs, whose keep files go when the snapshot returns. A batch may be written
//! uncompressed, for its caller to have compressed later by merging ([`super::merge`]). It
//! writes only objects, and the keep files and temp files of its packs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::packfile::{
    encode_pack, encoded_again, index_v2, push_entry_header, PackCompression, PackFile, Placed, Tally,
};
use super::Vault;
use crate::verbs::types::ObjectId;
use crate::verbs::VerbError;

/// Collected objects past this many bytes are written as a pack at once: a first snapshot of a
/// large tree must not hold all its content in memory.
const FLUSH_AT_BYTES: usize = 64 << 20;

/// What the `.keep` file of a pack awaiting its pin says, for whoever finds one.
const PACK_KEEP_NOTE: &[u8] = b"ckpt: new checkpoint objects, until their pin is written\n";
/// New objects waiting to be written, shared by the threads of one snapshot.
pub struct ObjectBatch {
    pending: Mutex<Pending>,
    compression: PackCompression,
    /// The repository's pack directory, and its pack indices once first asked for.
    pack_dir: PathBuf,
    /// The mode its packs and indices get ([`Vault::new_pack_mode`]).
    pack_mode: u32,
    object_hash: gix::hash::Kind,
    pack_indices: std::sync::OnceLock<Vec<gix_pack::index::File>>,
    /// What the batch wrote before it finished (packs flushed on the way, streamed blobs), and
    /// the stored objects it relies on.
    written: Mutex<Written>,
}

#[derive(Default)]
struct Pending {
    ids: HashSet<ObjectId>,
    objects: Vec<(ObjectId, gix::objs::Kind, Vec<u8>)>,
    bytes: usize,
}

/// The packs a batch wrote, the keep files holding them, and the objects it found stored
/// already instead of writing them: one of those may be unreachable (a dropped stash's blob, a
/// failed snapshot's pack) and so taken by a gc before the pin exists, so the pin checks they
/// are all still there ([`Vault::pin`]).
#[derive(Default)]
pub(super) struct Written {
    pub objects: usize,
    pub packs: Vec<(ObjectId, PackCompression)>,
    pub keeps: Vec<PathBuf>,
    pub relied_on: Vec<ObjectId>,
}

impl ObjectBatch {
    /// Whether one of the repository's packs holds `id`: asked instead of the object store as a
    /// whole, which also searches the loose objects, a costly directory lookup per miss, and new
    /// content always misses.
    pub(super) fn packed(&self, id: &ObjectId) -> bool {
        self.pack_indices
            .get_or_init(|| {
                let Ok(dir) = std::fs::read_dir(&self.pack_dir) else {
                    return Vec::new();
                };
                dir.filter_map(Result::ok)
                    // Regular files only: opening a FIFO would block.
                    .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|ext| ext == "idx"))
                    .filter_map(|path| gix_pack::index::File::at(&path, self.object_hash).ok())
                    .collect()
            })
            .iter()
            .any(|index| index.lookup(id.0).is_some())
    }

    /// Adds an object the store lacks; `false` when the batch holds it already. Past
    /// [`FLUSH_AT_BYTES`] what was collected is written as a pack now.
    pub(super) fn add(&self, id: ObjectId, kind: gix::objs::Kind, data: &[u8]) -> Result<bool, VerbError> {
        let mut pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !pending.ids.insert(id) {
            return Ok(false);
        }
        pending.objects.push((id, kind, data.to_vec()));
        pending.bytes += data.len();
        if pending.bytes < FLUSH_AT_BYTES {
            return Ok(true);
        }
        let objects = std::mem::take(&mut pending.objects);
        pending.bytes = 0;
        drop(pending);
        self.write(&objects)?;
        Ok(true)
    }

    /// Notes that the snapshot refers to `id`, found stored already rather than written.
    pub(super) fn rely_on(&self, id: ObjectId) {
        self.written_now().relied_on.push(id);
    }

    fn written_now(&self) -> std::sync::MutexGuard<'_, Written> {
        self.written.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `objects` as one kept pack and notes it.
    fn write(&self, objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)]) -> Result<(), VerbError> {
        if objects.is_empty() {
            return Ok(());
        }
        let (pack, placed) = encode_pack(self.object_hash, objects, self.compression)?;
        let ids: Vec<ObjectId> = objects.iter().map(|(id, _, _)| *id).collect();
        let placed = place_pack(&self.pack_dir, self.pack_mode, self.object_hash, &pack, placed, &ids)?;
        self.note_placed(placed, ids.len(), self.compression);
        Ok(())
    }

    /// Notes a pack this batch placed, with the keep file holding it.
    fn note_placed(&self, placed: PackPlaced, objects: usize, compression: PackCompression) {
        let mut written = self.written_now();
        written.objects += objects;
        written.keeps.extend(placed.keep);
        written.packs.push((placed.name, compression));
    }

    /// Writes what is still collected.
    fn finish(&self) -> Result<(), VerbError> {
        let objects = {
            let mut pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            pending.bytes = 0;
            std::mem::take(&mut pending.objects)
        };
        self.write(&objects)
    }

    /// Streams `size` bytes from `content` into a blob in a pack of its own (at zlib's fastest
    /// level), never holding them: the blob's id comes from the bytes as they pass. Fails, and
    /// leaves nothing, when `content` fails or does not hold exactly `size` bytes.
    pub(super) fn add_stream(&self, content: &mut dyn std::io::Read, size: u64) -> Result<ObjectId, VerbError> {
        let failed = |e: std::io::Error| VerbError::git("streaming a large blob into a pack", e);
        std::fs::create_dir_all(&self.pack_dir).map_err(|e| VerbError::git("creating the pack directory", e))?;
        let mut temp = tempfile::NamedTempFile::new_in(&self.pack_dir).map_err(failed)?;
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(b"PACK");
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&1u32.to_be_bytes());
        let mut entry_header = Vec::with_capacity(10);
        push_entry_header(&mut entry_header, gix::objs::Kind::Blob, size);
        let mut tally = Tally {
            out: std::io::BufWriter::new(temp.as_file_mut()),
            pack: gix::hash::hasher(self.object_hash),
            crc: crc32fast::Hasher::new(),
        };
        tally.pack.update(&header);
        std::io::Write::write_all(&mut tally.out, &header).map_err(failed)?;
        std::io::Write::write_all(&mut tally, &entry_header).map_err(failed)?;
        let mut object = gix::hash::hasher(self.object_hash);
        object.update(format!("blob {size}\0").as_bytes());
        let mut zlib = gix::zlib::stream::deflate::Write::new(tally, gix::zlib::Compression::BEST_SPEED);
        let mut buffer = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let read = match content.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(failed(e)),
            };
            total += read as u64;
            object.update(&buffer[..read]);
            std::io::Write::write_all(&mut zlib, &buffer[..read]).map_err(failed)?;
        }
        if total != size {
            return Err(failed(std::io::Error::other(
                "the content changed length while it was read",
            )));
        }
        std::io::Write::flush(&mut zlib).map_err(failed)?;
        let Tally { mut out, pack, crc } = zlib.into_inner();
        let id = ObjectId(object.try_finalize().map_err(std::io::Error::other).map_err(failed)?);
        let trailer = pack.try_finalize().map_err(std::io::Error::other).map_err(failed)?;
        std::io::Write::write_all(&mut out, trailer.as_bytes()).map_err(failed)?;
        std::io::Write::flush(&mut out).map_err(failed)?;
        drop(out);
        let crc32 = crc.finalize();
        let placed = vec![Placed { id, offset: 12, crc32 }];
        let written = PackFile {
            temp,
            checksum: trailer.as_bytes().to_vec(),
            placed,
        };
        let placed = place_pack_file(&self.pack_dir, self.pack_mode, self.object_hash, written, &[id])?;
        self.note_placed(placed, 1, PackCompression::Fastest);
        Ok(id)
    }
}

/// How a finished batch was written.
#[derive(Debug, Default, Clone)]
pub struct BatchWritten {
    pub objects: usize,
    /// The packs it created, by name (their checksum, as in `pack-<hex>.pack`), with whether
    /// each is compressed as stored blocks only.
    pub packs: Vec<(ObjectId, PackCompression)>,
}

/// A temp file that an interrupted pack write (a snapshot's batch or a merge, killed before it
/// finished) left in the pack directory.
#[derive(Debug, Clone)]
pub struct StalePackTemp {
    pub name: String,
    pub bytes: u64,
    pub untouched: std::time::Duration,
}

/// How [`Vault::stale_pack_temps`] names a temp file in the pack directory (one in the objects
/// directory itself has its bare name).
const PACK_TEMP_PREFIX: &str = "pack/";

/// A name the pack writer's temp files have (`.tmp` and six letters or digits, the `tempfile`
/// crate's pattern); git's own temp packs are named `tmp_pack_*` and never match.
pub(super) fn is_pack_writer_temp(name: &str) -> bool {
    name.strip_prefix(".tmp")
        .is_some_and(|rest| rest.len() == 6 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A plain file with no other name: a temp file with another link is another file's content
/// (a hard link to a live pack, say), not a leftover.
pub(super) fn is_lone_file(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && std::os::unix::fs::MetadataExt::nlink(meta) == 1
}

/// Whether the keep file at `path` is ckpt's own (its text) and older than `older_than`. Opened
/// without following a link or blocking (a FIFO swapped in since the listing), and judged by
/// what the open file is.
fn is_stale_keep(path: &std::path::Path, older_than: std::time::Duration) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let Ok(mut file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    else {
        return false;
    };
    let now = std::time::SystemTime::now();
    let old_file = file.metadata().is_ok_and(|meta| {
        meta.is_file()
            && meta.len() == PACK_KEEP_NOTE.len() as u64
            && meta
                .modified()
                .is_ok_and(|at| now.duration_since(at).is_ok_and(|age| age > older_than))
    });
    let mut text = Vec::new();
    old_file && std::io::Read::read_to_end(&mut file, &mut text).is_ok() && text == PACK_KEEP_NOTE
}

/// Where [`place_pack_file`] put a pack.
struct PackPlaced {
    /// Its name: its checksum, as in `pack-<hex>.pack`.
    name: ObjectId,
    /// The keep file holding it, when this call made one (one that was there already is not
    /// ours to remove).
    keep: Option<PathBuf>,
}

/// How many other encodings of a pack [`place_pack_file`] tries when a pack of its name is
/// there already: each is random ([`encoded_again`]), so a second clash is all but impossible.
const OTHER_ENCODINGS: u32 = 4;

/// Puts the encoded `pack` (its objects where `placed` says) in `directory`; see
/// [`place_pack_file`].
fn place_pack(
    directory: &Path,
    mode: u32,
    hash: gix::hash::Kind,
    pack: &[u8],
    placed: Vec<Placed>,
    ids: &[ObjectId],
) -> Result<PackPlaced, VerbError> {
    let failed = |e: std::io::Error| VerbError::git("writing a pack", e);
    std::fs::create_dir_all(directory).map_err(|e| VerbError::git("creating the pack directory", e))?;
    let mut temp = tempfile::NamedTempFile::new_in(directory).map_err(failed)?;
    std::io::Write::write_all(temp.as_file_mut(), pack).map_err(failed)?;
    let checksum = pack[pack.len() - hash.len_in_bytes()..].to_vec();
    place_pack_file(directory, mode, hash, PackFile { temp, checksum, placed }, ids)
}

/// Gives the pack written to a temp file its name in `directory`, with an index made here from
/// where its objects lie: a `.keep` first, as git's own fetch does (until a pin makes these
/// objects reachable, a `git repack -a -d` running beside this snapshot would delete the pack
/// with them, and the snapshot would be published with its objects gone), then the data, then
/// the index, which makes the pack visible. gix must read the index back as naming exactly
/// `ids`, or nothing this call made is left and this fails.
///
/// A pack of that name there already (the same objects a failed snapshot wrote, say) is never
/// relied on, even kept by this call: it is no ref's, and a repack that listed it before this
/// call and reads the refs before the pin deletes it after any check. The same objects are
/// encoded again, differently, under a name no such repack has seen.
fn place_pack_file(
    directory: &Path,
    mode: u32,
    hash: gix::hash::Kind,
    pack: PackFile,
    ids: &[ObjectId],
) -> Result<PackPlaced, VerbError> {
    let natural = match place_named_pack(directory, mode, hash, pack, ids)? {
        Placing::Placed(placed) => return Ok(placed),
        Placing::NameTaken(natural) => natural,
    };
    for _ in 0..OTHER_ENCODINGS {
        let other = encoded_again(directory, hash, &natural)?;
        if let Placing::Placed(placed) = place_named_pack(directory, mode, hash, other, ids)? {
            return Ok(placed);
        }
    }
    Err(VerbError::git_because(
        "writing a pack",
        "a pack of every name tried for its objects is there already",
    ))
}

/// What [`place_named_pack`] did.
enum Placing {
    Placed(PackPlaced),
    /// A pack of its name is there already; nothing was left, and here is the pack back.
    NameTaken(PackFile),
}

/// [`place_pack_file`] under the pack's own name.
fn place_named_pack(
    directory: &Path,
    mode: u32,
    hash: gix::hash::Kind,
    pack: PackFile,
    ids: &[ObjectId],
) -> Result<Placing, VerbError> {
    let name =
        ObjectId::from_bytes(&pack.checksum).map_err(|e| VerbError::git_because("writing a pack", e.to_string()))?;
    let data_path = directory.join(format!("pack-{}.pack", name.to_hex()));
    let index_path = data_path.with_extension("idx");
    let taken = |path: &Path| std::fs::symlink_metadata(path).is_ok();
    if taken(&data_path) || taken(&index_path) {
        return Ok(Placing::NameTaken(pack));
    }
    let index = index_v2(hash, &pack.placed, &pack.checksum)?;
    let permissions = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::Permissions::from_mode(mode)
    };
    // Each file is written whole under a temp name (the pack writer's pattern, so a leftover is
    // found as one) and only then given its name, never over one that is there: the temp file
    // back when that name is taken.
    let persist = |temp: tempfile::NamedTempFile, path: &Path| -> Result<Option<tempfile::NamedTempFile>, VerbError> {
        let failed = |e: std::io::Error| VerbError::git(format!("writing {}", path.display()), e);
        temp.as_file().set_permissions(permissions.clone()).map_err(failed)?;
        match temp.persist_noclobber(path) {
            Ok(_) => Ok(None),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(Some(e.file)),
            Err(e) => Err(failed(e.error)),
        }
    };
    let place = |bytes: &[u8], path: &Path| -> Result<bool, VerbError> {
        let failed = |e: std::io::Error| VerbError::git(format!("writing {}", path.display()), e);
        let mut temp = tempfile::NamedTempFile::new_in(directory).map_err(failed)?;
        std::io::Write::write_all(temp.as_file_mut(), bytes).map_err(failed)?;
        Ok(persist(temp, path)?.is_none())
    };
    // A keep file that is there already (a killed snapshot's) is not ours and stays.
    let keep_path = data_path.with_extension("keep");
    let kept = place(PACK_KEEP_NOTE, &keep_path)?;
    let undo_keep = || {
        if kept {
            std::fs::remove_file(&keep_path).ok();
        }
    };
    let PackFile { temp, checksum, placed } = pack;
    match persist(temp, &data_path) {
        Ok(None) => {}
        Ok(Some(temp)) => {
            undo_keep();
            return Ok(Placing::NameTaken(PackFile { temp, checksum, placed }));
        }
        Err(e) => {
            undo_keep();
            return Err(e);
        }
    }
    let indexed = place(&index, &index_path).and_then(|created| {
        let expected: HashSet<ObjectId> = ids.iter().copied().collect();
        let read_back: Option<HashSet<ObjectId>> = gix_pack::index::File::at(&index_path, hash)
            .ok()
            .map(|index| index.iter().map(|entry| ObjectId(entry.oid)).collect());
        if !created {
            Err(VerbError::git_because(
                "writing a pack",
                format!("{} appeared while its pack was written", index_path.display()),
            ))
        } else if read_back.as_ref() == Some(&expected) {
            Ok(())
        } else {
            std::fs::remove_file(&index_path).ok();
            Err(VerbError::git_because(
                "writing a pack",
                "its index does not name exactly the objects it was written for",
            ))
        }
    });
    if let Err(e) = indexed {
        std::fs::remove_file(&data_path).ok();
        undo_keep();
        return Err(e);
    }
    Ok(Placing::Placed(PackPlaced {
        name,
        keep: kept.then_some(keep_path),
    }))
}

/// See [`Vault::pack_keeps_released_on_return`].
pub struct PackKeepsRelease<'a>(&'a Vault);

impl Drop for PackKeepsRelease<'_> {
    fn drop(&mut self) {
        self.0.release_pack_keeps();
        // What a snapshot that published nothing wrote is not the next pin's to check.
        self.0.take_written_loose();
        self.0.relied_on.borrow_mut().clear();
    }
}

/// An open batch: new objects are collected (and written as kept packs) until
/// [`Vault::finish_open_batch`]. Dropped unfinished (an error, or a snapshot that falls back to
/// another path), what it still held is discarded, and the packs it wrote already are left to
/// the release of their keep files: no ref needs them.
pub struct OpenBatch<'a> {
    vault: &'a Vault,
}

impl Drop for OpenBatch<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.vault.batch.borrow_mut().take() {
            let written = std::mem::take(&mut *batch.written_now());
            self.vault.pending_keeps.borrow_mut().extend(written.keeps);
        }
    }
}

impl Vault {
    /// From now until the batch is finished or dropped, new blobs, trees and commits go into
    /// kept packs, compressed as asked, never loose.
    pub fn begin_batch(&self, compression: PackCompression) -> OpenBatch<'_> {
        let batch = ObjectBatch {
            pending: Mutex::default(),
            compression,
            pack_dir: self.repo.objects.store_ref().path().join("pack"),
            pack_mode: self.new_pack_mode(),
            object_hash: self.repo.object_hash(),
            pack_indices: std::sync::OnceLock::new(),
            written: Mutex::default(),
        };
        *self.batch.borrow_mut() = Some(Arc::new(batch));
        OpenBatch { vault: self }
    }

    /// The batch in progress, if any.
    pub(super) fn batch(&self) -> Option<Arc<ObjectBatch>> {
        self.batch.borrow().clone()
    }

    /// Whether a batch is open.
    pub fn batch_open(&self) -> bool {
        self.batch.borrow().is_some()
    }

    /// Writes what the open batch (if any) still holds as one kept pack, before anything may
    /// refer to it, and ends the batch. Its keep files are released by the next pin (or when the
    /// snapshot returns), and the pin checks that what it relied on is still stored.
    pub fn finish_open_batch(&self) -> Result<BatchWritten, VerbError> {
        let Some(batch) = self.batch.borrow_mut().take() else {
            return Ok(BatchWritten::default());
        };
        let finished = batch.finish();
        let written = std::mem::take(&mut *batch.written_now());
        self.pending_keeps.borrow_mut().extend(written.keeps);
        finished?;
        self.relied_on.borrow_mut().extend(written.relied_on);
        Ok(BatchWritten {
            objects: written.objects,
            packs: written.packs,
        })
    }

    /// Removes the `.keep` files of the packs this vault wrote and no pin has covered yet:
    /// called once a pin is written (their objects are reachable), and when the guard
    /// [`Self::pack_keeps_released_on_return`] gave, or the vault itself, is dropped (a snapshot
    /// that ended without a pin leaves garbage that git may collect).
    pub(super) fn release_pack_keeps(&self) {
        for keep in self.pending_keeps.borrow_mut().drain(..) {
            std::fs::remove_file(keep).ok();
        }
    }

    /// Removes the keep files ckpt wrote (their text is ckpt's own) that are older than
    /// `older_than`: a ckpt killed between writing a pack and its pin leaves one, and git then
    /// keeps that pack for good. A snapshot holds its keep file for the moments between its pack
    /// and its pin, so an old one is no snapshot's any more. A keep file with any other text is
    /// git's or the user's, and left alone. How many were removed.
    pub fn remove_stale_pack_keeps(&self, older_than: std::time::Duration) -> usize {
        let directory = self.repo.objects.store_ref().path().join("pack");
        let Ok(entries) = std::fs::read_dir(&directory) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "keep"))
            .filter(|path| is_stale_keep(path, older_than))
            .filter(|path| std::fs::remove_file(path).is_ok())
            .count()
    }

    /// The keep files ckpt wrote that are older than `older_than` (see
    /// [`Self::remove_stale_pack_keeps`]), for `audit` to name. Read-only.
    pub fn stale_pack_keeps(&self, older_than: std::time::Duration) -> Vec<String> {
        let directory = self.repo.objects.store_ref().path().join("pack");
        let Ok(entries) = std::fs::read_dir(&directory) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "keep"))
            .filter(|entry| is_stale_keep(&entry.path(), older_than))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// A guard that releases the keep files of this vault's unpinned packs when dropped: a
    /// snapshot holds it from before its batch is written until it returns, so one that fails
    /// after writing its pack (its pin refused, say) or publishes nothing leaves no keep file
    /// behind to keep its pack for good (a command's provider is never dropped, so the vault's
    /// own drop does not run).
    pub fn pack_keeps_released_on_return(&self) -> PackKeepsRelease<'_> {
        PackKeepsRelease(self)
    }

    /// Takes the ids of the loose objects written since the last pin, leaving none.
    pub(super) fn take_written_loose(&self) -> Vec<ObjectId> {
        std::mem::take(
            &mut *self
                .written_loose
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The temp files of killed writes that nothing has touched for `older_than`: the pack
    /// writer's in the pack directory (named `pack/.tmpXXXXXX`), and those of a large blob
    /// streamed into the object database (`.tmpXXXXXX`, in `objects/` itself: every killed
    /// snapshot leaves its own, and they pile up). Names are relative to `objects/`.
    /// A write in progress keeps touching its own. Read-only.
    pub fn stale_pack_temps(&self, older_than: std::time::Duration) -> Vec<StalePackTemp> {
        let objects = self.repo.objects.store_ref().path().to_path_buf();
        let mut stale = Vec::new();
        for (directory, prefix) in [(objects.join("pack"), PACK_TEMP_PREFIX), (objects, "")] {
            let Ok(entries) = std::fs::read_dir(&directory) else {
                continue;
            };
            stale.extend(entries.flatten().filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let meta = std::fs::symlink_metadata(entry.path()).ok()?;
                let untouched = meta.modified().ok()?.elapsed().ok()?;
                (is_pack_writer_temp(&name) && is_lone_file(&meta) && untouched >= older_than).then(|| StalePackTemp {
                    name: format!("{prefix}{name}"),
                    bytes: meta.len(),
                    untouched,
                })
            }));
        }
        stale.sort_by(|a, b| a.name.cmp(&b.name));
        stale
    }

    /// Removes a temp file [`Self::stale_pack_temps`] named, if it is still a plain file of that
    /// kind untouched for `older_than`; `Ok(false)` if it is gone or no longer qualifies.
    pub fn remove_stale_pack_temp(&self, name: &str, older_than: std::time::Duration) -> Result<bool, VerbError> {
        let objects = self.repo.objects.store_ref().path();
        let (path, base) = match name.strip_prefix(PACK_TEMP_PREFIX) {
            Some(base) => (objects.join("pack").join(base), base),
            None => (objects.join(name), name),
        };
        if !is_pack_writer_temp(base) {
            return Ok(false);
        }
        let still_stale = std::fs::symlink_metadata(&path).is_ok_and(|meta| {
            is_lone_file(&meta)
                && meta
                    .modified()
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .is_some_and(|untouched| untouched >= older_than)
        });
        if !still_stale {
            return Ok(false);
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(VerbError::git(format!("removing {}", path.display()), e)),
        }
    }
}

#[cfg(test)]
mod other_encodings {
    use super::*;

    fn blob(text: &[u8]) -> (ObjectId, gix::objs::Kind, Vec<u8>) {
        let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, text).expect("hashes");
        (ObjectId(id), gix::objs::Kind::Blob, text.to_vec())
    }

    /// Every object the pack `name` in `directory` holds, read the way a reader of packs does:
    /// the trailer must be the hash of the pack, each entry found where the index says, its
    /// CRC-32 the index's, and its zlib stream inflated whole to bytes that hash to its id.
    fn read_back(directory: &Path, name: ObjectId) -> Vec<(ObjectId, Vec<u8>)> {
        let data_path = directory.join(format!("pack-{}.pack", name.to_hex()));
        let pack = std::fs::read(&data_path).expect("the pack is there");
        let (body, trailer) = pack.split_at(pack.len() - 20);
        let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
        hasher.update(body);
        assert_eq!(hasher.try_finalize().expect("hashes").as_bytes(), trailer);
        assert_eq!(trailer, name.0.as_bytes(), "named by its checksum");
        let index =
            gix_pack::index::File::at(data_path.with_extension("idx"), gix::hash::Kind::Sha1).expect("an index");
        assert_eq!(index.pack_checksum().as_bytes(), trailer);
        let mut offsets: Vec<u64> = index.iter().map(|entry| entry.pack_offset).collect();
        offsets.sort_unstable();
        offsets.push(body.len() as u64);
        let mut objects = Vec::new();
        for entry in index.iter() {
            let start = entry.pack_offset as usize;
            let end = offsets[offsets.iter().position(|at| *at == entry.pack_offset).expect("listed") + 1] as usize;
            let bytes = &pack[start..end];
            assert_eq!(Some(crc32fast::hash(bytes)), entry.crc32, "the index's CRC-32");
            let (mut size, mut shift, mut at) = (u64::from(bytes[0] & 0x0f), 4, 0);
            while bytes[at] & 0x80 != 0 {
                at += 1;
                size |= u64::from(bytes[at] & 0x7f) << shift;
                shift += 7;
            }
            let mut data = vec![0u8; size as usize + 1];
            let mut inflate = gix::zlib::Inflate::default();
            let (status, consumed, written) = inflate.once(&bytes[at + 1..], &mut data).expect("inflates");
            assert_eq!(status, gix::zlib::Status::StreamEnd);
            assert_eq!(consumed, bytes.len() - at - 1, "the entry is one whole zlib stream");
            data.truncate(written);
            let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, &data).expect("hashes");
            assert_eq!(id, entry.oid, "the bytes hash to the id the index names");
            objects.push((ObjectId(id), data));
        }
        objects.sort();
        objects
    }

    /// The same objects placed again, while a pack of their name is there (a failed
    /// snapshot's), go into a pack of their own under another name, at either compression, and
    /// read back the same; the pack that was there is left as it was.
    #[test]
    fn the_same_objects_placed_again_get_a_pack_of_another_name() {
        let objects = vec![blob(b"one\n"), blob(&b"two\n".repeat(5000)), blob(b"")];
        let ids: Vec<ObjectId> = objects.iter().map(|(id, _, _)| *id).collect();
        let mut expected: Vec<(ObjectId, Vec<u8>)> = objects.iter().map(|(id, _, data)| (*id, data.clone())).collect();
        expected.sort();
        for compression in [PackCompression::Fastest, PackCompression::Stored] {
            let dir = tempfile::tempdir().expect("a temp dir");
            let mut names = Vec::new();
            for _ in 0..3 {
                let (pack, placed) = encode_pack(gix::hash::Kind::Sha1, &objects, compression).expect("encodes");
                let put = place_pack(dir.path(), 0o444, gix::hash::Kind::Sha1, &pack, placed, &ids).expect("placed");
                assert!(
                    put.keep.as_ref().is_some_and(|keep| keep.exists()),
                    "held by its own keep file"
                );
                names.push(put.name);
            }
            let first_bytes =
                std::fs::read(dir.path().join(format!("pack-{}.pack", names[0].to_hex()))).expect("there");
            assert_eq!(names.iter().collect::<HashSet<_>>().len(), 3, "{names:?}");
            for name in &names {
                assert_eq!(read_back(dir.path(), *name), expected);
            }
            let (pack, _) = encode_pack(gix::hash::Kind::Sha1, &objects, compression).expect("encodes");
            assert_eq!(first_bytes, pack, "the first pack is the plain encoding, untouched");
        }
    }

    /// Other encodings of one pack are random: two never share a name, so no series of them can
    /// be left there beforehand to make every later snapshot of the same content fail (a
    /// black-box run did that with five kills when the series was fixed).
    #[test]
    fn other_encodings_of_one_pack_differ_every_time() {
        let objects = vec![blob(b"one\n"), blob(&b"two\n".repeat(5000))];
        let dir = tempfile::tempdir().expect("a temp dir");
        let (pack, placed) = encode_pack(gix::hash::Kind::Sha1, &objects, PackCompression::Fastest).expect("encodes");
        let mut temp = tempfile::NamedTempFile::new_in(dir.path()).expect("a temp file");
        std::io::Write::write_all(temp.as_file_mut(), &pack).expect("written");
        let natural = PackFile {
            temp,
            checksum: pack[pack.len() - 20..].to_vec(),
            placed,
        };
        let checksums: HashSet<Vec<u8>> = (0..20)
            .map(|_| {
                encoded_again(dir.path(), gix::hash::Kind::Sha1, &natural)
                    .expect("encoded again")
                    .checksum
            })
            .chain([natural.checksum.clone()])
            .collect();
        assert_eq!(checksums.len(), 21);
    }

    /// A large blob streamed twice, the first pack left there unreachable (a killed snapshot's),
    /// is streamed the second time into a pack of another name; both read back as the blob.
    #[test]
    fn a_streamed_blob_streamed_again_gets_a_pack_of_another_name() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let batch = ObjectBatch {
            pending: Mutex::default(),
            compression: PackCompression::Stored,
            pack_dir: dir.path().to_path_buf(),
            pack_mode: 0o444,
            object_hash: gix::hash::Kind::Sha1,
            pack_indices: std::sync::OnceLock::new(),
            written: Mutex::default(),
        };
        let content: Vec<u8> = (0..3_000_000u32).flat_map(|n| (n % 251).to_le_bytes()).collect();
        let first = batch
            .add_stream(&mut content.as_slice(), content.len() as u64)
            .expect("streamed");
        let second = batch
            .add_stream(&mut content.as_slice(), content.len() as u64)
            .expect("streamed again");
        assert_eq!(first, second);
        let written = batch.written_now();
        assert_eq!(written.packs.len(), 2);
        assert_ne!(written.packs[0].0, written.packs[1].0);
        assert!(written.relied_on.is_empty(), "nothing is relied on");
        for (name, _) in &written.packs {
            assert_eq!(read_back(dir.path(), *name), vec![(first, content.clone())]);
        }
    }

    #[test]
    fn only_the_pack_writers_temp_names_are_taken_for_its_leftovers() {
        assert!(is_pack_writer_temp(".tmpAb3xZ9"));
        for other in [
            "tmp_pack_Ab3xZ9",
            ".tmpAb3xZ",
            ".tmpAb3xZ90",
            ".tmp../x1",
            "pack-1.pack",
            ".tmp",
        ] {
            assert!(!is_pack_writer_temp(other), "{other}");
        }
    }
}
