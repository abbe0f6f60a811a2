//! The pack format ckpt writes: version-2 packs of whole objects (never deltas), zlib streams
//! of stored blocks or at the fastest level, the version-2 index of such a pack built from
//! where its objects lie, and the same objects encoded again under another checksum. Pure
//! encoding: it names and places no file (except the temp file of another encoding).

use std::path::Path;

use rayon::prelude::*;

use crate::verbs::types::ObjectId;
use crate::verbs::VerbError;

/// How the objects of a pack are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackCompression {
    /// zlib's fastest level.
    Fastest,
    /// Not at all (zlib's stored blocks): the quickest pack to write and to index, as large as
    /// its objects.
    Stored,
}

/// A writer that passes a pack's bytes on while hashing them for its trailer, and keeps the
/// CRC-32 of those after the pack header (one entry's, for a pack of one object).
pub(super) struct Tally<W: std::io::Write> {
    pub(super) out: W,
    pub(super) pack: gix::hash::Hasher,
    pub(super) crc: crc32fast::Hasher,
}

impl<W: std::io::Write> std::io::Write for Tally<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(buf)?;
        self.pack.update(&buf[..written]);
        self.crc.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The name of the pack at `path` (`pack-<hex>.pack` or `.idx`), if it is one.
pub(super) fn pack_name(path: &std::path::Path) -> Option<ObjectId> {
    let stem = path.file_stem()?.to_str()?;
    ObjectId::from_hex(stem.strip_prefix("pack-")?).ok()
}

/// The pack type code of an object kind.
fn pack_type(kind: gix::objs::Kind) -> u8 {
    match kind {
        gix::objs::Kind::Commit => 1,
        gix::objs::Kind::Tree => 2,
        gix::objs::Kind::Blob => 3,
        gix::objs::Kind::Tag => 4,
    }
}

