//! The persistent stat cache: path → (size, mtime, ctime, inode, device, mode) → object id, so a
//! file whose stat is unchanged is not read again. It is racy-safe the way git's index is: an
//! entry whose mtime is not strictly older (in whole seconds) than the moment the cache was
//! written is not trusted. The file is versioned and checksummed; anything unexpected discards
//! the whole cache (it is rebuilt on the next snapshot), never trusts part of it.

use std::io::Write;
use std::path::Path;

pub use crate::verbs::FileStat;
use crate::verbs::{ObjectId, RepoPath};

const MAGIC: &[u8; 8] = b"CKPTSTAT";
const VERSION: u32 = 2;
pub const FILE_NAME: &str = "statcache.bin";

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

/// The cache as loaded: every file of its checkpoint, racy ones flagged.
#[derive(Debug, Default)]
pub struct StatCache {
    /// The checkpoint whose objects every entry refers to; the cache is only used while that
    /// checkpoint is still pinned (so its objects cannot have been collected).
    pub checkpoint: Option<ObjectId>,
    /// Sorted by path, each path once: a capture walks its paths in the same order, so finding
    /// each one is a step forward rather than a hash of the path.
    entries: Vec<(RepoPath, CacheEntry)>,
}

impl StatCache {
    pub fn new(checkpoint: Option<ObjectId>) -> Self {
        StatCache {
            checkpoint,
            entries: Vec::new(),
        }
    }

