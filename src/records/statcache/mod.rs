//! The persistent stat cache: path → (size, mtime, ctime, inode, device, mode) → object id, so a
//! file whose stat is unchanged is not read again. It is racy-safe the way git's index is: an
//! entry whose mtime is not strictly older (in whole seconds) than the moment the cache was
//! written is not trusted. The file is versioned and checksummed; anything unexpected in its
//! structure or order discards the whole cache (it is rebuilt on the next snapshot), never
//! trusts part of it. Paths are checked where they are used rather than all at load: a capture
//! only looks up valid paths (an entry under any other path matches nothing), and a watched
//! snapshot that finds one in its scope walks instead.
//!
//! A watched snapshot changes a handful of entries out of hundreds of thousands, so it writes
//! only those, to a small delta file bound to the main file it amends (by the main file's
//! checksum and write time); each delta entry keeps the write time of the save that first
//! recorded its stat, so the racy-clean rule holds entry by entry. A delta that does not match
//! its main file is ignored, and a full save supersedes it. It reads only the runs of the main
//! file its changed paths fall in, found through a block index written next to it
//! ([`blocks`]); without a matching index it reads the whole file.

use std::io::Write;
use std::path::Path;

pub use crate::verbs::FileStat;
use crate::verbs::{ObjectId, PathScope, RepoPath};

mod blocks;
mod codec;
pub use blocks::BLOCKS_FILE_NAME;
use codec::{
    decode_delta, encode_delta, encode_entries, encode_entry, next_entry, ChecksummedWriter, Reader, MAGIC, VERSION,
};

pub const FILE_NAME: &str = "statcache.bin";
pub const DELTA_FILE_NAME: &str = "statcache.delta";
/// A delta with more entries than this is not written: the next snapshot walks and writes the
/// whole cache again instead.
pub const MAX_DELTA_ENTRIES: usize = 4096;

/// One change for a delta: what the new checkpoint holds at a path (stat and id), or `None` for
/// a path it no longer holds.
pub type DeltaChange = (Vec<u8>, Option<(FileStat, ObjectId)>);

/// A delta entry as stored: present entries carry the write time of the save that recorded them.
type StoredChange = (Vec<u8>, Option<(FileStat, ObjectId, i64)>);

#[derive(Debug, Clone)]
pub struct CacheEntry {
    pub stat: FileStat,
    pub id: ObjectId,
    /// Modified in the second the cache was written: the file may have changed again without
    /// its stat changing, so its stat proves nothing and the file must be read. The entry still
    /// says what the cache's checkpoint holds at this path.
    pub racy: bool,
}

impl CacheEntry {
    /// True when a file with this stat certainly still holds `id`.
    pub fn trusts(&self, stat: &FileStat) -> bool {
        !self.racy && self.stat == *stat
    }
}

/// The cache as loaded: every file of its checkpoint, racy ones flagged. It keeps the file's
/// bytes and one offset per entry and decodes an entry only when asked: at 200k files that is
/// half the memory of decoded entries.
#[derive(Debug, Default)]
pub struct StatCache {
    /// The checkpoint whose objects every entry refers to; the cache is only used while that
    /// checkpoint is still pinned (so its objects cannot have been collected).
    pub checkpoint: Option<ObjectId>,
    /// The main file as read (validated once, at load); its entries end at `delta_start`.
    main: Vec<u8>,
    /// The delta's entries, appended at load; an offset `delta_start + n` is `extra[n..]`.
    extra: Vec<u8>,
    /// Where each entry starts, in strictly increasing path order: a capture walks its paths in
    /// the same order, so finding each one is a step forward, not a hash of the path.
    entries: Vec<u32>,
    /// The cache's write time (seconds): entries modified in that second or later are racy.
    written: i64,
    /// The main file's checksum and write time (seconds, nanoseconds): what a delta binds to.
    main_identity: (u32, i64, u32),
    /// Entries at or after this offset came from the delta (they are in `extra`) and carry
    /// their own write time after their id.
    delta_start: usize,
    /// The loaded delta, sorted by path, kept so the next delta carries it forward.
    delta: Vec<StoredChange>,
    /// Only the main file's runs a scope reaches were read ([`StatCache::load_within`]): the
    /// entries answer for paths in that scope (and below) only.
    partial: bool,
}

impl StatCache {
    /// How many entries there are (of a whole cache; a partial one counts only what it read).
    pub fn len(&self) -> usize {
        debug_assert!(!self.partial, "the length of a partial stat cache");
        self.entries.len()
    }

