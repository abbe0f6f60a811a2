//! The stat cache's block index (`statcache.blocks`): the main file's entries cut into runs of
//! about 8 KiB, each with its own checksum and first path, so a watched snapshot reads only the
//! runs its changed paths fall in (a few hundred KiB at 200k files, not the whole file). The
//! index is bound to the main file it describes (that file's checksum, write time and length)
//! and its runs must tile the main file's entries exactly; a run is used only once its own
//! checksum, first path, order and entry count check out. Anything else and the caller reads
//! the whole main file, as without an index. It never trusts an entry the main file's own
//! checks would refuse.

use std::io::Write;
use std::path::Path;

use crate::verbs::PathScope;

pub const BLOCKS_FILE_NAME: &str = "statcache.blocks";
const BLOCKS_MAGIC: &[u8; 8] = b"CKPTSBLK";
const BLOCKS_VERSION: u32 = 1;
/// A run is closed once it holds at least this many bytes.
pub(super) const BLOCK_BYTES: u32 = 8192;

/// One run of consecutive entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Block {
    /// Its bytes in the main file.
    pub len: u32,
    pub entries: u32,
    pub crc: u32,
    /// The path of its first entry.
    pub first: Vec<u8>,
}

/// The runs of a main file as it is written, entry by entry.
#[derive(Default)]
pub(super) struct BlockWriter {
    done: Vec<Block>,
    open: Option<(crc32fast::Hasher, Block)>,
    /// Bytes of every entry so far.
    pub total: u64,
}

impl BlockWriter {
    /// Adds the next entry, at `path`, encoded as `encoded`.
    pub fn add(&mut self, path: &[u8], encoded: &[u8]) {
        let (hasher, block) = self.open.get_or_insert_with(|| {
            let block = Block {
                len: 0,
                entries: 0,
                crc: 0,
                first: path.to_vec(),
            };
            (crc32fast::Hasher::new(), block)
        });
        hasher.update(encoded);
        block.len += encoded.len() as u32;
        block.entries += 1;
        self.total += encoded.len() as u64;
        if block.len >= BLOCK_BYTES {
            self.close();
        }
    }

    fn close(&mut self) {
        if let Some((hasher, mut block)) = self.open.take() {
            block.crc = hasher.finalize();
            self.done.push(block);
        }
    }

    pub fn finish(mut self) -> Vec<Block> {
        self.close();
        self.done
    }
}

/// Where the runs of one main file are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BlockIndex {
    /// The main file's checksum and write time (seconds, nanoseconds), as a delta binds to it.
    pub identity: (u32, i64, u32),
    pub main_len: u64,
    /// Where the first entry starts (the header's length).
    pub header_len: u32,
    pub count: u64,
    pub blocks: Vec<Block>,
}

impl BlockIndex {
    /// Where each run starts in the main file.
    pub fn offsets(&self) -> Vec<u64> {
        let mut at = u64::from(self.header_len);
        self.blocks
            .iter()
            .map(|block| {
                let start = at;
                at += u64::from(block.len);
                start
            })
            .collect()
    }

    /// The runs holding every entry at or below a path of `scope` (each entry whose path starts
    /// with one of the scope's paths: those are contiguous in path order), in file order.
    pub fn blocks_for(&self, scope: &PathScope) -> Vec<usize> {
        let Some(last) = self.blocks.len().checked_sub(1) else {
            return Vec::new();
        };
        let mut wanted: Vec<usize> = Vec::new();
        for path in scope.paths() {
            let path = path.as_bytes();
            // The run a path would be in: the last one starting at or before it.
            let start = self
                .blocks
                .partition_point(|b| b.first.as_slice() <= path)
                .saturating_sub(1);
            // Paths with this prefix end before its successor (the prefix with its last byte
            // below 0xff raised by one, and what follows cut off).
            let end = match successor(path) {
                Some(beyond) => self
                    .blocks
                    .partition_point(|b| b.first < beyond)
                    .saturating_sub(1)
                    .max(start),
                None => last,
            };
            wanted.extend(start..=end);
        }
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }
}

