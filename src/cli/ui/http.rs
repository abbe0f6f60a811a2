//! The web view's HTTP/1.1 transport on a loopback listener: one request per connection
//! (every answer closes it), the head and the body bounded and read under a timeout on the
//! connection's own thread, so a client can hold only its own connection, and not for long; a
//! body is read only after the caller's screen let the head through, and one declared larger
//! than the limit is never read at all. It decides nothing about a request: the caller's
//! screen refuses, and the caller answers what passes, one at a time.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The most a request line and its headers may take.
const MAX_HEAD: usize = 16 * 1024;
/// The most headers a request may have.
const MAX_HEADERS: usize = 64;
/// How long a client may take to send its whole request (from its connection), and to take
/// the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may wait before its first byte (a browser opens some ahead of need).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections read at once; more are turned away as they come.
const MAX_CONNECTIONS: usize = 1024;
/// Requests waiting for the one thread that answers them.
const MAX_WAITING: usize = 64;

/// A request line and its headers.
pub(super) struct Head {
    pub method: String,
    /// The request target as sent: path and query.
    pub url: String,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// The header's value, if the request has exactly one of that name and it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut found = self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let (_, first) = found.next()?;
        if found.next().is_some() {
            return None;
        }
        std::str::from_utf8(first).ok()
    }

    /// True if the request has a header of that name at all.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    pub fn path(&self) -> &str {
        self.url.split('?').next().unwrap_or_default()
    }
}

/// An answer: status, content type, body.
pub(super) struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// A request whose head the screen let through, with its whole body, and the connection to
/// answer it on.
pub(super) struct Request {
    pub head: Head,
    pub body: Vec<u8>,
    stream: TcpStream,
}

impl Request {
    /// Answers and closes the connection (a client that went away is not an error of ours).
    pub fn respond(self, reply: Reply, headers: &[(&str, &str)]) {
        answer(&self.stream, &reply, headers);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn answer(mut stream: &TcpStream, reply: &Reply, headers: &[(&str, &str)]) {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(&reply.body))
        .and_then(|()| stream.flush());
    let _ = stream.shutdown(Shutdown::Write);
}

/// Answers a request that will not be read further, then takes in (a bounded amount of) what
/// the client is still sending, so that it hears the answer instead of a reset.
fn refuse(stream: &TcpStream, reply: &Reply, headers: &[(&str, &str)]) {
    answer(stream, reply, headers);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(&mut stream.take(64 * 1024), &mut std::io::sink());
}

/// What the caller decides from a head alone: refuse it with this reply, or read its body.
pub(super) type Screen = dyn Fn(&Head) -> Option<Reply> + Send + Sync;

/// Accepts connections on `listener` on a thread of its own and reads each on another; the
/// requests `screen` lets through arrive, with their bodies of at most `max_body` bytes, on the
/// returned channel. `headers` go with every answer given here.
pub(super) fn serve_in_background(
    listener: TcpListener,
    screen: Arc<Screen>,
    max_body: usize,
    headers: &'static [(&'static str, &'static str)],
) -> mpsc::Receiver<Request> {
    let (sender, receiver) = mpsc::sync_channel(MAX_WAITING);
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, say: the connections being read will end within their
                // timeout and give theirs back.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = (&stream)
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            continue;
        }
        let (screen, sender, done) = (Arc::clone(&screen), sender.clone(), Arc::clone(&active));
        let spawned = std::thread::Builder::new().spawn(move || {
            read_one(stream, &*screen, max_body, headers, &sender);
            done.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    });
    receiver
}

