//! `ckpt hook` fed agents' hook events on stdin, on real repositories: a checkpoint before each
//! mutating tool with the session's turn and step, nothing on stdout, the git state untouched,
//! and the agents' exit-code protocol (1 warns, 2 blocks only with --fail-closed).

use std::io::Write as _;
use std::process::Stdio;

use serde_json::json;

use crate::common::*;

/// `ckpt hook AGENT EXTRA...` with `event` on stdin.
fn hook(repo: &TestRepo, agent: &str, extra: &[&str], event: &str) -> Run {
    hook_in(repo, &repo.root, &[], agent, extra, event)
}

/// [`hook`] started in `dir`, with `env` set.
fn hook_in(
    repo: &TestRepo,
    dir: &std::path::Path,
    env: &[(&str, &std::path::Path)],
    agent: &str,
    extra: &[&str],
    event: &str,
) -> Run {
    let mut cmd = repo.ckpt_command();
    cmd.current_dir(dir).envs(env.iter().copied());
    cmd.args(["hook", agent])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ckpt hook");
    // A hook that refuses its command line exits before it reads the event: the write may then
    // meet a closed pipe (CI saw it once), which is not the test's concern.
    match child.stdin.take().expect("stdin").write_all(event.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.expect("write the event"),
    }
    let out = child.wait_with_output().expect("ckpt hook");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        json: Vec::new(),
    }
}

fn claude_event(repo: &TestRepo, name: &str, tool: Option<&str>, prompt: &str) -> String {
    let mut event = json!({
        "session_id": "sess-1",
        "transcript_path": repo.home.join("t.jsonl"),
        "cwd": repo.root,
        "hook_event_name": name,
        "prompt_id": prompt,
    });
    if let Some(tool) = tool {
        event["tool_name"] = json!(tool);
        event["tool_input"] = json!({"file_path": repo.path("notes.txt"), "content": "x"});
    }
    event.to_string()
}

