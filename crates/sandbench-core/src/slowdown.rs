//! How much slower a tier runs the same work than the host, measured, for
//! the soak (issue 21, item 11): samples declare what they do under limits
//! written for a native CPU on a quiet machine. A tier under software
//! emulation (the microVM on TCG) does a fraction of that work per CPU
//! second, so a benign sample met its CPU limit there; and on a loaded
//! machine every program takes longer in wall time, so hostile ones met
//! their wall limit before the violation they declare. Both are measured:
//!
//! - one fixed piece of CPU-bound Python runs under the host's own
//!   interpreter (its CPU time: the work at native speed) and through the
//!   tier (the tier's CPU counter, as every report has it, and the
//!   program's running time), alternately;
//! - the CPU factor is tier CPU / host CPU (emulation), the wall factor is
//!   tier running time / host CPU (emulation and the machine's load);
//! - a factor of at least [`SCALE_FROM`] multiplies the CPU limit (CPU
//!   factor) or the wall limit (the larger of the two); below it the
//!   limits stay as written.
//!
//! Medians of the last [`KEEP`] rounds, so one outlier moves nothing; the
//! soak measures again now and then, as the machine's load changes.
//!
//! The gauntlet ([`Scaler::for_load`]) stretches the wall limit for the load
//! alone: a running time grows with it. The load factor is the tier's
//! running time for the work over the CPU it got (1.0 when nothing else
//! wanted the CPU), the highest of the last [`LOAD_KEEP`] rounds, so that a
//! burst of load stretches the wall limit at once. Its CPU limit stays as
//! written on a native CPU (a count the microVM's host bounds by the CPU
//! QEMU got does not grow with the load) and follows the CPU factor on an
//! emulated one ([`EMULATED_FROM`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{Language, Limits, RunSpec};
use crate::tier::contract::Tier;

/// The work: CPU-bound Python, sized so that interpreter start-up is a
/// small part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// ~0.2-0.4 s of CPU for CPython on one core here (the soak's factors).
    Full,
    /// A tenth of it: enough for a running time over a CPU time (the
    /// gauntlet's load factor), ~1 s on the microVM under TCG instead of ~8.
    Light,
}

impl Work {
    fn code(self) -> String {
        let n = match self {
            Work::Full => 3_000_000,
            Work::Light => 300_000,
        };
        format!("n = 0\nfor i in range({n}):\n    n += i * i\nprint(n > 0)\n")
    }
}
/// Rounds of a first measure.
pub(crate) const ROUNDS: usize = 3;
/// Rounds the factors are the median of.
pub(crate) const KEEP: usize = 5;
/// Below this the difference is noise and a limit stays as written.
pub const SCALE_FROM: f64 = 1.5;
/// Rounds the load factor is the highest of: a burst of load counts at once
/// and is forgotten a round after it went (a gauntlet measures every minute;
/// with more, a wall limit stayed stretched ×10 for minutes after the load).
pub(crate) const LOAD_KEEP: usize = 2;
/// From this CPU factor on a tier's CPU is emulated (the microVM under TCG:
/// ×20-30 here), and the gauntlet scales its CPU limit by the factor: the
/// samples are written for a native CPU or a sandbox kernel's overhead
/// (gVisor's ×2, which they declare where it matters). Under load such a
/// tier also needs more CPU for the same work (a benign control used 0.7 s
/// quiet and over 2 s at load ~10 in CI, QEMU's own count).
pub const EMULATED_FROM: f64 = 4.0;
/// The most a gauntlet scales an emulated CPU's CPU and wall limits by (the
/// microVM's CPU factor is ×20-30 under TCG here): a cell that runs to its
/// limit then costs at most this many times a native one. What a program
/// cannot finish within it on such a tier, its sample declares (`microvm=`).
pub const EMULATED_CAP: f64 = 4.0;

/// One host run and one tier run of the work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    pub host_cpu_ms: f64,
    pub tier_cpu_ms: f64,
    pub tier_wall_ms: f64,
}

/// One tier's measurement.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Slowdown {
    /// Medians: CPU ms of the work on the host, through the tier, and the
    /// tier's running time for it.
    pub host_cpu_ms: f64,
    pub tier_cpu_ms: f64,
    pub tier_wall_ms: f64,
    /// tier CPU / host CPU, and tier running time / host CPU.
    pub factor: f64,
    pub wall_factor: f64,
    /// tier running time / tier CPU: how much the load stretched the work
    /// (highest of the last rounds).
    #[serde(default)]
    pub load_factor: f64,
    /// What the CPU and the wall limit are multiplied by (1: as written).
    pub cpu_scale: f64,
    pub wall_scale: f64,
    /// Rounds measured in all.
    pub rounds: usize,
    /// Why there is no measurement, when there is none.
    pub error: Option<String>,
}

