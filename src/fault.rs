//! Test-only fault injection: `CKPT_FAULT=<point>` makes the process abort at that named point, so
//! tests can prove that an interrupted snapshot or restore leaves nothing half-done. Compiled to
//! nothing unless the `fault-injection` feature is on.

/// Aborts the process here if `CKPT_FAULT` names this point (only with `fault-injection`).
#[inline]
pub fn point(name: &str) {
    #[cfg(feature = "fault-injection")]
    if std::env::var("CKPT_FAULT").is_ok_and(|v| v == name) {
        eprintln!("ckpt: fault injected at {name}");
        std::process::abort();
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = name;
}
