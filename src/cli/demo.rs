//! `ckpt demo`: a guided run in a scratch repository it creates itself — snapshot, agent-like
//! edits, preview, restore, and undo through the guard — checking every step and that the scratch
//! repository's own git state (HEAD, index, refs) never changed. Here the demo plays the user, so
//! it runs `git` to set the scratch repository up; the engine itself never does.

use super::exit::Exit;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::output::Output;
use crate::provider::{self, CkptError};
use crate::records::Kind;

/// Why the demo stopped: an error of ckpt's, or one of its own setup steps or checks failing
/// (exit 1 with the JSON code `demo_failed`, not "refused").
enum DemoError {
    Ckpt(CkptError),
    Failed(String),
}

impl From<CkptError> for DemoError {
    fn from(error: CkptError) -> Self {
        DemoError::Ckpt(error)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CkptError + '_ {
    move |source| CkptError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<String, DemoError> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=ckpt demo", "-c", "user.email=demo@example.invalid"])
        .args(["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"])
        .args(args)
        .output()
        .map_err(|e| CkptError::Io {
            path: PathBuf::from("git"),
            source: e,
        })?;
    if !out.status.success() {
        return Err(DemoError::Failed(format!(
            "demo setup: git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write(root: &Path, rel: &str, content: &str) -> Result<(), DemoError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    Ok(std::fs::write(&path, content).map_err(io(&path))?)
}

/// Every file under `root` except `.git`, with its content.
fn files(root: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>, DemoError> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                let content = std::fs::read(&path).map_err(io(&path))?;
                out.insert(path.strip_prefix(root).unwrap_or(&path).to_path_buf(), content);
            }
        }
    }
    Ok(out)
}

/// What of the user's git state the demo watches: HEAD, raw index bytes, non-ckpt refs.
fn git_state(root: &Path) -> Result<(String, Vec<u8>, String), DemoError> {
    let index = root.join(".git/index");
    let refs: String = git(root, &["for-each-ref", "--format=%(refname) %(objectname)"])?
        .lines()
        .filter(|l| !l.starts_with("refs/ckpt/"))
        .collect::<Vec<_>>()
        .join("\n");
    Ok((
        git(root, &["rev-parse", "HEAD"])?,
        std::fs::read(&index).map_err(io(&index))?,
        refs,
    ))
}

fn step(out: &Output, title: &str) {
    out.human(&format!("\n== {title}"));
}

fn run_ckpt(out: &Output, root: &Path, args: &[&str]) -> i32 {
    out.human(&format!("$ ckpt {}", args.join(" ")));
    let mut full: Vec<OsString> = vec!["ckpt".into(), "-C".into(), root.into()];
    if out.json {
        full.push("--json".into());
    }
    full.extend(args.iter().map(OsString::from));
    super::run_with(full)
}

fn check(out: &Output, ok: bool, what: &str) -> Result<(), DemoError> {
    if ok {
        out.human(&format!("   ok: {what}"));
        Ok(())
    } else {
        Err(DemoError::Failed(format!("demo check failed: {what}")))
    }
}

pub fn run(keep: bool, out: &Output) -> Result<Exit, CkptError> {
    match steps(keep, out) {
        Ok(exit) => Ok(exit),
        Err(DemoError::Ckpt(error)) => Err(error),
        Err(DemoError::Failed(why)) => {
            out.record(&super::wire::ErrorRecord {
                code: "demo_failed",
                message: &why,
            });
            sayln!("ckpt: error: {why}");
            Ok(Exit::Failed)
        }
    }
}

fn steps(keep: bool, out: &Output) -> Result<Exit, DemoError> {
    let scratch = tempfile::Builder::new()
        .prefix("ckpt-demo-")
        .tempdir()
        .map_err(io(Path::new("temp dir")))?;
    let root = scratch.path().join("project");
    std::fs::create_dir_all(&root).map_err(io(&root))?;

    step(out, "1. A scratch repository with committed, staged and untracked work");
    git(&root, &["init", "-q", "-b", "main"])?;
    write(&root, "README.md", "# demo project\n")?;
    write(&root, "src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n")?;
    write(&root, "docs/guide.md", "How to use the demo.\n")?;
    write(&root, ".gitignore", "target/\n")?;
    git(&root, &["add", "-A"])?;
    git(&root, &["commit", "-q", "-m", "initial"])?;
    write(
        &root,
        "src/main.rs",
        "fn main() {\n    println!(\"hello, staged\");\n}\n",
    )?;
    git(&root, &["add", "src/main.rs"])?;
    write(&root, "notes.txt", "my untracked notes, not yet committed\n")?;
    write(&root, "target/build.out", "ignored build output\n")?;
    out.human(&format!("   {}", root.display()));
    let git_before = git_state(&root)?;
    let original = files(&root)?;

    step(out, "2. The agent is about to edit: take a checkpoint first");
    let code = run_ckpt(
        out,
        &root,
        &[
            "snapshot",
            "--session",
            "demo",
            "--turn",
            "1",
            "--step",
            "1",
            "--trigger",
            "edit_file",
            "--kind",
            "auto",
        ],
    );
    check(out, code == 0, "snapshot succeeded")?;

    step(out, "3. The agent ruins the afternoon");
    write(&root, "src/main.rs", "fn main() { todo!() }\n")?;
    std::fs::remove_file(root.join("notes.txt")).map_err(io(&root))?;
    std::fs::remove_dir_all(root.join("docs")).map_err(io(&root))?;
    write(&root, "scratch/agent-junk.txt", "junk the agent left behind\n")?;
    out.human("   overwrote src/main.rs, deleted notes.txt and docs/, created scratch/agent-junk.txt");
    let ruined = files(&root)?;
    run_ckpt(out, &root, &["list"]);

    step(out, "4. Preview the rewind (read-only)");
    let code = run_ckpt(out, &root, &["preview", "turn:1", "--session", "demo", "--exact"]);
    check(out, code == 0 && files(&root)? == ruined, "preview changed nothing")?;

    step(
        out,
        "5. Restore, exactly; a guard checkpoint of the ruined state is taken first",
    );
    let code = run_ckpt(
        out,
        &root,
        &["restore", "turn:1", "--session", "demo", "--exact", "--yes"],
    );
    check(out, code == 0, "restore succeeded")?;
    check(
        out,
        files(&root)? == original,
        "every file is byte-for-byte as before the agent, ignored output untouched",
    )?;

    step(out, "6. Changed your mind? Restoring the guard undoes the restore");
    let provider = provider::open(
        &root,
        provider::ProviderChoice::Git,
        crate::cli::output::reporter(false),
        None,
    )?;
    let guard = provider
        .checkpoints(false)?
        .into_iter()
        .rev()
        .find(|r| r.kind == Kind::Guard)
        .ok_or_else(|| CkptError::NotFound("the restore left no guard checkpoint".into()))?;
    let code = run_ckpt(out, &root, &["restore", guard.short(), "--exact", "--yes"]);
    check(
        out,
        code == 0 && files(&root)? == ruined,
        "the worktree is back to the agent's version",
    )?;

    step(out, "7. Your git state was never touched");
    check(
        out,
        git_state(&root)? == git_before,
        "HEAD, the index (staged change intact) and every branch are unchanged",
    )?;
    out.human(&format!(
        "   checkpoints live in refs/ckpt/: {}",
        git(&root, &["for-each-ref", "--format=%(refname)", "refs/ckpt/"])?
            .lines()
            .count()
    ));

    let kept = keep.then(|| scratch.keep().join("project"));
    if let Some(kept) = &kept {
        out.human(&format!("\nscratch repository kept at {}", kept.display()));
    }
    out.record(&super::wire::DemoRecord {
        ok: true,
        kept: kept
            .as_ref()
            .map(|path| crate::records::WirePath::from_bytes(path.as_os_str().as_encoded_bytes())),
    });
    out.human("\ndemo finished: every check passed");
    Ok(Exit::Ok)
}
