//! `ckpt trace list` on hand-made harness session logs (the format of
//! @deepseek-ai/dsh-session-persistence-jsonl: concatenated zstd frames, a header line, then
//! events): multi-frame files, a torn last frame, a line that is not JSON, unknown events, a
//! failed edit, an ambiguous edit, a shell call in between, a base from a real checkpoint, and a
//! path outside the workspace (refused). Read-only: the git fingerprint and files stay.

use crate::common::*;

/// The harness's project directory name for `cwd` (see records/sessionlog.rs).
fn project_key(cwd: &str) -> String {
    format!("--{}--", cwd.trim_start_matches('/').replace('/', "-"))
}

fn call(seq: u64, turn: u64, step: u64, id: &str, name: &str, args: serde_json::Value) -> String {
    serde_json::json!({"type": "tool/call", "seq": seq, "time": 1_700_000_000_000u64 + seq,
        "data": {"turn": turn, "step": step, "callId": id, "name": name, "arguments": args.to_string()}})
    .to_string()
}

fn result(seq: u64, id: &str, failed: bool) -> String {
    serde_json::json!({"type": "tool/result", "seq": seq,
        "data": {"message": {"source": {"kind": "tool", "callId": id},
            "content": [{"type": "tool-result", "toolCallId": id, "isError": failed}]}}})
    .to_string()
}

#[test]
fn trace_list_rebuilds_what_the_log_proves_and_says_unknown_for_the_rest() {
    let repo = TestRepo::new();
    repo.write("b.txt", b"base from a checkpoint\n");
    repo.snapshot(&["--session", "sess-1", "--turn", "1", "--step", "3", "--kind", "auto"]);
    let before = repo.fingerprint();
    let files_before = repo.worktree();
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let dir = home.join("sessions").join(project_key(&root)).join("sess-1");
    std::fs::create_dir_all(&dir).unwrap();
    let header = serde_json::json!({"type": "session", "version": 0, "id": "sess-1", "createdAt": "2026-12-01T00:00:00Z", "cwd": root, "delegationDepth": 0}).to_string();
    let a = format!("{root}/a.txt");
    let batches: Vec<Vec<String>> = vec![
        vec![header],
        vec![
            call(
                1,
                1,
                1,
                "c1",
                "write",
                serde_json::json!({"file_path": a, "content": "one\ntwo\n"}),
            ),
            result(2, "c1", false),
            call(
                3,
                1,
                2,
                "c2",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}),
            ),
            result(4, "c2", false),
        ],
        vec![
            call(
                5,
                1,
                3,
                "c3",
                "edit",
                serde_json::json!({"file_path": "b.txt", "old_string": "base", "new_string": "BASE"}),
            ),
            result(6, "c3", false),
            serde_json::json!({"type": "a/future-event", "seq": 7, "data": {"x": 1}}).to_string(),
            call(
                8,
                1,
                4,
                "c4",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "nope", "new_string": "x"}),
            ),
            result(9, "c4", true),
            call(
                10,
                1,
                5,
                "c5",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "\n", "new_string": "|"}),
            ),
            result(11, "c5", false),
        ],
        vec![
            call(
                12,
                2,
                1,
                "c6",
                "bash",
                serde_json::json!({"command": "sed -i s/one/1/ a.txt"}),
            ),
            result(13, "c6", false),
            call(
                14,
                2,
                2,
                "c7",
                "edit",
                serde_json::json!({"file_path": "b.txt", "old_string": "BASE", "new_string": "b"}),
            ),
            result(15, "c7", false),
            call(
                16,
                2,
                3,
                "c8",
                "write",
                serde_json::json!({"file_path": "/etc/ckpt-trace-test", "content": "no"}),
            ),
            result(17, "c8", false),
            "this line is not JSON".to_owned(),
        ],
    ];
    let mut log = Vec::new();
    for batch in &batches {
        let text = format!("{}\n", batch.join("\n"));
        log.extend(zstd::encode_all(text.as_bytes(), 3).unwrap());
    }
    // A torn last frame: an append cut short by a crash.
    let torn = zstd::encode_all(
        call(
            18,
            3,
            1,
            "c9",
            "write",
            serde_json::json!({"file_path": "z.txt", "content": "z"}),
        )
        .as_bytes(),
        3,
    )
    .unwrap();
    log.extend_from_slice(&torn[..torn.len() / 2]);
    std::fs::write(dir.join("session.jsonl.zstd"), &log).unwrap();

    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home.to_str().unwrap()], 0);
    let session = run.one("trace.session");
    assert_eq!(session["session"], "sess-1");
    assert_eq!(
        session["calls"], 10,
        "every complete frame was read (the line that is not JSON, and the torn tail, count as calls of unknown effect)"
    );
    assert_eq!(session["checkpoints"], 1);
    let problems = session["problems"].to_string();
    assert!(
        problems.contains("not JSON") && problems.contains("not a complete zstd frame"),
        "{problems}"
    );
    let nodes: Vec<&serde_json::Value> = run.json.iter().filter(|r| r["type"] == "trace.node").collect();
    let node = |id: &str| {
        *nodes
            .iter()
            .find(|n| n["call_id"] == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    };
    let file = |id: &str| node(id)["files"][0].clone();
    assert_eq!(node("c1")["node"], "trace:sess-1:1.1");
    assert_eq!(
        (file("c1")["rebuildable"].clone(), file("c1")["bytes"].clone()),
        (true.into(), 8.into())
    );
    assert_eq!(file("c2")["rebuildable"], true, "an edit of known content");
    assert_eq!(file("c3")["rebuildable"], true, "an edit on the checkpoint's content");
    assert_eq!(node("c4")["outcome"], "failed");
    assert!(
        node("c4")["files"].as_array().unwrap().is_empty(),
        "a failed edit changes nothing"
    );
    assert!(file("c5")["reason"].as_str().unwrap().contains("ambiguous"));
    assert_eq!(node("c6")["tool"], "bash");
    assert!(node("c6")["files"].to_string().contains("a bash call ran"));
    assert!(
        file("c7")["reason"].as_str().unwrap().contains("unknown base"),
        "{}",
        file("c7")
    );
    assert!(node("c8")["refused"]
        .as_str()
        .unwrap()
        .contains("outside the workspace"));
    assert!(!std::path::Path::new("/etc/ckpt-trace-test").exists());
    assert_eq!(repo.fingerprint(), before, "read-only");
    assert_eq!(repo.worktree(), files_before);

    // Plain JSON Lines logs work too, and --session filters.
    let plain = home.join("sessions").join(project_key(&root)).join("sess-2");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(
        plain.join("session.jsonl"),
        format!(
            "{}\n{}\n",
            serde_json::json!({"type": "session", "id": "sess-2", "cwd": root}),
            call(
                1,
                1,
                1,
                "p1",
                "write",
                serde_json::json!({"file_path": "p.txt", "content": "p"})
            )
        ),
    )
    .unwrap();
    let run = repo.ckpt_json(
        &[
            "trace",
            "list",
            "--dsh-home",
            home.to_str().unwrap(),
            "--session",
            "sess-2",
        ],
        0,
    );
    let sessions: Vec<&serde_json::Value> = run.json.iter().filter(|r| r["type"] == "trace.session").collect();
    assert_eq!(sessions.len(), 1);
    let node = run.one("trace.node");
    assert_eq!(node["outcome"], "unknown", "no result was recorded");
    assert_eq!(node["files"][0]["rebuildable"], false);

    // What one call changed shows the base the replay used (here: the checkpoint's content), and
    // a session named whole wins over another it is a prefix of.
    let longer = home.join("sessions").join(project_key(&root)).join("sess-12");
    std::fs::create_dir_all(&longer).unwrap();
    std::fs::write(
        longer.join("session.jsonl"),
        format!(
            "{}\n",
            serde_json::json!({"type": "session", "id": "sess-12", "cwd": root})
        ),
    )
    .unwrap();
    let home_text = home.to_str().unwrap();
    let run = repo.ckpt_json(&["trace", "diff", "trace:sess-1:1.3", "--dsh-home", home_text], 0);
    let diffed = &run.one("trace.diff")["files"][0];
    assert_eq!(diffed["status"], "modified", "{diffed}");
    assert_eq!(
        (diffed["added"].clone(), diffed["removed"].clone()),
        (1.into(), 1.into())
    );
    let ambiguous = repo.ckpt(&["trace", "diff", "trace:sess:1.3", "--dsh-home", home_text]);
    assert_eq!(ambiguous.code, 4, "{}", ambiguous.stderr);
}

