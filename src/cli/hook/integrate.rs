//! `ckpt integrate <agent>`: adds ckpt's hook entries to an agent's settings file, or removes
//! them, merged with everything already there (other hooks, other settings, key order), by
//! splicing text (`jsonedit.rs`): every byte it need not change stays as written. It shows
//! the change as a diff first, asks (or takes `--yes`), keeps a backup of the old file, and
//! writes the new one atomically. It writes nothing but that settings file, its backup, Claude
//! Code's `/ckpt` command, and in a repository the records in `info/exclude` that keep the files
//! it created out of `git status`; and never a file it cannot parse.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::agents::{Agent, AgentSpec, TimeoutUnit};
use super::jsonedit::{self, Doc};
use crate::cli::args::Cli;
use crate::cli::exit::Exit;
use crate::cli::output::{shell_word, Output};
use crate::cli::wire::IntegrateRecord;
use crate::provider::CkptError;
use crate::records::WirePath;

/// A settings file larger than this is not a settings file.
const MAX_SETTINGS_BYTES: u64 = 16 << 20;
/// How long an agent lets ckpt's hook run: a first snapshot of a large repository reads every
/// file. (Claude Code and Codex default to 600 s, Gemini CLI to 60 s.)
const HOOK_TIMEOUT_SECONDS: u64 = 120;

/// What `ckpt integrate` was asked to do.
pub struct Request {
    pub agent: Agent,
    /// The user's settings instead of the project's.
    pub user: bool,
    pub remove: bool,
    pub fail_closed: bool,
    pub dry_run: bool,
    pub yes: bool,
}

pub fn run(cli: &Cli, request: &Request, out: &Output) -> Result<Exit, CkptError> {
    let spec = request.agent.spec();
    let (named, project, file) = target_file(spec, request, cli)?;
    let exe = this_executable()?;
    let change = plan_change(spec, request, &named, project.as_deref(), &file, &exe)?;
    if !request.remove {
        note_hooks_elsewhere(spec, request, cli, &named);
    }
    let record = |written: bool, backup: Option<&Path>, command_file: Option<WirePath>, diff: &str| {
        out.record(&IntegrateRecord {
            agent: spec.name,
            file: wire_path(&file),
            action: change.action,
            written,
            backup: backup.map(wire_path),
            command_file,
            diff,
        })
    };
    if change.merged.is_none() && change.slash.is_none() {
        record(false, None, None, "");
        out.human(&format!(
            "{}: {} already {} ckpt's hooks; nothing to change",
            spec.product,
            file.display(),
            if request.remove { "lacks" } else { "has" }
        ));
        return Ok(Exit::Ok);
    }
    let diff = change.diff(&file);
    out.human(diff.trim_end());
    let command_file = change.slash.as_ref().map(|c| wire_path(&c.file));
    if request.dry_run {
        record(false, None, command_file, &diff);
        out.human("(dry run: nothing was written)");
        return Ok(Exit::Ok);
    }
    let confirmed = request.yes
        || (std::io::stdin().is_terminal()
            && std::io::stderr().is_terminal()
            && crate::cli::ask_yes(&format!("Write {}?", file.display())));
    if !confirmed {
        return Err(CkptError::Refused(format!(
            "changing {} needs confirmation: pass --yes (or --dry-run to only see the change); nothing was written",
            file.display()
        )));
    }
    let backup = change.write(&file, request.remove)?;
    record(true, backup.as_deref(), command_file, &diff);
    match &backup {
        Some(backup) => out.human(&format!(
            "{}: wrote {} (the old one is kept as {})",
            spec.product,
            file.display(),
            backup.display()
        )),
        None if change.merged.is_some() => out.human(&format!("{}: wrote {}", spec.product, file.display())),
        None => {}
    }
    if let Some(slash) = &change.slash {
        let done = if slash.after.is_some() { "wrote" } else { "removed" };
        out.human(&format!(
            "{}: {done} the /ckpt command ({})",
            spec.product,
            slash.file.display()
        ));
    }
    if let Some(plan) = change.exclude.as_ref().filter(|e| e.changes() && !request.remove) {
        out.human(&format!(
            "ckpt: {} keeps the files ckpt created out of `git status` (this clone only; `--remove` takes its lines out)",
            plan.file.display()
        ));
    }
    if !request.remove {
        out.human(&after_note(spec, request.user));
    }
    Ok(Exit::Ok)
}

/// The settings file `integrate` edits: the name the agent reads (`named`), the project root
/// when it is a project's, and the file written (`named`, or where a user's link points: a
/// settings file linked from a dotfiles repository is edited where it lives). A project's files
/// are the repository's: a link there (a cloned repository can hold one) must not send ckpt's
/// writes anywhere else, and is refused.
fn target_file(
    spec: &AgentSpec,
    request: &Request,
    cli: &Cli,
) -> Result<(PathBuf, Option<PathBuf>, PathBuf), CkptError> {
    let (named, project) = settings_file(spec, request.user, cli)?;
    if let Some(root) = &project {
        refuse_links_below(root, &named)?;
        if spec.name == "claude" {
            if let Some(dir) = named.parent() {
                refuse_links_below(root, &dir.join("commands").join("ckpt.md"))?;
            }
        }
    }
    let file = match std::fs::symlink_metadata(&named) {
        Ok(meta) if meta.file_type().is_symlink() => named.canonicalize().map_err(|source| CkptError::Io {
            path: named.clone(),
            source,
        })?,
        _ => named.clone(),
    };
    Ok((named, project, file))
}

/// Everything `integrate` would change, worked out before anything is written.
struct SettingsChange {
    /// The settings file as it was read.
    before: Option<String>,
    /// What it becomes (`None`: unchanged).
    merged: Option<String>,
    /// `added`, `updated`, `removed` or `unchanged`, for the record.
    action: &'static str,
    /// Claude Code's `/ckpt` command, when it changes.
    slash: Option<SlashCommandChange>,
    /// The project's exclude file, when the settings are a project's.
    exclude: Option<ExcludePlan>,
}

