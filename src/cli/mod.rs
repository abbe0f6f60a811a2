//! The `ckpt` command line: parses arguments (clap), turns user input into validated requests,
//! calls the provider, and reports results as human text or JSON Lines with the contract's exit
//! codes (0 ok, 1 failed, 2 usage, 3 partial, 4 refused). It holds no engine logic and never
//! touches a repository itself.

mod demo;
mod output;

use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::provider::scan::DEFAULT_MAX_FILE_SIZE;
use crate::provider::target::{self, ResolveError, Target};
use crate::provider::{self, CkptError, Confirmation, Provider, Selection, SnapshotRequest};
use crate::records::config::Config;
use crate::records::{validate_label, Kind, Record};
use output::Output;

#[derive(Parser, Debug)]
#[command(
    name = "ckpt",
    version,
    about = "Checkpoints of a working directory before every agent mutation, restorable exactly, without touching your git state"
)]
struct Cli {
    /// Run as if started in DIR (like git -C)
    #[arg(short = 'C', global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// JSON Lines on stdout (one object per line, each with "v":1 and "type"); human text on stderr
    #[arg(long, global = true)]
    json: bool,
    /// git (checkpoints in the repository), copy (a private store outside the workspace), or
    /// auto: git inside a repository whose HEAD is born, copy otherwise
    #[arg(long, global = true, value_enum)]
    provider: Option<ProviderArg>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Take a checkpoint of the workspace now
    Snapshot(SnapshotArgs),
    /// List checkpoints, oldest first
    List {
        /// Only this session's checkpoints
        #[arg(long)]
        session: Option<String>,
        /// Every worktree of this repository, not only this one
        #[arg(long)]
        all: bool,
    },
    /// Show one checkpoint's record
    Show(TargetArgs),
    /// Show what restoring a checkpoint would change (read-only)
    Preview(RestoreArgs),
    /// Put the workspace (or some paths) back as a checkpoint had it; takes a guard checkpoint first
    Restore {
        #[command(flatten)]
        args: RestoreArgs,
        /// Confirm without asking
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// What changed since a checkpoint (to the worktree, read-only) or between two checkpoints
    Diff {
        /// The checkpoint to compare from: `latest`, an id prefix, `turn:T` or `turn:T.S`
        from: String,
        /// The checkpoint to compare to (default: the worktree as it is now)
        to: Option<String>,
        /// Session for `turn:` targets and `latest`
        #[arg(long)]
        session: Option<String>,
        /// Per-file counts of changed lines
        #[arg(long, conflicts_with = "name_status")]
        stat: bool,
        /// One line per file: status letter and path
        #[arg(long)]
        name_status: bool,
        /// Worktree files larger than this many bytes are left out
        #[arg(long)]
        max_file_size: Option<u64>,
        /// Only these paths (files or directories), after `--`
        #[arg(last = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Remove checkpoints by retention policy: keep the newest per session, then a byte quota
    Prune {
        /// Only say what would be removed, and why
        #[arg(long)]
        dry_run: bool,
        /// Newest checkpoints kept per session
        #[arg(long)]
        max_per_session: Option<usize>,
        /// Soft cap on the incremental bytes of all kept checkpoints
        #[arg(long)]
        quota_bytes: Option<u64>,
    },
    /// Delete checkpoints: these targets, or every checkpoint of --session
    Delete {
        /// `latest`, id prefixes, `turn:T`, `turn:T.S`
        targets: Vec<String>,
        /// With no targets: every checkpoint of this session; with targets: the session for `turn:`
        #[arg(long)]
        session: Option<String>,
        /// Confirm without asking
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Delete every checkpoint of this workspace
    Clear {
        /// Confirm without asking
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// What is protected now and why the rest is not, checkpoints per session, disk usage
    Status {
        /// Files larger than this many bytes count as not protected
        #[arg(long)]
        max_file_size: Option<u64>,
    },
    /// Remove content of the copy store that no checkpoint of any workspace references (git
    /// provider checkpoints are left to git's own gc)
    Gc {
        /// Keep unreferenced content younger than this many seconds
        #[arg(long, default_value_t = 3600)]
        grace_seconds: u64,
        /// Only count what would be removed
        #[arg(long)]
        dry_run: bool,
    },
    /// Check this workspace's ckpt state (read-only); exits 1 on any problem
    Audit,
    /// Report problems in this workspace's ckpt state; --fix repairs them
    Doctor {
        /// Repair: rebuild or re-pin records, remove leftover temp files, roll an interrupted
        /// restore back to its guard
        #[arg(long)]
        fix: bool,
        /// With --fix: finish an interrupted restore instead of rolling it back
        #[arg(long, requires = "fix")]
        complete: bool,
    },
    /// A guided run in a scratch repository: snapshot, agent-like edits, preview, restore, undo
    Demo {
        /// Keep the scratch repository and print its path
        #[arg(long)]
        keep: bool,
    },
    /// Print a shell completion script (e.g. `ckpt completions bash > /etc/bash_completion.d/ckpt`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `ckpt man | man -l -`
    Man,
}

#[derive(Args, Debug)]
struct SnapshotArgs {
    #[arg(long)]
    session: Option<String>,
    #[arg(long)]
    turn: Option<u64>,
    #[arg(long)]
    step: Option<u64>,
    /// What is about to mutate the workspace (e.g. the tool name)
    #[arg(long)]
    trigger: Option<String>,
    /// auto, manual or guard
    #[arg(long, value_enum, default_value_t = KindArg::Manual)]
    kind: KindArg,
    /// Files larger than this many bytes are skipped and reported
    #[arg(long)]
    max_file_size: Option<u64>,
}

#[derive(Args, Debug)]
struct TargetArgs {
    /// `latest`, an id prefix, `turn:T` or `turn:T.S`
    target: String,
    /// Session for `turn:` targets and `latest`
    #[arg(long)]
    session: Option<String>,
}

#[derive(Args, Debug)]
struct RestoreArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Also remove files created after the checkpoint (only ones the guard captured)
    #[arg(long)]
    exact: bool,
    /// Files larger than this many bytes are not captured by the guard
    #[arg(long)]
    max_file_size: Option<u64>,
    /// Only these paths (files or directories), after `--`
    #[arg(last = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

/// Runs the CLI with the process arguments and returns the exit code.
/// `--provider`: where checkpoints live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProviderArg {
    Auto,
    Git,
    Copy,
}

/// `--kind` of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum KindArg {
    Auto,
    Manual,
    Guard,
}

pub fn run() -> i32 {
    run_with(std::env::args_os().collect())
}

pub fn run_with(args: Vec<OsString>) -> i32 {
    let wants_json = args.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = error.print();
                return 0;
            }
            if wants_json {
                let out = Output { json: true };
                out.record("error", json!({"code": "usage", "message": error.to_string().trim()}));
            }
            let _ = error.print();
            return 2;
        }
    };
    let out = Output { json: cli.json };
    match execute(&cli, &out) {
        Ok(code) => code,
        Err(error) => {
            out.record("error", json!({"code": error.code(), "message": error.to_string()}));
            eprintln!("ckpt: error: {error}");
            error.exit_code()
        }
    }
}