/// A pack entry's type and size: 3 type bits and 4 size bits, then 7 size bits per byte.
pub(super) fn push_entry_header(out: &mut Vec<u8>, kind: gix::objs::Kind, len: u64) {
    let mut size = len;
    let mut byte = (pack_type(kind) << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size > 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
}

/// Writes a pack (version 2, no deltas) to `out` one object at a time, hashing as it goes.
pub(super) struct PackStream<W: std::io::Write> {
    out: W,
    hasher: gix::hash::Hasher,
    compressor: Compressor,
    scratch: Vec<u8>,
}

impl<W: std::io::Write> PackStream<W> {
    pub(super) fn new(
        mut out: W,
        hash: gix::hash::Kind,
        count: u32,
        compression: PackCompression,
    ) -> std::io::Result<Self> {
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(b"PACK");
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&count.to_be_bytes());
        out.write_all(&header)?;
        let mut hasher = gix::hash::hasher(hash);
        hasher.update(&header);
        Ok(PackStream {
            out,
            hasher,
            compressor: Compressor::new(compression),
            scratch: Vec::new(),
        })
    }

    /// Adds an object, compressed here.
    pub(super) fn object(&mut self, kind: gix::objs::Kind, data: &[u8]) -> std::io::Result<()> {
        let compressed = self.compressor.compress(data)?;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        push_entry_header(&mut header, kind, data.len() as u64);
        let added = self.raw_entry(&header, &compressed);
        self.scratch = header;
        added
    }

    /// Adds an entry whose header and zlib stream are made already.
    fn raw_entry(&mut self, header: &[u8], compressed: &[u8]) -> std::io::Result<()> {
        self.hasher.update(header);
        self.hasher.update(compressed);
        self.out.write_all(header)?;
        self.out.write_all(compressed)
    }

    /// Writes the trailer (the hash of everything before it), flushes, and gives `out` back.
    pub(super) fn finish(mut self) -> std::io::Result<W> {
        let trailer = self.hasher.try_finalize().map_err(std::io::Error::other)?;
        self.out.write_all(trailer.as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Whole zlib streams at one [`PackCompression`], one object at a time.
struct Compressor {
    compression: PackCompression,
    /// Made on the first object it compresses: it zeroes a few hundred KiB, and each reset
    /// zeroes its hash table again, which for small objects costs more than compressing them.
    zlib: Option<gix::zlib::stream::deflate::Compress>,
}

impl Compressor {
    fn new(compression: PackCompression) -> Self {
        Compressor {
            compression,
            zlib: None,
        }
    }

    fn compress(&mut self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        match self.compression {
            PackCompression::Stored => Ok(zlib_stored(data)),
            PackCompression::Fastest => {
                let zlib = self.zlib.get_or_insert_with(|| {
                    gix::zlib::stream::deflate::Compress::new(gix::zlib::Compression::BEST_SPEED)
                });
                deflate(zlib, data)
            }
        }
    }
}

/// `data` as a zlib stream (RFC 1950) of stored deflate blocks (RFC 1951 §3.2.4): what zlib
/// writes at level 0, without a compressor's tables to set up per object.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    /// A stored block's length is 16 bits.
    const MOST_PER_BLOCK: usize = u16::MAX as usize;
    let blocks = data.len().div_ceil(MOST_PER_BLOCK).max(1);
    let mut out = Vec::with_capacity(2 + blocks * 5 + data.len() + 4);
    // Deflate with a 32 KiB window, no dictionary, "fastest" level; 0x7801 is a multiple of 31.
    out.extend_from_slice(&[0x78, 0x01]);
    let mut block = |chunk: &[u8], last: bool| {
        let len = chunk.len() as u16;
        out.push(u8::from(last));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    };
    if data.is_empty() {
        block(&[], true);
    }
    let mut chunks = data.chunks(MOST_PER_BLOCK).peekable();
    while let Some(chunk) = chunks.next() {
        block(chunk, chunks.peek().is_none());
    }
    out.extend_from_slice(&zlib_rs::adler32::adler32(1, data).to_be_bytes());
    out
}

/// `data` as one whole zlib stream, from a compressor that may have been used before.
fn deflate(compressor: &mut gix::zlib::stream::deflate::Compress, data: &[u8]) -> std::io::Result<Vec<u8>> {
    use gix::zlib::stream::deflate::FlushCompress;
    compressor.reset();
    // Enough for incompressible input at any level (stored blocks: 5 bytes per 16 KiB, plus the
    // header and checksum); it grows if it ever is not.
    let mut out = vec![0u8; data.len() + data.len() / 16_384 * 5 + 64];
    loop {
        let (consumed, produced) = (compressor.total_in() as usize, compressor.total_out() as usize);
        let status = compressor
            .compress(&data[consumed..], &mut out[produced..], FlushCompress::Finish)
            .map_err(std::io::Error::other)?;
        let produced_now = compressor.total_out() as usize;
        if status == gix::zlib::Status::StreamEnd {
            out.truncate(produced_now);
            return Ok(out);
        }
        if produced_now == out.len() {
            out.resize(out.len() * 2, 0);
        } else if produced_now == produced && compressor.total_in() as usize == consumed {
            return Err(std::io::Error::other("the compressor made no progress"));
        }
    }
}

/// A pack written whole to a temp file in the pack directory, not yet named.
pub(super) struct PackFile {
    pub(super) temp: tempfile::NamedTempFile,
    /// Its trailer, the hash of everything before it: the name it gets.
    pub(super) checksum: Vec<u8>,
    /// Where each of its objects lies.
    pub(super) placed: Vec<Placed>,
}

/// How many empty stored deflate blocks another encoding puts at the start of its first
/// object's deflate data (RFC 1951 §3.2.4: each is three header bits, padding to the byte, a
/// length of 0 and its complement). The stream inflates to the same bytes, and the pack gets
/// another checksum. Decoders skip a stored block's five padding bits, so each block carries
/// five random bits: another encoding is one of 2^30, which nobody can have left there
/// beforehand, where a fixed series of them could all be taken (five kills of snapshots of the
/// same content, or packs copied in, once made every later snapshot of it fail).
const RANDOM_EMPTY_BLOCKS: usize = 6;

/// `pack` encoded again with [`RANDOM_EMPTY_BLOCKS`] empty stored blocks of random padding at
/// the start of its first object's deflate data: the same objects, read back the same, in a
/// pack of another checksum. Copied through from the temp file (a streamed blob's pack is never
/// held in memory).
pub(super) fn encoded_again(directory: &Path, hash: gix::hash::Kind, pack: &PackFile) -> Result<PackFile, VerbError> {
    use std::io::{Read, Write};
    let failed = |e: std::io::Error| VerbError::git("writing a pack again under another name", e);
    let malformed = |why: &str| failed(std::io::Error::other(why.to_owned()));
    let mut placed = pack.placed.clone();
    placed.sort_by_key(|entry| entry.offset);
    let first_offset = placed
        .first()
        .map(|first| first.offset)
        .ok_or_else(|| malformed("no objects"))?;
    let length = pack.temp.as_file().metadata().map_err(failed)?.len();
    let body = length
        .checked_sub(hash.len_in_bytes() as u64)
        .filter(|body| *body > first_offset)
        .ok_or_else(|| malformed("shorter than its objects"))?;
    let first_end = placed.get(1).map_or(body, |second| second.offset);
    let mut from = std::io::BufReader::new(pack.temp.reopen().map_err(failed)?);
    let mut temp = tempfile::NamedTempFile::new_in(directory).map_err(failed)?;
    let mut to = std::io::BufWriter::new(temp.as_file_mut());
    let mut checksum = gix::hash::hasher(hash);
    let mut first_crc = crc32fast::Hasher::new();
    // Copies `count` bytes on, into the pack's hash and, for the first object, its CRC.
    let mut copy = |from: &mut dyn Read, count: u64, in_first: bool| -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; usize::try_from(count).map_err(std::io::Error::other)?];
        from.read_exact(&mut bytes)?;
        checksum.update(&bytes);
        if in_first {
            first_crc.update(&bytes);
        }
        to.write_all(&bytes)?;
        Ok(bytes)
    };
    copy(&mut from, first_offset, false).map_err(failed)?;
    // The entry header (type and size, 7 bits a byte while the top bit is set), then zlib's
    // two-byte header, after which the deflate data begins on a byte boundary.
    let mut at = first_offset;
    loop {
        let byte = copy(&mut from, 1, true).map_err(failed)?;
        at += 1;
        if byte[0] & 0x80 == 0 {
            break;
        }
    }
    let zlib_header = copy(&mut from, 2, true).map_err(failed)?;
    at += 2;
    if u16::from_be_bytes([zlib_header[0], zlib_header[1]]) % 31 != 0 || zlib_header[1] & 0x20 != 0 {
        return Err(malformed("its first object is not a plain zlib stream"));
    }
    let mut random = [0u8; RANDOM_EMPTY_BLOCKS];
    getrandom::fill(&mut random).map_err(|e| failed(std::io::Error::other(e.to_string())))?;
    let blocks: Vec<u8> = random
        .iter()
        .flat_map(|bits| [(bits & 0x1f) << 3, 0x00, 0x00, 0xff, 0xff])
        .collect();
    copy(&mut blocks.as_slice(), blocks.len() as u64, true).map_err(failed)?;
    let rest_of_first = first_end
        .checked_sub(at)
        .ok_or_else(|| malformed("an object ends before it begins"))?;
    // Past a few MiB, copied in pieces: a streamed blob's pack may be any size.
    const PIECE: u64 = 4 << 20;
    let mut copy_in_pieces = |from: &mut dyn Read, mut count: u64, in_first: bool| -> Result<(), VerbError> {
        while count > 0 {
            let piece = count.min(PIECE);
            copy(from, piece, in_first).map_err(failed)?;
            count -= piece;
        }
        Ok(())
    };
    copy_in_pieces(&mut from, rest_of_first, true)?;
    copy_in_pieces(&mut from, body - first_end, false)?;
    let trailer = checksum.try_finalize().map_err(std::io::Error::other).map_err(failed)?;
    to.write_all(trailer.as_bytes()).map_err(failed)?;
    to.flush().map_err(failed)?;
    drop(to);
    let shift = blocks.len() as u64;
    let first_crc = first_crc.finalize();
    for entry in &mut placed {
        if entry.offset == first_offset {
            entry.crc32 = first_crc;
        } else {
            entry.offset += shift;
        }
    }
    Ok(PackFile {
        temp,
        checksum: trailer.as_bytes().to_vec(),
        placed,
    })
}

