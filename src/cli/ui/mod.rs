//! `ckpt ui`: a local web view of the workspace's checkpoints — a timeline, line diffs, preview
//! and guarded restore — served on 127.0.0.1 only. This module owns the HTTP edge: every request
//! must carry this run's random token (compared in constant time) and the `Host` of the address
//! it bound (a DNS-rebinding page cannot), state changes are POST only, and every answer carries
//! a tight Content-Security-Policy and no CORS header. It never serves a file from disk (the page
//! is embedded in the binary) and never decides anything about checkpoints: each API answer is
//! what the same CLI command prints as v1 records ([`api`]), so the page has no path to writing
//! that the CLI does not have.

mod api;
mod http;

use std::io::Read;
use std::sync::Arc;

use http::{Head, Reply, Request};

use super::exit::Exit;
use crate::provider::{CkptError, Provider};
use crate::records::config::Config;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// No scripts, styles or connections but this server's own; no frames, forms, plugins or base.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A request body larger than this is refused unread (the largest real one is a list of paths).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Headers every answer carries (with its Content-Type).
const HARDENED: &[(&str, &str)] = &[
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    ("X-Frame-Options", "DENY"),
];

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

impl Answer {
    fn reply(self) -> Reply {
        Reply {
            status: self.status,
            content_type: "application/json; charset=utf-8",
            body: self.body.to_string().into_bytes(),
        }
    }
}

fn respond_json(request: Request, answer: Answer) {
    request.respond(answer.reply(), HARDENED);
}

fn respond_text(request: Request, content_type: &'static str, text: String) {
    let reply = Reply {
        status: 200,
        content_type,
        body: text.into_bytes(),
    };
    request.respond(reply, HARDENED);
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
fn refusal(request: &Head, host: &str, token: &str) -> Option<Answer> {
    if request.header("Host") != Some(host) {
        return Some(Answer::error(
            403,
            "refused",
            &format!("this server answers only requests for {host}"),
        ));
    }
    let path = request.path();
    // The page itself carries the token in its address (that is how a person opens it); every
    // other request carries it in a header, which a page on another site cannot set here.
    let given = if path == "/" || path.starts_with("/assets/") {
        query_param(&request.url, "token")
    } else {
        request.header("X-Ckpt-Token").map(str::to_owned)
    };
    if !given.is_some_and(|given| same_secret(given.as_bytes(), token.as_bytes())) {
        return Some(Answer::error(403, "refused", "missing or wrong token"));
    }
    if request.has_header("Origin") && request.header("Origin") != Some(&format!("http://{host}")) {
        return Some(Answer::error(
            403,
            "refused",
            "requests from another origin are refused",
        ));
    }
    None
}

fn parse_body(request: &Request) -> Result<serde_json::Value, Answer> {
    let media_type = request
        .head
        .header("Content-Type")
        .map(|t| t.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    if media_type.as_deref() != Some("application/json") {
        return Err(Answer::error(415, "usage", "a POST body must be application/json"));
    }
    serde_json::from_slice(&request.body)
        .map_err(|e| Answer::error(400, "usage", &format!("the body is not JSON: {e}")))
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
        // The browser is given a private file that leads on to the address: the token would be
        // in the opener's and the browser's command lines, which other users can read.
        let launcher = tempfile::Builder::new()
            .prefix("ckpt-ui-")
            .suffix(".html")
            .tempfile()
            .and_then(|mut file| {
                use std::io::Write;
                write!(
                    file,
                    "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url={url}\">"
                )?;
                Ok(file)
            });
        let launcher = match launcher {
            Ok(file) => file.into_temp_path(),
            Err(e) => {
                sayln!("ckpt: could not write a launcher page ({e}); open the address above by hand");
                return;
            }
        };
        let spawned = std::process::Command::new(opener)
            .arg(&launcher)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            sayln!("ckpt: could not start {opener} ({e}); open the address above by hand");
        }
        // Removed once the browser has had time to read it.
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(15));
            drop(launcher);
        });
    }
}

/// Serves the web view until the process is stopped (Ctrl-C).
/// Opens another provider of the same workspace, for a thread of its own.
pub(super) type OpenProvider<'a> = dyn Fn() -> Result<Box<dyn Provider>, CkptError> + Sync + 'a;

