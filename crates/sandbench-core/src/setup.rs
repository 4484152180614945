//! Progress of long set-up steps (image builds, guest builds). The engine
//! says what happens; a front end decides how to show it (spinners on a
//! terminal, plain lines in CI logs, nothing at all in tests). Tiers never
//! print.

use std::sync::Arc;

/// Where set-up reports its progress.
pub trait Progress: Send + Sync {
    /// A line worth keeping: a step done, a fact found, a decision taken.
    fn line(&self, text: &str);
    /// A step that takes a while starts; `total` is its size in bytes when
    /// known (then `Step::advance` moves a bar).
    fn step(&self, text: &str, total: Option<u64>) -> Arc<dyn Step>;
}

/// One step in progress.
pub trait Step: Send + Sync {
    /// What the step is doing now (tool output, a phase).
    fn message(&self, text: &str);
    /// `bytes` more of `total` are done.
    fn advance(&self, bytes: u64);
    /// The step ended; its live display goes away. Say the result with
    /// `Progress::line`.
    fn finish(&self);
    /// Seconds since the step started.
    fn elapsed_secs(&self) -> f64;
}

/// Reports nothing: tests and front ends that show set-up another way.
pub struct Quiet;

struct QuietStep(std::time::Instant);

impl Progress for Quiet {
    fn line(&self, _: &str) {}
    fn step(&self, _: &str, _: Option<u64>) -> Arc<dyn Step> {
        Arc::new(QuietStep(std::time::Instant::now()))
    }
}

impl Step for QuietStep {
    fn message(&self, _: &str) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
    fn elapsed_secs(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}