/// Where one object of an encoded pack lies, as a version-2 pack index records it.
#[derive(Clone)]
pub(super) struct Placed {
    pub(super) id: ObjectId,
    pub(super) offset: u64,
    /// CRC-32 of the entry's bytes in the pack (its header and its zlib stream).
    pub(super) crc32: u32,
}

/// A pack (version 2, no deltas) of `objects`, its trailer the hash of everything before it, and
/// where each object lies in it. Each object's bytes are hashed again as they are encoded (on
/// every core) and must give its id: the index written from these ids then names each object
/// by exactly its bytes, as one gix would build by reading the pack back.
pub(super) fn encode_pack(
    hash: gix::hash::Kind,
    objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
    compression: PackCompression,
) -> Result<(Vec<u8>, Vec<Placed>), VerbError> {
    // One compressor per rayon job, reused for its objects.
    let entries: Vec<(Vec<u8>, Vec<u8>)> = objects
        .par_iter()
        .map_init(
            || Compressor::new(compression),
            |compressor, (id, kind, data)| {
                let hashed = gix::objs::compute_hash(hash, *kind, data).map_err(std::io::Error::other)?;
                if hashed != id.0 {
                    return Err(std::io::Error::other(format!(
                        "object {id}'s bytes hash to {hashed}, not to its id"
                    )));
                }
                let mut header = Vec::with_capacity(10);
                push_entry_header(&mut header, *kind, data.len() as u64);
                Ok((header, compressor.compress(data)?))
            },
        )
        .collect::<std::io::Result<_>>()
        .map_err(|e| VerbError::git("encoding objects for a pack", e))?;
    let count = u32::try_from(objects.len())
        .map_err(|_| VerbError::git_because("writing a pack", "too many objects for one pack"))?;
    let capacity = 12 + entries.iter().map(|(h, d)| h.len() + d.len()).sum::<usize>() + hash.len_in_bytes();
    let failed = |e: std::io::Error| VerbError::git("writing a pack", e);
    let mut pack = PackStream::new(Vec::with_capacity(capacity), hash, count, compression).map_err(failed)?;
    let mut placed = Vec::with_capacity(objects.len());
    let mut offset = 12u64;
    for ((id, _, _), (header, compressed)) in objects.iter().zip(&entries) {
        let mut crc = crc32fast::Hasher::new();
        crc.update(header);
        crc.update(compressed);
        placed.push(Placed {
            id: *id,
            offset,
            crc32: crc.finalize(),
        });
        pack.raw_entry(header, compressed).map_err(failed)?;
        offset += (header.len() + compressed.len()) as u64;
    }
    Ok((pack.finish().map_err(failed)?, placed))
}

