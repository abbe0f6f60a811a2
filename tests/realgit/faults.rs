//! Fault injection (built with `--features fault-injection`): the process aborts at a named point
//! inside snapshot or restore, and what is left must be whole — no ref or record for an aborted
//! capture, and an aborted restore that the guard can still undo byte for byte.

use crate::common::*;

fn ckpt_with_fault(repo: &TestRepo, fault: &str, args: &[&str]) -> std::process::Output {
    repo.ckpt_command()
        .env("CKPT_FAULT", fault)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn an_aborted_snapshot_publishes_no_ref_and_no_record() {
    let repo = TestRepo::new();
    let first = repo.snapshot(&[]);
    repo.write("new.txt", b"captured by the aborted snapshot");
    for fault in ["snapshot:after-blobs", "snapshot:after-commit"] {
        let before = repo.fingerprint();
        let out = ckpt_with_fault(&repo, fault, &["--json", "snapshot"]);
        assert!(!out.status.success(), "{fault}: the process must have aborted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(fault));
        assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/main/{first}")], "{fault}");
        assert_eq!(
            ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id"),
            vec![first.clone()],
            "{fault}"
        );
        assert_eq!(repo.fingerprint(), before, "{fault}");
    }
    let second = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(
        second.one("snapshot")["created"],
        true,
        "the next snapshot works normally"
    );
}

#[test]
fn an_aborted_restore_can_be_undone_through_its_guard() {
    let repo = TestRepo::new();
    for i in 0..10 {
        repo.write(format!("f{i}.txt"), format!("original {i}").as_bytes());
    }
    let id = repo.snapshot(&[]);
    let original = repo.worktree();
    for i in 0..10 {
        repo.write(format!("f{i}.txt"), format!("agent {i}").as_bytes());
    }
    repo.write("agent-new.txt", b"new");
    let edited = repo.worktree();
    let out = ckpt_with_fault(
        &repo,
        "restore:after-first-write",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(!out.status.success());
    let journal = repo.common_dir().join("ckpt/main/restore-journal.json");
    assert!(journal.is_file(), "an interrupted restore leaves its journal");
    let journal: serde_json::Value = serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
    let guard = journal["guard"].as_str().unwrap().to_owned();
    let mut now = repo.worktree();
    assert_ne!(now, edited, "the first write landed before the abort");
    // Temp files of writes staged but not yet in place may remain; the next restore removes them.
    let with_temps = now.len();
    now.retain(|path, _| {
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
        !(name.starts_with(b".ckpt-") && name.ends_with(b".tmp"))
    });
    let temps = with_temps - now.len();
    for (path, entry) in &now {
        let whole = Some(entry) == original.get(path) || Some(entry) == edited.get(path);
        assert!(
            whole,
            "{} is neither the old nor the new version",
            String::from_utf8_lossy(path)
        );
    }
    // Its guard and target cannot be deleted while the journal is pending.
    for id in [&guard, &id] {
        let delete = repo.ckpt(&["--json", "delete", id, "--yes"]);
        assert_eq!(delete.code, 4, "{}", delete.stdout);
        assert!(delete.stdout.contains("interrupted restore"), "{}", delete.stdout);
    }
    assert_eq!(repo.ckpt(&["--json", "clear", "--yes"]).code, 4);
    let undo = repo.ckpt_json(&["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(undo.one("restore")["verified"], true);
    let removed = undo.stderr.matches("removed leftover temp file").count();
    assert_eq!(removed, temps, "{}", undo.stderr);
    assert_eq!(
        repo.worktree(),
        edited,
        "the guard undoes a half-finished restore exactly"
    );
}

/// A restore whose directory sync fails (an I/O error made up by the fault point) names every
/// path in that directory as failed and is not verified: its renames may not survive a crash.
#[test]
fn a_directory_that_cannot_be_synced_fails_the_restore_loudly() {
    let repo = TestRepo::new();
    repo.write("docs/a.txt", b"original a\n");
    repo.write("docs/b.txt", b"original b\n");
    let id = repo.snapshot(&[]);
    repo.write("docs/a.txt", b"agent a\n");
    repo.remove("docs/b.txt");
    repo.write("docs/new.txt", b"agent new\n");
    let out = ckpt_with_fault(
        &repo,
        "restore:directory-sync",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(
        !out.status.success(),
        "a restore that may not be durable must not succeed"
    );
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let restore = records
        .iter()
        .find(|r| r["type"] == "restore")
        .unwrap_or_else(|| panic!("no restore record: {records:?}"));
    assert_eq!(restore["verified"], false, "{restore}");
    let failed: Vec<(String, String)> = restore["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut paths: Vec<&str> = failed.iter().map(|(p, _)| p.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["docs/a.txt", "docs/b.txt", "docs/new.txt"], "{restore}");
    for (path, error) in &failed {
        assert!(error.contains("could not be synced"), "{path}: {error}");
    }
    // The content itself was put in place: only its durability is in doubt.
    assert_eq!(repo.read("docs/a.txt"), b"original a\n");
    let again = repo.ckpt_json(&["restore", &id, "--yes", "--exact"], 0);
    assert_eq!(again.one("restore")["verified"], true);
}

/// Before a restore changes the worktree, its guard is synced to disk: its pin, its commit, the
/// content it holds where the restore writes, and the packs. Each of those made to fail (an I/O
/// error made up by the fault point) refuses the restore with the path named and the worktree
/// untouched, so each is among what is synced, and synced first.
#[test]
fn a_guard_is_on_disk_before_the_restore_changes_anything() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"original a\n");
    let id = repo.snapshot(&[]);
    let pack_dir = repo.common_dir().join("objects/pack");
    if !pack_dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        repo.git(&["repack", "-q"]);
    }
    for (round, (subject, what)) in [
        ("refs/ckpt/", "the guard's pin"),
        ("objects/pack/", "a pack"),
        ("@commit", "the guard's commit"),
        ("@content", "the guard's content of a.txt"),
    ]
    .into_iter()
    .enumerate()
    {
        let edit = format!("agent edit {round}\n");
        repo.write("a.txt", edit.as_bytes());
        let blob = repo.git(&["hash-object", "a.txt"]).trim().to_owned();
        // A checkpoint of the edit taken first is the guard the restore stands on (nothing
        // changed since), so the packs holding its commit and content are known beforehand.
        let at = match subject {
            "@content" => {
                repo.snapshot(&[]);
                repo.pack_holding(&blob)
            }
            "@commit" => {
                let guard = repo.snapshot(&[]);
                repo.pack_holding(&guard)
            }
            other => other.to_owned(),
        };
        let before = repo.worktree();
        let out = repo
            .ckpt_command()
            .env("CKPT_FAULT", "restore:guard-sync")
            .env("CKPT_FAULT_AT", &at)
            .args(["--json", "restore", &id, "--yes", "--exact"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{what}: {stdout}");
        assert!(
            stdout.contains("must be on disk before the restore"),
            "{what}: {stdout}"
        );
        assert!(stdout.contains(&at), "{what}: the failing path is named: {stdout}");
        assert_eq!(
            repo.worktree(),
            before,
            "{what}: nothing changed before the guard was on disk"
        );
    }
    // Without the fault, the same restore goes through.
    let run = repo.ckpt_json(&["restore", &id, "--yes", "--exact"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(repo.read("a.txt"), b"original a\n");
}

/// A restore writes and syncs its files in the state directory's `staging/` while the guard is
/// made durable, then moves them into place: an abort right after the journal leaves them
/// there (and nothing in the worktree); the next restore removes what that dead process
/// staged, and nothing else there, and leaves nothing of its own. A directory that gives new
/// files its group (set-group-id) gets its files written in place, so a restored file there
/// gets that group, as one git checks out would.
#[test]
fn staged_writes_are_moved_into_place_and_never_left_behind() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let repo = TestRepo::new();
    repo.write("shared/a.txt", b"one\n");
    repo.write("plain/b.txt", b"two\n");
    repo.write("plain/c.txt", b"three\n");
    let id = repo.snapshot(&[]);
    let original = repo.worktree();
    repo.write("shared/a.txt", b"edited\n");
    repo.write("plain/b.txt", b"edited\n");
    repo.write("plain/c.txt", b"edited\n");
    let as_root = std::fs::metadata(repo.path("plain/b.txt")).unwrap().uid() == 0;
    const GROUP: u32 = 65534;
    if as_root {
        std::os::unix::fs::chown(repo.path("shared"), None, Some(GROUP)).unwrap();
        std::fs::set_permissions(repo.path("shared"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    }
    let staging = repo.common_dir().join("ckpt/main/staging");
    let staged_names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&staging)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    let edited = repo.worktree();
    let out = ckpt_with_fault(
        &repo,
        "restore:after-journal",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(!out.status.success(), "the restore must have aborted");
    assert_eq!(
        repo.worktree(),
        edited,
        "nothing in the worktree changed before the abort"
    );
    let left = staged_names();
    let staged_by_the_abort = if as_root { 2 } else { 3 };
    assert_eq!(left.len(), staged_by_the_abort, "{left:?}");
    assert!(
        left.iter()
            .all(|name| name.starts_with(".ckpt-") && name.ends_with(".tmp")),
        "{left:?}"
    );
    std::fs::write(staging.join("not-ckpts.tmp"), b"someone else's").unwrap();
    let staged_problems = |run: &Run| {
        run.json
            .iter()
            .filter(|v| v["type"] == "audit.problem" && v["code"] == "staged_temp_file")
            .count()
    };
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(staged_problems(&audit), staged_by_the_abort, "{:?}", audit.json);
    assert_eq!(staged_names().len(), staged_by_the_abort + 1, "audit removes nothing");

    let run = repo.ckpt_json(&["restore", &id, "--yes", "--exact"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(repo.worktree(), original);
    assert_eq!(staged_names(), vec!["not-ckpts.tmp".to_owned()]);

    // What another aborted restore staged: doctor --fix removes it too (and rolls it back).
    repo.write("plain/b.txt", b"edited again\n");
    let out = ckpt_with_fault(
        &repo,
        "restore:after-journal",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(!out.status.success(), "the restore must have aborted");
    assert_eq!(staged_names().len(), 2, "{:?}", staged_names());
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(
        fixed.one("doctor")["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("leftover staged file")),
        "{:?}",
        fixed.json
    );
    assert_eq!(staged_names(), vec!["not-ckpts.tmp".to_owned()]);
    assert_eq!(staged_problems(&repo.ckpt_json(&["audit"], 0)), 0);
    if as_root {
        assert_eq!(std::fs::metadata(repo.path("shared/a.txt")).unwrap().gid(), GROUP);
        assert_eq!(std::fs::metadata(repo.path("plain/b.txt")).unwrap().gid(), 0);
    } else {
        eprintln!("not root: the set-group-id directory was not tried");
    }
}

/// A staged file whose pid is in use again (here: by the test itself) is a leftover all the
/// same once `doctor --fix` holds the lock every restore holds while its files are staged.
#[test]
fn doctor_removes_staged_leftovers_whose_pid_is_in_use_again() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"one\n");
    let id = repo.snapshot(&[]);
    repo.write("a.txt", b"two\n");
    // A restore makes the staging directory (owner-only) as it stages its writes.
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    let staging = repo.common_dir().join("ckpt/main/staging");
    let leftover = format!(".ckpt-{}-0123456789abcdef.tmp", std::process::id());
    std::fs::write(staging.join(&leftover), b"one\n").unwrap();
    std::fs::write(staging.join("not-ckpts.tmp"), b"someone else's").unwrap();
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    let actions = fixed.one("doctor")["actions"].clone();
    assert!(
        actions
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains(&leftover)),
        "{actions}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["not-ckpts.tmp".to_owned()],
        "only what is not ckpt's is left"
    );
}

/// The `.ckpt-*.tmp` names in `dir` of the worktree.
fn temp_names_in(repo: &TestRepo, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.path(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".ckpt-") && name.ends_with(".tmp"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_restore_its_parent_has_not_reaped_counts_as_ended() {
    let repo = TestRepo::new();
    let write_all = |version: &str| {
        for i in 0..6 {
            repo.write(format!("d/f{i}.txt"), format!("{version} {i}\n").as_bytes());
        }
    };
    write_all("one");
    let first = repo.snapshot(&[]);
    write_all("two");
    let second = repo.snapshot(&[]);
    let latest = repo.worktree();

    // Killed once its journal is written, and left unreaped (a zombie) while the next commands
    // run, as when a harness kills ckpt and waits for it late.
    let mut child = repo
        .ckpt_command()
        .env("CKPT_FAULT", "restore:after-journal")
        .args(["restore", &first, "--yes", "--exact"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stat = format!("/proc/{}/stat", child.id());
    let started = std::time::Instant::now();
    let is_zombie = || {
        std::fs::read_to_string(&stat)
            .ok()
            .and_then(|text| {
                text.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    };
    while !is_zombie() {
        assert!(started.elapsed().as_secs() < 60, "the restore never ended");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // What a kill between a swap's temp file and its rename leaves: the target's content
    // beside its path, under a name carrying the restore's pid.
    let temp = format!("d/.ckpt-{}-0123456789abcdef.tmp", child.id());
    repo.write(&temp, b"one 0\n");

    let audit = repo.ckpt_json(&["audit"], 1);
    let codes: Vec<&str> = audit
        .json
        .iter()
        .filter(|v| v["type"] == "audit.problem")
        .filter_map(|v| v["code"].as_str())
        .collect();
    for code in ["pending_journal", "temp_file", "staged_temp_file"] {
        assert!(codes.contains(&code), "{code}: {codes:?}");
    }
    assert!(
        !codes.contains(&"restore_in_progress"),
        "a zombie runs nothing: {codes:?}"
    );

    let run = repo.ckpt_json(&["restore", &second, "--yes", "--exact"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(temp_names_in(&repo, "d"), Vec::<String>::new(), "{}", run.stderr);
    assert_eq!(repo.worktree(), latest);
    assert_eq!(repo.ckpt_json(&["audit"], 0).one("audit")["ok"], true);
    child.wait().unwrap();
}

#[test]
fn a_chmod_while_the_restore_stages_is_kept() {
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write("secret.txt", b"old\n");
    let id = repo.snapshot(&[]);
    repo.write("secret.txt", b"new\n");
    let out = crate::safety::run_paused(
        &repo,
        "restore:after-staging",
        &["--json", "restore", &id, "--yes"],
        || {
            std::fs::set_permissions(repo.path("secret.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
        },
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(repo.path("secret.txt")).unwrap(), b"old\n");
    let mode = std::fs::metadata(repo.path("secret.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the user's chmod during the restore is kept");
}

#[test]
fn a_chmod_just_before_the_swap_is_kept_and_reported() {
    // The content was staged with the permissions the file had then; a chmod that lands after
    // that, right before the swap, must not be undone by it.
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write("secret.txt", b"old\n");
    repo.write("other.txt", b"one\n");
    let id = repo.snapshot(&[]);
    repo.write("secret.txt", b"new\n");
    repo.write("other.txt", b"two\n");
    std::fs::set_permissions(repo.path("secret.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = crate::safety::run_paused(
        &repo,
        "restore:before-replace",
        &["--json", "restore", &id, "--yes"],
        || {
            std::fs::set_permissions(repo.path("secret.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
        },
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mode = std::fs::metadata(repo.path("secret.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the user's chmod during the restore was undone:\n{stdout}");
    assert_eq!(
        repo.read("secret.txt"),
        b"new\n",
        "the user's file stays as the user left it"
    );
    assert_eq!(repo.read("other.txt"), b"one\n", "every other path is restored");
    assert_eq!(out.status.code(), Some(3), "a conflict is a partial failure:\n{stdout}");
    assert!(
        stdout.contains("secret.txt") && stdout.contains("mode 0600"),
        "the report names the path and what changed:\n{stdout}"
    );
    let names: Vec<_> = std::fs::read_dir(&repo.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".ckpt-")), "{names:?}");
}

#[test]
fn a_chmod_of_the_new_file_during_a_swap_that_goes_back_is_kept_with_it() {
    // A chmod lands on the file the swap displaced (so the swap goes back), and another on
    // ckpt's new file while it stands at the path: both are the user's, neither is dropped.
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write("d/secret.txt", b"old\n");
    let id = repo.snapshot(&[]);
    repo.write("d/secret.txt", b"new\n");
    std::fs::set_permissions(repo.path("d/secret.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let temps = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(repo.path("d"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".ckpt-"))
            .collect()
    };
    let out = crate::safety::run_paused(
        &repo,
        "restore:after-exchange",
        &["--json", "restore", &id, "--yes"],
        || {
            let displaced = temps();
            assert_eq!(displaced.len(), 1, "{displaced:?}");
            std::fs::set_permissions(&displaced[0], std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::set_permissions(repo.path("d/secret.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
        },
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(
        repo.read("d/secret.txt"),
        b"new\n",
        "the user's file is back at its path"
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&repo.path("d/secret.txt")), 0o600);
    let kept: Vec<_> = std::fs::read_dir(repo.path("d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".ckpt-kept-"))
        .collect();
    assert_eq!(
        kept.len(),
        1,
        "the chmod made to the new file is kept with it:\n{stdout}"
    );
    assert_eq!(mode(&kept[0]), 0o640);
    assert_eq!(std::fs::read(&kept[0]).unwrap(), b"old\n");
    assert!(stdout.contains("permissions or owner"), "{stdout}");
    assert!(temps().iter().all(|p| p.to_string_lossy().contains(".ckpt-kept-")));
}

#[test]
fn a_chmod_of_a_file_the_restore_removes_keeps_the_file() {
    // --exact removes a file created after the checkpoint; the user chmods it after the guard
    // took it. Removing it would lose the chmod (the guard holds content and the exec bit).
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write("keep.txt", b"one\n");
    let id = repo.snapshot(&[]);
    repo.write("made.txt", b"made after\n");
    repo.write("other.txt", b"also made after\n");
    std::fs::set_permissions(repo.path("made.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = crate::safety::run_paused(
        &repo,
        "restore:after-staging",
        &["--json", "restore", &id, "--yes", "--exact"],
        || {
            std::fs::set_permissions(repo.path("made.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
        },
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(repo.read("made.txt"), b"made after\n", "not removed:\n{stdout}");
    let mode = std::fs::metadata(repo.path("made.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!repo.path("other.txt").exists(), "the untouched one is removed");
    assert!(
        stdout.contains("made.txt") && stdout.contains("not removed"),
        "{stdout}"
    );
}

#[test]
fn a_staging_directory_others_can_write_is_never_used() {
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write("d/a.txt", b"one\n");
    let id = repo.snapshot(&[]);
    repo.write("d/a.txt", b"two\n");
    let staging = repo.common_dir().join("ckpt/main/staging");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = ckpt_with_fault(&repo, "restore:after-journal", &["restore", &id, "--yes"]);
    assert!(!out.status.success(), "the restore must have aborted");
    assert_eq!(
        std::fs::read_dir(&staging).unwrap().count(),
        0,
        "nothing was staged there"
    );
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    assert_eq!(std::fs::read(repo.path("d/a.txt")).unwrap(), b"one\n");
}

#[test]
fn a_write_that_cannot_be_staged_stops_the_restore_before_anything_changes() {
    let repo = TestRepo::new();
    for i in 0..5 {
        repo.write(format!("d/f{i}.txt"), b"one\n");
    }
    let id = repo.snapshot(&[]);
    for i in 0..5 {
        repo.write(format!("d/f{i}.txt"), b"two\n");
    }
    let edited = repo.worktree();
    let before = repo.fingerprint();
    let out = repo
        .ckpt_command()
        .env("CKPT_FAULT", "restore:staging-full")
        .env("CKPT_FAULT_AT", "d/f3.txt")
        .args(["restore", &id, "--yes", "--exact"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("d/f3.txt") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert_eq!(repo.worktree(), edited, "nothing in the worktree changed");
    assert_eq!(temp_names_in(&repo, "d"), Vec::<String>::new());
    let staging = repo.common_dir().join("ckpt/main/staging");
    assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0, "nothing left staged");
    assert_eq!(repo.fingerprint(), before);
    // No journal: nothing to settle.
    assert_eq!(repo.ckpt_json(&["audit"], 0).one("audit")["ok"], true);
}

#[test]
fn a_restore_as_root_keeps_the_owner_of_the_files_it_replaces() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let repo = TestRepo::new();
    // One file goes through the staging directory, one is written beside its path (its
    // directory is set-group-id).
    let files = ["staged/a.txt", "in-place/b.txt"];
    for file in files {
        repo.write(file, b"one\n");
    }
    let id = repo.snapshot(&[]);
    for file in files {
        repo.write(file, b"two\n");
    }
    if std::fs::metadata(repo.path(files[0])).unwrap().uid() != 0 {
        eprintln!("not root: giving files away cannot be tried");
        return;
    }
    std::fs::set_permissions(repo.path("in-place"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    const NOBODY: u32 = 65534;
    for file in files {
        std::os::unix::fs::chown(repo.path(file), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let run = repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(run.one("restore")["verified"], true);
    for file in files {
        let meta = std::fs::metadata(repo.path(file)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "{file}");
        assert_eq!(std::fs::read(repo.path(file)).unwrap(), b"one\n");
    }
}
