//! Object verbs: hash and write blobs, trees and commits (exact bytes, no filters), read commits
//! and blobs, and verify that stored objects hash to their ids. Writes only objects.

use super::{Vault, CKPT_EMAIL, CKPT_NAME};
use crate::verbs::types::{EntryKind, ObjectId};
use crate::verbs::{InvalidInput, VerbError};

/// What a commit says, decoded.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    pub tree: ObjectId,
    pub message: Vec<u8>,
}

fn tree_mode(kind: EntryKind) -> gix::objs::tree::EntryMode {
    use gix::objs::tree::EntryKind as K;
    match kind {
        EntryKind::File => K::Blob.into(),
        EntryKind::Executable => K::BlobExecutable.into(),
        EntryKind::Symlink => K::Link.into(),
        EntryKind::Gitlink => K::Commit.into(),
    }
}

/// One entry of a tree being written: a single validated name pointing at a blob, link,
/// gitlink or subtree.
#[derive(Debug, Clone)]
pub struct NewTreeEntry {
    pub name: Vec<u8>,
    pub kind: Option<EntryKind>,
    pub id: ObjectId,
}

impl NewTreeEntry {
    /// `kind: None` marks a subtree.
    pub fn new(name: &[u8], kind: Option<EntryKind>, id: ObjectId) -> Result<Self, InvalidInput> {
        let why = if name.is_empty() {
            Some("empty")
        } else if name.contains(&b'/') || name.contains(&0) {
            Some("contains `/` or NUL")
        } else if name == b"." || name == b".." || crate::verbs::types::names_git_dir(name) {
            Some("reserved name")
        } else {
            None
        };
        match why {
            Some(why) => Err(InvalidInput::TreeName {
                name: String::from_utf8_lossy(name).into_owned(),
                why,
            }),
            None => Ok(NewTreeEntry {
                name: name.to_vec(),
                kind,
                id,
            }),
        }
    }
}

