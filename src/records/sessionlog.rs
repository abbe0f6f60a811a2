//! The DeepSeek Harness's session logs, read-only: where they live (`$DSH_HOME/sessions/
//! --<project key>--/<session id>/session.jsonl.zstd`, or `session.jsonl` uncompressed), the
//! concatenated zstd frames they are made of (a torn last frame after a crash is reported and
//! the complete frames before it are kept), and the events ckpt's trace needs from them: the
//! header, `tool/call` (turn, step, call id, tool name, the arguments string parsed as JSON) and
//! the `tool/result` that pairs each call. Unknown event types and fields are skipped; a line
//! that is not JSON is reported with its line number, never a panic. It never writes anything.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A session log's first line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionHeader {
    pub id: String,
    pub created_at: Option<String>,
    pub cwd: Option<String>,
    pub parent_session: Option<String>,
    /// For a fork: how many of its first events it copied from its parent.
    pub seed_length: Option<u64>,
}

/// How a tool call ended, as its `tool/result` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// A result without an error.
    Ok,
    /// The tool reported an error: it changed nothing it was asked to change.
    Failed,
    /// Interrupted after it started, or no result was recorded: it may have changed anything.
    Unknown,
}

/// The tool name of a log line that could not be read (it may have been a tool call).
pub const UNREADABLE_LINE: &str = "(unreadable log line)";

/// One `tool/call` with its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub seq: u64,
    pub time: Option<String>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub call_id: String,
    pub name: String,
    /// The model's arguments, parsed; `Err` with why when the string is not JSON.
    pub arguments: Result<Value, String>,
    pub outcome: CallOutcome,
    /// When its result was logged (the tool had finished by then); `None` when there is no
    /// single result, or it carries no time.
    pub result_time: Option<String>,
}

/// Something in a log that could not be used, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogProblem {
    /// 1-based line of the decoded log (0: the file as a whole).
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub struct SessionLog {
    pub header: SessionHeader,
    pub calls: Vec<ToolCall>,
    pub problems: Vec<LogProblem>,
    /// How many bytes the log held, decoded (as far as it was read).
    pub bytes: u64,
    /// Whether the log was cut at [`MAX_LOG_BYTES`], what follows unread.
    pub cut: bool,
}

/// The directory the harness keeps session logs in: `<dsh home>/sessions`, the home being
/// `dsh_home`, else `$DSH_HOME`, else `~/.dsh`.
pub fn sessions_root(dsh_home: Option<&Path>) -> Option<PathBuf> {
    let home = match dsh_home {
        Some(home) => home.to_path_buf(),
        None => match std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".dsh"),
        },
    };
    Some(home.join("sessions"))
}

fn escape_unit(out: &mut String, unit: u16) {
    out.push_str(&format!("~{unit:04X}"));
}

fn safe(unit: u16) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

/// The harness's directory name for a project path: each run of `/`, `\` or `:` becomes one
/// `-`, `[A-Za-z0-9._-]` stay, every other UTF-16 unit becomes `~XXXX`; leading dashes go, at
/// most 251 characters are kept (`root` if none), wrapped in `--…--`.
pub fn project_key(cwd: &str) -> String {
    let mut readable = String::new();
    let mut separators = false;
    for unit in cwd.encode_utf16() {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !separators {
                readable.push('-');
            }
            separators = true;
        } else {
            if safe(unit) {
                readable.push(char::from(unit as u8));
            } else {
                escape_unit(&mut readable, unit);
            }
            separators = false;
        }
    }
    let trimmed = readable.trim_start_matches('-');
    let kept: String = if trimmed.is_empty() { "root" } else { trimmed }
        .chars()
        .take(251)
        .collect();
    format!("--{kept}--")
}

/// The session logs of the project at `cwd`: each session directory's log file, newest first
/// by modification time.
pub fn session_logs(root: &Path, cwd: &str) -> Vec<PathBuf> {
    logs_in(&root.join(project_key(cwd)))
}

/// The session logs of every project directory that may belong to a directory below `cwd`
/// (`--a-b-...--` for `/a/b`): the key loses the difference between `/` and `-`, so the caller
/// keeps only those whose header's cwd really lies below `cwd`.
pub fn logs_below(root: &Path, cwd: &str) -> Vec<PathBuf> {
    let key = project_key(cwd);
    let Some(stem) = key.strip_suffix("--") else {
        return Vec::new();
    };
    let prefix = format!("{stem}-");
    let Ok(projects) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = projects
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name != key
        })
        .flat_map(|entry| logs_in(&entry.path()))
        .collect();
    found.sort();
    found
}

