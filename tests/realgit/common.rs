//! Test harness for real repositories: builds them with the real `git` binary in isolated temp
//! dirs (no global or system config, no identity unless a test sets one), runs the `ckpt` binary,
//! and fingerprints everything of the user's git state that ckpt must never change.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const CKPT: &str = env!("CARGO_BIN_EXE_ckpt");

pub struct TestRepo {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
}

/// Any watch daemon a test left running in its workspace is stopped before the temp dir goes:
/// removing the directories while the daemon writes its cookies there can fail half way, and
/// then the daemon keeps watching what is left until its idle timeout (found after CI runs: a
/// hook test's daemon outlived it by 30 minutes).
impl Drop for TestRepo {
    fn drop(&mut self) {
        let sockets = |dir: PathBuf| -> bool {
            let mut pending = vec![(dir, 0)];
            while let Some((dir, depth)) = pending.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else { continue };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.file_name().is_some_and(|n| n == "watch.sock") {
                        return true;
                    }
                    if depth < 5 && entry.file_type().is_ok_and(|t| t.is_dir()) {
                        pending.push((path, depth + 1));
                    }
                }
            }
            false
        };
        if sockets(self.root.join(".git/ckpt")) || sockets(self.home.join(".local/share/ckpt")) {
            let mut cmd = self.ckpt_command();
            cmd.args(["watch", "stop"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let _ = cmd.status();
        }
        // A daemon a hook started on demand just before the test ended may not have its socket
        // yet: found by its command line (`ckpt -C <this worktree> watch run`), it is ended
        // too (seen after a CI run: the removal failed half way, HEAD stayed, and the daemon
        // ran on until its idle timeout).
        for pid in daemons_in(&self.root) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            let started = std::time::Instant::now();
            while !process_ended(pid) && started.elapsed() < std::time::Duration::from_secs(5) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// The watch daemons running for the worktree at `root`, by their command lines.
pub fn daemons_in(root: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let root = root.as_os_str().as_bytes();
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.windows(2).any(|w| w[0] == b"-C" && w[1] == root)
                && args.windows(2).any(|w| w[0] == b"watch" && w[1] == b"run")
        })
        .collect()
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub json: Vec<Value>,
}

impl Run {
    pub fn one(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.json.iter().filter(|v| v["type"] == kind).collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {kind} record in {:?}\nstderr: {}",
            self.json,
            self.stderr
        );
        found[0]
    }
}

pub fn isolate(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("LC_ALL", "C")
        .env("TZ", "UTC");
}

/// Runs a prepared `ckpt` command and parses its JSON Lines.
pub fn run_ckpt(mut cmd: Command) -> Run {
    let out = cmd.output().expect("run ckpt");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
    }
}

/// Makes a FIFO at `path` (no reader, no writer: anything that opens it to read waits).
pub fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// `ckpt --json ARGS`, killed after 30 s: a test of something that once hung (a FIFO where a
/// file was expected) fails instead of hanging the suite.
pub fn ckpt_json_within_30s(repo: &TestRepo, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new("timeout");
    isolate(&mut cmd, &repo.home);
    cmd.current_dir(&repo.root).arg("30").arg(CKPT).arg("--json").args(args);
    let run = run_ckpt(cmd);
    assert_ne!(run.code, 124, "ckpt {args:?} hung");
    run
}

/// Moves the mtime of every file under `root` (`.git` aside) written in the last 5 s to 10 s in
/// the past (older files are left alone: their stat, ctime included, stays what a cache saw), then lets git record
/// the new stat data in the index (`git PRE... update-index -q --refresh`), so nothing shares the
/// second of a later stat cache or index write: what a 1.1 s sleep did, without the wait.
pub fn settle_worktree(root: &Path, pre: &[&str]) {
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    let since_epoch = past.duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    let stamp = rustix::fs::Timespec {
        tv_sec: since_epoch.as_secs() as i64,
        tv_nsec: i64::from(since_epoch.subsec_nanos()),
    };
    let times = rustix::fs::Timestamps {
        last_access: stamp,
        last_modification: stamp,
    };
    fn visit(dir: &Path, times: &rustix::fs::Timestamps) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let recent = std::fs::symlink_metadata(&path)
                .and_then(|meta| meta.modified())
                .is_ok_and(|mtime| mtime.elapsed().is_ok_and(|age| age.as_secs() < 5));
            if recent {
                rustix::fs::utimensat(rustix::fs::CWD, &path, times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .expect("set file times");
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                visit(&path, times);
            }
        }
    }
    visit(root, &times);
    if root.join(".git").exists() {
        // A refresh that finds entries needing an update still refreshes the rest.
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(pre)
            .args(["update-index", "-q", "--refresh"])
            .output()
            .expect("git update-index --refresh");
    }
}

