//! Restore: byte-exact results, only differing paths touched, guard undo, conflicts, --exact,
//! per-path restore, odd names, type changes, and git state left alone.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime};

use crate::common::*;

/// Messes up the worktree like an agent might.
fn agent_edits(repo: &TestRepo) {
    repo.write("src/lib.rs", b"broken!\n");
    repo.remove("src/util");
    repo.write("src/generated/out.rs", b"// generated\n");
    repo.write("notes.txt", b"agent notes\n");
    repo.remove("README.md");
}

#[test]
fn restore_round_trip_with_staged_unstaged_untracked_and_deleted() {
    let repo = TestRepo::new();
    repo.write("src/lib.rs", b"staged\n");
    repo.git(&["add", "src/lib.rs"]);
    repo.write("src/lib.rs", b"unstaged on top\n");
    repo.write("todo.txt", b"untracked\n");
    repo.remove("src/util/mod.rs");
    repo.write("build.log", b"ignored, stays\n");
    repo.write("src/util/keep.rs", b"untracked in dir\n");
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();

    agent_edits(&repo);
    repo.write("build.log", b"ignored, changed later\n");
    let before = repo.fingerprint();
    let run = repo.ckpt_json(&["restore", &id[..8], "--yes"], 0);
    let report = run.one("restore");
    assert_eq!(report["verified"], true);
    assert!(report["guard"].is_string());
    assert_eq!(report["failed"].as_array().unwrap().len(), 0);

    let mut now = repo.worktree();
    // Files created after the checkpoint stay without --exact; ignored files are never touched.
    assert_eq!(
        now.remove(&b"notes.txt"[..]),
        Some(Entry::File {
            content: b"agent notes\n".to_vec(),
            exec: false
        })
    );
    assert_eq!(
        now.remove(&b"src/generated/out.rs"[..]),
        Some(Entry::File {
            content: b"// generated\n".to_vec(),
            exec: false
        })
    );
    now.remove(&b"src/generated"[..]);
    assert_eq!(
        now.remove(&b"build.log"[..]),
        Some(Entry::File {
            content: b"ignored, changed later\n".to_vec(),
            exec: false
        })
    );
    let mut expected = expected;
    expected.remove(&b"build.log"[..]);
    assert_eq!(now, expected);
    assert_eq!(
        repo.fingerprint().without_status(),
        before.without_status(),
        "restore touched git state"
    );
}

