//! Defects an adversarial black-box review found (each test failed before its fix): a bare
//! repository taken for a plain directory, read-only commands reading through a symlinked state
//! directory, set-aside files overwritten, stdout/stderr write failures, a no-op snapshot that
//! hid newly unprotected paths, and an unreadable restore journal nothing could settle.

use crate::common::*;

#[test]
fn a_bare_repository_is_no_workspace() {
    let repo = TestRepo::bare_dir();
    let bare = repo.root.join("b.git");
    repo.git(&["init", "-q", "--bare", bare.to_str().unwrap()]);
    let config_before = std::fs::read(bare.join("config")).unwrap();
    for dir in [bare.clone(), bare.join("hooks")] {
        let run = repo.ckpt_in(&dir, &["--json".as_ref(), "snapshot".as_ref()]);
        assert_eq!(run.code, 1, "{}", run.stdout);
        assert_eq!(run.one("error")["code"], "no_provider");
        assert!(run.one("error")["message"]
            .as_str()
            .unwrap()
            .contains("bare git repository"));
    }
    assert_eq!(std::fs::read(bare.join("config")).unwrap(), config_before);
    assert!(
        !repo.home.join(".local/share/ckpt/workspaces").exists(),
        "no copy store was made for it"
    );
}

#[test]
fn read_only_commands_refuse_a_symlinked_state_directory() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    let state = repo.common_dir().join("ckpt/main");
    let elsewhere = repo.home.join("elsewhere");
    std::fs::rename(&state, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &state).unwrap();
    for args in [
        vec!["list"],
        vec!["list", "--all"],
        vec!["show", &id],
        vec!["preview", &id],
        vec!["diff", &id],
        vec!["status"],
        vec!["prune", "--dry-run"],
    ] {
        let mut full = vec!["--json"];
        full.extend(&args);
        let run = repo.ckpt(&full);
        assert_ne!(run.code, 0, "{args:?} read through the link: {}", run.stdout);
        let error = run
            .json
            .iter()
            .find(|r| r["type"] == "error")
            .unwrap_or_else(|| panic!("{args:?}: {}", run.stdout));
        assert_eq!(error["code"], "unsafe_state_dir", "{args:?}: {error}");
    }
}

#[test]
fn a_registry_set_aside_twice_in_one_second_keeps_both() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let records = repo.common_dir().join("ckpt/main/records.json");
    for content in ["AAAA", "BBBB"] {
        std::fs::write(&records, content).unwrap();
        repo.ckpt_json(&["doctor", "--fix"], 0);
    }
    let mut aside: Vec<String> = std::fs::read_dir(records.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("records.json.corrupt-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    aside.sort();
    assert_eq!(aside, ["AAAA", "BBBB"]);
}

#[test]
fn output_that_cannot_be_written_fails_once_and_never_panics() {
    let repo = TestRepo::new();
    for _ in 0..3 {
        repo.write("f.txt", format!("{:?}", std::time::Instant::now()).as_bytes());
        repo.snapshot(&[]);
    }
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let mut cmd = repo.ckpt_command();
    cmd.args(["--json", "list"]).stdout(full.try_clone().unwrap());
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("cannot write to standard output").count(), 1, "{stderr}");
    let mut cmd = repo.ckpt_command();
    cmd.env("RUST_BACKTRACE", "1").args(["snapshot"]).stderr(full);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "a full stderr is no reason to panic");
}

#[test]
fn a_no_op_snapshot_still_names_what_is_not_protected_now() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let fifo = repo.path("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    repo.write("big.bin", &[0u8; 3000]);
    repo.snapshot(&["--max-file-size", "4000"]);
    let run = repo.ckpt_json(&["snapshot", "--max-file-size", "1000"], 0);
    let snap = run.one("snapshot");
    let reasons: Vec<String> = snap["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s["path"].as_str().unwrap(), s["reason"].as_str().unwrap()))
        .collect();
    assert!(reasons.iter().any(|r| r.starts_with("pipe special_file")), "{snap}");
    assert!(reasons.iter().any(|r| r.starts_with("big.bin too_large")), "{snap}");
}

#[test]
fn an_unreadable_restore_journal_is_reported_and_set_aside() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let journal = repo.common_dir().join("ckpt/main/restore-journal.json");
    std::fs::write(&journal, b"{garb").unwrap();
    let before = repo.worktree();
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(
        audit.one("audit.problem")["code"],
        "corrupt_journal",
        "{}",
        audit.stdout
    );
    audit.one("audit");
    let fix = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(
        fix.stdout.contains("moved the unreadable restore journal"),
        "{}",
        fix.stdout
    );
    assert!(!journal.exists());
    assert_eq!(repo.worktree(), before, "the worktree was left as it is");
    repo.ckpt_json(&["audit"], 0);
}
