//! Data-safety defects found by adversarial testing (issue 11), each reproduced on a real
//! repository: files changing while they are captured, a user writing during a restore, a store
//! inside the workspace, gc racing snapshots, and the rest. Each test failed on the code before
//! its fix.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// Rewrites `path` in a loop until `stop`: truncate, then write `big` bytes of `a` or `small`
/// bytes of `b` in 1 MiB chunks, so a torn read mixes both letters or is cut short.
fn churn(path: &Path, big: usize, small: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let path = path.to_owned();
    std::thread::spawn(move || {
        let mut rounds = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let (letter, len) = if rounds.is_multiple_of(2) {
                (b'a', big)
            } else {
                (b'b', small)
            };
            let chunk = vec![letter; 1 << 20];
            let mut file = std::fs::File::create(&path).expect("truncate");
            let mut left = len;
            while left > 0 {
                let n = left.min(chunk.len());
                file.write_all(&chunk[..n]).expect("write");
                left -= n;
            }
            rounds += 1;
        }
        rounds
    })
}

/// `git fsck --full` passes and says nothing about a bad object.
fn assert_fsck_clean(repo: &TestRepo, git_dir_args: &[&str]) {
    let mut args = git_dir_args.to_vec();
    args.extend(["fsck", "--full", "--no-dangling"]);
    let out = repo.git_raw(&args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "git fsck failed:\n{text}");
    assert!(
        !text.contains("mismatch") && !text.contains("corrupt") && !text.contains("error"),
        "git fsck:\n{text}"
    );
}