    /// The bytes from entry `at` on (to the end of the main file's entries, or of the delta's).
    fn bytes_of(&self, at: usize) -> &[u8] {
        let start = self.entries[at] as usize;
        match start.checked_sub(self.delta_start) {
            Some(in_extra) => &self.extra[in_extra..],
            None => &self.main[start..self.delta_start],
        }
    }

    /// The path of entry `at`.
    fn path(&self, at: usize) -> &[u8] {
        let bytes = self.bytes_of(at);
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap_or_default()) as usize;
        &bytes[4..4 + len]
    }

    /// Entry `at`, decoded (the bytes were validated at load).
    pub fn entry(&self, at: usize) -> Option<CacheEntry> {
        let start = self.entries[at] as usize;
        let mut r = Reader {
            data: self.bytes_of(at),
            pos: 0,
        };
        let len = r.u32()? as usize;
        r.take(len)?;
        let stat = r.stat()?;
        let id_len = r.take(1)?[0] as usize;
        let id = ObjectId::from_bytes(r.take(id_len)?).ok()?;
        let written = if start >= self.delta_start {
            r.i64()?
        } else {
            self.written
        };
        // Racy-clean rule: a file modified in the same second the cache was written may change
        // again without its stat changing, so it must be re-read.
        let racy = stat.mtime.0 >= written;
        Some(CacheEntry { stat, id, racy })
    }

    /// Every path in the cache, in sorted order (of a whole cache).
    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
        debug_assert!(!self.partial, "the paths of a partial stat cache");
        (0..self.entries.len()).map(|at| self.path(at))
    }

    fn find(&self, path: &[u8]) -> Result<usize, usize> {
        let mut low = 0;
        let mut high = self.entries.len();
        while low < high {
            let mid = (low + high) / 2;
            match self.path(mid).cmp(path) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    /// Every entry at a path in `scope` (or below one of its paths), in path order: found by
    /// binary search per scope path, so the cost follows the scope, not the cache. `None` if one
    /// of them is not a valid repository path (the file was not written by ckpt).
    pub fn entries_within(&self, scope: &crate::verbs::PathScope) -> Option<Vec<(RepoPath, CacheEntry)>> {
        let mut positions: Vec<usize> = Vec::new();
        for path in scope.paths() {
            let path = path.as_bytes();
            let mut at = match self.find(path) {
                Ok(at) => {
                    positions.push(at);
                    at + 1
                }
                Err(at) => at,
            };
            // Every entry starting with `path` is contiguous from here; those below `path/`
            // are among them (`path-x` and `path0` may come before and after them).
            while at < self.entries.len() {
                let candidate = self.path(at);
                if candidate.len() > path.len() && candidate.starts_with(path) {
                    if candidate[path.len()] == b'/' {
                        positions.push(at);
                    }
                    at += 1;
                } else {
                    break;
                }
            }
        }
        positions.sort_unstable();
        positions.dedup();
        positions
            .into_iter()
            .map(|at| Some((RepoPath::new(self.path(at).to_vec()).ok()?, self.entry(at)?)))
            .collect()
    }

    #[cfg(test)]
    /// The cached id for `path` if its stat is exactly `stat` and can be trusted.
    pub fn lookup(&self, path: &RepoPath, stat: &FileStat) -> Option<ObjectId> {
        let at = self.find(path.as_bytes()).ok()?;
        self.entry(at).filter(|e| e.trusts(stat)).map(|e| e.id)
    }

    /// The entry index of each path, in the order given (for [`Self::entry`]). Paths in sorted
    /// order cost one comparison each; any other order still gets correct answers, by binary
    /// search.
    pub fn locate<'a>(&self, paths: impl IntoIterator<Item = &'a RepoPath>) -> Vec<Option<u32>> {
        let mut next = 0;
        paths
            .into_iter()
            .map(|path| {
                let path = path.as_bytes();
                let fits_at_next = (next == self.entries.len() || self.path(next) >= path)
                    && (next == 0 || self.path(next - 1) < path);
                let found = if fits_at_next {
                    if next < self.entries.len() && self.path(next) == path {
                        Ok(next)
                    } else {
                        Err(next)
                    }
                } else {
                    self.find(path)
                };
                match found {
                    Ok(at) => {
                        next = at + 1;
                        Some(at as u32)
                    }
                    Err(at) => {
                        next = at;
                        None
                    }
                }
            })
            .collect()
    }

    /// Decodes and validates a cache file; `None` for anything but a well-formed current-version
    /// file. Entries that are racily clean relative to the write time are flagged when read.
    fn decode(data: Vec<u8>) -> Option<StatCache> {
        if data.len() < MAGIC.len() + 4 || data.len() > u32::MAX as usize {
            return None;
        }
        let (body, crc) = data.split_at(data.len() - 4);
        let crc = u32::from_le_bytes(crc.try_into().ok()?);
        if crc32fast::hash(body) != crc {
            return None;
        }
        let mut r = Reader { data: body, pos: 0 };
        let (written, checkpoint, count) = Self::decode_header(&mut r)?;
        let mut entries = Vec::with_capacity(usize::try_from(count).ok()?.min(body.len() / 64));
        let mut previous: &[u8] = &[];
        for _ in 0..count {
            let start = r.pos as u32;
            previous = next_entry(&mut r, previous)?;
            entries.push(start);
        }
        if r.pos != body.len() {
            return None;
        }
        let delta_start = body.len();
        Some(StatCache {
            checkpoint,
            main: data,
            extra: Vec::new(),
            entries,
            written: written.0,
            main_identity: (crc, written.0, written.1),
            delta_start,
            delta: Vec::new(),
            partial: false,
        })
    }

    /// The header of a main file (magic, version, write time, checkpoint, entry count).
    fn decode_header(r: &mut Reader<'_>) -> Option<((i64, u32), Option<ObjectId>, u64)> {
        if r.take(8)? != MAGIC || r.u32()? != VERSION {
            return None;
        }
        let written = (r.i64()?, r.u32()?);
        let checkpoint_len = r.take(1)?[0] as usize;
        let checkpoint = match checkpoint_len {
            0 => None,
            n => Some(ObjectId::from_hex(std::str::from_utf8(r.take(n)?).ok()?).ok()?),
        };
        Some((written, checkpoint, r.u64()?))
    }

    /// The cache as far as it answers for `scope`: through the block index, only the main
    /// file's runs holding entries at or below the scope's paths are read, each checked on its
    /// own (checksum, first path, order, count); the delta is applied whole. Without a block
    /// index that matches the main file, or if any run it reads is not as the index says, the
    /// whole file is read instead ([`Self::load`]). Such a cache answers for paths in the scope
    /// only: anywhere else an entry may be missing.
    pub fn load_within(dir: &Path, scope: &PathScope) -> Option<StatCache> {
        match Self::load_runs(dir, scope) {
            Some(cache) => Some(cache),
            None => Self::load(dir),
        }
    }

    fn load_runs(dir: &Path, scope: &PathScope) -> Option<StatCache> {
        use std::os::unix::fs::FileExt;
        let index = blocks::load(dir)?;
        let file = crate::verbs::open_regular_file(&dir.join(FILE_NAME)).ok()?;
        if file.metadata().ok()?.len() != index.main_len {
            return None;
        }
        let read_at = |offset: u64, len: usize| {
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, offset).ok().map(|()| buf)
        };
        let header = read_at(0, index.header_len as usize)?;
        let mut r = Reader { data: &header, pos: 0 };
        let (written, checkpoint, count) = Self::decode_header(&mut r)?;
        let crc = u32::from_le_bytes(read_at(index.main_len - 4, 4)?.try_into().ok()?);
        if r.pos != header.len() || count != index.count || (crc, written.0, written.1) != index.identity {
            return None;
        }
        let offsets = index.offsets();
        let wanted = index.blocks_for(scope);
        let mut main: Vec<u8> = Vec::with_capacity(wanted.iter().map(|&at| index.blocks[at].len as usize).sum());
        let mut entries: Vec<u32> = Vec::new();
        // Where the last entry's path is in `main`.
        let mut previous = 0..0;
        for at in wanted {
            let block = &index.blocks[at];
            // Read straight into place; parsed there.
            let base = main.len();
            main.resize(base + block.len as usize, 0);
            file.read_exact_at(&mut main[base..], offsets[at]).ok()?;
            let bytes = &main[base..];
            if crc32fast::hash(bytes) != block.crc {
                return None;
            }
            let mut r = Reader { data: bytes, pos: 0 };
            for n in 0..block.entries {
                let start = u32::try_from(base + r.pos).ok()?;
                let path = next_entry(&mut r, &main[previous.clone()])?;
                if n == 0 && path != block.first.as_slice() {
                    return None;
                }
                let path_start = start as usize + 4;
                previous = path_start..path_start + path.len();
                entries.push(start);
            }
            // Every entry of a run sorts before the next run's first.
            let last = &main[previous.clone()];
            let before_next = index.blocks.get(at + 1).is_none_or(|next| last < next.first.as_slice());
            if r.pos != block.len as usize || !before_next {
                return None;
            }
        }
        let mut cache = StatCache {
            checkpoint,
            delta_start: main.len(),
            main,
            extra: Vec::new(),
            entries,
            written: written.0,
            main_identity: index.identity,
            delta: Vec::new(),
            partial: true,
        };
        if let Some((checkpoint, delta)) = crate::verbs::read_regular_file(&dir.join(DELTA_FILE_NAME))
            .ok()
            .and_then(|bytes| decode_delta(&bytes, cache.main_identity))
        {
            cache.apply(checkpoint, delta)?;
        }
        Some(cache)
    }

    /// Loads the cache from `dir`, with its delta when one amends this main file. A missing,
    /// corrupt or other-version main file gives `None`; a delta that is anything but a
    /// well-formed amendment of this main file is ignored.
    pub fn load(dir: &Path) -> Option<StatCache> {
        // Read, not mapped: a mapping faults (SIGBUS) when another program shortens the file
        // while it is read, and a hostile program can make that happen.
        let data = crate::verbs::read_regular_file(&dir.join(FILE_NAME)).ok()?;
        let mut cache = StatCache::decode(data)?;
        if let Some((checkpoint, delta)) = crate::verbs::read_regular_file(&dir.join(DELTA_FILE_NAME))
            .ok()
            .and_then(|bytes| decode_delta(&bytes, cache.main_identity))
        {
            cache.apply(checkpoint, delta)?;
        }
        Some(cache)
    }

    /// Amends the loaded entries with a delta: its entries are appended to `data` and the entry
    /// offsets merged in path order. `None` if the result would not fit the offset type.
    fn apply(&mut self, checkpoint: Option<ObjectId>, delta: Vec<StoredChange>) -> Option<()> {
        let mut merged = Vec::with_capacity(self.entries.len() + delta.len());
        let mut main = 0;
        for (path, change) in &delta {
            while main < self.entries.len() && self.path(main) < path.as_slice() {
                merged.push(self.entries[main]);
                main += 1;
            }
            if main < self.entries.len() && self.path(main) == path.as_slice() {
                main += 1;
            }
            if let Some((stat, id, written)) = change {
                let start = u32::try_from(self.delta_start + self.extra.len()).ok()?;
                encode_entry(&mut self.extra, path, stat, id).ok()?;
                self.extra.extend_from_slice(&written.to_le_bytes());
                merged.push(start);
            }
        }
        merged.extend_from_slice(&self.entries[main..]);
        u32::try_from(self.delta_start + self.extra.len()).ok()?;
        self.entries = merged;
        self.checkpoint = checkpoint;
        self.delta = delta;
        Some(())
    }

    /// Writes a delta that makes this cache (as loaded) stand for `checkpoint`, given the
    /// `changes` from the cache's own checkpoint (sorted by path, each once) and carrying forward
    /// the delta it was loaded with. `Ok(false)`: the delta would grow past
    /// [`MAX_DELTA_ENTRIES`], so nothing was written and the cache still stands for its own
    /// checkpoint (the next snapshot walks and writes it whole).
    pub fn save_delta(
        &self,
        dir: &Path,
        _lock: &super::RegistryLock,
        checkpoint: Option<ObjectId>,
        changes: &[DeltaChange],
    ) -> std::io::Result<bool> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut merged: Vec<StoredChange> = Vec::with_capacity(self.delta.len() + changes.len());
        let mut old = self.delta.iter().peekable();
        for (path, change) in changes {
            while let Some(earlier) = old.next_if(|(p, _)| p < path) {
                merged.push(earlier.clone());
            }
            old.next_if(|(p, _)| p == path);
            merged.push((path.clone(), change.map(|(stat, id)| (stat, id, now.as_secs() as i64))));
        }
        merged.extend(old.cloned());
        if merged.len() > MAX_DELTA_ENTRIES {
            return Ok(false);
        }
        let out = encode_delta(self.main_identity, checkpoint, &merged)?;
        let temp = dir.join(format!(".{DELTA_FILE_NAME}.{}.tmp", std::process::id()));
        // No fsync, as for the main file: a torn delta fails its checksum and is ignored.
        let result = crate::records::create_temp_exclusive(&temp)
            .and_then(|mut file| file.write_all(&out))
            .and_then(|()| std::fs::rename(&temp, dir.join(DELTA_FILE_NAME)));
        if result.is_err() {
            std::fs::remove_file(&temp).ok();
        }
        result.map(|()| true)
    }

    /// Writes a cache for `checkpoint` atomically (temp + rename) straight from `entries`, which
    /// must come in strictly increasing path order (a sorted capture), streamed so no copy of the
    /// file is held in memory. The write time is taken now, after every stat in it was taken,
    /// which is what makes the racy-clean rule sound.
    pub fn save_entries<'a>(
        dir: &Path,
        _lock: &super::RegistryLock,
        checkpoint: Option<ObjectId>,
        entries: impl Iterator<Item = (&'a RepoPath, &'a FileStat, &'a ObjectId)> + Clone,
    ) -> std::io::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let written = (now.as_secs() as i64, now.subsec_nanos());
        let temp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
        let result = (|| {
            // No fsync: after a crash the file is the old cache, the new one, or bytes that fail
            // the checksum and are discarded; each of those is safe to trust or to drop.
            let file = crate::records::create_temp_exclusive(&temp)?;
            let mut out = ChecksummedWriter {
                inner: std::io::BufWriter::with_capacity(1 << 16, file),
                crc: crc32fast::Hasher::new(),
            };
            let mut blocks = blocks::BlockWriter::default();
            let (header_len, count) = encode_entries(&mut out, checkpoint, written, entries, &mut blocks)?;
            let crc = out.crc.finalize();
            out.inner.write_all(&crc.to_le_bytes())?;
            out.inner.flush()?;
            std::fs::rename(&temp, dir.join(FILE_NAME))?;
            // Bound to the old main file, it would be ignored anyway; removed so it is not read.
            match std::fs::remove_file(dir.join(DELTA_FILE_NAME)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            // Last: until it is replaced, the old index names the old main file and is ignored.
            let index = blocks::BlockIndex {
                identity: (crc, written.0, written.1),
                main_len: u64::from(header_len) + blocks.total + 4,
                header_len,
                count,
                blocks: blocks.finish(),
            };
            blocks::save(dir, &index)
        })();
        if result.is_err() {
            std::fs::remove_file(&temp).ok();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime: i64) -> FileStat {
        FileStat {
            size: 10,
            mtime: (mtime, 5),
            ctime: (mtime, 6),
            ino: 42,
            dev: 7,
            mode: 0o100644,
        }
    }

    fn id(n: u8) -> ObjectId {
        ObjectId::from_hex(&format!("{n:02x}").repeat(20)).unwrap()
    }

    fn path(text: &str) -> RepoPath {
        RepoPath::new(text.as_bytes().to_vec()).unwrap()
    }

    /// A cache file as `save_entries` writes it, for entries given in any order.
    fn encoded(checkpoint: Option<ObjectId>, written: (i64, u32), entries: &[(&str, FileStat, ObjectId)]) -> Vec<u8> {
        let mut sorted: Vec<(RepoPath, FileStat, ObjectId)> = entries
            .iter()
            .map(|(name, stat, id)| (path(name), *stat, *id))
            .collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        let mut blocks = blocks::BlockWriter::default();
        encode_entries(
            &mut out,
            checkpoint,
            written,
            sorted.iter().map(|(p, s, i)| (p, s, i)),
            &mut blocks,
        )
        .unwrap();
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<StatCache> {
        StatCache::decode(bytes.to_vec())
    }

    #[test]
    fn round_trip_keeps_safe_entries_and_flags_racy_ones() {
        let file = encoded(
            Some(id(9)),
            (2000, 500),
            &[("old.txt", stat(1000), id(1)), ("racy.txt", stat(2000), id(2))],
        );
        let decoded = decode(&file).unwrap();
        assert_eq!(decoded.checkpoint, Some(id(9)));
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded.lookup(&path("old.txt"), &stat(1000)), Some(id(1)));
        assert_eq!(
            decoded.lookup(&path("racy.txt"), &stat(2000)),
            None,
            "same-second mtime is racy"
        );
        let racy = decoded.locate([&path("racy.txt")]);
        let entry = racy[0].and_then(|at| decoded.entry(at as usize));
        assert!(
            entry.is_some_and(|e| e.racy && e.id == id(2) && e.stat == stat(2000)),
            "a racy entry stays, flagged: it still names its checkpoint's file"
        );
        let mut changed = stat(1000);
        changed.ctime.1 += 1;
        assert_eq!(
            decoded.lookup(&path("old.txt"), &changed),
            None,
            "any stat change misses"
        );
    }

    #[test]
    fn a_delta_amends_only_its_own_main_file_entry_by_entry() {
        let main = encoded(
            Some(id(9)),
            (2000, 500),
            &[
                ("a", stat(1000), id(1)),
                ("b", stat(1000), id(2)),
                ("c", stat(2000), id(3)),
            ],
        );
        let mut cache = decode(&main).unwrap();
        let identity = cache.main_identity;
        // b is gone, c was read again (now older than this delta), d is new and racy.
        let delta: Vec<StoredChange> = vec![
            (b"b".to_vec(), None),
            (b"c".to_vec(), Some((stat(2000), id(4), 3000))),
            (b"d".to_vec(), Some((stat(3000), id(5), 3000))),
        ];
        let bytes = encode_delta(identity, Some(id(8)), &delta).unwrap();
        let (checkpoint, decoded) = decode_delta(&bytes, identity).unwrap();
        assert_eq!(checkpoint, Some(id(8)));
        cache.apply(checkpoint, decoded).unwrap();
        assert_eq!(cache.checkpoint, Some(id(8)));
        assert_eq!(cache.paths().collect::<Vec<_>>(), vec![&b"a"[..], b"c", b"d"]);
        assert_eq!(cache.lookup(&path("a"), &stat(1000)), Some(id(1)));
        assert_eq!(
            cache.lookup(&path("c"), &stat(2000)),
            Some(id(4)),
            "the delta's own write time decides"
        );
        assert_eq!(
            cache.lookup(&path("d"), &stat(3000)),
            None,
            "racy against the delta's write time"
        );
        assert!(cache.entry(2).is_some_and(|e| e.racy && e.id == id(5)));

        // Bound to one main file: another main file (other checksum or write time) ignores it.
        let other = (identity.0 ^ 1, identity.1, identity.2);
        assert!(decode_delta(&bytes, other).is_none());
        assert!(decode_delta(&bytes, (identity.0, identity.1, identity.2 + 1)).is_none());
        // Any flipped byte, a truncation, unsorted or repeated paths: ignored.
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x20;
            assert!(decode_delta(&bad, identity).is_none(), "byte {at}");
        }
        assert!(decode_delta(&bytes[..bytes.len() - 1], identity).is_none());
        let unsorted = vec![delta[1].clone(), delta[0].clone()];
        assert!(decode_delta(&encode_delta(identity, None, &unsorted).unwrap(), identity).is_none());
        let hostile = vec![(b"../x".to_vec(), None)];
        assert!(decode_delta(&encode_delta(identity, None, &hostile).unwrap(), identity).is_none());
    }

    fn cache_of(names: &[&str]) -> StatCache {
        let entries: Vec<(&str, FileStat, ObjectId)> = names
            .iter()
            .enumerate()
            .map(|(n, name)| (*name, stat(1), id(n as u8 + 1)))
            .collect();
        decode(&encoded(None, (100, 0), &entries)).unwrap()
    }

    #[test]
    fn locate_answers_like_lookup_in_any_order() {
        let cache = cache_of(&["m/x", "b", "a/z", "z", "a/b"]);
        let probe: Vec<RepoPath> = ["a/b", "a/c", "a/z", "b", "c", "m/x", "zz", "b", "a/b", "0"]
            .iter()
            .map(|name| path(name))
            .collect();
        let located: Vec<Option<ObjectId>> = cache
            .locate(&probe)
            .iter()
            .map(|at| at.and_then(|at| cache.entry(at as usize)).map(|e| e.id))
            .collect();
        let looked_up: Vec<Option<ObjectId>> = probe.iter().map(|p| cache.lookup(p, &stat(1))).collect();
        assert_eq!(located, looked_up);
        assert_eq!(
            located.iter().filter(|found| found.is_some()).count(),
            6,
            "a/b twice, a/z, b twice, m/x"
        );
        let paths: Vec<&[u8]> = cache.paths().collect();
        assert_eq!(paths, vec![&b"a/b"[..], b"a/z", b"b", b"m/x", b"z"]);
    }

    #[test]
    fn a_file_with_unsorted_repeated_or_hostile_paths_is_discarded() {
        let sorted = encoded(None, (100, 0), &[("a", stat(1), id(1)), ("b", stat(1), id(2))]);
        assert!(decode(&sorted).is_some());
        // Same length names, so swapping their bytes keeps the file well-formed but unsorted.
        let swapped = |from: u8, to: u8| {
            let mut body = sorted[..sorted.len() - 4].to_vec();
            let at = body.windows(5).position(|w| w == [1, 0, 0, 0, from]).unwrap();
            body[at + 4] = to;
            let crc = crc32fast::hash(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            body
        };
        assert!(decode(&swapped(b'a', b'c')).is_none(), "c before b");
        assert!(decode(&swapped(b'a', b'b')).is_none(), "b twice");
        // A path that is not a repository path is checked where it is used: it matches no
        // lookup, and a scope that reaches it gets no entries at all (the snapshot walks).
        let absolute = decode(&swapped(b'a', b'/')).expect("sorted and well formed");
        assert_eq!(absolute.lookup(&path("b"), &stat(1)), Some(id(2)));
        let scope = |paths: &[&str]| crate::verbs::PathScope::new(paths.iter().map(|p| path(p)));
        assert!(absolute.entries_within(&scope(&["b"])).is_some_and(|e| e.len() == 1));
        let hostile = decode(&encoded_raw(&[b"a/../x", b"b"])).expect("sorted and well formed");
        assert!(hostile.entries_within(&scope(&["b"])).is_some_and(|e| e.len() == 1));
        assert!(
            hostile.entries_within(&scope(&["a"])).is_none(),
            "a scope of valid paths can still reach an invalid one below it"
        );
        assert_eq!(hostile.lookup(&path("b"), &stat(1)), Some(id(1)));
    }

    /// A well-formed main file of `paths` (in the order given, unchecked), each `stat(1)`.
    fn encoded_raw(paths: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&100i64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.push(0);
        out.extend_from_slice(&(paths.len() as u64).to_le_bytes());
        for (n, raw) in paths.iter().enumerate() {
            encode_entry(&mut out, raw, &stat(1), &id(n as u8)).unwrap();
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// `count` entries spread over 13 directories, saved as a snapshot saves them (main file,
    /// then its block index) in `dir`.
    fn saved_many(dir: &Path, count: usize, checkpoint: u8) {
        let registry = crate::records::Registry::open(dir).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        let mut entries: Vec<(RepoPath, FileStat, ObjectId)> = (0..count)
            .map(|n| {
                (
                    path(&format!("d{}/f{n}.txt", n % 13)),
                    stat(1000),
                    id((n % 250) as u8 + 1),
                )
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        StatCache::save_entries(
            dir,
            &lock,
            Some(id(checkpoint)),
            entries.iter().map(|(p, s, i)| (p, s, i)),
        )
        .unwrap();
    }

    fn scope_of(paths: &[&str]) -> PathScope {
        PathScope::new(paths.iter().map(|p| path(p)))
    }

    /// Each entry at or below the scope, as (path, id, stat).
    fn within(cache: &StatCache, scope: &PathScope) -> Vec<(RepoPath, ObjectId, FileStat)> {
        let entries = cache.entries_within(scope).unwrap();
        entries.into_iter().map(|(p, e)| (p, e.id, e.stat)).collect()
    }

    /// Through the block index a scope's load reads a few runs, and answers for every path in
    /// the scope (and below, and siblings sharing its prefix) exactly as the whole file does.
    #[test]
    fn a_scoped_load_reads_only_its_runs_and_answers_for_its_scope_as_a_whole_load_does() {
        let dir = tempfile::tempdir().unwrap();
        saved_many(dir.path(), 3000, 9);
        let whole = StatCache::load(dir.path()).unwrap();
        let file_len = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len() as usize;
        let scopes: [&[&str]; 6] = [
            &["d3/f3.txt"],
            &["d1"],
            &["d1/f1.txt", "d12", "zzz", "0"],
            &[],
            &["d1/f14.txt", "d10", "d1/f"],
            &["d7/f7.txt", "d7/f7.txt/below"],
        ];
        for paths in scopes {
            let scope = scope_of(paths);
            let partial = StatCache::load_within(dir.path(), &scope).unwrap();
            assert!(partial.partial, "{paths:?}: read through the block index");
            assert_eq!(
                (partial.checkpoint, partial.main_identity),
                (whole.checkpoint, whole.main_identity)
            );
            assert_eq!(within(&partial, &scope), within(&whole, &scope), "{paths:?}");
            assert!(
                partial.main.len() < file_len / 2,
                "{paths:?}: {} of {file_len} bytes",
                partial.main.len()
            );
            let probes: Vec<RepoPath> = within(&whole, &scope).into_iter().map(|(p, _, _)| p).collect();
            let ids = |c: &StatCache| -> Vec<Option<ObjectId>> {
                c.locate(&probes)
                    .iter()
                    .map(|at| at.and_then(|at| c.entry(at as usize)).map(|e| e.id))
                    .collect()
            };
            assert_eq!(ids(&partial), ids(&whole), "{paths:?}");
        }
        let one = StatCache::load_within(dir.path(), &scope_of(&["d3/f3.txt"])).unwrap();
        assert!(
            one.main.len() <= 2 * blocks::BLOCK_BYTES as usize,
            "one run or two: {}",
            one.main.len()
        );

        // With a delta: applied whole, as a whole load applies it.
        let registry = crate::records::Registry::open(dir.path()).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        let changes: Vec<DeltaChange> = vec![
            (b"d3/f3.txt".to_vec(), None),
            (b"d3/new.txt".to_vec(), Some((stat(1500), id(77)))),
        ];
        assert!(whole.save_delta(dir.path(), &lock, Some(id(8)), &changes).unwrap());
        let scope = scope_of(&["d3"]);
        let (amended, partial) = (
            StatCache::load(dir.path()).unwrap(),
            StatCache::load_within(dir.path(), &scope).unwrap(),
        );
        assert_eq!(partial.checkpoint, Some(id(8)));
        assert_eq!(within(&partial, &scope), within(&amended, &scope));
        assert!(within(&partial, &scope)
            .iter()
            .any(|(p, i, _)| p.as_bytes() == b"d3/new.txt" && *i == id(77)));
        assert!(!within(&partial, &scope)
            .iter()
            .any(|(p, _, _)| p.as_bytes() == b"d3/f3.txt"));
    }

    /// A link planted at any of the cache's temp names (main file, block index, delta) is
    /// unlinked, never written through: its target keeps its bytes and the cache is saved.
    #[test]
    fn saves_never_write_through_a_link_at_their_temp_names() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let names = [FILE_NAME, blocks::BLOCKS_FILE_NAME, DELTA_FILE_NAME];
        for name in names {
            let target = outside.path().join(name);
            std::fs::write(&target, b"the user's bytes").unwrap();
            std::os::unix::fs::symlink(&target, dir.path().join(format!(".{name}.{pid}.tmp"))).unwrap();
        }
        saved_many(dir.path(), 50, 9);
        let whole = StatCache::load(dir.path()).unwrap();
        let registry = crate::records::Registry::open(dir.path()).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        let changes: Vec<DeltaChange> = vec![(b"d3/new.txt".to_vec(), Some((stat(1500), id(77))))];
        assert!(whole.save_delta(dir.path(), &lock, Some(id(8)), &changes).unwrap());
        for name in names {
            assert_eq!(
                std::fs::read(outside.path().join(name)).unwrap(),
                b"the user's bytes",
                "{name}"
            );
            assert!(
                std::fs::symlink_metadata(dir.path().join(name)).unwrap().is_file(),
                "{name}"
            );
        }
        assert_eq!(StatCache::load(dir.path()).unwrap().checkpoint, Some(id(8)));
        assert!(StatCache::load_within(dir.path(), &scope_of(&["d3"])).unwrap().partial);
    }

    /// A run that fails its checks makes the whole file be read (and then its checksum decides);
    /// a damaged run the scope does not reach is never read. An index of another main file, or
    /// none, means the whole file.
    #[test]
    fn a_damaged_run_or_a_stale_index_means_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        saved_many(dir.path(), 3000, 9);
        let main = dir.path().join(FILE_NAME);
        let good = std::fs::read(&main).unwrap();
        let index = blocks::load(dir.path()).unwrap();
        let scope = scope_of(&["d3/f3.txt"]);
        let [run] = index.blocks_for(&scope)[..] else {
            panic!("one run holds d3/f3.txt")
        };
        let offsets = index.offsets();
        let damage = |at: u64| {
            let mut bytes = good.clone();
            bytes[at as usize + 40] ^= 0x01;
            std::fs::write(&main, &bytes).unwrap();
        };
        damage(offsets[run]);
        assert!(
            StatCache::load_within(dir.path(), &scope).is_none(),
            "the run fails, then the whole file"
        );
        let elsewhere = if run == 0 { 1 } else { 0 };
        damage(offsets[elsewhere]);
        let partial = StatCache::load_within(dir.path(), &scope).unwrap();
        assert!(partial.partial && within(&partial, &scope).len() == 1);
        assert!(
            StatCache::load(dir.path()).is_none(),
            "a whole load still sees the damage"
        );
        std::fs::write(&main, &good).unwrap();

        // The index of an earlier main file: ignored, the whole (new) file is read.
        let earlier = std::fs::read(dir.path().join(blocks::BLOCKS_FILE_NAME)).unwrap();
        saved_many(dir.path(), 2000, 5);
        std::fs::write(dir.path().join(blocks::BLOCKS_FILE_NAME), &earlier).unwrap();
        let whole = StatCache::load_within(dir.path(), &scope).unwrap();
        assert!(!whole.partial);
        assert_eq!(whole.checkpoint, Some(id(5)));
        std::fs::remove_file(dir.path().join(blocks::BLOCKS_FILE_NAME)).unwrap();
        assert!(!StatCache::load_within(dir.path(), &scope).unwrap().partial);
    }

    #[test]
    fn corruption_and_other_versions_discard_everything() {
        let good = encoded(None, (100, 0), &[("a", stat(1), id(1))]);
        assert!(decode(&good).is_some());
        for i in [0, 9, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_none(), "flipped byte {i}");
        }
        assert!(decode(&good[..good.len() - 5]).is_none());
        let mut other_version = good.clone();
        other_version[8] = VERSION as u8 + 1;
        assert!(decode(&other_version).is_none());
        assert!(decode(b"").is_none());
    }
}
