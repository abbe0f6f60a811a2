//! The registry's append log: the records added since `records.json` was last written whole,
//! one JSON line each, so a snapshot of a long history writes one line instead of rewriting
//! every record. The log names the exact `records.json` it extends (its length and CRC-32), so
//! a log left beside a newer `records.json` (a process killed between writing that file and
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
}

/// Which `records.json` a log extends: its length and CRC-32, or `none` when there is none.
pub(super) fn base_identity(base: Option<&[u8]>) -> String {
    match base {
        Some(bytes) => format!("{}:{:08x}", bytes.len(), crc32fast::hash(bytes)),
        None => "none".to_owned(),
    }
}

/// What the log at `path` adds to the `records.json` whose identity is `base`, in order.
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
    let text = match crate::verbs::read_regular_file(path) {
        Ok(text) => text,
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

/// The last whole record of the log at `path`, if the log extends the `records.json` of
/// identity `base` and holds one: the newest record added, read without the others. `None`
/// otherwise, and for anything that does not read (the caller then loads the whole registry,
/// which names what is wrong).
pub(super) fn read_last(path: &Path, base: &str) -> Option<Record> {
    let text = crate::verbs::read_regular_file(path).ok()?;
    let header_end = text.iter().position(|&b| b == b'\n')?;
    let header: LogHeader = serde_json::from_slice(&text[..header_end]).ok()?;
    if header.format != LOG_FORMAT || header.version != LOG_VERSION || header.base != base {
        return None;
    }
    let body = &text[header_end + 1..];
    let end = body.iter().rposition(|&b| b == b'\n')?;
    let start = body[..end].iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
    let record: Record = serde_json::from_slice(&body[start..end]).ok()?;
    record.validate().ok()?;
    Some(record)
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

/// How appending `added` to the log at `path` (for the `records.json` of identity `base`, of
/// `base_len` bytes) went: done, or the log has grown to half the size of `records.json` (and
/// past half [`APPEND_FROM_BYTES`]) and the caller writes everything into `records.json` instead (so loading stays one parse of
/// about the registry's size, and each record is rewritten a bounded number of times).
pub(super) enum Appended {
    Done,
    Compact,
}

pub(super) fn append(path: &Path, base: &str, base_len: u64, added: &[Record]) -> Result<Appended, RecordsError> {
    let lines = record_lines(added).map_err(|e| RecordsError::Corrupt {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let existing = open_existing_log(path)?;
    let Some(mut file) = existing.filter(|file| log_extends(file, base)) else {
        // No log for this `records.json` yet (or a stale one): a new log, header and lines
        // in one atomic write.
        let header = serde_json::to_vec(&LogHeader {
            format: LOG_FORMAT.to_owned(),
            version: LOG_VERSION,
            base: base.to_owned(),
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
    if len + lines.len() as u64 > (base_len / 2).max(APPEND_FROM_BYTES / 2) {
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
/// FIFO; `None` when missing or not a regular file (a new log replaces it).
fn open_existing_log(path: &Path) -> Result<Option<File>, RecordsError> {
    // Missing, a symlink (ELOOP), no regular file or anything else ckpt cannot open: a new log
    // replaces it.
    Ok(crate::verbs::open_state_file_for_update(path).ok())
}

/// Whether the open log's header names `base`.
fn log_extends(file: &File, base: &str) -> bool {
    let mut start = Vec::new();
    if file.take(4096).read_to_end(&mut start).is_err() {
        return false;
    }
    let Some(end) = start.iter().position(|&b| b == b'\n') else {
        return false;
    };
    serde_json::from_slice::<LogHeader>(&start[..end])
        .is_ok_and(|h| h.format == LOG_FORMAT && h.version == LOG_VERSION && h.base == base)
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