fn labels(repo: &TestRepo) -> Vec<String> {
    let listed = repo.ckpt_json(&["list", "--session", "sess-1"], 0);
    listed
        .json
        .iter()
        .filter(|r| r["type"] == "checkpoint")
        .map(|r| {
            format!(
                "{}.{} {} {}",
                r["turn"],
                r["step"],
                r["trigger"].as_str().unwrap_or("?"),
                r["kind"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[test]
fn a_hook_checkpoints_before_each_mutating_tool_and_counts_turns() {
    let repo = TestRepo::new();
    let before = repo.fingerprint();
    let steps: [(&str, Option<&str>, &str); 6] = [
        ("UserPromptSubmit", None, "p1"),
        ("PreToolUse", Some("Write"), "p1"),
        ("PreToolUse", Some("Read"), "p1"),
        ("PreToolUse", Some("Edit"), "p1"),
        ("Stop", None, "p1"),
        // No prompt event for the second turn: its prompt id opens it.
        ("PreToolUse", Some("Bash"), "p2"),
    ];
    for (n, (name, tool, prompt)) in steps.iter().enumerate() {
        let run = hook(&repo, "claude", &[], &claude_event(&repo, name, *tool, prompt));
        assert_eq!(run.code, 0, "{name} {tool:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "a hook printed on stdout: {:?}", run.stdout);
        // The tool then changes something.
        if matches!(tool, Some("Write" | "Edit" | "Bash")) {
            repo.write("notes.txt", format!("after event {n}\n").as_bytes());
        }
    }
    assert_eq!(labels(&repo), ["1.1 Write auto", "1.2 Edit auto", "2.1 Bash auto"]);
    let listed = repo.ckpt_json(&["list", "--session", "sess-1"], 0);
    let first = listed.json[0]["id"].as_str().expect("id").to_owned();
    let second = listed.json[1]["id"].as_str().expect("id").to_owned();
    assert!(
        repo.git_raw(&["cat-file", "-e", &format!("{first}:notes.txt")])
            .status
            .code()
            != Some(0),
        "the checkpoint before the write already holds notes.txt"
    );
    // Before the Edit: the file as the Write left it.
    assert_eq!(
        repo.git(&["cat-file", "blob", &format!("{second}:notes.txt")]),
        "after event 1\n"
    );
    assert_eq!(repo.fingerprint().without_status(), before.without_status());
    // Back to before turn 1.
    repo.ckpt_json(&["restore", "turn:1", "--session", "sess-1", "--exact", "--yes"], 0);
    assert!(!repo.path("notes.txt").exists());
}

#[test]
fn gemini_and_codex_events_are_read_with_their_own_names() {
    let repo = TestRepo::new();
    let gemini = |name: &str, tool: Option<&str>| {
        let mut event = json!({"session_id": "sess-1", "cwd": repo.root, "hook_event_name": name});
        if let Some(tool) = tool {
            event["tool_name"] = json!(tool);
        }
        event.to_string()
    };
    for (n, (name, tool)) in [
        ("BeforeAgent", None),
        ("BeforeTool", Some("write_file")),
        ("BeforeTool", Some("read_file")),
        ("BeforeAgent", None),
        ("BeforeTool", Some("run_shell_command")),
    ]
    .into_iter()
    .enumerate()
    {
        let run = hook(&repo, "gemini", &[], &gemini(name, tool));
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
        repo.write("notes.txt", format!("after event {n}\n").as_bytes());
    }
    // A Claude event name means nothing to the Gemini hook.
    let foreign = hook(
        &repo,
        "gemini",
        &[],
        &claude_event(&repo, "PreToolUse", Some("Write"), "p"),
    );
    assert_eq!(foreign.code, 0);
    assert_eq!(labels(&repo), ["1.1 write_file auto", "2.1 run_shell_command auto"]);
    let codex = json!({"session_id": "sess-1", "turn_id": "t9", "cwd": repo.root, "hook_event_name": "PreToolUse", "tool_name": "apply_patch"});
    repo.write("notes.txt", b"codex\n");
    assert_eq!(hook(&repo, "codex", &[], &codex.to_string()).code, 0);
    // A session this agent has no position for continues past the turns its id already has,
    // so `turn:` targets within it stay unambiguous.
    assert_eq!(labels(&repo).last().map(String::as_str), Some("3.1 apply_patch auto"));
}

#[test]
fn parallel_hooks_of_one_session_each_get_their_own_step() {
    let repo = TestRepo::new();
    let event = claude_event(&repo, "PreToolUse", Some("Bash"), "p1");
    let runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| hook(&repo, "claude", &[], &event)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for run in &runs {
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
    }
    // Twelve steps were counted (one checkpoint: nothing changed between them); the next call
    // after a change is step 13, so no two calls shared a step.
    repo.write("notes.txt", b"changed\n");
    assert_eq!(hook(&repo, "claude", &[], &event).code, 0);
    let all = labels(&repo);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1], "1.13 Bash auto");
}

#[test]
fn no_checkpoint_warns_and_only_fail_closed_blocks_a_tool() {
    // A bare repository has no worktree to checkpoint.
    let bare = TestRepo::bare_dir();
    bare.git(&["init", "-q", "--bare"]);
    let tool = claude_event(&bare, "PreToolUse", Some("Write"), "p1");
    let open = hook(&bare, "claude", &[], &tool);
    assert_eq!(open.code, 1, "{}", open.stderr);
    assert!(open.stdout.is_empty());
    assert!(
        open.stderr
            .contains("no checkpoint was taken before Write in session sess-1"),
        "{}",
        open.stderr
    );
    let closed = hook(&bare, "claude", &["--fail-closed"], &tool);
    assert_eq!(closed.code, 2, "{}", closed.stderr);
    assert!(closed.stderr.contains("blocked Write"), "{}", closed.stderr);
    // A prompt is never blocked.
    let prompt = hook(
        &bare,
        "claude",
        &["--fail-closed"],
        &claude_event(&bare, "UserPromptSubmit", None, "p1"),
    );
    assert_eq!(prompt.code, 1, "{}", prompt.stderr);
    // A prompt serde cannot take whole (a lone surrogate, as JSON.stringify writes broken
    // text) is still a prompt, and still never blocked.
    let surrogate = format!(
        r#"{{"session_id":"sess-1","cwd":{:?},"hook_event_name":"UserPromptSubmit","prompt":"hi \ud83d"}}"#,
        bare.root.to_str().expect("utf-8")
    );
    assert_eq!(hook(&bare, "claude", &["--fail-closed"], &surrogate).code, 1);
    // Broken prompt events (no session id, cut short, trailing bytes) are still prompts.
    for broken in [
        r#"{"hook_event_name":"UserPromptSubmit","prompt":"x"}"#.to_owned(),
        r#"{"session_id":"s","hook_event_name":"UserPromptSubmit","prompt":"x"#.to_owned(),
        r#"{"session_id":"s","hook_event_name":"UserPromptSubmit"} x"#.to_owned(),
    ] {
        let run = hook(&bare, "claude", &["--fail-closed"], &broken);
        assert_eq!(run.code, 1, "{broken}: {}", run.stderr);
    }
    // A directory the agent names that is not there is not swapped for another one.
    let gone = claude_event(&bare, "PreToolUse", Some("Write"), "p1")
        .replace(bare.root.to_str().expect("utf-8"), "/nonexistent/ckpt-test-dir");
    let run = hook(&bare, "claude", &["--fail-closed"], &gone);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("/nonexistent/ckpt-test-dir"), "{}", run.stderr);
    // An event ckpt cannot read: blocked only when failing closed.
    assert_eq!(hook(&bare, "claude", &[], "{not json").code, 1);
    assert_eq!(hook(&bare, "claude", &["--fail-closed"], "{not json").code, 2);
    let control = json!({"session_id": "a\nb", "hook_event_name": "PreToolUse", "tool_name": "Write"}).to_string();
    let refused = hook(&bare, "claude", &[], &control);
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("session"), "{}", refused.stderr);
    // A hook line this ckpt does not understand warns; exit 2 would block every tool.
    let unknown = hook(&bare, "claude", &["--no-such-option"], &tool);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    let unknown_agent = hook(&bare, "no-such-agent", &[], &tool);
    assert_eq!(unknown_agent.code, 1, "{}", unknown_agent.stderr);
}

#[test]
fn a_turn_that_starts_on_an_unchanged_tree_still_has_its_own_first_checkpoint() {
    let repo = TestRepo::new();
    let event = |session: &str, name: &str, tool: Option<&str>, prompt: &str| {
        let mut event = json!({"session_id": session, "cwd": repo.root, "hook_event_name": name, "prompt_id": prompt});
        if let Some(tool) = tool {
            event["tool_name"] = json!(tool);
        }
        let run = hook(&repo, "claude", &[], &event.to_string());
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
    };
    // Session A ends on a state a checkpoint of its own already holds.
    event("A", "UserPromptSubmit", None, "a1");
    event("A", "PreToolUse", Some("Edit"), "a1");
    repo.write("notes.txt", b"A's edit\n");
    event("A", "PreToolUse", Some("Bash"), "a1");
    // Session B starts on that same tree: its turn 1 still gets a checkpoint of its own.
    event("B", "UserPromptSubmit", None, "b1");
    event("B", "PreToolUse", Some("Edit"), "b1");
    repo.write("notes.txt", b"B1\n");
    event("B", "PreToolUse", Some("Edit"), "b1");
    repo.write("notes.txt", b"B2\n");
    event("B", "PreToolUse", Some("Bash"), "b1");
    // B's turn 2 begins on the state 1.3 holds, with a command that changes nothing (tests,
    // say), then edits.
    event("B", "UserPromptSubmit", None, "b2");
    event("B", "PreToolUse", Some("Bash"), "b2");
    event("B", "PreToolUse", Some("Edit"), "b2");
    repo.write("notes.txt", b"B3\n");
    let listed = repo.ckpt_json(&["list", "--session", "B"], 0);
    let turns: Vec<String> = listed
        .json
        .iter()
        .map(|r| format!("{}.{} {}", r["turn"], r["step"], r["files"]))
        .collect();
    // 2.2 found nothing changed since 2.1: no checkpoint of its own, and none is needed.
    assert_eq!(turns, ["1.1 0", "1.2 1", "1.3 1", "2.1 0"], "{:?}", listed.json);
    let restore = |target: &str| {
        repo.ckpt_json(&["restore", target, "--session", "B", "--yes"], 0);
        String::from_utf8(repo.read("notes.txt")).expect("text")
    };
    assert_eq!(restore("turn:1"), "A's edit\n", "turn:1 is the state before B's turn 1");
    assert_eq!(restore("turn:2"), "B2\n", "turn:2 is the state before B's turn 2");
    assert_eq!(restore("turn:2.2"), "B2\n");
    assert_eq!(restore("turn:1.2"), "B1\n");
}

#[test]
fn integrate_keeps_a_private_settings_file_private_and_refuses_a_read_only_one() {
    use std::os::unix::fs::PermissionsExt;
    let repo = TestRepo::new();
    repo.write(".claude/settings.local.json", b"{\"env\": {\"TOKEN\": \"secret\"}}\n");
    let settings = repo.path(".claude/settings.local.json");
    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let before = repo.fingerprint();
    let added = repo.ckpt_json(&["integrate", "claude", "--yes"], 0);
    let record = added.one("integrate");
    assert_eq!(record["action"], "added");
    let backup = std::path::PathBuf::from(record["backup"].as_str().expect("a backup"));
    // The backup is ckpt's, inside the git directory: never in `git status` or a commit.
    assert!(
        backup.starts_with(repo.common_dir().join("ckpt")),
        "{}",
        backup.display()
    );
    assert_eq!(
        std::fs::read(&backup).expect("backup"),
        b"{\"env\": {\"TOKEN\": \"secret\"}}\n"
    );
    let mode = |path: &std::path::Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    assert_eq!((mode(&backup), mode(&settings)), (0o600, 0o600));
    let status = repo.git(&["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains("ckpt-backup"), "{status}");
    assert!(repo.path(".claude/commands/ckpt.md").exists());
    assert_eq!(repo.fingerprint().without_status(), before.without_status());
    // A file someone made read-only is not replaced behind their back.
    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let refused = repo.ckpt_json(&["integrate", "claude", "--remove", "--yes"], 4);
    assert!(refused.stderr.contains("read-only"), "{}", refused.stderr);
    assert!(std::fs::read_to_string(&settings)
        .expect("read")
        .contains(" hook claude"));
}

#[test]
fn ckpt_does_not_checkpoint_its_own_copy_store() {
    let repo = TestRepo::bare_dir();
    repo.write("notes.txt", b"a plain directory\n");
    repo.ckpt_json(&["snapshot"], 0);
    let store = repo.home.join(".local/share/ckpt");
    assert!(store.is_dir(), "the copy store is where the test expects it");
    let run = repo.ckpt_in(&store, &["--json".as_ref(), "snapshot".as_ref()]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("inside ckpt's own copy store"), "{}", run.stderr);
}

#[test]
fn snapshot_opens_turn_gives_each_turn_its_own_first_checkpoint() {
    let repo = TestRepo::new();
    let snap = |turn: &str, step: &str, extra: &[&str]| {
        let mut args = vec!["snapshot", "--session", "s", "--turn", turn, "--step", step];
        args.extend_from_slice(extra);
        repo.ckpt_json(&args, 0).one("snapshot").clone()
    };
    let first = snap("1", "1", &[]);
    assert_eq!(first["created"], true);
    // Without --opens-turn an unchanged tree is the earlier turn's checkpoint.
    assert_eq!(snap("2", "1", &[])["created"], false);
    let opened = snap("2", "1", &["--opens-turn"]);
    assert_eq!(
        (&opened["created"], &opened["files"], &opened["bytes"]),
        (&json!(true), &json!(0), &json!(0))
    );
    assert_ne!(opened["id"], first["id"]);
    let tree = |id: &serde_json::Value| repo.git(&["rev-parse", &format!("{}^{{tree}}", id.as_str().expect("id"))]);
    assert_eq!(tree(&opened["id"]), tree(&first["id"]));
    // Once the turn has one, later unchanged steps make none.
    assert_eq!(snap("2", "2", &["--opens-turn"])["id"], opened["id"]);
    assert_eq!(snap("2", "2", &["--opens-turn"])["created"], false);
    // --opens-turn needs --turn.
    repo.ckpt_json(&["snapshot", "--opens-turn"], 2);
}

#[test]
fn a_tool_call_announced_twice_is_checkpointed_once_even_between_other_sessions() {
    let repo = TestRepo::new();
    let call = |session: &str, name: &str, prompt: &str, id: &str| {
        let event = json!({"session_id": session, "cwd": repo.root, "hook_event_name": name,
            "prompt_id": prompt, "tool_name": "Edit", "tool_use_id": id});
        let run = hook(&repo, "claude", &[], &event.to_string());
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
    };
    call("A", "UserPromptSubmit", "a1", "");
    call("A", "PreToolUse", "a1", "u1");
    // Another session's checkpoint lands between the two announcements of A's call.
    repo.write("b.txt", b"B\n");
    call("B", "PreToolUse", "b1", "v1");
    call("A", "PreToolUse", "a1", "u1");
    // Even after a change, the repeated announcement takes nothing under 1.1.
    repo.write("notes.txt", b"later\n");
    call("A", "PreToolUse", "a1", "u1");
    call("A", "PreToolUse", "a1", "u2");
    let listed = repo.ckpt_json(&["list", "--session", "A"], 0);
    let labels: Vec<String> = listed
        .json
        .iter()
        .map(|r| format!("{}.{}", r["turn"], r["step"]))
        .collect();
    assert_eq!(labels, ["1.1", "1.2"], "{:?}", listed.json);
}

#[test]
fn integrate_never_writes_through_a_link_in_the_project() {
    let repo = TestRepo::new();
    let outside = repo.home.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(outside.join("settings.local.json"), b"{}\n").expect("write");
    // A cloned repository may carry `.claude` as a link to anywhere.
    repo.symlink(&outside, ".claude");
    let refused = repo.ckpt_json(&["integrate", "claude", "--yes"], 4);
    assert!(refused.stderr.contains("symbolic link"), "{}", refused.stderr);
    assert_eq!(
        std::fs::read(outside.join("settings.local.json")).expect("read"),
        b"{}\n"
    );
    assert!(!outside.join("commands").exists());
    // So is a link in place of the /ckpt command's directory.
    std::fs::remove_file(repo.path(".claude")).expect("unlink");
    std::fs::create_dir_all(repo.path(".claude")).expect("mkdir");
    repo.symlink(&outside, ".claude/commands");
    repo.ckpt_json(&["integrate", "claude", "--yes"], 4);
    assert!(!repo.path(".claude/settings.local.json").exists());
    assert!(!outside.join("ckpt.md").exists());
}

#[test]
fn every_call_of_a_long_turn_announced_twice_is_one_step() {
    let repo = TestRepo::new();
    let announce = |prompt: &str, id: &str| {
        let event = json!({"session_id": "sess-1", "cwd": repo.root, "hook_event_name": "PreToolUse",
            "prompt_id": prompt, "tool_name": "Edit", "tool_use_id": id});
        let run = hook(&repo, "claude", &[], &event.to_string());
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{id}: {}", run.stderr);
    };
    // ckpt in both the user's and the project's settings: every call comes twice, and the
    // second announcements may trail the first by the whole burst.
    for n in 1..=20 {
        announce("p1", &format!("c{n}"));
    }
    repo.write("notes.txt", b"changed by the burst\n");
    for n in 1..=20 {
        announce("p1", &format!("c{n}"));
    }
    // Nothing new ran: the repeats took no checkpoint, and the next call is step 21.
    repo.write("notes.txt", b"changed by c21\n");
    announce("p1", "c21");
    assert_eq!(labels(&repo), ["1.1 Edit auto", "1.21 Edit auto"]);
    // A new turn counts from 1 again, and what is remembered of the one before stays bounded.
    repo.write("notes.txt", b"turn two\n");
    for n in 1..=20 {
        announce("p2", &format!("d{n}"));
    }
    assert_eq!(labels(&repo).last().map(String::as_str), Some("2.1 Edit auto"));
    let positions = std::fs::read_dir(repo.common_dir().join("ckpt"))
        .expect("state dirs")
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("hooks/positions.json")).ok())
        .next()
        .expect("positions.json");
    let positions: serde_json::Value = serde_json::from_slice(&positions).expect("json");
    let calls = positions["sessions"]["claude:sess-1"]["calls"]
        .as_array()
        .expect("calls");
    assert!(calls.len() <= 16 + 20, "{} call ids remembered", calls.len());
}

#[test]
fn an_event_without_a_usable_cwd_is_refused_and_no_other_directory_is_checkpointed() {
    let repo = TestRepo::new();
    repo.write("notes.txt", b"the agent's project\n");
    // Agents start hooks wherever they like: here, a plain directory beside the repository.
    let elsewhere = repo.home.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join("big.bin"), b"not the agent's\n").expect("write");
    let write = |cwd: serde_json::Value| {
        json!({"session_id": "sess-1", "cwd": cwd, "hook_event_name": "PreToolUse",
            "prompt_id": "p1", "tool_name": "Write", "tool_use_id": "u1"})
    };
    let mut missing = write(json!(null));
    missing.as_object_mut().expect("object").remove("cwd");
    let prompt = json!({"session_id": "sess-1", "cwd": 5, "hook_event_name": "UserPromptSubmit", "prompt_id": "p1"});
    for (event, extra, code, says) in [
        (
            missing.clone(),
            &[][..],
            1,
            "the event has no \"cwd\" and CLAUDE_PROJECT_DIR is not set",
        ),
        (write(json!(5)), &[], 1, "\"cwd\" is a number, not text"),
        (write(json!(["/"])), &[], 1, "\"cwd\" is an array, not text"),
        (
            write(json!("relative/dir")),
            &[],
            1,
            "relative/dir as the workspace, a relative path",
        ),
        // Failing closed, a mutating call is blocked as for any other failure; a prompt never.
        (write(json!(5)), &["--fail-closed"], 2, "\"cwd\" is a number"),
        (prompt, &["--fail-closed"], 1, "\"cwd\" is a number"),
    ] {
        let run = hook_in(&repo, &elsewhere, &[], "claude", extra, &event.to_string());
        assert_eq!((run.code, run.stdout.as_str()), (code, ""), "{event}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{event}: {}", run.stderr);
    }
    // A lone surrogate in the session id is named as what it is, not as a missing id.
    let surrogate = format!(
        r#"{{"session_id":"s\ud800","cwd":{:?},"hook_event_name":"PreToolUse","tool_name":"Write"}}"#,
        repo.root.to_str().expect("utf-8")
    );
    let run = hook_in(&repo, &elsewhere, &[], "claude", &[], &surrogate);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("\"session_id\" is not valid text: it holds a lone UTF-16 surrogate"),
        "{}",
        run.stderr
    );
    // Nothing was checkpointed: not the directory the hook ran in (no copy store, so no watch
    // daemon either), not the repository.
    assert!(!repo.home.join(".local/share/ckpt").exists(), "a copy store was made");
    assert!(repo.ckpt_refs().is_empty(), "{:?}", repo.ckpt_refs());
    // Where the agent names its project directory, the event needs no cwd.
    let run = hook_in(
        &repo,
        &elsewhere,
        &[("CLAUDE_PROJECT_DIR", &repo.root)],
        "claude",
        &[],
        &missing.to_string(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(labels(&repo), ["1.1 Write auto"]);
    assert!(!repo.home.join(".local/share/ckpt").exists());
}

/// The settings files `integrate` must give back byte for byte: numbers a parse and print would
/// round, compact objects, tabs, CRLF, escapes, with and without a final line end, a user's own
/// hooks in the lists ckpt adds to.
const AWKWARD_SETTINGS: &[&str] = &[
    "{\"big\": 123456789012345678901234567890, \"zero\": -0, \"hundred\": 1e2, \"tiny\": 1.5e-400, \"name\": \"caf\\u00e9\"}\n",
    "{\r\n\t\"model\": \"opus\",\r\n\t\"permissions\": {\"allow\": [\"Bash(ls:*)\"], \"deny\": []},\r\n\t\"hooks\": {\r\n\t\t\"PreToolUse\": [\r\n\t\t\t{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"guard.sh\", \"timeout\": 1e2}]}\r\n\t\t],\r\n\t\t\"Stop\": []\r\n\t},\r\n\t\"big\": 123456789012345678901234567890\r\n}",
    "{\n    \"env\": {\"A\": \"\\u00e9\\n\"},\n    \"hooks\": {\n        \"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"done.sh\"}]}]\n    },\n    \"n\": -0\n}\n",
    "{\"hooks\":{\"BeforeTool\":[{\"matcher\":\"x\",\"hooks\":[]}],\"PreToolUse\":[{\"matcher\":\"y\",\"hooks\":[]}]},\"z\":1E+2}",
    "{}\n",
    "{}",
    // Blank files: an empty table to the agent, given back as they were, not as `{}`.
    "",
    "\n",
    " \n\t\n",
];

#[test]
fn integrate_then_remove_gives_every_settings_file_back_byte_for_byte() {
    let repo = TestRepo::new();
    for (agent, rel) in [
        ("claude", ".claude/settings.local.json"),
        ("codex", ".codex/hooks.json"),
        ("gemini", ".gemini/settings.json"),
    ] {
        for original in AWKWARD_SETTINGS {
            repo.write(rel, original.as_bytes());
            let added = repo.ckpt_json(&["integrate", agent, "--yes"], 0);
            assert_eq!(added.one("integrate")["action"], "added", "{agent} {original:?}");
            let with = repo.read(rel);
            let text = String::from_utf8(with.clone()).expect("utf-8");
            assert!(text.contains(&format!(" hook {agent}")), "{text}");
            serde_json::from_str::<serde_json::Value>(&text).expect("still JSON");
            // Every number is as the user wrote it.
            for number in [
                "123456789012345678901234567890",
                "1.5e-400",
                "1e2",
                "-0",
                "1E+2",
                "\\u00e9",
            ] {
                assert_eq!(
                    text.matches(number).count(),
                    original.matches(number).count(),
                    "{number} in {text}"
                );
            }
            // CRLF stays CRLF; what ckpt wrote is indented as the file is.
            if original.contains("\r\n") {
                assert!(!text.replace("\r\n", "").contains('\n'), "{text:?}");
                assert!(text.contains("\r\n\t\t\t{\r\n\t\t\t\t\"matcher\""), "{text:?}");
            }
            let again = repo.ckpt_json(&["integrate", agent, "--yes"], 0);
            assert_eq!(again.one("integrate")["action"], "unchanged", "{agent} {text}");
            assert_eq!(repo.read(rel), with, "integrate twice changes nothing");
            repo.ckpt_json(&["integrate", agent, "--remove", "--yes"], 0);
            assert_eq!(
                String::from_utf8(repo.read(rel)).expect("utf-8"),
                *original,
                "{agent}: integrate then --remove gives the file back"
            );
        }
    }
}

/// A blank settings file comes back blank, and one ckpt created goes, even where an older
/// backup of a blank file lies around.
#[test]
fn a_blank_settings_file_comes_back_blank_and_one_ckpt_made_goes() {
    let repo = TestRepo::new();
    let rel = ".claude/settings.local.json";
    repo.write(rel, b"\n");
    repo.ckpt_json(&["integrate", "claude", "--yes"], 0);
    repo.ckpt_json(&["integrate", "claude", "--remove", "--yes"], 0);
    assert_eq!(repo.read(rel), b"\n");
    // Integrated again, then the file removed by hand: the newest backup is of a blank file.
    repo.ckpt_json(&["integrate", "claude", "--yes"], 0);
    repo.remove(rel);
    repo.ckpt_json(&["integrate", "claude", "--yes"], 0);
    repo.ckpt_json(&["integrate", "claude", "--remove", "--yes"], 0);
    assert!(!repo.path(rel).exists(), "the file ckpt created is left behind");
}

#[test]
fn integrate_replaces_an_older_entry_where_it_stood_and_touches_nothing_else() {
    let repo = TestRepo::new();
    let old = |suffix: &str| {
        format!("{{\"hooks\": [{{\"type\": \"command\", \"command\": \"'/old place/ckpt' hook claude{suffix}\"}}]}}")
    };
    let head = "{\"hooks\": {\"PreToolUse\": [{\"matcher\": \"A\", \"hooks\": [{\"type\": \"command\", \"command\": \"a.sh\", \"timeout\": 1e2}]}, ";
    let mid = ", {\"matcher\": \"B\", \"hooks\": [{\"type\": \"command\", \"command\": \"b.sh\"}]}],\n  \"UserPromptSubmit\": [";
    let tail = "]}, \"n\": -0}\n";
    let original = format!("{head}{}{mid}{}{tail}", old(" --no-watch"), old(""));
    repo.write(".claude/settings.local.json", original.as_bytes());
    let updated = repo.ckpt_json(&["integrate", "claude", "--yes"], 0);
    assert_eq!(updated.one("integrate")["action"], "updated");
    let text = String::from_utf8(repo.read(".claude/settings.local.json")).expect("utf-8");
    assert!(text.starts_with(head) && text.ends_with(tail), "{text}");
    let (tool, prompt) = text[head.len()..text.len() - tail.len()]
        .split_once(mid)
        .expect("everything between the two old entries as it was");
    for (group, suffix) in [(tool, " --no-watch"), (prompt, "")] {
        assert!(!group.contains('\n'), "a one-line group stays on one line: {group}");
        let group: serde_json::Value = serde_json::from_str(group).expect("one group where the old one stood");
        let command = group["hooks"][0]["command"].as_str().expect("command");
        assert!(
            command.ends_with(&format!(" hook claude{suffix}")) && !command.contains("old place"),
            "{command}"
        );
    }
}

#[test]
fn integrate_adds_nothing_git_status_shows_and_remove_takes_every_trace_back() {
    let repo = TestRepo::new();
    let status = |dir: &std::path::Path| repo.git_in(dir, &["status", "--porcelain", "-uall"]);
    let exclude = repo.common_dir().join("info").join("exclude");
    let in_dir = |dir: &std::path::Path, args: &[&str]| {
        let mut full = vec![std::ffi::OsStr::new("--json")];
        full.extend(args.iter().map(std::ffi::OsStr::new));
        let run = repo.ckpt_in(dir, &full);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    };
    // As git init wrote it, with no final line end, and none at all.
    let init = std::fs::read(&exclude).ok();
    for exclude_text in [init.clone(), Some(b"# mine\n*.tmp".to_vec()), None] {
        match &exclude_text {
            Some(text) => std::fs::write(&exclude, text).expect("write"),
            None => std::fs::remove_file(&exclude).expect("rm"),
        }
        for agent in ["claude", "codex", "gemini"] {
            let before = status(&repo.root);
            in_dir(&repo.root, &["integrate", agent, "--yes"]);
            assert_eq!(status(&repo.root), before, "{agent}: git status shows nothing new");
            let recorded = std::fs::read(&exclude).expect("the records");
            in_dir(&repo.root, &["integrate", agent, "--yes"]);
            assert_eq!(std::fs::read(&exclude).expect("read"), recorded, "twice is once");
            in_dir(&repo.root, &["integrate", agent, "--remove", "--yes"]);
            assert_eq!(status(&repo.root), before, "{agent}");
            assert_eq!(
                std::fs::read(&exclude).ok(),
                exclude_text,
                "{agent}: the exclude file as it was"
            );
            for dir in [".claude", ".codex", ".gemini"] {
                assert!(!repo.path(dir).exists(), "{agent}: {dir} was ckpt's and went");
            }
        }
    }
    std::fs::write(&exclude, init.clone().unwrap_or_default()).expect("write");
    assert_eq!(
        repo.read(".gitignore"),
        b"target/\n*.log\n",
        "the team's .gitignore is never touched"
    );

    // The user's own settings file: shown before, shown after, kept as it was; only what ckpt
    // created goes, and no directory ckpt did not make.
    repo.write(".claude/settings.local.json", b"{\"model\": \"x\"}\n");
    let before = status(&repo.root);
    assert!(before.contains("?? .claude/settings.local.json"), "{before}");
    in_dir(&repo.root, &["integrate", "claude", "--yes"]);
    assert_eq!(status(&repo.root), before);
    assert!(repo.path(".claude/commands/ckpt.md").is_file());
    in_dir(&repo.root, &["integrate", "claude", "--remove", "--yes"]);
    assert_eq!(status(&repo.root), before);
    assert_eq!(repo.read(".claude/settings.local.json"), b"{\"model\": \"x\"}\n");
    assert!(
        !repo.path(".claude/commands").exists(),
        "no empty commands/ left behind"
    );
    assert_eq!(std::fs::read(&exclude).ok(), init);
    repo.remove(".claude");

    // A linked worktree shares the common exclude file; each worktree's records are its own.
    let linked = repo.root.parent().expect("parent").join("linked");
    repo.git(&["worktree", "add", "-q", "-b", "side", linked.to_str().expect("utf-8")]);
    let (main_before, linked_before) = (status(&repo.root), status(&linked));
    in_dir(&repo.root, &["integrate", "claude", "--yes"]);
    in_dir(&linked, &["integrate", "claude", "--yes"]);
    assert!(linked.join(".claude/commands/ckpt.md").is_file());
    assert_eq!(
        (status(&repo.root), status(&linked)),
        (main_before.clone(), linked_before.clone())
    );
    in_dir(&linked, &["integrate", "claude", "--remove", "--yes"]);
    assert!(!linked.join(".claude").exists());
    assert_eq!(
        status(&repo.root),
        main_before,
        "the main worktree's files stay out of git status"
    );
    in_dir(&repo.root, &["integrate", "claude", "--remove", "--yes"]);
    assert_eq!((status(&repo.root), status(&linked)), (main_before, linked_before));
    assert_eq!(std::fs::read(&exclude).ok(), init);

    // An exclude file that is a link is never written through: nothing is.
    let elsewhere = repo.home.join("exclude-elsewhere");
    std::fs::write(&elsewhere, b"# not the repository's\n").expect("write");
    std::fs::remove_file(&exclude).expect("rm");
    std::os::unix::fs::symlink(&elsewhere, &exclude).expect("symlink");
    let refused = repo.ckpt_json(&["integrate", "claude", "--yes"], 4);
    assert!(refused.stderr.contains("symbolic link"), "{}", refused.stderr);
    assert_eq!(std::fs::read(&elsewhere).expect("read"), b"# not the repository's\n");
    assert!(!repo.path(".claude").exists());
}
