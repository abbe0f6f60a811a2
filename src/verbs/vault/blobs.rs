//! Parallel blob sinks for the capture: each worker thread hashes, and for a snapshot stores,
//! file contents, reading every file under an fstat before and after so nothing torn is ever
//! stored, and streaming large files through an exact-length reader. Writes only blobs.

use std::cell::Cell;
use std::io::{Read, Seek};
use std::path::Path;

use super::Vault;
use crate::verbs::types::{FileStat, ObjectId};
use crate::verbs::VerbError;

/// A `Sync` handle that hashes (or stores) blobs from many threads; each thread takes a
/// [`LocalBlobs`] of its own.
pub struct ParallelBlobs {
    repo: gix::ThreadSafeRepository,
    store: bool,
    batch: Option<std::sync::Arc<super::batch::ObjectBatch>>,
    written: super::WrittenLoose,
}

/// One thread's blob hasher/writer.
pub struct LocalBlobs {
    repo: gix::Repository,
    store: bool,
    /// Where new blobs go while a batch is open (else straight to the store, loose).
    batch: Option<std::sync::Arc<super::batch::ObjectBatch>>,
    /// Where the loose blobs it writes are noted, for the next pin to check.
    written: super::WrittenLoose,
}

/// Files at least this large are hashed and stored as streams, never read whole.
pub const STREAM_THRESHOLD: u64 = 8 * 1024 * 1024;

impl ParallelBlobs {
    pub fn local(&self) -> LocalBlobs {
        let mut repo = self.repo.to_thread_local();
        // This handle only asks whether a blob is stored before writing it. A miss is the
        // common answer for new content, and by default every miss rescans the pack directory;
        // a pack that appeared meanwhile only costs one duplicate write.
        repo.objects.refresh_never();
        LocalBlobs {
            repo,
            store: self.store,
            batch: self.batch.clone(),
            written: self.written.clone(),
        }
    }
}