impl Slowdown {
    /// The limits a sample gets on this tier.
    pub fn scaled(&self, limits: &Limits) -> Limits {
        let mut l = limits.clone();
        if self.cpu_scale > 1.0 {
            l.cpu_time = scale(l.cpu_time, self.cpu_scale);
        }
        if self.wall_scale > 1.0 {
            l.wall_time = scale(l.wall_time, self.wall_scale);
        }
        l
    }

    /// The limits a gauntlet's cell gets on this tier: the wall limit
    /// stretched by the load; the CPU limit as written, unless the tier's
    /// CPU is emulated (see [`EMULATED_FROM`]).
    pub fn scaled_for_load(&self, limits: &Limits) -> Limits {
        let mut l = limits.clone();
        let load = if self.load_factor >= SCALE_FROM { self.load_factor } else { 1.0 };
        let emulated = self.emulated_scale();
        if load * emulated > 1.0 {
            l.wall_time = scale(l.wall_time, load * emulated);
        }
        if emulated > 1.0 {
            l.cpu_time = scale(l.cpu_time, emulated);
        }
        l
    }

    /// What a gauntlet multiplies an emulated CPU's limits by: its CPU
    /// factor, at most [`EMULATED_CAP`]; 1 for a native CPU.
    pub fn emulated_scale(&self) -> f64 {
        if self.factor >= EMULATED_FROM {
            self.factor.min(EMULATED_CAP)
        } else {
            1.0
        }
    }

    pub fn failed(why: String) -> Slowdown {
        Slowdown {
            factor: 1.0,
            wall_factor: 1.0,
            load_factor: 1.0,
            cpu_scale: 1.0,
            wall_scale: 1.0,
            error: Some(why),
            ..Default::default()
        }
    }

    /// From the last `KEEP` of `rounds` (`total` measured so far).
    pub fn from_rounds(rounds: &[Round], total: usize) -> Slowdown {
        let last = &rounds[rounds.len().saturating_sub(KEEP)..];
        let median = |f: &dyn Fn(&Round) -> f64| {
            let mut v: Vec<f64> = last.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            if v.is_empty() {
                0.0
            } else {
                crate::stats::percentile(&v, 0.5)
            }
        };
        let (h, t, w) = (median(&|r| r.host_cpu_ms), median(&|r| r.tier_cpu_ms), median(&|r| r.tier_wall_ms));
        if h <= 0.0 || t <= 0.0 || w <= 0.0 {
            return Slowdown::failed("no CPU time measured".into());
        }
        let two = |x: f64| (x * 100.0).round() / 100.0;
        // Medians of each round's ratios: rounds of different sizes of
        // work (see `Scaler::work`) mix.
        let ratio = |f: fn(&Round) -> f64| median(&|r| if r.host_cpu_ms > 0.0 { f(r) / r.host_cpu_ms } else { 0.0 });
        let (factor, wall_factor) = (two(ratio(|r| r.tier_cpu_ms)), two(ratio(|r| r.tier_wall_ms)));
        let load_factor = two(rounds[rounds.len().saturating_sub(LOAD_KEEP)..]
            .iter()
            .filter(|r| r.tier_cpu_ms > 0.0)
            .map(|r| r.tier_wall_ms / r.tier_cpu_ms)
            .fold(1.0, f64::max));
        let wall = factor.max(wall_factor);
        Slowdown {
            host_cpu_ms: h.round(),
            tier_cpu_ms: t.round(),
            tier_wall_ms: w.round(),
            factor,
            wall_factor,
            load_factor,
            cpu_scale: if factor >= SCALE_FROM { factor } else { 1.0 },
            wall_scale: if wall >= SCALE_FROM { wall } else { 1.0 },
            rounds: total,
            error: None,
        }
    }
}