/// The version-2 index of a pack whose trailer is `pack_checksum` and whose objects lie where
/// `placed` says: the fan-out table, the sorted ids, their CRC-32s, their offsets (past 2 GiB in
/// a table of 64-bit ones), the pack's checksum and the index's own. Byte for byte what `git
/// index-pack` writes for that pack.
pub(super) fn index_v2(hash: gix::hash::Kind, placed: &[Placed], pack_checksum: &[u8]) -> Result<Vec<u8>, VerbError> {
    let mut placed: Vec<&Placed> = placed.iter().collect();
    placed.sort_by_key(|a| a.id);
    let mut out = Vec::with_capacity(8 + 1024 + placed.len() * (hash.len_in_bytes() + 8) + 2 * hash.len_in_bytes());
    out.extend_from_slice(b"\xfftOc");
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut below = 0u32;
    let mut first_bytes = placed.iter().map(|p| p.id.0.as_bytes()[0]).peekable();
    for byte in 0..=255u8 {
        while first_bytes.next_if(|first| *first == byte).is_some() {
            below += 1;
        }
        out.extend_from_slice(&below.to_be_bytes());
    }
    for entry in &placed {
        out.extend_from_slice(entry.id.0.as_bytes());
    }
    for entry in &placed {
        out.extend_from_slice(&entry.crc32.to_be_bytes());
    }
    let mut large = Vec::new();
    for entry in &placed {
        let small = match u32::try_from(entry.offset) {
            Ok(offset) if offset < 0x8000_0000 => offset,
            _ => {
                let at = u32::try_from(large.len())
                    .ok()
                    .filter(|at| *at < 0x8000_0000)
                    .ok_or_else(|| VerbError::git_because("writing a pack index", "too many large offsets"))?;
                large.push(entry.offset);
                0x8000_0000 | at
            }
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let mut hasher = gix::hash::hasher(hash);
    hasher.update(&out);
    let own = hasher
        .try_finalize()
        .map_err(|e| VerbError::git("writing a pack index", e))?;
    out.extend_from_slice(own.as_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(text: &[u8]) -> (ObjectId, gix::objs::Kind, Vec<u8>) {
        let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, text).expect("hashes");
        (ObjectId(id), gix::objs::Kind::Blob, text.to_vec())
    }

    /// An object whose bytes do not hash to the id it came with is never encoded under it.
    #[test]
    fn an_object_is_packed_only_under_the_id_of_its_bytes() {
        let mut objects = vec![blob(b"one\n"), blob(b"two\n")];
        assert!(encode_pack(gix::hash::Kind::Sha1, &objects, PackCompression::Stored).is_ok());
        objects[1].2 = b"tw0\n".to_vec();
        let refused = encode_pack(gix::hash::Kind::Sha1, &objects, PackCompression::Stored)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains("not to its id"), "{refused}");
    }

    /// gix reads the index back: every id at its offset (past 2 GiB too, through the table of
    /// large offsets) with its CRC-32, and the fan-out finds each.
    #[test]
    fn the_index_names_every_object_at_its_offset() {
        let ids: Vec<ObjectId> = (0u32..300)
            .map(|n| blob(format!("object {n}\n").as_bytes()).0)
            .collect();
        let placed: Vec<Placed> = ids
            .iter()
            .enumerate()
            .map(|(n, id)| Placed {
                id: *id,
                offset: if n % 7 == 0 {
                    (5u64 << 30) + n as u64
                } else {
                    12 + n as u64 * 40
                },
                crc32: n as u32 * 31,
            })
            .collect();
        let checksum = [7u8; 20];
        let bytes = index_v2(gix::hash::Kind::Sha1, &placed, &checksum).expect("an index");
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("pack-x.idx");
        std::fs::write(&path, &bytes).expect("written");
        let index = gix_pack::index::File::at(&path, gix::hash::Kind::Sha1).expect("gix reads it");
        assert_eq!(index.num_objects(), 300);
        assert_eq!(index.pack_checksum().as_bytes(), &checksum);
        for (n, id) in ids.iter().enumerate() {
            let at = index.lookup(id.0).expect("found through the fan-out");
            let want = if n % 7 == 0 {
                (5u64 << 30) + n as u64
            } else {
                12 + n as u64 * 40
            };
            assert_eq!(index.pack_offset_at_index(at), want, "object {n}");
            assert_eq!(index.crc32_at_index(at), Some(n as u32 * 31), "object {n}");
        }
        assert!(index
            .verify_checksum(&mut gix::progress::Discard, &std::sync::atomic::AtomicBool::new(false))
            .is_ok());
    }

    /// Objects of every size, from one compressor reused in any order, each inflate back to
    /// exactly their bytes (incompressible ones included: the output grows past its first guess),
    /// at either level.
    #[test]
    fn a_reused_compressor_gives_whole_streams_of_exactly_the_bytes() {
        let mut noise = Vec::with_capacity(200_000);
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            noise.push(x as u8);
        }
        let inputs: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"tree 0\0".to_vec(),
            noise[..70_000].to_vec(),
            b"abc".repeat(50_000),
            noise.clone(),
            vec![0u8; 1],
        ];
        for level in [PackCompression::Fastest, PackCompression::Stored] {
            let mut compressor = Compressor::new(level);
            for input in inputs.iter().chain(inputs.iter().rev()) {
                let compressed = compressor.compress(input).expect("compresses");
                let mut out = vec![0u8; input.len() + 1];
                let mut inflate = gix::zlib::Inflate::default();
                let (status, consumed, written) = inflate.once(&compressed, &mut out).expect("inflates");
                assert_eq!(status, gix::zlib::Status::StreamEnd);
                assert_eq!(consumed, compressed.len(), "one whole stream, nothing after it");
                assert_eq!(&out[..written], input.as_slice());
                if level == PackCompression::Stored {
                    assert!(compressed.len() >= input.len(), "stored, not compressed");
                }
            }
        }
    }
}