impl LocalBlobs {
    /// Hashes `bytes` as a blob, and stores it when this handle stores and the store lacks it.
    /// `reachable`: ids a gc cannot take while the snapshot runs (the content the checkpoint it
    /// builds on holds at this path, which its pin keeps, or the user's index entry); with a
    /// batch open, any other content is written into the batch's kept pack even when a copy is
    /// stored already, since that copy may be unreachable and a gc that walked the refs before
    /// this snapshot's pin may delete it after any check.
    pub fn put(&self, bytes: &[u8], reachable: &[ObjectId]) -> Result<PutBlob, VerbError> {
        let id = gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))?;
        if !self.store {
            return Ok(PutBlob { id, fresh: false });
        }
        // A stored copy is the one a restore will read: one that cannot be read back as exactly
        // these bytes (a damaged or forged pack entry) gets a sound copy beside it, which every
        // read falls back to. Only a reachable copy is relied on rather than written again (the
        // pin checks it is still there); a copy that is merely stored counts as no new content
        // but is written again.
        if let Some(batch) = &self.batch {
            if reachable.contains(&id) && super::objects::read_checked(&self.repo, &id, gix::objs::Kind::Blob).is_ok() {
                batch.rely_on(id);
                return Ok(PutBlob { id, fresh: false });
            }
            let stored = batch.packed(&id) || self.repo.has_object(id.0);
            let fresh = batch.add(id, gix::objs::Kind::Blob, bytes)? && !stored;
            return Ok(PutBlob { id, fresh });
        }
        if self.repo.has_object(id.0) && super::objects::read_checked(&self.repo, &id, gix::objs::Kind::Blob).is_ok() {
            return Ok(PutBlob { id, fresh: false });
        }
        use gix::objs::Write as _;
        let written = super::objects::retried_once(|| self.repo.objects.write_buf(gix::objs::Kind::Blob, bytes))
            .map(ObjectId)
            .map_err(|e| VerbError::git("writing a blob", e))?;
        if written != id {
            return Err(VerbError::git_because(
                format!("writing blob {id}"),
                "the object store named it differently",
            ));
        }
        super::note_written(&self.written, id);
        Ok(PutBlob { id, fresh: true })
    }

    /// Streams `size` bytes into a blob without holding them in memory. A stream that does not
    /// hold exactly `size` bytes (the file grew or shrank while being read) writes nothing: the
    /// object's header would disagree with its content.
    fn put_stream(&self, file: &mut dyn Read, size: u64, store: bool) -> Result<Streamed, VerbError> {
        use gix::objs::Write as _;
        let fault = Cell::new(None);
        let mut exact = ExactLength {
            inner: file,
            remaining: size,
            fault: &fault,
        };
        let result = if store {
            self.repo
                .objects
                .write_stream(gix::objs::Kind::Blob, size, &mut exact)
                .map(ObjectId)
                .map_err(|e| VerbError::git("writing a large blob", e))
        } else {
            let mut progress = gix::progress::Discard;
            let interrupt = std::sync::atomic::AtomicBool::new(false);
            gix::objs::compute_stream_hash(
                self.repo.object_hash(),
                gix::objs::Kind::Blob,
                &mut exact,
                size,
                &mut progress,
                &interrupt,
            )
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a large blob", e))
        };
        match fault.take() {
            Some(SourceFault::LengthChanged) => Ok(Streamed::LengthChanged),
            Some(SourceFault::Unreadable(e)) => Ok(Streamed::Unreadable(e)),
            None => result.map(Streamed::Whole),
        }
    }

    /// [`Self::put_stream`] into a kept pack of the open batch.
    fn put_stream_packed(
        &self,
        batch: &super::batch::ObjectBatch,
        file: &mut dyn Read,
        size: u64,
    ) -> Result<Streamed, VerbError> {
        let fault = Cell::new(None);
        let mut exact = ExactLength {
            inner: file,
            remaining: size,
            fault: &fault,
        };
        let result = batch.add_stream(&mut exact, size);
        match fault.take() {
            Some(SourceFault::LengthChanged) => Ok(Streamed::LengthChanged),
            Some(SourceFault::Unreadable(e)) => Ok(Streamed::Unreadable(e)),
            None => result.map(Streamed::Whole),
        }
    }

    /// Captures the regular file at `path` (opened without following a symlink): its content is
    /// hashed, and stored when this handle stores, only if the file held still while it was
    /// read — same size, mtime, ctime, inode and mode before and after, and exactly `size`
    /// bytes read. A file that changes under [`READ_ATTEMPTS`] reads is reported unstable,
    /// never captured torn.
    /// `reachable` as for [`Self::put`].
    pub fn put_file(&self, path: &Path, max_size: u64, reachable: &[ObjectId]) -> Result<FileRead, VerbError> {
        for attempt in 0..READ_ATTEMPTS {
            if attempt > 0 {
                // Give a writer in the middle of its work a moment to finish.
                std::thread::sleep(std::time::Duration::from_millis(5 << attempt));
            }
            let file = match crate::verbs::worktree::open_no_follow(path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileRead::Vanished),
                // O_NOFOLLOW on a symlink: it was swapped for a link since it was listed.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                    return Ok(FileRead::Vanished)
                }
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            let before = match stat_of(&file) {
                Ok(stat) => stat,
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            if rustix::fs::FileType::from_raw_mode(before.mode) != rustix::fs::FileType::RegularFile {
                return Ok(FileRead::Vanished);
            }
            if before.size > max_size {
                return Ok(FileRead::TooLarge(before.size));
            }
            let mut reader = &file;
            let streamed = if before.size >= STREAM_THRESHOLD {
                // Hashed first; stored in a second pass only if the store lacks it, and kept
                // only if that pass hashed to the same id, so the stored object is the content
                // that held still.
                let id = match self.put_stream(&mut reader, before.size, false)? {
                    Streamed::Whole(id) => id,
                    Streamed::LengthChanged => continue,
                    Streamed::Unreadable(e) => return Ok(FileRead::Unreadable(e)),
                };
                if stat_of(&file).ok() != Some(before) {
                    continue;
                }
                let stored = self.store && self.repo.has_object(id.0);
                if !self.store {
                    Some(PutBlob { id, fresh: false })
                } else if stored && (self.batch.is_none() || reachable.contains(&id)) {
                    if let Some(batch) = &self.batch {
                        batch.rely_on(id);
                    }
                    Some(PutBlob { id, fresh: false })
                } else if let Some(batch) = &self.batch {
                    // Into a kept pack of its own, never loose (see [`super::batch`]); a copy
                    // stored already but perhaps unreachable is written again (see [`Self::put`]).
                    if let Err(e) = reader.seek(std::io::SeekFrom::Start(0)) {
                        return Ok(FileRead::Unreadable(e));
                    }
                    match self.put_stream_packed(batch, &mut reader, before.size)? {
                        Streamed::Whole(written) if written == id => Some(PutBlob { id, fresh: !stored }),
                        Streamed::Whole(_) | Streamed::LengthChanged => None,
                        Streamed::Unreadable(e) => return Ok(FileRead::Unreadable(e)),
                    }
                } else {
                    if let Err(e) = reader.seek(std::io::SeekFrom::Start(0)) {
                        return Ok(FileRead::Unreadable(e));
                    }
                    match self.put_stream(&mut reader, before.size, true)? {
                        Streamed::Whole(stored) if stored == id => {
                            super::note_written(&self.written, id);
                            Some(PutBlob { id, fresh: true })
                        }
                        Streamed::Whole(_) | Streamed::LengthChanged => None,
                        Streamed::Unreadable(e) => return Ok(FileRead::Unreadable(e)),
                    }
                }
            } else {
                let content = match read_up_to(&file, before.size + 1) {
                    Ok(content) => content,
                    Err(e) => return Ok(FileRead::Unreadable(e)),
                };
                let after = match stat_of(&file) {
                    Ok(stat) => stat,
                    Err(e) => return Ok(FileRead::Unreadable(e)),
                };
                // Hashed (and stored) only once the file is known to have held still. A file
                // modified moments ago may have been rewritten within one tick of the kernel's
                // coarse file clock, leaving its stat unchanged: it is read a second time and
                // must give the same bytes.
                let held_still = content.len() as u64 == before.size && after == before;
                let settled = held_still && (!modified_just_now(&before) || same_again(&file, &content));
                if !settled {
                    continue;
                }
                // The stat taken after the read already vouches for these bytes.
                let PutBlob { id, fresh } = self.put(&content, reachable)?;
                return Ok(FileRead::Stable {
                    id,
                    stat: before,
                    fresh,
                });
            };
            let after = match stat_of(&file) {
                Ok(stat) => stat,
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            if let Some(PutBlob { id, fresh }) = streamed.filter(|_| after == before) {
                return Ok(FileRead::Stable {
                    id,
                    stat: before,
                    fresh,
                });
            }
        }
        Ok(FileRead::Unstable)
    }
}