/// Widen the lowest–highest CPU and wall limits (ms) a tier's runs got by
/// one run's `l` (both `[0, 0]` before the first): what a soak or gauntlet
/// shows of limits that followed the measures.
pub(crate) fn widen(cpu_ms: &mut [u64; 2], wall_ms: &mut [u64; 2], l: &Limits) {
    let widen = |r: &mut [u64; 2], v: u64| *r = if r[1] == 0 { [v, v] } else { [r[0].min(v), r[1].max(v)] };
    widen(cpu_ms, l.cpu_time.as_millis() as u64);
    widen(wall_ms, l.wall_time.as_millis() as u64);
}

/// One tier's limits kept scaled by its measured slowdown while a soak or a
/// gauntlet runs: a first measure, then one more round whenever one is due
/// (the machine's load changes, and with it the wall factor; under TCG also
/// the CPU factor, as a guest counts the time its vCPU was not scheduled as
/// its running program's). A tier whose first measure failed keeps its
/// limits as written and is not measured again.
#[derive(Debug, Clone)]
pub(crate) struct Scaler {
    base: Limits,
    rounds: Option<Vec<Round>>,
    every: Duration,
    /// Only the wall limit, by the load factor (the gauntlet).
    load_only: bool,
    /// The work of the next round.
    work: Work,
    due: Option<std::time::Instant>,
    /// The last measure.
    pub slowdown: Slowdown,
    /// The limits the next run gets.
    pub limits: Limits,
}

impl Scaler {
    /// From a first [`measure`] of a tier; `every`: how often again.
    pub(crate) fn new(base: &Limits, (slowdown, rounds): (Slowdown, Vec<Round>), every: Duration) -> Scaler {
        let ok = slowdown.error.is_none();
        let mut s = Scaler {
            limits: base.clone(),
            base: base.clone(),
            rounds: ok.then_some(rounds),
            every,
            load_only: false,
            work: Work::Full,
            due: ok.then(|| std::time::Instant::now() + every),
            slowdown,
        };
        s.limits = s.scaled();
        s
    }

    /// As [`Scaler::new`] from a measure of [`Work::Full`], for a gauntlet
    /// ([`Slowdown::scaled_for_load`]): the wall limit follows the load
    /// factor, the CPU limit stays as written unless the CPU is emulated.
    /// Where the full work took 3 s of the tier's CPU or more (an
    /// emulated CPU), later rounds do a tenth of it: still long enough that
    /// the tier's fixed costs (a container's attach, a sandbox's set-up) are
    /// a small part of its running time, which on a native tier they are not.
    pub(crate) fn for_load(base: &Limits, measured: (Slowdown, Vec<Round>), every: Duration) -> Scaler {
        let mut s = Scaler::new(base, measured, every);
        s.load_only = true;
        s.limits = s.scaled();
        if s.slowdown.tier_cpu_ms >= 3000.0 {
            s.work = Work::Light;
        }
        s
    }

    /// The work the next round should do.
    pub(crate) fn work(&self) -> Work {
        self.work
    }

    fn scaled(&self) -> Limits {
        if self.load_only {
            self.slowdown.scaled_for_load(&self.base)
        } else {
            self.slowdown.scaled(&self.base)
        }
    }

    /// A tier that is not measured: its limits as written.
    pub(crate) fn as_written(base: &Limits) -> Scaler {
        Scaler {
            base: base.clone(),
            rounds: None,
            every: Duration::MAX,
            load_only: false,
            work: Work::Full,
            due: None,
            slowdown: Slowdown {
                factor: 1.0,
                wall_factor: 1.0,
                load_factor: 1.0,
                cpu_scale: 1.0,
                wall_scale: 1.0,
                ..Default::default()
            },
            limits: base.clone(),
        }
    }

    /// A new round is due (and none is in flight).
    pub(crate) fn is_due(&self) -> bool {
        self.due.is_some_and(|at| std::time::Instant::now() >= at)
    }

    /// A round is in flight: none is due until it is in.
    pub(crate) fn measuring(&mut self) {
        self.due = None;
    }

    /// A round is in: the limits follow it. A failed round changes nothing;
    /// the next one is due as usual.
    pub(crate) fn took(&mut self, got: Result<Round, String>) {
        let Some(rs) = self.rounds.as_mut() else { return };
        if let Ok(r) = got {
            rs.push(r);
            self.slowdown = Slowdown::from_rounds(rs, rs.len());
            self.limits = self.scaled();
        }
        self.due = Some(std::time::Instant::now() + self.every);
    }
}