/// A hand-made log for `trace diff` / `trace restore`: a write and an edit of a.txt, a shell
/// call (which blinds the trace to a.txt), then a write of n.txt.
fn restore_fixture(repo: &TestRepo) -> std::path::PathBuf {
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let dir = home.join("sessions").join(project_key(&root)).join("session-7f3a9c21");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        serde_json::json!({"type": "session", "id": "session-7f3a9c21", "cwd": root}).to_string(),
        call(
            1,
            1,
            1,
            "w1",
            "write",
            serde_json::json!({"file_path": "a.txt", "content": "one\ntwo\n"}),
        ),
        result(2, "w1", false),
        call(
            3,
            1,
            2,
            "e1",
            "edit",
            serde_json::json!({"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}),
        ),
        result(4, "e1", false),
        call(5, 2, 1, "b1", "bash", serde_json::json!({"command": "rm -rf ."})),
        result(6, "b1", false),
        call(
            7,
            2,
            2,
            "w2",
            "write",
            serde_json::json!({"file_path": "sub/n.txt", "content": "new\n"}),
        ),
        result(8, "w2", false),
    ];
    let log = zstd::encode_all(format!("{}\n", lines.join("\n")).as_bytes(), 3).unwrap();
    std::fs::write(dir.join("session.jsonl.zstd"), log).unwrap();
    home
}

#[test]
fn trace_diff_and_restore_put_back_only_what_the_trace_rebuilds_and_are_undoable() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"garbage the agent left\n");
    repo.write("keep.txt", b"the user's own work\n");
    let home = restore_fixture(&repo);
    let home = home.to_str().unwrap();
    let before = repo.fingerprint().without_status();
    let files_before = repo.worktree();

    // What one call changed, and two nodes against each other.
    let run = repo.ckpt_json(&["trace", "diff", "trace:7f3a9c21:1.2", "--dsh-home", home], 0);
    let diff = run.one("trace.diff");
    assert_eq!(diff["from"], "trace:7f3a9c21:1.2");
    assert_eq!(diff["files"][0]["status"], "modified");
    assert_eq!(
        (diff["files"][0]["added"].clone(), diff["files"][0]["removed"].clone()),
        (1.into(), 1.into())
    );
    let human = repo.ckpt(&["trace", "diff", "trace:session-7f3a:e1", "--dsh-home", home]);
    assert!(
        human.stdout.contains("-two") && human.stdout.contains("+TWO"),
        "{}",
        human.stdout
    );
    let run = repo.ckpt_json(
        &["trace", "diff", "trace:7f3a:1.2", "trace:7f3a:2.2", "--dsh-home", home],
        0,
    );
    let files = run.one("trace.diff")["files"].as_array().unwrap().clone();
    assert_eq!(files[0]["status"], "unknown", "a.txt after the shell call: {files:?}");
    assert_eq!(
        files[1]["status"], "unknown",
        "sub/n.txt is not known at 1.2: {files:?}"
    );
    assert!(files[1]["reason"].as_str().unwrap().contains("at this node"));
    assert_eq!(repo.fingerprint().without_status(), before, "diff is read-only");
    assert_eq!(repo.worktree(), files_before);

    // A dry run names what it would put back and what it cannot, and changes nothing.
    let run = repo.ckpt_json(
        &["trace", "restore", "trace:7f3a:2.2", "--dry-run", "--dsh-home", home],
        3,
    );
    let dry = run.one("trace.restore");
    assert_eq!(dry["checkpoint"], serde_json::Value::Null);
    assert_eq!(dry["rebuilt"], serde_json::json!(["sub/n.txt"]));
    assert_eq!(dry["not_restored"][0]["path"], "a.txt");
    assert!(run.json.iter().all(|r| r["type"] != "restore"));

    // Refusals write nothing.
    for (args, code) in [
        (vec!["trace", "restore", "trace:7f3a:1.2"], 4),
        (vec!["trace", "restore", "trace:7f3a:2.1", "--yes"], 4),
        (vec!["trace", "restore", "trace:nomatch:1.1", "--yes"], 1),
        (vec!["trace", "restore", "trace:7f3a:9.9", "--yes"], 1),
        (vec!["trace", "restore", "7f3a:1.2", "--yes"], 2),
    ] {
        let mut full = args.clone();
        full.extend(["--dsh-home", home]);
        let run = repo.ckpt(&full);
        assert_eq!(run.code, code, "{full:?}: {}", run.stderr);
        assert_eq!(repo.worktree(), files_before, "{full:?} wrote nothing");
    }
    assert!(repo.ckpt_refs().is_empty(), "a refusal publishes no checkpoint");

    // The state after the edit: a.txt as the trace rebuilds it; nothing else is touched.
    let run = repo.ckpt_json(&["trace", "restore", "trace:7f3a:1.2", "--yes", "--dsh-home", home], 0);
    let restored = run.one("trace.restore");
    assert_eq!(restored["rebuilt"], serde_json::json!(["a.txt"]));
    let report = run.one("restore");
    assert_eq!(report["written"], serde_json::json!(["a.txt"]));
    assert_eq!(report["verified"], true);
    assert_eq!(repo.read("a.txt"), b"one\nTWO\n");
    assert_eq!(repo.read("keep.txt"), b"the user's own work\n");
    assert_eq!(repo.fingerprint().without_status(), before, "only refs/ckpt/ changed");
    assert_eq!(
        repo.ckpt_refs().len(),
        3,
        "the snapshot of now, the rebuilt state, and the restore's own guard"
    );

    // After the shell call: only what a later write pinned; a.txt is reported, not guessed.
    let run = repo.ckpt_json(&["trace", "restore", "trace:7f3a:2.2", "--yes", "--dsh-home", home], 3);
    let restored = run.one("trace.restore");
    assert_eq!(restored["rebuilt"], serde_json::json!(["sub/n.txt"]));
    assert_eq!(restored["not_restored"][0]["path"], "a.txt");
    assert_eq!(repo.read("sub/n.txt"), b"new\n");
    assert_eq!(
        repo.read("a.txt"),
        b"one\nTWO\n",
        "a file the trace cannot rebuild is left alone"
    );

    // Every trace restore is undoable: the first guard holds the state before it, byte-exact.
    let guards: Vec<String> = repo
        .ckpt_json(&["list"], 0)
        .json
        .iter()
        .filter(|r| r["type"] == "checkpoint" && r["kind"] == "guard")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    repo.ckpt_json(&["restore", &guards[0], "--exact", "--yes"], 0);
    assert_eq!(repo.worktree(), files_before, "undo is byte-exact");
    assert_eq!(repo.fingerprint().without_status(), before);
}

