//! The `ckpt` command line: parses arguments (clap), turns user input into validated requests,
//! calls the provider, and reports results as human text or JSON Lines with the contract's exit
//! codes (0 ok, 1 failed, 2 usage, 3 partial, 4 refused). It holds no engine logic and never
//! touches a repository itself.

/// Writes to stderr without the panic `eprint!` has when stderr cannot be written (a full disk,
/// a closed descriptor): what cannot be said is dropped, the command's outcome still stands.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, $($arg)*);
        let _ = stderr.flush();
    }};
}

/// [`say!`] with a newline.
macro_rules! sayln {
    ($($arg:tt)*) => {{
        say!($($arg)*);
        say!("\n");
    }};
}

mod args;
mod checkpoints;
mod demo;
mod exit;
mod health;
mod hook;
mod inspect;
mod output;
mod pager;
mod restore;
mod retention;
mod retention_text;
mod trace;
mod ui;
mod watch;
mod wire;

use std::ffi::OsString;

use std::io::{BufRead, IsTerminal, Write};

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::provider::scan::DEFAULT_MAX_FILE_SIZE;

use crate::provider::{self, CkptError};

use crate::records::config::Config;

use crate::records::{validate_new_label, Record};

use args::*;
use checkpoints::{list, show, snapshot};
use exit::Exit;
use health::{audit, doctor};
use inspect::{diff, status, DiffRequest};
use output::Output;
use restore::{preview, restore};
use retention::{confirm_removal, delete, prune, remove};

/// Runs the command line of this process; the exit code to end it with.
pub fn run() -> i32 {
    ENDS_WITH_COMMAND.store(true, std::sync::atomic::Ordering::Relaxed);
    run_with(std::env::args_os().collect())
}

/// Set by [`run`]: this process ends with its command, so the workspace the command opened is
/// left for the exit to free: dropping a large repository's decoded index and object caches
/// would make every hook call wait. Commands run in-process by [`run_with`] (the demo) drop
/// theirs as usual.
static ENDS_WITH_COMMAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The provider for one command, kept in `slot`; leaked when the process ends with the command.
fn for_this_command(
    provider: Box<dyn provider::Provider>,
    slot: &mut Option<Box<dyn provider::Provider>>,
) -> &dyn provider::Provider {
    if ENDS_WITH_COMMAND.load(std::sync::atomic::Ordering::Relaxed) {
        Box::leak(provider)
    } else {
        &**slot.insert(provider)
    }
}

/// Runs `args` (the program name first) as a `ckpt` command line; the exit code it ends with.
pub fn run_with(args: Vec<OsString>) -> i32 {
    // Only an option counts: a path after `--` may well be named `--json`.
    let wants_json = args.iter().take_while(|a| *a != "--").any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                if wants_json {
                    let out = Output::new(true, pager::Paging::decide(true, true));
                    out.record(&wire::HelpRecord {
                        text: error.to_string().trim_end(),
                    });
                } else {
                    let _ = error.print();
                }
                return Exit::Ok.code();
            }
            if wants_json {
                let out = Output::new(true, pager::Paging::decide(true, true));
                out.record(&wire::ErrorRecord {
                    code: "usage",
                    message: error.to_string().trim(),
                });
            }
            let _ = error.print();
            // To an agent, 2 from a hook means "block the tool": a hook line this ckpt does not
            // understand (written for another version) only warns.
            if subcommand_of(&args) == Some("hook") {
                return Exit::Failed.code();
            }
            return Exit::Usage.code();
        }
    };
    let out = Output::new(cli.json, pager::Paging::decide(cli.json, cli.no_pager));
    match execute(&cli, &out) {
        Ok(exit) => exit.code(),
        Err(error) => {
            out.record(&wire::ErrorRecord {
                code: error.code(),
                message: &error.to_string(),
            });
            sayln!("ckpt: error: {error}");
            Exit::of_error(&error).code()
        }
    }
}

/// The subcommand a command line names (its first word that is neither an option nor `-C`'s
/// directory), for deciding how a line that does not parse ends.
fn subcommand_of(args: &[OsString]) -> Option<&str> {
    let mut words = args.iter().skip(1).map(|a| a.to_str());
    while let Some(word) = words.next() {
        match word {
            Some("-C") => {
                words.next();
            }
            Some(option) if option.starts_with('-') => {}
            other => return other,
        }
    }
    None
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
    // Before anything opens the repository (and would block on a FIFO there).
    crate::verbs::refuse_unreadable_packed_refs(cwd)?;
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
        // The config was checked at load: an unreadable age never gets here.
        if let Some(Ok(age)) = retention.max_age_secs() {
            policy.max_age_secs = age;
        }
    }
    policy
}