fn working_dir(cli: &Cli) -> Result<PathBuf, CkptError> {
    let base = std::env::current_dir().map_err(|source| CkptError::Io {
        path: PathBuf::from("."),
        source,
    })?;
    let dir = match &cli.dir {
        Some(dir) => base.join(dir),
        None => base,
    };
    dir.canonicalize().map_err(|source| CkptError::Io { path: dir, source })
}

/// The config file for the workspace at `cwd`: `<git-common-dir>/ckpt/config.toml` inside a
/// repository, the copy store's `workspaces/<key>/config.toml` otherwise.
fn load_config(cwd: &Path) -> Result<Config, CkptError> {
    let path = match crate::verbs::enclosing_common_dir(cwd) {
        Some(common) => common.join("ckpt").join("config.toml"),
        None => match provider::copy::CopyLayout::for_root(cwd) {
            Ok(layout) => layout.workspace_dir.join("config.toml"),
            Err(_) => return Ok(Config::default()),
        },
    };
    Config::load(&path).map_err(|e| CkptError::InvalidInput(e.to_string()))
}

fn retention_policy(config: &Config) -> provider::retention::Policy {
    let mut policy = provider::retention::Policy::default();
    if let Some(retention) = &config.retention {
        policy.max_per_session = retention.max_per_session.unwrap_or(policy.max_per_session);
        policy.quota_bytes = retention.quota_bytes.unwrap_or(policy.quota_bytes);
    }
    policy
}