#[test]
fn list_trace_merges_checkpoints_and_tool_calls_in_time_order() {
    let repo = TestRepo::new();
    let millis = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let before = millis() - 5_000;
    repo.write("a.txt", b"a\n");
    let id = repo.snapshot(&["--session", "session-merge01", "--turn", "1", "--step", "2"]);
    let after = millis() + 5_000;
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let dir = home.join("sessions").join(project_key(&root)).join("session-merge01");
    std::fs::create_dir_all(&dir).unwrap();
    let event = |seq: u64, time: u64, id: &str, step: u64| {
        serde_json::json!({"type": "tool/call", "seq": seq, "time": time,
            "data": {"turn": 1, "step": step, "callId": id, "name": "write",
                "arguments": serde_json::json!({"file_path": "a.txt", "content": id}).to_string()}})
        .to_string()
    };
    let lines = [
        serde_json::json!({"type": "session", "id": "session-merge01", "cwd": root}).to_string(),
        // Written out of time order: the timeline orders by time, not by line.
        event(1, after, "late", 3),
        event(2, before, "early", 1),
    ];
    std::fs::write(dir.join("session.jsonl"), format!("{}\n", lines.join("\n"))).unwrap();
    let files = repo.worktree();

    let run = repo.ckpt_json(&["list", "--trace", "--dsh-home", home.to_str().unwrap()], 0);
    let order: Vec<String> = run
        .json
        .iter()
        .map(|r| match r["type"].as_str().unwrap() {
            "checkpoint" => r["id"].as_str().unwrap().to_owned(),
            "trace.node" => r["call_id"].as_str().unwrap().to_owned(),
            other => panic!("unexpected record {other}"),
        })
        .collect();
    assert_eq!(order, vec!["early".to_owned(), id.clone(), "late".to_owned()]);
    let human = repo.ckpt(&["list", "--trace", "--dsh-home", home.to_str().unwrap()]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    let sources: Vec<&str> = human
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(sources, vec!["trace", "checkpoint", "trace"], "{}", human.stdout);
    // --session keeps one session's checkpoints and calls.
    let run = repo.ckpt_json(
        &[
            "list",
            "--trace",
            "--session",
            "other",
            "--dsh-home",
            home.to_str().unwrap(),
        ],
        0,
    );
    assert!(run.json.is_empty(), "{:?}", run.json);
    assert_eq!(repo.worktree(), files, "read-only");
}

#[test]
fn a_trace_restore_never_replaces_a_directory_a_symlink_or_a_file_in_the_way_nor_an_unprotected_file() {
    let repo = TestRepo::new();
    let outside = tempfile::tempdir().unwrap();
    repo.write("dir/in.txt", b"precious\n");
    repo.write("plain.txt", b"a file, not a directory\n");
    repo.symlink(outside.path(), "linkout");
    repo.write("big.bin", &vec![b'x'; 2048]);
    repo.write("ok.txt", b"old\n");
    repo.write("kept.log", b"an ignored file already here\n");
    std::fs::write(repo.git_dir().join("info/exclude"), b"*.log\n").unwrap();
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let home_text = home.to_str().unwrap().to_owned();
    let log = |session: &str, paths: &[&str]| {
        let dir = home.join("sessions").join(project_key(&root)).join(session);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lines = vec![serde_json::json!({"type": "session", "id": session, "cwd": root}).to_string()];
        for (step, path) in paths.iter().enumerate() {
            let id = format!("{session}-{step}");
            let args = serde_json::json!({"file_path": path, "content": "from the trace\n"});
            lines.push(call(step as u64 * 2 + 1, 1, step as u64 + 1, &id, "write", args));
            lines.push(result(step as u64 * 2 + 2, &id, false));
        }
        std::fs::write(dir.join("session.jsonl"), format!("{}\n", lines.join("\n"))).unwrap();
    };
    log(
        "session-obst01",
        &["dir", "plain.txt/child", "big.bin", "new.log", "kept.log", "ok.txt"],
    );
    let before = repo.fingerprint().without_status();
    let files = repo.worktree();
    let args = [
        "trace",
        "restore",
        "trace:obst01:1.6",
        "--yes",
        "--max-file-size",
        "1024",
        "--dsh-home",
        &home_text,
    ];
    // A dry run makes the same checks, on a listing of the worktree that stores nothing.
    let mut dry_args = args;
    dry_args[3] = "--dry-run";
    let objects = repo.git(&["count-objects", "-v"]);
    let dry = repo.ckpt_json(&dry_args, 3);
    let planned = dry.one("trace.restore").clone();
    assert_eq!(planned["checkpoint"], serde_json::Value::Null);
    assert_eq!(repo.worktree(), files, "a dry run writes nothing");
    assert!(repo.ckpt_refs().is_empty(), "a dry run publishes nothing");
    assert_eq!(repo.git(&["count-objects", "-v"]), objects, "a dry run stores nothing");
    let run = repo.ckpt_json(&args, 3);
    let restored = run.one("trace.restore");
    assert_eq!(restored["rebuilt"], serde_json::json!(["ok.txt"]), "{restored}");
    assert_eq!(
        planned["rebuilt"], restored["rebuilt"],
        "the dry run said what the restore did"
    );
    assert_eq!(planned["not_restored"], restored["not_restored"], "and what it refused");
    let refused = restored["not_restored"].to_string();
    for (path, why) in [
        ("dir", "is a directory"),
        (
            "plain.txt/child",
            "plain.txt is a file in the worktree, not a directory",
        ),
        ("big.bin", "not protected"),
        ("new.log", "would be a new ignored file"),
        // One already there is not called new (a review found it was).
        (
            "kept.log\",\"reason\":\"it is an ignored file",
            "ckpt never writes over one",
        ),
    ] {
        assert!(
            refused.contains(path) && refused.contains(why),
            "{path}: {why}: {refused}"
        );
    }
    assert_eq!(repo.read("ok.txt"), b"from the trace\n");
    assert!(!repo.root.join("new.log").exists(), "no new ignored file");
    assert_eq!(repo.read("kept.log"), b"an ignored file already here\n");
    let mut expected = files.clone();
    expected.remove(&b"ok.txt"[..]);
    let mut now = repo.worktree();
    now.remove(&b"ok.txt"[..]);
    assert_eq!(now, expected, "nothing but ok.txt changed");

    // A log that names a path through a symlink (or the symlink itself) may have changed any
    // file the symlink leads to: nothing is written.
    for (session, path) in [("session-link01", "linkout/x"), ("session-link02", "linkout")] {
        log(session, &["ok.txt", path]);
        let node = format!("trace:{session}:1.2");
        // The list says so too: it never claims to rebuild what the restore refuses.
        let list = repo.ckpt_json(&["trace", "list", "--dsh-home", &home_text], 0);
        let listed = list
            .json
            .iter()
            .find(|r| r["type"] == "trace.node" && r["session"] == session && r["step"] == 2)
            .unwrap_or_else(|| panic!("{node} listed: {}", list.stdout));
        assert_eq!(listed["files"][0]["rebuildable"], false, "{path}: {listed}");
        assert!(
            listed["files"][0]["reason"]
                .as_str()
                .is_some_and(|why| why.contains("through the symlink linkout")),
            "{path}: {listed}"
        );
        // Its diff agrees.
        let diff = repo.ckpt_json(&["trace", "diff", &node, "--dsh-home", &home_text], 0);
        assert_eq!(
            diff.one("trace.diff")["files"][0]["rebuildable"],
            false,
            "{}",
            diff.stdout
        );
        let dry = repo.ckpt(&["trace", "restore", &node, "--dry-run", "--dsh-home", &home_text]);
        assert_eq!(dry.code, 4, "{path}: {}", dry.stderr);
        assert!(
            dry.stderr.contains("through the symlink linkout"),
            "{path}: {}",
            dry.stderr
        );
        let run = repo.ckpt(&["trace", "restore", &node, "--yes", "--dsh-home", &home_text]);
        assert_eq!(run.code, 4, "{path}: {}", run.stderr);
        assert!(
            run.stderr.contains("through the symlink linkout"),
            "{path}: {}",
            run.stderr
        );
        assert_eq!(repo.read("ok.txt"), b"from the trace\n", "{path}: nothing written");
    }

    // Both `d` and `d/x` known as files: neither is written, and no checkpoint is left over.
    log("session-clash01", &["d", "d/x", "ok.txt"]);
    let refs = repo.ckpt_refs().len();
    let run = repo.ckpt_json(
        &[
            "trace",
            "restore",
            "trace:clash01:1.2",
            "--yes",
            "--dsh-home",
            &home_text,
        ],
        4,
    );
    assert!(run.stderr.contains("neither is written"), "{}", run.stderr);
    assert_eq!(
        repo.ckpt_refs().len(),
        refs,
        "a refusal before writing leaves no checkpoint"
    );
    assert!(!repo.root.join("d").exists());
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing written outside"
    );
    assert_eq!(repo.fingerprint().without_status(), before);
}