/// How often retention looks on its own when the config does not say: it is on by default,
/// and a look reads every checkpoint, so not on every snapshot. `CKPT_RETENTION_INTERVAL`
/// (seconds) overrides it.
fn default_retention_interval() -> std::time::Duration {
    let secs = std::env::var("CKPT_RETENTION_INTERVAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    std::time::Duration::from_secs(secs)
}

/// Automatic retention as the config asks: after every snapshot (`auto_prune = true`), never
/// (`false`), or at most every [`default_retention_interval`] (unset).
fn auto_prune(config: &Config) -> Option<provider::settle::AutoPrune> {
    let every = match config.retention.as_ref().and_then(|r| r.auto_prune) {
        Some(false) => return None,
        Some(true) => None,
        None => Some(default_retention_interval()),
    };
    Some(provider::settle::AutoPrune {
        policy: retention_policy(config),
        every,
    })
}

/// What the config adds to every snapshot: auto-prune, and how to start the watch daemon.
fn followups<'a>(provider: &'a dyn provider::Provider, config: &Config) -> provider::settle::Followups<'a> {
    provider::settle::Followups {
        auto_prune: auto_prune(config),
        start_daemon: Some(Box::new(move || {
            watch::start(provider.workdir(), &provider.watch_files())
                .map(drop)
                .map_err(|e| e.to_string())
        })),
    }
}

fn check_label(what: &str, value: &Option<String>) -> Result<(), CkptError> {
    match value {
        Some(text) => validate_new_label(what, text).map_err(CkptError::InvalidInput),
        None => Ok(()),
    }
}

fn execute(cli: &Cli, out: &Output) -> Result<Exit, CkptError> {
    watch::remember_provider_flag(cli.provider);
    match &cli.command {
        Command::Workspace(command) => in_workspace(cli, command, out),
        Command::Demo { keep } => demo::run(*keep, out),
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(*shell, &mut <Cli as clap::CommandFactory>::command(), "ckpt", &mut text);
            let script = String::from_utf8_lossy(&text);
            if out.json {
                out.record(&wire::CompletionsRecord {
                    shell: &shell.to_string(),
                    script: &script,
                });
            } else {
                output::to_stdout(&script);
            }
            Ok(Exit::Ok)
        }
        Command::Man => {
            let mut text = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut text)
                .map_err(|source| CkptError::Io {
                    path: PathBuf::from("<manual page>"),
                    source,
                })?;
            let roff = String::from_utf8_lossy(&text);
            if out.json {
                out.record(&wire::ManRecord { roff: &roff });
            } else {
                output::to_stdout(&roff);
            }
            Ok(Exit::Ok)
        }
        Command::Hook {
            agent,
            fail_closed,
            no_watch,
        } => Ok(hook::run(cli, *agent, *fail_closed, *no_watch)),
        Command::Integrate {
            agent,
            project: _,
            user,
            remove,
            fail_closed,
            dry_run,
            yes,
        } => {
            let request = hook::integrate::Request {
                agent: *agent,
                user: *user,
                remove: *remove,
                fail_closed: *fail_closed,
                dry_run: *dry_run,
                yes: *yes,
            };
            hook::integrate::run(cli, &request, out)
        }
        Command::Gc { grace_seconds, dry_run } => {
            let grace = std::time::Duration::from_secs(*grace_seconds);
            let report = provider::copy::collect_copy_store_garbage(grace, *dry_run, &output::reporter(false))?;
            out.record(&wire::GcRecord {
                live_objects: report.live_objects,
                removed: report.removed,
                removed_bytes: report.removed_bytes,
                kept_young: report.kept_young,
                dry_run: *dry_run,
            });
            out.human(&format!(
                "gc: {} unreferenced object(s), {} {}; {} kept (younger than the grace period); {} live",
                report.removed,
                output::human_bytes(report.removed_bytes),
                if *dry_run { "would be removed" } else { "removed" },
                report.kept_young,
                report.live_objects
            ));
            Ok(Exit::Ok)
        }
    }
}

/// The workspace at `cwd`: its config, and its provider (`--provider`, else the config's, else
/// auto).
fn open_workspace(
    cli: &Cli,
    cwd: &Path,
    show_progress: bool,
) -> Result<(Config, Box<dyn provider::Provider>), CkptError> {
    let config = load_config(cwd)?;
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
    let provider = provider::open(cwd, choice, output::reporter(show_progress), excludes)?;
    Ok((config, provider))
}