fn check_label(what: &str, value: &Option<String>) -> Result<(), CkptError> {
    match value {
        Some(text) => validate_label(what, text).map_err(CkptError::InvalidInput),
        None => Ok(()),
    }
}

fn execute(cli: &Cli, out: &Output) -> Result<i32, CkptError> {
    if let Command::Demo { keep } = &cli.command {
        return demo::run(*keep, out);
    }
    match &cli.command {
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(*shell, &mut <Cli as clap::CommandFactory>::command(), "ckpt", &mut text);
            output::to_stdout(&String::from_utf8_lossy(&text));
            return Ok(0);
        }
        Command::Man => {
            let mut text = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut text)
                .map_err(|source| CkptError::Io {
                    path: PathBuf::from("<manual page>"),
                    source,
                })?;
            output::to_stdout(&String::from_utf8_lossy(&text));
            return Ok(0);
        }
        _ => {}
    }
    if let Command::Gc { grace_seconds, dry_run } = &cli.command {
        let grace = std::time::Duration::from_secs(*grace_seconds);
        let report = provider::copy::collect_copy_store_garbage(grace, *dry_run)?;
        out.record(
            "gc",
            json!({"live_objects": report.live_objects, "removed": report.removed, "removed_bytes": report.removed_bytes, "kept_young": report.kept_young, "dry_run": dry_run}),
        );
        out.human(&format!(
            "gc: {} unreferenced object(s), {} {}; {} kept (younger than the grace period); {} live",
            report.removed,
            output::human_bytes(report.removed_bytes),
            if *dry_run { "would be removed" } else { "removed" },
            report.kept_young,
            report.live_objects
        ));
        return Ok(0);
    }
    let cwd = working_dir(cli)?;
    let config = load_config(&cwd)?;
    let show_progress = !cli.json && std::io::stderr().is_terminal();
    let choice = match cli.provider {
        Some(ProviderArg::Auto) => provider::ProviderChoice::Auto,
        Some(ProviderArg::Git) => provider::ProviderChoice::Git,
        Some(ProviderArg::Copy) => provider::ProviderChoice::Copy,
        None => config
            .provider
            .as_deref()
            .and_then(provider::ProviderChoice::parse)
            .unwrap_or(provider::ProviderChoice::Auto),
    };
    let excludes = config.copy.as_ref().and_then(|c| c.excludes.clone());
    let provider = provider::open(
        &cwd,
        choice,
        provider::progress::Progress::terminal(show_progress),
        excludes,
    )?;
    let limit = |arg: &Option<u64>| arg.or(config.max_file_size).unwrap_or(DEFAULT_MAX_FILE_SIZE);
    match &cli.command {
        Command::Snapshot(args) => snapshot(provider.as_ref(), args, limit(&args.max_file_size), &config, out),
        Command::List { session, all } => list(provider.as_ref(), session.as_deref(), *all, out),
        Command::Show(args) => show(provider.as_ref(), args, out),
        Command::Preview(args) => preview(provider.as_ref(), &cwd, args, limit(&args.max_file_size), out),
        Command::Restore { args, yes } => restore(provider.as_ref(), &cwd, args, *yes, limit(&args.max_file_size), out),
        Command::Audit => audit(provider.as_ref(), out),
        Command::Status { max_file_size } => status(provider.as_ref(), limit(max_file_size), out),
        Command::Prune {
            dry_run,
            max_per_session,
            quota_bytes,
        } => {
            let mut policy = retention_policy(&config);
            policy.max_per_session = max_per_session.unwrap_or(policy.max_per_session);
            policy.quota_bytes = quota_bytes.unwrap_or(policy.quota_bytes);
            prune(provider.as_ref(), &policy, *dry_run, out)
        }
        Command::Delete { targets, session, yes } => delete(provider.as_ref(), targets, session.as_deref(), *yes, out),
        Command::Clear { yes } => {
            let all: Vec<Record> = provider.checkpoints(false)?;
            confirm_removal(&all, *yes, "clear")?;
            remove(provider.as_ref(), &all, "clear", out)
        }
        Command::Diff {
            from,
            to,
            session,
            stat,
            name_status,
            max_file_size,
            paths,
        } => {
            let view = if *stat {
                output::DiffView::Stat
            } else if *name_status {
                output::DiffView::NameStatus
            } else {
                output::DiffView::Patch
            };
            let request = DiffRequest {
                from,
                to: to.as_deref(),
                session: session.as_deref(),
                view,
                max_file_size: limit(max_file_size),
                paths,
            };
            diff(provider.as_ref(), &cwd, &request, out)
        }
        Command::Doctor { fix, complete } => doctor(provider.as_ref(), *fix, *complete, out),
        Command::Demo { .. } | Command::Gc { .. } | Command::Completions { .. } | Command::Man => Ok(0),
    }
}