fn plan_change(
    spec: &AgentSpec,
    request: &Request,
    named: &Path,
    project: Option<&Path>,
    file: &Path,
    exe: &str,
) -> Result<SettingsChange, CkptError> {
    let before = read_settings(file)?;
    let command = hook_command(exe, spec, request.fail_closed);
    let merged = if request.remove {
        without_ckpt_hooks(spec, before.as_deref())
    } else {
        with_ckpt_hooks(spec, before.as_deref(), &command)
    }
    .map_err(|why| {
        CkptError::Refused(format!(
            "{} is not a settings file ckpt can merge into ({why}); nothing was written. Fix it, or add the hooks by hand (docs/agents.md)",
            file.display()
        ))
    })?;
    let left_empty =
        |text: &str| serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}')).is_ok_and(|v| v == json!({}));
    let merged = match merged {
        Some(text) if request.remove && left_empty(&text) => Some(blank_original(file).unwrap_or(text)),
        merged => merged,
    };
    let action = match (&merged, request.remove, before.is_some()) {
        (None, _, _) => "unchanged",
        (Some(_), true, _) => "removed",
        (Some(_), false, true) if before.as_deref().is_some_and(|b| has_ckpt_hooks(spec, b)) => "updated",
        (Some(_), false, _) => "added",
    };
    let slash = slash_command_change(spec, named, exe, request.remove)?.filter(|c| c.before != c.after);
    let exclude = match project {
        Some(root) => plan_exclude(
            root,
            file,
            before.as_deref(),
            merged.as_deref(),
            slash.as_ref(),
            request.remove,
        )?,
        None => None,
    };
    Ok(SettingsChange {
        before,
        merged,
        action,
        slash,
        exclude,
    })
}

/// Says so when the other settings file (the user's, for a project's; the project's, for the
/// user's) has ckpt's hooks too: each tool call would then run ckpt twice.
fn note_hooks_elsewhere(spec: &AgentSpec, request: &Request, cli: &Cli, named: &Path) {
    let other = settings_file(spec, !request.user, cli)
        .ok()
        .map(|(other, _)| other)
        .filter(|other| other != named);
    if let Some(other) = other.filter(|o| {
        read_settings(o)
            .ok()
            .flatten()
            .is_some_and(|t| has_ckpt_hooks(spec, &t))
    }) {
        sayln!(
            "ckpt: note: {} has ckpt's hooks too: each tool call would run ckpt twice ({} then counts it as {}). `ckpt integrate {} {} --remove` takes them out there",
            other.display(),
            spec.product,
            if spec.call_id_field.is_some() { "one step" } else { "two steps" },
            spec.name,
            if request.user { "--project" } else { "--user" }
        );
    }
}

impl SettingsChange {
    /// Removing, the settings file is ckpt's own and holds nothing else: it goes.
    fn deletes_settings(&self) -> bool {
        self.exclude.as_ref().is_some_and(|e| e.delete_settings)
    }

    /// The change as unified diffs: the settings file, the `/ckpt` command, the exclude file.
    fn diff(&self, file: &Path) -> String {
        let mut diff = match &self.merged {
            Some(_) if self.deletes_settings() => unified_diff(self.before.as_deref().unwrap_or(""), "", file),
            Some(after) => unified_diff(self.before.as_deref().unwrap_or(""), after, file),
            None => String::new(),
        };
        if let Some(change) = &self.slash {
            diff.push_str(&unified_diff(
                change.before.as_deref().unwrap_or(""),
                change.after.as_deref().unwrap_or(""),
                &change.file,
            ));
        }
        if let Some(plan) = self.exclude.as_ref().filter(|e| e.changes()) {
            diff.push_str(&unified_diff(
                plan.before.as_deref().unwrap_or(""),
                plan.after.as_deref().unwrap_or(""),
                &plan.file,
            ));
        }
        diff
    }

    /// Writes the change, unless the agent rewrote its settings (or the `/ckpt` command) while
    /// the question was open (a permission the user approved, say): that is never overwritten.
    /// The old settings are kept as a backup, whose path is returned.
    fn write(&self, file: &Path, remove: bool) -> Result<Option<PathBuf>, CkptError> {
        let slash_changed = match &self.slash {
            Some(change) => read_settings(&change.file)? != change.before,
            None => false,
        };
        if read_settings(file)? != self.before || slash_changed {
            return Err(CkptError::Refused(format!(
                "{} (or its /ckpt command) changed while ckpt waited for your answer; nothing was written. Run ckpt integrate again",
                file.display()
            )));
        }
        if let Some(plan) = self.exclude.as_ref().filter(|_| !remove) {
            plan.write_added()?;
        }
        let mut backup = None;
        if let Some(after) = &self.merged {
            if let Some(old) = &self.before {
                backup = Some(write_backup(file, old)?);
            }
            if self.deletes_settings() {
                std::fs::remove_file(file).map_err(|source| CkptError::Io {
                    path: file.to_path_buf(),
                    source,
                })?;
            } else {
                write_settings(file, after)?;
            }
        }
        if let Some(change) = &self.slash {
            // ckpt's /ckpt as someone edited it, or as an older ckpt wrote it: kept as a backup.
            if let Some(old) = &change.before {
                write_backup(&change.file, old)?;
            }
            match &change.after {
                Some(text) => write_settings(&change.file, text)?,
                None => std::fs::remove_file(&change.file).map_err(|source| CkptError::Io {
                    path: change.file.clone(),
                    source,
                })?,
            }
        }
        if let Some(plan) = self.exclude.as_ref().filter(|_| remove) {
            plan.write_removed()?;
        }
        Ok(backup)
    }
}

/// The first line of the `/ckpt` command file ckpt writes: what marks it as ckpt's to replace or
/// remove (a `/ckpt` command of the user's own is never touched).
const SLASH_COMMAND_MARKER: &str =
    "<!-- written by `ckpt integrate claude`; `ckpt integrate claude --remove` deletes it -->";

/// A change to Claude Code's `/ckpt` custom command file (`commands/ckpt.md` beside the
/// settings): `None` content is no file.
struct SlashCommandChange {
    file: PathBuf,
    before: Option<String>,
    after: Option<String>,
}

/// Claude Code's `/ckpt` command: beside the settings ckpt edits, written when it is absent or
/// ckpt's own, removed with the hooks; `None` for agents without ckpt's command, and when a
/// `/ckpt` of the user's own is there (it is kept, and said).
fn slash_command_change(
    spec: &AgentSpec,
    settings: &Path,
    exe: &str,
    remove: bool,
) -> Result<Option<SlashCommandChange>, CkptError> {
    if spec.name != "claude" {
        return Ok(None);
    }
    let Some(dir) = settings.parent() else {
        return Ok(None);
    };
    let file = dir.join("commands").join("ckpt.md");
    let before = read_settings(&file)?;
    let ours = before.as_deref().is_none_or(|text| text.contains(SLASH_COMMAND_MARKER));
    if !ours {
        if !remove {
            sayln!(
                "ckpt: note: {} is a /ckpt command of your own; it is kept, and ckpt's is not installed",
                file.display()
            );
        }
        return Ok(None);
    }
    let after = (!remove).then(|| slash_command_text(exe));
    Ok(Some(SlashCommandChange { file, before, after }))
}

