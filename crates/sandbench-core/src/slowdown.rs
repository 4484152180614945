//! How much slower a tier runs the same work than the host, measured, for
//! the soak (issue 21, item 11): samples declare what they do under limits
//! written for a native CPU, and a tier under software emulation (the
//! microVM on TCG) does a fraction of that work per CPU second, so a benign
//! sample met its CPU limit there and hostile ones their wall limit before
//! the violation they declare. A tier measured at least [`SCALE_FROM`] times
//! slower gets its CPU and wall limits multiplied by its factor; faster ones
//! keep the limits as written.
//!
//! The measure: one fixed piece of CPU-bound Python, run by the host's own
//! interpreter (its own CPU time) and through the tier (CPU time from
//! the tier's own counter, as every report has it), alternately, a few
//! times; the factor is the ratio of the medians. Measured under the same
//! load the soak then runs in, and shown in its report.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::spec::{Language, Limits, RunSpec};
use crate::tier::Tier;

/// The work: ~0.2-0.4 s of CPU for CPython on one core here, long enough
/// that interpreter start-up is a small part of it.
const WORK: &str = "n = 0\nfor i in range(3000000):\n    n += i * i\nprint(n > 0)\n";
/// Host and tier runs, alternately.
const ROUNDS: usize = 3;
/// Below this the difference is noise and the limits stay as written.
pub const SCALE_FROM: f64 = 1.5;

/// One tier's measurement.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Slowdown {
    /// Median CPU ms of the work on the host and through the tier.
    pub host_cpu_ms: f64,
    pub tier_cpu_ms: f64,
    /// tier / host (1.0 when it could not be measured).
    pub factor: f64,
    /// What the limits are multiplied by: the factor from [`SCALE_FROM`] up, else 1.
    pub scale: f64,
    /// Why there is no measurement, when there is none.
    pub error: Option<String>,
}

impl Slowdown {
    /// The limits a sample gets on this tier.
    pub fn scaled(&self, limits: &Limits) -> Limits {
        let mut l = limits.clone();
        if self.scale > 1.0 {
            l.cpu_time = scale(l.cpu_time, self.scale);
            l.wall_time = scale(l.wall_time, self.scale);
        }
        l
    }

    fn failed(why: String) -> Slowdown {
        Slowdown { factor: 1.0, scale: 1.0, error: Some(why), ..Default::default() }
    }
}

fn scale(d: Duration, f: f64) -> Duration {
    // Whole tenths of a second: limits read back as written.
    Duration::from_millis(((d.as_secs_f64() * f * 10.0).ceil() * 100.0) as u64)
}

/// Measure `tier` against the host. Never fails the caller: a tier that
/// could not run the work keeps its limits, and the error says why.
pub async fn measure(tier: Arc<dyn Tier>) -> Slowdown {
    let mut host = vec![];
    let mut own = vec![];
    for _ in 0..ROUNDS {
        match tokio::task::spawn_blocking(host_cpu_ms).await {
            Ok(Ok(ms)) => host.push(ms),
            Ok(Err(e)) => return Slowdown::failed(e),
            Err(e) => return Slowdown::failed(format!("host run: {e}")),
        }
        let mut spec = RunSpec::new(Language::Python, WORK);
        spec.label = "slowdown calibration".into();
        // Generous: the measure must not be cut by the limits it sets.
        spec.limits.cpu_time = Duration::from_secs(120);
        spec.limits.wall_time = Duration::from_secs(300);
        let r = crate::runner::run(tier.clone(), spec).await;
        match (r.outcome, r.usage.cpu_ms) {
            (crate::report::Outcome::Ok, Some(ms)) if r.stdout.trim() == "True" => own.push(ms as f64),
            _ => {
                return Slowdown::failed(format!(
                    "the calibration run did not complete: {}",
                    crate::sanitize::inert_line(&r.summary_line(), 200)
                ))
            }
        }
    }
    Slowdown::from_runs(&mut host, &mut own)
}

impl Slowdown {
    fn from_runs(host: &mut [f64], own: &mut [f64]) -> Slowdown {
        host.sort_by(f64::total_cmp);
        own.sort_by(f64::total_cmp);
        let (h, t) = (crate::stats::percentile(host, 0.5), crate::stats::percentile(own, 0.5));
        if h <= 0.0 || t <= 0.0 {
            return Slowdown::failed("no CPU time measured".into());
        }
        let factor = ((t / h) * 100.0).round() / 100.0;
        Slowdown {
            host_cpu_ms: h.round(),
            tier_cpu_ms: t.round(),
            factor,
            scale: if factor >= SCALE_FROM { factor } else { 1.0 },
            error: None,
        }
    }
}

/// The work under the host's own interpreter (sandbench's own process, not
/// a sandbox): the CPU time (user + system) it took, as it reports it.
fn host_cpu_ms() -> Result<f64, String> {
    let py = crate::bench::host_python();
    let code = format!("import time\nt0 = time.process_time()\n{WORK}print((time.process_time() - t0) * 1000)\n");
    let out = std::process::Command::new(&py)
        .args(["-I", "-S", "-c", &code])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {py}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), text.lines().last().map(|l| l.trim().parse::<f64>())) {
        (true, Some(Ok(ms))) => Ok(ms),
        _ => Err(format!("{py} did not run the calibration work: {}", crate::sanitize::inert_line(&text, 120))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_tiers_get_their_factor_and_fast_ones_none() {
        let s = Slowdown::from_runs(&mut [200.0, 210.0, 190.0], &mut [1900.0, 2100.0, 2000.0]);
        assert_eq!((s.factor, s.scale), (10.0, 10.0));
        let l = s.scaled(&Limits::default());
        assert_eq!((l.cpu_time, l.wall_time), (Duration::from_secs(50), Duration::from_secs(100)));
        let s = Slowdown::from_runs(&mut [200.0, 210.0, 190.0], &mut [260.0, 250.0, 240.0]);
        assert_eq!((s.factor, s.scale), (1.25, 1.0));
        assert_eq!(s.scaled(&Limits::default()).cpu_time, Limits::default().cpu_time);
        assert!(Slowdown::from_runs(&mut [0.0], &mut [5.0]).error.is_some());
    }

    #[test]
    fn the_host_measure_is_cpu_time() {
        let ms = host_cpu_ms().expect("python3 runs the work");
        assert!(ms > 10.0 && ms < 60_000.0, "{ms}");
    }
}