    /// Adds or replaces the entry for `path`; in path order this is a push.
    pub fn insert(&mut self, path: RepoPath, entry: CacheEntry) {
        match self.entries.last() {
            Some((last, _)) if *last >= path => match self.entries.binary_search_by(|(p, _)| p.cmp(&path)) {
                Ok(at) => self.entries[at].1 = entry,
                Err(at) => self.entries.insert(at, (path, entry)),
            },
            _ => self.entries.push((path, entry)),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every path in the cache, in sorted order.
    pub fn paths(&self) -> impl Iterator<Item = &RepoPath> {
        self.entries.iter().map(|(path, _)| path)
    }

    /// The cached id for `path` if its stat is exactly `stat` and can be trusted.
    pub fn lookup(&self, path: &RepoPath, stat: &FileStat) -> Option<ObjectId> {
        let at = self.entries.binary_search_by(|(p, _)| p.cmp(path)).ok()?;
        Some(&self.entries[at].1).filter(|e| e.trusts(stat)).map(|e| e.id)
    }

    /// The entry of each path, in the order given. Paths in sorted order cost one comparison
    /// each; any other order still gets correct answers, by binary search.
    pub fn locate<'a>(&self, paths: impl IntoIterator<Item = &'a RepoPath>) -> Vec<Option<&CacheEntry>> {
        let mut next = 0;
        paths
            .into_iter()
            .map(|path| {
                let fits_at_next = self.entries.get(next).is_none_or(|(p, _)| p >= path)
                    && (next == 0 || self.entries[next - 1].0 < *path);
                let found = if fits_at_next {
                    match self.entries.get(next) {
                        Some((p, _)) if p == path => Ok(next),
                        _ => Err(next),
                    }
                } else {
                    self.entries.binary_search_by(|(p, _)| p.cmp(path))
                };
                match found {
                    Ok(at) => {
                        next = at + 1;
                        Some(&self.entries[at].1)
                    }
                    Err(at) => {
                        next = at;
                        None
                    }
                }
            })
            .collect()
    }

    #[cfg(test)]
    fn encode(&self, written: (i64, u32)) -> Vec<u8> {
        let mut out = Vec::new();
        let entries = self.entries.iter().map(|(path, entry)| (path, &entry.stat, &entry.id));
        encode_entries(&mut out, self.checkpoint, written, entries).expect("writing to memory");
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a cache file; `None` for anything but a well-formed current-version file. Entries
    /// that are racily clean relative to the write time are flagged.
    fn decode(data: &[u8]) -> Option<StatCache> {
        if data.len() < MAGIC.len() + 4 {
            return None;
        }
        let (body, crc) = data.split_at(data.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut r = Reader { data: body, pos: 0 };
        if r.take(8)? != MAGIC || r.u32()? != VERSION {
            return None;
        }
        let written = (r.i64()?, r.u32()?);
        let checkpoint_len = r.take(1)?[0] as usize;
        let checkpoint = match checkpoint_len {
            0 => None,
            n => Some(ObjectId::from_hex(std::str::from_utf8(r.take(n)?).ok()?).ok()?),
        };
        let count = r.u64()?;
        let mut cache = StatCache::new(checkpoint);
        cache.entries.reserve(usize::try_from(count).ok()?.min(body.len() / 64));
        let mut previous: &[u8] = &[];
        for _ in 0..count {
            let len = r.u32()? as usize;
            let raw = r.take(len)?;
            // Written strictly sorted; anything else is not a file this code wrote.
            if !previous.is_empty() && raw <= previous {
                return None;
            }
            previous = raw;
            let path = RepoPath::new(raw.to_vec()).ok()?;
            let stat = FileStat {
                size: r.u64()?,
                mtime: (r.i64()?, r.u32()?),
                ctime: (r.i64()?, r.u32()?),
                ino: r.u64()?,
                dev: r.u64()?,
                mode: r.u32()?,
            };
            let id_len = r.take(1)?[0] as usize;
            let id = ObjectId::from_bytes(r.take(id_len)?).ok()?;
            // Racy-clean rule: a file modified in the same second the cache was written may
            // change again without its stat changing, so it must be re-read.
            let racy = stat.mtime.0 >= written.0;
            cache.entries.push((path, CacheEntry { stat, id, racy }));
        }
        (r.pos == body.len()).then_some(cache)
    }

    /// Loads the cache from `dir`; a missing, corrupt or other-version file gives `None`.
    pub fn load(dir: &Path) -> Option<StatCache> {
        let data = std::fs::read(dir.join(FILE_NAME)).ok()?;
        StatCache::decode(&data)
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
            let file = std::fs::File::create(&temp)?;
            let mut out = ChecksummedWriter {
                inner: std::io::BufWriter::with_capacity(1 << 16, file),
                crc: crc32fast::Hasher::new(),
            };
            encode_entries(&mut out, checkpoint, written, entries)?;
            let crc = out.crc.finalize();
            out.inner.write_all(&crc.to_le_bytes())?;
            out.inner.flush()?;
            std::fs::rename(&temp, dir.join(FILE_NAME))
        })();
        if result.is_err() {
            std::fs::remove_file(&temp).ok();
        }
        result
    }

    /// Removes the cache (after checkpoints it may refer to were deleted).
    pub fn discard(dir: &Path, _lock: &super::RegistryLock) -> std::io::Result<()> {
        match std::fs::remove_file(dir.join(FILE_NAME)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A writer that keeps a running CRC of everything written through it.
struct ChecksummedWriter<W: Write> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for ChecksummedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes the header and entries (without the trailing CRC) to `out`.
fn encode_entries<'a>(
    out: &mut impl Write,
    checkpoint: Option<ObjectId>,
    written: (i64, u32),
    entries: impl Iterator<Item = (&'a RepoPath, &'a FileStat, &'a ObjectId)> + Clone,
) -> std::io::Result<()> {
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&written.0.to_le_bytes())?;
    out.write_all(&written.1.to_le_bytes())?;
    let checkpoint = checkpoint.map(|c| c.to_hex()).unwrap_or_default();
    out.write_all(&[checkpoint.len() as u8])?;
    out.write_all(checkpoint.as_bytes())?;
    out.write_all(&(entries.clone().count() as u64).to_le_bytes())?;
    for (path, stat, id) in entries {
        let bytes = path.as_bytes();
        out.write_all(&(bytes.len() as u32).to_le_bytes())?;
        out.write_all(bytes)?;
        out.write_all(&stat.size.to_le_bytes())?;
        out.write_all(&stat.mtime.0.to_le_bytes())?;
        out.write_all(&stat.mtime.1.to_le_bytes())?;
        out.write_all(&stat.ctime.0.to_le_bytes())?;
        out.write_all(&stat.ctime.1.to_le_bytes())?;
        out.write_all(&stat.ino.to_le_bytes())?;
        out.write_all(&stat.dev.to_le_bytes())?;
        out.write_all(&stat.mode.to_le_bytes())?;
        let raw = id.as_bytes();
        out.write_all(&[raw.len() as u8])?;
        out.write_all(raw)?;
    }
    Ok(())
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
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

    #[test]
    fn round_trip_keeps_safe_entries_and_drops_racy_ones() {
        let mut cache = StatCache::new(Some(id(9)));
        cache.insert(
            path("old.txt"),
            CacheEntry {
                stat: stat(1000),
                id: id(1),
                racy: false,
            },
        );
        cache.insert(
            path("racy.txt"),
            CacheEntry {
                stat: stat(2000),
                id: id(2),
                racy: false,
            },
        );
        let decoded = StatCache::decode(&cache.encode((2000, 500))).unwrap();
        assert_eq!(decoded.checkpoint, Some(id(9)));
        assert_eq!(decoded.lookup(&path("old.txt"), &stat(1000)), Some(id(1)));
        assert_eq!(
            decoded.lookup(&path("racy.txt"), &stat(2000)),
            None,
            "same-second mtime is racy"
        );
        let racy = decoded.locate([&path("racy.txt")]);
        assert!(
            racy[0].is_some_and(|e| e.racy && e.id == id(2)),
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

    fn cache_of(names: &[&str]) -> StatCache {
        let mut cache = StatCache::new(None);
        for (n, name) in names.iter().enumerate() {
            cache.insert(
                path(name),
                CacheEntry {
                    stat: stat(1),
                    id: id(n as u8 + 1),
                    racy: false,
                },
            );
        }
        cache
    }

    #[test]
    fn locate_answers_like_lookup_in_any_order() {
        // Inserted out of order on purpose: insert keeps the entries sorted.
        let cache = cache_of(&["m/x", "b", "a/z", "z", "a/b"]);
        let probe: Vec<RepoPath> = ["a/b", "a/c", "a/z", "b", "c", "m/x", "zz", "b", "a/b", "0"]
            .iter()
            .map(|name| path(name))
            .collect();
        let located: Vec<Option<ObjectId>> = cache.locate(&probe).iter().map(|e| e.map(|e| e.id)).collect();
        let looked_up: Vec<Option<ObjectId>> = probe.iter().map(|p| cache.lookup(p, &stat(1))).collect();
        assert_eq!(located, looked_up);
        assert_eq!(
            located.iter().filter(|found| found.is_some()).count(),
            6,
            "a/b twice, a/z, b twice, m/x"
        );
    }

    #[test]
    fn a_file_with_unsorted_or_repeated_paths_is_discarded() {
        let sorted = cache_of(&["a", "b"]).encode((100, 0));
        assert!(StatCache::decode(&sorted).is_some());
        // Same length names, so swapping their bytes keeps the file well-formed but unsorted.
        let swapped = |from: &[u8], to: &[u8]| {
            let mut body = sorted[..sorted.len() - 4].to_vec();
            let at = body.windows(5).position(|w| w == [1, 0, 0, 0, from[0]]).unwrap();
            body[at + 4] = to[0];
            let crc = crc32fast::hash(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            body
        };
        assert!(StatCache::decode(&swapped(b"a", b"c")).is_none(), "c before b");
        assert!(StatCache::decode(&swapped(b"a", b"b")).is_none(), "b twice");
    }

    #[test]
    fn corruption_and_other_versions_discard_everything() {
        let mut cache = StatCache::new(None);
        cache.insert(
            path("a"),
            CacheEntry {
                stat: stat(1),
                id: id(1),
                racy: false,
            },
        );
        let good = cache.encode((100, 0));
        assert!(StatCache::decode(&good).is_some());
        for i in [0, 9, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(StatCache::decode(&bad).is_none(), "flipped byte {i}");
        }
        assert!(StatCache::decode(&good[..good.len() - 5]).is_none());
        let mut other_version = good.clone();
        other_version[8] = VERSION as u8 + 1;
        assert!(StatCache::decode(&other_version).is_none());
        assert!(StatCache::decode(b"").is_none());
    }
}