fn snapshot(
    provider: &dyn Provider,
    args: &SnapshotArgs,
    max_file_size: u64,
    config: &Config,
    out: &Output,
) -> Result<i32, CkptError> {
    check_label("session", &args.session)?;
    check_label("trigger", &args.trigger)?;
    let request = SnapshotRequest {
        session: args.session.clone(),
        turn: args.turn,
        step: args.step,
        trigger: args.trigger.clone(),
        kind: match args.kind {
            KindArg::Auto => Kind::Auto,
            KindArg::Manual => Kind::Manual,
            KindArg::Guard => Kind::Guard,
        },
        max_file_size,
    };
    let outcome = provider.snapshot(&request)?;
    let auto_prune = config.retention.as_ref().and_then(|r| r.auto_prune).unwrap_or(false);
    let pruned = if auto_prune && outcome.created {
        let plan = provider::retention::plan(&provider.checkpoints(false)?, &retention_policy(config));
        provider.remove(&plan.into_iter().map(|r| r.id).collect::<Vec<_>>())?
    } else {
        Vec::new()
    };
    for warning in &outcome.warnings {
        eprintln!("ckpt: warning: {warning}");
    }
    let record = &outcome.record;
    let skipped: Vec<_> = record
        .skipped
        .iter()
        .map(|s| json!({"path": s.path, "reason": s.reason}))
        .collect();
    out.record(
        "snapshot",
        json!({
            "id": record.id,
            "short": record.short(),
            "created": outcome.created,
            "provider": record.provider,
            "commit": record.commit,
            "kind": record.kind.as_str(),
            // A no-op reports what it added (nothing), not the previous checkpoint's numbers.
            "files": if outcome.created { record.files } else { 0 },
            "total_files": record.total_files,
            "bytes": if outcome.created { record.bytes } else { 0 },
            "skipped": skipped,
            "scan": {"from_cache": outcome.scan.from_cache, "from_index": outcome.scan.from_index, "read": outcome.scan.read},
            "pruned": pruned,
        }),
    );
    if outcome.created {
        out.human(&format!(
            "checkpoint {} taken: {} file(s) changed, {} new, {} file(s) protected",
            record.short(),
            record.files,
            output::human_bytes(record.bytes),
            record.total_files
        ));
    } else {
        out.human(&format!(
            "nothing changed since checkpoint {}; no new checkpoint was needed",
            record.short()
        ));
    }
    for skipped in &record.skipped {
        let path = skipped
            .path
            .to_repo_path()
            .map(|p| output::human_path(&p))
            .unwrap_or_default();
        out.human(&format!("  not protected: {path}  [{}]", skipped.reason));
    }
    Ok(0)
}