/// Runs a command on the workspace at the working directory (or `-C DIR`), through its provider.
fn in_workspace(cli: &Cli, command: &WorkspaceCommand, out: &Output) -> Result<Exit, CkptError> {
    let cwd = working_dir(cli)?;
    let show_progress = !cli.json && std::io::stderr().is_terminal();
    let (config, provider) = open_workspace(cli, &cwd, show_progress)?;
    if let WorkspaceCommand::Watch {
        action: WatchAction::Run { idle_seconds },
    } = command
    {
        let reopened = || {
            open_workspace(cli, &cwd, false)
                .ok()
                .map(|(_, provider)| provider.watch_files().socket())
        };
        return watch::run_daemon(provider, *idle_seconds, &reopened);
    }
    let mut slot = None;
    let provider = for_this_command(provider, &mut slot);
    let limit = |arg: &Option<u64>| arg.or(config.max_file_size).unwrap_or(DEFAULT_MAX_FILE_SIZE);
    match command {
        WorkspaceCommand::Snapshot(args) => snapshot(provider, args, limit(&args.max_file_size), &config, out),
        WorkspaceCommand::List {
            session,
            all,
            trace: false,
            ..
        } => list(provider, session.as_deref(), *all, out),
        WorkspaceCommand::List {
            session, all, dsh_home, ..
        } => trace::timeline(
            provider,
            &cwd,
            session.as_deref(),
            *all,
            trace::LogSource::new(dsh_home, &None),
            out,
        ),
        WorkspaceCommand::Show(args) => show(provider, args, out),
        WorkspaceCommand::Preview(args) => preview(provider, &cwd, args, limit(&args.max_file_size), out),
        WorkspaceCommand::Restore { args, yes } => {
            // The guard asks a running daemon what changed, unless the config turns watching off.
            let watch = config.watch != Some(false);
            restore(provider, &cwd, args, *yes, limit(&args.max_file_size), watch, out)
        }
        WorkspaceCommand::Audit => audit(provider, out),
        WorkspaceCommand::Watch { action } => watch::watch(provider, action, out),
        WorkspaceCommand::Trace { action } => {
            let max_file_size = match action {
                TraceAction::Restore { max_file_size, .. } => limit(max_file_size),
                _ => limit(&None),
            };
            let guard = trace::GuardSettings {
                max_file_size,
                watch: config.watch != Some(false),
            };
            trace::trace(provider, &cwd, action, &guard, out)
        }
        WorkspaceCommand::Ui {
            port,
            no_open,
            all,
            exit_with_parent,
        } => {
            let options = ui::UiOptions {
                port: *port,
                open: !*no_open,
                all: *all,
                exit_with_parent: *exit_with_parent,
            };
            let open_another = || open_workspace(cli, &cwd, false).map(|(_, provider)| provider);
            ui::serve(provider, &open_another, &config, &options)
        }
        WorkspaceCommand::Status { max_file_size } => status(provider, limit(max_file_size), &config, out),
        WorkspaceCommand::Prune {
            dry_run,
            max_per_session,
            quota_bytes,
            max_age,
        } => {
            let mut policy = retention_policy(&config);
            policy.max_per_session = max_per_session.map_or(policy.max_per_session, |max| max as usize);
            policy.quota_bytes = quota_bytes.unwrap_or(policy.quota_bytes);
            policy.max_age_secs = max_age.unwrap_or(policy.max_age_secs);
            prune(provider, &policy, *dry_run, out)
        }
        WorkspaceCommand::Delete { targets, session, yes } => delete(provider, targets, session.as_deref(), *yes, out),
        WorkspaceCommand::Clear { yes } => {
            let all: Vec<Record> = provider.checkpoints(false)?;
            confirm_removal(&all, *yes, wire::Removal::Clear)?;
            remove(provider, &all, wire::Removal::Clear, out)
        }
        WorkspaceCommand::Diff {
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
            diff(provider, &cwd, &request, out)
        }
        WorkspaceCommand::Doctor { fix, complete } => doctor(provider, *fix, *complete, out),
    }
}

/// The one confirmation prompt: asks `question [y/N]` on stderr; `y` or `yes` in any case is a
/// yes, anything else (or no answer) a no.
fn ask_yes(question: &str) -> bool {
    say!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