impl Vault {
    /// The id `bytes` would have as a blob in this repository (nothing is written).
    pub fn blob_id(&self, bytes: &[u8]) -> Result<ObjectId, VerbError> {
        gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))
    }

    pub fn has_object(&self, id: &ObjectId) -> bool {
        self.repo.has_object(id.0)
    }

    /// Writes one tree from validated entries, sorted the way git requires.
    pub fn write_tree(&self, entries: Vec<NewTreeEntry>) -> Result<ObjectId, VerbError> {
        let mut tree = gix::objs::Tree {
            entries: entries
                .into_iter()
                .map(|entry| gix::objs::tree::Entry {
                    mode: match entry.kind {
                        Some(kind) => tree_mode(kind),
                        None => gix::objs::tree::EntryKind::Tree.into(),
                    },
                    filename: entry.name.into(),
                    oid: entry.id.0,
                })
                .collect(),
        };
        tree.entries.sort();
        if let Some(pair) = tree
            .entries
            .windows(2)
            .find(|pair| pair[0].filename == pair[1].filename)
        {
            return Err(InvalidInput::TreeName {
                name: pair[0].filename.to_string(),
                why: "duplicate name in one tree",
            }
            .into());
        }
        if let Some(batch) = self.batch() {
            use gix::objs::WriteTo;
            let mut encoded = Vec::with_capacity(tree.entries.len() * 48);
            tree.write_to(&mut encoded)
                .map_err(|e| VerbError::git("encoding a tree", e))?;
            let id = gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Tree, &encoded)
                .map(ObjectId)
                .map_err(|e| VerbError::git("hashing a tree", e))?;
            // Not looked up now: a changed directory's tree is almost always new, and a lookup
            // that misses costs a directory search among the loose objects. A pack may hold a
            // copy already (harmless; git's next repack keeps one).
            batch.add(id, gix::objs::Kind::Tree, &encoded)?;
            self.levels.keep_written(id, &tree.entries);
            return Ok(id);
        }
        let id = retried_once(|| self.repo.write_object(&tree))
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a tree", e))?;
        super::note_written(&self.written_loose, id);
        self.levels.keep_written(id, &tree.entries);
        Ok(id)
    }

    /// Writes a commit with ckpt's own fixed identity. It is not attached to any branch.
    pub fn write_commit(
        &self,
        tree: &ObjectId,
        parent: Option<&ObjectId>,
        message: &str,
        unix_seconds: i64,
    ) -> Result<ObjectId, VerbError> {
        let signature = gix::actor::Signature {
            name: CKPT_NAME.into(),
            email: CKPT_EMAIL.into(),
            time: gix::date::Time {
                seconds: unix_seconds,
                offset: 0,
            },
        };
        let commit = gix::objs::Commit {
            tree: tree.0,
            parents: parent.map(|p| p.0).into_iter().collect(),
            author: signature.clone(),
            committer: signature,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        if let Some(batch) = self.batch() {
            use gix::objs::WriteTo;
            let mut encoded = Vec::with_capacity(512 + commit.message.len());
            commit
                .write_to(&mut encoded)
                .map_err(|e| VerbError::git("encoding a commit", e))?;
            let id = gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Commit, &encoded)
                .map(ObjectId)
                .map_err(|e| VerbError::git("hashing a commit", e))?;
            batch.add(id, gix::objs::Kind::Commit, &encoded)?;
            return Ok(id);
        }
        let id = retried_once(|| self.repo.write_object(&commit))
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a commit", e))?;
        super::note_written(&self.written_loose, id);
        Ok(id)
    }

    pub fn read_commit(&self, id: &ObjectId) -> Result<CommitInfo, VerbError> {
        // Hash-checked: a forged commit would name whatever tree its forger chose.
        let data = read_checked(&self.repo, id, gix::objs::Kind::Commit)?;
        let decoded = gix::objs::CommitRef::from_bytes(&data, self.repo.object_hash())
            .map_err(|e| VerbError::git(format!("decoding commit {id}"), e))?;
        Ok(CommitInfo {
            tree: ObjectId(decoded.tree()),
            message: decoded.message.to_vec(),
        })
    }

    /// Whether each of `ids` is a blob that can be read back exactly: present, of kind blob,
    /// and with content that inflates and hashes to its id (a damaged object fails here, not
    /// half way through a restore). Read on every core; one answer per id, in order.
    pub fn check_blobs(&self, ids: &[ObjectId]) -> Vec<Result<(), VerbError>> {
        use rayon::prelude::*;
        let shared = self.repo.clone().into_sync();
        ids.par_iter()
            .map_init(|| shared.to_thread_local(), |repo, id| check_blob(repo, id))
            .collect()
    }

    /// The uncompressed size of an object, if it is present.
    pub fn object_size(&self, id: &ObjectId) -> Option<u64> {
        self.repo.find_header(id.0).ok().map(|h| h.size())
    }

    /// The content of blob `id`, read back exactly (see [`checked_blob`]): what a diff shows is
    /// what the checkpoint holds, never a forged copy.
    pub fn read_blob(&self, id: &ObjectId) -> Result<Vec<u8>, VerbError> {
        checked_blob(&self.repo, id)
    }
}

fn check_blob(repo: &gix::Repository, id: &ObjectId) -> Result<(), VerbError> {
    checked_blob(repo, id).map(drop)
}

/// The content of blob `id`, read back exactly: present, of kind blob, and hashing to its id.
pub(crate) fn checked_blob(repo: &gix::Repository, id: &ObjectId) -> Result<Vec<u8>, VerbError> {
    read_checked(repo, id, gix::objs::Kind::Blob)
}

/// Where the loose copy of `id` lives below the object directory `objects`.
pub(super) fn loose_path(objects: &std::path::Path, id: &ObjectId) -> std::path::PathBuf {
    let hex = id.to_hex();
    objects.join(&hex[..2]).join(&hex[2..])
}

/// How many times [`missing_now`] looks for an object before it counts as gone.
const GONE_CHECKS: u32 = 4;

