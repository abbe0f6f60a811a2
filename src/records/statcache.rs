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

/// The cache as loaded: every file of its checkpoint, racy ones flagged. It keeps the file's
/// bytes and one offset per entry and decodes an entry only when asked: at 200k files that is
/// half the memory of decoded entries.
#[derive(Debug, Default)]
pub struct StatCache {
    /// The checkpoint whose objects every entry refers to; the cache is only used while that
    /// checkpoint is still pinned (so its objects cannot have been collected).
    pub checkpoint: Option<ObjectId>,
    /// The file as read (validated once, at load).
    data: Vec<u8>,
    /// Where each entry starts in `data`, in strictly increasing path order: a capture walks its
    /// paths in the same order, so finding each one is a step forward, not a hash of the path.
    entries: Vec<u32>,
    /// The cache's write time (seconds): entries modified in that second or later are racy.
    written: i64,
}

/// Fixed part of an entry after its path: size, mtime, ctime, ino, dev, mode.
const STAT_BYTES: usize = 8 + 12 + 12 + 8 + 8 + 4;

impl StatCache {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The path of entry `at`.
    fn path(&self, at: usize) -> &[u8] {
        let start = self.entries[at] as usize;
        let len = u32::from_le_bytes(self.data[start..start + 4].try_into().unwrap_or_default()) as usize;
        &self.data[start + 4..start + 4 + len]
    }

    /// Entry `at`, decoded (the bytes were validated at load).
    pub fn entry(&self, at: usize) -> Option<CacheEntry> {
        let start = self.entries[at] as usize;
        let mut r = Reader {
            data: &self.data,
            pos: start,
        };
        let len = r.u32()? as usize;
        r.take(len)?;
        let stat = r.stat()?;
        let id_len = r.take(1)?[0] as usize;
        let id = ObjectId::from_bytes(r.take(id_len)?).ok()?;
        // Racy-clean rule: a file modified in the same second the cache was written may change
        // again without its stat changing, so it must be re-read.
        let racy = stat.mtime.0 >= self.written;
        Some(CacheEntry { stat, id, racy })
    }

    /// Every path in the cache, in sorted order.
    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
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
    fn decode(mut data: Vec<u8>) -> Option<StatCache> {
        if data.len() < MAGIC.len() + 4 || data.len() > u32::MAX as usize {
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
        let mut entries = Vec::with_capacity(usize::try_from(count).ok()?.min(body.len() / 64));
        let mut previous: &[u8] = &[];
        for _ in 0..count {
            let start = r.pos as u32;
            let len = r.u32()? as usize;
            let raw = r.take(len)?;
            // Written strictly sorted; anything else is not a file this code wrote.
            if !previous.is_empty() && raw <= previous {
                return None;
            }
            RepoPath::check(raw).ok()?;
            previous = raw;
            r.take(STAT_BYTES)?;
            let id_len = r.take(1)?[0] as usize;
            ObjectId::from_bytes(r.take(id_len)?).ok()?;
            entries.push(start);
        }
        if r.pos != body.len() {
            return None;
        }
        data.truncate(data.len() - 4);
        Some(StatCache {
            checkpoint,
            data,
            entries,
            written: written.0,
        })
    }

    /// Loads the cache from `dir`; a missing, corrupt or other-version file gives `None`.
    pub fn load(dir: &Path) -> Option<StatCache> {
        let data = std::fs::read(dir.join(FILE_NAME)).ok()?;
        StatCache::decode(data)
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
    fn stat(&mut self) -> Option<FileStat> {
        Some(FileStat {
            size: self.u64()?,
            mtime: (self.i64()?, self.u32()?),
            ctime: (self.i64()?, self.u32()?),
            ino: self.u64()?,
            dev: self.u64()?,
            mode: self.u32()?,
        })
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

    /// A cache file as `save_entries` writes it, for entries given in any order.
    fn encoded(checkpoint: Option<ObjectId>, written: (i64, u32), entries: &[(&str, FileStat, ObjectId)]) -> Vec<u8> {
        let mut sorted: Vec<(RepoPath, FileStat, ObjectId)> = entries
            .iter()
            .map(|(name, stat, id)| (path(name), *stat, *id))
            .collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        encode_entries(&mut out, checkpoint, written, sorted.iter().map(|(p, s, i)| (p, s, i))).unwrap();
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
        assert!(decode(&swapped(b'a', b'/')).is_none(), "an absolute path");
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