#[test]
fn exact_removes_created_after_files_and_guard_undoes_it() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    let original = repo.worktree();
    agent_edits(&repo);
    repo.write("keep.log", b"ignored file is never deleted\n");
    let edited = repo.worktree();

    let preview = repo.ckpt_json(&["preview", &id, "--exact"], 0);
    let p = preview.one("preview");
    assert!(json_paths(&p["created_after"]).contains(&b"notes.txt".to_vec()));
    assert!(json_paths(&p["delete"]).contains(&b"notes.txt".to_vec()));
    assert_eq!(repo.worktree(), edited, "preview is read-only");

    let run = repo.ckpt_json(&["restore", &id, "--exact", "--yes"], 0);
    let report = run.one("restore");
    let guard = report["guard"].as_str().unwrap().to_owned();
    let deleted = json_paths(&report["deleted"]);
    assert!(deleted.contains(&b"notes.txt".to_vec()) && deleted.contains(&b"src/generated/out.rs".to_vec()));
    let mut now = repo.worktree();
    assert!(
        now.remove(&b"keep.log"[..]).is_some(),
        "ignored file must survive --exact"
    );
    assert_eq!(now, original, "exact restore gives back exactly the checkpoint");

    let undo = repo.ckpt_json(&["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(undo.one("restore")["verified"], true);
    assert_eq!(
        repo.worktree(),
        edited,
        "restoring the guard returns the pre-restore state byte for byte"
    );
}

#[test]
fn only_differing_paths_are_written_and_others_keep_their_mtime() {
    let repo = TestRepo::new();
    for i in 0..20 {
        repo.write(format!("many/f{i}.txt"), format!("{i}").as_bytes());
    }
    let id = repo.snapshot(&[]);
    let old = SystemTime::now() - Duration::from_secs(3600);
    for i in 0..20 {
        let file = std::fs::File::options()
            .write(true)
            .open(repo.path(format!("many/f{i}.txt")))
            .unwrap();
        file.set_modified(old).unwrap();
    }
    repo.write("many/f3.txt", b"changed");
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(
        json_paths(&run.one("restore")["written"]),
        vec![b"many/f3.txt".to_vec()]
    );
    for i in (0..20).filter(|i| *i != 3) {
        let mtime = std::fs::metadata(repo.path(format!("many/f{i}.txt")))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(mtime, old, "f{i} was rewritten although it matched");
    }
}

#[test]
fn odd_names_round_trip_and_restore_per_path() {
    let repo = TestRepo::new();
    let names: Vec<&[u8]> = vec![
        b"with space.txt",
        b"new\nline.txt",
        b"colon:name.txt",
        b"glob*?[x].txt",
        b"-leading-dash.txt",
        b"notes..old.txt",
        b"caf\xc3\xa9.txt",
        b"latin1-\xe9.txt",
        b"dir with space/inner \x01 ctrl.txt",
    ];
    for (i, name) in names.iter().enumerate() {
        repo.write(bpath(name), format!("content {i}\n").as_bytes());
    }
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();
    for name in &names {
        repo.write(bpath(name), b"clobbered");
    }
    // Per-path restore of two odd names only.
    let args: Vec<&OsStr> = vec![
        "--json".as_ref(),
        "restore".as_ref(),
        id.as_str().as_ref(),
        "--yes".as_ref(),
        "--".as_ref(),
        OsStr::from_bytes(b"latin1-\xe9.txt"),
        OsStr::from_bytes(b"-leading-dash.txt"),
    ];
    let run = repo.ckpt_in(&repo.root, &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut written = json_paths(&run.one("restore")["written"]);
    written.sort();
    assert_eq!(
        written,
        vec![b"-leading-dash.txt".to_vec(), b"latin1-\xe9.txt".to_vec()]
    );
    assert_eq!(
        repo.read(bpath(b"glob*?[x].txt")),
        b"clobbered",
        "paths outside the selection stay"
    );
    assert_eq!(repo.read(bpath(b"latin1-\xe9.txt")), b"content 7\n");

    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(repo.worktree(), expected);
}

#[test]
fn type_changes_between_file_dir_and_symlink() {
    let repo = TestRepo::new();
    repo.write("a/inner.txt", b"inner");
    repo.write("b", b"plain file");
    repo.symlink("README.md", "c");
    repo.write("deep/x/y/z.txt", b"deep");
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();

    repo.remove("a");
    repo.write("a", b"now a file");
    repo.remove("b");
    repo.write("b/sub/file.txt", b"now a dir");
    repo.remove("c");
    repo.write("c", b"now a regular file");
    repo.remove("deep");
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true, "{:?}", run.json);
    assert_eq!(repo.worktree(), expected);
}

#[test]
fn exec_bit_and_symlink_target_changes_are_restored() {
    let repo = TestRepo::new();
    repo.write("run.sh", b"#!/bin/sh\n");
    repo.chmod("run.sh", 0o755);
    repo.symlink("README.md", "link");
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();
    repo.chmod("run.sh", 0o644);
    repo.remove("link");
    repo.symlink("src", "link");
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    let mut written = json_paths(&run.one("restore")["written"]);
    written.sort();
    assert_eq!(written, vec![b"link".to_vec(), b"run.sh".to_vec()]);
    assert_eq!(repo.worktree(), expected);
}

#[test]
fn ignored_file_in_the_way_is_a_conflict_and_untouched() {
    let repo = TestRepo::new();
    repo.write("out.log", b"captured while tracked\n");
    repo.git(&["add", "-f", "out.log"]);
    let id = repo.snapshot(&[]);
    repo.git(&["rm", "-q", "--cached", "out.log"]);
    repo.write("out.log", b"now ignored and precious\n");
    let before = repo.fingerprint();
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 3);
    let failed = run.one("restore")["failed"].as_array().unwrap().clone();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["path"], "out.log");
    assert!(failed[0]["error"].as_str().unwrap().contains("ignored"));
    assert_eq!(repo.read("out.log"), b"now ignored and precious\n");
    assert_eq!(repo.fingerprint().without_status(), before.without_status());
}

#[test]
fn restore_from_subdirectory_anchors_paths_there() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"changed");
    repo.write("README.md", b"changed too");
    let sub = repo.path("src");
    let args: Vec<&OsStr> = ["--json", "restore", &id, "--yes", "--", "lib.rs"]
        .into_iter()
        .map(OsStr::new)
        .collect();
    let run = repo.ckpt_in(&sub, &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json_paths(&run.one("restore")["written"]), vec![b"src/lib.rs".to_vec()]);
    assert_eq!(repo.read("README.md"), b"changed too");
    let escape: Vec<&OsStr> = ["--json", "restore", &id, "--yes", "--", "../../outside"]
        .into_iter()
        .map(OsStr::new)
        .collect();
    let run = repo.ckpt_in(&sub, &escape);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn restore_needs_confirmation_and_unknown_paths_fail_loudly() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    repo.write("README.md", b"edited");
    let refs_before = repo.ckpt_refs();
    let run = repo.ckpt_json(&["restore", &id], 4);
    assert_eq!(run.one("error")["code"], "refused");
    assert_eq!(repo.read("README.md"), b"edited");
    assert_eq!(repo.ckpt_refs(), refs_before, "a refused restore takes no guard");
    let run = repo.ckpt_json(&["restore", &id, "--yes", "--", "no/such/path"], 1);
    assert_eq!(run.one("error")["code"], "not_found");
    assert_eq!(repo.read("README.md"), b"edited");
}

