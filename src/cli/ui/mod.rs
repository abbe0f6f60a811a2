//! `ckpt ui`: a local web view of the workspace's checkpoints — a timeline, line diffs, preview
//! and guarded restore — served on 127.0.0.1 only. This module owns the HTTP edge: every request
//! must carry this run's random token (compared in constant time) and the `Host` of the address
//! it bound (a DNS-rebinding page cannot), state changes are POST only, and every answer carries
//! a tight Content-Security-Policy and no CORS header. It never serves a file from disk (the page
//! is embedded in the binary) and never decides anything about checkpoints: each API answer is
//! what the same CLI command prints as v1 records ([`api`]), so the page has no path to writing
//! that the CLI does not have.

mod api;

use std::io::Read;

use tiny_http::{Header, Method, Request, Response, Server};

use super::exit::Exit;
use crate::provider::{CkptError, Provider};
use crate::records::config::Config;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// No scripts, styles or connections but this server's own; no frames, forms, plugins or base.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A request body larger than this is refused (the largest real one is a list of paths).
const MAX_BODY: u64 = 4 * 1024 * 1024;

/// What `ckpt ui` was asked for.
pub(super) struct UiOptions {
    pub port: u16,
    pub open: bool,
    pub all: bool,
    /// Stop when the process that started this one is gone (a harness that was killed).
    pub exit_with_parent: bool,
}

/// Why the server should stop now, if it should: its workspace is gone, or (when asked) the
/// process that started it.
fn reason_to_stop(workdir: &std::path::Path, parent: Option<u32>) -> Option<String> {
    if !workdir.is_dir() {
        return Some(format!("the workspace {} is gone", workdir.display()));
    }
    match parent {
        Some(parent) if std::os::unix::process::parent_id() != parent => {
            Some("the process that started it has exited".to_owned())
        }
        _ => None,
    }
}

/// A random token of 32 hex digits from the kernel's generator.
fn new_token() -> Result<String, CkptError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| CkptError::Io {
            path: "/dev/urandom".into(),
            source,
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal without saying where a difference is: the time does not depend on the first mismatch.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Headers every answer carries.
fn hardened<R: Read>(mut response: Response<R>, content_type: &str) -> Response<R> {
    for (name, value) in [
        ("Content-Type", content_type),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"),
    ] {
        if let Some(h) = header(name, value) {
            response.add_header(h);
        }
    }
    response
}

/// A JSON answer with a status code.
pub(super) struct Answer {
    pub status: u16,
    pub body: serde_json::Value,
}

impl Answer {
    pub fn ok(body: serde_json::Value) -> Self {
        Answer { status: 200, body }
    }

    pub fn error(status: u16, code: &str, message: &str) -> Self {
        Answer {
            status,
            body: serde_json::json!({"v": 1, "type": "error", "code": code, "message": message}),
        }
    }
}

fn respond_json(request: Request, answer: Answer) {
    respond(request, answer, false)
}

/// Answers with `answer`; with `close`, the connection is closed afterwards.
fn respond(request: Request, answer: Answer, close: bool) {
    let text = answer.body.to_string();
    let mut response = hardened(
        Response::from_string(text).with_status_code(answer.status),
        "application/json; charset=utf-8",
    );
    if close {
        if let Some(h) = header("Connection", "close") {
            response.add_header(h);
        }
    }
    // A client that went away is not an error of ours.
    let _ = request.respond(response);
}

/// Listens on 127.0.0.1:`port` again, retrying while the address or descriptors are busy,
/// unless the server should stop meanwhile.
fn relisten(port: u16, workdir: &std::path::Path, parent: Option<u32>) -> Result<Server, CkptError> {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if let Some(why) = reason_to_stop(workdir, parent) {
            return Err(CkptError::Io {
                path: format!("127.0.0.1:{port}").into(),
                source: std::io::Error::other(format!("stopping: {why}")),
            });
        }
        if let Ok(server) = Server::http(("127.0.0.1", port)) {
            return Ok(server);
        }
    }
}