#[test]
fn a_large_file_changing_during_snapshots_never_stores_a_torn_object() {
    let repo = TestRepo::new();
    let big = repo.path("big.bin");
    repo.write("big.bin", &vec![b'a'; 20 << 20]);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = churn(&big, 20 << 20, 9 << 20, stop.clone());
    let mut ids = Vec::new();
    for round in 0..8 {
        std::fs::write(repo.path("round.txt"), format!("{round}")).expect("write");
        let run = repo.ckpt_json(&["snapshot"], 0);
        ids.push(run.one("snapshot")["id"].as_str().expect("id").to_owned());
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().expect("writer");
    assert!(rounds > 2, "the writer ran only {rounds} rounds");
    assert_fsck_clean(&repo, &[]);
    // Whatever a checkpoint holds of the file was on disk as one piece: one letter only.
    for id in &ids {
        let listed = repo.git(&["ls-tree", id, "big.bin"]);
        if listed.trim().is_empty() {
            continue; // reported as not protected (changed while being read)
        }
        let blob = listed.split_whitespace().nth(2).expect("blob id").to_owned();
        let out = repo.git_raw(&["cat-file", "blob", &blob]);
        assert!(out.status.success());
        let first = out.stdout.first().copied();
        assert!(
            out.stdout.iter().all(|b| Some(*b) == first),
            "checkpoint {id} holds a torn big.bin ({} bytes)",
            out.stdout.len()
        );
    }
    let audit = repo.ckpt_json(&["audit"], 0);
    assert_eq!(audit.one("audit")["problems"], 0, "{}", audit.stdout);
}

#[test]
fn audit_verifies_object_content_not_only_presence() {
    let repo = TestRepo::new();
    repo.write("data.txt", b"precious content\n");
    let id = repo.snapshot(&[]);
    let blob = repo.git(&["rev-parse", &format!("{id}:data.txt")]).trim().to_owned();
    assert_eq!(repo.ckpt_json(&["audit"], 0).one("audit")["problems"], 0);
    // Replace the loose object with a valid zlib stream of other content under the same name.
    repo.loosen();
    let object = repo.git_dir().join("objects").join(&blob[..2]).join(&blob[2..]);
    let other = tempfile::tempdir().expect("tempdir");
    let scratch = other.path().join("objects");
    std::fs::create_dir_all(&scratch).expect("mkdir");
    let out = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(other.path().join("scratch.git"))
        .output()
        .expect("git init");
    assert!(out.status.success());
    let mut cmd = std::process::Command::new("git");
    cmd.arg("--git-dir")
        .arg(other.path().join("scratch.git"))
        .args(["hash-object", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("hash-object");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"tampered content!\n")
        .expect("write");
    let forged = String::from_utf8(child.wait_with_output().expect("wait").stdout).expect("utf8");
    let forged = forged.trim();
    let forged_path = other
        .path()
        .join("scratch.git/objects")
        .join(&forged[..2])
        .join(&forged[2..]);
    let mode = std::fs::metadata(&object).expect("object").permissions();
    std::fs::set_permissions(&object, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    std::fs::copy(&forged_path, &object).expect("forge");
    std::fs::set_permissions(&object, mode).expect("chmod");
    let audit = repo.ckpt_json(&["audit"], 1);
    let text = audit.stdout.clone();
    assert!(
        text.contains("corrupt") && text.contains(&blob),
        "audit must name the corrupt blob: {text}"
    );
}

/// Runs `ckpt args` held at the pause point `point`; once it is there, `act` runs, then the
/// command goes on. Returns its output.
#[cfg(feature = "fault-injection")]
pub fn run_paused(repo: &TestRepo, point: &str, args: &[&str], act: impl FnOnce()) -> std::process::Output {
    let resume = repo.home.join(format!("resume-{point}").replace(':', "-"));
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_PAUSE", point)
        .env("CKPT_PAUSE_RESUME", &resume)
        .args(args);
    run_paused_command(cmd, point, &resume, act)
}

/// Runs `cmd` (set up to pause at `point` until `resume` exists), runs `act` once it is held
/// there, then lets it go on.
#[cfg(feature = "fault-injection")]
pub fn run_paused_command(
    mut cmd: std::process::Command,
    point: &str,
    resume: &Path,
    act: impl FnOnce(),
) -> std::process::Output {
    use std::io::BufRead;
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ckpt");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let paused = loop {
        match lines.next() {
            Some(Ok(line)) if line.contains(&format!("paused at {point}")) => break true,
            Some(Ok(line)) => seen.push(line),
            _ => break false,
        }
    };
    assert!(paused, "ckpt never reached {point}: {seen:?}");
    act();
    std::fs::write(resume, b"go").expect("resume");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut out = child.wait_with_output().expect("wait");
    seen.extend(rest);
    out.stderr = seen.join("\n").into_bytes();
    out
}

#[cfg(feature = "fault-injection")]
#[test]
fn a_change_after_the_writes_fails_verification_by_path_and_is_kept() {
    // Once every file has landed and before the restore checks them, the user edits one
    // restored file and deletes another: verification names exactly those two, keeps the
    // edit, and the restore does not claim success.
    let repo = TestRepo::new();
    let id = checkpoint_then_edit_spread(&repo, 40, 4);
    let user = b"the user's edit, after the restore wrote this file\n";
    let out = run_paused(
        &repo,
        "restore:before-verify",
        &["--json", "restore", &id, "--yes"],
        || {
            std::fs::write(repo.path("d1/f5.txt"), user).expect("user write");
            std::fs::remove_file(repo.path("d2/f6.txt")).expect("user delete");
        },
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let restore: serde_json::Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "restore")
        .expect("a restore record");
    assert_eq!(restore["verified"], false, "{restore}");
    let mut failed: Vec<String> = restore["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert!(f["error"].as_str().unwrap().contains("verification failed"), "{f}");
            f["path"].as_str().unwrap().to_owned()
        })
        .collect();
    failed.sort();
    assert_eq!(failed, vec!["d1/f5.txt", "d2/f6.txt"], "{restore}");
    for listed in ["written", "deleted"] {
        let paths = restore[listed].as_array().unwrap();
        assert!(
            !paths.iter().any(|p| p == "d1/f5.txt" || p == "d2/f6.txt"),
            "a path that failed is not also {listed}: {restore}"
        );
    }
    assert_eq!(repo.read("d1/f5.txt"), user, "the user's edit is kept");
    for i in (0..40).filter(|i| ![5, 6].contains(i)) {
        assert_eq!(repo.read(spread_path(i, 4)), format!("original {i}\n").as_bytes());
    }
}

#[cfg(feature = "fault-injection")]
#[test]
fn a_user_write_during_restore_is_kept_and_reported_never_lost() {
    // The user writes the file between the restore's check and its replace, the window that
    // used to lose the write.
    let repo = TestRepo::new();
    repo.write("big.bin", &vec![b'o'; 4 << 20]);
    let id = repo.snapshot(&[]);
    repo.write("big.bin", &vec![b'x'; 3 << 20]);
    let user = b"the user's own words, typed during the restore\n";
    let out = run_paused(
        &repo,
        "restore:before-replace",
        &["--json", "restore", &id, "--yes"],
        || std::fs::write(repo.path("big.bin"), user).expect("user write"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        repo.read("big.bin"),
        user,
        "the user's write is gone (rc {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "a conflict is a partial failure:\n{stdout}");
    assert!(
        stdout.contains("big.bin") && stdout.contains("changed on disk"),
        "{stdout}"
    );
    assert!(!stdout.contains("\"verified\":true"), "{stdout}");
    // No temp file is left behind.
    let names: Vec<_> = std::fs::read_dir(&repo.root)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        names.iter().all(|n| !n.to_string_lossy().starts_with(".ckpt-")),
        "{names:?}"
    );
}

#[cfg(feature = "fault-injection")]
#[test]
fn a_file_created_during_restore_where_none_was_is_kept() {
    let repo = TestRepo::new();
    repo.write("new.txt", b"in the checkpoint\n");
    let id = repo.snapshot(&[]);
    repo.remove("new.txt");
    let out = run_paused(
        &repo,
        "restore:before-replace",
        &["--json", "restore", &id, "--yes"],
        || std::fs::write(repo.path("new.txt"), b"user made this\n").expect("user write"),
    );
    assert_eq!(repo.read("new.txt"), b"user made this\n");
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn restore_never_widens_permissions() {
    let repo = TestRepo::new();
    repo.write(".env", b"SECRET=1\n");
    repo.write("id_rsa", b"-----BEGIN KEY-----\n");
    repo.chmod(".env", 0o600);
    repo.chmod("id_rsa", 0o400);
    let id = repo.snapshot(&[]);
    repo.chmod("id_rsa", 0o600);
    repo.write(".env", b"SECRET=changed\n");
    repo.write("id_rsa", b"overwritten by the agent\n");
    repo.chmod("id_rsa", 0o400);
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    use std::os::unix::fs::PermissionsExt;
    let mode = |name: &str| std::fs::metadata(repo.path(name)).expect("stat").permissions().mode() & 0o777;
    assert_eq!(repo.read(".env"), b"SECRET=1\n");
    assert_eq!(repo.read("id_rsa"), b"-----BEGIN KEY-----\n");
    assert_eq!(mode(".env"), 0o600);
    assert_eq!(mode("id_rsa"), 0o400);
}

/// Every file below `dir`, with its content.
fn tree_of(dir: &Path) -> std::collections::BTreeMap<Vec<u8>, Entry> {
    worktree_state(dir)
        .into_iter()
        .filter(|(_, e)| !matches!(e, Entry::Dir))
        .collect()
}

#[test]
fn a_copy_store_inside_the_workspace_is_never_captured_or_deleted() {
    // Workspace = HOME, store = the default ~/.local/share/ckpt inside it.
    let repo = TestRepo::bare_dir();
    let home = repo.home.clone();
    std::fs::write(home.join("notes.txt"), b"my notes\n").expect("write");
    let run_in_home = |args: &[&str], code: i32| {
        let mut cmd = repo.ckpt_command();
        cmd.current_dir(&home).env_remove("CKPT_HOME").arg("--json").args(args);
        let out = cmd.output().expect("ckpt");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "ckpt {args:?}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let first = run_in_home(&["snapshot"], 0);
    assert!(first.contains("\"provider\":\"copy\""), "{first}");
    let first_id =
        serde_json::from_str::<serde_json::Value>(first.lines().find(|l| l.contains("\"snapshot\"")).expect("record"))
            .expect("json")["id"]
            .as_str()
            .expect("id")
            .to_owned();
    std::fs::write(home.join("notes.txt"), b"changed\n").expect("write");
    run_in_home(&["snapshot"], 0);
    let store = home.join(".local/share/ckpt");
    let store_before = tree_of(&store);
    assert!(!store_before.is_empty());
    std::fs::write(home.join("later.txt"), b"created later\n").expect("write");
    let preview = run_in_home(&["preview", &first_id, "--exact"], 0);
    assert!(
        !preview.contains(".local/share/ckpt/"),
        "the store is listed: {preview}"
    );
    run_in_home(&["restore", &first_id, "--exact", "--yes"], 0);
    assert_eq!(std::fs::read(home.join("notes.txt")).expect("read"), b"my notes\n");
    assert!(!home.join("later.txt").exists());
    // The store lost nothing it had (the guard and records were added).
    let store_after = tree_of(&store);
    for path in store_before.keys() {
        assert!(
            store_after.contains_key(path) || path.starts_with(b"workspaces/") && path.ends_with(b".lock"),
            "the restore deleted the store's {}",
            String::from_utf8_lossy(path)
        );
    }
    let audit = run_in_home(&["audit"], 0);
    assert!(audit.contains("\"problems\":0"), "{audit}");
}

#[test]
fn exact_restore_never_deletes_what_the_target_did_not_protect() {
    let repo = TestRepo::new();
    repo.write("data/a.bin", b"aaaa");
    repo.write("data/b.bin", b"bbbb");
    let id = repo.snapshot(&["--max-file-size", "0"]);
    repo.write("fresh.txt", b"created after\n");
    let preview = repo.ckpt_json(&["preview", &id, "--exact"], 0);
    let report = preview.one("preview");
    let deleted = json_paths(&report["delete"]);
    assert!(
        !deleted.contains(&b"data/a.bin".to_vec()) && !deleted.contains(&b"README.md".to_vec()),
        "preview deletes unprotected paths: {report}"
    );
    assert!(deleted.contains(&b"fresh.txt".to_vec()), "{report}");
    repo.ckpt_json(&["restore", &id, "--exact", "--yes"], 0);
    assert_eq!(repo.read("data/a.bin"), b"aaaa");
    assert_eq!(repo.read("data/b.bin"), b"bbbb");
    assert_eq!(repo.read("README.md"), b"# project\n");
    assert!(!repo.path("fresh.txt").exists());
}

#[cfg(feature = "fault-injection")]
#[test]
fn gc_racing_a_new_workspaces_first_snapshot_never_leaves_missing_content() {
    let repo = TestRepo::bare_dir();
    let store = repo.home.join("store");
    let ckpt = |dir: &Path, args: &[&str]| {
        let mut cmd = repo.ckpt_command();
        cmd.current_dir(dir).env("CKPT_HOME", &store).arg("--json").args(args);
        cmd
    };
    let fill = |dir: &Path| {
        for file in 0..20 {
            let path = dir.join(format!("d{}/f{file}.txt", file % 4));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, format!("content {file}\n")).expect("write");
        }
    };
    // Content that a cleared workspace held: unreferenced, and past a zero grace period.
    let old = repo.home.join("old");
    fill(&old);
    assert!(ckpt(&old, &["snapshot"]).status().expect("snapshot").success());
    assert!(ckpt(&old, &["clear", "--yes"]).status().expect("clear").success());
    // gc has listed the workspaces (the new one does not exist yet) when the new workspace,
    // holding the same content, takes its first snapshot.
    let new = repo.home.join("new");
    fill(&new);
    let mut snapshot = None;
    let mut gc = ckpt(&repo.root, &["gc", "--grace-seconds", "0"]);
    gc.env("CKPT_PAUSE", "gc:before-marking")
        .env("CKPT_PAUSE_RESUME", repo.home.join("resume"));
    let out = run_paused_command(gc, "gc:before-marking", &repo.home.join("resume"), || {
        let mut child = ckpt(&new, &["snapshot"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("snapshot");
        // Until it ends, or long enough for a snapshot that does not wait for gc to finish.
        let deadline = std::time::Instant::now() + Duration::from_millis(1500);
        while child.try_wait().expect("try_wait").is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        snapshot = Some(child);
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let snap = snapshot.expect("spawned").wait_with_output().expect("snapshot");
    assert!(snap.status.success(), "{}", String::from_utf8_lossy(&snap.stderr));
    let audit = ckpt(&new, &["audit"]).output().expect("audit");
    assert!(
        audit.status.success(),
        "gc removed content a checkpoint relies on:\n{}",
        String::from_utf8_lossy(&audit.stdout)
    );
}

#[test]
fn doctor_never_removes_a_user_file_that_only_looks_like_a_temp_file() {
    let repo = TestRepo::new();
    repo.write("docs/.ckpt-99999-ab.tmp", b"the user's own file\n");
    repo.snapshot(&[]);
    let audit = repo.ckpt_json(&["audit"], 0);
    assert_eq!(audit.one("audit")["problems"], 0, "{}", audit.stdout);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(repo.read("docs/.ckpt-99999-ab.tmp"), b"the user's own file\n");
    // And it is protected like any other file: only ckpt's exact temp-name shape is skipped.
    let held = repo.git(&["ls-tree", "-r", "--name-only", &repo.snapshot(&[])]);
    assert!(held.lines().any(|l| l == "docs/.ckpt-99999-ab.tmp"), "{held}");
}

#[cfg(feature = "fault-injection")]
#[test]
fn doctor_removes_only_temp_files_of_the_interrupted_restore() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"changed\n");
    repo.write("README.md", b"changed too\n");
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_FAULT", "restore:after-first-write")
        .args(["restore", &id, "--yes"]);
    let out = cmd.output().expect("restore");
    assert!(!out.status.success(), "the fault must stop the restore");
    let journal: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            repo.git_dir()
                .join("ckpt")
                .join(
                    std::fs::read_dir(repo.git_dir().join("ckpt"))
                        .expect("state")
                        .flatten()
                        .find(|e| e.path().join("restore-journal.json").exists())
                        .expect("a pending journal")
                        .file_name(),
                )
                .join("restore-journal.json"),
        )
        .expect("journal"),
    )
    .expect("json");
    let pid = journal["pid"].as_u64().expect("pid");
    // Same pid, but in a directory the restore never wrote to: the user's.
    let lookalike = format!("docs/.ckpt-{pid}-0123abcd0123abcd.tmp");
    repo.write(&lookalike, b"user data\n");
    // The killed process's own leftover, where it was writing: the start of src/lib.rs as the
    // checkpoint has it.
    let leftover = format!("src/.ckpt-{pid}-feedbeeffeedbeef.tmp");
    repo.write(&leftover, b"pub fn ans");
    // Same pid, same directory, but content the restore never wrote: the user's.
    let users = format!("src/.ckpt-{pid}-0000aaaa0000aaaa.tmp");
    repo.write(&users, b"user data written after the crash\n");
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(repo.read(&lookalike), b"user data\n");
    assert_eq!(repo.read(&users), b"user data written after the crash\n");
    assert!(
        !repo.path(&leftover).exists(),
        "the interrupted restore's temp file stays"
    );
}

#[test]
fn a_symlinked_state_directory_is_refused_not_followed() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let state_root = repo.git_dir().join("ckpt");
    let workspace = std::fs::read_dir(&state_root)
        .expect("state root")
        .flatten()
        .find(|e| e.path().is_dir())
        .expect("a workspace state dir")
        .path();
    std::fs::remove_dir_all(&workspace).expect("rm state");
    let outside = repo.home.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::os::unix::fs::symlink(&outside, &workspace).expect("plant link");
    repo.write("more.txt", b"more\n");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert!(run.stderr.contains("symlink"), "{}", run.stderr);
    assert_eq!(
        std::fs::read_dir(&outside).expect("ls").count(),
        0,
        "ckpt wrote through the link"
    );
    // audit and doctor say so too, and doctor --fix leaves it to the user.
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(
        audit.one("audit.problem")["code"],
        "unsafe_state_dir",
        "{}",
        audit.stdout
    );
    repo.ckpt_json(&["doctor", "--fix"], 1);
    assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
    // The whole state root as a link is refused too.
    std::fs::remove_file(&workspace).expect("rm link");
    std::fs::remove_dir_all(&state_root).expect("rm root");
    std::os::unix::fs::symlink(&outside, &state_root).expect("plant link");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert!(run.stderr.contains("symlink"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
}

/// A lock file replaced by a symlink is refused, never opened through: the workspace lock (a
/// link to a file that does not exist would create it) and the daemon's lock (its pid would
/// overwrite the target). A FIFO there is refused too, without hanging (found by a review).
#[test]
fn a_lock_file_that_is_a_symlink_or_a_fifo_is_refused_not_followed() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let state = repo.common_dir().join("ckpt/main");
    let missing = repo.home.join("created-by-lock");
    std::fs::remove_file(state.join("lock")).expect("rm lock");
    std::os::unix::fs::symlink(&missing, state.join("lock")).expect("plant link");
    repo.write("more.txt", b"more\n");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert_eq!(run.one("error")["code"], "unsafe_state_dir", "{}", run.stdout);
    assert!(
        run.stdout.contains("lock") && run.stdout.contains("symlink"),
        "{}",
        run.stdout
    );
    assert!(!missing.exists(), "the lock's link target was created");
    // `audit` names it too, without opening it (its first review did not).
    let audit_names = |what: &str| {
        let audit = repo.ckpt_json(&["audit"], 1);
        let named = audit.json.iter().any(|problem| {
            problem["type"] == "audit.problem"
                && problem["code"] == "unsafe_state_dir"
                && problem["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("lock") && m.contains(what))
        });
        assert!(named, "{what}: {}", audit.stdout);
    };
    audit_names("symlink");
    assert!(!missing.exists(), "audit created the lock's link target");
    std::fs::remove_file(state.join("lock")).expect("rm link");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        state.join("lock").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert_eq!(run.one("error")["code"], "unsafe_state_dir", "{}", run.stdout);
    audit_names("FIFO");
    std::fs::remove_file(state.join("lock")).expect("rm fifo");
    repo.ckpt_json(&["snapshot"], 0);
    // A directory there is named as one, by the snapshot, audit and doctor alike (a snapshot
    // said "Is a directory (os error 21)", audit called it a FIFO).
    std::fs::remove_file(state.join("lock")).expect("rm lock");
    std::fs::create_dir(state.join("lock")).expect("mkdir lock");
    repo.write("more.txt", b"more still\n");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert_eq!(run.one("error")["code"], "unsafe_state_dir", "{}", run.stdout);
    assert!(
        run.stdout.contains("is a directory, not a plain lock file"),
        "{}",
        run.stdout
    );
    audit_names("a directory");
    let doctor = repo.ckpt(&["doctor"]);
    assert!(
        !doctor.stderr.contains("os error") && doctor.stdout.contains("a directory"),
        "{}{}",
        doctor.stdout,
        doctor.stderr
    );
    std::fs::remove_dir(state.join("lock")).expect("rmdir lock");
    repo.ckpt_json(&["snapshot"], 0);

    let victim = repo.home.join("victim");
    std::fs::write(&victim, b"the user's bytes\n").expect("write victim");
    std::fs::create_dir_all(state.join("watch")).expect("mkdir watch");
    std::fs::remove_file(state.join("watch/daemon.lock")).ok();
    std::os::unix::fs::symlink(&victim, state.join("watch/daemon.lock")).expect("plant link");
    let run = repo.ckpt(&["watch", "start"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    // The reason, with its path: not only "the daemon exited".
    assert!(
        run.stderr.contains("daemon.lock") && run.stderr.contains("symlink"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&victim).expect("read victim"), b"the user's bytes\n");
    audit_names("daemon.lock");
    std::fs::remove_file(state.join("watch/daemon.lock")).expect("rm link");
    // A hard link is another name for the victim: refused too.
    std::fs::hard_link(&victim, state.join("watch/daemon.lock")).expect("hard link");
    let run = repo.ckpt(&["watch", "start"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stderr.contains("hard link"), "{}", run.stderr);
    assert_eq!(std::fs::read(&victim).expect("read victim"), b"the user's bytes\n");
    std::fs::remove_file(state.join("watch/daemon.lock")).expect("rm hard link");
    repo.ckpt(&["watch", "stop"]);
}

#[test]
fn directories_vanishing_during_the_walk_do_not_fail_snapshots() {
    let repo = TestRepo::new();
    let stop = Arc::new(AtomicBool::new(false));
    let churn_root = repo.path("churn");
    let churner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let dir = churn_root.join(format!("d{}", n % 8)).join("inner");
                if std::fs::create_dir_all(&dir).is_ok() {
                    for f in 0..20 {
                        std::fs::write(dir.join(format!("f{f}")), b"x").ok();
                    }
                }
                std::fs::remove_dir_all(churn_root.join(format!("d{}", (n + 4) % 8))).ok();
                n += 1;
            }
        })
    };
    let mut failures = Vec::new();
    for round in 0..30 {
        repo.write("round.txt", format!("{round}").as_bytes());
        let run = repo.ckpt(&["--json", "snapshot"]);
        if run.code != 0 {
            failures.push(run.stderr);
        }
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().expect("churner");
    assert!(
        failures.is_empty(),
        "{} of 30 snapshots failed: {:?}",
        failures.len(),
        failures.first()
    );
}

#[test]
fn a_path_longer_than_the_system_allows_is_skipped_by_name_not_retried() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"a\n");
    // Made a level at a time, relative to the last one, as a user's tool would.
    let mut dir = std::fs::File::open(&repo.root).expect("open root");
    for _ in 0..25 {
        use std::os::fd::AsFd;
        let name = "d".repeat(200);
        rustix::fs::mkdirat(dir.as_fd(), name.as_str(), rustix::fs::Mode::from_raw_mode(0o755)).expect("mkdirat");
        let next = rustix::fs::openat(
            dir.as_fd(),
            name.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("openat");
        dir = std::fs::File::from(next);
    }
    // As git status warns and goes on, the directory no path can name is skipped by name (it
    // once failed every snapshot, and so every restore); the cause is the name, not a race.
    let run = repo.ckpt_json(&["snapshot"], 0);
    let skipped = run.one("snapshot")["skipped"].to_string();
    assert!(skipped.contains("longer than this system can name"), "{skipped}");
    assert!(!run.stderr.contains("attempts"), "not retried: {}", run.stderr);
    assert_eq!(repo.ckpt_refs().len(), 1, "the rest is protected");
}

/// What `plant_hostile_checkpoint` made: blob, tree and commit ids.
struct Planted {
    blob: String,
    tree: String,
    commit: String,
}

/// Writes, through `git` (args, stdin → stdout), a pinned-looking checkpoint commit with
/// complete trailers for `workspace` whose tree has one entry named `name` (hostile), and pins
/// it under refs/ckpt/<workspace>/.
fn plant_hostile_checkpoint(
    git: impl Fn(&[&str], &[u8]) -> String,
    workspace: &str,
    name: &[u8],
    parent: Option<&str>,
) -> Planted {
    let blob = git(&["hash-object", "-w", "--stdin"], b"planted\n");
    let mut entry = b"100644 ".to_vec();
    entry.extend_from_slice(name);
    entry.push(0);
    entry.extend((0..20).map(|i| u8::from_str_radix(&blob[i * 2..i * 2 + 2], 16).expect("hex")));
    let tree = git(&["hash-object", "-t", "tree", "--literally", "-w", "--stdin"], &entry);
    let message = format!(
        "ckpt: manual checkpoint\n\nCkpt-Format: 1\nCkpt-Workspace: {workspace}\nCkpt-Kind: manual\nCkpt-Time: 2099-01-01T00:00:00.000Z\nCkpt-Files: 0\nCkpt-Total-Files: 1\nCkpt-Bytes: 0\n"
    );
    let mut args = vec![
        "-c",
        "user.name=x",
        "-c",
        "user.email=x@x",
        "commit-tree",
        &tree,
        "-F",
        "-",
    ];
    if let Some(parent) = parent {
        args.extend(["-p", parent]);
    }
    let commit = git(&args, message.as_bytes());
    git(
        &["update-ref", &format!("refs/ckpt/{workspace}/{commit}"), &commit],
        b"",
    );
    Planted { blob, tree, commit }
}

#[test]
fn one_planted_hostile_checkpoint_is_refused_alone_and_quarantined() {
    let repo = TestRepo::new();
    let good = repo.snapshot(&[]);
    // A pinned commit with complete trailers whose tree has an entry named `x/y`.
    let planted = plant_hostile_checkpoint(
        |args, input| git_stdin(&repo, args, input),
        "main",
        b"x/y",
        Some("HEAD"),
    )
    .commit;
    let pin = format!("refs/ckpt/main/{planted}");

    // Protection goes on: snapshots work, other checkpoints restore.
    repo.write("README.md", b"edited\n");
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(run.one("snapshot")["created"], true);
    repo.ckpt_json(&["restore", &good, "--yes"], 0);
    assert_eq!(repo.read("README.md"), b"# project\n");
    // Only the planted one is refused.
    let run = repo.ckpt_json(&["restore", &planted, "--yes"], 2);
    assert!(run.stdout.contains("x/y"), "{}", run.stdout);
    // audit names the ref; doctor --fix sets it aside without deleting anything.
    let audit = repo.ckpt_json(&["audit"], 1);
    assert!(audit.stdout.contains(&pin), "{}", audit.stdout);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    let refs = repo.ckpt_refs();
    assert!(!refs.contains(&pin), "{refs:?}");
    assert!(
        refs.contains(&format!("refs/ckpt/quarantine/main/{planted}")),
        "{refs:?}"
    );
    assert!(repo.git_raw(&["cat-file", "-e", &planted]).status.success());
    repo.ckpt_json(&["audit"], 0);
    let list = repo.ckpt_json(&["list"], 0);
    assert!(!list.stdout.contains(&planted), "{}", list.stdout);
}

#[test]
fn new_bytes_count_only_content_the_repository_did_not_hold() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    // The user commits 40 KiB of new content: git holds it, so ckpt adds nothing for it.
    repo.write("vendor/lib.js", &vec![b'v'; 40 << 10]);
    repo.commit_all("vendor");
    let run = repo.ckpt_json(&["snapshot"], 0);
    let record = run.one("snapshot");
    assert_eq!(record["created"], true);
    assert_eq!(record["bytes"], 0, "content already in the repository: {record}");
    // Content nobody holds yet is counted, once.
    repo.write("new-a.txt", &[b'n'; 100]);
    repo.write("new-b.txt", &[b'n'; 100]);
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(run.one("snapshot")["bytes"], 100);
    // A no-op adds nothing and says so.
    let run = repo.ckpt_json(&["snapshot"], 0);
    let record = run.one("snapshot");
    assert_eq!(record["created"], false);
    assert_eq!(record["files"], 0);
    assert_eq!(record["bytes"], 0);
}

/// The bytes a checkpoint holds for `path`.
fn checkpoint_blob(repo: &TestRepo, id: &str, path: &str) -> Vec<u8> {
    let out = repo.git_raw(&["cat-file", "blob", &format!("{id}:{path}")]);
    assert!(out.status.success(), "{path} is not in {id}");
    out.stdout
}

#[test]
fn index_ids_seed_a_capture_only_when_they_are_the_bytes_on_disk() {
    // (a) An untracked .gitattributes converts on checkout: disk has CRLF, the index blob LF.
    // Enough other files that the size sample need not hit notes.txt.
    let repo = TestRepo::new();
    for i in 0..600 {
        repo.write(format!("data/f{i:03}.dat"), format!("{i}").as_bytes());
    }
    repo.write("notes.txt", b"one\ntwo\nthree\n");
    repo.commit_all("notes");
    repo.write(".gitattributes", b"*.txt text eol=crlf\n");
    repo.remove("notes.txt");
    repo.git(&["checkout", "--", "notes.txt"]);
    assert_eq!(repo.read("notes.txt"), b"one\r\ntwo\r\nthree\r\n");
    // Past git's racy-clean second, with the file's stat recorded in the index.
    repo.settle();
    let id = repo.snapshot(&[]);
    assert_eq!(checkpoint_blob(&repo, &id, "notes.txt"), b"one\r\ntwo\r\nthree\r\n");

    // (b) core.autocrlf at checkout time only.
    let repo = TestRepo::new();
    repo.write("crlf.txt", b"a\nb\n");
    repo.commit_all("crlf");
    repo.remove("crlf.txt");
    repo.git(&["-c", "core.autocrlf=true", "checkout", "--", "crlf.txt"]);
    assert_eq!(repo.read("crlf.txt"), b"a\r\nb\r\n");
    repo.settle_with(&["-c", "core.autocrlf=true"]);
    let id = repo.snapshot(&[]);
    assert_eq!(checkpoint_blob(&repo, &id, "crlf.txt"), b"a\r\nb\r\n");
    // And a restore gives the same bytes back.
    repo.write("crlf.txt", b"changed\n");
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(repo.read("crlf.txt"), b"a\r\nb\r\n");
}

#[test]
fn converting_attributes_rule_out_index_ids_path_by_path() {
    // A tracked .gitattributes converts *.txt (CRLF on disk, LF in the index) and a macro
    // converts *.cnv; every other file may still come from the index.
    let repo = TestRepo::new();
    for i in 0..300 {
        repo.write(format!("data/f{i:03}.dat"), format!("{i}").as_bytes());
    }
    repo.write(
        ".gitattributes",
        b"[attr]conv text eol=crlf\n*.txt text eol=crlf\n*.cnv conv\n*.bin binary\n",
    );
    repo.write("notes.txt", b"one\ntwo\n");
    repo.write("sub/deep.cnv", b"x\ny\n");
    repo.write("raw.bin", b"a\nb\n");
    repo.commit_all("attributes");
    for path in ["notes.txt", "sub/deep.cnv"] {
        repo.remove(path);
        repo.git(&["checkout", "--", path]);
    }
    assert_eq!(repo.read("notes.txt"), b"one\r\ntwo\r\n");
    assert_eq!(repo.read("sub/deep.cnv"), b"x\r\ny\r\n");
    repo.settle();
    let run = repo.ckpt_json(&["snapshot"], 0);
    let scan = &run.one("snapshot")["scan"];
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(checkpoint_blob(&repo, &id, "notes.txt"), b"one\r\ntwo\r\n");
    assert_eq!(checkpoint_blob(&repo, &id, "sub/deep.cnv"), b"x\r\ny\r\n");
    assert_eq!(checkpoint_blob(&repo, &id, "raw.bin"), b"a\nb\n");
    assert_eq!(
        scan["read"].as_u64(),
        Some(2),
        "only the converted paths are read: {scan}"
    );
    assert!(
        scan["from_index"].as_u64().unwrap() >= 300,
        "the rest come from the index: {scan}"
    );
}

#[test]
fn ignorecase_on_a_case_sensitive_filesystem_hides_no_file() {
    let repo = TestRepo::new();
    repo.write("Readme", b"tracked\n");
    repo.commit_all("readme");
    repo.git(&["config", "core.ignorecase", "true"]);
    std::fs::rename(repo.path("Readme"), repo.path("README")).expect("mv");
    repo.write("readme", b"x\n");
    let id = repo.snapshot(&[]);
    assert_eq!(checkpoint_blob(&repo, &id, "README"), b"tracked\n");
    assert_eq!(checkpoint_blob(&repo, &id, "readme"), b"x\n");
    repo.remove("README");
    repo.write("readme", b"changed\n");
    repo.ckpt_json(&["restore", &id, "--yes"], 0);
    assert_eq!(repo.read("README"), b"tracked\n");
    assert_eq!(repo.read("readme"), b"x\n");
    assert_eq!(
        repo.git(&["config", "core.ignorecase"]).trim(),
        "true",
        "config untouched"
    );
}

#[test]
fn failures_say_what_happened() {
    // A reftable repository: named, with the way out.
    let repo = TestRepo::bare_dir();
    repo.git(&["init", "-q", "--ref-format=reftable", "-b", "main"]);
    repo.write("a.txt", b"a\n");
    repo.commit_all("init");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert_eq!(run.one("error")["code"], "unsupported", "{}", run.stdout);
    assert!(
        run.stderr.contains("reftable") && run.stderr.contains("--provider copy"),
        "{}",
        run.stderr
    );

    // An unknown session is not "no checkpoints yet".
    let repo = TestRepo::new();
    repo.snapshot(&["--session", "real"]);
    let run = repo.ckpt(&["list", "--session", "nonexistent"]);
    assert!(
        run.stderr.contains("no checkpoint belongs to session \"nonexistent\""),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("no checkpoints yet"), "{}", run.stderr);

    // A registry from a newer ckpt is refused, never rebuilt as version 1.
    let records = repo.git_dir().join("ckpt/main/records.json");
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&records).expect("records")).expect("json");
    value["version"] = serde_json::json!(2);
    std::fs::write(&records, serde_json::to_vec(&value).expect("json")).expect("write");
    let before = std::fs::read(&records).expect("records");
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(audit.one("audit.problem")["code"], "unsupported_version");
    let run = repo.ckpt_json(&["doctor", "--fix"], 4);
    assert!(run.stderr.contains("newer ckpt"), "{}", run.stderr);
    assert_eq!(
        std::fs::read(&records).expect("records"),
        before,
        "the newer registry was rewritten"
    );
    let aside = std::fs::read_dir(records.parent().expect("dir"))
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("corrupt"))
        .count();
    assert_eq!(aside, 0, "the newer registry was set aside");
}