/// A call whose file's state before it no checkpoint of the session holds has no diff to
/// show, but what it wrote is rebuilt: the diff says so, and does not call it unrebuildable
/// (the web view said "not rebuildable" where the list said "rebuilds 1").
#[test]
fn a_call_without_a_known_before_has_no_diff_but_is_rebuildable() {
    let repo = TestRepo::new();
    repo.write("ok.txt", b"old\n");
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let dir = home.join("sessions").join(project_key(&root)).join("session-nodiff01");
    std::fs::create_dir_all(&dir).unwrap();
    let args = serde_json::json!({"file_path": "ok.txt", "content": "from the trace\n"});
    let lines = [
        serde_json::json!({"type": "session", "id": "session-nodiff01", "cwd": root}).to_string(),
        call(1, 1, 1, "c1", "write", args),
        result(2, "c1", false),
    ];
    std::fs::write(dir.join("session.jsonl"), format!("{}\n", lines.join("\n"))).unwrap();
    let home_text = home.to_str().unwrap();
    let list = repo.ckpt_json(&["trace", "list", "--dsh-home", home_text], 0);
    let node = list.json.iter().find(|r| r["type"] == "trace.node").expect("a node");
    assert_eq!(node["files"][0]["rebuildable"], true, "{node}");
    let diff = repo.ckpt_json(&["trace", "diff", "trace:nodiff01:1.1", "--dsh-home", home_text], 0);
    let file = &diff.one("trace.diff")["files"][0];
    assert_eq!(file["status"], "unknown", "{file}");
    assert_eq!(file["rebuildable"], true, "{file}");
    let text = repo.ckpt(&["trace", "diff", "trace:nodiff01:1.1", "--dsh-home", home_text]);
    assert!(
        text.stdout.contains("ok.txt: no diff, the older side is unknown"),
        "{}",
        text.stdout
    );
}

#[test]
fn another_session_of_the_workspace_writing_in_between_makes_the_file_unknown() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let write = |seq: u64, time: u64, id: &str, path: &str, content: &str| {
        let call = serde_json::json!({"type": "tool/call", "seq": seq, "time": time,
            "data": {"turn": 1, "step": seq, "callId": id, "name": "write",
                "arguments": serde_json::json!({"file_path": path, "content": content}).to_string()}});
        format!("{call}\n{}\n", result(seq + 100, id, false))
    };
    for (session, body) in [
        (
            "session-aaaa01",
            write(1, 1000, "a1", "t.txt", "from a\n") + &write(2, 3000, "a2", "other.txt", "a2\n"),
        ),
        ("session-bbbb02", write(1, 2000, "b1", "t.txt", "from b\n")),
    ] {
        let dir = home.join("sessions").join(project_key(&root)).join(session);
        std::fs::create_dir_all(&dir).unwrap();
        let header = serde_json::json!({"type": "session", "id": session, "cwd": root});
        std::fs::write(dir.join("session.jsonl"), format!("{header}\n{body}")).unwrap();
    }
    repo.write("t.txt", b"from b\n");
    let run = repo.ckpt_json(
        &[
            "trace",
            "restore",
            "trace:aaaa01:1.2",
            "--yes",
            "--dsh-home",
            home.to_str().unwrap(),
        ],
        3,
    );
    let restored = run.one("trace.restore");
    assert_eq!(restored["rebuilt"], serde_json::json!(["other.txt"]));
    assert_eq!(restored["not_restored"][0]["path"], "t.txt");
    assert!(restored["not_restored"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("session session-bbbb02 ran write"));
    assert_eq!(repo.read("t.txt"), b"from b\n", "the other session's write is kept");

    // A session started in a subdirectory (a project directory of its own) counts too, and one
    // of another workspace whose key merely starts the same way does not.
    let sub = format!("{root}/sub");
    std::fs::create_dir_all(&sub).unwrap();
    for (cwd, session, path) in [
        (sub.clone(), "session-cccc03", "../other.txt"),
        (format!("{root}-elsewhere"), "session-dddd04", "z.txt"),
    ] {
        let dir = home.join("sessions").join(project_key(&cwd)).join(session);
        std::fs::create_dir_all(&dir).unwrap();
        let header = serde_json::json!({"type": "session", "id": session, "cwd": cwd});
        let body = write(1, 3500, &format!("{session}-1"), path, "not a's\n");
        std::fs::write(dir.join("session.jsonl"), format!("{header}\n{body}")).unwrap();
    }
    let log = home
        .join("sessions")
        .join(project_key(&root))
        .join("session-aaaa01/session.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(&write(3, 4000, "a3", "z.txt", "a3\n"));
    std::fs::write(&log, text).unwrap();
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home.to_str().unwrap()], 0);
    let sessions: Vec<&str> = run
        .json
        .iter()
        .filter(|r| r["type"] == "trace.session")
        .map(|r| r["session"].as_str().unwrap())
        .collect();
    assert!(
        sessions.contains(&"session-cccc03") && !sessions.contains(&"session-dddd04"),
        "{sessions:?}"
    );
    let run = repo.ckpt_json(
        &[
            "trace",
            "restore",
            "trace:aaaa01:1.3",
            "--dry-run",
            "--dsh-home",
            home.to_str().unwrap(),
        ],
        3,
    );
    let planned = run.one("trace.restore");
    assert_eq!(planned["rebuilt"], serde_json::json!(["z.txt"]), "{planned}");
    assert!(
        planned["not_restored"]
            .to_string()
            .contains("session session-cccc03 ran write"),
        "{planned}"
    );
}

/// Milliseconds since the epoch, as the harness stamps its events.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A session as the harness records it while it really runs: each call is logged, the tool
/// changes the file (through `effect`), then its result is logged, all on the real clock.
struct LiveSession {
    lines: Vec<String>,
    seq: u64,
}

impl LiveSession {
    fn new(id: &str, cwd: &str) -> Self {
        Self::with_header(serde_json::json!({"type": "session", "id": id, "cwd": cwd}))
    }

    fn with_header(header: serde_json::Value) -> Self {
        LiveSession {
            lines: vec![header.to_string()],
            seq: 0,
        }
    }

    fn run(&mut self, turn: u64, step: u64, name: &str, args: serde_json::Value, effect: impl FnOnce()) {
        // Calls of a real session are milliseconds apart at the least.
        std::thread::sleep(std::time::Duration::from_millis(40));
        self.seq += 1;
        let id = format!("call-{}", self.seq);
        self.lines.push(
            serde_json::json!({"type": "tool/call", "seq": self.seq, "time": now_ms(),
                "data": {"turn": turn, "step": step, "callId": id, "name": name, "arguments": args.to_string()}})
            .to_string(),
        );
        effect();
        self.seq += 1;
        self.lines.push(
            serde_json::json!({"type": "tool/result", "seq": self.seq, "time": now_ms(),
                "data": {"message": {"source": {"kind": "tool", "callId": id},
                    "content": [{"type": "tool-result", "toolCallId": id, "isError": false}]}}})
            .to_string(),
        );
        std::thread::sleep(std::time::Duration::from_millis(40));
    }

