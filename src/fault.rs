//! Test-only fault injection: `CKPT_FAULT=<point>` makes the process abort at that named point, so
//! tests can prove that an interrupted snapshot or restore leaves nothing half-done, and
//! `CKPT_PAUSE=<point>` holds it there while a test changes files underneath. Compiled to
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

/// Whether `CKPT_FAULT` names this point, for a fault the caller then makes up (an I/O error
/// where the disk gives none). Always `false` without `fault-injection`.
#[inline]
pub fn failing(name: &str) -> bool {
    #[cfg(feature = "fault-injection")]
    return std::env::var("CKPT_FAULT").is_ok_and(|v| v == name);
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = name;
        false
    }
}

/// [`failing`], for one subject only: when `CKPT_FAULT_AT` is set, only a subject (a path, say)
/// containing it fails.
#[inline]
pub fn failing_at(name: &str, subject: &str) -> bool {
    #[cfg(feature = "fault-injection")]
    return failing(name) && std::env::var("CKPT_FAULT_AT").map_or(true, |at| subject.contains(&at));
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (name, subject);
        false
    }
}

/// With `CKPT_PAUSE=<point>`, stops here until the file named by `CKPT_PAUSE_RESUME` exists
/// (at most a minute), after saying so on stderr: tests act at exactly this moment, e.g. write
/// a file between a restore's check and its replace. Only with `fault-injection`.
#[inline]
pub fn pause(name: &str) {
    #[cfg(feature = "fault-injection")]
    if std::env::var("CKPT_PAUSE").is_ok_and(|v| v == name) {
        if let Some(resume) = std::env::var_os("CKPT_PAUSE_RESUME") {
            let resume = std::path::PathBuf::from(resume);
            if !resume.exists() {
                eprintln!("ckpt: paused at {name}");
                let start = std::time::Instant::now();
                while !resume.exists() && start.elapsed() < std::time::Duration::from_secs(60) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = name;
}
