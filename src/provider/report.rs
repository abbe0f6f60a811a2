//! How the engine tells a person what happens while it works, without printing: the caller
//! passes a [`Reporter`] in (the CLI's writes to stderr; a library caller's may collect or drop
//! everything), as gitoxide passes progress. Warnings here never change an answer: anything
//! that does goes into the returned report or error instead.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::progress::Progress;

/// Where the engine's notices go.
pub trait Report: Send + Sync {
    /// Something went wrong that did not stop the command and does not change its answer.
    fn warning(&self, text: &str);
    /// Another ckpt process holds `lock`; this one waits (said once, after about a second).
    fn waiting_for_lock(&self, lock: &Path);
    /// How long a phase took; only called when [`Report::wants_timings`] is true.
    fn timing(&self, phase: &str, elapsed: Duration, detail: &str);
    /// Whether phase timings are wanted at all (measuring them costs nothing; saying does).
    fn wants_timings(&self) -> bool {
        false
    }
}

/// The engine's notices and its progress counter, cheap to clone.
#[derive(Clone)]
pub struct Reporter {
    report: Arc<dyn Report>,
    progress: Progress,
}

impl Reporter {
    pub fn new(report: Arc<dyn Report>, progress: Progress) -> Self {
        Reporter { report, progress }
    }

    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    pub fn warning(&self, text: &str) {
        self.report.warning(text);
    }

    pub fn waiting_for_lock(&self, lock: &Path) {
        self.report.waiting_for_lock(lock);
    }

    /// Reports how long the phase begun at `started` took; `detail` is built only if wanted.
    pub fn timing(&self, phase: &str, started: std::time::Instant, detail: impl FnOnce() -> String) {
        if self.report.wants_timings() {
            self.report.timing(phase, started.elapsed(), &detail());
        }
    }

    /// Reports a phase measured elsewhere.
    pub fn timing_of(&self, phase: &str, elapsed: Duration) {
        if self.report.wants_timings() {
            self.report.timing(phase, elapsed, "");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Collect(Mutex<Vec<String>>);

    impl Report for Collect {
        fn warning(&self, text: &str) {
            self.0.lock().map(|mut v| v.push(format!("warning {text}"))).ok();
        }
        fn waiting_for_lock(&self, lock: &Path) {
            self.0
                .lock()
                .map(|mut v| v.push(format!("wait {}", lock.display())))
                .ok();
        }
        fn timing(&self, phase: &str, _elapsed: Duration, detail: &str) {
            self.0
                .lock()
                .map(|mut v| v.push(format!("timing {phase} {detail}")))
                .ok();
        }
    }

    #[test]
    fn timings_are_built_and_said_only_when_wanted() {
        let collect = Arc::new(Collect::default());
        let reporter = Reporter::new(collect.clone(), Progress::hidden());
        reporter.warning("w");
        reporter.waiting_for_lock(Path::new("/l"));
        reporter.timing("phase", std::time::Instant::now(), || unreachable!("not wanted"));
        let said = collect.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(said, ["warning w", "wait /l"]);
    }
}