    /// Two calls of one step that run at once: both logged, both effects, both results.
    fn run_together(&mut self, turn: u64, calls: [(u64, serde_json::Value); 2], effect: impl FnOnce()) {
        std::thread::sleep(std::time::Duration::from_millis(40));
        let ids: Vec<String> = calls
            .iter()
            .map(|(step, args)| {
                self.seq += 1;
                let id = format!("call-{}", self.seq);
                self.lines.push(
                    serde_json::json!({"type": "tool/call", "seq": self.seq, "time": now_ms(),
                        "data": {"turn": turn, "step": step, "callId": id, "name": "edit", "arguments": args.to_string()}})
                    .to_string(),
                );
                id
            })
            .collect();
        effect();
        for id in ids.iter().rev() {
            self.seq += 1;
            self.lines.push(
                serde_json::json!({"type": "tool/result", "seq": self.seq, "time": now_ms(),
                    "data": {"message": {"source": {"kind": "tool", "callId": id},
                        "content": [{"type": "tool-result", "toolCallId": id, "isError": false}]}}})
                .to_string(),
            );
        }
    }

    fn save(&self, home: &std::path::Path, cwd: &str, id: &str) {
        let dir = home.join("sessions").join(project_key(cwd)).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let log = zstd::encode_all(format!("{}\n", self.lines.join("\n")).as_bytes(), 3).unwrap();
        std::fs::write(dir.join("session.jsonl.zstd"), log).unwrap();
    }
}