/// The smallest byte string greater than every string starting with `prefix`, if any.
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < 0xff {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

pub(super) fn encode(index: &BlockIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + index.blocks.len() * 64);
    out.extend_from_slice(BLOCKS_MAGIC);
    out.extend_from_slice(&BLOCKS_VERSION.to_le_bytes());
    out.extend_from_slice(&index.identity.0.to_le_bytes());
    out.extend_from_slice(&index.identity.1.to_le_bytes());
    out.extend_from_slice(&index.identity.2.to_le_bytes());
    out.extend_from_slice(&index.main_len.to_le_bytes());
    out.extend_from_slice(&index.header_len.to_le_bytes());
    out.extend_from_slice(&index.count.to_le_bytes());
    out.extend_from_slice(&(index.blocks.len() as u32).to_le_bytes());
    for block in &index.blocks {
        out.extend_from_slice(&block.len.to_le_bytes());
        out.extend_from_slice(&block.entries.to_le_bytes());
        out.extend_from_slice(&block.crc.to_le_bytes());
        out.extend_from_slice(&(block.first.len() as u32).to_le_bytes());
        out.extend_from_slice(&block.first);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// An index file's content; `None` unless it is well formed, its first paths strictly
/// increase, and its runs tile exactly the entries of a main file of the length it names.
pub(super) fn decode(data: &[u8]) -> Option<BlockIndex> {
    let (body, crc) = data.split_at(data.len().checked_sub(4)?);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let mut r = super::Reader { data: body, pos: 0 };
    if r.take(8)? != BLOCKS_MAGIC || r.u32()? != BLOCKS_VERSION {
        return None;
    }
    let identity = (r.u32()?, r.i64()?, r.u32()?);
    let (main_len, header_len, count) = (r.u64()?, r.u32()?, r.u64()?);
    let block_count = r.u32()? as usize;
    let mut blocks: Vec<Block> = Vec::with_capacity(block_count.min(body.len() / 16));
    for _ in 0..block_count {
        let (len, entries, crc) = (r.u32()?, r.u32()?, r.u32()?);
        let first_len = r.u32()? as usize;
        let first = r.take(first_len)?.to_vec();
        if len == 0 || entries == 0 || blocks.last().is_some_and(|b| b.first >= first) {
            return None;
        }
        blocks.push(Block {
            len,
            entries,
            crc,
            first,
        });
    }
    let entry_bytes: u64 = blocks.iter().map(|b| u64::from(b.len)).sum();
    let entry_count: u64 = blocks.iter().map(|b| u64::from(b.entries)).sum();
    let tiles = u64::from(header_len) + entry_bytes + 4 == main_len && entry_count == count;
    (r.pos == body.len() && tiles).then_some(BlockIndex {
        identity,
        main_len,
        header_len,
        count,
        blocks,
    })
}

/// Reads the index in `dir`; `None` if there is none or it is not well formed.
pub(super) fn load(dir: &Path) -> Option<BlockIndex> {
    decode(&crate::verbs::read_regular_file(&dir.join(BLOCKS_FILE_NAME)).ok()?)
}

/// Writes the index for the main file just written (temp + rename, no fsync: a torn index fails
/// its checksum, and an index of another main file does not match it).
pub(super) fn save(dir: &Path, index: &BlockIndex) -> std::io::Result<()> {
    let temp = dir.join(format!(".{BLOCKS_FILE_NAME}.{}.tmp", std::process::id()));
    let result = crate::records::create_temp_exclusive(&temp)
        .and_then(|mut file| file.write_all(&encode(index)))
        .and_then(|()| std::fs::rename(&temp, dir.join(BLOCKS_FILE_NAME)));
    if result.is_err() {
        std::fs::remove_file(&temp).ok();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::RepoPath;

    fn index_of(firsts: &[&str]) -> BlockIndex {
        BlockIndex {
            identity: (1, 2, 3),
            main_len: 12 + 10 * firsts.len() as u64 + 4,
            header_len: 12,
            count: firsts.len() as u64,
            blocks: firsts
                .iter()
                .map(|first| Block {
                    len: 10,
                    entries: 1,
                    crc: 0,
                    first: first.as_bytes().to_vec(),
                })
                .collect(),
        }
    }

    fn scope(paths: &[&str]) -> PathScope {
        PathScope::new(paths.iter().map(|p| RepoPath::new(p.as_bytes().to_vec()).unwrap()))
    }

    /// A scope path's runs are the one it would sort into and every later one that starts with
    /// it as a prefix (so below it, or a sibling like `d1-x` or `d10` that sorts among them).
    #[test]
    fn a_scope_path_gets_every_run_its_prefix_reaches() {
        let index = index_of(&["a", "d1/f1", "d1/f5", "d10/f1", "d2/f1", "z"]);
        assert_eq!(index.blocks_for(&scope(&["0"])), vec![0], "before every run: the first");
        assert_eq!(index.blocks_for(&scope(&["b"])), vec![0]);
        assert_eq!(index.blocks_for(&scope(&["d1/f3"])), vec![1]);
        assert_eq!(
            index.blocks_for(&scope(&["d1"])),
            vec![0, 1, 2, 3],
            "d1/… and d10/… share the prefix"
        );
        assert_eq!(index.blocks_for(&scope(&["d2"])), vec![3, 4]);
        assert_eq!(index.blocks_for(&scope(&["zz"])), vec![5]);
        assert_eq!(index.blocks_for(&scope(&["b", "zz", "d1/f5"])), vec![0, 2, 5]);
        assert_eq!(index_of(&[]).blocks_for(&scope(&["a"])), Vec::<usize>::new());
        assert_eq!(successor(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(successor(b"\xff"), None);
    }

    #[test]
    fn an_index_round_trips_and_anything_else_is_refused() {
        let index = index_of(&["a", "b", "c"]);
        let bytes = encode(&index);
        assert_eq!(decode(&bytes), Some(index.clone()));
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x08;
            assert!(decode(&bad).is_none(), "flipped byte {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode(b"").is_none());
        // Runs that do not tile the main file, or whose first paths do not increase.
        for bad in [
            BlockIndex {
                main_len: index.main_len + 1,
                ..index.clone()
            },
            BlockIndex {
                count: 4,
                ..index.clone()
            },
            index_of(&["a", "c", "b"]),
            index_of(&["a", "a"]),
        ] {
            assert!(decode(&encode(&bad)).is_none(), "{bad:?}");
        }
    }
}
