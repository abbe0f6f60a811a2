//! ckpt's hooks in the real agent programs (tests/agents/agents-e2e.mjs): Claude Code, Codex CLI
//! and Gemini CLI installed at pinned versions from the npm registry into the cache
//! target/agents-e2e (reused by later runs), each driven through two prompts against a local
//! fake model. Exit 77 means an agent is missing and the registry is unreachable: the test then
//! says SKIPPED on the terminal and in target/tmp/ckpt-agents-e2e-summary.txt, never a silent pass.

#[test]
fn hooks_checkpoint_every_mutation_in_the_real_agent_programs() {
    use std::io::Write as _;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let summary = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ckpt-agents-e2e-summary.txt");
    let started = std::time::Instant::now();
    let out = std::process::Command::new("node")
        .arg("tests/agents/agents-e2e.mjs")
        .current_dir(root)
        .env("CKPT_BIN", crate::common::CKPT)
        .output()
        .expect("node must be installed to test the agent hooks");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        let text = format!("agent hooks end-to-end test SKIPPED (did not run): {}", stderr.trim());
        // Straight to the terminal: the test harness captures only print!/eprint! output.
        let _ = writeln!(std::io::stderr(), "\n*** {text} ***\n");
        std::fs::write(&summary, format!("{text}\n")).ok();
        return;
    }
    let passed = out.status.success() && stdout.contains("all checks passed");
    let agents = stdout
        .lines()
        .find_map(|line| line.strip_prefix("agents e2e: all checks passed "))
        .map(|versions| format!("{versions} "))
        .unwrap_or_default();
    let text = format!(
        "agent hooks end-to-end test {} {agents}in {:.0} s",
        if passed { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    std::fs::write(&summary, format!("{text}\n")).ok();
    assert!(passed, "{text}:\n{stdout}\n{stderr}");
}