fn scale(d: Duration, f: f64) -> Duration {
    // Whole tenths of a second: limits read back as written.
    Duration::from_millis(((d.as_secs_f64() * f * 10.0).ceil() * 100.0) as u64)
}

/// A first measure of `tier`: `n` rounds ([`ROUNDS`] for a soak). Never
/// fails the caller: a tier that could not run the work keeps its limits,
/// and the error says why.
pub(crate) async fn measure(tier: Arc<dyn Tier>, n: usize, work: Work) -> (Slowdown, Vec<Round>) {
    let mut rounds = vec![];
    for _ in 0..n.max(1) {
        match round(tier.clone(), work).await {
            Ok(r) => rounds.push(r),
            Err(e) => return (Slowdown::failed(e), rounds),
        }
    }
    (Slowdown::from_rounds(&rounds, rounds.len()), rounds)
}

/// One round: the work on the host, then through the tier.
pub(crate) async fn round(tier: Arc<dyn Tier>, work: Work) -> Result<Round, String> {
    let host_cpu_ms = match tokio::task::spawn_blocking(move || host_cpu_ms(work)).await {
        Ok(r) => r?,
        Err(e) => return Err(format!("host run: {e}")),
    };
    let mut spec = RunSpec::new(Language::Python, work.code());
    spec.label = "slowdown calibration".into();
    // Generous: the measure must not be cut by the limits it sets.
    spec.limits.cpu_time = Duration::from_secs(120);
    spec.limits.wall_time = Duration::from_secs(300);
    let r = crate::runner::run(tier, spec).await;
    match (r.outcome, r.usage.cpu_ms) {
        (crate::report::Outcome::Ok, Some(ms)) if r.stdout.trim() == "True" => {
            Ok(Round { host_cpu_ms, tier_cpu_ms: ms as f64, tier_wall_ms: r.timings_ms.run })
        }
        _ => Err(format!(
            "the calibration run did not complete: {}",
            crate::sanitize::inert_line(&r.summary_line(), 200)
        )),
    }
}