/// The `/ckpt` command: lists this session's checkpoints into the prompt (Claude Code fills in
/// `${CLAUDE_SESSION_ID}` and runs the `!` line before the model sees it), then has the model
/// preview, and restore only what the user names after the user says yes.
fn slash_command_text(exe: &str) -> String {
    let ckpt = shell_word(exe);
    format!(
        r#"---
description: ckpt's checkpoints of this session; preview, and restore files after you confirm
argument-hint: "[turn:T | turn:T.S | checkpoint id] [-- paths]"
allowed-tools: Bash({ckpt} list:*)
---
{SLASH_COMMAND_MARKER}
ckpt took a checkpoint before each file change and shell command of this session
(`{ckpt} list --session ${{CLAUDE_SESSION_ID}}`):

!`{ckpt} list --session ${{CLAUDE_SESSION_ID}}`

The user asks for: $ARGUMENTS

- No checkpoint named: show the list above, say what each turn.step was about to run, and ask
  which point to go back to. Change nothing.
- A checkpoint named (`turn:T`, `turn:T.S` or an id): run
  `{ckpt} preview <it> --session ${{CLAUDE_SESSION_ID}} [-- paths]` and show exactly what a
  restore would overwrite, delete or leave. Then ask the user to confirm. Only after an explicit
  yes, run `{ckpt} restore <it> --session ${{CLAUDE_SESSION_ID}} --yes [-- paths]` and report
  its guard checkpoint: `{ckpt} restore <guard id> --exact --yes` undoes the restore.
- Never restore without that yes, and never with `--exact` unless the user asked for it.
"#
    )
}

/// A file or directory ckpt creates in a project. Each is recorded in the repository's own
/// exclude file (`info/exclude` in the common git directory: per clone, never committed or
/// shared, and neither config nor a hook): a file with a line that keeps it out of `git status`
/// (so a later `git add -A` cannot commit ckpt's files, which name this machine's ckpt, for the
/// whole team), a directory with a comment only, so `--remove` takes out a directory only when
/// ckpt made it.
struct Created {
    path: PathBuf,
    /// The path below the project's top, `/`-separated.
    rel: String,
    dir: bool,
}

impl Created {
    fn new(root: &Path, path: &Path, dir: bool) -> Option<Created> {
        let below = path.strip_prefix(root).ok()?;
        let parts: Option<Vec<&str>> = below.components().map(|c| c.as_os_str().to_str()).collect();
        let rel = parts?.join("/");
        Some(Created {
            path: path.to_path_buf(),
            rel,
            dir,
        })
    }

    /// The exclude file's lines for it. The comment names the worktree (all worktrees of a
    /// repository share one exclude file), so each one's record is its own.
    fn lines(&self, root: &Path) -> Vec<String> {
        let slash = if self.dir { "/" } else { "" };
        let marker = format!(
            "# ckpt integrate created {}{slash} in {:?}; `ckpt integrate --remove` takes this out",
            self.rel,
            root.to_string_lossy()
        );
        match self.dir {
            true => vec![marker],
            false => vec![marker, format!("/{}", self.rel)],
        }
    }
}

/// What `ckpt integrate` changes in a project's exclude file: the records of what it creates,
/// or (`--remove`) of what it created and takes out again.
struct ExcludePlan {
    file: PathBuf,
    root: PathBuf,
    before: Option<String>,
    /// What the exclude file would hold after (the diff shown; each write reads it afresh).
    after: Option<String>,
    /// Adding: what ckpt is about to create. Removing: what this worktree's records name.
    created: Vec<Created>,
    /// Removing: the settings file is ckpt's own and holds nothing else, so it goes.
    delete_settings: bool,
}

/// Where the records go: the exclude file of the repository `root` is in (`None` outside a
/// repository), and the link on its way, if any: ckpt never writes through one (a repository's
/// `info` could point anywhere).
fn exclude_file(root: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    let info = crate::verbs::enclosing_common_dir(root)?.join("info");
    let link = [info.clone(), info.join("exclude")]
        .into_iter()
        .find(|path| std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()));
    Some((info.join("exclude"), link))
}

/// The directories between `root` and `file` that do not exist yet, outermost first.
fn missing_dirs(root: &Path, file: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = file
        .ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(root) && dir.as_os_str() != root.as_os_str())
        .filter(|dir| std::fs::symlink_metadata(dir).is_err())
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

fn plan_exclude(
    root: &Path,
    settings: &Path,
    settings_before: Option<&str>,
    merged: Option<&str>,
    slash: Option<&SlashCommandChange>,
    remove: bool,
) -> Result<Option<ExcludePlan>, CkptError> {
    let Some((file, link)) = exclude_file(root) else {
        return Ok(None);
    };
    let before = read_settings(&file)?;
    let text = before.as_deref().unwrap_or("");
    let mut created = Vec::new();
    let mut delete_settings = false;
    let after = if !remove {
        let mut files = Vec::new();
        if settings_before.is_none() && merged.is_some() {
            files.push(settings.to_path_buf());
        }
        if let Some(change) = slash.filter(|c| c.before.is_none() && c.after.is_some()) {
            files.push(change.file.clone());
        }
        for path in files {
            for dir in missing_dirs(root, &path) {
                if !created.iter().any(|c: &Created| c.path == dir) {
                    created.extend(Created::new(root, &dir, true));
                }
            }
            created.extend(Created::new(root, &path, false));
        }
        created
            .iter()
            .fold(text.to_owned(), |text, c| add_lines(&text, &c.lines(root)))
    } else {
        let mut candidates: Vec<Created> = Vec::new();
        let mut files = vec![settings.to_path_buf()];
        files.extend(slash.map(|c| c.file.clone()));
        for path in files {
            for dir in path
                .ancestors()
                .skip(1)
                .take_while(|d| d.starts_with(root) && d.as_os_str() != root.as_os_str())
            {
                if !candidates.iter().any(|c| c.path == dir) {
                    candidates.extend(Created::new(root, dir, true));
                }
            }
            candidates.extend(Created::new(root, &path, false));
        }
        created = candidates
            .into_iter()
            .filter(|c| has_lines(text, &c.lines(root)))
            .collect();
        // ckpt's own settings file, left holding nothing: it goes, as it came.
        delete_settings = created.iter().any(|c| c.path == settings)
            && merged.is_some_and(|m| {
                m.trim().is_empty()
                    || serde_json::from_str::<Value>(m.trim_start_matches('\u{feff}')).is_ok_and(|v| v == json!({}))
            });
        let mut gone: Vec<PathBuf> = Vec::new();
        if delete_settings {
            gone.push(settings.to_path_buf());
        }
        gone.extend(slash.filter(|c| c.after.is_none()).map(|c| c.file.clone()));
        // Deepest first: a directory goes once everything in it went.
        let mut dirs: Vec<&Created> = created.iter().filter(|c| c.dir).collect();
        dirs.sort_by_key(|c| std::cmp::Reverse(c.path.components().count()));
        for dir in dirs {
            let empty_after = std::fs::read_dir(&dir.path)
                .map(|entries| entries.flatten().all(|e| gone.contains(&e.path())))
                .unwrap_or(true);
            if empty_after {
                gone.push(dir.path.clone());
            }
        }
        created.iter().fold(text.to_owned(), |text, c| {
            let stays = c.path.exists() && !gone.contains(&c.path);
            match stays {
                true => text,
                false => remove_lines(&text, &c.lines(root)),
            }
        })
    };
    let after = match (after.is_empty(), text.is_empty()) {
        (true, true) => before.clone(),
        // Only ckpt's lines were left: the file goes (no file and an empty one exclude the same).
        (true, false) => None,
        (false, _) => Some(after),
    };
    if let Some(link) = link.filter(|_| after != before) {
        return Err(CkptError::Refused(format!(
            "{} is a symbolic link; ckpt keeps the files it creates out of `git status` in {} and writes it only where it is. Nothing was written",
            link.display(),
            file.display()
        )));
    }
    Ok(Some(ExcludePlan {
        file,
        root: root.to_path_buf(),
        before,
        after,
        created,
        delete_settings,
    }))
}