fn list(provider: &dyn Provider, session: Option<&str>, all: bool, out: &Output) -> Result<i32, CkptError> {
    let every = provider.checkpoints(all)?;
    let total = every.len();
    let records: Vec<Record> = every
        .into_iter()
        .filter(|r| session.is_none_or(|s| r.session.as_deref() == Some(s)))
        .collect();
    for record in &records {
        out.record("checkpoint", output::checkpoint_json(record));
    }
    if records.is_empty() && total > 0 {
        if let Some(session) = session {
            // Said even with --json (on stderr): an empty list is not "no checkpoints".
            eprintln!(
                "ckpt: no checkpoint belongs to session {session:?} ({total} checkpoint(s) in other sessions; `ckpt status` lists the sessions)"
            );
            return Ok(0);
        }
    }
    if !out.json {
        if records.is_empty() {
            out.human("no checkpoints yet (take one with: ckpt snapshot)");
        } else {
            out.human(&output::list_header());
            for record in &records {
                out.human(&output::list_line(record));
            }
        }
    }
    Ok(0)
}

fn resolve(provider: &dyn Provider, args: &TargetArgs) -> Result<Record, CkptError> {
    check_label("session", &args.session)?;
    let records = provider.checkpoints(false)?;
    let parsed = Target::parse(&args.target).map_err(|e| resolve_error(&args.target, e))?;
    target::resolve(&records, &parsed, args.session.as_deref())
        .cloned()
        .map_err(|e| resolve_error(&args.target, e))
}

fn resolve_error(text: &str, error: ResolveError) -> CkptError {
    match error {
        ResolveError::Invalid(message) => CkptError::InvalidInput(message),
        ResolveError::NotFound(message) => CkptError::NotFound(message),
        ResolveError::Ambiguous(candidates) => CkptError::Ambiguous {
            target: text.to_owned(),
            candidates,
        },
    }
}

fn show(provider: &dyn Provider, args: &TargetArgs, out: &Output) -> Result<i32, CkptError> {
    let record = resolve(provider, args)?;
    let mut value = output::checkpoint_json(&record);
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("tree".into(), json!(record.tree));
        map.insert("workspace".into(), json!(record.workspace));
        map.insert(
            "skipped".into(),
            json!(record
                .skipped
                .iter()
                .map(|s| json!({"path": s.path, "reason": s.reason}))
                .collect::<Vec<_>>()),
        );
    }
    out.record("checkpoint", value);
    if !out.json {
        let mut text = format!(
            "checkpoint {}\n  provider  {}\n  kind      {}\n  time      {}\n  session   {}\n  turn      {}\n  trigger   {}\n  files     {} changed, {} protected\n  bytes     {} new\n  tree      {}\n",
            record.id,
            record.provider,
            record.kind.as_str(),
            output::human_time(&record),
            record.session.as_deref().unwrap_or("-"),
            output::turn_step(&record),
            record.trigger.as_deref().unwrap_or("-"),
            record.files,
            record.total_files,
            output::human_bytes(record.bytes),
            record.tree
        );
        for skipped in &record.skipped {
            let path = skipped
                .path
                .to_repo_path()
                .map(|p| output::human_path(&p))
                .unwrap_or_default();
            text.push_str(&format!("  not protected: {path}  [{}]\n", skipped.reason));
        }
        out.human(text.trim_end());
    }
    Ok(0)
}

fn selection(provider: &dyn Provider, cwd: &Path, args: &RestoreArgs) -> Result<Selection, CkptError> {
    let paths = args
        .paths
        .iter()
        .map(|arg| provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Selection {
        paths,
        exact: args.exact,
    })
}

