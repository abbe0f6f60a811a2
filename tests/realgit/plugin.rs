//! The harness adapter's own tests (node's test runner, a fake harness context) run against this
//! build of the ckpt binary, so `cargo test` covers plugin/ too.

#[test]
fn plugin_tests_pass_against_this_binary() {
    let plugin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin");
    // The harness packages are test-only dev dependencies, pinned by the lockfile; install them
    // here when missing so `cargo test` alone runs everything on a fresh machine.
    if !plugin.join("node_modules/@deepseek-ai/cordis").is_dir() {
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&plugin)
            .status()
            .expect("npm must be installed to test plugin/");
        assert!(status.success(), "npm ci in plugin/ failed");
    }
    let out = std::process::Command::new("node")
        .args(["--test", "test/"])
        .current_dir(&plugin)
        .env("CKPT_BIN", crate::common::CKPT)
        .output()
        .expect("node must be installed to test plugin/");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "plugin tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# fail 0") && !stdout.contains("# pass 0"), "{stdout}");
}
