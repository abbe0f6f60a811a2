//! The harness adapter's own tests (node's test runner, a fake harness context) run against this
//! build of the ckpt binary, so `cargo test` covers plugin/ too.

#[test]
fn plugin_tests_pass_against_this_binary() {
    let plugin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin");
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
