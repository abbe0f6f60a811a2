//! Whole objects read straight from the repository's own packs, found through their indices
//! alone. Asking the loose store first costs a path lookup that misses for every packed object,
//! and a miss in a directory of loose objects whose blocks are not cached costs more than reading
//! the object (a watched snapshot reads the trees of its base this way, all in the pack the
//! previous one wrote). Only an accelerator for [`super::objects::read_checked`], which
//! hash-checks whatever this gives and reads every other way as before: a delta, an object in no
//! listed pack, a pack that cannot be read. Read-only; it never opens a loose object's path.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use crate::verbs::types::ObjectId;

/// The packs of one pack directory as this process listed them.
struct Listed {
    dir: PathBuf,
    /// The directory's mtime when it was listed: a pack added or removed since moves it, and the
    /// next read lists the directory again. (A pack added within the same tick of the clock goes
    /// unseen: its objects are read the other way, which is slower, never wrong.)
    modified: Option<SystemTime>,
    packs: Vec<Pack>,
}

struct Pack {
    index: gix_pack::index::File,
    data_path: PathBuf,
    /// Mapped on the first object read from it.
    data: OnceLock<Option<gix_pack::data::File>>,
}

/// One listing per process (a process serves one repository): the pack indices are mapped once,
/// not once per object or per thread.
static LISTED: Mutex<Option<Arc<Listed>>> = Mutex::new(None);

thread_local! {
    /// One zlib state per thread, reset for each object: making one allocates and clears tens
    /// of KiB, which cost more than inflating a small tree.
    static INFLATE: std::cell::RefCell<gix::zlib::Inflate> = std::cell::RefCell::new(gix::zlib::Inflate::default());
}

/// Deflate cannot expand its input more than about 1032 times: an entry that claims more is not
/// believed (nor allocated for).
const MAX_DEFLATE_RATIO: u64 = 1032;

fn listed(objects: &Path, hash: gix::hash::Kind) -> Option<Arc<Listed>> {
    let dir = objects.join("pack");
    let modified = std::fs::metadata(&dir).ok()?.modified().ok();
    let mut held = LISTED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(listed) = held.as_ref().filter(|l| l.dir == dir && l.modified == modified) {
        return Some(Arc::clone(listed));
    }
    let packs = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(Result::ok)
        // Regular files only: opening a FIFO would block (a symlink is left to gix).
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "idx"))
        .filter_map(|path| {
            let index = gix_pack::index::File::at(&path, hash).ok()?;
            Some(Pack {
                index,
                data_path: path.with_extension("pack"),
                data: OnceLock::new(),
            })
        })
        .collect();
    let listed = Arc::new(Listed { dir, modified, packs });
    *held = Some(Arc::clone(&listed));
    Some(listed)
}

/// For each of `ids`, whether a pack in `objects/pack` names it now: the directory is listed
/// afresh (not as this process listed it before, which a pack removed within one tick of the
/// directory's clock would fool), and a pack counts only while its data file is there too.
pub(super) fn held_now(objects: &Path, hash: gix::hash::Kind, ids: &[ObjectId]) -> Vec<bool> {
    if ids.is_empty() {
        return Vec::new();
    }
    let indices: Vec<gix_pack::index::File> = std::fs::read_dir(objects.join("pack"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "idx"))
                .filter(|path| std::fs::symlink_metadata(path.with_extension("pack")).is_ok_and(|meta| meta.is_file()))
                .filter_map(|path| gix_pack::index::File::at(&path, hash).ok())
                .collect()
        })
        .unwrap_or_default();
    ids.iter()
        .map(|id| indices.iter().any(|index| index.lookup(id.0).is_some()))
        .collect()
}

/// The content of `id` as the first listed pack holding it whole (not as a delta) gives it and
/// `accept` takes it (`accept` checks the kind and content against the id, and returns what to
/// keep). Every pack that holds `id` is tried in turn: one that cannot be read, or whose copy
/// `accept` refuses, does not hide a sound copy in another. `None` when no pack gives one; the
/// caller then reads it another way.
pub(super) fn read_whole(
    objects: &Path,
    hash: gix::hash::Kind,
    id: &ObjectId,
    mut accept: impl FnMut(gix::objs::Kind, Vec<u8>) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let listed = listed(objects, hash)?;
    listed.packs.iter().find_map(|pack| {
        let (kind, data) = read_from(pack, hash, id)?;
        accept(kind, data)
    })
}

/// The kind and content `pack` holds for `id` as a whole object, as that pack says.
fn read_from(pack: &Pack, hash: gix::hash::Kind, id: &ObjectId) -> Option<(gix::objs::Kind, Vec<u8>)> {
    let offset = pack.index.pack_offset_at_index(pack.index.lookup(id.0)?);
    let data = pack
        .data
        .get_or_init(|| {
            let regular = std::fs::symlink_metadata(&pack.data_path).is_ok_and(|meta| meta.is_file());
            regular.then(|| gix_pack::data::File::at(&pack.data_path, hash).ok())?
        })
        .as_ref()?;
    if offset >= data.data_len() as u64 {
        return None;
    }
    let entry = data.entry(offset).ok()?;
    let kind = entry.header.as_kind()?;
    let room = (data.data_len() as u64).checked_sub(entry.data_offset)?;
    if entry.decompressed_size > room.saturating_mul(MAX_DEFLATE_RATIO) {
        return None;
    }
    let mut out = vec![0u8; usize::try_from(entry.decompressed_size).ok()?];
    INFLATE
        .with_borrow_mut(|inflate| data.decompress_entry(&entry, inflate, &mut out))
        .ok()?;
    Some((kind, out))
}