fn preview(
    provider: &dyn Provider,
    cwd: &Path,
    args: &RestoreArgs,
    max_file_size: u64,
    out: &Output,
) -> Result<i32, CkptError> {
    let record = resolve(provider, &args.target)?;
    let selection = selection(provider, cwd, args)?;
    let preview = provider.preview(&record, &selection, max_file_size)?;
    out.record("preview", output::preview_json(&preview));
    out.human(output::preview_text(&preview, &record).trim_end());
    Ok(0)
}

/// The one confirmation prompt: asks `question [y/N]` on stderr; `y` or `yes` in any case is a
/// yes, anything else (or no answer) a no.
fn ask_yes(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

fn ask_on_terminal(record: &Record) -> impl FnMut(&provider::Preview) -> bool + '_ {
    move |preview| {
        eprint!("{}", output::preview_text(preview, record));
        ask_yes("Restore these paths? A guard checkpoint is taken first.")
    }
}

fn restore(
    provider: &dyn Provider,
    cwd: &Path,
    args: &RestoreArgs,
    yes: bool,
    max_file_size: u64,
    out: &Output,
) -> Result<i32, CkptError> {
    let record = resolve(provider, &args.target)?;
    let selection = selection(provider, cwd, args)?;
    let request = SnapshotRequest {
        session: args.target.session.clone(),
        turn: None,
        step: None,
        trigger: Some("restore".into()),
        kind: Kind::Guard,
        max_file_size,
    };
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut ask = ask_on_terminal(&record);
    let confirmation = if yes {
        Confirmation::Given
    } else if interactive {
        Confirmation::Ask(&mut ask)
    } else {
        return Err(CkptError::Refused(format!(
            "restore of {} needs confirmation: pass --yes (see what it would do with: ckpt preview {}); nothing was changed",
            record.short(),
            record.short()
        )));
    };
    let report = provider.restore(&record, &selection, &request, confirmation)?;
    out.record("restore", output::restore_json(&report));
    out.human(output::restore_text(&report).trim_end());
    Ok(if report.failed.is_empty() { 0 } else { 3 })
}

fn problem_json(problem: &provider::Problem) -> serde_json::Value {
    json!({"code": problem.code, "message": problem.message, "id": problem.id})
}

fn audit(provider: &dyn Provider, out: &Output) -> Result<i32, CkptError> {
    let report = provider.audit()?;
    for problem in &report.problems {
        out.record("audit.problem", problem_json(problem));
        out.human(&format!("problem [{}]: {}", problem.code, problem.message));
    }
    let ok = report.problems.is_empty();
    out.record(
        "audit",
        json!({"ok": ok, "records": report.records, "refs": report.refs, "problems": report.problems.len()}),
    );
    out.human(&format!(
        "audit: {} record(s), {} ref(s), {} problem(s){}",
        report.records,
        report.refs,
        report.problems.len(),
        if ok { " — all consistent" } else { "" }
    ));
    Ok(if ok { 0 } else { 1 })
}

fn doctor(provider: &dyn Provider, fix: bool, complete: bool, out: &Output) -> Result<i32, CkptError> {
    let mode = fix.then_some(if complete {
        provider::JournalFix::Complete
    } else {
        provider::JournalFix::RollBack
    });
    let report = provider.doctor(mode)?;
    for problem in &report.problems {
        out.record("doctor.problem", problem_json(problem));
        out.human(&format!("problem [{}]: {}", problem.code, problem.message));
    }
    if let Some(restore) = &report.restore {
        out.record("restore", output::restore_json(restore));
        out.human(output::restore_text(restore).trim_end());
    }
    for action in &report.actions {
        out.human(&format!("{} {action}", if report.fixed { "done:" } else { "would:" }));
    }
    let remaining: Vec<serde_json::Value> = report.remaining.iter().map(problem_json).collect();
    out.record(
        "doctor",
        json!({"fixed": report.fixed, "problems": report.problems.len(), "actions": report.actions, "remaining": remaining}),
    );
    let healthy = if report.fixed {
        report.remaining.is_empty()
    } else {
        report.problems.is_empty()
    };
    if report.problems.is_empty() {
        out.human("doctor: no problems found");
    } else if !report.fixed {
        out.human("doctor: run `ckpt doctor --fix` to repair");
    } else if !healthy {
        out.human(&format!("doctor: {} problem(s) remain", report.remaining.len()));
    }
    let partial = report.restore.as_ref().is_some_and(|r| !r.failed.is_empty());
    Ok(match (healthy, partial) {
        (false, _) => 1,
        // The interrupted restore was settled, but paths changed since were left and named.
        (true, true) => 3,
        (true, false) => 0,
    })
}

