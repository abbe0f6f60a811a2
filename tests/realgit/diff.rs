//! `ckpt diff`: checkpoint against the worktree (read-only, nothing written) or against another
//! checkpoint, as a patch, --stat, --name-status or JSON Lines.

use crate::common::*;

fn object_count(repo: &TestRepo) -> usize {
    let mut n = 0;
    for dir in std::fs::read_dir(repo.common_dir().join("objects")).unwrap().flatten() {
        if dir.file_name().len() == 2 {
            n += std::fs::read_dir(dir.path()).unwrap().count();
        }
    }
    n
}

#[test]
fn diff_against_the_worktree_is_read_only_and_complete() {
    let repo = TestRepo::new();
    repo.write("bin.dat", &[0u8, 1, 2, 3]);
    repo.write("run.sh", b"#!/bin/sh\n");
    repo.symlink("README.md", "link");
    let id = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 43 }\n");
    repo.write("bin.dat", &[0u8, 9, 9]);
    repo.chmod("run.sh", 0o755);
    repo.remove("link");
    repo.symlink("src", "link");
    repo.remove("README.md");
    repo.write("new.txt", b"one\ntwo\n");
    let before = (repo.fingerprint(), object_count(&repo), repo.ckpt_refs());
    let run = repo.ckpt_json(&["diff", &id[..8]], 0);
    assert_eq!(
        (repo.fingerprint(), object_count(&repo), repo.ckpt_refs()),
        before,
        "diff writes nothing"
    );
    let files: Vec<(String, String)> = run
        .json
        .iter()
        .filter(|v| v["type"] == "diff.file")
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_owned(),
                v["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("README.md", "D"),
        ("bin.dat", "M"),
        ("link", "M"),
        ("new.txt", "A"),
        ("run.sh", "M"),
        ("src/lib.rs", "M"),
    ]
    .iter()
    .map(|(p, s)| (p.to_string(), s.to_string()))
    .collect();
    assert_eq!(files, want);
    let by_path = |p: &str| run.json.iter().find(|v| v["path"] == p).unwrap().clone();
    assert_eq!(by_path("bin.dat")["binary"], true);
    assert_eq!(by_path("run.sh")["new_mode"], "100755");
    assert_eq!(by_path("new.txt")["added"], 2);
    assert_eq!(by_path("src/lib.rs")["added"], 1);
    assert_eq!(by_path("src/lib.rs")["removed"], 1);
    assert_eq!(run.one("diff")["files"], 6);

    let patch = repo.ckpt(&["diff", &id]);
    assert_eq!(patch.code, 0);
    assert!(
        patch.stdout.contains("-pub fn answer() -> u32 { 42 }")
            && patch.stdout.contains("+pub fn answer() -> u32 { 43 }")
    );
    assert!(patch.stdout.contains("Binary files a/bin.dat and b/bin.dat differ"));
    assert!(patch.stdout.contains("old mode 100644\nnew mode 100755"));
    assert!(
        !patch.stdout.contains('\x1b'),
        "no colors when stdout is not a terminal"
    );
    let stat = repo.ckpt(&["diff", &id, "--stat"]);
    assert!(stat.stdout.contains("6 file(s) changed"), "{}", stat.stdout);
    let names = repo.ckpt(&["diff", &id, "--name-status", "--", "src"]);
    assert_eq!(names.stdout, "M\tsrc/lib.rs\n");
}

#[test]
fn diff_between_two_checkpoints() {
    let repo = TestRepo::new();
    let first = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"changed\n");
    let second = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"changed again, not in either checkpoint\n");
    let run = repo.ckpt_json(&["diff", &first, &second], 0);
    assert_eq!(ids(&run, "diff.file", "path"), vec!["src/lib.rs".to_owned()]);
    let patch = repo.ckpt(&["diff", &first, &second]);
    assert!(
        patch.stdout.contains("+changed\n") && !patch.stdout.contains("again"),
        "{}",
        patch.stdout
    );
    let same = repo.ckpt(&["diff", &second, &second]);
    assert!(
        same.stderr.contains("no differences") || same.stdout.contains("no differences"),
        "{}",
        same.stderr
    );
}

/// Runs `ckpt ARGS` on a pseudo-terminal (util-linux `script`), with `env` set; what the
/// terminal showed.
fn on_terminal(repo: &TestRepo, args: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &format!("{CKPT} {args}"), "/dev/null"])
        .current_dir(&repo.root)
        .env("HOME", &repo.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("PAGER")
        .env_remove("CKPT_PAGER")
        .env_remove("LESS");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd
        .output()
        .expect("util-linux script runs a command on a pseudo-terminal");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn diff_is_paged_only_on_a_terminal_and_never_with_json_or_no_pager() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    repo.write("src/lib.rs", b"pub fn answer() -> u32 { 43 }\n");
    let paged = repo.home.join("paged.txt");
    let pager = format!("cat > '{}'", paged.display());
    let diff = format!("diff {}", &id[..8]);
    let take = || {
        let text = std::fs::read_to_string(&paged).ok();
        std::fs::remove_file(&paged).ok();
        text
    };

    let shown = on_terminal(&repo, &diff, &[("CKPT_PAGER", &pager), ("PAGER", "false")]);
    let text = take().expect("CKPT_PAGER got the diff");
    assert!(
        text.contains("diff --ckpt a/src/lib.rs") && text.contains("+pub fn answer() -> u32 { 43 }"),
        "{text}"
    );
    assert!(
        !shown.contains("diff --ckpt"),
        "the pager, not the terminal, got it: {shown}"
    );

    on_terminal(&repo, &diff, &[("PAGER", &pager)]);
    assert!(
        take().is_some_and(|t| t.contains("diff --ckpt")),
        "PAGER when CKPT_PAGER is unset"
    );

    let shown = on_terminal(&repo, &format!("--no-pager {diff}"), &[("CKPT_PAGER", &pager)]);
    assert!(take().is_none() && shown.contains("diff --ckpt"), "--no-pager: {shown}");
    let shown = on_terminal(&repo, &format!("--json {diff}"), &[("CKPT_PAGER", &pager)]);
    assert!(
        take().is_none() && shown.contains(r#""type":"diff.file""#),
        "--json: {shown}"
    );
    let shown = on_terminal(&repo, &diff, &[("CKPT_PAGER", "")]);
    assert!(
        take().is_none() && shown.contains("diff --ckpt"),
        "an empty pager is none: {shown}"
    );

    let shown = on_terminal(&repo, &diff, &[("CKPT_PAGER", "/nonexistent/pager")]);
    assert!(
        shown.contains("cannot run the pager") && shown.contains("diff --ckpt"),
        "a pager that cannot run loses nothing: {shown}"
    );

    let mut cmd = repo.ckpt_command();
    cmd.args(["diff", &id[..8]]).env("CKPT_PAGER", &pager);
    let piped = run_ckpt(cmd);
    assert!(
        take().is_none() && piped.stdout.contains("diff --ckpt"),
        "stdout not a terminal: never paged"
    );

    on_terminal(&repo, "list", &[("CKPT_PAGER", &pager)]);
    assert!(take().is_none(), "a list shorter than the screen is not paged");
}