fn respond_text(request: Request, status: u16, content_type: &str, text: String) {
    let response = hardened(Response::from_string(text).with_status_code(status), content_type);
    let _ = request.respond(response);
}

/// The header's value, if the request has exactly one of that name.
fn header_value<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    let mut found = request
        .headers()
        .iter()
        .filter(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name));
    let first = found.next()?;
    found.next().is_none().then(|| first.value.as_str())
}

/// A query parameter, percent-decoded.
pub(super) fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => Some((high * 16 + low) as u8),
            _ => None,
        };
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a request is refused before it reaches a handler, if it is.
fn refusal(request: &Request, host: &str, token: &str) -> Option<Answer> {
    if header_value(request, "Host") != Some(host) {
        return Some(Answer::error(
            403,
            "refused",
            &format!("this server answers only requests for {host}"),
        ));
    }
    let path = request.url().split('?').next().unwrap_or_default();
    // The page itself carries the token in its address (that is how a person opens it); every
    // other request carries it in a header, which a page on another site cannot set here.
    let given = if path == "/" || path.starts_with("/assets/") {
        query_param(request.url(), "token")
    } else {
        header_value(request, "X-Ckpt-Token").map(str::to_owned)
    };
    if !given.is_some_and(|given| same_secret(given.as_bytes(), token.as_bytes())) {
        return Some(Answer::error(403, "refused", "missing or wrong token"));
    }
    if request.headers().iter().any(|h| h.field.equiv("Origin"))
        && header_value(request, "Origin") != Some(&format!("http://{host}"))
    {
        return Some(Answer::error(
            403,
            "refused",
            "requests from another origin are refused",
        ));
    }
    None
}

fn parse_body(request: &Request, body: std::io::Result<Vec<u8>>) -> Result<serde_json::Value, Answer> {
    if header_value(request, "Content-Type").is_none_or(|t| !t.starts_with("application/json")) {
        return Err(Answer::error(415, "usage", "a POST body must be application/json"));
    }
    let body = body.map_err(|e| Answer::error(400, "usage", &format!("reading the request body: {e}")))?;
    if body.len() as u64 > MAX_BODY {
        return Err(Answer::error(413, "usage", "the request body is too large"));
    }
    serde_json::from_slice(&body).map_err(|e| Answer::error(400, "usage", &format!("the body is not JSON: {e}")))
}

fn page(token: &str) -> String {
    // The token is 32 hex digits: nothing in it needs escaping.
    PAGE.replace("{{TOKEN}}", token)
}

/// Opens `url` in the user's browser where one can be started; a failure only means the URL
/// printed above has to be opened by hand.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        Some("open")
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some() {
        Some("xdg-open")
    } else {
        None
    };
    if let Some(opener) = opener {
        let spawned = std::process::Command::new(opener)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            sayln!("ckpt: could not start {opener} ({e}); open the address above by hand");
        }
    }
}