impl ExcludePlan {
    fn changes(&self) -> bool {
        self.before != self.after
    }

    /// Before ckpt creates its files: their records, so no `git status` ever shows them.
    fn write_added(&self) -> Result<(), CkptError> {
        let text = read_settings(&self.file)?.unwrap_or_default();
        let after = self
            .created
            .iter()
            .fold(text.clone(), |t, c| add_lines(&t, &c.lines(&self.root)));
        if after != text {
            write_settings(&self.file, &after)?;
        }
        Ok(())
    }

    /// After ckpt took its files out: the directories it made that are empty now go, and the
    /// records of everything that is gone.
    fn write_removed(&self) -> Result<(), CkptError> {
        let mut dirs: Vec<&Created> = self.created.iter().filter(|c| c.dir).collect();
        dirs.sort_by_key(|c| std::cmp::Reverse(c.path.components().count()));
        for dir in dirs {
            // Not empty (someone put a file there): it stays, and so does its record.
            let _ = std::fs::remove_dir(&dir.path);
        }
        let Some(text) = read_settings(&self.file)? else {
            return Ok(());
        };
        let after = self.created.iter().fold(text.clone(), |t, c| match c.path.exists() {
            true => t,
            false => remove_lines(&t, &c.lines(&self.root)),
        });
        if after == text {
            return Ok(());
        }
        if after.is_empty() {
            // ckpt's lines were all it held (it made the file): no file and an empty one
            // exclude the same.
            return std::fs::remove_file(&self.file).map_err(|source| CkptError::Io {
                path: self.file.clone(),
                source,
            });
        }
        write_settings(&self.file, &after)
    }
}

/// Whether `text` holds `lines`, one after another, as whole lines.
fn has_lines(text: &str, lines: &[String]) -> bool {
    find_lines(text, lines).is_some()
}

fn find_lines(text: &str, lines: &[String]) -> Option<usize> {
    let pieces: Vec<&str> = text.split_inclusive('\n').collect();
    (0..pieces.len()).find(|&at| {
        lines.iter().enumerate().all(|(n, line)| {
            pieces
                .get(at + n)
                .is_some_and(|piece| piece.trim_end_matches(['\n', '\r']) == line)
        })
    })
}

/// `text` with `lines` at its end (unless already there), keeping whether it ends in a line
/// end: the exact inverse of [`remove_lines`].
fn add_lines(text: &str, lines: &[String]) -> String {
    let mut out = text.to_owned();
    if has_lines(text, lines) {
        return out;
    }
    for line in lines {
        if out.is_empty() || out.ends_with('\n') {
            out.push_str(line);
            out.push('\n');
        } else {
            out.push('\n');
            out.push_str(line);
        }
    }
    out
}

/// `text` without `lines` (where they stand one after another).
fn remove_lines(text: &str, lines: &[String]) -> String {
    let Some(at) = find_lines(text, lines) else {
        return text.to_owned();
    };
    let pieces: Vec<&str> = text.split_inclusive('\n').collect();
    let last = at + lines.len() == pieces.len();
    let unterminated = last && pieces.last().is_some_and(|p| !p.ends_with('\n'));
    let mut out: String = pieces[..at].concat();
    out.push_str(&pieces[at + lines.len()..].concat());
    // They were added to a file that did not end in a line end: its last line gave one up.
    if unterminated && out.ends_with('\n') {
        out.pop();
    }
    out
}

fn wire_path(path: &Path) -> WirePath {
    WirePath::from_bytes(path.as_os_str().as_encoded_bytes())
}

/// What a user must know once the hooks are in.
fn after_note(spec: &AgentSpec, user: bool) -> String {
    let trust = match (spec.name, user) {
        ("gemini", false) => " Gemini CLI runs a project's hooks only in a trusted folder.",
        ("codex", _) => " Codex runs a hook only once it is trusted: review it in Codex's /hooks.",
        _ => "",
    };
    format!(
        "{} now takes a checkpoint before each of {} (`ckpt list --session <its session id>`).{trust}",
        spec.product,
        spec.mutating_tools.join(", ")
    )
}

/// Refuses `path` when it, or a directory between `root` and it, is a symbolic link.
fn refuse_links_below(root: &Path, path: &Path) -> Result<(), CkptError> {
    let Ok(below) = path.strip_prefix(root) else {
        return Ok(());
    };
    let mut at = root.to_path_buf();
    for component in below.components() {
        at.push(component);
        if std::fs::symlink_metadata(&at).is_ok_and(|meta| meta.file_type().is_symlink()) {
            return Err(CkptError::Refused(format!(
                "{} is a symbolic link inside the project; ckpt writes a project's settings only where they are, never through a link. Nothing was written",
                at.display()
            )));
        }
    }
    Ok(())
}