/// A blob hashed (and, by a storing handle, stored).
#[derive(Debug, Clone, Copy)]
pub struct PutBlob {
    pub id: ObjectId,
    /// The store did not hold this content before; this call added it.
    pub fresh: bool,
}

/// How many times [`LocalBlobs::put_file`] reads a file that keeps changing before giving up.
pub const READ_ATTEMPTS: u32 = 4;

/// What [`LocalBlobs::put_file`] made of a file.
#[derive(Debug)]
pub enum FileRead {
    /// Read while the file held still: the id of exactly those bytes, the file's stat then,
    /// and whether this read added the content to the store (it was not there before).
    Stable {
        id: ObjectId,
        stat: FileStat,
        fresh: bool,
    },
    /// The file changed while being read, every time it was read.
    Unstable,
    /// Gone, or no longer a regular file, by the time it was opened.
    Vanished,
    /// Grew past the size limit since it was listed.
    TooLarge(u64),
    Unreadable(std::io::Error),
}

/// `fstat` of an open file, in the form the stat cache keeps.
/// How recent a modification must be for a read to be checked by a second one: a few ticks of
/// the kernel's coarse clock that file timestamps follow (4 ms at HZ=250, 10 ms at HZ=100).
const JUST_NOW: std::time::Duration = std::time::Duration::from_millis(100);

