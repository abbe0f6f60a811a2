//! The web view's JSON API: each route runs the CLI command it mirrors with an output that keeps
//! its v1 records instead of printing them (list, diff, status, prune --dry-run, preview,
//! restore), so the page sees exactly what `ckpt --json` prints. The one route of its own,
//! `/api/file`, renders one file's line diff for the page (`diff.lines`). `/api/trace` and
//! `/api/trace-diff` are `list --trace` and `trace diff NODE` (read-only); `/api/trace-preview`
//! and `/api/trace-restore` are `trace restore NODE --dry-run` and `--yes`. Both restores need
//! `"confirm": true` in a POST body; nothing here writes by any other path.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::super::args::{RestoreArgs, TargetArgs};
use super::super::checkpoints::{list, resolve};
use super::super::exit::Exit;
use super::super::inspect::{diff, status, DiffRequest};
use super::super::output::{DiffView, Output};
use super::super::restore::{preview, restore};
use super::super::retention::prune;
use super::super::trace::{timeline, trace_diff, trace_restore, GuardSettings, LogSource, RestoreHow};
use super::super::{retention_policy, DEFAULT_MAX_FILE_SIZE};
use super::{query_param, Answer};
use crate::provider::{CkptError, Provider};
use crate::records::config::Config;
use crate::records::WirePath;

/// A side of a file larger than this is summarised, not shown line by line.
const MAX_SHOWN_BYTES: usize = 1024 * 1024;
/// More lines than this on a side and the file is summarised too.
const MAX_SHOWN_LINES: usize = 20_000;

pub(super) struct Api<'a> {
    pub provider: &'a dyn Provider,
    pub config: &'a Config,
    pub all: bool,
}

fn failure(error: &CkptError) -> Answer {
    let status = match error.code() {
        "not_found" => 404,
        "ambiguous" | "invalid_input" | "usage" => 400,
        "refused" => 409,
        _ => 500,
    };
    Answer::error(status, error.code(), &error.to_string())
}

/// Runs one CLI command with a collecting output: its records, and the exit code it chose.
fn collect(run: impl FnOnce(&Output) -> Result<Exit, CkptError>) -> Answer {
    let out = Output::collecting();
    match run(&out) {
        Ok(exit) => Answer::ok(json!({"exit": exit.code(), "records": out.take_records()})),
        Err(error) => failure(&error),
    }
}

/// The page names paths the way the contract does: a string, or `{"bytes_b64"}`.
fn paths_of(body: &Value) -> Result<Vec<PathBuf>, Answer> {
    let Some(list) = body.get("paths") else {
        return Ok(Vec::new());
    };
    let wire: Vec<WirePath> =
        serde_json::from_value(list.clone()).map_err(|e| Answer::error(400, "usage", &format!("paths: {e}")))?;
    wire.iter()
        .map(|p| {
            p.to_repo_path()
                .map(|path| PathBuf::from(std::ffi::OsStr::from_bytes(path.as_bytes())))
                .map_err(|e| Answer::error(400, "invalid_input", &format!("path: {e}")))
        })
        .collect()
}

fn text_field<'b>(body: &'b Value, name: &str) -> Result<&'b str, Answer> {
    body.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Answer::error(400, "usage", &format!("the body needs a string \"{name}\"")))
}

/// The text of one side for the page: lossy where it is not UTF-8 (it is only ever shown as text).
fn lines_of(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes).lines().map(str::to_owned).collect()
}