#[test]
fn a_full_disk_is_named() {
    // Needs a tmpfs of its own (root); where that cannot be had the case cannot be made here.
    let repo = TestRepo::bare_dir();
    let mount_point = repo.home.join("small");
    std::fs::create_dir_all(&mount_point).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mount_point)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("a_full_disk_is_named: cannot mount a tmpfs here; not run");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            std::process::Command::new("umount").arg(&self.0).status().ok();
        }
    }
    let _unmount = Unmount(mount_point.clone());
    let work = mount_point.join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    repo.git_in(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("a.txt"), b"a\n").expect("write");
    repo.git_in(&work, &["add", "-A"]);
    repo.git_in(
        &work,
        &["-c", "user.name=T", "-c", "user.email=t@t", "commit", "-qm", "init"],
    );
    // Fill the disk with incompressible bytes until the first write fails.
    let mut filler = std::fs::File::create(work.join("big.bin")).expect("create");
    let mut seed = 0x9e3779b97f4a7c15u64;
    let chunk: Vec<u8> = (0..4096)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    while filler.write_all(&chunk).is_ok() {}
    drop(filler);
    let run = repo.ckpt_in(&work, &[std::ffi::OsStr::new("snapshot")]);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.to_lowercase().contains("no space left on device"),
        "{}",
        run.stderr
    );
    assert!(repo.git_in(&work, &["for-each-ref", "refs/ckpt/"]).trim().is_empty());
}