/// Whether a route reads the harness's session logs: those can be large, and are answered on a
/// thread of their own so that they never hold up the rest of the page.
fn reads_session_logs(route: &str) -> bool {
    route.starts_with("/api/trace")
}

pub(super) fn serve(
    provider: &dyn Provider,
    open_another: &OpenProvider<'_>,
    config: &Config,
    options: &UiOptions,
) -> Result<Exit, CkptError> {
    let listen_error = |source: std::io::Error| CkptError::Io {
        path: format!("listening on 127.0.0.1:{}", options.port).into(),
        source,
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", options.port)).map_err(listen_error)?;
    let port = listener.local_addr().map_err(listen_error)?.port();
    let host = format!("127.0.0.1:{port}");
    let token = new_token()?;
    let url = format!("http://{host}/?token={token}");
    // Refused before any body is read, on the connection's own thread: a client without the
    // token cannot hold the server by promising a body it never sends.
    let screen: Arc<http::Screen> = {
        let (host, token) = (host.clone(), token.clone());
        Arc::new(move |head: &Head| refusal(head, &host, &token).map(Answer::reply))
    };
    let requests = http::serve_in_background(listener, screen, MAX_BODY, HARDENED);
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
    std::thread::scope(|scope| {
        // Requests that read session logs go to a thread with a provider of its own, so a slow
        // trace request never holds `/api/checkpoints` and the timeline is drawn at once. It
        // opens that provider on its first request.
        let (to_logs, logs_requests) = std::sync::mpsc::channel::<Request>();
        scope.spawn(move || {
            let mut own: Option<Box<dyn Provider>> = None;
            for request in logs_requests {
                if own.is_none() {
                    match open_another() {
                        Ok(opened) => own = Some(opened),
                        Err(error) => {
                            respond_json(request, Answer::error(500, error.code(), &error.to_string()));
                            continue;
                        }
                    }
                }
                if let Some(provider) = own.as_deref() {
                    let api = api::Api {
                        provider,
                        config,
                        all: options.all,
                    };
                    answer_api(&api, request);
                }
            }
        });
        let mut checked = std::time::Instant::now();
        loop {
            // Checked once a second even while requests keep coming.
            if checked.elapsed() >= std::time::Duration::from_secs(1) {
                checked = std::time::Instant::now();
                if let Some(why) = reason_to_stop(provider.workdir(), parent) {
                    sayln!("ckpt ui: stopping: {why}");
                    // Its channel closes with this return: the session-log thread ends after
                    // the request it is answering, if any.
                    return Ok(Exit::Ok);
                }
            }
            let request = match requests.recv_timeout(std::time::Duration::from_secs(1)) {
                Ok(request) => request,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(listen_error(std::io::Error::other("the accepting thread ended")))
                }
            };
            let path = request.head.path().to_owned();
            match (request.head.method.as_str(), path.as_str()) {
                ("GET", "/") => respond_text(request, "text/html; charset=utf-8", page(&token)),
                ("GET", "/assets/page.js") => {
                    respond_text(request, "text/javascript; charset=utf-8", SCRIPT.to_owned())
                }
                ("GET", "/assets/page.css") => respond_text(request, "text/css; charset=utf-8", STYLE.to_owned()),
                ("GET" | "POST", route) if reads_session_logs(route) => {
                    if let Err(unsent) = to_logs.send(request) {
                        answer_api(&api, unsent.0);
                    }
                }
                _ => answer_api(&api, request),
            }
        }
    })
}

/// Answers an API request (or says there is no such page).
fn answer_api(api: &api::Api<'_>, request: Request) {
    let url = request.head.url.clone();
    let path = request.head.path().to_owned();
    match (request.head.method.as_str(), path.as_str()) {
        ("GET", route) if route.starts_with("/api/") => {
            let answer = api.get(route, &url);
            respond_json(request, answer);
        }
        ("POST", route) if route.starts_with("/api/") => {
            let answer = match parse_body(&request) {
                Ok(body) => api.post(route, &body),
                Err(answer) => answer,
            };
            respond_json(request, answer);
        }
        ("GET" | "POST", _) => respond_json(request, Answer::error(404, "not_found", "no such page")),
        _ => respond_json(request, Answer::error(405, "usage", "only GET and POST are answered")),
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
