//! The persistent stat cache: path → (size, mtime, ctime, inode, device, mode) → object id, so a
//! file whose stat is unchanged is not read again. It is racy-safe the way git's index is: an
//! entry whose mtime is not strictly older (in whole seconds) than the moment the cache was
//! written is not trusted. The file is versioned and checksummed; anything unexpected discards
//! the whole cache (it is rebuilt on the next snapshot), never trusts part of it.

use std::collections::HashMap;
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
}

/// The cache as loaded: only entries that are safe to trust.
#[derive(Debug, Default)]
pub struct StatCache {
    /// The checkpoint whose objects every entry refers to; the cache is only used while that
    /// checkpoint is still pinned (so its objects cannot have been collected).
    pub checkpoint: Option<ObjectId>,
    entries: HashMap<RepoPath, CacheEntry>,
    /// Entries dropped at load because they were racily clean: while any are missing, the cache
    /// no longer describes its checkpoint completely.
    dropped: usize,
}

impl StatCache {
    pub fn new(checkpoint: Option<ObjectId>) -> Self {
        StatCache {
            checkpoint,
            entries: HashMap::new(),
            dropped: 0,
        }
    }

    pub fn insert(&mut self, path: RepoPath, entry: CacheEntry) {
        self.entries.insert(path, entry);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when every entry written was trusted at load, so the cache names every file of its
    /// checkpoint.
    pub fn is_complete(&self) -> bool {
        self.dropped == 0
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached id for `path` if its stat is exactly `stat`.
    pub fn lookup(&self, path: &RepoPath, stat: &FileStat) -> Option<ObjectId> {
        self.entries.get(path).filter(|e| e.stat == *stat).map(|e| e.id)
    }

    fn encode(&self, written: (i64, u32)) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 120);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&written.0.to_le_bytes());
        out.extend_from_slice(&written.1.to_le_bytes());
        let checkpoint = self.checkpoint.map(|c| c.to_hex()).unwrap_or_default();
        out.push(checkpoint.len() as u8);
        out.extend_from_slice(checkpoint.as_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        let mut paths: Vec<&RepoPath> = self.entries.keys().collect();
        paths.sort();
        for path in paths {
            let entry = &self.entries[path];
            let bytes = path.as_bytes();
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
            let s = &entry.stat;
            out.extend_from_slice(&s.size.to_le_bytes());
            out.extend_from_slice(&s.mtime.0.to_le_bytes());
            out.extend_from_slice(&s.mtime.1.to_le_bytes());
            out.extend_from_slice(&s.ctime.0.to_le_bytes());
            out.extend_from_slice(&s.ctime.1.to_le_bytes());
            out.extend_from_slice(&s.ino.to_le_bytes());
            out.extend_from_slice(&s.dev.to_le_bytes());
            out.extend_from_slice(&s.mode.to_le_bytes());
            let raw = entry.id.as_bytes();
            out.push(raw.len() as u8);
            out.extend_from_slice(raw);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a cache file; `None` for anything but a well-formed current-version file. Entries
    /// that are racily clean relative to the write time are dropped.
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
        for _ in 0..count {
            let len = r.u32()? as usize;
            let path = RepoPath::new(r.take(len)?.to_vec()).ok()?;
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
            if stat.mtime.0 < written.0 {
                cache.entries.insert(path, CacheEntry { stat, id });
            } else {
                cache.dropped += 1;
            }
        }
        (r.pos == body.len()).then_some(cache)
    }

    /// Loads the cache from `dir`; a missing, corrupt or other-version file gives `None`.
    pub fn load(dir: &Path) -> Option<StatCache> {
        let data = std::fs::read(dir.join(FILE_NAME)).ok()?;
        StatCache::decode(&data)
    }

    /// Writes the cache atomically (temp + rename). The write time is taken now, after every
    /// stat in it was taken, which is what makes the racy-clean rule sound.
    pub fn save(&self, dir: &Path, _lock: &super::RegistryLock) -> std::io::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let data = self.encode((now.as_secs() as i64, now.subsec_nanos()));
        let temp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
        let result = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(&data)?;
            file.sync_all()?;
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
            },
        );
        cache.insert(
            path("racy.txt"),
            CacheEntry {
                stat: stat(2000),
                id: id(2),
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
        assert!(
            !decoded.is_complete(),
            "a dropped racy entry makes the cache incomplete"
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
    fn corruption_and_other_versions_discard_everything() {
        let mut cache = StatCache::new(None);
        cache.insert(
            path("a"),
            CacheEntry {
                stat: stat(1),
                id: id(1),
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