/// Runs `git ARGS` in the repository with `input` on stdin; its trimmed stdout.
pub fn git_stdin(repo: &TestRepo, args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .current_dir(&repo.root)
        .env("HOME", &repo.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn git");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    let out = child.wait_with_output().expect("git");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A path given as bytes, for names that are not UTF-8.
pub fn bpath(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

impl TestRepo {
    /// An empty temp dir with an isolated HOME, not yet a repository.
    pub fn bare_dir() -> TestRepo {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("work");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&root).expect("mkdir work");
        std::fs::create_dir_all(&home).expect("mkdir home");
        TestRepo { _tmp: tmp, root, home }
    }

    /// A repository with one commit of a few files and an identity only for the setup commits.
    pub fn new() -> TestRepo {
        let repo = TestRepo::bare_dir();
        repo.git(&["init", "-q", "-b", "main"]);
        repo.write("README.md", b"# project\n");
        repo.write("src/lib.rs", b"pub fn answer() -> u32 { 42 }\n");
        repo.write("src/util/mod.rs", b"// util\n");
        repo.write(".gitignore", b"target/\n*.log\n");
        repo.commit_all("initial");
        repo
    }

    /// Adds `upstream` as a submodule at `name` (a local clone, as git allows only when asked).
    pub fn add_submodule(&self, upstream: &TestRepo, name: &str) {
        self.git(&[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            upstream.root.to_str().expect("a UTF-8 temp path"),
            name,
        ]);
    }

    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }

    pub fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        isolate(&mut cmd, &self.home);
        cmd.current_dir(dir).args(args);
        let out = cmd.output().expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn git(&self, args: &[&str]) -> String {
        self.git_in(&self.root, args)
    }

    /// The tree git itself would write for the worktree now (tracked + untracked, not ignored),
    /// built in a throwaway index so the repository's own index is untouched.
    pub fn worktree_tree_by_git(&self) -> String {
        let scratch = tempfile::tempdir().expect("tempdir");
        let index = scratch.path().join("index");
        let own_index = self.git_dir().join("index");
        if own_index.exists() {
            std::fs::copy(&own_index, &index).expect("copy index");
        }
        for args in [&["add", "-A"][..], &["write-tree"][..]] {
            let mut cmd = Command::new("git");
            isolate(&mut cmd, &self.home);
            let out = cmd
                .current_dir(&self.root)
                .env("GIT_INDEX_FILE", &index)
                .args(args)
                .output()
                .expect("run git");
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if args[0] == "write-tree" {
                return String::from_utf8_lossy(&out.stdout).trim().to_owned();
            }
        }
        unreachable!("write-tree returns above")
    }

    pub fn git_raw(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("git");
        isolate(&mut cmd, &self.home);
        cmd.current_dir(&self.root).args(args);
        cmd.output().expect("run git")
    }

    /// Commits everything with a one-off identity (the repo itself keeps none).
    pub fn commit_all(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
            "commit",
            "-q",
            "-m",
            message,
        ]);
    }

    /// A `ckpt` command in the worktree root with the isolated environment.
    pub fn ckpt_command(&self) -> Command {
        let mut cmd = Command::new(CKPT);
        isolate(&mut cmd, &self.home);
        cmd.current_dir(&self.root);
        cmd
    }

    pub fn ckpt_in(&self, dir: &Path, args: &[&OsStr]) -> Run {
        let mut cmd = self.ckpt_command();
        cmd.current_dir(dir).args(args);
        run_ckpt(cmd)
    }
    pub fn ckpt(&self, args: &[&str]) -> Run {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.ckpt_in(&self.root, &args)
    }

    /// `ckpt --json ARGS`, asserting exit code `code`.
    pub fn ckpt_json(&self, args: &[&str], code: i32) -> Run {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let run = self.ckpt(&full);
        assert_eq!(
            run.code, code,
            "ckpt {args:?}\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        for line in &run.json {
            assert_eq!(line["v"], 1, "every JSON line carries v:1: {line}");
            assert!(line["type"].is_string(), "every JSON line has a type: {line}");
        }
        run
    }

    /// Takes a snapshot and returns its full id.
    pub fn snapshot(&self, extra: &[&str]) -> String {
        let mut args = vec!["snapshot"];
        args.extend_from_slice(extra);
        let run = self.ckpt_json(&args, 0);
        run.one("snapshot")["id"].as_str().expect("id").to_owned()
    }

    /// Writes ckpt's config file for this repository (`.git/ckpt/config.toml`).
    pub fn set_config(&self, text: &str) {
        let config = self.common_dir().join("ckpt/config.toml");
        std::fs::create_dir_all(config.parent().expect("config dir")).expect("mkdir");
        std::fs::write(&config, text).expect("write config");
    }

    pub fn write(&self, rel: impl AsRef<Path>, content: &[u8]) {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, content).expect("write");
    }

    pub fn read(&self, rel: impl AsRef<Path>) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).expect("read")
    }

    pub fn symlink(&self, target: impl AsRef<Path>, rel: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, self.root.join(rel)).expect("symlink");
    }

    pub fn chmod(&self, rel: impl AsRef<Path>, mode: u32) {
        std::fs::set_permissions(self.root.join(rel), std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    pub fn remove(&self, rel: impl AsRef<Path>) {
        let path = self.root.join(rel);
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        if meta.is_dir() {
            std::fs::remove_dir_all(&path).expect("rm -r");
        } else {
            std::fs::remove_file(&path).expect("rm");
        }
    }

    /// [`settle_worktree`] for this repository's worktree.
    pub fn settle_with(&self, pre: &[&str]) {
        settle_worktree(&self.root, pre);
    }

    /// [`settle_worktree`] with no extra git options.
    pub fn settle(&self) {
        self.settle_with(&[]);
    }

    pub fn git_dir(&self) -> PathBuf {
        PathBuf::from(self.git(&["rev-parse", "--absolute-git-dir"]).trim())
    }

    /// Turns every pack of the repository into loose objects (ckpt writes a checkpoint's
    /// objects as packs): for tests of what ckpt does with a loose object a user's git left.
    pub fn loosen(&self) {
        let pack_dir = self.common_dir().join("objects/pack");
        let aside = tempfile::tempdir().expect("a temp dir");
        let Ok(entries) = std::fs::read_dir(&pack_dir) else {
            return;
        };
        let mut packs = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            if name.ends_with(".pack") {
                let moved = aside.path().join(&name);
                std::fs::rename(&path, &moved).expect("pack moved aside");
                packs.push(moved);
            } else if name.starts_with("pack-") {
                std::fs::remove_file(&path).expect("pack file removed");
            }
        }
        for pack in packs {
            let input = std::fs::File::open(&pack).expect("pack");
            let out = Command::new("git")
                .current_dir(&self.root)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(["unpack-objects", "-q"])
                .stdin(input)
                .output()
                .expect("git unpack-objects");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// The pack (as `objects/pack/pack-<name>.pack`, relative to the common dir) that holds
    /// object `id`.
    pub fn pack_holding(&self, id: &str) -> String {
        self.pack_holding_all(id)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no pack holds {id}"))
    }

    /// Every pack holding `id`, as `objects/pack/pack-<hex>.pack`, sorted.
    pub fn pack_holding_all(&self, id: &str) -> Vec<String> {
        let mut holding = Vec::new();
        let pack_dir = self.common_dir().join("objects/pack");
        for entry in std::fs::read_dir(&pack_dir).expect("a pack directory").flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|ext| ext != "idx") {
                continue;
            }
            let index = std::fs::File::open(&path).expect("index");
            let out = Command::new("git")
                .current_dir(&self.root)
                .args(["show-index"])
                .stdin(index)
                .output()
                .expect("git show-index");
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|line| line.split(' ').nth(1) == Some(id))
            {
                let name = path.with_extension("pack");
                holding.push(format!("objects/pack/{}", name.file_name().unwrap().to_string_lossy()));
            }
        }
        holding.sort();
        holding
    }

    pub fn common_dir(&self) -> PathBuf {
        let text = self.git(&["rev-parse", "--git-common-dir"]);
        let path = PathBuf::from(text.trim());
        if path.is_absolute() {
            path
        } else {
            self.root.join(path)
        }
    }

    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint_of(self, &self.root)
    }

    /// Every entry under the worktree except `.git`, byte-exact, ignored files included.
    pub fn worktree(&self) -> BTreeMap<Vec<u8>, Entry> {
        worktree_state(&self.root)
    }

    pub fn ckpt_refs(&self) -> Vec<String> {
        self.git(&["for-each-ref", "--format=%(refname)", "refs/ckpt/"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File { content: Vec<u8>, exec: bool },
    Link(Vec<u8>),
    Dir,
}

/// Writes `count` files spread over `dirs` directories, `d<i % dirs>/f<i>.txt`, each holding
/// `"<label> <i>\n"`.
pub fn write_spread(repo: &TestRepo, count: usize, dirs: usize, label: &str) {
    for i in 0..count {
        repo.write(spread_path(i, dirs), format!("{label} {i}\n").as_bytes());
    }
}

/// [`write_spread`] files as "original", a checkpoint of them (its id is returned), then the
/// same files rewritten as "agent": a restore of that checkpoint rewrites every one.
pub fn checkpoint_then_edit_spread(repo: &TestRepo, count: usize, dirs: usize) -> String {
    write_spread(repo, count, dirs, "original");
    let id = repo.snapshot(&[]);
    write_spread(repo, count, dirs, "agent");
    id
}

/// The path [`write_spread`] gives file `i`.
pub fn spread_path(i: usize, dirs: usize) -> String {
    format!("d{}/f{i}.txt", i % dirs)
}

pub fn worktree_state(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("dir entry");
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .as_os_str()
                .as_bytes()
                .to_vec();
            if rel == b".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            if !(meta.is_file() || meta.is_dir() || meta.file_type().is_symlink()) {
                continue; // sockets, fifos, devices: never captured, not content
            }
            let value = if meta.file_type().is_symlink() {
                Entry::Link(
                    std::fs::read_link(&path)
                        .expect("readlink")
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else if meta.is_dir() {
                pending.push(path.clone());
                Entry::Dir
            } else {
                Entry::File {
                    content: std::fs::read(&path).expect("read"),
                    exec: meta.permissions().mode() & 0o100 != 0,
                }
            };
            out.insert(rel, value);
        }
    }
    out
}

/// The user's git state: anything here changing after a ckpt command is a bug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub head_file: Vec<u8>,
    pub head: String,
    pub index: Option<Vec<u8>>,
    pub refs: String,
    pub reflogs: BTreeMap<PathBuf, Vec<u8>>,
    pub stash: String,
    pub config: Vec<u8>,
    pub hooks: BTreeMap<PathBuf, Vec<u8>>,
    pub status: Vec<u8>,
}

fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.insert(
                    path.strip_prefix(dir).expect("prefix").to_path_buf(),
                    std::fs::read(&path).expect("read"),
                );
            }
        }
    }
    out
}

pub fn fingerprint_of(repo: &TestRepo, worktree: &Path) -> Fingerprint {
    let git_dir = PathBuf::from(repo.git_in(worktree, &["rev-parse", "--absolute-git-dir"]).trim());
    let common = {
        let text = repo.git_in(worktree, &["rev-parse", "--git-common-dir"]);
        let path = PathBuf::from(text.trim());
        if path.is_absolute() {
            path
        } else {
            worktree.join(path)
        }
    };
    let refs = repo
        .git_in(
            worktree,
            &["for-each-ref", "--format=%(refname) %(objectname) %(symref)"],
        )
        .lines()
        .filter(|l| !l.starts_with("refs/ckpt/"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut status_cmd = Command::new("git");
    isolate(&mut status_cmd, &repo.home);
    // GIT_OPTIONAL_LOCKS=0 keeps `git status` itself from refreshing (writing) the index.
    status_cmd.current_dir(worktree).env("GIT_OPTIONAL_LOCKS", "0").args([
        "status",
        "--porcelain=v2",
        "-z",
        "--untracked-files=all",
    ]);
    let status = status_cmd.output().expect("git status").stdout;
    let mut reflogs = files_under(&common.join("logs"));
    reflogs.extend(
        files_under(&git_dir.join("logs"))
            .into_iter()
            .map(|(p, v)| (PathBuf::from("wt").join(p), v)),
    );
    Fingerprint {
        head_file: std::fs::read(git_dir.join("HEAD")).expect("HEAD"),
        // An unborn HEAD (a new repository, an orphan branch) has no commit to name.
        head: {
            let mut cmd = Command::new("git");
            isolate(&mut cmd, &repo.home);
            cmd.current_dir(worktree)
                .args(["rev-parse", "--verify", "-q", "HEAD^{commit}"]);
            String::from_utf8_lossy(&cmd.output().expect("git rev-parse").stdout)
                .trim()
                .to_owned()
        },
        index: std::fs::read(git_dir.join("index")).ok(),
        refs,
        reflogs,
        stash: repo.git_in(worktree, &["stash", "list"]),
        config: std::fs::read(common.join("config")).expect("config"),
        hooks: files_under(&common.join("hooks")),
        status,
    }
}

impl Fingerprint {
    /// Everything but the worktree status (which a restore is allowed to change).
    pub fn without_status(&self) -> Fingerprint {
        Fingerprint {
            status: Vec::new(),
            ..self.clone()
        }
    }
}

pub fn ids(run: &Run, kind: &str, key: &str) -> Vec<String> {
    run.json
        .iter()
        .filter(|v| v["type"] == kind)
        .map(|v| v[key].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Decodes a JSON path (string or {"bytes_b64"}) to bytes.
pub fn json_path(value: &Value) -> Vec<u8> {
    use base64::Engine as _;
    match value {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Object(map) => base64::engine::general_purpose::STANDARD
            .decode(map["bytes_b64"].as_str().expect("bytes_b64"))
            .expect("base64"),
        other => panic!("not a path: {other}"),
    }
}

pub fn json_paths(value: &Value) -> Vec<Vec<u8>> {
    value.as_array().expect("array").iter().map(json_path).collect()
}

/// The process has ended (a zombie waiting for its reaper counts as ended).
pub fn process_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}
