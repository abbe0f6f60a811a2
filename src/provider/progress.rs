//! Progress for long snapshots and restores: an indicatif bar on stderr that appears only when
//! stderr is a terminal, JSON mode is off, and the work has already taken about a second — so
//! quick commands and machine callers never see it. Counting is lock-free from any thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
struct Shared {
    done: AtomicU64,
    total: AtomicU64,
    finished: AtomicBool,
}

/// A progress counter; drawing (if enabled) happens on a helper thread.
#[derive(Clone, Default)]
pub struct Progress {
    shared: Arc<Shared>,
    enabled: bool,
}

impl Progress {
    /// A counter that never draws.
    pub fn hidden() -> Self {
        Progress::default()
    }

    /// A counter that, when `enabled`, draws a bar for each phase that has taken a second.
    pub fn terminal(enabled: bool) -> Self {
        Progress {
            shared: Arc::new(Shared::default()),
            enabled,
        }
    }

    /// Starts a phase of `total` units; the bar (if any) shows `label`.
    pub fn phase(&self, label: &'static str, total: u64) -> PhaseGuard {
        self.shared.done.store(0, Ordering::Relaxed);
        self.shared.total.store(total, Ordering::Relaxed);
        self.shared.finished.store(false, Ordering::Relaxed);
        let handle = self.enabled.then(|| {
            let shared = Arc::clone(&self.shared);
            std::thread::spawn(move || draw(shared, label))
        });
        PhaseGuard {
            shared: Arc::clone(&self.shared),
            handle,
        }
    }

    /// Adds `n` units to the current phase, for work discovered while it runs.
    pub fn grow(&self, n: u64) {
        self.shared.total.fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self, n: u64) {
        self.shared.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// Ends the phase (and clears its bar) when dropped.
pub struct PhaseGuard {
    shared: Arc<Shared>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        self.shared.finished.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            handle.join().ok();
        }
    }
}

fn draw(shared: Arc<Shared>, label: &'static str) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        if shared.finished.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let bar = indicatif::ProgressBar::new(shared.total.load(Ordering::Relaxed));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(label);
    while !shared.finished.load(Ordering::Relaxed) {
        bar.set_length(shared.total.load(Ordering::Relaxed));
        bar.set_position(shared.done.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
}