#[test]
fn another_store_inside_the_workspace_is_recognised_by_what_it_holds() {
    // HOME holds the default store, used by another project; the workspace is HOME, but this
    // run's CKPT_HOME is elsewhere, so the path alone does not say it is a store.
    let repo = TestRepo::bare_dir();
    let home = repo.home.clone();
    let project = repo.root.clone();
    let ckpt = |dir: &Path, home_store: Option<&Path>, args: &[&str]| {
        let mut cmd = repo.ckpt_command();
        cmd.current_dir(dir).arg("--json").args(args);
        match home_store {
            Some(store) => cmd.env("CKPT_HOME", store),
            None => cmd.env_remove("CKPT_HOME"),
        };
        let out = cmd.output().expect("ckpt");
        assert!(
            out.status.success(),
            "ckpt {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    std::fs::write(project.join("p.txt"), b"p\n").expect("write");
    ckpt(&project, None, &["snapshot"]);
    let elsewhere = repo.home.parent().expect("tmp").join("elsewhere");
    std::fs::write(home.join("h.txt"), b"h\n").expect("write");
    let first = ckpt(&home, Some(&elsewhere), &["snapshot"]);
    assert!(
        !first.contains(".local/share/ckpt/"),
        "the other store was captured: {first}"
    );
    let first_id = first
        .lines()
        .find(|l| l.contains("\"type\":\"snapshot\""))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .expect("id");
    std::fs::write(project.join("p.txt"), b"p2\n").expect("write");
    ckpt(&project, None, &["snapshot"]);
    let store_before = tree_of(&home.join(".local/share/ckpt"));
    ckpt(&home, Some(&elsewhere), &["restore", &first_id, "--exact", "--yes"]);
    assert_eq!(
        tree_of(&home.join(".local/share/ckpt")),
        store_before,
        "the other store was touched"
    );
    let audit = ckpt(&project, None, &["audit"]);
    assert!(audit.contains("\"problems\":0"), "{audit}");
}

#[test]
fn gc_keeps_what_doctor_quarantined() {
    let repo = TestRepo::bare_dir();
    let store = repo.home.join("store");
    let ckpt = |args: &[&str], code: i32| {
        let mut cmd = repo.ckpt_command();
        cmd.env("CKPT_HOME", &store).arg("--json").args(args);
        let run = run_ckpt(cmd);
        assert_eq!(run.code, code, "ckpt {args:?}: {}\n{}", run.stdout, run.stderr);
        run
    };
    repo.write("a.txt", b"a\n");
    ckpt(&["snapshot"], 0);
    let git_dir = std::fs::read_dir(store.join("workspaces"))
        .expect("workspaces")
        .flatten()
        .next()
        .expect("one workspace")
        .path()
        .join("git");
    let store_git = |args: &[&str], input: &[u8]| {
        let mut child = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&git_dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git");
        child.stdin.take().expect("stdin").write_all(input).expect("write");
        let out = child.wait_with_output().expect("git");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let Planted {
        blob,
        tree,
        commit: planted,
    } = plant_hostile_checkpoint(store_git, "copy", b"..", None);
    ckpt(&["doctor", "--fix"], 0);
    ckpt(&["gc", "--grace-seconds", "0"], 0);
    for object in [&planted, &tree, &blob] {
        store_git(&["cat-file", "-e", object], b"");
    }
}

#[cfg(feature = "fault-injection")]
#[test]
fn doctor_rollback_touches_only_what_the_interrupted_restore_changed() {
    let repo = TestRepo::new();
    for i in 0..40 {
        repo.write(format!("f/{i:02}.txt"), format!("A {i}\n").as_bytes());
    }
    let id = repo.snapshot(&[]);
    for i in 0..40 {
        repo.write(format!("f/{i:02}.txt"), format!("B {i}\n").as_bytes());
    }
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_FAULT", "restore:after-first-write")
        .args(["restore", &id, "--yes"]);
    assert!(!cmd.output().expect("restore").status.success());
    // After the crash the user goes on working: a new file, and edits to restored and
    // not-yet-restored files alike.
    let written: Vec<usize> = (0..40)
        .filter(|i| repo.read(format!("f/{i:02}.txt")) == format!("A {i}\n").as_bytes())
        .collect();
    assert!(
        !written.is_empty() && written.len() < 40,
        "the crash must land mid-way: {written:?}"
    );
    let untouched = (0..40).find(|i| !written.contains(i)).expect("an untouched file");
    repo.write("notes.txt", b"brand new user file\n");
    repo.write(format!("f/{untouched:02}.txt"), b"my precious work\n");
    // The edited path is named and left: a partial settlement, exit 3.
    let run = repo.ckpt_json(&["doctor", "--fix"], 3);
    let report = run.one("restore");
    assert_eq!(
        json_paths(&serde_json::json!(report["failed"]
            .as_array()
            .map(|f| f.iter().map(|e| e["path"].clone()).collect::<Vec<_>>())
            .unwrap_or_default())),
        vec![format!("f/{untouched:02}.txt").into_bytes()]
    );
    assert_eq!(repo.read("notes.txt"), b"brand new user file\n", "{}", run.stdout);
    assert_eq!(repo.read(format!("f/{untouched:02}.txt")), b"my precious work\n");
    // What the crashed restore wrote is rolled back.
    for i in written {
        assert_eq!(repo.read(format!("f/{i:02}.txt")), format!("B {i}\n").as_bytes());
    }
    repo.ckpt_json(&["audit"], 0);
}

/// doctor --fix while a restore is running (held between its check and its replace): the
/// running restore is reported as in progress and left alone, and it then finishes exactly.
#[cfg(feature = "fault-injection")]
#[test]
fn doctor_never_settles_a_restore_that_is_still_running() {
    let repo = TestRepo::new();
    for i in 0..30 {
        repo.write(format!("f/{i}.txt"), format!("v1 {i}\n").as_bytes());
    }
    let target = repo.snapshot(&[]);
    let wanted = repo.worktree();
    for i in 0..30 {
        repo.write(format!("f/{i}.txt"), format!("v2 {i}\n").as_bytes());
    }
    let mut doctor = None;
    let out = run_paused(
        &repo,
        "restore:before-replace",
        &["--json", "restore", &target, "--yes"],
        || {
            doctor = Some(repo.ckpt(&["--json", "doctor", "--fix"]));
        },
    );
    let doctor = doctor.expect("doctor ran");
    assert!(
        doctor.stdout.contains("restore_in_progress") && !doctor.stdout.contains("rolled the interrupted restore back"),
        "{}\n{}",
        doctor.stdout,
        doctor.stderr
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        repo.worktree(),
        wanted,
        "the restore finished exactly, untouched by doctor"
    );
    repo.ckpt_json(&["audit"], 0);
}