/// What `trace list` says of `path` at node `turn_step`: (rebuildable, worked back, reason).
fn file_at_node(run: &Run, turn_step: &str, path: &str) -> (bool, bool, String) {
    let node = run
        .json
        .iter()
        .find(|r| r["type"] == "trace.node" && r["node"].as_str().unwrap().ends_with(&format!(":{turn_step}")))
        .unwrap_or_else(|| panic!("no node {turn_step}: {:?}", run.json));
    let file = node["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("node {turn_step} names no {path}: {node}"));
    (
        file["rebuildable"].as_bool().unwrap(),
        file["worked_back"].as_bool().unwrap(),
        file["reason"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_session_no_checkpoint_saw_is_worked_back_from_the_worktree_only_where_that_is_exact() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"alpha\nbeta\ngamma\n");
    repo.write("c.txt", b"one\ntwo\none\n");
    repo.commit_all("base");
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let edit = |path: &'static str, old: &'static str, new: &'static str| {
        let repo = &repo;
        move || {
            let text = String::from_utf8(repo.read(path)).unwrap();
            repo.write(path, text.replacen(old, new, 1).as_bytes());
        }
    };
    // No checkpoint at all: ckpt was not running while the agent worked.
    let mut session = LiveSession::new("session-cold", &root);
    session.run(
        1,
        1,
        "edit",
        serde_json::json!({"file_path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
        edit("a.txt", "beta", "BETA"),
    );
    session.run(1, 2, "bash", serde_json::json!({"command": "echo c >> c.txt"}), || {
        let mut text = repo.read("c.txt");
        text.extend_from_slice(b"c\n");
        repo.write("c.txt", &text);
    });
    session.run(
        1,
        3,
        "edit",
        serde_json::json!({"file_path": "a.txt", "old_string": "gamma", "new_string": "GAMMA"}),
        edit("a.txt", "gamma", "GAMMA"),
    );
    session.run(
        2,
        1,
        "edit",
        serde_json::json!({"file_path": "c.txt", "old_string": "two", "new_string": "TWO"}),
        edit("c.txt", "two", "TWO"),
    );
    session.run(
        2,
        2,
        "edit",
        serde_json::json!({"file_path": "c.txt", "old_string": "TWO", "new_string": "one"}),
        edit("c.txt", "TWO", "one"),
    );
    session.save(&home, &root, "session-cold");
    let home = home.to_str().unwrap();
    let before = repo.fingerprint();
    let files_before = repo.worktree();

    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    // a.txt: worked back over 1.3 (the shell ran before it, on another file, but it could have
    // touched a.txt, so 1.1 stays unknown).
    assert_eq!(file_at_node(&run, "1.3", "a.txt"), (true, true, String::new()));
    let (known, _, why) = file_at_node(&run, "1.1", "a.txt");
    assert!(
        !known && why.contains("not worked back from the worktree") && why.contains("bash"),
        "{why}"
    );
    // c.txt: 2.2 is now; undoing it is ambiguous ("one" occurs three times), so 2.1 is unknown.
    assert!(file_at_node(&run, "2.2", "c.txt").0);
    let (known, _, why) = file_at_node(&run, "2.1", "c.txt");
    assert!(!known && why.contains("occurs more than once"), "{why}");
    let human = repo.ckpt(&["trace", "list", "--dsh-home", home]);
    assert!(
        human.stdout.contains("rebuilds a.txt (worked back from the worktree)"),
        "{}",
        human.stdout
    );

    // What call 1.3 changed, its base worked back too.
    let human = repo.ckpt(&["trace", "diff", "trace:cold:1.3", "--dsh-home", home]);
    assert!(
        human.stdout.contains("-gamma") && human.stdout.contains("+GAMMA"),
        "{}",
        human.stdout
    );
    assert_eq!(repo.fingerprint(), before, "the trace is read-only");
    assert_eq!(repo.worktree(), files_before);

    // The user edits a.txt after the session: the worktree no longer vouches for anything.
    std::thread::sleep(std::time::Duration::from_millis(60));
    repo.write("a.txt", b"alpha\nBETA\nGAMMA\nthe user's line\n");
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    let (known, _, why) = file_at_node(&run, "1.3", "a.txt");
    assert!(!known && why.contains("changed after call 1.3"), "{why}");
    // Even one that puts the old modification time back: its status-change time still moved.
    repo.write("a.txt", b"alpha\nBETA\nGAMMA\n");
    let old = std::fs::metadata(repo.root.join("c.txt")).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(repo.root.join("a.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    assert!(
        !file_at_node(&run, "1.3", "a.txt").0,
        "a reset modification time proves nothing"
    );
}

#[test]
fn a_trace_restore_to_a_worked_back_node_writes_the_content_it_had_then() {
    let repo = TestRepo::new();
    repo.write("notes.md", b"# Notes\n\ndraft\n");
    repo.commit_all("base");
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let mut session = LiveSession::new("session-late", &root);
    let step = |old: &'static str, new: &'static str| {
        let repo = &repo;
        move || {
            let text = String::from_utf8(repo.read("notes.md")).unwrap();
            repo.write("notes.md", text.replacen(old, new, 1).as_bytes());
        }
    };
    session.run(
        1,
        1,
        "edit",
        serde_json::json!({"file_path": format!("{root}/notes.md"), "old_string": "draft", "new_string": "first pass"}),
        step("draft", "first pass"),
    );
    session.run(1, 2, "str_replace_editor", serde_json::json!({"command": "str_replace", "path": "notes.md", "old_str": "first pass", "new_str": "final text"}), step("first pass", "final text"));
    // Two edits of one file at once, in the order the log does not say: nothing of them is
    // worked back, nor anything before them.
    repo.write("pair.txt", b"left right\n");
    session.run_together(
        2,
        [
            (
                1,
                serde_json::json!({"file_path": "pair.txt", "old_string": "left", "new_string": "LEFT"}),
            ),
            (
                2,
                serde_json::json!({"file_path": "pair.txt", "old_string": "right", "new_string": "RIGHT"}),
            ),
        ],
        || repo.write("pair.txt", b"LEFT RIGHT\n"),
    );
    session.save(&home, &root, "session-late");
    let home = home.to_str().unwrap();
    let before = repo.fingerprint().without_status();

    let listed = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    let (known, _, why) = file_at_node(&listed, "2.2", "pair.txt");
    assert!(!known && why.contains("calls 2.1 and 2.2 ran at once"), "{why}");
    assert!(!file_at_node(&listed, "2.1", "pair.txt").0);

    let run = repo.ckpt_json(&["trace", "restore", "trace:late:1.1", "--yes", "--dsh-home", home], 0);
    assert_eq!(run.one("trace.restore")["rebuilt"], serde_json::json!(["notes.md"]));
    assert_eq!(repo.read("notes.md"), b"# Notes\n\nfirst pass\n");
    assert_eq!(repo.fingerprint().without_status(), before, "only refs/ckpt/ changed");
    // Undo through the guard gives the state before, byte-exact.
    let guard = repo
        .ckpt_json(&["list"], 0)
        .json
        .iter()
        .rev()
        .find(|r| r["type"] == "checkpoint" && r["kind"] == "guard")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .unwrap();
    repo.ckpt_json(&["restore", &guard, "--yes"], 0);
    assert_eq!(repo.read("notes.md"), b"# Notes\n\nfinal text\n");
}

#[test]
fn a_session_log_given_by_the_caller_stands_in_for_the_file_under_the_harness_home() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let header = serde_json::json!({"type": "session", "id": "session-given1", "cwd": root}).to_string();
    let write = |seq: u64, step: u64, content: &str| {
        call(
            seq,
            1,
            step,
            &format!("w{step}"),
            "write",
            serde_json::json!({"file_path": "a.txt", "content": content}),
        )
    };
    let dir = home.join("sessions").join(project_key(&root)).join("session-given1");
    std::fs::create_dir_all(&dir).unwrap();
    // The harness's file lags: it has the first call only.
    std::fs::write(
        dir.join("session.jsonl"),
        format!("{header}\n{}\n{}\n", write(1, 1, "one\n"), result(2, "w1", false)),
    )
    .unwrap();
    let live = repo.home.join("live.jsonl");
    std::fs::write(
        &live,
        format!(
            "{header}\n{}\n{}\n{}\n{}\n",
            write(1, 1, "one\n"),
            result(2, "w1", false),
            write(3, 2, "two\n"),
            result(4, "w2", false)
        ),
    )
    .unwrap();
    let home = home.to_str().unwrap();
    let live_text = live.to_str().unwrap();
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home, "--session-log", live_text], 0);
    let sessions: Vec<_> = run.json.iter().filter(|r| r["type"] == "trace.session").collect();
    assert_eq!(
        sessions.len(),
        1,
        "the given log replaces the file, not joins it: {sessions:?}"
    );
    assert_eq!(sessions[0]["log"], live_text);
    assert!(file_at_node(&run, "1.2", "a.txt").0);
    repo.ckpt_json(
        &[
            "trace",
            "restore",
            "trace:given1:1.2",
            "--yes",
            "--dsh-home",
            home,
            "--session-log",
            live_text,
        ],
        0,
    );
    assert_eq!(repo.read("a.txt"), b"two\n");

    // A log that does not say which session it is, or one of another workspace, is refused.
    let headless = repo.home.join("headless.jsonl");
    std::fs::write(&headless, format!("{}\n", write(1, 1, "x\n"))).unwrap();
    let foreign = repo.home.join("foreign.jsonl");
    std::fs::write(
        &foreign,
        format!(
            "{}\n{}\n",
            serde_json::json!({"type": "session", "id": "session-else", "cwd": "/somewhere/else"}),
            write(1, 1, "x\n")
        ),
    )
    .unwrap();
    for (file, why) in [
        (&headless, "needs its header line"),
        (&foreign, "did not run in this workspace"),
    ] {
        let run = repo.ckpt(&[
            "trace",
            "list",
            "--dsh-home",
            home,
            "--session-log",
            file.to_str().unwrap(),
        ]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(why), "{}", run.stderr);
    }
}

/// `trace list` for one session as JSON, and the rebuilt claims it makes for `path`:
/// (turn.step, blob id) of every node that says it rebuilds it.
fn claims(repo: &TestRepo, home: &str, path: &str) -> Vec<(String, String)> {
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    run.json
        .iter()
        .filter(|r| r["type"] == "trace.node")
        .flat_map(|node| {
            node["files"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["path"] == path && f["rebuildable"] == true)
                .map(|f| {
                    (
                        format!("{}.{}", node["turn"], node["step"]),
                        f["id"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn working_back_never_claims_a_state_the_file_did_not_have() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home_dir = repo.home.join("dsh");
    let home = home_dir.to_str().unwrap().to_owned();
    let edit_args =
        |path: &str, old: &str, new: &str| serde_json::json!({"file_path": path, "old_string": old, "new_string": new});
    let apply = |path: &'static str, old: &'static str, new: &'static str| {
        let repo = &repo;
        move || {
            let text = String::from_utf8(repo.read(path)).unwrap();
            repo.write(path, text.replacen(old, new, 1).as_bytes());
        }
    };
    let blob = |text: &str| {
        git_stdin(&repo, &["hash-object", "--stdin"], text.as_bytes())
            .trim()
            .to_owned()
    };

    // An edit's new text that overlaps itself in the file: "- item\n" three times in a row.
    repo.write("list.md", b"# todo\n- item\n- other\n");
    let mut session = LiveSession::new("session-overlap", &root);
    session.run(
        1,
        1,
        "edit",
        edit_args("list.md", "# todo", "# TODO"),
        apply("list.md", "# todo", "# TODO"),
    );
    session.run(
        1,
        2,
        "edit",
        edit_args("list.md", "- other\n", "- item\n- item\n"),
        apply("list.md", "- other\n", "- item\n- item\n"),
    );
    session.save(&home_dir, &root, "session-overlap");
    let found = claims(&repo, &home, "list.md");
    assert!(
        !found.contains(&("1.1".into(), blob("# TODO\n- other\n- item\n"))),
        "a state list.md never held: {found:?}"
    );
    assert!(
        found.iter().all(|(at, _)| at == "1.2"),
        "only what the file now proves: {found:?}"
    );

    // The same file under another name: a symlinked directory, or a hard link.
    repo.write("sub/f.txt", b"one two three\n");
    repo.symlink(std::path::Path::new("sub"), "lnk");
    repo.write("g.txt", b"one two three\n");
    std::fs::hard_link(repo.root.join("g.txt"), repo.root.join("g-link.txt")).unwrap();
    let mut session = LiveSession::new("session-alias", &root);
    session.run(
        1,
        1,
        "edit",
        edit_args("sub/f.txt", "one", "ONE"),
        apply("sub/f.txt", "one", "ONE"),
    );
    session.run(
        1,
        2,
        "edit",
        edit_args("lnk/f.txt", "two", "TWO"),
        apply("sub/f.txt", "two", "TWO"),
    );
    session.run(
        1,
        3,
        "edit",
        edit_args("sub/f.txt", "three", "THREE"),
        apply("sub/f.txt", "three", "THREE"),
    );
    session.run(
        2,
        1,
        "edit",
        edit_args("g.txt", "one", "ONE"),
        apply("g.txt", "one", "ONE"),
    );
    session.run(
        2,
        2,
        "edit",
        edit_args("g.txt", "two", "TWO"),
        apply("g.txt", "two", "TWO"),
    );
    session.save(&home_dir, &root, "session-alias");
    let found = claims(&repo, &home, "sub/f.txt");
    assert!(
        !found.contains(&("1.1".into(), blob("ONE TWO three\n"))),
        "the edit through lnk/ was the same file: {found:?}"
    );
    assert!(
        claims(&repo, &home, "g.txt").is_empty(),
        "a hard-linked file proves nothing"
    );

    // Times no clock gives: never a panic, never a claim.
    for (name, call_at, result_at) in [
        (
            "session-maxtime",
            serde_json::json!(1_700_000_000_000u64),
            serde_json::json!(i64::MAX),
        ),
        (
            "session-mintime",
            serde_json::json!(i64::MIN),
            serde_json::json!(1_700_000_000_000u64),
        ),
        (
            "session-future",
            serde_json::json!(4_000_000_000_000u64),
            serde_json::json!(4_000_000_000_001u64),
        ),
    ] {
        repo.write("t.txt", b"x y\n");
        let lines = [
            serde_json::json!({"type": "session", "id": name, "cwd": root}).to_string(),
            serde_json::json!({"type": "tool/call", "seq": 1, "time": call_at, "data": {"turn": 1, "step": 1, "callId": "c1", "name": "edit",
                "arguments": edit_args("t.txt", "q", "y").to_string()}})
            .to_string(),
            serde_json::json!({"type": "tool/result", "seq": 2, "time": result_at, "data": {"message": {"source": {"kind": "tool", "callId": "c1"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "isError": false}]}}})
            .to_string(),
        ];
        let dir = home_dir.join("sessions").join(project_key(&root)).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("session.jsonl"), format!("{}\n", lines.join("\n"))).unwrap();
        assert!(claims(&repo, &home, "t.txt").is_empty(), "{name}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_replay_the_file_now_contradicts_is_not_trusted() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home_dir = repo.home.join("dsh");
    let mut session = LiveSession::new("session-contra", &root);
    session.run(
        1,
        1,
        "write",
        serde_json::json!({"file_path": "w.txt", "content": "one two three\n"}),
        || repo.write("w.txt", b"one two three\n"),
    );
    // Something the log does not show changes the file between two calls.
    repo.write("w.txt", b"one two three-U\n");
    std::thread::sleep(std::time::Duration::from_millis(40));
    session.run(
        1,
        2,
        "edit",
        serde_json::json!({"file_path": "w.txt", "old_string": "one", "new_string": "ONE"}),
        || repo.write("w.txt", b"ONE two three-U\n"),
    );
    session.save(&home_dir, &root, "session-contra");
    let home = home_dir.to_str().unwrap();
    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    let (known, _, why) = file_at_node(&run, "1.2", "w.txt");
    assert!(
        !known && why.contains("something the log does not show changed it"),
        "{why}"
    );
    assert!(!file_at_node(&run, "1.1", "w.txt").0);
}

#[test]
fn a_forks_own_calls_and_sessions_started_above_the_workspace_count_as_other_sessions() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let parent_dir = repo.root.parent().unwrap().to_str().unwrap().to_owned();
    let home_dir = repo.home.join("dsh");
    let home = home_dir.to_str().unwrap().to_owned();
    let edit =
        |path: &str, old: &str, new: &str| serde_json::json!({"file_path": path, "old_string": old, "new_string": new});
    let change = |old: &'static str, new: &'static str| {
        let repo = &repo;
        move || {
            let text = String::from_utf8(repo.read("f.txt")).unwrap();
            repo.write("f.txt", text.replacen(old, new, 1).as_bytes());
        }
    };
    let blob = |text: &str| {
        git_stdin(&repo, &["hash-object", "--stdin"], text.as_bytes())
            .trim()
            .to_owned()
    };
    for other in ["fork", "above"] {
        repo.write("f.txt", b"one two three\n");
        let main_id = format!("session-main-{other}");
        let mut main = LiveSession::new(&main_id, &root);
        // The other session's first call has the id the main session's first call has.
        let (mut second, second_id, second_cwd, named) = match other {
            "fork" => {
                let id = format!("session-fork-{other}");
                let header = serde_json::json!({"type": "session", "id": id, "cwd": root, "parentSession": main_id, "seedLength": 1});
                (LiveSession::with_header(header), id, root.clone(), "f.txt".to_owned())
            }
            _ => {
                let id = format!("session-above-{other}");
                let name = format!("{}/f.txt", repo.root.file_name().unwrap().to_str().unwrap());
                (LiveSession::new(&id, &parent_dir), id, parent_dir.clone(), name)
            }
        };
        main.run(1, 1, "edit", edit("f.txt", "one", "ONE"), change("one", "ONE"));
        second.run(1, 1, "edit", edit(&named, "two", "TWO"), change("two", "TWO"));
        main.run(1, 2, "edit", edit("f.txt", "three", "THREE"), change("three", "THREE"));
        main.save(&home_dir, &root, &main_id);
        second.save(&home_dir, &second_cwd, &second_id);
        let run = repo.ckpt_json(&["trace", "list", "--dsh-home", &home], 0);
        let listed: Vec<&str> = run
            .json
            .iter()
            .filter(|r| r["type"] == "trace.session")
            .map(|r| r["session"].as_str().unwrap())
            .collect();
        assert_eq!(
            listed.contains(&second_id.as_str()),
            other == "fork",
            "{other}: {listed:?}"
        );
        let found = claims(&repo, &home, "f.txt");
        assert!(
            !found.contains(&("1.1".into(), blob("ONE TWO three\n"))),
            "{other}: the other session's edit is not the main session's: {found:?}"
        );
        assert!(
            found.contains(&("1.2".into(), blob("ONE TWO THREE\n"))),
            "{other}: {found:?}"
        );
        std::fs::remove_dir_all(home_dir.join("sessions")).unwrap();
    }
}

/// One logged event of a hand-driven live session: a call or its result, at the real time.
fn live_event(seq: u64, turn: u64, step: u64, id: &str, args: Option<serde_json::Value>) -> String {
    match args {
        Some(args) => serde_json::json!({"type": "tool/call", "seq": seq, "time": now_ms(),
            "data": {"turn": turn, "step": step, "callId": id, "name": "edit", "arguments": args.to_string()}}),
        None => serde_json::json!({"type": "tool/result", "seq": seq, "time": now_ms(),
            "data": {"message": {"source": {"kind": "tool", "callId": id},
                "content": [{"type": "tool-result", "toolCallId": id, "isError": false}]}}}),
    }
    .to_string()
}

#[test]
fn a_checkpoint_is_a_base_only_if_it_was_taken_before_the_call_wrote() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home_dir = repo.home.join("dsh");
    let home = home_dir.to_str().unwrap().to_owned();
    let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
    let snap = |turn: &str, step: &str| {
        repo.snapshot(&[
            "--session",
            "session-timed1",
            "--turn",
            turn,
            "--step",
            step,
            "--kind",
            "auto",
        ]);
        pause();
    };
    let edit = |old: &str, new: &str| serde_json::json!({"file_path": "a.txt", "old_string": old, "new_string": new});
    let blob = |text: &str| {
        git_stdin(&repo, &["hash-object", "--stdin"], text.as_bytes())
            .trim()
            .to_owned()
    };
    repo.write("a.txt", b"a\nzzz\n");
    repo.write("b.txt", b"b\n");
    let mut lines = vec![serde_json::json!({"type": "session", "id": "session-timed1", "cwd": root}).to_string()];
    // Step 1.1 runs two calls at once; the hook's checkpoint before the second (labelled 1.1
    // too) is taken after the first already wrote a.txt.
    lines.push(live_event(1, 1, 1, "c1", Some(edit("a\n", "ab\n"))));
    lines.push(live_event(
        2,
        1,
        1,
        "c2",
        Some(serde_json::json!({"file_path": "b.txt", "old_string": "b", "new_string": "B"})),
    ));
    pause();
    snap("1", "1");
    repo.write("a.txt", b"ab\nzzz\n");
    lines.push(live_event(3, 0, 0, "c1", None));
    pause();
    snap("1", "1");
    repo.write("b.txt", b"B\n");
    lines.push(live_event(4, 0, 0, "c2", None));
    pause();
    // Between turns the user adds a line; the checkpoint before turn 2 holds it.
    repo.write("a.txt", b"ab\nzzz\nuser-mid\n");
    pause();
    snap("2", "1");
    lines.push(live_event(5, 2, 1, "c3", Some(edit("zzz", "ZZZ"))));
    pause();
    repo.write("a.txt", b"ab\nZZZ\nuser-mid\n");
    lines.push(live_event(6, 0, 0, "c3", None));
    pause();
    // And edits again afterwards, so nothing is worked back from the worktree.
    repo.write("a.txt", b"something else\n");
    let dir = home_dir
        .join("sessions")
        .join(project_key(&root))
        .join("session-timed1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("session.jsonl"), format!("{}\n", lines.join("\n"))).unwrap();

    let found = claims(&repo, &home, "a.txt");
    assert!(
        !found
            .iter()
            .any(|(_, id)| *id == blob("abb\nzzz\n") || *id == blob("abb\nZZZ\n")),
        "an edit applied twice: {found:?}"
    );
    assert!(
        !found.contains(&("2.1".into(), blob("ab\nZZZ\n"))),
        "the user's line the checkpoint before 2.1 holds is lost: {found:?}"
    );
    assert!(
        found.contains(&("2.1".into(), blob("ab\nZZZ\nuser-mid\n"))),
        "2.1 from the checkpoint just before it: {found:?}"
    );
}

#[test]
fn third_review_a_failed_shell_a_checkpoint_taken_mid_call_and_calls_finishing_out_of_order() {
    let repo = TestRepo::new();
    let root = repo.root.to_str().unwrap().to_owned();
    let home_dir = repo.home.join("dsh");
    let home = home_dir.to_str().unwrap().to_owned();
    let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
    let blob = |text: &str| {
        git_stdin(&repo, &["hash-object", "--stdin"], text.as_bytes())
            .trim()
            .to_owned()
    };
    let edit =
        |file: &str, old: &str, new: &str| serde_json::json!({"file_path": file, "old_string": old, "new_string": new});
    let result = |seq: u64, id: &str, failed: bool| {
        serde_json::json!({"type": "tool/result", "seq": seq, "time": now_ms(),
            "data": {"message": {"source": {"kind": "tool", "callId": id},
                "content": [{"type": "tool-result", "toolCallId": id, "isError": failed}]}}})
        .to_string()
    };
    let save = |session: &str, lines: &[String]| {
        let dir = home_dir.join("sessions").join(project_key(&root)).join(session);
        std::fs::create_dir_all(&dir).unwrap();
        let header = serde_json::json!({"type": "session", "id": session, "cwd": root}).to_string();
        std::fs::write(dir.join("session.jsonl"), format!("{header}\n{}\n", lines.join("\n"))).unwrap();
    };
    let snap = |session: &str, turn: &str, step: &str| {
        repo.snapshot(&["--session", session, "--turn", turn, "--step", step, "--kind", "auto"]);
        pause();
    };

    // A shell that failed (a command that exits non-zero) still changed the file.
    repo.write("f1.txt", b"a\nzzz\n");
    snap("session-third1", "1", "1");
    let mut lines = vec![live_event(1, 1, 1, "s1", None)];
    lines[0] = serde_json::json!({"type": "tool/call", "seq": 1, "time": now_ms(),
        "data": {"turn": 1, "step": 1, "callId": "s1", "name": "bash", "arguments": "{\"command\":\"fmt && false\"}"}})
    .to_string();
    repo.write("f1.txt", b"a\nzzz\nshell\n");
    lines.push(result(2, "s1", true));
    pause();
    lines.push(live_event(3, 1, 2, "e1", Some(edit("f1.txt", "zzz", "ZZZ"))));
    repo.write("f1.txt", b"a\nZZZ\nshell\n");
    lines.push(result(4, "e1", false));
    pause();
    repo.write("f1.txt", b"changed later\n");
    save("session-third1", &lines);
    assert!(
        !claims(&repo, &home, "f1.txt").contains(&("1.2".into(), blob("a\nZZZ\n"))),
        "a failed shell's change is lost"
    );

    // A checkpoint taken while the call ran, after it wrote.
    repo.write("f2.txt", b"a\nzzz\n");
    let mut lines = vec![live_event(1, 1, 1, "c1", Some(edit("f2.txt", "a", "ab")))];
    repo.write("f2.txt", b"ab\nzzz\n");
    pause();
    snap("session-third2", "1", "1");
    lines.push(result(2, "c1", false));
    pause();
    lines.push(live_event(3, 1, 2, "c2", Some(edit("f2.txt", "zzz", "ZZZ"))));
    repo.write("f2.txt", b"ab\nZZZ\n");
    lines.push(result(4, "c2", false));
    pause();
    repo.write("f2.txt", b"changed later\n");
    save("session-third2", &lines);
    let found = claims(&repo, &home, "f2.txt");
    assert!(
        !found
            .iter()
            .any(|(_, id)| *id == blob("abb\nzzz\n") || *id == blob("abb\nZZZ\n")),
        "an edit applied twice: {found:?}"
    );

    // Two calls of one step on one file, the second logged writing first.
    repo.write("f3.txt", b"a\nzzz\n");
    snap("session-third3", "1", "1");
    let mut lines = vec![
        live_event(1, 1, 1, "p1", Some(edit("f3.txt", "a\n", "ab\n"))),
        live_event(2, 1, 1, "p2", Some(edit("f3.txt", "zzz", "ZZZ"))),
    ];
    pause();
    repo.write("f3.txt", b"a\nZZZ\n");
    lines.push(result(3, "p2", false));
    pause();
    repo.write("f3.txt", b"ab\nZZZ\n");
    lines.push(result(4, "p1", false));
    pause();
    repo.write("f3.txt", b"changed later\n");
    save("session-third3", &lines);
    let found = claims(&repo, &home, "f3.txt");
    assert!(
        !found.iter().any(|(_, id)| *id == blob("ab\nzzz\n")),
        "a state the file never held: {found:?}"
    );
}

#[test]
fn node_names_carry_only_safe_characters_whatever_the_session_id() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"before\n");
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    // A session id is the log's own text: pasted unquoted, this one would run `id`.
    let id = "session-`id>PWN`-x";
    let dir = home.join("sessions").join(project_key(&root)).join("session-hostile");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        serde_json::json!({"type": "session", "id": id, "cwd": root}).to_string(),
        call(
            1,
            1,
            1,
            "w$(id)",
            "write",
            serde_json::json!({"file_path": "a.txt", "content": "after\n"}),
        ),
        result(2, "w$(id)", false),
        "not json; $(id)".to_owned(),
    ];
    let log = zstd::encode_all(format!("{}\n", lines.join("\n")).as_bytes(), 3).unwrap();
    std::fs::write(dir.join("session.jsonl.zstd"), log).unwrap();
    let home = home.to_str().unwrap();

    let listed = repo.ckpt_json(&["trace", "list", "--dsh-home", home], 0);
    let nodes: Vec<String> = listed
        .json
        .iter()
        .filter(|r| r["type"] == "trace.node")
        .map(|r| r["node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        nodes,
        ["trace:_id_PWN_:1.1", "trace:_id_PWN_:line-4"],
        "{:?}",
        listed.json
    );
    // The names still reach their nodes, and a restore says how to undo it in words a shell
    // takes as they are.
    let diff = repo.ckpt_json(&["trace", "diff", &nodes[0], "--dsh-home", home], 0);
    assert_eq!(diff.one("trace.diff")["from"], nodes[0].as_str());
    repo.ckpt_json(&["trace", "diff", &nodes[1], "--dsh-home", home], 0);
    let restored = repo.ckpt(&["trace", "restore", &nodes[0], "--yes", "--dsh-home", home]);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert_eq!(repo.read("a.txt"), b"after\n");
    let undo = restored
        .stdout
        .lines()
        .find_map(|l| l.split_once("undo with: ").map(|(_, command)| command.to_owned()))
        .unwrap_or_else(|| panic!("no undo command in {}", restored.stdout));
    assert!(
        undo.starts_with("ckpt restore ") && undo.bytes().all(|b| b.is_ascii_alphanumeric() || b" -".contains(&b)),
        "{undo}"
    );
}