/// The settings file `ckpt integrate` edits for `spec`'s agent, and for project settings the
/// project's top directory.
fn settings_file(spec: &AgentSpec, user: bool, cli: &Cli) -> Result<(PathBuf, Option<PathBuf>), CkptError> {
    let env_dir = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = || {
        env_dir("HOME").ok_or_else(|| CkptError::InvalidInput("$HOME is not set: cannot find the user settings".into()))
    };
    if user {
        let file = match spec.name {
            "claude" => env_dir("CLAUDE_CONFIG_DIR")
                .map(Ok)
                .unwrap_or_else(|| home().map(|h| h.join(".claude")))?
                .join("settings.json"),
            "codex" => env_dir("CODEX_HOME")
                .map(Ok)
                .unwrap_or_else(|| home().map(|h| h.join(".codex")))?
                .join("hooks.json"),
            _ => env_dir("GEMINI_CLI_HOME")
                .map(Ok)
                .unwrap_or_else(home)?
                .join(".gemini")
                .join("settings.json"),
        };
        return Ok((file, None));
    }
    let cwd = crate::cli::working_dir(cli)?;
    let root = crate::verbs::enclosing_worktree(&cwd).unwrap_or(cwd);
    let file = match spec.name {
        // The personal project file: not the one a team shares in git.
        "claude" => root.join(".claude").join("settings.local.json"),
        "codex" => root.join(".codex").join("hooks.json"),
        _ => root.join(".gemini").join("settings.json"),
    };
    Ok((file, Some(root)))
}

fn read_settings(file: &Path) -> Result<Option<String>, CkptError> {
    let io = |source| CkptError::Io {
        path: file.to_path_buf(),
        source,
    };
    match std::fs::metadata(file) {
        Ok(meta) if !meta.is_file() => {
            return Err(CkptError::Refused(format!("{} is not a regular file", file.display())))
        }
        Ok(meta) if meta.permissions().readonly() => {
            return Err(CkptError::Refused(format!(
                "{} is read-only (someone made it so); nothing was written. Make it writable to let ckpt edit it",
                file.display()
            )))
        }
        Ok(meta) if meta.len() > MAX_SETTINGS_BYTES => {
            return Err(CkptError::Refused(format!(
                "{} is larger than {MAX_SETTINGS_BYTES} bytes",
                file.display()
            )))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    }
    let bytes = std::fs::read(file).map_err(io)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| CkptError::Refused(format!("{} is not UTF-8 text", file.display())))
}

/// This ckpt's absolute path, which the agents' settings name.
fn this_executable() -> Result<String, CkptError> {
    let exe = std::env::current_exe().map_err(|source| CkptError::Io {
        path: "the ckpt executable".into(),
        source,
    })?;
    exe.to_str().map(str::to_owned).ok_or_else(|| {
        CkptError::InvalidInput(format!(
            "the ckpt executable's path {} is not UTF-8, which settings files cannot hold",
            exe.display()
        ))
    })
}

/// The command line an agent runs: this ckpt, by absolute path, quoted for the shell.
fn hook_command(exe: &str, spec: &AgentSpec, fail_closed: bool) -> String {
    let mut command = format!("{} hook {}", shell_word(exe), spec.name);
    if fail_closed {
        command.push_str(" --fail-closed");
    }
    command
}

/// Whether `command` is a ckpt hook of `spec`'s agent: a program named `ckpt` (any path, quoted
/// for the shell in any way), then `hook <agent>`.
fn is_ckpt_hook(spec: &AgentSpec, command: &str) -> bool {
    let Some((program, rest)) = first_shell_word(command) else {
        return false;
    };
    let named_ckpt = Path::new(&program).file_name().is_some_and(|name| name == "ckpt");
    let mut words = rest.split_whitespace();
    named_ckpt && words.next() == Some("hook") && words.next() == Some(spec.name)
}

/// The first word of a POSIX shell command line (single quotes, double quotes with their
/// backslash escapes, and backslash escapes, in any mix), and the rest of the line.
fn first_shell_word(command: &str) -> Option<(String, &str)> {
    let command = command.trim_start();
    let mut word = String::new();
    let mut chars = command.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => return Some((word, &command[at..])),
            '\'' => loop {
                match chars.next()?.1 {
                    '\'' => break,
                    c => word.push(c),
                }
            },
            '"' => loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        c @ ('"' | '\\' | '$' | '`') => word.push(c),
                        c => {
                            word.push('\\');
                            word.push(c);
                        }
                    },
                    c => word.push(c),
                }
            },
            '\\' => word.push(chars.next()?.1),
            c => word.push(c),
        }
    }
    Some((word, ""))
}

fn has_ckpt_hooks(spec: &AgentSpec, text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|root| {
        [spec.tool_event, spec.prompt_event].iter().any(|event| {
            root.pointer(&format!("/hooks/{event}"))
                .and_then(Value::as_array)
                .is_some_and(|groups| groups.iter().any(|g| group_has_ckpt(spec, g)))
        })
    })
}

fn group_has_ckpt(spec: &AgentSpec, group: &Value) -> bool {
    group
        .get("hooks")
        .and_then(Value::as_array)
        .is_some_and(|hooks| hooks.iter().any(|h| entry_is_ckpt(spec, h)))
}

fn entry_is_ckpt(spec: &AgentSpec, entry: &Value) -> bool {
    entry
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| is_ckpt_hook(spec, c))
}

/// ckpt's hook group for `event`.
fn ckpt_group(spec: &AgentSpec, event: &str, command: &str) -> Value {
    let timeout = match spec.timeout_unit {
        TimeoutUnit::Seconds => HOOK_TIMEOUT_SECONDS,
        TimeoutUnit::Milliseconds => HOOK_TIMEOUT_SECONDS * 1000,
    };
    let mut entry = Map::new();
    if spec.names_entries {
        entry.insert("name".into(), json!("ckpt"));
    }
    entry.insert("type".into(), json!("command"));
    entry.insert("command".into(), json!(command));
    entry.insert("timeout".into(), json!(timeout));
    let mut group = Map::new();
    if event == spec.tool_event {
        group.insert("matcher".into(), json!(spec.tool_matcher()));
    } else if spec.names_entries {
        group.insert("matcher".into(), json!("*"));
    }
    group.insert("hooks".into(), Value::Array(vec![Value::Object(entry)]));
    Value::Object(group)
}