fn modified_just_now(stat: &FileStat) -> bool {
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::new(stat.mtime.0.max(0) as u64, stat.mtime.1);
    std::time::SystemTime::now()
        .duration_since(mtime)
        .map_or(true, |age| age < JUST_NOW)
}

/// Reads `file` again from the start: true if it gives exactly `content`.
fn same_again(file: &std::fs::File, content: &[u8]) -> bool {
    let mut reader = file;
    reader.seek(std::io::SeekFrom::Start(0)).is_ok()
        && read_up_to(file, content.len() as u64 + 1).is_ok_and(|again| again == content)
}

/// At most `limit` bytes from `file`'s position, or fewer at its end: for a file of `limit - 1`
/// bytes that holds still, one read of its bytes and one that finds its end. The caller's fstat
/// gave the size: `std`'s `read_to_end` would repeat it (a `statx` and an `lseek` per file), and
/// without a size hint it reads in chunks from 8 KiB up (five reads for a 70 KB file).
fn read_up_to(mut file: &std::fs::File, limit: u64) -> std::io::Result<Vec<u8>> {
    let limit = usize::try_from(limit).map_err(|_| std::io::Error::other("too large to read whole"))?;
    let mut content = vec![0u8; limit];
    let mut filled = 0;
    while filled < limit {
        match file.read(&mut content[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    content.truncate(filled);
    Ok(content)
}

fn stat_of(file: &std::fs::File) -> std::io::Result<FileStat> {
    Ok(crate::verbs::worktree::file_stat(&rustix::fs::fstat(file)?))
}

/// What streaming a file into a blob came to.
enum Streamed {
    Whole(ObjectId),
    /// The file grew or shrank while it was read; nothing was written.
    LengthChanged,
    /// Reading the file failed; nothing was written.
    Unreadable(std::io::Error),
}

/// Why a source stream was cut off, as [`ExactLength`] saw it.
enum SourceFault {
    LengthChanged,
    Unreadable(std::io::Error),
}

/// Passes on exactly `remaining` bytes and then requires end of file. A short or long source,
/// or a failed read, is recorded in `fault` and fails the read, so the write is abandoned.
struct ExactLength<'a> {
    inner: &'a mut dyn Read,
    remaining: u64,
    fault: &'a Cell<Option<SourceFault>>,
}

impl Read for ExactLength<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut probe = [0u8; 1];
        let wanted = buf.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let target = if self.remaining == 0 {
            &mut probe[..]
        } else {
            &mut buf[..wanted]
        };
        let read = loop {
            match self.inner.read(target) {
                Ok(read) => break read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fault.set(Some(SourceFault::Unreadable(e)));
                    return Err(std::io::Error::other("reading the file failed"));
                }
            }
        };
        match (self.remaining, read) {
            (0, 0) => Ok(0),
            (0, _) | (_, 0) if !target.is_empty() => {
                self.fault.set(Some(SourceFault::LengthChanged));
                Err(std::io::Error::other("the file changed length while it was read"))
            }
            _ => {
                self.remaining -= read as u64;
                Ok(read)
            }
        }
    }
}

impl Vault {
    /// A handle for hashing (`store: false`) or storing blobs in parallel.
    pub fn parallel_blobs(&self, store: bool) -> ParallelBlobs {
        ParallelBlobs {
            repo: self.repo.clone().into_sync(),
            store,
            batch: self.batch().filter(|_| store),
            written: self.written_loose.clone(),
        }
    }
}