/// The work under the host's own interpreter (sandbench's own process, not
/// a sandbox): the CPU time (user + system) it took, as it reports it.
fn host_cpu_ms(work: Work) -> Result<f64, String> {
    let py = crate::host::host_python();
    let code =
        format!("import time\nt0 = time.process_time()\n{}print((time.process_time() - t0) * 1000)\n", work.code());
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

    fn r(h: f64, t: f64, w: f64) -> Round {
        Round { host_cpu_ms: h, tier_cpu_ms: t, tier_wall_ms: w }
    }

    #[test]
    fn the_range_of_limits_starts_at_the_first_run_and_widens_both_ways() {
        let l = |cpu: u64, wall: u64| Limits {
            cpu_time: Duration::from_millis(cpu),
            wall_time: Duration::from_millis(wall),
            ..Limits::default()
        };
        let (mut cpu, mut wall) = ([0, 0], [0, 0]);
        widen(&mut cpu, &mut wall, &l(2000, 5000));
        assert_eq!((cpu, wall), ([2000, 2000], [5000, 5000]));
        widen(&mut cpu, &mut wall, &l(8000, 4000));
        widen(&mut cpu, &mut wall, &l(3000, 7500));
        assert_eq!((cpu, wall), ([2000, 8000], [4000, 7500]));
    }

    #[test]
    fn slow_tiers_get_their_factors_and_fast_ones_none() {
        // Emulated: ten times the CPU, a little more wall.
        let s =
            Slowdown::from_rounds(&[r(200.0, 1900.0, 2300.0), r(210.0, 2100.0, 2400.0), r(190.0, 2000.0, 2200.0)], 3);
        assert_eq!((s.factor, s.wall_factor, s.cpu_scale, s.wall_scale), (10.0, 11.5, 10.0, 11.5));
        let l = s.scaled(&Limits::default());
        assert_eq!((l.cpu_time, l.wall_time), (Duration::from_secs(50), Duration::from_secs(115)));
        // Native but on a loaded machine: the wall limit only.
        let s = Slowdown::from_rounds(&[r(200.0, 220.0, 900.0), r(200.0, 210.0, 800.0), r(200.0, 230.0, 1000.0)], 3);
        assert_eq!((s.cpu_scale, s.wall_scale), (1.0, 4.5));
        assert_eq!(s.scaled(&Limits::default()).cpu_time, Limits::default().cpu_time);
        // Native and quiet: as written.
        let s = Slowdown::from_rounds(&[r(200.0, 250.0, 260.0); 3], 3);
        assert_eq!((s.factor, s.cpu_scale, s.wall_scale), (1.25, 1.0, 1.0));
        assert!(Slowdown::from_rounds(&[r(0.0, 5.0, 5.0)], 1).error.is_some());
        assert!(Slowdown::from_rounds(&[], 0).error.is_some());
    }

    #[test]
    fn only_the_last_rounds_count() {
        let mut rounds = vec![r(100.0, 3000.0, 3000.0); 10];
        rounds.extend([r(100.0, 100.0, 100.0); KEEP]);
        let s = Slowdown::from_rounds(&rounds, rounds.len());
        assert_eq!((s.factor, s.rounds), (1.0, 10 + KEEP));
    }

    #[test]
    fn a_scaler_follows_its_rounds_and_a_failed_tier_keeps_its_limits() {
        let base = Limits::default();
        let first = vec![r(200.0, 1000.0, 1000.0); 3];
        let mut s = Scaler::new(&base, (Slowdown::from_rounds(&first, 3), first), Duration::ZERO);
        assert_eq!(s.limits.cpu_time, base.cpu_time * 5);
        assert!(s.is_due(), "due at once with a zero interval");
        s.measuring();
        assert!(!s.is_due(), "not due while a round is in flight");
        // The load went: the median of the last rounds comes down with it.
        for _ in 0..KEEP {
            s.measuring();
            s.took(Ok(r(200.0, 200.0, 200.0)));
        }
        assert_eq!((s.slowdown.cpu_scale, s.limits.cpu_time), (1.0, base.cpu_time));
        // A failed round changes nothing but makes the next one due.
        s.measuring();
        s.took(Err("no".into()));
        assert!(s.is_due());
        assert_eq!(s.slowdown.rounds, 3 + KEEP);
        // A tier whose first measure failed is not measured again.
        let mut f = Scaler::new(&base, (Slowdown::failed("no python".into()), vec![]), Duration::ZERO);
        assert!(!f.is_due());
        f.took(Ok(r(100.0, 900.0, 900.0)));
        assert_eq!(f.limits.cpu_time, base.cpu_time);
        assert_eq!(Scaler::as_written(&base).limits.wall_time, base.wall_time);
    }

    #[test]
    fn the_load_factor_moves_the_wall_limit_and_an_emulated_cpu_factor_the_cpu_limit() {
        let base = Limits::default();
        // A native CPU on a quiet machine: no load, limits as written.
        let quiet = vec![r(200.0, 240.0, 252.0); 3];
        let s = Slowdown::from_rounds(&quiet, 3);
        assert_eq!(s.load_factor, 1.05);
        let g = Scaler::for_load(&base, (s, quiet), Duration::ZERO);
        assert_eq!((g.limits.cpu_time, g.limits.wall_time), (base.cpu_time, base.wall_time));
        // One round under load is enough: the highest of the last rounds.
        let mut g = g;
        g.measuring();
        g.took(Ok(r(200.0, 240.0, 720.0)));
        assert_eq!(g.slowdown.load_factor, 3.0);
        assert_eq!((g.limits.cpu_time, g.limits.wall_time), (base.cpu_time, base.wall_time * 3));
        assert_eq!(g.work(), Work::Full, "a native tier's rounds stay full");
        let slow = vec![r(300.0, 7000.0, 7600.0)];
        let m = Scaler::for_load(&base, (Slowdown::from_rounds(&slow, 1), slow), Duration::ZERO);
        assert_eq!(m.work(), Work::Light, "an emulated tier's later rounds are light");
        // An emulated CPU's limit follows its CPU factor, the wall the load.
        assert_eq!((m.limits.cpu_time, m.limits.wall_time), (base.cpu_time * 4, base.wall_time * 4));
        assert_eq!(m.slowdown.emulated_scale(), EMULATED_CAP);
        // The soak's scaler moves both by the full factors.
        let full = Scaler::new(&base, (Slowdown::from_rounds(&[r(200.0, 2000.0, 2100.0)], 1), vec![]), Duration::ZERO);
        assert_eq!(full.limits.cpu_time, base.cpu_time * 10);
    }

    #[test]
    fn the_host_measure_is_cpu_time() {
        let ms = host_cpu_ms(Work::Full).expect("python3 runs the work");
        assert!(ms > 10.0 && ms < 60_000.0, "{ms}");
    }
}