/// A filter naming a path git ignores is refused as ignored, not as absent: the file is right
/// there on disk, and the user needs to hear why no checkpoint holds it. With the daemon too,
/// where the restore looks at the filter's paths alone.
#[test]
fn a_filter_naming_an_ignored_path_says_it_is_ignored() {
    for watched in [false, true] {
        let repo = TestRepo::new();
        repo.write(".gitignore", b"*.log\ntarget/\n");
        repo.write("build.log", b"ignored output\n");
        repo.write("target/out.bin", b"ignored build\n");
        if watched {
            for _ in 0..3 {
                repo.ckpt_json(&["snapshot", "--watch"], 0);
            }
        }
        let id = repo.snapshot(&[]);
        repo.write("README.md", b"edited");
        for filter in ["build.log", "target/out.bin", "target"] {
            let run = repo.ckpt_json(&["restore", &id, "--yes", "--", filter], 1);
            let error = run.one("error");
            assert_eq!(error["code"], "not_found", "{error}");
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("ignored by git's ignore rules") && message.contains(filter),
                "watched {watched}: {message}"
            );
        }
        let run = repo.ckpt_json(&["restore", &id, "--yes", "--", "no/such.log"], 1);
        let message = run.one("error")["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("neither in the checkpoint nor in the worktree"),
            "watched {watched}: {message}"
        );
        assert_eq!(repo.read("README.md"), b"edited");
        assert_eq!(repo.read("build.log"), b"ignored output\n");
        if watched {
            repo.ckpt_json(&["watch", "stop"], 0);
        }
    }
}

#[test]
fn restore_after_gc_prune_still_works() {
    let repo = TestRepo::new();
    repo.write("untracked-only.txt", b"lives only in a checkpoint\n");
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();
    repo.remove("untracked-only.txt");
    repo.write("src/lib.rs", b"different");
    repo.git(&["reflog", "expire", "--expire=now", "--all"]);
    repo.git(&["gc", "-q", "--prune=now"]);
    assert!(repo.git_raw(&["fsck", "--full"]).status.success());
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(repo.worktree(), expected);
}

#[test]
fn symlinked_ancestor_is_replaced_never_written_through() {
    let repo = TestRepo::new();
    repo.write("d/x.txt", b"inside d");
    let id = repo.snapshot(&[]);
    let outside = repo.root.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    repo.remove("d");
    repo.symlink(&outside, "d");
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true, "{:?}", run.json);
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "nothing may be written through the link"
    );
    assert!(std::fs::symlink_metadata(repo.path("d")).unwrap().is_dir());
    assert_eq!(repo.read("d/x.txt"), b"inside d");
}

#[test]
fn turn_targets_resolve_within_a_session() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"turn 1 step 1");
    let t1 = repo.snapshot(&["--session", "s", "--turn", "1", "--step", "1", "--kind", "auto"]);
    repo.write("a.txt", b"turn 1 step 2");
    repo.snapshot(&["--session", "s", "--turn", "1", "--step", "2", "--kind", "auto"]);
    repo.write("a.txt", b"turn 2 step 1");
    let t2 = repo.snapshot(&["--session", "s", "--turn", "2", "--step", "1", "--kind", "auto"]);
    let show = |target: &str| repo.ckpt_json(&["show", target, "--session", "s"], 0).one("checkpoint")["id"].clone();
    assert_eq!(show("turn:1"), t1.as_str());
    assert_eq!(show("turn:2.5"), t2.as_str());
    repo.ckpt_json(&["restore", "turn:1", "--session", "s", "--yes"], 0);
    assert_eq!(repo.read("a.txt"), b"turn 1 step 1");
}

