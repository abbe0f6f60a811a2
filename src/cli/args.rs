//! The command line, declared once: global options, subcommands and their arguments (clap
//! derive). Completions and the man page are generated from these same definitions. Nothing here
//! runs anything.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "ckpt",
    version,
    about = "Checkpoints of a working directory before every agent mutation, restorable exactly, without touching your git state"
)]
pub(super) struct Cli {
    /// Run as if started in DIR (like git -C)
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub(super) dir: Option<PathBuf>,
    /// JSON Lines on stdout (one object per line, each with "v":1 and "type"); human text on stderr
    #[arg(long, global = true)]
    pub(super) json: bool,
    /// Never page long output (diff, a long list); otherwise a terminal gets $CKPT_PAGER, $PAGER
    /// or less -FRX
    #[arg(long, global = true)]
    pub(super) no_pager: bool,
    /// git (checkpoints in the repository), copy (a private store outside the workspace), or
    /// auto: git inside a repository whose HEAD is born, copy otherwise
    #[arg(long, global = true, value_enum)]
    pub(super) provider: Option<ProviderArg>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    #[command(flatten)]
    Workspace(WorkspaceCommand),
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
    /// Run as a coding agent's hook: reads its hook event (JSON on stdin) and takes a checkpoint
    /// before each tool call that changes files or runs a command (`ckpt integrate` installs it)
    Hook {
        #[arg(value_enum)]
        agent: Agent,
        /// Block the tool call when no checkpoint could be taken (default: let it run and say so)
        #[arg(long)]
        fail_closed: bool,
        /// Scan in full instead of asking the workspace's watch daemon what changed
        #[arg(long)]
        no_watch: bool,
    },
    /// Add ckpt's hooks to a coding agent's settings (or remove them), merged with what is there;
    /// shows the change first and keeps a backup
    Integrate {
        #[arg(value_enum)]
        agent: Agent,
        /// This project's settings (the default): the repository's top level, or the directory
        #[arg(long, conflicts_with = "user")]
        project: bool,
        /// Your user settings: every project of that agent
        #[arg(long)]
        user: bool,
        /// Remove ckpt's hooks instead (other hooks are kept)
        #[arg(long)]
        remove: bool,
        /// The hooks block a tool call when no checkpoint could be taken
        #[arg(long, conflicts_with = "remove")]
        fail_closed: bool,
        /// Only show the change
        #[arg(long, conflicts_with = "yes")]
        dry_run: bool,
        /// Apply without asking
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// The commands that act on the workspace ckpt is started in (or `-C DIR`).
#[derive(Subcommand, Debug)]
pub(super) enum WorkspaceCommand {
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
        /// Also the tool calls of this workspace's harness sessions, in one time order
        #[arg(long)]
        trace: bool,
        /// With --trace: the harness's home (default: $DSH_HOME, else ~/.dsh)
        #[arg(long, requires = "trace")]
        dsh_home: Option<PathBuf>,
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
    /// Remove checkpoints by retention policy: the newest per session, an age, then a byte quota
    Prune {
        /// Only say what would be removed, and why
        #[arg(long)]
        dry_run: bool,
        /// Newest checkpoints kept per session
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_per_session: Option<u64>,
        /// Soft cap on the incremental bytes of all kept checkpoints
        #[arg(long)]
        quota_bytes: Option<u64>,
        /// Remove checkpoints whose state was replaced longer ago than this (30d, 12h, 2w; 0 keeps every age)
        #[arg(long, value_parser = crate::records::config::parse_age)]
        max_age: Option<u64>,
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
    /// A local web view: the timeline of checkpoints, line diffs, preview and guarded restore
    Ui {
        /// Port on 127.0.0.1 (default: any free one)
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Print the address only; do not start a browser
        #[arg(long)]
        no_open: bool,
        /// Every worktree of this repository, not only this one
        #[arg(long)]
        all: bool,
        /// Stop when the process that started this one exits (for harness adapters)
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// What an agent's tool calls changed, replayed from the DeepSeek Harness's session logs
    Trace {
        #[command(subcommand)]
        action: TraceAction,
    },
    /// The filesystem-watch daemon that lets a snapshot skip walking an unchanged worktree
    Watch {
        #[command(subcommand)]
        action: WatchAction,
    },
    /// Check this workspace's ckpt state (read-only); exits 1 on any problem
    Audit,
    /// Report problems in this workspace's ckpt state; --fix repairs them
    Doctor {
        /// Repair: rebuild or re-pin records, quarantine unusable checkpoints, remove temp files
        /// an interrupted restore provably left and those a killed pack write left in
        /// objects/pack (untouched for a day), and roll that restore back (only the paths it
        /// was changing, and only where nothing changed since)
        #[arg(long)]
        fix: bool,
        /// With --fix: finish an interrupted restore instead of rolling it back
        #[arg(long, requires = "fix")]
        complete: bool,
    },
}

#[derive(Args, Debug)]
pub(super) struct SnapshotArgs {
    #[arg(long)]
    pub(super) session: Option<String>,
    #[arg(long)]
    pub(super) turn: Option<u64>,
    #[arg(long)]
    pub(super) step: Option<u64>,
    /// What is about to mutate the workspace (e.g. the tool name)
    #[arg(long)]
    pub(super) trigger: Option<String>,
    /// auto, manual or guard
    #[arg(long, value_enum, default_value_t = KindArg::Manual)]
    pub(super) kind: KindArg,
    /// Files larger than this many bytes are skipped and reported
    #[arg(long)]
    pub(super) max_file_size: Option<u64>,
    /// Start the workspace's watch daemon if none runs (a running one is asked what changed
    /// by every snapshot anyway); falls back to a full scan whenever it cannot vouch for the
    /// answer. Config: `watch = true` (start one), `watch = false` (never ask one)
    #[arg(long, conflicts_with = "no_watch")]
    pub(super) watch: bool,
    /// Scan in full even if a watch daemon runs or the config says `watch = true`
    #[arg(long)]
    pub(super) no_watch: bool,
    /// The first checkpoint of its turn (for harness adapters): when nothing changed since the
    /// newest checkpoint but that is another session's or turn's, one is still made (same
    /// tree, nothing new stored), so `turn:T` names the state before turn T
    #[arg(long, requires = "turn")]
    pub(super) opens_turn: bool,
}

/// `ckpt trace ...`
#[derive(Subcommand, Debug)]
pub(super) enum TraceAction {
    /// The harness sessions of this workspace and, per session, its tool calls and which files
    /// each can rebuild
    List {
        /// Only the session whose id starts with this
        #[arg(long)]
        session: Option<String>,
        /// The harness's home (default: $DSH_HOME, else ~/.dsh)
        #[arg(long)]
        dsh_home: Option<PathBuf>,
        /// Read one session's events from this file (JSON Lines or zstd, the harness's format)
        /// instead of its log under the harness's home; the other sessions are still read there
        #[arg(long, value_name = "FILE")]
        session_log: Option<PathBuf>,
    },
    /// What a tool call changed (NODE alone), or the files as the trace knows them after NODE
    /// against another node or a checkpoint (`latest`, an id prefix, `turn:T`...)
    Diff {
        /// `trace:<session prefix>:<turn>.<step>` or `trace:<session prefix>:<call id>`
        node: String,
        /// Another node, or a checkpoint target
        other: Option<String>,
        /// Session for a `turn:` checkpoint target
        #[arg(long)]
        session: Option<String>,
        /// The harness's home (default: $DSH_HOME, else ~/.dsh)
        #[arg(long)]
        dsh_home: Option<PathBuf>,
        /// Read one session's events from this file (JSON Lines or zstd, the harness's format)
        /// instead of its log under the harness's home; the other sessions are still read there
        #[arg(long, value_name = "FILE")]
        session_log: Option<PathBuf>,
    },
    /// Put back the files the trace rebuilds exactly as they were after NODE (never deletes);
    /// takes a guard checkpoint first, like every restore
    Restore {
        /// `trace:<session prefix>:<turn>.<step>` or `trace:<session prefix>:<call id>`
        node: String,
        /// Confirm without asking
        #[arg(long, short = 'y')]
        yes: bool,
        /// Only say which files it would put back and which it cannot; change nothing
        #[arg(long, conflicts_with = "yes")]
        dry_run: bool,
        /// Files larger than this many bytes are not captured by the guard (so not written)
        #[arg(long)]
        max_file_size: Option<u64>,
        /// The harness's home (default: $DSH_HOME, else ~/.dsh)
        #[arg(long)]
        dsh_home: Option<PathBuf>,
        /// Read one session's events from this file (JSON Lines or zstd, the harness's format)
        /// instead of its log under the harness's home; the other sessions are still read there
        #[arg(long, value_name = "FILE")]
        session_log: Option<PathBuf>,
        /// Only these paths, after `--`
        #[arg(last = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
}

/// `ckpt watch ...`
#[derive(Subcommand, Debug)]
pub(super) enum WatchAction {
    /// Start the workspace's watch daemon in the background (no-op if one runs)
    Start,
    /// Stop it
    Stop,
    /// Its token, watched directories, events seen and the last fallback reason
    Status,
    /// Run the daemon in the foreground (what `start` runs)
    #[command(hide = true)]
    Run {
        /// Exit after this many seconds without a request
        #[arg(long, default_value_t = 1800)]
        idle_seconds: u64,
    },
}

#[derive(Args, Debug)]
pub(super) struct TargetArgs {
    /// `latest`, an id prefix, `turn:T` or `turn:T.S`
    pub(super) target: String,
    /// Session for `turn:` targets and `latest`
    #[arg(long)]
    pub(super) session: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct RestoreArgs {
    #[command(flatten)]
    pub(super) target: TargetArgs,
    /// Also remove files created after the checkpoint (only ones the guard captured)
    #[arg(long)]
    pub(super) exact: bool,
    /// Files larger than this many bytes are not captured by the guard
    #[arg(long)]
    pub(super) max_file_size: Option<u64>,
    /// Only these paths (files or directories), after `--`
    #[arg(last = true, value_name = "PATH")]
    pub(super) paths: Vec<PathBuf>,
}

/// Runs the CLI with the process arguments and returns the exit code.
/// `--provider`: where checkpoints live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ProviderArg {
    Auto,
    Git,
    Copy,
}

/// `--kind` of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum KindArg {
    Auto,
    Manual,
    Guard,
}

/// An agent with a documented hook that runs before a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Code (`claude`)
    Claude,
    /// OpenAI Codex CLI (`codex`)
    Codex,
    /// Google Gemini CLI (`gemini`)
    Gemini,
}