/// Those of `ids` that are neither a loose file nor in a pack that is there now. Asked again
/// after a pause before an object counts as gone: a `git repack` moves objects between files
/// while the pack directory is read (its new pack can come in after the listing passed, its
/// old one go before the listing is checked), so one look can miss an object that is there;
/// one truly removed stays missing.
pub(super) fn missing_now(objects: &std::path::Path, hash: gix::hash::Kind, ids: &[ObjectId]) -> Vec<ObjectId> {
    let loose = |id: &ObjectId| std::fs::symlink_metadata(loose_path(objects, id)).is_ok_and(|meta| meta.is_file());
    let mut gone = ids.to_vec();
    for attempt in 0..GONE_CHECKS {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
        }
        // The packs first: their indices answer from memory, where each loose path is a lookup.
        let held = super::packed::held_now(objects, hash, &gone);
        gone = gone
            .into_iter()
            .zip(held)
            .filter(|(_, held)| !held)
            .map(|(id, _)| id)
            .collect();
        gone.retain(|id| !loose(id));
        if gone.is_empty() {
            break;
        }
    }
    gone
}

/// Runs a loose object write, and once more if it fails: a `git prune` (which `git gc --auto`
/// runs after a commit) removes an empty `objects/xx/` directory between gix creating it and
/// moving the object in, and the write fails with "Could not persist loose object". A lasting
/// failure fails again, and that error is the one returned.
pub(super) fn retried_once<T, E>(mut write: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    write().or_else(|_| write())
}

/// The content of object `id`, read back exactly: present, of `kind`, and hashing to its id.
/// A whole copy in one of the repository's own packs is read first ([`super::packed`], as git
/// reads packs first); otherwise, or when that copy fails a check, its loose file, streamed and
/// never past what the file holds; a loose copy that fails any check gives way to a copy a pack
/// holds (a delta, or one in an alternate store), and without one is refused for what is wrong
/// with it. A loose file that is no regular file (a FIFO would block the read forever) is
/// refused.
pub(crate) fn read_checked(repo: &gix::Repository, id: &ObjectId, kind: gix::objs::Kind) -> Result<Vec<u8>, VerbError> {
    let what = match kind {
        gix::objs::Kind::Commit => "commit",
        gix::objs::Kind::Tree => "tree",
        gix::objs::Kind::Blob => "blob",
        gix::objs::Kind::Tag => "tag",
    };
    let unusable = |why: String| VerbError::UnusableObject {
        id: *id,
        what: what.into(),
        why,
    };
    let objects = repo.objects.store_ref().path();
    let packed = super::packed::read_whole(objects, repo.object_hash(), id, |found, data| {
        exactly(repo, id, kind, found, data).ok()
    });
    if let Some(data) = packed {
        return Ok(data);
    }
    let loose_fault = match read_loose(objects, id) {
        Loose::Read(found, data) => match exactly(repo, id, kind, found, data) {
            Ok(data) => return Ok(data),
            Err(why) => Some(why),
        },
        Loose::NotAFile(why) => return Err(unusable(why)),
        Loose::Damaged(why) => Some(why),
        Loose::Absent => None,
    };
    if let Some(why) = loose_fault {
        // Only a packed copy is worth asking gix for (it reads packs first): without one it
        // would read the same damaged loose file again, and inflate all of it however much
        // longer than its header says it is (a zlib bomb would abort ckpt).
        // gix loads pack indices only when a lookup misses, and a loose file is a hit: loaded
        // here, or a packed copy would go unseen, and a forged loose commit would be refused
        // although a pack holds it whole.
        if repo.objects.packed_object_count().is_err()
            || !matches!(repo.find_header(id.0), Ok(gix::odb::find::Header::Packed(_)))
        {
            return Err(unusable(why));
        }
    }
    if !repo.has_object(id.0) {
        return Err(VerbError::MissingObject {
            id: *id,
            what: what.into(),
        });
    }
    let object = repo
        .find_object(id.0)
        .map_err(|e| unusable(crate::verbs::error_chain(&e)))?;
    exactly(repo, id, kind, object.kind, object.detach().data).map_err(unusable)
}

/// `data` (of kind `found`), if it is object `id`: of `kind` and hashing to `id`.
fn exactly(
    repo: &gix::Repository,
    id: &ObjectId,
    kind: gix::objs::Kind,
    found: gix::objs::Kind,
    data: Vec<u8>,
) -> Result<Vec<u8>, String> {
    if found != kind {
        return Err(format!("it is a {found}"));
    }
    let hashed = gix::objs::compute_hash(repo.object_hash(), kind, &data).map_err(|e| crate::verbs::error_chain(&e))?;
    if hashed != id.0 {
        return Err(format!("its content hashes to {hashed}: the object is corrupt"));
    }
    Ok(data)
}

