//! Snapshot: what is captured, from where, and that nothing of the user's git state changes.

use crate::common::*;

#[test]
fn snapshot_list_show_preview_change_nothing_in_git_state() {
    let repo = TestRepo::new();
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 41 }\n");
    repo.git(&["add", "src/lib.rs"]);
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 40 }\n");
    repo.write("untracked.txt", b"fresh\n");
    repo.remove("src/util/mod.rs");
    repo.write("debug.log", b"ignored\n");
    let before = repo.fingerprint();

    let id = repo.snapshot(&[
        "--session",
        "s1",
        "--turn",
        "1",
        "--step",
        "1",
        "--trigger",
        "bash",
        "--kind",
        "auto",
    ]);
    assert_eq!(repo.fingerprint(), before, "snapshot changed the user's git state");
    repo.ckpt_json(&["list"], 0);
    repo.ckpt_json(&["show", &id[..8]], 0);
    repo.ckpt_json(&["preview", "latest"], 0);
    assert_eq!(
        repo.fingerprint(),
        before,
        "list/show/preview changed the user's git state"
    );
    assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/main/{id}")]);

    // The checkpoint is a real commit: parent HEAD, tree = the worktree as it is (no index).
    let head = repo.git(&["rev-parse", "HEAD"]);
    assert_eq!(repo.git(&["rev-parse", &format!("{id}^")]), head);
    let files = repo.git(&["ls-tree", "-r", "--name-only", &id]);
    let files: Vec<&str> = files.lines().collect();
    assert_eq!(files, vec![".gitignore", "README.md", "src/lib.rs", "untracked.txt"]);
    assert_eq!(
        repo.git(&["show", &format!("{id}:src/lib.rs")]),
        "pub fn answer() -> u32 { 40 }\n"
    );
    let message = repo.git(&["log", "-1", "--format=%an <%ae>%n%B", &id]);
    assert!(message.starts_with("ckpt <ckpt@localhost>"), "{message}");
    for trailer in [
        "Ckpt-Session: s1",
        "Ckpt-Turn: 1",
        "Ckpt-Step: 1",
        "Ckpt-Trigger: bash",
        "Ckpt-Kind: auto",
    ] {
        assert!(message.contains(trailer), "missing {trailer} in {message}");
    }
    assert!(
        !repo.common_dir().join("logs/refs/ckpt").exists(),
        "ckpt refs must not get reflogs"
    );
    assert!(!repo.root.join(".ckpt").exists(), "no engine state in the worktree");
    assert!(repo.common_dir().join("ckpt/main/records.json").is_file());
}

#[test]
fn identical_state_is_not_a_new_checkpoint() {
    let repo = TestRepo::new();
    let first = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(first.one("snapshot")["created"], true);
    let second = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(second.one("snapshot")["created"], false);
    assert_eq!(second.one("snapshot")["id"], first.one("snapshot")["id"]);
    assert_eq!(repo.ckpt_refs().len(), 1);
    assert_eq!(repo.ckpt_json(&["list"], 0).json.len(), 1);
}

#[test]
fn incremental_bytes_count_only_new_content() {
    let repo = TestRepo::new();
    repo.write("big.bin", &vec![7u8; 10_000]);
    let first = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(first.one("snapshot")["bytes"], 10_000);
    assert_eq!(first.one("snapshot")["files"], 1);
    repo.write("small.txt", b"12345");
    let second = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(second.one("snapshot")["bytes"], 5, "{:?}", second.json);
    assert_eq!(second.one("snapshot")["files"], 1);
}

#[test]
fn binary_exec_bits_and_symlinks_are_captured_exactly() {
    let repo = TestRepo::new();
    let binary: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    repo.write("data.bin", &binary);
    repo.write("crlf.txt", b"a\r\nb\r\n");
    repo.write("run.sh", b"#!/bin/sh\necho hi\n");
    repo.chmod("run.sh", 0o755);
    repo.symlink("src/lib.rs", "file-link");
    repo.symlink("src", "dir-link");
    repo.symlink("/nonexistent/target", "dangling");
    let id = repo.snapshot(&[]);
    let tree = repo.git(&["ls-tree", "-r", &id]);
    let mode_of = |name: &str| {
        tree.lines()
            .find(|l| l.ends_with(&format!("\t{name}")))
            .map(|l| l[..6].to_owned())
            .unwrap_or_else(|| panic!("{name} missing from {tree}"))
    };
    assert_eq!(mode_of("run.sh"), "100755");
    assert_eq!(mode_of("data.bin"), "100644");
    assert_eq!(mode_of("file-link"), "120000");
    assert_eq!(mode_of("dir-link"), "120000");
    assert_eq!(mode_of("dangling"), "120000");
    assert!(!tree.contains("dir-link/"), "a symlinked dir must not be entered");
    let blob = repo.git_raw(&["cat-file", "blob", &format!("{id}:data.bin")]).stdout;
    assert_eq!(blob, binary);
    assert_eq!(
        repo.git_raw(&["cat-file", "blob", &format!("{id}:crlf.txt")]).stdout,
        b"a\r\nb\r\n"
    );
    assert_eq!(
        repo.git(&["cat-file", "blob", &format!("{id}:dangling")]),
        "/nonexistent/target"
    );
}