/// The settings text with ckpt's hooks in (replacing an older ckpt entry where it stood), or
/// `None` when it already has exactly them. Only the lists ckpt's entries go into change; every
/// other byte of the file stays as it was.
pub(super) fn with_ckpt_hooks(spec: &AgentSpec, before: Option<&str>, command: &str) -> Result<Option<String>, String> {
    edit(before, |doc| {
        for event in [spec.tool_event, spec.prompt_event] {
            let root = doc.root()?;
            let Some((_, hooks)) = root.member("hooks") else {
                let mut table = Map::new();
                table.insert(event.into(), json!([ckpt_group(spec, event, command)]));
                doc.insert(&root, root.items().len(), Some("hooks"), &Value::Object(table));
                continue;
            };
            if !hooks.is_object() {
                return Err("\"hooks\" is not an object".into());
            }
            let Some((_, list)) = hooks.member(event) else {
                let group = ckpt_group(spec, event, command);
                doc.insert(hooks, hooks.items().len(), Some(event), &json!([group]));
                continue;
            };
            if !list.is_array() {
                return Err(format!("\"hooks.{event}\" is not a list"));
            }
            let found = ckpt_entries(spec, doc.text(), list);
            // An older entry's --no-watch was the user's choice: kept.
            let command = match found.iter().any(|f| f.no_watch) && !command.contains(" --no-watch") {
                true => format!("{command} --no-watch"),
                false => command.to_owned(),
            };
            let group = ckpt_group(spec, event, &command);
            let Some((first, rest)) = found.split_first() else {
                doc.insert(list, list.items().len(), None, &group);
                continue;
            };
            let current = list.items()[first.group].value.value(doc.text());
            if rest.is_empty() && first.whole && current.as_ref() == Some(&group) {
                continue;
            }
            for found in rest.iter().rev() {
                drop_found(doc, event, found)?;
            }
            if first.whole {
                let root = doc.root()?;
                let group_node = event_list(&root, event)
                    .and_then(|list| list.items().get(first.group))
                    .ok_or("the hook list changed while it was edited")?;
                doc.replace(&group_node.value, &group);
            } else {
                drop_found(doc, event, first)?;
                let root = doc.root()?;
                let list = event_list(&root, event).ok_or("the hook list changed while it was edited")?;
                doc.insert(list, first.group, None, &group);
            }
        }
        Ok(())
    })
}

/// The settings text without ckpt's hooks (and without the lists and the table that held only
/// them), or `None` when it has none. The exact inverse of [`with_ckpt_hooks`] adding them.
pub(super) fn without_ckpt_hooks(spec: &AgentSpec, before: Option<&str>) -> Result<Option<String>, String> {
    if before.is_none() {
        return Ok(None);
    }
    edit(before, |doc| {
        // The reverse of the order they are added in.
        for event in [spec.prompt_event, spec.tool_event] {
            let root = doc.root()?;
            let Some((_, hooks)) = root.member("hooks") else {
                return Ok(());
            };
            if !hooks.is_object() {
                return Err("\"hooks\" is not an object".into());
            }
            let Some((_, list)) = hooks.member(event) else {
                continue;
            };
            if !list.is_array() {
                return Err(format!("\"hooks.{event}\" is not a list"));
            }
            let found = ckpt_entries(spec, doc.text(), list);
            if found.is_empty() {
                continue;
            }
            for found in found.iter().rev() {
                drop_found(doc, event, found)?;
            }
            // A list, and then a table, that ckpt's removal left empty goes too.
            let root = doc.root()?;
            if let Some((_, hooks)) = root.member("hooks") {
                if let Some((at, list)) = hooks.member(event) {
                    if list.items().is_empty() {
                        doc.remove(hooks, at);
                    }
                }
            }
            let root = doc.root()?;
            if let Some((at, hooks)) = root.member("hooks") {
                if hooks.is_object() && hooks.items().is_empty() {
                    doc.remove(&root, at);
                }
            }
        }
        Ok(())
    })
}

/// Where ckpt's entries stand in one hook group of an event's list.
struct Found {
    /// The group's place in the list.
    group: usize,
    /// ckpt's entries' places in the group's `hooks`.
    entries: Vec<usize>,
    /// Whether the group holds nothing but ckpt's entries.
    whole: bool,
    /// Whether one of them ran with `--no-watch`.
    no_watch: bool,
}

fn ckpt_entries(spec: &AgentSpec, text: &str, list: &jsonedit::Node) -> Vec<Found> {
    let mut found = Vec::new();
    for (group, item) in list.items().iter().enumerate() {
        let Some((_, hooks)) = item.value.member("hooks").filter(|(_, h)| h.is_array()) else {
            continue;
        };
        let mut no_watch = false;
        let entries: Vec<usize> = hooks
            .items()
            .iter()
            .enumerate()
            .filter_map(|(at, entry)| {
                let command = entry.value.value(text)?.get("command")?.as_str()?.to_owned();
                if !is_ckpt_hook(spec, &command) {
                    return None;
                }
                no_watch |= command.split_whitespace().any(|w| w == "--no-watch");
                Some(at)
            })
            .collect();
        if !entries.is_empty() {
            found.push(Found {
                group,
                whole: entries.len() == hooks.items().len(),
                entries,
                no_watch,
            });
        }
    }
    found
}

fn event_list<'n>(root: &'n jsonedit::Node, event: &str) -> Option<&'n jsonedit::Node> {
    root.member("hooks")?.1.member(event).map(|(_, list)| list)
}

/// Takes ckpt's entries of one group out, and the group with them when it held only those.
fn drop_found(doc: &mut Doc, event: &str, found: &Found) -> Result<(), String> {
    let changed = "the hook list changed while it was edited";
    if found.whole {
        let root = doc.root()?;
        let list = event_list(&root, event).ok_or(changed)?;
        doc.remove(list, found.group);
        return Ok(());
    }
    for at in found.entries.iter().rev() {
        let root = doc.root()?;
        let hooks = event_list(&root, event)
            .and_then(|list| list.items().get(found.group))
            .and_then(|group| group.value.member("hooks"))
            .ok_or(changed)?
            .1;
        doc.remove(hooks, *at);
    }
    Ok(())
}

/// Lets `change` edit the settings text (a missing or blank file is an empty table), keeping a
/// byte-order mark the file starts with; `None` when nothing changed.
fn edit(before: Option<&str>, change: impl FnOnce(&mut Doc) -> Result<(), String>) -> Result<Option<String>, String> {
    let text = before.unwrap_or("");
    let (bom, text) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    let start = if text.trim().is_empty() {
        "{}\n".to_owned()
    } else {
        text.to_owned()
    };
    let mut doc = Doc::new(start.clone())?;
    change(&mut doc)?;
    if doc.text() == start {
        return Ok(None);
    }
    Ok(Some(format!("{bom}{}", doc.into_text())))
}

fn unified_diff(before: &str, after: &str, file: &Path) -> String {
    let name = file.display().to_string();
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("{name} (before)"), &format!("{name} (after)"))
        .to_string()
}