/// The logs of one project directory, newest first.
fn logs_in(project: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(project) else {
        return Vec::new();
    };
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = dirs
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let dir = entry.path();
            ["session.jsonl.zstd", "session.jsonl"]
                .iter()
                .map(|name| dir.join(name))
                .find(|p| p.is_file())
        })
        .map(|p| {
            (
                std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH),
                p,
            )
        })
        .collect();
    logs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    logs.into_iter().map(|(_, p)| p).collect()
}

/// How much of a log is read (decoded): a few kilobytes of zstd can decode to gigabytes, and a
/// session that logged more than this is cut there (the calls after it are not known; a cut
/// line counts as unreadable), never a process that runs out of memory.
pub const MAX_LOG_BYTES: u64 = 512 * 1024 * 1024;

/// Decodes every complete zstd frame of `bytes`, in order, handing what they hold to `sink` a
/// piece at a time (never more than `limit` bytes in all). A torn or corrupt frame ends the
/// decoding, and so does the limit; what came before is kept and the problem is said.
fn decode_frames_into(bytes: &[u8], limit: u64, sink: &mut dyn FnMut(&[u8])) -> Option<String> {
    let mut rest = bytes;
    let mut room = limit;
    let mut buffer = vec![0u8; 256 * 1024];
    while !rest.is_empty() {
        let size = match zstd::zstd_safe::find_frame_compressed_size(rest) {
            Ok(size) if size <= rest.len() => size,
            _ => {
                return Some(format!(
                    "the last {} byte(s) are not a complete zstd frame (torn by a crash?); the frames before them were read",
                    rest.len()
                ))
            }
        };
        let (frame, after) = rest.split_at(size);
        let failed = |e: std::io::Error| {
            format!(
                "a zstd frame at byte {} does not decode ({e}); the frames before it were read",
                bytes.len() - rest.len()
            )
        };
        let mut decoder = match zstd::stream::read::Decoder::new(frame) {
            Ok(decoder) => decoder,
            Err(e) => return Some(failed(e)),
        };
        loop {
            let read = match decoder.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(failed(e)),
            };
            if read as u64 > room {
                sink(&buffer[..room as usize]);
                return Some(too_long(limit));
            }
            room -= read as u64;
            sink(&buffer[..read]);
        }
        rest = after;
    }
    None
}

/// [`decode_frames_into`] into one buffer.
#[cfg(test)]
fn decode_frames(bytes: &[u8], limit: u64) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    let problem = decode_frames_into(bytes, limit, &mut |piece| out.extend_from_slice(piece));
    (out, problem)
}

fn too_long(limit: u64) -> String {
    format!("the log holds more than {limit} bytes; it was read that far only")
}

fn string_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// How a `tool/result`'s data says the call ended.
fn outcome_of(data: &Value) -> CallOutcome {
    if let Some(error) = data.get("error").filter(|e| !e.is_null()) {
        let name = error.get("name").and_then(Value::as_str).unwrap_or_default();
        return if name == "ToolNotStartedError" {
            CallOutcome::Failed
        } else if name == "ToolOutcomeUnknownError" {
            CallOutcome::Unknown
        } else {
            CallOutcome::Failed
        };
    }
    let failed = data
        .pointer("/message/content")
        .and_then(Value::as_array)
        .is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.get("isError").and_then(Value::as_bool) == Some(true))
        });
    if failed {
        CallOutcome::Failed
    } else {
        CallOutcome::Ok
    }
}

/// The call id a `tool/result` answers.
fn result_call_id(data: &Value) -> Option<String> {
    data.get("callId")
        .and_then(Value::as_str)
        .or_else(|| data.pointer("/message/source/callId").and_then(Value::as_str))
        .or_else(|| {
            data.pointer("/message/content")
                .and_then(Value::as_array)
                .and_then(|parts| parts.iter().find_map(|p| p.get("toolCallId").and_then(Value::as_str)))
        })
        .map(str::to_owned)
}