impl Api<'_> {
    fn max_file_size(&self) -> u64 {
        self.config.max_file_size.unwrap_or(DEFAULT_MAX_FILE_SIZE)
    }

    fn restore_args(&self, body: &Value) -> Result<RestoreArgs, Answer> {
        Ok(RestoreArgs {
            target: TargetArgs {
                target: text_field(body, "id")?.to_owned(),
                session: None,
            },
            exact: match body.get("exact") {
                None => false,
                Some(Value::Bool(exact)) => *exact,
                Some(_) => return Err(Answer::error(400, "usage", "\"exact\" must be true or false")),
            },
            max_file_size: None,
            paths: paths_of(body)?,
        })
    }

    pub fn get(&self, route: &str, url: &str) -> Answer {
        let provider = self.provider;
        match route {
            "/api/checkpoints" => {
                let mut answer = collect(|out| list(provider, None, self.all, out));
                if let Some(body) = answer.body.as_object_mut() {
                    body.insert("workspace".into(), json!(provider.workdir().display().to_string()));
                    body.insert("provider".into(), json!(provider.name()));
                }
                answer
            }
            "/api/diff" => {
                let Some(from) = query_param(url, "from") else {
                    return Answer::error(400, "usage", "from= is required");
                };
                let to = query_param(url, "to").filter(|t| t != "worktree");
                collect(|out| {
                    let request = DiffRequest {
                        from: &from,
                        to: to.as_deref(),
                        session: None,
                        view: DiffView::Stat,
                        max_file_size: self.max_file_size(),
                        paths: &[],
                    };
                    diff(provider, provider.workdir(), &request, out)
                })
            }
            "/api/file" => self.file_lines(url),
            "/api/trace" => {
                collect(|out| timeline(provider, provider.workdir(), None, self.all, LogSource::default(), out))
            }
            "/api/trace-diff" => {
                let Some(node) = query_param(url, "node") else {
                    return Answer::error(400, "usage", "node= is required");
                };
                collect(|out| {
                    trace_diff(
                        provider,
                        provider.workdir(),
                        &node,
                        None,
                        &None,
                        LogSource::default(),
                        out,
                    )
                })
            }
            "/api/status" => {
                let status = collect(|out| status(provider, self.max_file_size(), self.config, out));
                if status.status != 200 {
                    return status;
                }
                let pruned = collect(|out| prune(provider, &retention_policy(self.config), true, out));
                Answer::ok(json!({"status": status.body["records"], "prune": pruned.body["records"]}))
            }
            _ => Answer::error(404, "not_found", "no such API route"),
        }
    }

    pub fn post(&self, route: &str, body: &Value) -> Answer {
        let provider = self.provider;
        let workdir = provider.workdir();
        let confirmed = body.get("confirm") == Some(&Value::Bool(true));
        let watch = self.config.watch != Some(false);
        if let Some(how) = match route {
            "/api/trace-preview" => Some(RestoreHow::DryRun),
            "/api/trace-restore" => Some(RestoreHow::Confirmed),
            _ => None,
        } {
            if how == RestoreHow::Confirmed && !confirmed {
                return Answer::error(
                    409,
                    "refused",
                    "a trace restore needs \"confirm\": true (the page asks first); nothing was changed",
                );
            }
            let node = match text_field(body, "node") {
                Ok(node) => node.to_owned(),
                Err(answer) => return answer,
            };
            let paths = match paths_of(body) {
                Ok(paths) => paths,
                Err(answer) => return answer,
            };
            let guard = GuardSettings {
                max_file_size: self.max_file_size(),
                watch,
            };
            return collect(|out| {
                trace_restore(provider, workdir, &node, &paths, how, LogSource::default(), &guard, out)
            });
        }
        let args = match self.restore_args(body) {
            Ok(args) => args,
            Err(answer) => return answer,
        };
        match route {
            "/api/preview" => collect(|out| preview(provider, workdir, &args, self.max_file_size(), out)),
            "/api/restore" => {
                if !confirmed {
                    return Answer::error(
                        409,
                        "refused",
                        "a restore needs \"confirm\": true (the page asks first); nothing was changed",
                    );
                }
                collect(|out| restore(provider, workdir, &args, true, self.max_file_size(), watch, out))
            }
            _ => Answer::error(404, "not_found", "no such API route"),
        }
    }

    /// One file's lines between two checkpoints (or a checkpoint and the worktree).
    fn file_lines(&self, url: &str) -> Answer {
        let provider = self.provider;
        let (Some(from), Some(path)) = (query_param(url, "from"), query_param(url, "path")) else {
            return Answer::error(400, "usage", "from= and path= are required");
        };
        let wire: WirePath = match serde_json::from_str(&path) {
            Ok(wire) => wire,
            Err(e) => return Answer::error(400, "usage", &format!("path= must be a JSON path: {e}")),
        };
        let path = match wire.to_repo_path() {
            Ok(path) => path,
            Err(e) => return Answer::error(400, "invalid_input", &format!("path: {e}")),
        };
        let target = |text: &str| TargetArgs {
            target: text.to_owned(),
            session: None,
        };
        let to = query_param(url, "to").filter(|t| t != "worktree");
        let result = (|| {
            let from = resolve(provider, &target(&from))?;
            let to = to.as_deref().map(|t| resolve(provider, &target(t))).transpose()?;
            provider.diff(&from, to.as_ref(), std::slice::from_ref(&path), self.max_file_size())
        })();
        let files = match result {
            Ok(files) => files,
            Err(error) => return failure(&error),
        };
        let Some(file) = files.into_iter().find(|f| f.change.path == path) else {
            return Answer::error(404, "not_found", "the file does not differ between these two points");
        };
        let size = |side: &Option<Vec<u8>>| side.as_ref().map(Vec::len);
        let too_large = [&file.old, &file.new].iter().any(|side| {
            side.as_ref()
                .is_some_and(|b| b.len() > MAX_SHOWN_BYTES || b.split(|c| *c == b'\n').count() > MAX_SHOWN_LINES)
        });
        let mut lines = Vec::new();
        if !file.binary && !too_large {
            let old = lines_of(file.old.as_deref().unwrap_or_default());
            let new = lines_of(file.new.as_deref().unwrap_or_default());
            let old_refs: Vec<&str> = old.iter().map(String::as_str).collect();
            let new_refs: Vec<&str> = new.iter().map(String::as_str).collect();
            let ops = similar::capture_diff_slices(similar::Algorithm::Myers, &old_refs, &new_refs);
            for op in ops {
                for change in op.iter_changes(&old_refs, &new_refs) {
                    let sign = match change.tag() {
                        similar::ChangeTag::Equal => " ",
                        similar::ChangeTag::Delete => "-",
                        similar::ChangeTag::Insert => "+",
                    };
                    lines.push(json!([
                        sign,
                        change.old_index().map(|i| i + 1),
                        change.new_index().map(|i| i + 1),
                        change.value()
                    ]));
                }
            }
        }
        Answer::ok(json!({
            "v": 1,
            "type": "diff.lines",
            "path": WirePath::from_repo_path(&file.change.path),
            "status": file.change.status.letter(),
            "binary": file.binary,
            "too_large": too_large,
            "old_size": size(&file.old),
            "new_size": size(&file.new),
            "old_mode": super::super::wire::mode(file.change.old.map(|i| i.kind)),
            "new_mode": super::super::wire::mode(file.change.new.map(|i| i.kind)),
            "added": file.added,
            "removed": file.removed,
            "lines": lines,
        }))
    }
}