/// Keeps the old settings under a name no earlier backup has, readable by no one the original
/// was not: inside a repository in ckpt's own directory there (`<git dir>/ckpt/integrate-backups`,
/// so no backup shows up in `git status` or a commit), else beside the file.
fn write_backup(file: &Path, old: &str) -> Result<PathBuf, CkptError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let (dir, name) = backup_place(file);
    std::fs::create_dir_all(&dir).map_err(|source| CkptError::Io {
        path: dir.clone(),
        source,
    })?;
    let mode = std::fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0o600);
    for n in 0..100 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let backup = dir.join(format!("{name}.ckpt-backup-{stamp}{suffix}"));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&backup);
        match created {
            Ok(mut handle) => {
                use std::io::Write as _;
                handle
                    .write_all(old.as_bytes())
                    .and_then(|()| handle.sync_all())
                    .map_err(|source| CkptError::Io {
                        path: backup.clone(),
                        source,
                    })?;
                return Ok(backup);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(CkptError::Io { path: backup, source }),
        }
    }
    Err(CkptError::Refused(format!(
        "no free backup name in {}; nothing was written",
        dir.display()
    )))
}

/// Where the backups of `file` go, and the name they start with (see [`write_backup`]).
fn backup_place(file: &Path) -> (PathBuf, String) {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let beside = file.parent().unwrap_or(Path::new("."));
    match crate::verbs::enclosing_common_dir(beside) {
        Some(common) => {
            let parent = beside
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                common.join("ckpt").join("integrate-backups"),
                format!("{parent}-{name}"),
            )
        }
        None => (beside.to_path_buf(), name),
    }
}

/// What `file` held before ckpt's newest edit of it, when that was blank (nothing, or white
/// space only): a removal that leaves an empty table gives that back, byte for byte, rather
/// than the `{}` ckpt's edit started from. The newest backup says what it was.
fn blank_original(file: &Path) -> Option<String> {
    let (dir, name) = backup_place(file);
    let prefix = format!("{name}.ckpt-backup-");
    // `<stamp>` then `<stamp>-1`, `<stamp>-2`... within one second.
    let order = |entry: &str| {
        let rest = &entry[prefix.len()..];
        match rest.split_once('-') {
            Some((stamp, n)) => (stamp.to_owned(), n.parse::<u32>().unwrap_or(0)),
            None => (rest.to_owned(), 0),
        }
    };
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|entry| entry.starts_with(&prefix))
        .max_by_key(|entry| order(entry))?;
    let text = crate::verbs::read_small_state_file(&dir.join(newest), 4096).ok()?;
    let text = String::from_utf8(text).ok()?;
    text.trim().is_empty().then_some(text)
}