/// A line longer than this is not read (it counts as an unreadable line): one line of a log
/// must not cost more memory than this, whatever the log holds (a zstd bomb decodes to one
/// line of gigabytes).
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Parses decoded log text as it arrives, a piece at a time: the header, then every
/// `tool/call` paired with its result. Holds one line at a time, never the log.
struct LogParser {
    header: SessionHeader,
    calls: Vec<ToolCall>,
    problems: Vec<LogProblem>,
    /// `None`: results that disagree (or more than one) arrived for one call id.
    results: std::collections::HashMap<String, Option<(CallOutcome, Option<String>)>>,
    /// The line being read, and how many lines came before it.
    line: Vec<u8>,
    index: usize,
    /// The line being read is longer than [`MAX_LINE_BYTES`]: the rest of it is passed over.
    overlong: bool,
    /// Every decoded byte seen.
    bytes: u64,
}

impl LogParser {
    fn new() -> Self {
        LogParser {
            header: SessionHeader::default(),
            calls: Vec::new(),
            problems: Vec::new(),
            results: std::collections::HashMap::new(),
            line: Vec::new(),
            index: 0,
            overlong: false,
            bytes: 0,
        }
    }

    fn feed(&mut self, mut piece: &[u8]) {
        self.bytes += piece.len() as u64;
        while !piece.is_empty() {
            let (part, ends) = match piece.iter().position(|b| *b == b'\n') {
                Some(at) => (&piece[..at], Some(at + 1)),
                None => (piece, None),
            };
            if !self.overlong {
                if self.line.len() + part.len() > MAX_LINE_BYTES {
                    self.overlong = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            match ends {
                Some(after) => {
                    self.end_line();
                    piece = &piece[after..];
                }
                None => piece = &[],
            }
        }
    }

    /// Parses the line read so far, and starts the next.
    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let overlong = std::mem::replace(&mut self.overlong, false);
        let index = self.index;
        self.index += 1;
        if overlong {
            let message = format!("a line longer than {MAX_LINE_BYTES} bytes; it was not read");
            self.unreadable(index, message);
            return;
        }
        self.parse_line(index, &line);
    }

    /// A line that cannot be read may have been a tool call: it stays in the calls, as one whose
    /// effect is unknown, so the replay is blind from there on instead of trusting it. Its time
    /// is unknown, but no earlier than the call before it (the log is in time order).
    fn unreadable(&mut self, index: usize, message: String) {
        let number = index + 1;
        let time = self.calls.last().and_then(|c| c.time.clone());
        self.calls.push(ToolCall {
            seq: index as u64,
            time,
            turn: None,
            step: None,
            call_id: format!("line-{number}"),
            name: UNREADABLE_LINE.to_owned(),
            arguments: Err(message.clone()),
            outcome: CallOutcome::Unknown,
            result_time: None,
        });
        self.problems.push(LogProblem { line: number, message });
    }

    fn parse_line(&mut self, index: usize, line: &[u8]) {
        let number = index + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => return self.unreadable(index, format!("not JSON ({e})")),
        };
        let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
        let data = value.get("data").unwrap_or(&Value::Null);
        match kind {
            "session" if number == 1 || self.header.id.is_empty() => {
                self.header = SessionHeader {
                    id: string_field(&value, "id").unwrap_or_default(),
                    created_at: string_field(&value, "createdAt"),
                    cwd: string_field(&value, "cwd"),
                    parent_session: string_field(&value, "parentSession"),
                    seed_length: value.get("seedLength").and_then(Value::as_u64),
                };
            }
            "tool/call" => {
                let (Some(call_id), Some(name)) = (string_field(data, "callId"), string_field(data, "name")) else {
                    return self.unreadable(index, "a tool/call without callId or name".to_owned());
                };
                let arguments = match data.get("arguments") {
                    Some(Value::String(raw)) => {
                        serde_json::from_str(raw).map_err(|e| format!("arguments are not JSON ({e})"))
                    }
                    Some(Value::Object(map)) => Ok(Value::Object(map.clone())),
                    _ => Err("no arguments".to_owned()),
                };
                self.calls.push(ToolCall {
                    seq: value.get("seq").and_then(Value::as_u64).unwrap_or(index as u64),
                    time: value.get("time").map(|t| match t {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }),
                    turn: data.get("turn").and_then(Value::as_u64),
                    step: data.get("step").and_then(Value::as_u64),
                    call_id,
                    name,
                    arguments,
                    outcome: CallOutcome::Unknown,
                    result_time: None,
                });
            }
            "tool/result" => {
                if let Some(call_id) = result_call_id(data) {
                    let outcome = outcome_of(data);
                    let time = value.get("time").map(|t| match t {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                    self.results
                        .entry(call_id)
                        .and_modify(|known| match known {
                            // A repeated result keeps its outcome if it agrees, but no single
                            // time says when the tool finished.
                            Some((seen, seen_time)) if *seen == outcome => *seen_time = None,
                            _ => *known = None,
                        })
                        .or_insert(Some((outcome, time)));
                }
            }
            _ => {}
        }
    }

    /// The header, the calls with their outcomes, and the problems found; the last line counts
    /// even without its newline.
    fn finish(mut self) -> (SessionHeader, Vec<ToolCall>, Vec<LogProblem>, u64) {
        if !self.line.is_empty() || self.overlong {
            self.end_line();
        }
        let LogParser {
            header,
            mut calls,
            mut problems,
            results,
            bytes,
            ..
        } = self;
        if header.id.is_empty() {
            problems.push(LogProblem {
                line: 1,
                message: "no session header line".into(),
            });
        }
        // A result names its call by id only: where calls share an id, no result can be told to be
        // whose, so each of them has an unknown outcome.
        let mut uses: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for call in &calls {
            *uses.entry(call.call_id.as_str()).or_default() += 1;
        }
        let shared: std::collections::HashSet<String> = uses
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(id, _)| id.to_owned())
            .collect();
        for call in &mut calls {
            let result = if shared.contains(&call.call_id) {
                None
            } else {
                results.get(&call.call_id).cloned().flatten()
            };
            (call.outcome, call.result_time) = match result {
                Some((outcome, time)) => (outcome, time),
                None => (CallOutcome::Unknown, None),
            };
        }
        // The replay allocates a node per call next: the doubling room of a log's worth of
        // calls is given back first.
        calls.shrink_to_fit();
        (header, calls, problems, bytes)
    }
}

/// Parses decoded log text whole (see [`LogParser`]).
#[cfg(test)]
fn parse(text: &[u8]) -> (SessionHeader, Vec<ToolCall>, Vec<LogProblem>) {
    let mut parser = LogParser::new();
    parser.feed(text);
    let (header, calls, problems, _) = parser.finish();
    (header, calls, problems)
}

/// Reads one session log (`.zstd` frames or plain JSON Lines), streaming the file once and
/// parsing it as it is decoded: what it costs in memory is what its calls hold, never the
/// decoded log (a 320 KB zstd bomb cost 1 GB when it was decoded whole). A log past
/// [`MAX_LOG_BYTES`] is read that far and the rest is reported lost.
pub fn read_log(path: &Path) -> Result<SessionLog, super::RecordsError> {
    // A fifo or a device would block the read or never end: only a regular file is a log.
    let file = crate::verbs::open_regular_file(path).map_err(super::io_error(path))?;
    let mut reader = std::io::BufReader::new(file).take(MAX_LOG_BYTES + 1);
    let compressed = path.extension().is_some_and(|e| e == "zstd" || e == "zst");
    let mut parser = LogParser::new();
    let torn = if compressed {
        // The compressed file is held (a log's is small beside what it decodes to) so that a
        // torn last frame can be told from a whole one before any of it is decoded.
        let mut raw = Vec::new();
        reader.read_to_end(&mut raw).map_err(super::io_error(path))?;
        let cut = raw.len() as u64 > MAX_LOG_BYTES;
        raw.truncate(MAX_LOG_BYTES as usize);
        let torn = decode_frames_into(&raw, MAX_LOG_BYTES, &mut |piece| parser.feed(piece));
        torn.or_else(|| cut.then(|| too_long(MAX_LOG_BYTES)))
    } else {
        let mut buffer = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(0) => break None,
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(super::io_error(path)(e)),
            };
            let room = (MAX_LOG_BYTES - total) as usize;
            if read > room {
                parser.feed(&buffer[..room]);
                break Some(too_long(MAX_LOG_BYTES));
            }
            total += read as u64;
            parser.feed(&buffer[..read]);
        }
    };
    let cut = torn.as_deref() == Some(too_long(MAX_LOG_BYTES).as_str());
    let (mut header, mut calls, mut problems, bytes) = parser.finish();
    if header.id.is_empty() {
        // Without a header the log is still named by its directory, as the harness names it.
        header.id = path
            .parent()
            .and_then(Path::file_name)
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    if let Some(torn) = torn {
        // What was lost may have been calls: they count as one of unknown effect, no earlier than
        // the last call read.
        calls.push(ToolCall {
            seq: calls.last().map_or(0, |c| c.seq + 1),
            time: calls.last().and_then(|c| c.time.clone()),
            turn: None,
            step: None,
            call_id: "log-tail".to_owned(),
            name: UNREADABLE_LINE.to_owned(),
            arguments: Err(torn.clone()),
            outcome: CallOutcome::Unknown,
            result_time: None,
        });
        problems.push(LogProblem { line: 0, message: torn });
    }
    Ok(SessionLog {
        header,
        calls,
        problems,
        bytes,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_keys_are_the_harness_s() {
        assert_eq!(project_key("/home/u/my project"), "--home-u-my~0020project--");
        assert_eq!(project_key("C:\\work\\x"), "--C-work-x--");
        assert_eq!(project_key("//a//b"), "--a-b--");
        assert_eq!(project_key("/"), "--root--");
        assert_eq!(project_key("/tmp/é~"), "--tmp-~00E9~007E--");
        assert_eq!(project_key(&format!("/{}", "a".repeat(300))).len(), 251 + 4);
    }

    #[test]
    fn frames_decode_in_order_and_a_torn_tail_is_reported() {
        let one = zstd::encode_all(&b"{\"type\":\"session\",\"id\":\"s\"}\n"[..], 3).unwrap();
        let two = zstd::encode_all(&b"{\"type\":\"tool/call\",\"seq\":1,\"data\":{\"callId\":\"c\",\"name\":\"write\",\"arguments\":\"{}\"}}\n"[..], 3).unwrap();
        let mut both = one.clone();
        both.extend_from_slice(&two);
        let (text, torn) = decode_frames(&both, MAX_LOG_BYTES);
        assert!(torn.is_none());
        let (header, calls, problems) = parse(&text);
        assert_eq!(header.id, "s");
        assert_eq!(calls.len(), 1, "the second frame is read too");
        assert!(problems.is_empty());
        let mut torn_file = both.clone();
        torn_file.extend_from_slice(&two[..two.len() / 2]);
        let (text, torn) = decode_frames(&torn_file, MAX_LOG_BYTES);
        assert!(torn.is_some_and(|t| t.contains("not a complete zstd frame")));
        assert_eq!(parse(&text).1.len(), 1);
        // A frame that decodes to more than the limit (a zstd bomb) is cut there; the call it
        // cut reads as an unreadable line, so the replay is blind from there on.
        let bomb = zstd::encode_all(&vec![b' '; 10_000][..], 19).unwrap();
        let mut bombed = both.clone();
        bombed.extend_from_slice(&bomb);
        let (whole, _) = decode_frames(&both, MAX_LOG_BYTES);
        let limit = whole.len() as u64 + 100;
        let (text, cut) = decode_frames(&bombed, limit);
        assert!(cut.is_some_and(|t| t.contains("was read that far only")));
        assert_eq!(text.len() as u64, limit, "read up to the limit, not one byte more");
        assert_eq!(&text[..whole.len()], &whole[..], "the frames before are kept whole");
    }

    /// Fed a byte at a time or whole, the parser reads the same log; a line past the limit is
    /// passed over without being held, and counts as an unreadable call.
    #[test]
    fn the_parser_reads_pieces_as_it_reads_the_whole_and_never_holds_an_overlong_line() {
        let log = concat!(
            "{\"type\":\"session\",\"id\":\"s\",\"cwd\":\"/w\"}\n",
            "{\"type\":\"tool/call\",\"seq\":1,\"data\":{\"callId\":\"a\",\"name\":\"write\",\"arguments\":\"{}\"}}\n",
            "not json\n",
            "{\"type\":\"tool/call\",\"seq\":3,\"data\":{\"callId\":\"b\",\"name\":\"bash\",\"arguments\":\"{}\"}}",
        );
        let whole = parse(log.as_bytes());
        let mut parser = LogParser::new();
        for byte in log.as_bytes() {
            parser.feed(std::slice::from_ref(byte));
        }
        let (header, calls, problems, bytes) = parser.finish();
        assert_eq!(bytes, log.len() as u64);
        assert_eq!((header, calls, problems), whole);
        let mut parser = LogParser::new();
        parser.feed(b"{\"type\":\"session\",\"id\":\"s\"}\n");
        let chunk = vec![b' '; 1 << 20];
        for _ in 0..(MAX_LINE_BYTES >> 20) + 1 {
            parser.feed(&chunk);
            assert!(
                parser.line.len() <= MAX_LINE_BYTES,
                "never more than a line's limit held"
            );
        }
        parser.feed(b"\n{\"type\":\"tool/call\",\"seq\":3,\"data\":{\"callId\":\"c\",\"name\":\"read\",\"arguments\":\"{}\"}}\n");
        let (_, calls, problems, _) = parser.finish();
        assert_eq!(
            calls.len(),
            2,
            "the overlong line is an unreadable call, the next one is read"
        );
        assert_eq!(calls[0].name, UNREADABLE_LINE);
        assert!(problems[0].message.contains("longer than"), "{problems:?}");
    }

    #[test]
    fn results_pair_with_calls_and_bad_lines_are_named() {
        let log = concat!(
            "{\"type\":\"session\",\"id\":\"s\",\"cwd\":\"/w\"}\n",
            "{\"type\":\"tool/call\",\"seq\":1,\"data\":{\"turn\":1,\"step\":1,\"callId\":\"a\",\"name\":\"write\",\"arguments\":\"{\\\"file_path\\\":\\\"x\\\",\\\"content\\\":\\\"hi\\\"}\"}}\n",
            "{\"type\":\"tool/result\",\"seq\":2,\"data\":{\"turn\":1,\"step\":1,\"message\":{\"source\":{\"kind\":\"tool\",\"callId\":\"a\"},\"content\":[{\"type\":\"tool-result\",\"toolCallId\":\"a\",\"isError\":false}]}}}\n",
            "not json\n",
            "{\"type\":\"tool/call\",\"seq\":4,\"data\":{\"turn\":1,\"step\":2,\"callId\":\"b\",\"name\":\"edit\",\"arguments\":\"{broken\"}}\n",
            "{\"type\":\"tool/result\",\"seq\":5,\"data\":{\"message\":{\"content\":[{\"type\":\"tool-result\",\"toolCallId\":\"b\",\"isError\":true}]}}}\n",
            "{\"type\":\"future/event\",\"seq\":6,\"data\":{}}\n",
            "{\"type\":\"tool/call\",\"seq\":7,\"data\":{\"turn\":2,\"step\":1,\"callId\":\"c\",\"name\":\"bash\",\"arguments\":\"{}\"}}\n",
            "{\"type\":\"tool/result\",\"seq\":8,\"data\":{\"message\":{\"source\":{\"callId\":\"c\"}},\"error\":{\"name\":\"ToolOutcomeUnknownError\"}}}\n",
        );
        let (header, calls, problems) = parse(log.as_bytes());
        assert_eq!(header.cwd.as_deref(), Some("/w"));
        assert_eq!(
            calls.iter().map(|c| c.outcome).collect::<Vec<_>>(),
            [
                CallOutcome::Ok,
                CallOutcome::Unknown,
                CallOutcome::Failed,
                CallOutcome::Unknown
            ]
        );
        assert_eq!(calls[0].arguments.as_ref().unwrap()["content"], "hi");
        assert_eq!(
            (calls[1].name.as_str(), calls[1].call_id.as_str()),
            (UNREADABLE_LINE, "line-4"),
            "a line that cannot be read stays as a call of unknown effect"
        );
        assert!(calls[2].arguments.is_err());
        assert_eq!(
            problems,
            [LogProblem {
                line: 4,
                message: problems[0].message.clone()
            }]
        );
        assert!(problems[0].message.starts_with("not JSON"));
    }

    #[test]
    fn calls_that_share_an_id_have_unknown_outcomes_and_disagreeing_results_too() {
        let call = |seq: u64, id: &str| {
            format!("{{\"type\":\"tool/call\",\"seq\":{seq},\"data\":{{\"turn\":1,\"step\":{seq},\"callId\":\"{id}\",\"name\":\"write\",\"arguments\":\"{{}}\"}}}}\n")
        };
        let result = |seq: u64, id: &str, failed: bool| {
            format!("{{\"type\":\"tool/result\",\"seq\":{seq},\"data\":{{\"message\":{{\"content\":[{{\"type\":\"tool-result\",\"toolCallId\":\"{id}\",\"isError\":{failed}}}]}}}}}}\n")
        };
        let log = [
            "{\"type\":\"session\",\"id\":\"s\"}\n".to_owned(),
            call(1, "dup"),
            result(2, "dup", true),
            call(3, "dup"),
            result(4, "dup", false),
            call(5, "twice"),
            result(6, "twice", false),
            result(7, "twice", true),
            call(8, "fine"),
            result(9, "fine", false),
        ]
        .concat();
        let (_, calls, _) = parse(log.as_bytes());
        assert_eq!(
            calls.iter().map(|c| c.outcome).collect::<Vec<_>>(),
            [
                CallOutcome::Unknown,
                CallOutcome::Unknown,
                CallOutcome::Unknown,
                CallOutcome::Ok
            ]
        );
    }
}