#[test]
fn a_large_restore_works_within_a_low_open_file_limit() {
    // Writes are staged in chunks, each holding its temp files and directories open until they
    // are synced; under a small descriptor limit (macOS gives 256 by default) the chunks must
    // shrink, never fail.
    let repo = TestRepo::new();
    let id = checkpoint_then_edit_spread(&repo, 600, 30);
    let mut cmd = std::process::Command::new("sh");
    isolate(&mut cmd, &repo.home);
    cmd.current_dir(&repo.root).args([
        "-c",
        "ulimit -n 128 && exec \"$0\" \"$@\"",
        CKPT,
        "--json",
        "restore",
        &id,
        "--yes",
    ]);
    let run = run_ckpt(cmd);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let restore = run.one("restore");
    assert_eq!(restore["verified"], true, "{restore}");
    assert_eq!(restore["written"].as_array().unwrap().len(), 600);
    for i in 0..600 {
        assert_eq!(repo.read(spread_path(i, 30)), format!("original {i}\n").as_bytes());
    }
}

/// Where the checkpoint has a file and the worktree has an empty directory (or a tree of empty
/// ones, as an interrupted restore leaves), the directory goes: no checkpoint can hold it, and
/// it holds no data. One holding an ignored file stays, and the path is reported.
#[test]
fn an_empty_directory_where_the_checkpoint_has_a_file_is_replaced() {
    let repo = TestRepo::new();
    repo.write("x", b"file x\n");
    repo.write("keep/y", b"file y\n");
    let id = repo.snapshot(&[]);
    let expected = repo.worktree();
    repo.remove("x");
    std::fs::create_dir_all(repo.path("x/a/b")).unwrap();
    std::fs::create_dir_all(repo.path("x/c")).unwrap();
    for exact in [false, true] {
        let mut args = vec!["restore", id.as_str(), "--yes"];
        if exact {
            args.push("--exact");
        }
        let run = repo.ckpt_json(&args, 0);
        let restore = run.one("restore");
        assert_eq!(restore["verified"], true, "{restore}");
        assert_eq!(restore["written"], serde_json::json!(["x"]), "{restore}");
        assert_eq!(repo.worktree(), expected);
        repo.remove("x");
        std::fs::create_dir_all(repo.path("x/a/b")).unwrap();
    }
    // An ignored file inside: the directory is not empty, so it stays and the path is named.
    repo.write(".gitignore", b"*.log\n");
    repo.remove("x");
    repo.write("x/a/b/debug.log", b"ignored, never captured\n");
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 3);
    let failed = run.one("restore")["failed"].to_string();
    assert!(failed.contains("\"x\""), "{failed}");
    assert_eq!(repo.read("x/a/b/debug.log"), b"ignored, never captured\n");
}