/// The settings file replaced atomically ([`crate::records::replace_user_file`]).
fn write_settings(file: &Path, text: &str) -> Result<(), CkptError> {
    Ok(crate::records::replace_user_file(file, text.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CKPT: &str = "/opt/ckpt/bin/ckpt hook claude";

    fn claude() -> &'static AgentSpec {
        Agent::Claude.spec()
    }

    #[test]
    fn hooks_are_added_beside_the_users_own_and_everything_else_is_kept() {
        let before = r#"{
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "my-guard.sh"}]}
        ]
    }
}
"#;
        let after = with_ckpt_hooks(claude(), Some(before), CKPT)
            .expect("merge")
            .expect("changed");
        let value: Value = serde_json::from_str(&after).expect("json");
        // Key order and the user's hook stay; the file's 4-space indent is kept.
        let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["model", "permissions", "hooks"]);
        assert!(after.contains("\n    \"model\""));
        let pre = value["hooks"]["PreToolUse"].as_array().expect("list");
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"], "my-guard.sh");
        assert_eq!(pre[1]["matcher"], "Write|Edit|MultiEdit|NotebookEdit|Bash");
        assert_eq!(pre[1]["hooks"][0]["command"], CKPT);
        assert_eq!(pre[1]["hooks"][0]["timeout"], 120);
        assert_eq!(value["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"], CKPT);
        // Idempotent: a second run changes nothing.
        assert_eq!(with_ckpt_hooks(claude(), Some(&after), CKPT).expect("again"), None);
        // Removing gives back exactly the user's hooks.
        let removed = without_ckpt_hooks(claude(), Some(&after))
            .expect("remove")
            .expect("changed");
        let removed: Value = serde_json::from_str(&removed).expect("json");
        assert_eq!(removed, serde_json::from_str::<Value>(before).expect("json"));
        assert_eq!(without_ckpt_hooks(claude(), Some(before)).expect("none"), None);
    }

    #[test]
    fn a_moved_ckpt_is_updated_in_place_and_other_entries_of_its_group_stay() {
        let before = r#"{"hooks": {"PreToolUse": [
            {"matcher": "Write", "hooks": [{"type": "command", "command": "'/old path/ckpt' hook claude"}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "ckpt hook claude"}, {"type": "command", "command": "lint.sh"}]},
            {"matcher": "Edit", "hooks": [{"type": "command", "command": "ckpt hook gemini"}]}
        ]}}"#;
        let after = with_ckpt_hooks(claude(), Some(before), CKPT)
            .expect("merge")
            .expect("changed");
        let value: Value = serde_json::from_str(&after).expect("json");
        let pre = value["hooks"]["PreToolUse"].as_array().expect("list");
        assert_eq!(pre.len(), 3, "{after}");
        assert_eq!(pre[0]["hooks"][0]["command"], CKPT, "where the old entry stood");
        assert_eq!(pre[1]["hooks"].as_array().expect("list").len(), 1);
        assert_eq!(pre[1]["hooks"][0]["command"], "lint.sh");
        // Another agent's ckpt hook is not this agent's.
        assert_eq!(pre[2]["hooks"][0]["command"], "ckpt hook gemini");
    }

    #[test]
    fn an_old_entry_sharing_a_group_makes_way_for_ckpts_group_at_that_place() {
        let before = "{\"hooks\": {\"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"command\": \"lint.sh\"}, {\"command\": \"ckpt hook claude\"}]}, {\"matcher\": \"Edit\", \"hooks\": []}]}}";
        let after = with_ckpt_hooks(claude(), Some(before), CKPT)
            .expect("merge")
            .expect("changed");
        let value: Value = serde_json::from_str(&after).expect("json");
        let pre = value["hooks"]["PreToolUse"].as_array().expect("list");
        assert_eq!(pre.len(), 3, "{after}");
        assert_eq!(pre[0]["hooks"][0]["command"], CKPT, "{after}");
        assert_eq!(pre[1]["hooks"], json!([{"command": "lint.sh"}]));
        assert_eq!(pre[2]["matcher"], "Edit");
        assert!(
            after.starts_with("{\"hooks\": {\"PreToolUse\": [{\"matcher\": \"Write|"),
            "{after}"
        );
    }

    #[test]
    fn exclude_lines_come_out_exactly_as_they_went_in() {
        let lines = vec!["# ckpt".to_owned(), "/.claude/ckpt.md".to_owned()];
        let other = vec!["# ckpt 2".to_owned()];
        for text in ["", "# git's\n", "*.tmp", "a\r\nb\r\n"] {
            let added = add_lines(text, &lines);
            assert!(has_lines(&added, &lines));
            assert_eq!(add_lines(&added, &lines), added, "once");
            let both = add_lines(&added, &other);
            assert_eq!(remove_lines(&remove_lines(&both, &lines), &other), text, "{both:?}");
            assert_eq!(remove_lines(&remove_lines(&both, &other), &lines), text, "{both:?}");
        }
        assert_eq!(
            remove_lines("a\n# ckpt\nb\n", &lines),
            "a\n# ckpt\nb\n",
            "only the pair"
        );
    }

    #[test]
    fn a_missing_or_empty_file_gets_only_the_hooks_and_bad_files_are_refused() {
        let fresh = with_ckpt_hooks(Agent::Gemini.spec(), None, "ckpt hook gemini")
            .expect("merge")
            .expect("changed");
        let value: Value = serde_json::from_str(&fresh).expect("json");
        assert_eq!(
            value["hooks"]["BeforeTool"][0]["matcher"],
            "write_file|replace|run_shell_command"
        );
        assert_eq!(value["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"], 120000);
        assert_eq!(value["hooks"]["BeforeTool"][0]["hooks"][0]["name"], "ckpt");
        assert_eq!(value["hooks"]["BeforeAgent"][0]["matcher"], "*");
        assert!(with_ckpt_hooks(claude(), Some("  \n"), CKPT).expect("empty").is_some());
        assert!(with_ckpt_hooks(claude(), Some("{ // comment\n}"), CKPT)
            .unwrap_err()
            .contains("not JSON"));
        assert!(with_ckpt_hooks(claude(), Some("[]"), CKPT)
            .unwrap_err()
            .contains("object"));
        assert!(with_ckpt_hooks(claude(), Some(r#"{"hooks": []}"#), CKPT)
            .unwrap_err()
            .contains("hooks"));
        assert!(
            with_ckpt_hooks(claude(), Some(r#"{"hooks": {"PreToolUse": {}}}"#), CKPT)
                .unwrap_err()
                .contains("not a list")
        );
        // Removing from a file that has no hooks table leaves it alone.
        assert_eq!(
            without_ckpt_hooks(claude(), Some(r#"{"model": "x"}"#)).expect("none"),
            None
        );
        assert_eq!(without_ckpt_hooks(claude(), None).expect("none"), None);
    }

    #[test]
    fn a_files_byte_order_mark_line_ends_and_the_users_no_watch_are_kept() {
        let before = "\u{feff}{\r\n  \"hooks\": {\r\n    \"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"\\\"/old dir/ckpt\\\" hook claude --no-watch\"}]}]\r\n  }\r\n}\r\n";
        let after = with_ckpt_hooks(claude(), Some(before), CKPT)
            .expect("merge")
            .expect("changed");
        assert!(after.starts_with('\u{feff}'), "{after:?}");
        assert!(
            after.contains("\r\n") && !after.replace("\r\n", "").contains('\n'),
            "{after:?}"
        );
        let value: Value = serde_json::from_str(after.trim_start_matches('\u{feff}')).expect("json");
        let pre = value["hooks"]["PreToolUse"].as_array().expect("list");
        // The double-quoted old entry was ckpt's: replaced where it stood, its --no-watch kept.
        assert_eq!(pre.len(), 1, "{after}");
        assert_eq!(pre[0]["hooks"][0]["command"], format!("{CKPT} --no-watch"));
        // Taking ckpt's hooks out of a file that had no others leaves no empty table behind.
        let removed = without_ckpt_hooks(claude(), Some(&after))
            .expect("remove")
            .expect("changed");
        let value: Value = serde_json::from_str(removed.trim_start_matches('\u{feff}')).expect("json");
        assert_eq!(value, json!({}));
    }

    #[test]
    fn the_slash_command_is_ckpts_to_write_and_remove_and_a_users_own_is_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let settings = dir.path().join("settings.local.json");
        let change = |remove| slash_command_change(claude(), &settings, "/opt/ckpt", remove).expect("read");
        let fresh = change(false).expect("claude has one");
        assert_eq!(fresh.before, None);
        let text = fresh.after.expect("content");
        assert!(
            text.contains("!`/opt/ckpt list --session ${CLAUDE_SESSION_ID}`"),
            "{text}"
        );
        assert!(text.contains(SLASH_COMMAND_MARKER));
        std::fs::create_dir_all(dir.path().join("commands")).expect("mkdir");
        std::fs::write(&fresh.file, &text).expect("write");
        assert_eq!(change(false).map(|c| c.before == c.after), Some(true), "unchanged");
        assert_eq!(change(true).map(|c| c.after), Some(None), "removed with the hooks");
        std::fs::write(&fresh.file, "my own /ckpt\n").expect("write");
        assert!(
            change(false).is_none() && change(true).is_none(),
            "a user's own is never touched"
        );
        assert!(
            slash_command_change(Agent::Gemini.spec(), &settings, "/opt/ckpt", false)
                .expect("read")
                .is_none()
        );
    }

    #[test]
    fn only_a_program_named_ckpt_running_this_agents_hook_counts_as_ckpts() {
        let spec = claude();
        assert!(is_ckpt_hook(spec, "ckpt hook claude"));
        assert!(is_ckpt_hook(spec, "/usr/local/bin/ckpt hook claude --fail-closed"));
        assert!(is_ckpt_hook(spec, "'/home/a b/ckpt' hook claude"));
        assert!(!is_ckpt_hook(spec, "ckpt hook codex"));
        assert!(!is_ckpt_hook(spec, "notckpt hook claude"));
        assert!(!is_ckpt_hook(spec, "echo ckpt hook claude"));
        assert!(!is_ckpt_hook(spec, "'/unterminated/ckpt hook claude"));
        // Whatever shell_word writes is read back as ckpt.
        for path in ["/opt/ckpt", "/tmp/bin dir/it's $x/ckpt", "/a\"b/ckpt"] {
            assert!(
                is_ckpt_hook(spec, &format!("{} hook claude", shell_word(path))),
                "{path}"
            );
        }
        assert!(is_ckpt_hook(spec, r#""/p a/\"q\"/ckpt" hook claude"#));
        assert!(is_ckpt_hook(spec, r"/p\ a/ckpt hook claude"));
        assert_eq!(shell_word("/usr/bin/ckpt"), "/usr/bin/ckpt");
        assert_eq!(shell_word("/a b/it's/ckpt"), r"'/a b/it'\''s/ckpt'");
    }
}
