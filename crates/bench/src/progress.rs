//! A progress bar over a run's wall time (drawn only on a terminal).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Runs shorter than this get no bar.
const MIN_RUN: Duration = Duration::from_secs(3);

pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Progress {
    /// Tick a bar for `total` (if `enabled` and `total` > 3 s), labelled `what`.
    pub(crate) fn start(total: Duration, enabled: bool, what: &str) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if !enabled || total <= MIN_RUN {
            return Progress { stop, handle: None };
        }
        let ms = u64::try_from(total.as_millis()).unwrap_or(u64::MAX);
        let bar = ProgressBar::with_draw_target(Some(ms), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {percent:>3}%")
        {
            bar.set_style(style);
        }
        bar.set_message(what.to_string());
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("offrac-bench-progress".into())
            .spawn(move || {
                let t0 = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    let done = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
                    bar.set_position(done.min(ms));
                    std::thread::sleep(Duration::from_millis(200));
                }
                bar.finish_and_clear();
            })
            .ok();
        Progress { stop, handle }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