/// What the loose file of an object holds.
enum Loose {
    /// No loose file (the object is packed, or absent); a directory there counts as none.
    Absent,
    /// Its kind and content, as the file's header and zlib stream say (not yet checked
    /// against the id).
    Read(gix::objs::Kind, Vec<u8>),
    /// A file that is not a sound loose object (why): another copy may be.
    Damaged(String),
    /// Something that is no regular file (a FIFO, a device): reading it could block forever or
    /// never end, so nothing else is tried.
    NotAFile(String),
}

/// The loose file of `id` in `objects`, read with plain `read` calls. gix maps each loose object
/// into memory, and in a process with many threads every map and unmap waits for the others'
/// page faults, which plain reads avoid. Opened without blocking (a FIFO would block the open
/// itself).
fn read_loose(objects: &std::path::Path, id: &ObjectId) -> Loose {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(loose_path(objects, id))
    {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
            ) =>
        {
            return Loose::Absent
        }
        Err(e) => return Loose::Damaged(format!("its loose file cannot be read: {e}")),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return Loose::Damaged(format!("its loose file cannot be read: {e}")),
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        return Loose::Absent;
    }
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "a socket"
        };
        return Loose::NotAFile(format!("its loose file is {what}, not a regular file; it was not read"));
    }
    match inflate_loose(std::io::BufReader::with_capacity(1 << 16, file), meta.len()) {
        Ok((kind, data)) => Loose::Read(kind, data),
        Err(why) => Loose::Damaged(why),
    }
}

/// Deflate cannot expand its input more than about 1032 times: a header that claims more is
/// not believed (nor allocated for).
const MAX_DEFLATE_RATIO: u64 = 1032;

/// The kind and content of the loose object whose zlib stream `compressed` (a file of
/// `file_len` bytes) holds: a header ("blob 12\0") and exactly as many bytes as it declares.
/// It reads no further than the stream's end, and holds no more than the stream gave.
fn inflate_loose(mut compressed: impl std::io::BufRead, file_len: u64) -> Result<(gix::objs::Kind, Vec<u8>), String> {
    use zlib_rs::{Inflate, InflateFlush, Status};
    /// Room for any header ("blob " and up to 20 digits).
    const HEADER_ROOM: usize = 64;
    let not_zlib = |e: zlib_rs::InflateError| format!("its loose file is not a zlib stream ({})", e.as_str());
    let unreadable = |e: std::io::Error| format!("its loose file cannot be read: {e}");
    if file_len == 0 {
        return Err("its loose file is empty".into());
    }
    let mut inflate = Inflate::new(true, 15);
    let mut chunk = vec![0u8; 1 << 16];
    let mut out: Vec<u8> = Vec::new();
    // The header's kind and length, and where the content ends.
    let mut header: Option<(gix::objs::Kind, usize, usize)> = None;
    loop {
        // One byte of room past the end, so a stream longer than its header says shows.
        let room = match header {
            None => HEADER_ROOM - out.len(),
            Some((_, _, end)) => (end + 1).saturating_sub(out.len()).min(chunk.len()),
        };
        if room == 0 {
            return Err(match header {
                None => "its loose file does not start with an object header".into(),
                Some(_) => "its loose file holds more than its header says".into(),
            });
        }
        let input = compressed.fill_buf().map_err(unreadable)?;
        let (consumed, produced) = (inflate.total_in(), inflate.total_out());
        let status = inflate
            .decompress(input, &mut chunk[..room], InflateFlush::NoFlush)
            .map_err(not_zlib)?;
        let used = (inflate.total_in() - consumed) as usize;
        let made = (inflate.total_out() - produced) as usize;
        compressed.consume(used);
        out.extend_from_slice(&chunk[..made]);
        if header.is_none() {
            if let Ok((kind, size, header_len)) = gix::objs::decode::loose_header(&out) {
                let end = Some(size)
                    .filter(|size| *size <= file_len.saturating_mul(MAX_DEFLATE_RATIO))
                    .and_then(|size| usize::try_from(size).ok())
                    .and_then(|size| size.checked_add(header_len))
                    .ok_or_else(|| format!("its header claims {size} bytes, more than its loose file can hold"))?;
                // Reserved, not filled: memory is taken as the stream gives content.
                out.try_reserve_exact((end + 1).saturating_sub(out.len()))
                    .map_err(|_| format!("{size} bytes do not fit in memory"))?;
                header = Some((kind, header_len, end));
            }
        }
        if status == Status::StreamEnd {
            break;
        }
        if used == 0 && made == 0 {
            return Err("its loose file ends before its content does".into());
        }
    }
    let Some((kind, header_len, end)) = header else {
        return Err("its loose file does not start with an object header".into());
    };
    if out.len() != end {
        return Err(format!(
            "its header says {} bytes, its loose file holds {}",
            end - header_len,
            if out.len() > end {
                "more".to_owned()
            } else {
                (out.len() - header_len).to_string()
            }
        ));
    }
    out.drain(..header_len);
    Ok((kind, out))
}

