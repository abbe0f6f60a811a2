//! The stat cache's file formats: the main file's header and entries (sorted paths, each with
//! its stat and object id, behind a CRC), and the delta file that amends one main file, bound
//! to it by its checksum and write time. Encoding and strict decoding only: a byte this code
//! did not write makes the decoder answer `None`.

use std::io::Write;

use super::{FileStat, StoredChange, MAX_DELTA_ENTRIES};
use crate::verbs::{ObjectId, RepoPath};

pub(super) const MAGIC: &[u8; 8] = b"CKPTSTAT";
pub(super) const VERSION: u32 = 2;
pub(super) const DELTA_MAGIC: &[u8; 8] = b"CKPTSDLT";
pub(super) const DELTA_VERSION: u32 = 1;

/// Fixed part of an entry after its path: size, mtime, ctime, ino, dev, mode.
pub(super) const STAT_BYTES: usize = 8 + 12 + 12 + 8 + 8 + 4;

/// A writer that keeps a running CRC of everything written through it.
pub(super) struct ChecksummedWriter<W: Write> {
    pub(super) inner: W,
    pub(super) crc: crc32fast::Hasher,
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

/// Writes the header and entries (without the trailing CRC) to `out`, noting each entry's run
/// in `blocks`. The header's length and the entry count.
pub(super) fn encode_entries<'a>(
    out: &mut impl Write,
    checkpoint: Option<ObjectId>,
    written: (i64, u32),
    entries: impl Iterator<Item = (&'a RepoPath, &'a FileStat, &'a ObjectId)> + Clone,
    blocks: &mut super::blocks::BlockWriter,
) -> std::io::Result<(u32, u64)> {
    let mut header = Vec::with_capacity(128);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&written.0.to_le_bytes());
    header.extend_from_slice(&written.1.to_le_bytes());
    let checkpoint = checkpoint.map(|c| c.to_hex()).unwrap_or_default();
    header.push(checkpoint.len() as u8);
    header.extend_from_slice(checkpoint.as_bytes());
    let count = entries.clone().count() as u64;
    header.extend_from_slice(&count.to_le_bytes());
    out.write_all(&header)?;
    let mut entry = Vec::with_capacity(256);
    for (path, stat, id) in entries {
        entry.clear();
        encode_entry(&mut entry, path.as_bytes(), stat, id)?;
        out.write_all(&entry)?;
        blocks.add(path.as_bytes(), &entry);
    }
    Ok((header.len() as u32, count))
}

/// Reads the entry at the reader's position (its path must sort strictly after `previous`,
/// unless that is empty) and returns its path; `None` for anything this code did not write.
pub(super) fn next_entry<'a>(r: &mut Reader<'a>, previous: &[u8]) -> Option<&'a [u8]> {
    let len = r.u32()? as usize;
    let raw = r.take(len)?;
    // Written strictly sorted; anything else is not a file this code wrote.
    if !previous.is_empty() && raw <= previous {
        return None;
    }
    r.take(STAT_BYTES)?;
    let id_len = r.take(1)?[0] as usize;
    // The lengths `ObjectId::from_bytes` takes (SHA-1, SHA-256): then every entry decodes.
    if !matches!(id_len, 20 | 32) {
        return None;
    }
    r.take(id_len)?;
    Some(raw)
}

/// One entry: path length and path, stat, id length and id.
pub(super) fn encode_entry(out: &mut impl Write, path: &[u8], stat: &FileStat, id: &ObjectId) -> std::io::Result<()> {
    out.write_all(&(path.len() as u32).to_le_bytes())?;
    out.write_all(path)?;
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
    Ok(())
}

/// A delta file's bytes: header (bound to the main file `main`), entries, checksum.
pub(super) fn encode_delta(
    main: (u32, i64, u32),
    checkpoint: Option<ObjectId>,
    entries: &[StoredChange],
) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64 + entries.len() * 128);
    out.extend_from_slice(DELTA_MAGIC);
    out.extend_from_slice(&DELTA_VERSION.to_le_bytes());
    out.extend_from_slice(&main.0.to_le_bytes());
    out.extend_from_slice(&main.1.to_le_bytes());
    out.extend_from_slice(&main.2.to_le_bytes());
    let checkpoint = checkpoint.map(|c| c.to_hex()).unwrap_or_default();
    out.push(checkpoint.len() as u8);
    out.extend_from_slice(checkpoint.as_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (path, change) in entries {
        match change {
            None => {
                out.push(0);
                out.extend_from_slice(&(path.len() as u32).to_le_bytes());
                out.extend_from_slice(path);
            }
            Some((stat, id, written)) => {
                out.push(1);
                encode_entry(&mut out, path, stat, id)?;
                out.extend_from_slice(&written.to_le_bytes());
            }
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Reads a delta file; `None` unless it is well formed, strictly sorted, and amends the main
/// file identified by `main`.
pub(super) fn decode_delta(data: &[u8], main: (u32, i64, u32)) -> Option<(Option<ObjectId>, Vec<StoredChange>)> {
    if data.len() < DELTA_MAGIC.len() + 4 {
        return None;
    }
    let (body, crc) = data.split_at(data.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let mut r = Reader { data: body, pos: 0 };
    if r.take(8)? != DELTA_MAGIC || r.u32()? != DELTA_VERSION {
        return None;
    }
    if (r.u32()?, r.i64()?, r.u32()?) != main {
        return None;
    }
    let checkpoint_len = r.take(1)?[0] as usize;
    let checkpoint = match checkpoint_len {
        0 => None,
        n => Some(ObjectId::from_hex(std::str::from_utf8(r.take(n)?).ok()?).ok()?),
    };
    let count = usize::try_from(r.u64()?).ok()?;
    if count > MAX_DELTA_ENTRIES {
        return None;
    }
    let mut entries: Vec<StoredChange> = Vec::with_capacity(count);
    for _ in 0..count {
        let tag = r.take(1)?[0];
        let len = r.u32()? as usize;
        let path = r.take(len)?;
        RepoPath::check(path).ok()?;
        if entries.last().is_some_and(|(previous, _)| previous.as_slice() >= path) {
            return None;
        }
        let change = match tag {
            0 => None,
            1 => {
                let stat = r.stat()?;
                let id_len = r.take(1)?[0] as usize;
                let id = ObjectId::from_bytes(r.take(id_len)?).ok()?;
                Some((stat, id, r.i64()?))
            }
            _ => return None,
        };
        entries.push((path.to_vec(), change));
    }
    (r.pos == body.len()).then_some((checkpoint, entries))
}

/// Reads the fixed-width little-endian fields the cache files hold.
pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }
    pub(super) fn stat(&mut self) -> Option<FileStat> {
        Some(FileStat {
            size: self.u64()?,
            mtime: (self.i64()?, self.u32()?),
            ctime: (self.i64()?, self.u32()?),
            ino: self.u64()?,
            dev: self.u64()?,
            mode: self.u32()?,
        })
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(super) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