struct DiffRequest<'a> {
    from: &'a str,
    to: Option<&'a str>,
    session: Option<&'a str>,
    view: output::DiffView,
    max_file_size: u64,
    paths: &'a [PathBuf],
}

fn diff(provider: &dyn Provider, cwd: &Path, request: &DiffRequest<'_>, out: &Output) -> Result<i32, CkptError> {
    let target = |text: &str| TargetArgs {
        target: text.to_owned(),
        session: request.session.map(str::to_owned),
    };
    let from = resolve(provider, &target(request.from))?;
    let to = request.to.map(|t| resolve(provider, &target(t))).transpose()?;
    let paths = request
        .paths
        .iter()
        .map(|arg| provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let files = provider.diff(&from, to.as_ref(), &paths, request.max_file_size)?;
    let (added, removed) = files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
    for file in &files {
        out.record("diff.file", output::diff_file_json(file));
    }
    out.record(
        "diff",
        json!({"from": from.id, "to": to.as_ref().map(|r| r.id.clone()), "files": files.len(), "added": added, "removed": removed}),
    );
    if !out.json {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let text = output::diff_text(&files, request.view, color);
        if !text.is_empty() {
            output::to_stdout(&text);
        }
        if files.is_empty() {
            let to_name = to
                .as_ref()
                .map(|r| r.short().to_owned())
                .unwrap_or_else(|| "the worktree".into());
            out.human(&format!("no differences between {} and {to_name}", from.short()));
        }
    }
    Ok(0)
}

fn prune(
    provider: &dyn Provider,
    policy: &provider::retention::Policy,
    dry_run: bool,
    out: &Output,
) -> Result<i32, CkptError> {
    let records = provider.checkpoints(false)?;
    let plan = provider::retention::plan(&records, policy);
    let ids: Vec<String> = plan.iter().map(|r| r.id.clone()).collect();
    let removed = if dry_run { Vec::new() } else { provider.remove(&ids)? };
    for removal in &plan {
        out.record(
            "prune.remove",
            json!({"id": removal.id, "rule": removal.rule, "done": !dry_run}),
        );
        let short = &removal.id[..8.min(removal.id.len())];
        out.human(&format!(
            "{} {short}  [{}]",
            if dry_run { "would remove" } else { "removed" },
            removal.rule
        ));
    }
    out.record(
        "prune",
        json!({"removed": removed.len(), "planned": plan.len(), "kept": records.len() - plan.len(), "dry_run": dry_run}),
    );
    out.human(&format!(
        "prune: {} of {} checkpoint(s) {}; objects are freed by git gc (git provider)",
        plan.len(),
        records.len(),
        if dry_run { "would be removed" } else { "removed" }
    ));
    Ok(0)
}

/// Removing checkpoints follows the restore rule: `--yes`, or a `y` on a terminal.
fn confirm_removal(records: &[Record], yes: bool, what: &str) -> Result<(), CkptError> {
    if yes || records.is_empty() {
        return Ok(());
    }
    if std::io::stdin().is_terminal()
        && std::io::stderr().is_terminal()
        && ask_yes(&format!("{what}: delete {} checkpoint(s)?", records.len()))
    {
        return Ok(());
    }
    Err(CkptError::Refused(format!(
        "{what} of {} checkpoint(s) needs confirmation: pass --yes; nothing was deleted",
        records.len()
    )))
}

fn remove(provider: &dyn Provider, records: &[Record], what: &str, out: &Output) -> Result<i32, CkptError> {
    let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    let removed = provider.remove(&ids)?;
    out.record(what, json!({"removed": removed}));
    out.human(&format!("{what}: removed {} checkpoint(s)", removed.len()));
    Ok(0)
}

fn delete(
    provider: &dyn Provider,
    targets: &[String],
    session: Option<&str>,
    yes: bool,
    out: &Output,
) -> Result<i32, CkptError> {
    let records: Vec<Record> = if targets.is_empty() {
        let Some(session) = session else {
            return Err(CkptError::InvalidInput(
                "delete needs targets, or --session S for a whole session".into(),
            ));
        };
        provider
            .checkpoints(false)?
            .into_iter()
            .filter(|r| r.session.as_deref() == Some(session))
            .collect()
    } else {
        let mut chosen: Vec<Record> = Vec::new();
        for target in targets {
            let record = resolve(
                provider,
                &TargetArgs {
                    target: target.clone(),
                    session: session.map(str::to_owned),
                },
            )?;
            if !chosen.iter().any(|r| r.id == record.id) {
                chosen.push(record);
            }
        }
        chosen
    };
    if records.is_empty() {
        return Err(CkptError::NotFound("no checkpoint matches".into()));
    }
    confirm_removal(&records, yes, "delete")?;
    remove(provider, &records, "delete", out)
}

fn status(provider: &dyn Provider, max_file_size: u64, out: &Output) -> Result<i32, CkptError> {
    let report = provider.status(max_file_size)?;
    let mut sessions: std::collections::BTreeMap<Option<String>, usize> = std::collections::BTreeMap::new();
    for record in &report.checkpoints {
        *sessions.entry(record.session.clone()).or_default() += 1;
    }
    let oldest = report.checkpoints.first();
    let newest = report.checkpoints.last();
    out.record(
        "status",
        json!({
            "provider": report.provider,
            "workspace": crate::records::WirePath::from_bytes(provider.workdir().as_os_str().as_encoded_bytes()),
            "protected": report.protected,
            "not_protected": output::wire_reasons(&report.not_protected, "reason"),
            "checkpoints": report.checkpoints.len(),
            "sessions": sessions.iter().map(|(s, n)| json!({"session": s, "count": n})).collect::<Vec<_>>(),
            "oldest": oldest.map(|r| r.id.clone()),
            "newest": newest.map(|r| r.id.clone()),
            "ckpt_only_bytes": report.ckpt_only_bytes,
            "shared_bytes": report.shared_bytes,
            "blobs": report.blobs,
        }),
    );
    if !out.json {
        let mut text = format!("provider {} for {}\n", report.provider, provider.workdir().display());
        text.push_str(&format!("protected now: {} file(s)\n", report.protected));
        if !report.not_protected.is_empty() {
            text.push_str(&format!("not protected ({}):\n", report.not_protected.len()));
            for (path, reason) in &report.not_protected {
                text.push_str(&format!("  {}  [{reason}]\n", output::human_path(path)));
            }
        }
        text.push_str(&format!("checkpoints: {}\n", report.checkpoints.len()));
        for (session, count) in &sessions {
            text.push_str(&format!(
                "  {}: {count}\n",
                session.as_deref().unwrap_or("(no session)")
            ));
        }
        if let (Some(oldest), Some(newest)) = (oldest, newest) {
            text.push_str(&format!(
                "  oldest {}  {}\n",
                oldest.short(),
                output::human_time(oldest)
            ));
            text.push_str(&format!(
                "  newest {}  {}\n",
                newest.short(),
                output::human_time(newest)
            ));
        }
        text.push_str(&format!(
            "disk: {} kept alive only by ckpt, {} shared with your repository ({} distinct files)",
            output::human_bytes(report.ckpt_only_bytes),
            output::human_bytes(report.shared_bytes),
            report.blobs
        ));
        out.human(&text);
    }
    Ok(0)
}