#[cfg(test)]
mod tests {
    use gix::objs::Kind;

    fn inflate(compressed: &[u8]) -> Result<(Kind, Vec<u8>), String> {
        super::inflate_loose(compressed, compressed.len() as u64)
    }

    fn deflated(raw: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; zlib_rs::compress_bound(raw.len())];
        let (written, rc) = zlib_rs::compress_slice(&mut out, raw, zlib_rs::DeflateConfig::default());
        assert_eq!(rc, zlib_rs::ReturnCode::Ok);
        written.to_vec()
    }

    #[test]
    fn a_loose_object_reads_back_as_its_kind_and_exact_content() {
        let content: Vec<u8> = (0..70_000u32).map(|n| (n % 251) as u8).collect();
        let mut raw = format!("blob {}\0", content.len()).into_bytes();
        raw.extend_from_slice(&content);
        assert_eq!(inflate(&deflated(&raw)), Ok((Kind::Blob, content)));
        assert_eq!(inflate(&deflated(b"blob 0\0")), Ok((Kind::Blob, Vec::new())));
        assert_eq!(inflate(&deflated(b"tree 0\0")), Ok((Kind::Tree, Vec::new())));
        // Read in small pieces, and with bytes after the stream (never read, never kept).
        let mut padded = deflated(&raw);
        let stream_len = padded.len();
        padded.extend_from_slice(&[0u8; 100]);
        let pieces = std::io::BufReader::with_capacity(7, &padded[..]);
        let content = raw[raw.iter().position(|b| *b == 0).unwrap() + 1..].to_vec();
        assert_eq!(
            super::inflate_loose(pieces, stream_len as u64),
            Ok((Kind::Blob, content))
        );
    }

    #[test]
    fn a_damaged_loose_object_is_refused_with_the_reason() {
        let refused = |compressed: &[u8], why: &str| {
            let error = inflate(compressed).expect_err("refused");
            assert!(error.contains(why), "{error:?} does not say {why:?}");
        };
        let whole = deflated(b"blob 11\0hello world");
        refused(&whole[..whole.len() / 2], "ends before its content does");
        refused(
            &deflated(b"blob 12\0hello world"),
            "says 12 bytes, its loose file holds 11",
        );
        refused(
            &deflated(b"blob 10\0hello world"),
            "says 10 bytes, its loose file holds more",
        );
        refused(b"not zlib at all", "not a zlib stream");
        refused(
            &deflated(b"blub 11\0hello world"),
            "does not start with an object header",
        );
        refused(&deflated(b"blob 99999999999\0x"), "more than its loose file can hold");
        refused(b"", "is empty");
        // Content past the header's size within the first piece the header arrives in, and a
        // bomb far past it: refused after reading no more than the header allows.
        refused(
            &deflated(b"blob 3\0hello world, and much more than three bytes"),
            "holds more",
        );
        let mut bomb = b"blob 13\0".to_vec();
        bomb.resize(bomb.len() + 5_000_000, b'x');
        refused(&deflated(&bomb), "holds more than its header says");
    }
}
