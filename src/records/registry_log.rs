//! The registry's append log: the records added since `records.json` was last written whole,
//! one JSON line each, so a snapshot of a long history writes one line instead of rewriting
//! every record. The log names the exact `records.json` it extends (its length and CRC-32, and
//! its inode and modification time, which spare a snapshot reading it while they hold), so a
//! log left beside a newer `records.json` (a process killed between writing that file and
//! removing the log) is never applied to it. It owns only `records.log` in a workspace's state
//! directory; it must never touch the worktree or any repository file.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{io_error, Record, RecordsError};

pub(super) const LOG_FILE: &str = "records.log";
const LOG_FORMAT: &str = "ckpt-records-log";
const LOG_VERSION: u64 = 1;

/// Below this size `records.json` is rewritten whole on every change: cheap, and one file is
/// the easiest to read and repair. `CKPT_RECORDS_APPEND_FROM` (bytes) overrides it.
const APPEND_FROM_BYTES: u64 = 64 * 1024;

pub(super) fn append_from_bytes() -> u64 {
    std::env::var("CKPT_RECORDS_APPEND_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(APPEND_FROM_BYTES)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogHeader {
    format: String,
    version: u64,
    /// [`base_identity`] of the `records.json` this log extends.
    base: String,
    /// [`stat_identity`] of that file when the log was started: while it still holds, the
    /// file was not replaced, and need not be read to know the log extends it.
    base_stat: String,
}

/// The length, inode and modification time (to the nanosecond) of a file: a `records.json`
/// written since (always a new file, renamed into place) has another.
fn stat_identity(meta: &fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}:{}:{}.{:09}",
        meta.len(),
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec()
    )
}

/// Whether a log with `header` extends the `records.json` at `base_path`: by its stat when
/// that still holds, otherwise by its content.
fn header_extends(header: &LogHeader, base_path: &Path) -> bool {
    if header.format != LOG_FORMAT || header.version != LOG_VERSION {
        return false;
    }
    match fs::symlink_metadata(base_path) {
        Ok(meta) if meta.is_file() && stat_identity(&meta) == header.base_stat => true,
        Ok(_) => {
            crate::verbs::read_regular_file(base_path).is_ok_and(|bytes| base_identity(Some(&bytes)) == header.base)
        }
        Err(_) => header.base == base_identity(None),
    }
}

/// Which `records.json` a log extends: its length and CRC-32, or `none` when there is none.
pub(super) fn base_identity(base: Option<&[u8]>) -> String {
    match base {
        Some(bytes) => format!("{}:{:08x}", bytes.len(), crc32fast::hash(bytes)),
        None => "none".to_owned(),
    }
}

/// What the log at `path` adds to the `records.json` whose identity ([`base_identity`]) is
/// `base`, in order.
/// Missing, or written for another `records.json`: nothing. A last line without its newline
/// was cut short by a killed append and is left out (its checkpoint's pin, if it got one, is
/// turned back into a record from the commit). Anything else that does not read is corrupt.
pub(super) fn read_log(path: &Path, base: &str) -> Result<Vec<Record>, RecordsError> {
    let corrupt = |why: String| RecordsError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(corrupt(
                "it is a symlink, and ckpt never reads its registry through one".to_owned(),
            ))
        }
        Ok(meta) if !meta.is_file() => {
            return Err(corrupt(
                "it is not a regular file (a FIFO, socket, device or directory)".to_owned(),
            ))
        }
        _ => {}
    }
    let mut text = Vec::new();
    match crate::verbs::open_regular_file_no_follow(path) {
        Ok(mut file) => file.read_to_end(&mut text).map_err(io_error(path))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(path)(e)),
    };
    let Some(header_end) = text.iter().position(|&b| b == b'\n') else {
        // Only a header cut short: a first append killed before its header was whole (it is
        // written with its first line in one rename, so this is damage, not a crash).
        return Err(corrupt("its header line is incomplete".to_owned()));
    };
    let header: LogHeader = serde_json::from_slice(&text[..header_end])
        .map_err(|e| corrupt(format!("its header is not a {LOG_FORMAT} header: {e}")))?;
    if header.format != LOG_FORMAT {
        return Err(corrupt(format!("missing \"format\": \"{LOG_FORMAT}\"")));
    }
    if header.version != LOG_VERSION {
        return Err(RecordsError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: header.version,
        });
    }
    if header.base != base {
        return Ok(Vec::new());
    }
    let body = &text[header_end + 1..];
    let whole = match body.iter().rposition(|&b| b == b'\n') {
        Some(end) => &body[..=end],
        None => &body[..0],
    };
    let mut records = Vec::new();
    for (number, line) in whole.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let record: Record =
            serde_json::from_slice(line).map_err(|e| corrupt(format!("line {} is not a record: {e}", number + 2)))?;
        record
            .validate()
            .map_err(|why| corrupt(format!("line {}: {why}", number + 2)))?;
        records.push(record);
    }
    Ok(records)
}