/// A restore remembers the trees its check of the target read and validated (`checked-trees`
/// in the state directory), and the next restore's check does not read them again: a subtree
/// the restore never touches, made unreadable since, is not in its way. A preview, which reads
/// the whole target, still finds it; so does a restore once the list is gone.
#[test]
fn a_restore_does_not_read_again_the_trees_an_earlier_check_read() {
    let repo = TestRepo::new();
    repo.write("shared/x.txt", b"shared\n");
    repo.write("top.txt", b"one\n");
    let first = repo.snapshot(&[]);
    repo.write("top.txt", b"two\n");
    repo.ckpt_json(&["restore", &first, "--yes"], 0);
    let shared = repo.git(&["rev-parse", &format!("{first}:shared")]).trim().to_owned();
    let list = repo.common_dir().join("ckpt/main/checked-trees");
    let listed = std::fs::read_to_string(&list).unwrap();
    assert!(listed.lines().any(|line| line.starts_with(&shared)), "{listed}");

    repo.loosen();
    let object = repo.common_dir().join("objects").join(&shared[..2]).join(&shared[2..]);
    std::fs::set_permissions(&object, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&object, b"not a zlib stream").unwrap();

    repo.write("top.txt", b"three\n");
    let run = repo.ckpt_json(&["restore", &first, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(std::fs::read(repo.path("top.txt")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(&object).unwrap(), b"not a zlib stream", "never rewritten");
    let preview = repo.ckpt(&["--json", "preview", &first]);
    assert_ne!(preview.code, 0, "a preview reads every tree: {}", preview.stdout);

    std::fs::remove_file(&list).unwrap();
    repo.write("top.txt", b"four\n");
    let refused = repo.ckpt(&["--json", "restore", &first, "--yes"]);
    assert_ne!(
        refused.code, 0,
        "without the list the check reads it: {}",
        refused.stdout
    );
    assert_eq!(std::fs::read(repo.path("top.txt")).unwrap(), b"four\n");
}

#[test]
fn a_file_too_large_to_protect_is_left_in_place_and_named_by_the_restore() {
    let repo = TestRepo::new();
    repo.set_config("max_file_size = 100\n");
    repo.write("small.txt", b"one\n");
    let id = repo.snapshot(&[]);
    repo.write("small.txt", b"two\n");
    repo.write("dump.bin", &[7u8; 500]);
    repo.write("notes.txt", b"created after\n");
    for exact in [false, true] {
        let mut args = vec!["restore", id.as_str(), "--yes"];
        if exact {
            args.push("--exact");
        }
        let run = repo.ckpt_json(&args, 0);
        let report = run.one("restore");
        let unprotected = report["not_protected"].as_array().expect("not_protected");
        assert_eq!(unprotected.len(), 1, "exact {exact}: {report}");
        assert_eq!(unprotected[0]["path"], "dump.bin", "{report}");
        assert!(
            unprotected[0]["reason"].as_str().unwrap().starts_with("too_large"),
            "{report}"
        );
        assert_eq!(repo.read("dump.bin"), vec![7u8; 500], "never touched");
        assert_eq!(repo.read("small.txt"), b"one\n");
        let text = repo.ckpt(&["restore", &id, "--yes"]);
        assert!(
            text.stdout.contains("not protected") && text.stdout.contains("dump.bin"),
            "{}",
            text.stdout
        );
    }
    assert!(
        !repo.path("notes.txt").exists(),
        "--exact removed what the guard protected"
    );

    // A filter naming only that file names something that is there.
    let run = repo.ckpt_json(&["restore", &id, "--yes", "--exact", "--", "dump.bin"], 0);
    assert_eq!(
        run.one("restore")["not_protected"][0]["path"],
        "dump.bin",
        "{}",
        run.stdout
    );
    assert_eq!(repo.read("dump.bin"), vec![7u8; 500]);

    // A file the checkpoint could not hold (too large then, small now) is named too.
    repo.write("shrink.bin", &[1u8; 500]);
    repo.write("small.txt", b"a checkpoint of its own\n");
    let big_then = repo.snapshot(&[]);
    repo.write("shrink.bin", b"small now\n");
    let run = repo.ckpt_json(&["restore", &big_then, "--yes", "--exact", "--", "shrink.bin"], 0);
    let report = run.one("restore");
    let named: Vec<_> = report["not_protected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        named
            .iter()
            .any(|(p, why)| p == "shrink.bin" && why.starts_with("not in checkpoint: too_large")),
        "{report}"
    );
    assert_eq!(repo.read("shrink.bin"), b"small now\n", "never touched");
}

#[test]
fn hard_links_among_the_restored_files_do_not_fail_an_undisturbed_restore() {
    // Removing or swapping one name of an inode moves the ctime and link count every other
    // name shows: the restore's own doing, not a user's change.
    for round in 0..5 {
        let repo = TestRepo::new();
        repo.write("a", b"a\n");
        repo.write("b", b"b\n");
        for i in 0..10 {
            repo.write(format!("g{}/t{i}", i % 3), format!("own {i}\n").as_bytes());
        }
        repo.commit_all("files");
        let id = repo.snapshot(&[]);
        repo.write("n1", b"q\n");
        std::fs::hard_link(repo.path("n1"), repo.path("n2")).unwrap();
        std::fs::hard_link(repo.path("n1"), repo.path("n3")).unwrap();
        repo.write("e/m1", b"r\n");
        std::fs::hard_link(repo.path("e/m1"), repo.path("e/m2")).unwrap();
        std::fs::remove_file(repo.path("b")).unwrap();
        std::fs::hard_link(repo.path("a"), repo.path("b")).unwrap();
        let mut appended = repo.read("a");
        appended.extend_from_slice(b"X\n");
        std::fs::write(repo.path("a"), &appended).unwrap();
        // Many names of one inode, each swapped for a file of its own at once.
        for i in 1..10 {
            let name = format!("g{}/t{i}", i % 3);
            std::fs::remove_file(repo.path(&name)).unwrap();
            std::fs::hard_link(repo.path("g0/t0"), repo.path(&name)).unwrap();
        }
        let run = repo.ckpt_json(&["restore", &id, "--yes", "--exact"], 0);
        assert_eq!(run.one("restore")["verified"], true, "round {round}: {}", run.stdout);
        assert_eq!(repo.read("a"), b"a\n");
        assert_eq!(repo.read("b"), b"b\n");
        for gone in ["n1", "n2", "n3", "e/m1", "e/m2"] {
            assert!(!repo.path(gone).exists(), "round {round}: {gone} left");
        }
        for i in 0..10 {
            assert_eq!(repo.read(format!("g{}/t{i}", i % 3)), format!("own {i}\n").as_bytes());
        }
    }
}