#[test]
fn filters_and_autocrlf_do_not_alter_captured_bytes() {
    let repo = TestRepo::new();
    repo.git(&["config", "core.autocrlf", "true"]);
    repo.git(&["config", "filter.upper.clean", "tr a-z A-Z"]);
    repo.git(&["config", "filter.upper.smudge", "cat"]);
    repo.write(".gitattributes", b"*.up filter=upper\n");
    repo.write("x.up", b"lower case\r\n");
    let id = repo.snapshot(&[]);
    assert_eq!(
        repo.git_raw(&["cat-file", "blob", &format!("{id}:x.up")]).stdout,
        b"lower case\r\n"
    );
}

#[test]
fn works_from_a_subdirectory_detached_head_and_without_identity() {
    let repo = TestRepo::new();
    let head = repo.git(&["rev-parse", "HEAD"]);
    repo.git(&["checkout", "-q", "--detach"]);
    assert!(
        repo.git_raw(&["config", "user.name"]).stdout.is_empty(),
        "test repo must have no identity"
    );
    repo.write("src/new.rs", b"new\n");
    let before = repo.fingerprint();
    let sub = repo.path("src/util");
    let run = repo.ckpt_in(&sub, &["--json".as_ref(), "snapshot".as_ref()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.one("snapshot")["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(repo.fingerprint(), before);
    assert_eq!(repo.git(&["rev-parse", &format!("{id}^")]), head);
    assert!(repo.git(&["ls-tree", "-r", "--name-only", &id]).contains("src/new.rs"));
}

#[test]
fn snapshot_while_index_lock_is_held() {
    let repo = TestRepo::new();
    repo.write("README.md", b"changed\n");
    let lock = repo.git_dir().join("index.lock");
    std::fs::write(&lock, b"someone else's lock").unwrap();
    let before = repo.fingerprint();
    repo.snapshot(&[]);
    assert_eq!(std::fs::read(&lock).unwrap(), b"someone else's lock");
    assert_eq!(repo.fingerprint(), before);
}

#[test]
fn merge_in_progress_is_captured_without_touching_the_merge() {
    let repo = TestRepo::new();
    repo.git(&["checkout", "-q", "-b", "other"]);
    repo.write("README.md", b"other side\n");
    repo.commit_all("other");
    repo.git(&["checkout", "-q", "main"]);
    repo.write("README.md", b"main side\n");
    repo.commit_all("main");
    let merge = repo.git_raw(&["-c", "user.name=T", "-c", "user.email=t@e", "merge", "other"]);
    assert!(!merge.status.success(), "the merge must conflict");
    let merge_head = std::fs::read(repo.git_dir().join("MERGE_HEAD")).unwrap();
    let before = repo.fingerprint();
    let id = repo.snapshot(&[]);
    assert_eq!(repo.fingerprint(), before);
    assert_eq!(std::fs::read(repo.git_dir().join("MERGE_HEAD")).unwrap(), merge_head);
    let captured = repo.git(&["show", &format!("{id}:README.md")]);
    assert!(
        captured.contains("<<<<<<<"),
        "conflict markers captured as on disk: {captured}"
    );
}

#[test]
fn skipped_paths_are_reported_with_reasons() {
    let repo = TestRepo::new();
    repo.write("huge.bin", &vec![1u8; 2048]);
    repo.write("ok.txt", b"ok");
    let nested = repo.path("vendor/nested");
    std::fs::create_dir_all(&nested).unwrap();
    repo.git_in(&nested, &["init", "-q"]);
    std::fs::write(nested.join("inner.txt"), b"inner").unwrap();
    let run = repo.ckpt_json(&["snapshot", "--max-file-size", "1024"], 0);
    let skipped = &run.one("snapshot")["skipped"];
    let reasons: Vec<(String, String)> = skipped
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["path"].as_str().unwrap().to_owned(),
                s["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        reasons
            .iter()
            .any(|(p, r)| p == "huge.bin" && r.starts_with("too_large")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|(p, r)| p == "vendor/nested" && r == "nested_repo"),
        "{reasons:?}"
    );
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    let tree = repo.git(&["ls-tree", "-r", "--name-only", &id]);
    assert!(
        tree.contains("ok.txt") && !tree.contains("huge.bin") && !tree.contains("inner.txt"),
        "{tree}"
    );
    assert!(repo.git(&["log", "-1", "--format=%B", &id]).contains("Ckpt-Skipped: "));
}

#[test]
fn linked_worktrees_keep_separate_state_and_share_refs() {
    let repo = TestRepo::new();
    let wt = repo.root.parent().unwrap().join("linked");
    repo.git(&["worktree", "add", "-q", "--detach", wt.to_str().unwrap()]);
    std::fs::write(wt.join("only-in-linked.txt"), b"linked").unwrap();
    let before_main = repo.fingerprint();
    let before_linked = fingerprint_of(&repo, &wt);
    let run = repo.ckpt_in(&wt, &["--json".as_ref(), "snapshot".as_ref()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(repo.fingerprint(), before_main);
    assert_eq!(fingerprint_of(&repo, &wt), before_linked);
    assert_eq!(
        repo.ckpt_json(&["list"], 0).json.len(),
        0,
        "main worktree has its own list"
    );
    let listed = repo.ckpt_in(&wt, &["--json".as_ref(), "list".as_ref()]);
    assert_eq!(ids(&listed, "checkpoint", "id"), vec![id.clone()]);
    assert_eq!(repo.ckpt_json(&["list", "--all"], 0).json.len(), 1);
    // The linked worktree's key is its name and the mark ckpt gave it.
    let refs = repo.ckpt_refs();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert!(
        refs[0].starts_with("refs/ckpt/wt-linked-") && refs[0].ends_with(&format!("/{id}")),
        "{refs:?}"
    );
}

#[test]
fn the_git_provider_refuses_plain_directories_clearly_and_takes_unborn_heads() {
    let plain = TestRepo::bare_dir();
    let run = plain.ckpt_json(&["--provider", "git", "snapshot"], 1);
    assert_eq!(run.one("error")["code"], "no_provider");
    // Asked for by name in a repository with no commit yet, the git provider takes a
    // checkpoint commit with no parent (after `checkout --orphan`, its history goes on there).
    let unborn = TestRepo::bare_dir();
    unborn.git(&["init", "-q"]);
    unborn.write("a.txt", b"a");
    let run = unborn.ckpt_json(&["--provider", "git", "snapshot"], 0);
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(run.one("snapshot")["provider"], "git");
    assert_eq!(unborn.git(&["rev-list", "--count", &id]).trim(), "1");
    assert_eq!(unborn.git(&["show", &format!("{id}:a.txt")]), "a");
    let fallback = unborn.ckpt_json(&["status"], 0);
    assert_eq!(
        fallback.one("status")["provider"],
        "git",
        "auto follows the workspace's git history"
    );
}

#[test]
fn concurrent_snapshots_lose_no_record() {
    let repo = TestRepo::new();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let root = repo.root.clone();
            let home = repo.home.clone();
            std::thread::spawn(move || {
                let mut created = Vec::new();
                for round in 0..5 {
                    std::fs::write(root.join(format!("w{worker}.txt")), format!("{worker}-{round}")).unwrap();
                    let out = std::process::Command::new(CKPT)
                        .current_dir(&root)
                        .env("HOME", &home)
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .args(["--json", "snapshot", "--session", &format!("w{worker}")])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    if value["created"] == true {
                        created.push(value["id"].as_str().unwrap().to_owned());
                    }
                }
                created
            })
        })
        .collect();
    let mut created: Vec<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    created.sort();
    let mut listed = ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id");
    listed.sort();
    assert!(created.len() >= 5, "most snapshots see a new state: {}", created.len());
    assert_eq!(listed, created, "every created checkpoint has exactly one record");
    let mut refs: Vec<String> = repo
        .ckpt_refs()
        .into_iter()
        .map(|r| r.rsplit('/').next().unwrap().to_owned())
        .collect();
    refs.sort();
    assert_eq!(refs, created, "every record has its ref and no ref lacks a record");
}

#[test]
fn special_files_are_skipped_and_submodules_are_pointers() {
    let repo = TestRepo::new();
    let status = std::process::Command::new("mkfifo")
        .arg(repo.path("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let upstream = TestRepo::new();
    repo.add_submodule(&upstream, "sub");
    repo.commit_all("add submodule");
    std::fs::write(repo.path("sub/dirty-inside.txt"), b"inside the submodule").unwrap();
    let before = repo.fingerprint();
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(repo.fingerprint(), before);
    let snapshot = run.one("snapshot");
    let skipped = snapshot["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["path"] == "pipe" && s["reason"] == "special_file"),
        "{skipped:?}"
    );
    assert!(
        skipped.iter().any(|s| s["path"] == "sub" && s["reason"] == "submodule"),
        "{skipped:?}"
    );
    let id = snapshot["id"].as_str().unwrap();
    let entry = repo.git(&["ls-tree", id, "sub"]);
    let sub_head = repo.git_in(&repo.path("sub"), &["rev-parse", "HEAD"]);
    assert_eq!(entry, format!("160000 commit {}\tsub\n", sub_head.trim()));
    assert!(
        !repo.git(&["ls-tree", "-r", "--name-only", id]).contains("dirty-inside"),
        "never entered"
    );

    repo.write("README.md", b"edited");
    let run = repo.ckpt_json(&["restore", id, "--yes", "--exact"], 0);
    assert_eq!(json_paths(&run.one("restore")["written"]), vec![b"README.md".to_vec()]);
    assert_eq!(
        repo.read("sub/dirty-inside.txt"),
        b"inside the submodule",
        "submodule contents untouched"
    );
}

#[test]
fn the_readme_demo_runs_and_passes_its_checks() {
    let repo = TestRepo::bare_dir();
    let run = repo.ckpt(&["demo"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("demo finished: every check passed"),
        "{}",
        run.stdout
    );
}

/// A demo whose own setup fails (here `git init`, through a `git` that always fails) ends with
/// exit 1 and the JSON code `demo_failed`, naming the step: its failure is not ckpt's, and not
/// "refused".
#[test]
fn a_demo_whose_setup_fails_says_which_step_and_exits_1() {
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::bare_dir();
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("git");
    std::fs::write(&fake, "#!/bin/sh\necho 'no git here' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = repo.ckpt_command();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    cmd.env("PATH", path).args(["--json", "demo"]);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let error = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|record| record["type"] == "error")
        .unwrap_or_else(|| panic!("an error record: {stdout}"));
    assert_eq!(error["code"], "demo_failed", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("git init") && message.contains("no git here"),
        "{message}"
    );
    assert!(stderr.contains("ckpt: error: demo setup"), "{stderr}");
}

#[test]
fn a_closed_pipe_ends_quietly_like_git() {
    let repo = TestRepo::new();
    for round in 0..5 {
        repo.write("n.txt", format!("{round}").as_bytes());
        repo.snapshot(&[]);
    }
    for args in [&["list"][..], &["--json", "list"][..]] {
        // Another test's child, forked before it execs, can hold the pipe's read end for a
        // moment and let a small write through; so a few tries, and one must see the pipe closed.
        let mut codes = Vec::new();
        for _ in 0..10 {
            let mut cmd = repo.ckpt_command();
            cmd.args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().expect("spawn");
            drop(child.stdout.take()); // the reader is gone before ckpt writes
            let out = child.wait_with_output().expect("wait");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            codes.push(out.status.code());
            if out.status.code() == Some(141) {
                break;
            }
        }
        assert!(
            codes.iter().all(|c| matches!(c, Some(0) | Some(141))),
            "{args:?}: {codes:?}"
        );
        assert_eq!(codes.last(), Some(&Some(141)), "{args:?}: {codes:?}");
    }
}

#[test]
fn completions_and_man_page_come_from_the_same_definitions() {
    let repo = TestRepo::bare_dir();
    let run = repo.ckpt(&["completions", "bash"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("snapshot") && run.stdout.contains("--exact"),
        "{}",
        run.stdout
    );
    let run = repo.ckpt(&["man"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(".TH ckpt 1") && run.stdout.contains("restore"),
        "{}",
        run.stdout
    );
    assert!(repo.ckpt(&["completions", "no-such-shell"]).code == 2);
}

/// A snapshot refused because of the FIFO at `fifo` (removed afterwards, and what stood there
/// put back): it names `shown`, stores nothing and changes nothing.
fn refused_for_fifo(repo: &TestRepo, fifo: &std::path::Path, shown: &str, args: &[&str]) {
    let before = repo.fingerprint();
    let refs = repo.ckpt_refs();
    let saved = std::fs::read(fifo).ok();
    let _ = std::fs::remove_file(fifo);
    mkfifo(fifo);
    let run = ckpt_json_within_30s(repo, args);
    std::fs::remove_file(fifo).expect("remove the FIFO");
    if let Some(saved) = saved {
        std::fs::write(fifo, saved).expect("put back what was there");
    }
    assert_ne!(run.code, 0, "{shown}: {}", run.stdout);
    let message = run.one("error")["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(shown) && message.contains("FIFO"),
        "{shown}: {message}"
    );
    assert_eq!(repo.ckpt_refs(), refs, "{shown}: nothing is pinned");
    assert_eq!(repo.fingerprint(), before, "{shown}");
}

/// A FIFO where git reads ignore rules made a snapshot wait forever for a writer while it held
/// the workspace lock (`git status` waits too). Each such place is refused at once, with its
/// path: the root's `.gitignore`, a nested one, one in an untracked directory, one below a
/// directory whose files are all ignored, `info/exclude`, the global excludes file, and one a
/// watch daemon saw appear. A FIFO at a tracked `.gitattributes` is only skipped.
#[test]
fn a_fifo_where_git_reads_ignore_rules_is_refused_not_waited_on() {
    let repo = TestRepo::new();
    repo.write("newdir/file.txt", b"new\n");
    repo.write("logs/a.log", b"log\n");
    repo.write("logs/deeper/b.log", b"log\n");
    repo.write(".git/info/exclude", b"*.log\n");
    repo.snapshot(&[]);
    let global = repo.home.join(".config/git/ignore");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    for (fifo, shown) in [
        (repo.path(".gitignore"), ".gitignore".to_owned()),
        (repo.path("src/util/.gitignore"), "src/util/.gitignore".to_owned()),
        (repo.path("newdir/.gitignore"), "newdir/.gitignore".to_owned()),
        (repo.path("logs/deeper/.gitignore"), "logs/deeper/.gitignore".to_owned()),
        (repo.git_dir().join("info/exclude"), "info/exclude".to_owned()),
        (global.clone(), global.display().to_string()),
    ] {
        refused_for_fifo(&repo, &fifo, &shown, &["snapshot"]);
    }
    assert_eq!(repo.ckpt_json(&["snapshot"], 0).one("snapshot")["created"], false);

    // Watched: the daemon reports the new ignore file, and the full scan it asks for refuses.
    repo.ckpt_json(&["snapshot", "--watch"], 0);
    repo.ckpt_json(&["snapshot", "--watch"], 0);
    refused_for_fifo(
        &repo,
        &repo.path("src/.gitignore"),
        "src/.gitignore",
        &["snapshot", "--watch"],
    );
    repo.ckpt_json(&["watch", "stop"], 0);

    // A tracked `.gitattributes` that converts nothing here, then a FIFO in its place.
    repo.write(".gitattributes", b"*.txt text\n");
    repo.commit_all("attributes");
    std::fs::remove_file(repo.path(".gitattributes")).unwrap();
    mkfifo(&repo.path(".gitattributes"));
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let skipped = run.one("snapshot")["skipped"].as_array().cloned().unwrap_or_default();
    assert!(
        skipped
            .iter()
            .any(|s| s["path"] == ".gitattributes" && s["reason"] == "special_file"),
        "{skipped:?}"
    );
}

/// The copy provider reads `.ckptignore` at the workspace root: a FIFO there is refused too.
#[test]
fn a_fifo_ckptignore_is_refused_by_the_copy_provider() {
    let repo = TestRepo::bare_dir();
    repo.write("a.txt", b"a\n");
    mkfifo(&repo.path(".ckptignore"));
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let message = run.one("error")["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(".ckptignore") && message.contains("FIFO"), "{message}");
    std::fs::remove_file(repo.path(".ckptignore")).unwrap();
    repo.write(".ckptignore", b"*.tmp\n");
    repo.write("sub/b.txt", b"b\n");
    mkfifo(&repo.path("sub/.gitignore"));
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("sub/.gitignore"), "{}", run.stdout);
}

/// A first snapshot seeds ids from the index and, when some attributes file converts content,
/// reads every directory's `.gitattributes` to learn which paths it converts: an untracked FIFO
/// named `.gitattributes` made it wait forever. Such a file now only stops the seeding.
#[test]
fn a_fifo_gitattributes_only_stops_seeding_from_the_index() {
    let repo = TestRepo::new();
    repo.write(".gitattributes", b"*.txt text\n");
    repo.commit_all("attributes");
    mkfifo(&repo.path("src/.gitattributes"));
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let snapshot = run.one("snapshot");
    assert_eq!(snapshot["scan"]["from_index"], 0, "{snapshot}");
    std::fs::remove_file(repo.path("src/.gitattributes")).unwrap();
}

/// Found by a review of the refusal above: a symlink to a FIFO where git follows links (the
/// exclude files outside the worktree, `.ckptignore`) still hung; a FIFO at the XDG ignore file
/// was refused though `core.excludesFile` means git never reads it; and a FIFO `.gitignore`
/// inside an ignored directory that holds tracked files was refused though git never reads it.
#[test]
fn ignore_files_are_judged_where_git_reads_them_links_followed_or_not() {
    let repo = TestRepo::new();
    repo.write("ign/tracked.txt", b"tracked\n");
    repo.commit_all("a tracked file in a directory about to be ignored");
    repo.write(".gitignore", b"ign/\n");
    repo.snapshot(&[]);
    let pipe = repo.home.join("pipe");
    mkfifo(&pipe);
    let global = repo.home.join(".config/git/ignore");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    let exclude = repo.git_dir().join("info/exclude");
    let linked = repo.home.join("linked-excludes");
    for (link, shown, config) in [
        (exclude.clone(), "info/exclude".to_owned(), None),
        (global.clone(), global.display().to_string(), None),
        (linked.clone(), linked.display().to_string(), Some(linked.clone())),
    ] {
        if let Some(file) = &config {
            repo.git(&["config", "core.excludesFile", file.to_str().unwrap()]);
        }
        let saved = std::fs::read(&link).ok();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&pipe, &link).unwrap();
        let run = ckpt_json_within_30s(&repo, &["snapshot"]);
        std::fs::remove_file(&link).unwrap();
        if let Some(saved) = saved {
            std::fs::write(&link, saved).unwrap();
        }
        assert_ne!(run.code, 0, "{shown}: {}", run.stdout);
        assert!(
            run.stdout.contains(&shown) && run.stdout.contains("FIFO"),
            "{}",
            run.stdout
        );
    }

    // `core.excludesFile` is set: the XDG file is never read, FIFO or not.
    mkfifo(&global);
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    repo.git(&["config", "--unset", "core.excludesFile"]);
    std::fs::remove_file(&global).unwrap();

    // Inside an ignored directory: git reads no rules there, and its tracked file is kept.
    mkfifo(&repo.path("ign/.gitignore"));
    repo.write("ign/tracked.txt", b"edited\n");
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(repo.git(&["show", &format!("{id}:ign/tracked.txt")]), "edited\n");
    std::fs::remove_file(repo.path("ign/.gitignore")).unwrap();
}

/// The copy provider follows a `.ckptignore` symlink, so one to a FIFO is refused; a directory
/// named `.ckptignore` holds no rules, as a directory named `.gitignore` holds none for git.
#[test]
fn a_ckptignore_that_links_to_a_fifo_is_refused_and_a_directory_there_holds_no_rules() {
    let repo = TestRepo::bare_dir();
    repo.write("a.txt", b"a\n");
    let pipe = repo.home.join("pipe");
    mkfifo(&pipe);
    std::os::unix::fs::symlink(&pipe, repo.path(".ckptignore")).unwrap();
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains(".ckptignore") && run.stdout.contains("FIFO"),
        "{}",
        run.stdout
    );
    std::fs::remove_file(repo.path(".ckptignore")).unwrap();
    repo.write(".ckptignore/inside.txt", b"i\n");
    let run = ckpt_json_within_30s(&repo, &["snapshot"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

/// ckpt's own `config.toml` that is a FIFO hung every command (found by a review): it is
/// refused, naming it, without being opened.
#[test]
fn a_fifo_config_is_refused_by_every_command_without_waiting() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let config = repo.common_dir().join("ckpt/config.toml");
    mkfifo(&config);
    for args in [&["list"][..], &["snapshot"], &["status"], &["diff", "latest"]] {
        let run = ckpt_json_within_30s(&repo, args);
        assert_ne!(run.code, 0, "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("config.toml"), "{args:?}: {}", run.stdout);
    }
    std::fs::remove_file(&config).unwrap();
    repo.ckpt_json(&["list"], 0);
}