/// Reads one request from `stream`, refuses it or hands it on.
fn read_one(
    stream: TcpStream,
    screen: &Screen,
    max_body: usize,
    headers: &[(&str, &str)],
    sender: &mpsc::SyncSender<Request>,
) {
    // One deadline for the whole request once it has begun, not per read: a client sending a
    // byte now and then holds its connection no longer than one that sends it all at once.
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut reader = Deadline {
        stream: &stream,
        deadline: std::time::Instant::now() + IDLE_TIMEOUT,
    };
    let error = |status: u16, message: &str| Reply {
        status,
        content_type: "application/json; charset=utf-8",
        body: serde_json::json!({"v": 1, "type": "error", "code": "usage", "message": message})
            .to_string()
            .into_bytes(),
    };
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let (head, used) = loop {
        let read = match reader.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if buffer.is_empty() {
            reader.deadline = std::time::Instant::now() + IO_TIMEOUT;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut slots);
        match parsed.parse(&buffer) {
            Ok(httparse::Status::Complete(used)) if used > MAX_HEAD => {
                return refuse(&stream, &error(431, "the request head is too large"), headers)
            }
            Ok(httparse::Status::Complete(used)) => {
                let head = Head {
                    method: parsed.method.unwrap_or_default().to_owned(),
                    url: parsed.path.unwrap_or_default().to_owned(),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| (h.name.to_owned(), h.value.to_vec()))
                        .collect(),
                };
                break (head, used);
            }
            Ok(httparse::Status::Partial) if buffer.len() <= MAX_HEAD => {}
            Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
                return refuse(&stream, &error(431, "the request head is too large"), headers)
            }
            Err(e) => return refuse(&stream, &error(400, &format!("not an HTTP request: {e}")), headers),
        }
    };
    if let Some(reply) = screen(&head) {
        return refuse(&stream, &reply, headers);
    }
    let mut body = buffer.split_off(used);
    // A client that waits to be asked for its body is asked.
    if head
        .header("Expect")
        .is_some_and(|e| e.trim().eq_ignore_ascii_case("100-continue"))
        && body.is_empty()
    {
        let _ = (&stream).write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    if head.has_header("Transfer-Encoding") {
        if head.has_header("Content-Length")
            || !head
                .header("Transfer-Encoding")
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
        {
            return refuse(
                &stream,
                &error(501, "only a chunked or a sized request body is accepted"),
                headers,
            );
        }
        body = match dechunk(&mut reader, body, max_body) {
            Ok(body) => body,
            Err(Dechunk::TooLarge) => return refuse(&stream, &error(413, "the request body is too large"), headers),
            Err(Dechunk::Bad) => return refuse(&stream, &error(400, "a bad chunked body"), headers),
            Err(Dechunk::Gone) => return,
        };
        return hand_on(Request { head, body, stream }, headers, sender);
    }
    let length = match (head.has_header("Content-Length"), head.header("Content-Length")) {
        (false, _) => 0,
        (true, Some(text)) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            match text.parse::<usize>() {
                Ok(n) if n <= max_body => n,
                _ => return refuse(&stream, &error(413, "the request body is too large"), headers),
            }
        }
        (true, _) => return refuse(&stream, &error(400, "a bad Content-Length"), headers),
    };
    if body.len() < length
        && (&mut reader)
            .take((length - body.len()) as u64)
            .read_to_end(&mut body)
            .is_err()
    {
        return;
    }
    if body.len() < length {
        return refuse(
            &stream,
            &error(400, "the body is shorter than its Content-Length"),
            headers,
        );
    }
    if body.len() > length {
        let message = "more bytes than the Content-Length (one request per connection)";
        return refuse(&stream, &error(400, message), headers);
    }
    hand_on(Request { head, body, stream }, headers, sender);
}

/// Queues a request for the thread that answers them, or says it is busy.
fn hand_on(request: Request, headers: &[(&str, &str)], sender: &mpsc::SyncSender<Request>) {
    if let Err(mpsc::TrySendError::Full(request) | mpsc::TrySendError::Disconnected(request)) = sender.try_send(request)
    {
        let reply = Reply {
            status: 503,
            content_type: "application/json; charset=utf-8",
            body: br#"{"v":1,"type":"error","code":"refused","message":"too many requests are waiting; try again"}"#
                .to_vec(),
        };
        refuse(&request.stream, &reply, headers);
    }
}

/// Reads from a connection until one deadline, whatever the pace of the bytes.
struct Deadline<'a> {
    stream: &'a TcpStream,
    deadline: std::time::Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// Why a chunked body could not be read.
enum Dechunk {
    TooLarge,
    Bad,
    Gone,
}

/// A chunked body (RFC 9112 §7.1), of at most `max_body` bytes, from what was read after the
/// head (`pending`) and then the stream.
fn dechunk(stream: &mut Deadline<'_>, mut pending: Vec<u8>, max_body: usize) -> Result<Vec<u8>, Dechunk> {
    let mut body = Vec::new();
    let mut at = 0;
    // Makes `pending[at..]` hold at least `n` bytes, reading more as needed.
    let mut fill = |pending: &mut Vec<u8>, at: usize, n: usize| -> Result<(), Dechunk> {
        let mut chunk = [0u8; 4096];
        while pending.len() - at < n {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return Err(Dechunk::Gone),
                Ok(read) => pending.extend_from_slice(&chunk[..read]),
            }
        }
        Ok(())
    };
    loop {
        // The size line: hex digits, optional extensions, CRLF (at most 1 KiB).
        let line_end = loop {
            if let Some(end) = pending[at..].windows(2).position(|w| w == b"\r\n") {
                break at + end;
            }
            if pending.len() - at > 1024 {
                return Err(Dechunk::Bad);
            }
            let have = pending.len() - at;
            fill(&mut pending, at, have + 1)?;
        };
        let line = &pending[at..line_end];
        let digits = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .map(str::trim)
            .filter(|d| !d.is_empty() && d.len() <= 8)
            .and_then(|d| usize::from_str_radix(d, 16).ok())
            .ok_or(Dechunk::Bad)?;
        at = line_end + 2;
        if size == 0 {
            // No trailers are taken: the body ends with an empty line.
            fill(&mut pending, at, 2)?;
            return if &pending[at..at + 2] == b"\r\n" {
                Ok(body)
            } else {
                Err(Dechunk::Bad)
            };
        }
        if body.len() + size > max_body {
            return Err(Dechunk::TooLarge);
        }
        fill(&mut pending, at, size + 2)?;
        body.extend_from_slice(&pending[at..at + size]);
        if &pending[at + size..at + size + 2] != b"\r\n" {
            return Err(Dechunk::Bad);
        }
        at += size + 2;
    }
}
