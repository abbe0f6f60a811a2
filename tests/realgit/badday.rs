//! The bad day: repository shapes an agent leaves behind (names git reserves, an orphan
//! checkout, an unreadable directory, a recreated worktree) and what ckpt must still promise on
//! them, checked against git itself as the oracle.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::common::*;

/// The paths a snapshot record names as skipped.
fn skipped_paths(snapshot: &serde_json::Value) -> Vec<Vec<u8>> {
    snapshot["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| json_path(&s["path"]))
        .collect()
}

/// Every path `git status --porcelain -uall` lists, as bytes.
fn status_paths(repo: &TestRepo) -> BTreeSet<Vec<u8>> {
    let out = repo.git_raw(&["status", "--porcelain", "-uall", "-z"]);
    assert!(
        out.status.success(),
        "git status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|entry| entry.len() > 3)
        .map(|entry| entry[3..].to_vec())
        .collect()
}

/// Every file path a checkpoint's tree holds, as bytes.
fn tree_paths(repo: &TestRepo, id: &str) -> BTreeSet<Vec<u8>> {
    let out = repo.git_raw(&["ls-tree", "-r", "-z", "--name-only", id]);
    assert!(
        out.status.success(),
        "ls-tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Invariant (a) of the matrix: each path git lists is in the checkpoint or in its skipped list.
fn assert_covered(repo: &TestRepo, id: &str, skipped: &[Vec<u8>]) {
    let held = tree_paths(repo, id);
    for path in status_paths(repo) {
        assert!(
            held.contains(&path) || skipped.contains(&path),
            "{:?} is listed by git status but neither in checkpoint {id} ({held:?}) nor skipped ({skipped:?})",
            String::from_utf8_lossy(&path)
        );
    }
}

/// Invariant (b): git's own strict fsck is clean and the user's gc succeeds.
pub fn assert_repository_healthy(repo: &TestRepo) {
    let fsck = repo.git_raw(&["fsck", "--full", "--strict", "--no-dangling"]);
    assert!(
        fsck.status.success() && fsck.stderr.is_empty(),
        "git fsck --strict: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    let gc = repo.git_raw(&["gc", "--quiet"]);
    assert!(gc.status.success(), "git gc: {}", String::from_utf8_lossy(&gc.stderr));
}

#[test]
fn names_git_reserves_are_skipped_by_name_never_written_into_a_tree() {
    for watched in [false, true] {
        let repo = TestRepo::new();
        if watched {
            repo.ckpt_json(&["snapshot", "--watch"], 0);
        }
        let reserved: [&[u8]; 6] = [
            b".Git",
            b"docs/.GIT",
            b"sub/.Git/config",
            b".git.",
            b".git ",
            b"a/GIT~1",
        ];
        for name in reserved {
            repo.write(bpath(name), b"the agent's file\n");
        }
        repo.write("docs/guide.md", b"kept\n");
        repo.symlink("README.md", ".gitmodules");
        let mut args = vec!["snapshot"];
        if watched {
            args.push("--watch");
        }
        let run = repo.ckpt_json(&args, 0);
        let snap = run.one("snapshot");
        let id = snap["id"].as_str().expect("id").to_owned();
        let skipped = skipped_paths(snap);
        for name in reserved.iter().copied().chain([&b".gitmodules"[..]]) {
            assert!(
                skipped.contains(&name.to_vec()),
                "{:?} is named in skipped ({skipped:?}), watched: {watched}",
                String::from_utf8_lossy(name)
            );
        }
        assert!(tree_paths(&repo, &id).contains(b"docs/guide.md".as_slice()));
        assert_covered(&repo, &id, &skipped);
        // The record keeps them: `show` and `status` name them too.
        let show = repo.ckpt_json(&["show", &id], 0);
        let shown = show.stdout.clone();
        assert!(
            shown.contains("docs/.GIT") && shown.contains("reserved_name"),
            "{shown}"
        );
        let status = repo.ckpt_json(&["status"], 0);
        let listed: Vec<Vec<u8>> = status.one("status")["not_protected"]
            .as_array()
            .expect("not_protected")
            .iter()
            .map(|s| json_path(&s["path"]))
            .collect();
        assert!(listed.contains(&b"sub/.Git/config".to_vec()), "{listed:?}");
        assert_repository_healthy(&repo);
        // A later change elsewhere keeps the record's list whole (the watched path edits it).
        repo.write("docs/guide.md", b"changed\n");
        let run = repo.ckpt_json(&args, 0);
        let again = skipped_paths(run.one("snapshot"));
        assert!(again.contains(&b".Git".to_vec()), "still named: {again:?}");
    }
}

/// The ids `ckpt list` shows, in its order.
fn listed_ids(repo: &TestRepo, extra: &[&str]) -> Vec<String> {
    let mut args = extra.to_vec();
    args.push("list");
    ids(&repo.ckpt_json(&args, 0), "checkpoint", "id")
}

#[test]
fn an_orphan_checkout_keeps_every_checkpoint_listed_addressable_and_restorable() {
    let repo = TestRepo::new();
    repo.write("notes.txt", b"the agent's untracked notes\n");
    let first = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 43 }\n");
    let second = repo.snapshot(&[]);
    let before = repo.worktree();
    // The classic destructive move: a new root branch, everything removed from it.
    repo.git(&["checkout", "-q", "--orphan", "gh-pages"]);
    repo.git(&["rm", "-rfq", "."]);
    repo.remove("notes.txt");
    repo.write("index.html", b"<h1>pages</h1>\n");
    for provider in [&[][..], &["--provider", "git"][..]] {
        let listed = listed_ids(&repo, provider);
        assert!(
            listed.contains(&first) && listed.contains(&second),
            "{provider:?}: {listed:?} lists {first} and {second}"
        );
    }
    // A snapshot on the unborn branch joins the same timeline (a commit with no parent).
    let orphan = repo.snapshot(&[]);
    let parents = repo.git(&["rev-list", "--parents", "-n", "1", &orphan]);
    assert_eq!(parents.split_whitespace().count(), 1, "no parent: {parents}");
    assert_eq!(
        listed_ids(&repo, &[]),
        vec![first.clone(), second.clone(), orphan.clone()]
    );
    let fingerprint = repo.fingerprint();
    let run = repo.ckpt_json(&["restore", &second, "--exact", "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(repo.worktree(), before, "the state before the orphan checkout is back");
    assert_eq!(
        repo.fingerprint().without_status(),
        fingerprint.without_status(),
        "only worktree files were written"
    );
    // Undo through the guard, still on the unborn branch.
    let guard = run.one("restore")["guard"].as_str().expect("guard").to_owned();
    repo.ckpt_json(&["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(repo.read("index.html"), b"<h1>pages</h1>\n");
    assert!(!repo.path("src/lib.rs").exists());
    // Back on a born branch, and detached: the same timeline.
    repo.git(&["checkout", "-q", "-f", "main"]);
    assert!(listed_ids(&repo, &[]).contains(&orphan));
    repo.git(&["checkout", "-q", "--detach", "HEAD"]);
    let listed = listed_ids(&repo, &[]);
    assert!(
        listed.contains(&first) && listed.contains(&orphan) && listed.contains(&guard),
        "{listed:?}"
    );
    assert_repository_healthy(&repo);
}

#[test]
fn a_new_repository_keeps_using_copies_until_its_first_commit_then_both_stay_listed() {
    let repo = TestRepo::bare_dir();
    repo.git(&["init", "-q", "-b", "main"]);
    repo.write("draft.txt", b"before any commit\n");
    let copy = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(
        copy.one("snapshot")["provider"],
        "copy",
        "an unborn repository with no git checkpoints uses copies"
    );
    let copy = copy.one("snapshot")["id"].as_str().expect("id").to_owned();
    repo.commit_all("first");
    repo.write("draft.txt", b"after the first commit\n");
    let git = repo.snapshot(&[]);
    repo.git(&["checkout", "-q", "--orphan", "fresh"]);
    repo.git(&["rm", "-rfq", "."]);
    let listed = listed_ids(&repo, &[]);
    assert!(listed.contains(&copy) && listed.contains(&git), "{listed:?}");
    repo.ckpt_json(&["restore", &copy, "--yes"], 0);
    assert_eq!(repo.read("draft.txt"), b"before any commit\n");
}

/// Gives `paths` (recursively) to user and group `id`.
fn chown(id: u32, paths: &[PathBuf]) {
    let status = std::process::Command::new("chown")
        .args(["-R", &format!("{id}:{id}")])
        .args(paths)
        .status()
        .expect("chown");
    assert!(status.success(), "chown {id} {paths:?}");
}

/// A second user for shapes that need one (a directory this user may not read): as root, the
/// workspace and home are handed to `nobody` and ckpt runs as `nobody`; as any other user, that
/// user is the second one already. `None` (the test is skipped, loudly) when neither works.
struct OtherUser {
    as_root: bool,
}

impl OtherUser {
    const UID: u32 = 65534;

    fn set_up(repo: &TestRepo) -> Option<OtherUser> {
        if !rustix::process::geteuid().is_root() {
            return Some(OtherUser { as_root: false });
        }
        if std::process::Command::new("setpriv").arg("--help").output().is_err() {
            eprintln!("SKIPPED: running as root without setpriv, no second user to run ckpt as");
            return None;
        }
        // git as root in a worktree another user owns: trusted explicitly, as an admin would.
        std::fs::write(repo.home.join(".gitconfig"), "[safe]\n\tdirectory = *\n").expect("gitconfig");
        let top = repo.root.parent().expect("temp dir");
        std::fs::set_permissions(top, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        chown(Self::UID, &[repo.root.clone(), repo.home.clone()]);
        Some(OtherUser { as_root: true })
    }

    /// Makes `rel` (a directory or file) one this user may not read: owned by root, mode 0700,
    /// or mode 000 when this user is not root.
    fn lock_out(&self, repo: &TestRepo, rel: &str, mode: u32) {
        if self.as_root {
            chown(0, &[repo.path(rel)]);
        }
        repo.chmod(rel, if self.as_root { mode } else { 0o000 });
    }

    /// Gives `rels` (made by the test, as root) to the second user, as its own files.
    fn hand_over(&self, repo: &TestRepo, rels: &[&str]) {
        if self.as_root {
            chown(Self::UID, &rels.iter().map(|rel| repo.path(rel)).collect::<Vec<_>>());
        }
    }

    /// A snapshot taken as the second user; its id.
    fn snapshot(&self, repo: &TestRepo) -> String {
        self.ckpt_json(repo, &["snapshot"], 0).one("snapshot")["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    fn ckpt_json(&self, repo: &TestRepo, args: &[&str], code: i32) -> Run {
        let mut cmd = std::process::Command::new("setpriv");
        if self.as_root {
            let id = Self::UID.to_string();
            cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups", CKPT]);
        } else {
            cmd = std::process::Command::new(CKPT);
        }
        isolate(&mut cmd, &repo.home);
        cmd.current_dir(&repo.root).arg("--json").args(args);
        let run = run_ckpt(cmd);
        assert_eq!(
            run.code, code,
            "ckpt {args:?}\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        run
    }
}

#[test]
fn an_unreadable_directory_is_skipped_by_name_and_the_rest_stays_protected() {
    let repo = TestRepo::new();
    let Some(user) = OtherUser::set_up(&repo) else { return };
    repo.write("pgdata/base/1", b"a container's database\n");
    repo.write("secret.key", b"another user's key\n");
    user.lock_out(&repo, "pgdata", 0o700);
    user.lock_out(&repo, "secret.key", 0o600);
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 7 }\n");
    let run = user.ckpt_json(&repo, &["snapshot"], 0);
    let snap = run.one("snapshot");
    let id = snap["id"].as_str().expect("id").to_owned();
    let skipped: Vec<(Vec<u8>, String)> = snap["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| {
            (
                json_path(&s["path"]),
                s["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for name in ["pgdata", "secret.key"] {
        assert!(
            skipped
                .iter()
                .any(|(p, why)| p == name.as_bytes() && why.starts_with("unreadable")),
            "{name} named unreadable: {skipped:?}"
        );
    }
    assert!(tree_paths(&repo, &id).contains(b"src/lib.rs".as_slice()));
    // status agrees with the snapshot: neither is counted as protected.
    let status = user.ckpt_json(&repo, &["status"], 0);
    let listed: Vec<Vec<u8>> = status.one("status")["not_protected"]
        .as_array()
        .expect("not_protected")
        .iter()
        .map(|s| json_path(&s["path"]))
        .collect();
    assert!(
        listed.contains(&b"pgdata".to_vec()) && listed.contains(&b"secret.key".to_vec()),
        "{listed:?}"
    );
    // A restore works (its guard is a snapshot) and leaves the unreadable paths alone.
    repo.write("src/lib.rs", b"broken by the agent\n");
    let restore = user.ckpt_json(&repo, &["restore", &id, "--exact", "--yes"], 0);
    assert_eq!(restore.one("restore")["verified"], true);
    assert_eq!(repo.read("src/lib.rs"), b"pub fn answer() -> u32 { 7 }\n");
    assert_eq!(repo.read("pgdata/base/1"), b"a container's database\n");
    let restore = user.ckpt_json(&repo, &["restore", &id, "--yes", "--", "src/lib.rs"], 0);
    assert_eq!(restore.one("restore")["verified"], true);
}

#[test]
fn a_worktree_re_added_at_a_removed_ones_path_and_name_inherits_none_of_its_checkpoints() {
    let repo = TestRepo::new();
    let wt = repo.root.parent().expect("temp dir").join("agent");
    let wt_arg = wt.to_str().expect("utf-8 temp path");
    let in_wt = |args: &[&str]| {
        let mut full: Vec<&std::ffi::OsStr> = vec!["--json".as_ref()];
        full.extend(args.iter().map(std::ffi::OsStr::new));
        repo.ckpt_in(&wt, &full)
    };
    repo.git(&["worktree", "add", "-q", "-b", "feature", wt_arg]);
    std::fs::write(wt.join("feature.txt"), b"the first worktree's work\n").expect("write");
    let run = in_wt(&["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let old = run.one("snapshot")["id"].as_str().expect("id").to_owned();
    // The agent removes the worktree and makes a new one at the same path and name.
    repo.git(&["worktree", "remove", "--force", wt_arg]);
    repo.git(&["worktree", "add", "-q", "-b", "other", wt_arg, "main"]);
    std::fs::write(wt.join("mine.txt"), b"the new worktree's work\n").expect("write");
    let listed = in_wt(&["list"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        ids(&listed, "checkpoint", "id").is_empty(),
        "inherited: {:?}",
        listed.json
    );
    let restore = in_wt(&["restore", "latest", "--exact", "--yes"]);
    assert_ne!(
        restore.code, 0,
        "nothing of this worktree's to restore: {}",
        restore.stdout
    );
    assert_eq!(
        std::fs::read(wt.join("mine.txt")).expect("kept"),
        b"the new worktree's work\n"
    );
    assert!(!wt.join("feature.txt").exists(), "nothing of the old worktree written");
    let run = in_wt(&["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let new = run.one("snapshot")["id"].as_str().expect("id").to_owned();
    assert_eq!(ids(&in_wt(&["list"]), "checkpoint", "id"), vec![new.clone()]);
    // The old worktree's checkpoint is not lost: still pinned, listed apart with --all.
    let all = ids(&repo.ckpt_json(&["list", "--all"], 0), "checkpoint", "id");
    assert!(all.contains(&old) && all.contains(&new), "{all:?}");
    // A mark that is not ckpt's is refused by name, never replaced by a key of one run (whose
    // checkpoints could never be listed again).
    let admin = PathBuf::from(repo.git_in(&wt, &["rev-parse", "--absolute-git-dir"]).trim());
    let marker = admin.join("ckpt-workspace");
    let mark = std::fs::read(&marker).expect("marked");
    std::fs::remove_file(&marker).expect("rm marker");
    for plant in ["dir", "garbage", "link"] {
        match plant {
            "dir" => std::fs::create_dir(&marker).expect("mkdir"),
            "garbage" => std::fs::write(&marker, b"../../x\n").expect("write"),
            _ => std::os::unix::fs::symlink("/etc/passwd", &marker).expect("link"),
        }
        std::fs::write(wt.join("mine.txt"), format!("{plant}\n")).expect("write");
        let run = in_wt(&["snapshot"]);
        assert_ne!(run.code, 0, "{plant}: {}", run.stdout);
        assert!(
            run.stdout.contains("ckpt-workspace") && !run.stdout.contains("root:"),
            "{plant}: {}",
            run.stdout
        );
        if plant == "dir" {
            std::fs::remove_dir(&marker).expect("rmdir");
        } else {
            std::fs::remove_file(&marker).expect("rm");
        }
    }
    std::fs::write(&marker, &mark).expect("write back");
    assert_eq!(ids(&in_wt(&["list"]), "checkpoint", "id"), vec![new.clone()]);
    assert_repository_healthy(&repo);
}

#[test]
fn concurrent_watch_starts_leave_one_daemon_and_stop_stops_it() {
    let repo = TestRepo::new();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let mut cmd = repo.ckpt_command();
            cmd.args(["--json", "watch", "start"]);
            std::thread::spawn(move || run_ckpt(cmd))
        })
        .collect();
    let runs: Vec<Run> = starts.into_iter().map(|t| t.join().expect("start thread")).collect();
    let started = runs
        .iter()
        .filter(|run| {
            assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
            run.one("watch")["started"] == true
        })
        .count();
    assert_eq!(
        started,
        1,
        "one start started the daemon: {:?}",
        runs.iter().map(|r| &r.stdout).collect::<Vec<_>>()
    );
    // Any daemon that lost the race would still be waiting for the lock now.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(daemons_in(&repo.root).len(), 1, "one daemon per workspace");
    repo.ckpt_json(&["watch", "stop"], 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !daemons_in(&repo.root).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        daemons_in(&repo.root).is_empty(),
        "stop stops every daemon of the workspace"
    );
    // And a later start (after the 2 s a daemon waits for one on its way out) starts none.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(daemons_in(&repo.root).is_empty(), "no daemon took over after the stop");
}

#[test]
fn a_reserved_name_committed_in_head_is_skipped_and_snapshots_go_on() {
    let repo = TestRepo::new();
    // Git adds such names only with its NTFS protection off (or they come in with history).
    repo.git(&["config", "core.protectNTFS", "false"]);
    repo.write("GIT~1", b"committed by a careless tool\n");
    repo.write("sub/.git.", b"and this\n");
    repo.commit_all("names git reserves");
    repo.write("README.md", b"# changed\n");
    let run = repo.ckpt_json(&["snapshot"], 0);
    let snap = run.one("snapshot");
    let id = snap["id"].as_str().expect("id").to_owned();
    let skipped = skipped_paths(snap);
    assert!(
        skipped.contains(&b"GIT~1".to_vec()) && skipped.contains(&b"sub/.git.".to_vec()),
        "{skipped:?}"
    );
    let held = tree_paths(&repo, &id);
    assert!(
        held.contains(b"README.md".as_slice()) && !held.contains(b"GIT~1".as_slice()),
        "{held:?}"
    );
    repo.write("README.md", b"# broken\n");
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(repo.read("README.md"), b"# changed\n");
    assert_eq!(repo.read("GIT~1"), b"committed by a careless tool\n", "never touched");
}

#[test]
fn what_git_reads_as_gitmodules_never_makes_a_tree_fsck_rejects() {
    for watched in [false, true] {
        let repo = TestRepo::new();
        let mut args = vec!["snapshot"];
        if watched {
            args.push("--watch");
            repo.ckpt_json(&args, 0);
        }
        for link in ["gi7eba~1", "GI7E~123", "g~123456", ".gitmodules:x", "deep/GITMOD~2"] {
            std::fs::create_dir_all(repo.path(link).parent().expect("parent")).expect("mkdir");
            repo.symlink("README.md", link);
        }
        repo.write(
            ".gitmodules",
            b"[submodule \"a\"]\n\tpath = a\n\turl = --upload-pack=touch /tmp/pwned\n",
        );
        repo.write(
            "sub/.gitmodules",
            b"[submodule \"../../evil\"]\n\tpath = x\n\turl = https://example.invalid/x\n",
        );
        repo.write(
            "ok/.gitmodules",
            b"[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.invalid/lib.git\n",
        );
        // URLs git's fsck refuses too (a second review found these six got through).
        let judged = [
            ("u1", "https:///example.com/x"),
            ("u2", "http::https:///x"),
            ("u3", "ftp:///x"),
            ("u4", "..\\..\\:x"),
            ("u5", ".././/x"),
            ("u6", "https://e.com:99999999999/x"),
        ];
        for (dir, url) in judged {
            let text = format!("[submodule \"x\"]\n\tpath = x\n\turl = {url}\n");
            repo.write(format!("{dir}/.gitmodules"), text.as_bytes());
        }
        repo.write("attrs/.gitattributes", format!("*.x {}\n", "a".repeat(3000)).as_bytes());
        let mut by_content: Vec<String> = judged.iter().map(|(dir, _)| format!("{dir}/.gitmodules")).collect();
        by_content.extend([
            ".gitmodules".to_owned(),
            "sub/.gitmodules".to_owned(),
            "attrs/.gitattributes".to_owned(),
        ]);
        // `status` judges the content as a snapshot does.
        let status = repo.ckpt_json(&["status"], 0);
        let listed: Vec<Vec<u8>> = status.one("status")["not_protected"]
            .as_array()
            .expect("not_protected")
            .iter()
            .map(|s| json_path(&s["path"]))
            .collect();
        for name in &by_content {
            assert!(
                listed.contains(&name.as_bytes().to_vec()),
                "status names {name}: {listed:?}"
            );
        }
        let run = repo.ckpt_json(&args, 0);
        let snap = run.one("snapshot");
        let id = snap["id"].as_str().expect("id").to_owned();
        let skipped = skipped_paths(snap);
        for name in [
            "gi7eba~1",
            "GI7E~123",
            "g~123456",
            ".gitmodules:x",
            "deep/GITMOD~2",
            ".gitmodules",
            "sub/.gitmodules",
        ]
        .iter()
        .map(|name| name.to_string())
        .chain(by_content.iter().cloned())
        {
            assert!(
                skipped.contains(&name.as_bytes().to_vec()),
                "{name} skipped (watched: {watched}): {skipped:?}"
            );
        }
        assert!(
            tree_paths(&repo, &id).contains(b"ok/.gitmodules".as_slice()),
            "a sound one is kept"
        );
        assert_covered(&repo, &id, &skipped);
        assert_repository_healthy(&repo);
    }
}

#[test]
fn a_new_directory_at_an_old_path_inherits_none_of_its_copy_checkpoints() {
    let repo = TestRepo::bare_dir();
    repo.write("keys.txt", b"the earlier project's secret\n");
    let old = repo.snapshot(&[]);
    // The directory goes, and another project is made at the same path.
    std::fs::remove_dir_all(&repo.root).expect("rm -r");
    std::fs::create_dir(&repo.root).expect("mkdir");
    repo.write("mine.txt", b"the new project\n");
    let listed = repo.ckpt_json(&["list"], 0);
    assert!(
        ids(&listed, "checkpoint", "id").is_empty(),
        "inherited: {}",
        listed.stdout
    );
    let restore = repo.ckpt_json(&["restore", "latest", "--exact", "--yes"], 1);
    assert_eq!(restore.one("error")["code"], "not_found", "{}", restore.stdout);
    assert!(
        !repo.path("keys.txt").exists(),
        "nothing of the earlier project written"
    );
    assert_eq!(repo.read("mine.txt"), b"the new project\n");
    let new = repo.snapshot(&[]);
    assert_eq!(
        ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id"),
        vec![new.clone()]
    );
    // The earlier checkpoints are kept, listed apart, and survive the store's gc.
    repo.ckpt_json(&["gc", "--grace-seconds", "0"], 0);
    let all = ids(&repo.ckpt_json(&["list", "--all"], 0), "checkpoint", "id");
    assert!(all.contains(&old) && all.contains(&new), "{all:?}");
    // The same directory keeps its checkpoints however often ckpt opens it.
    repo.write("mine.txt", b"changed\n");
    let again = repo.snapshot(&[]);
    assert_eq!(ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id"), vec![new, again]);
}

#[test]
fn a_directory_nested_past_the_path_limit_is_skipped_by_name_not_a_failure() {
    let repo = TestRepo::new();
    // Made one directory at a time through open directories, as no path can name the last.
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let name = "d".repeat(200);
    std::fs::create_dir(repo.path("deep")).expect("mkdir");
    let mut dir = rustix::fs::open(
        repo.path("deep").as_path(),
        OFlags::DIRECTORY | OFlags::RDONLY,
        Mode::empty(),
    )
    .expect("open deep");
    for _ in 0..22 {
        mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).expect("mkdirat");
        dir = openat(&dir, name.as_str(), OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).expect("openat");
    }
    let far = openat(
        &dir,
        "far.txt",
        OFlags::CREATE | OFlags::WRONLY,
        Mode::from_raw_mode(0o644),
    )
    .expect("create");
    rustix::io::write(&far, b"far\n").expect("write");
    repo.write("near.txt", b"near\n");
    for args in [&["snapshot"][..], &["snapshot", "--watch"]] {
        let run = repo.ckpt_json(args, 0);
        let snap = run.one("snapshot");
        let id = snap["id"].as_str().expect("id").to_owned();
        let named = snap["skipped"].as_array().expect("skipped").iter().any(|s| {
            s["reason"]
                .as_str()
                .is_some_and(|r| r.contains("longer than this system can name"))
                && json_path(&s["path"]).starts_with(b"deep/ddd")
        });
        assert!(named, "{args:?}: {}", run.stdout);
        assert!(
            run.stdout.len() < 8192,
            "no 4 KB path in every message: {} bytes",
            run.stdout.len()
        );
        assert!(tree_paths(&repo, &id).contains(b"near.txt".as_slice()));
    }
    repo.ckpt_json(&["status"], 0);
}

/// The permission bits of the file at `rel`.
fn mode_of(repo: &TestRepo, rel: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(repo.path(rel))
        .expect("lstat")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn a_secret_made_anew_by_a_restore_is_never_more_readable_than_it_was() {
    for watched in [false, true] {
        let repo = TestRepo::new();
        let mut snapshot = vec!["snapshot"];
        if watched {
            snapshot.push("--watch");
            repo.ckpt_json(&snapshot, 0);
        }
        let secrets = [
            (".env", 0o600),
            ("keys/id_ed25519", 0o400),
            ("bin/deploy.sh", 0o700),
            ("team.txt", 0o640),
        ];
        for (rel, mode) in secrets {
            repo.write(rel, format!("{rel}\n").as_bytes());
            repo.chmod(rel, mode);
        }
        let id = repo.ckpt_json(&snapshot, 0).one("snapshot")["id"]
            .as_str()
            .expect("id")
            .to_owned();
        // The agent deletes them; a restore makes them anew.
        for (rel, _) in secrets {
            repo.remove(rel);
        }
        repo.ckpt_json(&["restore", &id, "--yes"], 0);
        for (rel, mode) in secrets {
            assert_eq!(repo.read(rel), format!("{rel}\n").as_bytes());
            assert_eq!(
                mode_of(&repo, rel) & !mode,
                0,
                "{rel} (watched: {watched}): {:o}, was {mode:o}",
                mode_of(&repo, rel)
            );
        }
        assert!(mode_of(&repo, "bin/deploy.sh") & 0o100 != 0, "still executable");
        // Rebuilt from its commit alone (the registry lost), the checkpoint still knows them.
        if !watched {
            std::fs::remove_file(repo.common_dir().join("ckpt/main/records.json")).expect("rm registry");
            repo.remove(".env");
            repo.ckpt_json(&["restore", &id, "--yes", "--", ".env"], 0);
            assert_eq!(mode_of(&repo, ".env"), 0o600 & mode_of(&repo, ".env"));
            assert_eq!(mode_of(&repo, ".env") & 0o077, 0, "{:o}", mode_of(&repo, ".env"));
        }
    }
}

/// Writes `content` at `path`, last modified `age` ago.
fn plant_old(path: &std::path::Path, content: &[u8], age: std::time::Duration) {
    std::fs::write(path, content).expect("plant");
    let file = std::fs::File::options().write(true).open(path).expect("open");
    file.set_modified(std::time::SystemTime::now() - age)
        .expect("set mtime");
}

#[test]
fn what_a_killed_ckpt_leaves_in_an_object_store_is_reported_and_removed() {
    const DAYS_2: std::time::Duration = std::time::Duration::from_secs(2 * 24 * 3600);
    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);
    let keep_note = b"ckpt: new checkpoint objects, until their pin is written\n";
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let objects = repo.common_dir().join("objects");
    let leftovers = [
        objects.join(".tmpAbC123"),
        objects.join("pack/.tmpXyZ987"),
        objects.join("pack/pack-1111111111111111111111111111111111111111.keep"),
    ];
    let theirs = objects.join("pack/pack-2222222222222222222222222222222222222222.keep");
    let young_temp = objects.join(".tmpNew000");
    let plant = || {
        plant_old(&leftovers[0], &vec![7u8; 1 << 20], DAYS_2);
        plant_old(&leftovers[1], b"PACK half written", DAYS_2);
        plant_old(&leftovers[2], keep_note, HOUR);
        plant_old(&theirs, b"the user's own keep\n", DAYS_2);
        plant_old(&young_temp, b"a write in progress", std::time::Duration::ZERO);
    };
    plant();
    let audit = repo.ckpt_json(&["audit"], 1);
    let codes: Vec<&str> = audit
        .json
        .iter()
        .filter(|line| line["type"] == "audit.problem")
        .filter_map(|line| line["code"].as_str())
        .collect();
    assert_eq!(
        codes.iter().filter(|c| **c == "pack_temp_file").count(),
        2,
        "both temp files named: {}",
        audit.stdout
    );
    assert!(codes.contains(&"stale_keep_file"), "{}", audit.stdout);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    for path in &leftovers {
        assert!(!path.exists(), "{} removed by doctor --fix", path.display());
    }
    assert!(
        theirs.exists() && young_temp.exists(),
        "only what ckpt provably left is removed"
    );
    repo.ckpt_json(&["audit"], 0);
    // The next snapshot removes them too, without a doctor.
    plant();
    repo.write("README.md", b"# a change\n");
    repo.snapshot(&[]);
    for path in &leftovers {
        assert!(!path.exists(), "{} removed by the next snapshot", path.display());
    }
    assert!(theirs.exists() && young_temp.exists());

    // The copy store: `ckpt gc` removes a killed snapshot's temp file there.
    let plain = TestRepo::bare_dir();
    plain.write("a.txt", b"a\n");
    plain.snapshot(&[]);
    let store_temp = plain.home.join(".local/share/ckpt/objects/.tmpQwE456");
    plant_old(&store_temp, &vec![1u8; 4096], DAYS_2);
    plain.ckpt_json(&["gc", "--grace-seconds", "0"], 0);
    assert!(!store_temp.exists(), "gc removes the copy store's leftover temp file");
}

/// Every directory and file below `dir`, with its permission bits (set-group-id included).
fn modes_below(dir: &std::path::Path) -> Vec<(std::path::PathBuf, bool, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).expect("read_dir").flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("lstat");
            out.push((entry.path(), meta.is_dir(), meta.permissions().mode() & 0o7777));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    out
}

#[test]
fn a_repository_shared_with_a_group_keeps_gits_sharing_rules_for_what_ckpt_makes() {
    for watched in [false, true] {
        let repo = TestRepo::bare_dir();
        repo.git(&["init", "-q", "--shared=group", "-b", "main"]);
        repo.write("README.md", b"# shared\n");
        repo.commit_all("initial");
        let mut args = vec!["snapshot"];
        if watched {
            args.push("--watch");
            repo.ckpt_json(&args, 0);
        }
        // New content in new directories: objects in fanout directories git has not made yet.
        for i in 0..40 {
            repo.write(
                format!("src/f{i}.txt"),
                format!("file {i} of a shared project\n").as_bytes(),
            );
        }
        repo.ckpt_json(&args, 0);
        let common = repo.common_dir();
        let mut looked = 0;
        for (path, is_dir, mode) in modes_below(&common.join("objects"))
            .into_iter()
            .chain(modes_below(&common.join("refs/ckpt")))
        {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.ends_with(".keep") {
                continue;
            }
            looked += 1;
            if is_dir {
                assert_eq!(
                    mode & 0o2070,
                    0o2070,
                    "{} is {mode:o} (watched: {watched})",
                    path.display()
                );
            } else {
                assert_eq!(
                    mode & 0o040,
                    0o040,
                    "{} is {mode:o} (watched: {watched})",
                    path.display()
                );
                if path.starts_with(common.join("refs")) {
                    assert_eq!(mode & 0o060, 0o060, "{} is {mode:o}", path.display());
                }
            }
        }
        assert!(looked > 10, "the object store and the pins were looked at");
        assert_repository_healthy(&repo);
    }
}

/// ckpt's state directories in the git directory (`ckpt/` and the workspace's below it) follow
/// the repository's sharing rule as git's own directories do: under `core.sharedRepository =
/// 0600` nobody else may enter them (the state names every file of the worktree), shared with a
/// group they are the group's. Black-box round 4 found them 0755.
#[test]
fn ckpts_state_directories_follow_the_repositorys_sharing_rule() {
    for (shared, want, refuse) in [("0600", 0o700, 0o077), ("group", 0o2770, 0o000)] {
        let repo = TestRepo::bare_dir();
        repo.git(&["init", "-q", &format!("--shared={shared}"), "-b", "main"]);
        repo.write("secret-name.txt", b"x\n");
        repo.commit_all("initial");
        repo.snapshot(&[]);
        let state_root = repo.common_dir().join("ckpt");
        let workspace = std::fs::read_dir(&state_root)
            .unwrap()
            .flatten()
            .find(|entry| entry.path().is_dir())
            .map(|entry| entry.path())
            .expect("a workspace's state directory");
        for dir in [&state_root, &workspace] {
            let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir).unwrap().permissions()) & 0o7777;
            assert_eq!(mode & want, want, "{} is {mode:o} ({shared})", dir.display());
            assert_eq!(mode & refuse, 0, "{} is {mode:o} ({shared})", dir.display());
        }
        assert_repository_healthy(&repo);
    }
}

/// A repository of many packs: gix sized its table of packs at open (1.1 × those there, at
/// least 32), so a snapshot that added a few (each file of 8 MiB or more is a pack of its own)
/// could not read its own commit back and failed "missing_object", and so did every restore's
/// guard (a black-box run hit it at about thirty packs; a retry then raced a repack).
#[test]
fn a_snapshot_that_adds_packs_to_a_repository_of_many_works() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let base = repo.common_dir().join("objects/pack/pack");
    for i in 0..40 {
        let blob = git_stdin(
            &repo,
            &["hash-object", "-w", "--stdin"],
            format!("object {i}\n").as_bytes(),
        );
        git_stdin(
            &repo,
            &["pack-objects", "-q", base.to_str().unwrap()],
            format!("{}\n", blob.trim()).as_bytes(),
        );
    }
    for i in 0..5u8 {
        let mut content = vec![b'a' + i; 8 * 1024 * 1024 + 1];
        content.extend(format!("large file {i}\n").as_bytes());
        repo.write(format!("big{i}.dat"), &content);
    }
    let id = repo.snapshot(&[]);
    repo.remove("big3.dat");
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(repo.read("big3.dat")[0], b'd');
    assert_repository_healthy(&repo);
}

/// Packs ckpt writes get the mode git gives its own: read-only less the umask, so under
/// `umask 077` a snapshot of a `0600` secret is not readable by others through a pack (a
/// black-box run found ckpt's packs 0444 beside git's 0400/0440), plus the group's read bit in
/// a repository shared with a group.
#[test]
fn packs_ckpt_writes_follow_the_umask_as_gits_own_do() {
    use std::os::unix::fs::PermissionsExt;
    for (shared, want) in [(false, 0o400), (true, 0o440)] {
        let repo = TestRepo::bare_dir();
        if shared {
            repo.git(&["init", "-q", "--shared=group", "-b", "main"]);
        } else {
            repo.git(&["init", "-q", "-b", "main"]);
        }
        repo.write("README.md", b"# project\n");
        repo.commit_all("initial");
        repo.write(".env", b"SECRET=1\n");
        let out = std::process::Command::new("sh")
            .current_dir(&repo.root)
            .env("HOME", &repo.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", repo.home.join(".gitconfig"))
            .args(["-c", "umask 077; exec \"$0\" snapshot", CKPT])
            .output()
            .expect("ckpt");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let packs: Vec<u32> = std::fs::read_dir(repo.common_dir().join("objects/pack"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack" || x == "idx"))
            .map(|e| e.metadata().unwrap().permissions().mode() & 0o777)
            .collect();
        assert!(!packs.is_empty(), "the snapshot wrote a pack");
        let shown: Vec<String> = packs.iter().map(|mode| format!("{mode:o}")).collect();
        assert!(packs.iter().all(|mode| *mode == want), "shared: {shared}: {shown:?}");
    }
}

#[test]
fn a_file_that_became_unreadable_is_not_shown_as_deleted_by_diff() {
    let repo = TestRepo::new();
    let Some(user) = OtherUser::set_up(&repo) else { return };
    repo.write("secret.key", b"readable when the checkpoint was taken\n");
    user.hand_over(&repo, &["secret.key"]);
    let id = user.snapshot(&repo);
    user.lock_out(&repo, "secret.key", 0o600);
    let run = user.ckpt_json(&repo, &["diff", &id, "--name-status"], 0);
    assert!(
        !run.stdout.contains("secret.key"),
        "not shown as deleted: {}",
        run.stdout
    );
    assert!(run.stderr.contains("not compared: secret.key"), "named: {}", run.stderr);
}

#[test]
fn a_write_through_a_memory_map_after_its_file_was_closed_is_seen_by_a_watched_snapshot() {
    use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
    let repo = TestRepo::new();
    repo.ckpt_json(&["snapshot", "--watch"], 0);
    repo.ckpt_json(&["snapshot", "--watch"], 0);
    // A program writes a file while the daemon watches, and later maps it shared and closes
    // its descriptor: the map keeps the file open, so no event comes until it is unmapped.
    repo.write("data.bin", &[b'a'; 4096]);
    repo.ckpt_json(&["snapshot", "--watch"], 0);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(repo.path("data.bin"))
        .expect("open");
    // SAFETY: a fresh shared mapping of a 4096-byte file this test owns, unmapped below.
    let map = unsafe {
        mmap(
            std::ptr::null_mut(),
            4096,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            &file,
            0,
        )
    }
    .expect("mmap");
    drop(file);
    let mut before = String::new();
    for _ in 0..2 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let run = repo.ckpt_json(&["snapshot", "--watch"], 0);
        before = run.one("snapshot")["id"].as_str().expect("id").to_owned();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: `map` is 4096 writable bytes, mapped above.
    unsafe { std::ptr::write_bytes(map.cast::<u8>(), b'z', 100) };
    // The snapshot comes while the map still holds the file: no event has named it.
    let after = repo.ckpt_json(&["snapshot", "--watch"], 0);
    // SAFETY: unmapping the mapping made above, once.
    unsafe { munmap(map, 4096) }.expect("munmap");
    let snap = after.one("snapshot");
    assert_eq!(snap["scan"]["mode"], "watch", "served by the daemon: {}", after.stdout);
    assert_eq!(snap["created"], true, "the write was seen: {}", after.stdout);
    let id = snap["id"].as_str().expect("id");
    assert_ne!(id, before);
    let stored = repo.git_raw(&["cat-file", "blob", &format!("{id}:data.bin")]).stdout;
    assert_eq!(&stored[..100], &[b'z'; 100][..]);
    assert_eq!(&stored[100..], &[b'a'; 3996][..]);
}

#[test]
fn an_undo_across_an_ignore_file_it_takes_away_finds_the_ignored_file_already_right() {
    let repo = TestRepo::new();
    repo.write("x.log", b"a log the agent kept\n");
    // And a file in a directory ignored as a whole (the second matrix run found this one).
    repo.write("target/out.o", b"a build product\n");
    let with_ignore = repo.snapshot(&[]);
    // The agent removes .gitignore (an orphan branch's `git rm -rf .` does): x.log is captured.
    repo.remove(".gitignore");
    repo.write("a.txt", b"new\n");
    repo.snapshot(&[]);
    let run = repo.ckpt_json(&["restore", &with_ignore, "--yes"], 0);
    let guard = run.one("restore")["guard"].as_str().expect("guard").to_owned();
    assert!(
        repo.path(".gitignore").exists(),
        "the ignore file is back: x.log is ignored again"
    );
    assert_eq!(repo.read("x.log"), b"a log the agent kept\n", "left as it is");
    // The undo wants x.log with the bytes it has: nothing to write, no conflict.
    let undo = repo.ckpt_json(&["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(undo.one("restore")["verified"], true, "{}", undo.stdout);
    assert!(!repo.path(".gitignore").exists());
    assert_eq!(repo.read("x.log"), b"a log the agent kept\n");
    assert_eq!(repo.read("target/out.o"), b"a build product\n");
    assert_eq!(repo.read("a.txt"), b"new\n");
}

#[test]
fn a_repository_ckpt_may_not_read_is_refused_never_taken_for_a_plain_directory() {
    let repo = TestRepo::new();
    let Some(user) = OtherUser::set_up(&repo) else { return };
    repo.write("a.txt", b"changed\n");
    user.ckpt_json(&repo, &["snapshot"], 0);
    repo.chmod(".git", 0o000);
    let run = user.ckpt_json(&repo, &["snapshot"], 4);
    repo.chmod(".git", 0o755);
    assert!(run.stdout.contains("cannot read"), "{}", run.stdout);
    let workspaces = repo.home.join(".local/share/ckpt/workspaces");
    assert!(
        std::fs::read_dir(&workspaces).map_or(true, |mut d| d.next().is_none()),
        "no copy checkpoint was taken in its place"
    );
}

#[test]
fn the_copy_store_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let plain = TestRepo::bare_dir();
    plain.write(".env", b"SECRET=1\n");
    plain.chmod(".env", 0o600);
    plain.snapshot(&[]);
    let home = plain.home.join(".local/share/ckpt");
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&home), 0o700, "made private");
    // A store an older ckpt made wider is narrowed by the next run.
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    plain.ckpt_json(&["list"], 0);
    assert_eq!(mode(&home), 0o700, "narrowed");
}

#[test]
fn a_restore_into_a_directory_this_user_may_not_change_writes_nothing() {
    let repo = TestRepo::new();
    let Some(user) = OtherUser::set_up(&repo) else { return };
    repo.write("p/1.txt", b"one\n");
    repo.write("q/2.txt", b"two\n");
    user.hand_over(&repo, &["p", "q"]);
    let id = user.snapshot(&repo);
    repo.write("p/1.txt", b"one, edited\n");
    repo.write("q/2.txt", b"two, edited\n");
    user.lock_out(&repo, "q", 0o555);
    if !user.as_root {
        repo.chmod("q", 0o555);
    }
    let before = repo.worktree();
    let run = user.ckpt_json(&repo, &["restore", &id, "--yes"], 1);
    repo.chmod("q", 0o755);
    assert!(run.stdout.contains("no write permission"), "{}", run.stdout);
    assert_eq!(repo.worktree(), before, "nothing written, not even p/1.txt");
}

#[test]
fn a_registry_that_is_a_symlink_is_never_read_through() {
    let repo = TestRepo::new();
    let own = repo.snapshot(&[]);
    let other = TestRepo::new();
    other.write("theirs.txt", b"another project\n");
    other.snapshot(&[]);
    let theirs = other.common_dir().join("ckpt/main/records.json");
    let before = std::fs::read(&theirs).expect("their registry");
    let registry = repo.common_dir().join("ckpt/main/records.json");
    std::fs::remove_file(&registry).expect("rm");
    std::os::unix::fs::symlink(&theirs, &registry).expect("link");
    let run = repo.ckpt_json(&["list"], 1);
    assert_eq!(run.one("error")["code"], "corrupt_registry", "{}", run.stdout);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id"), vec![own]);
    assert_eq!(
        std::fs::read(&theirs).expect("theirs"),
        before,
        "the other registry is untouched"
    );
}

/// A checkpoint never holds an ignored file, so lacking one is no evidence it should go: an
/// agent that deleted `.gitignore` made `target/` and `*.log` visible (a later guard holds
/// them), and an `--exact` restore to the checkpoint from before must bring the ignore file
/// back without deleting the build, the log or a nested directory's ignored scratch file.
/// Found by the property suite (seed 4473): the undo of a restore deleted `build/out.o`.
#[test]
fn an_exact_restore_never_deletes_what_the_checkpoints_own_ignore_rules_ignore() {
    for watched in [false, true] {
        let repo = TestRepo::new();
        let watch: &[&str] = if watched { &["--watch"] } else { &[] };
        repo.write("src/.gitignore", b"*.tmp\n");
        repo.commit_all("nested ignore file");
        repo.write("target/debug/app", b"\x7fELF built\n");
        repo.write("target/debug/deps/app.d", b"deps\n");
        repo.write("run.log", b"the log\n");
        repo.write("src/scratch.tmp", b"scratch\n");
        let checkpoint = repo.snapshot(watch);
        // The agent removes the ignore files and adds a file of its own.
        repo.remove(".gitignore");
        repo.remove("src/.gitignore");
        repo.write("agent.txt", b"written by the agent\n");
        repo.snapshot(watch);
        let before = repo.fingerprint();

        let preview = repo.ckpt_json(&["preview", checkpoint.as_str(), "--exact"], 0);
        let delete = json_paths(&preview.one("preview")["delete"]);
        assert_eq!(delete, vec![b"agent.txt".to_vec()], "watched {watched}: {delete:?}");
        let run = repo.ckpt_json(&["restore", checkpoint.as_str(), "--exact", "--yes"], 0);
        let report = run.one("restore");
        assert_eq!(report["verified"], true);
        assert_eq!(json_paths(&report["deleted"]), vec![b"agent.txt".to_vec()]);
        let left: Vec<Vec<u8>> = report["not_protected"]
            .as_array()
            .expect("not_protected")
            .iter()
            .filter(|p| p["reason"].as_str().is_some_and(|r| r.contains("ignore rules")))
            .map(|p| json_path(&p["path"]))
            .collect();
        // The build directory is named once, not file by file.
        assert_eq!(
            left,
            vec![b"run.log".to_vec(), b"src/scratch.tmp".to_vec(), b"target".to_vec()],
            "watched {watched}: {report}"
        );
        assert!(report.to_string().contains("its 2 files are ignored"), "{report}");
        assert_eq!(repo.read("target/debug/deps/app.d"), b"deps\n");
        assert_eq!(repo.read("target/debug/app"), b"\x7fELF built\n");
        assert_eq!(repo.read("run.log"), b"the log\n");
        assert_eq!(repo.read("src/scratch.tmp"), b"scratch\n");
        assert_eq!(repo.read(".gitignore"), b"target/\n*.log\n");
        assert_eq!(repo.read("src/.gitignore"), b"*.tmp\n");
        assert!(!repo.path("agent.txt").exists());
        assert_eq!(
            repo.fingerprint().without_status(),
            before.without_status(),
            "only worktree files were written"
        );
    }
}

/// A `packed-refs.lock` a killed process left makes the user's `git branch -d` and `gc` fail:
/// `audit` and `doctor` name it once it is old, and never remove it (whose it is cannot be
/// known); a young one (git at work) is not named.
#[test]
fn an_old_packed_refs_lock_is_named_never_removed() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let lock = repo.common_dir().join("packed-refs.lock");
    std::fs::write(&lock, b"").expect("lock");
    let codes = |run: &Run| -> Vec<String> {
        run.json
            .iter()
            .filter(|line| line["type"] == "audit.problem")
            .filter_map(|line| line["code"].as_str().map(str::to_owned))
            .collect()
    };
    let young = repo.ckpt(&["--json", "audit"]);
    assert!(
        !codes(&young).contains(&"stale_packed_refs_lock".to_owned()),
        "{}",
        young.stdout
    );
    plant_old(&lock, b"", std::time::Duration::from_secs(3600));
    let audit = repo.ckpt(&["--json", "audit"]);
    assert_eq!(audit.code, 1, "{}", audit.stdout);
    assert!(
        codes(&audit).contains(&"stale_packed_refs_lock".to_owned()),
        "{}",
        audit.stdout
    );
    let doctor = repo.ckpt(&["--json", "doctor", "--fix"]);
    assert!(lock.exists(), "doctor never removes git's lock: {}", doctor.stdout);
    assert!(doctor.stdout.contains("stale_packed_refs_lock"), "{}", doctor.stdout);
    // Snapshots go on meanwhile.
    repo.write("README.md", b"# changed\n");
    repo.snapshot(&[]);
}