/// The last whole record of the log at `path`, if the log extends the `records.json` at
/// `base_path` and holds one: the newest record added, read from the end of the log without
/// the others. `None` otherwise, and for anything that does not read (the caller then loads
/// the whole registry, which names what is wrong).
pub(super) fn read_last(path: &Path, base_path: &Path) -> Option<Record> {
    let mut file = crate::verbs::open_regular_file_no_follow(path).ok()?;
    // Shared with another copy of the repository: the whole registry is read, and the next
    // record folds it in, which breaks the link.
    if std::os::unix::fs::MetadataExt::nlink(&file.metadata().ok()?) > 1 {
        return None;
    }
    let (header, header_len) = read_header(&file)?;
    if !header_extends(&header, base_path) {
        return None;
    }
    let len = file.metadata().ok()?.len();
    let end = whole_lines_len(&mut file, len).ok()?;
    // Only the header: no record yet.
    if end <= header_len {
        return None;
    }
    // The last line: read backwards from its end, in growing pieces, to the newline before it.
    let mut window = 64 * 1024u64;
    loop {
        let start = end.saturating_sub(window);
        let mut tail = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start)).ok()?;
        file.read_exact(&mut tail).ok()?;
        let line_end = tail.len().checked_sub(1)?;
        match tail[..line_end].iter().rposition(|&b| b == b'\n') {
            Some(at) => {
                let record: Record = serde_json::from_slice(&tail[at + 1..line_end]).ok()?;
                record.validate().ok()?;
                return Some(record);
            }
            None if start == 0 => return None,
            None => window *= 4,
        }
    }
}

/// The header of an open log (its first line, at most 4 KiB), read from its start, with the
/// length of that line (its newline included).
fn read_header(file: &File) -> Option<(LogHeader, u64)> {
    let mut start = Vec::new();
    let mut reader = file;
    reader.seek(SeekFrom::Start(0)).ok()?;
    reader.take(4096).read_to_end(&mut start).ok()?;
    let end = start.iter().position(|&b| b == b'\n')?;
    Some((serde_json::from_slice(&start[..end]).ok()?, end as u64 + 1))
}

/// One line per record, each ending in a newline.
fn record_lines(records: &[Record]) -> Result<Vec<u8>, serde_json::Error> {
    let mut lines = Vec::new();
    for record in records {
        serde_json::to_writer(&mut lines, record)?;
        lines.push(b'\n');
    }
    Ok(lines)
}

/// How appending to the log went: done, or the log has grown to half the size of
/// `records.json` (and past half [`APPEND_FROM_BYTES`]), or has another name too, and the
/// caller writes everything into `records.json` instead (so loading stays one parse of about
/// the registry's size, and each record is rewritten a bounded number of times).
pub(super) enum Appended {
    Done,
    Compact,
}

/// Appends `added` to the log at `path`, which extends the `records.json` at `base_path` (a
/// new log when there is none for it); a log that is a link or no regular file is refused.
pub(super) fn append(path: &Path, base_path: &Path, added: &[Record]) -> Result<Appended, RecordsError> {
    let lines = record_lines(added).map_err(|e| RecordsError::Corrupt {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let base_meta = fs::symlink_metadata(base_path).map_err(io_error(base_path))?;
    match fs::symlink_metadata(path) {
        // Replacing it would drop the records it holds from the registry without a word.
        Ok(meta) if !meta.is_file() => {
            return Err(RecordsError::Corrupt {
                path: path.to_path_buf(),
                why: "it is a symlink or not a regular file, and ckpt never writes its registry through one (`ckpt doctor --fix` sets it aside and rebuilds the registry from this workspace's pins)".to_owned(),
            })
        }
        // Another name for the same file (a copy of the repository made with `cp -al`): an
        // append would land in the other copy's registry too. Folding it into records.json
        // (renamed into place) and removing this name breaks the link.
        Ok(meta) if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 => return Ok(Appended::Compact),
        _ => {}
    }
    let existing = open_existing_log(path);
    let Some(mut file) =
        existing.filter(|file| read_header(file).is_some_and(|(header, _)| header_extends(&header, base_path)))
    else {
        // No log for this `records.json` yet (or a stale one): a new log, header and lines
        // in one atomic write.
        let base = crate::verbs::read_regular_file(base_path).map_err(io_error(base_path))?;
        let header = serde_json::to_vec(&LogHeader {
            format: LOG_FORMAT.to_owned(),
            version: LOG_VERSION,
            base: base_identity(Some(&base)),
            base_stat: stat_identity(&base_meta),
        })
        .map_err(|e| RecordsError::Corrupt {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        let mut content = header;
        content.push(b'\n');
        content.extend_from_slice(&lines);
        super::write_atomically(path, &content)?;
        return Ok(Appended::Done);
    };
    let len = file.metadata().map_err(io_error(path))?.len();
    if len + lines.len() as u64 > (base_meta.len() / 2).max(APPEND_FROM_BYTES / 2) {
        return Ok(Appended::Compact);
    }
    // A killed append may have left a line without its newline: the new lines start after the
    // last whole one, or they would be glued to it and read as one corrupt line.
    let whole_len = whole_lines_len(&mut file, len).map_err(io_error(path))?;
    if whole_len != len {
        file.set_len(whole_len).map_err(io_error(path))?;
    }
    file.seek(SeekFrom::Start(whole_len)).map_err(io_error(path))?;
    file.write_all(&lines).map_err(io_error(path))?;
    file.sync_data().map_err(io_error(path))?;
    Ok(Appended::Done)
}

/// The log at `path` opened for reading and writing, never through a link nor blocking on a
/// FIFO; `None` when missing or it cannot be opened so (a new log then replaces the name; a
/// link or other file there was refused before).
fn open_existing_log(path: &Path) -> Option<File> {
    crate::verbs::open_state_file_for_update(path).ok()
}

/// The length of the file's content up to and including its last newline.
fn whole_lines_len(file: &mut File, len: u64) -> std::io::Result<u64> {
    let mut end = len;
    let mut buf = [0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Removes the log (after `records.json` was written whole with everything it held).
pub(super) fn remove_log(path: &Path) -> Result<(), RecordsError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(path)(e)),
    }
}