/// Serves the web view until the process is stopped (Ctrl-C).
pub(super) fn serve(provider: &dyn Provider, config: &Config, options: &UiOptions) -> Result<Exit, CkptError> {
    let listen_error = |source: std::io::Error| CkptError::Io {
        path: format!("listening on 127.0.0.1:{}", options.port).into(),
        source,
    };
    let server = Server::http(("127.0.0.1", options.port)).map_err(|e| listen_error(std::io::Error::other(e)))?;
    let port = server
        .server_addr()
        .to_ip()
        .map(|a| a.port())
        .ok_or_else(|| listen_error(std::io::Error::other("not an IP address")))?;
    let host = format!("127.0.0.1:{port}");
    let token = new_token()?;
    let url = format!("http://{host}/?token={token}");
    // The one line a caller (a person, the harness adapter, a test) needs: on stdout, flushed.
    super::output::to_stdout(&format!("ckpt ui: serving {} at {url}\n", provider.workdir().display()));
    sayln!("ckpt ui: only this machine can connect; stop with Ctrl-C");
    if options.open {
        open_browser(&url);
    }
    let api = api::Api {
        provider,
        config,
        all: options.all,
    };
    let parent = options.exit_with_parent.then(std::os::unix::process::parent_id);
    let mut server = server;
    let mut checked = std::time::Instant::now();
    loop {
        // Checked once a second even while requests keep coming.
        if checked.elapsed() >= std::time::Duration::from_secs(1) {
            checked = std::time::Instant::now();
            if let Some(why) = reason_to_stop(provider.workdir(), parent) {
                sayln!("ckpt ui: stopping: {why}");
                return Ok(Exit::Ok);
            }
            // tiny_http's accepting thread dies when it runs out of descriptors (a flood of
            // connections): a server nobody can reach any more listens again.
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            if std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_millis(500)).is_err() {
                sayln!("ckpt ui: no longer accepting connections; listening again");
                drop(server);
                server = relisten(port, provider.workdir(), parent)?;
                continue;
            }
        }
        let mut request = match server.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(e) => {
                // tiny_http stops accepting after an accept error (too many open files, say):
                // the server is listened for again on the same address, with the same token.
                sayln!("ckpt ui: accepting a connection failed ({e}); listening again");
                drop(server);
                server = relisten(port, provider.workdir(), parent)?;
                continue;
            }
        };
        // Refused before any body is read: a client without the token cannot hold the server
        // by promising a body it never sends. The connection is closed after the refusal, so
        // an unread body cannot put a kept-alive connection out of step.
        if let Some(answer) = refusal(&request, &host, &token) {
            // Answered on a thread of its own: tiny_http skips what is left of a body before it
            // answers, and a client that promised a body it never sends must hold only itself.
            // A small body tiny_http already buffered (at most 1 KiB, no `Expect`) is drained
            // first, so the client hears the refusal instead of a reset.
            let buffered =
                request.body_length().is_some_and(|n| n <= 1024) && header_value(&request, "Expect").is_none();
            std::thread::spawn(move || {
                if buffered {
                    let _ = std::io::copy(&mut request.as_reader().take(1024), &mut std::io::sink());
                }
                respond(request, answer, true);
            });
            continue;
        }
        let mut body = Vec::new();
        let read = request.as_reader().take(MAX_BODY + 1).read_to_end(&mut body);
        let url = request.url().to_owned();
        let path = url.split('?').next().unwrap_or_default().to_owned();
        match (request.method(), path.as_str()) {
            (Method::Get, "/") => respond_text(request, 200, "text/html; charset=utf-8", page(&token)),
            (Method::Get, "/assets/page.js") => {
                respond_text(request, 200, "text/javascript; charset=utf-8", SCRIPT.to_owned())
            }
            (Method::Get, "/assets/page.css") => {
                respond_text(request, 200, "text/css; charset=utf-8", STYLE.to_owned())
            }
            (Method::Get, route) if route.starts_with("/api/") => {
                let answer = api.get(route, &url);
                respond_json(request, answer);
            }
            (Method::Post, route) if route.starts_with("/api/") => {
                let answer = match parse_body(&request, read.map(|_| body)) {
                    Ok(body) => api.post(route, &body),
                    Err(answer) => answer,
                };
                respond_json(request, answer);
            }
            (Method::Get | Method::Post, _) => respond_json(request, Answer::error(404, "not_found", "no such page")),
            _ => respond_json(request, Answer::error(405, "usage", "only GET and POST are answered")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abcd", b"abcd"));
        assert!(!same_secret(b"abcd", b"abce"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"abcd"));
    }

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(query_param("/x?a=1&token=ab%20c", "token").as_deref(), Some("ab c"));
        assert_eq!(query_param("/x?a=1", "token"), None);
        assert_eq!(query_param("/x?path=%E2%9C%93%2", "path").as_deref(), Some("✓%2"));
    }
}
