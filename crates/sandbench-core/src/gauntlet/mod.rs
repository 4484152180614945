//! The gauntlet: every hostile sample (and the benign ones as a control) on
//! every selected tier, judged by host-side canaries, as a matrix of
//! contained / escaped / error, plus each tier's benign latency. Compare mode
//! and the gauntlet share this engine (`run_cell`).

pub(crate) mod bound;
pub(crate) mod canary;
pub(crate) mod internet;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::report::{Outcome, RunReport, StartKind};
use crate::samples::Sample;
/// What a tier's limits are scaled by, and from which factor on.
pub use crate::slowdown::{Slowdown, EMULATED_CAP, EMULATED_FROM, SCALE_FROM};
use crate::spec::{Limits, RunSpec};
use crate::tier::contract::Tier;
use canary::Canaries;
pub use canary::Findings;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// A benign control ran to its end.
    Ran,
    /// The sandbox stopped it: by which limits, or "blocked" (denied action).
    Contained { by: String },
    /// Something got out (what the canaries saw).
    Escaped { what: Vec<String> },
    /// sandbench failed to judge the run.
    Error { why: String },
    /// The user stopped it before the end and nothing got out: no verdict
    /// about the tier, left out of the counts (the violations seen until
    /// then are still in the report).
    Cancelled,
    /// A judge stopped short (a bound it hit, named) and found nothing over
    /// a limit: not seen whole, so never a pass — counted as not contained
    /// (a hostile cell) or not run cleanly (a benign one).
    Incomplete { bounds: Vec<String> },
    /// The tier cannot start the sample's language here (no node in its
    /// image, say): not run, no verdict, left out of the counts — never a pass.
    NotAvailable { why: String },
}

impl Verdict {
    /// Cancelled or not available: says nothing about the tier.
    pub fn is_no_verdict(&self) -> bool {
        matches!(self, Verdict::Cancelled | Verdict::NotAvailable { .. })
    }

    pub fn short(&self) -> String {
        match self {
            Verdict::Ran => "ran".into(),
            Verdict::Contained { by } => format!("contained ({by})"),
            Verdict::Escaped { what } => format!("ESCAPED ({})", what.first().map(String::as_str).unwrap_or("?")),
            Verdict::Error { why } => format!("error ({})", why.chars().take(60).collect::<String>()),
            Verdict::Cancelled => "cancelled (no verdict)".into(),
            Verdict::Incomplete { bounds } => {
                format!(
                    "INCOMPLETE ({})",
                    bounds.first().map(|b| b.chars().take(60).collect::<String>()).unwrap_or_default()
                )
            }
            Verdict::NotAvailable { why } => format!("n/a ({})", why.chars().take(60).collect::<String>()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub sample: String,
    pub hostile: bool,
    pub tier: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// What the sample's header expects on this tier.
    pub expected: Option<String>,
    /// Whether the cell is what the sample declares (and nothing escaped).
    pub as_expected: bool,
    /// Why not, when it is not.
    pub mismatch: Option<String>,
    pub total_ms: f64,
    /// "cold", "warm", "snapshot" — from the tier's report.
    pub start: String,
    /// The sandbox lacked protections it promises (the report's `degraded`):
    /// such a cell is never shown as a plain pass.
    pub degraded: bool,
    pub findings: Findings,
    pub report: RunReport,
}

impl Cell {
    /// Differs from what its sample declares. A cancelled cell has no
    /// verdict: it is neither as declared nor a mismatch.
    pub fn is_mismatch(&self) -> bool {
        !self.as_expected && !self.verdict.is_no_verdict()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub tier: String,
    pub start: String,
    pub runs: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// Written inert (`gauntlet --format json`, the state dir), like the
/// report ([`crate::sanitize::inert`]): findings and verdicts quote what
/// the programs chose.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Matrix {
    pub tiers: Vec<String>,
    pub skipped_tiers: Vec<(String, String)>,
    pub samples: Vec<String>,
    pub cells: Vec<Cell>,
    pub latency: Vec<Latency>,
    /// Cells that differ from what their samples declare (cancelled ones are not).
    pub mismatches: usize,
    /// Stopped by the user before every cell ran: what is here is partial.
    #[serde(default)]
    pub cancelled: bool,
    /// Each tier's measured slowdown and the limits its cells got (empty
    /// when the limits ran as written).
    #[serde(default)]
    pub scales: Vec<TierScale>,
}

crate::sanitize::inert::inert_serialize!(Matrix);

/// What one tier's cells ran under: the plan's limits, the wall limit
/// stretched by the machine's load as measured on the tier, and an emulated
/// CPU's limits scaled by its CPU factor (see `slowdown`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TierScale {
    pub tier: String,
    /// The last measure.
    pub slowdown: Slowdown,
    /// The lowest and highest CPU and wall limits its cells got (ms).
    pub cpu_time_ms: [u64; 2],
    pub wall_time_ms: [u64; 2],
    /// The CPU and wall limits as written (ms).
    pub written_ms: [u64; 2],
}

impl TierScale {
    fn used(&mut self, l: &Limits) {
        crate::slowdown::widen(&mut self.cpu_time_ms, &mut self.wall_time_ms, l);
    }

    /// Whether any of its cells ran under other limits than as written.
    pub fn scaled(&self) -> bool {
        self.cpu_time_ms[1] > self.written_ms[0] || self.wall_time_ms[1] > self.written_ms[1]
    }
}

/// How a gauntlet runs: the limits the samples' headers are written for
/// (a native CPU on a quiet machine), how often each benign control runs,
/// and whether each tier's limits follow its measured slowdown.
#[derive(Debug, Clone)]
pub struct Plan {
    pub limits: Limits,
    pub repeat: usize,
    /// Measure each tier first (and again every [`REMEASURE`]): stretch its
    /// wall limit by the load factor, and an emulated CPU's limit by its CPU
    /// factor (see `slowdown`); off: the limits as written.
    pub scale: bool,
}

impl Plan {
    pub fn new(limits: Limits, repeat: usize) -> Plan {
        Plan { limits, repeat, scale: true }
    }
}

/// How often a tier is measured again during a gauntlet.
pub const REMEASURE: Duration = Duration::from_secs(60);

impl Matrix {
    /// Cells stopped by the cancel (no verdict).
    pub fn cancelled_cells(&self) -> usize {
        self.cells.iter().filter(|c| c.verdict == Verdict::Cancelled).count()
    }
}

/// Events of a gauntlet in progress (the workbench fills its matrix from these).
#[derive(Debug, Clone)]
pub enum GauntletEvent {
    /// A tier is being measured (before its first cell, and again now and
    /// then): its limits will follow the load and its CPU factor.
    Calibrating {
        tier: String,
    },
    CellStarted {
        sample: String,
        tier: String,
    },
    CellDone(Box<Cell>),
    Finished(Box<Matrix>),
}

/// Limits that keep a full gauntlet short while still letting every limit fire.
pub fn default_limits() -> Limits {
    Limits {
        cpu_time: Duration::from_secs(2),
        wall_time: Duration::from_secs(5),
        memory_bytes: 128 << 20,
        ..Limits::default()
    }
}

/// Judge one run of `sample` on `tier`.
pub async fn run_cell(tier: Arc<dyn Tier>, sample: &Sample, limits: &Limits) -> Cell {
    run_cell_until(tier, sample, limits, &CancellationToken::new()).await
}

/// `run_cell`, stoppable: when `stop` fires the run is cancelled (the tier
/// still cleans up) and the canaries are still read, so a cancelled cell is
/// judged on what got out before the cancel.
pub async fn run_cell_until(tier: Arc<dyn Tier>, sample: &Sample, limits: &Limits, stop: &CancellationToken) -> Cell {
    let tier_name = tier.name().to_string();
    if let Err(why) = tier.language_support(sample.language).await {
        let report = RunReport { error: Some(why.clone()), ..error_report(&tier_name, sample) };
        return Cell {
            verdict: Verdict::NotAvailable { why },
            ..judge(sample, &tier_name, report, Findings::default())
        };
    }
    // Every cell plants its own fake secrets, whatever the user's environment
    // holds: a gauntlet always tests what it claims.
    let mut canaries = match tokio::task::spawn_blocking(|| Canaries::plant(None)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return error_cell(sample, &tier_name, format!("cannot plant canaries: {e}")),
        Err(e) => return error_cell(sample, &tier_name, format!("cannot plant canaries: {e}")),
    };
    let mut spec = RunSpec::new(sample.language, sample.code.clone());
    spec.limits = limits.clone();
    spec.label = sample.name.clone();
    spec.env.extend(canaries.env());
    // The fake key sits where a real launcher's environment would hold it
    // (passed down in the spec, never set in sandbench's own environment): a
    // tier that starts a host command (a peer) and passes its environment
    // through leaks it, and the canary sees it.
    spec.launcher_env.insert(canary::SECRET_VAR.to_string(), canaries.api_key.clone());
    // A sample with a network limit meets the gauntlet's own internet.
    let mut notes = vec![];
    let mut secret_value: Option<String> = None;
    let internet = match &sample.network {
        None => None,
        Some(template) => {
            let net = match tokio::task::spawn_blocking(internet::Internet::plant).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => {
                    return error_cell(sample, &tier_name, format!("cannot plant the gauntlet's internet: {e}"))
                }
                Err(e) => return error_cell(sample, &tier_name, format!("cannot plant the gauntlet's internet: {e}")),
            };
            let limit: crate::egress::Network = match net.fill(template).parse() {
                Ok(n) => n,
                Err(e) => return error_cell(sample, &tier_name, format!("the sample's network line: {e}")),
            };
            match tier.check_network(&limit) {
                Ok(()) => {
                    spec.limits.network = limit;
                    spec.hosts = net.hosts();
                    if let Some(line) = &sample.secret {
                        match plant_secret(tier.as_ref(), &net, line, &mut spec) {
                            Ok(v) => secret_value = Some(v),
                            Err(why) => notes.push(why),
                        }
                    }
                }
                // Never widened: such a tier gets no network at all, and
                // every bypass still has to fail there.
                Err(why) => notes.push(format!("ran with network none: {why}")),
            }
            spec.env.extend(net.env());
            Some(net)
        }
    };
    canaries.start_probe();
    let logged = spec.clone();
    let handle = crate::runner::start(tier, spec);
    let canceller = handle.canceller();
    let report = {
        let report = handle.report();
        tokio::pin!(report);
        tokio::select! {
            r = &mut report => r,
            _ = stop.cancelled() => {
                canceller.cancel();
                report.await
            }
        }
    };
    crate::runlog::record(&logged, &report, None);
    let escaped_if = sample.escaped_if.clone();
    let seen = report.clone();
    // Reading the canaries blocks (listener threads, /proc scan); the set is
    // dropped (listeners closed, victim killed) in the same task.
    let findings = tokio::task::spawn_blocking(move || {
        let mut c = canaries;
        let mut f = c.check(&seen, &escaped_if);
        if let Some(net) = &internet {
            let lookups: Vec<String> = seen.details["network"]["dns_lookups"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            f.escapes.extend(net.escapes(&lookups, &c.marker));
            if let Some(v) = &secret_value {
                let (escapes, said) = net.secret_escapes(v, &lookups);
                f.escapes.extend(escapes);
                notes.extend(said);
                // The runner redacts the value from everything it passes
                // on: a count here means the program got hold of it.
                let redacted: u64 = seen.secrets.iter().map(|s| s.redacted).sum();
                if redacted > 0 {
                    f.escapes.push(format!(
                        "the secret's value reached the sandbox ({redacted} form(s) redacted from its output)"
                    ));
                }
                if serde_json::to_string(&seen).is_ok_and(|j| j.contains(v.as_str())) {
                    f.escapes.push("the secret's value is in the run's report".into());
                }
            }
        }
        f.notes = notes;
        f
    })
    .await
    .unwrap_or_else(|e| Findings { escapes: vec![format!("the canary check failed: {e}")], ..Default::default() });
    judge(sample, &tier_name, report, findings)
}

/// Give the run the sample's secret (`NAME@HOST`): a fresh random value,
/// known only to sandbench, bound to the internet's host (whose CA the
/// proxy trusts for this run). `Err` (a note) when the tier takes no
/// secrets: the sample runs without one.
fn plant_secret(tier: &dyn Tier, net: &internet::Internet, line: &str, spec: &mut RunSpec) -> Result<String, String> {
    use crate::egress::secrets::{Declared, Secrets};
    let (name, host) = line.split_once('@').ok_or_else(|| format!("the sample's secret line '{line}'"))?;
    let mut r = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut r))
        .map_err(|e| format!("cannot make the secret's value: {e}"))?;
    let value = format!("gauntlet-value-{}", r.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let decl = Declared::parse(&format!("{name}=env:GAUNTLET_SECRET@{}", net.fill(host)))?;
    let secret = decl.resolve(&|v| (v == "GAUNTLET_SECRET").then(|| value.clone().into()))?;
    let secrets = Secrets::new(vec![secret])?;
    if let Err(why) = tier.check_secrets(&secrets) {
        return Err(format!("ran without the secret: {why}"));
    }
    spec.secrets = secrets;
    spec.upstream_ca.push(net.bound.ca_pem.clone());
    Ok(value)
}

fn error_report(tier: &str, s: &Sample) -> RunReport {
    RunReport::failed(tier, s.language.name(), &s.name, "internal error")
}

fn error_cell(sample: &Sample, tier: &str, why: String) -> Cell {
    judge(sample, tier, RunReport { error: Some(why), ..error_report(tier, sample) }, Findings::default())
}

/// The verdict, from the report and the canaries (never the program's word).
pub fn judge(sample: &Sample, tier: &str, report: RunReport, mut findings: Findings) -> Cell {
    // What sandbench's outer net had to stop after the tier's own containment
    // failed (a peer's outer cgroup): host-side facts, listed by the tier.
    if let Some(list) = report.details.get("escapes").and_then(|e| e.as_array()) {
        findings.escapes.extend(list.iter().filter_map(|e| e.as_str()).map(str::to_string));
    }
    let verdict = if !findings.escapes.is_empty() {
        Verdict::Escaped { what: findings.escapes.clone() }
    } else if report.outcome == Outcome::Cancelled {
        Verdict::Cancelled
    } else if report.outcome == Outcome::Error {
        Verdict::Error { why: report.error.clone().unwrap_or_else(|| "unknown".into()) }
    } else if report.outcome == Outcome::Incomplete {
        Verdict::Incomplete { bounds: report.incomplete.iter().map(|b| b.detail.clone()).collect() }
    } else if !sample.is_hostile() && report.outcome == Outcome::Ok {
        Verdict::Ran
    } else if report.violations.is_empty() {
        Verdict::Contained { by: "blocked".into() }
    } else {
        let mut kinds: Vec<&str> = report.violations.iter().map(|v| v.kind.name()).collect();
        kinds.dedup();
        Verdict::Contained { by: kinds.join("+") }
    };
    let expect = sample.expect_for(tier);
    let mismatch = match (&verdict, expect) {
        // A peer's known hole, declared: shown as ESCAPED, as declared.
        (Verdict::Escaped { .. }, Some(e)) if e.escapes => None,
        (Verdict::Escaped { what }, _) => Some(format!("escaped: {}", what.join("; "))),
        (Verdict::Error { why }, _) => Some(format!("error: {why}")),
        (Verdict::Cancelled, _) => Some("cancelled before the end: no verdict".into()),
        (Verdict::Incomplete { bounds }, _) => Some(format!("incomplete: {}", bounds.join("; "))),
        (Verdict::NotAvailable { why }, _) => Some(format!("not run: {why}")),
        (_, None) => Some(format!("the sample declares no expectation for {tier}")),
        (_, Some(e)) => e.check(&report).err(),
    };
    // Output the sample must deliver: missing without a cut flagged is lost.
    let cut = report.stdout_truncated || report.stderr_truncated;
    let lost = sample
        .delivers
        .iter()
        .find(|d| !cut && !report.stdout.contains(d.as_str()) && !report.stderr.contains(d.as_str()));
    let mismatch = match (mismatch, lost) {
        (None, Some(d)) => Some(format!("lost output: {d:?} never arrived and no cut was flagged")),
        (m, _) => m,
    };
    // A process of the run its tier saw left after the verdict (the
    // process tier's `processes_after`: a count, not a look it could not
    // take) met no sample's `must`, whatever the outcome.
    let left = |k: &str| report.details.pointer(&format!("/processes_after/{k}")).and_then(|v| v.as_u64());
    let mismatch = match (mismatch, left("namespace_others").unwrap_or(0) + left("cgroup_pids").unwrap_or(0)) {
        (None, n) if n > 0 => Some(format!("{n} process(es) of the run were left after its verdict")),
        (m, _) => m,
    };
    Cell {
        sample: sample.name.clone(),
        hostile: sample.is_hostile(),
        tier: tier.to_string(),
        verdict,
        expected: expect.map(|e| e.to_string()),
        as_expected: mismatch.is_none(),
        mismatch,
        total_ms: report.timings_ms.total,
        start: report.start().map_or("cold", StartKind::name).to_string(),
        degraded: !report.degraded.is_empty(),
        findings,
        report,
    }
}

/// Run the matrix, sending events as cells finish. Cells run one at a time:
/// hostile programs side by side would skew each other's latency and limits.
pub async fn run(
    tiers: Vec<Arc<dyn Tier>>,
    skipped_tiers: Vec<(String, String)>,
    samples: Vec<Sample>,
    plan: Plan,
    events: Option<mpsc::Sender<GauntletEvent>>,
) -> Matrix {
    run_until(tiers, skipped_tiers, samples, plan, events, CancellationToken::new()).await
}

/// `run`, stoppable (the workbench's cancel): when `stop` fires, the cell in
/// progress is cancelled and judged (see `run_cell_until`), no further cell
/// starts, and `Finished` carries the cells done so far.
pub async fn run_until(
    tiers: Vec<Arc<dyn Tier>>,
    skipped_tiers: Vec<(String, String)>,
    samples: Vec<Sample>,
    plan: Plan,
    events: Option<mpsc::Sender<GauntletEvent>>,
    stop: CancellationToken,
) -> Matrix {
    let send = |ev: GauntletEvent| {
        let events = events.clone();
        async move {
            if let Some(tx) = &events {
                let _ = tx.send(ev).await;
            }
        }
    };
    // Each tier measured in turn before any cell, as cells run: alone.
    let mut scalers = vec![];
    let mut scales = vec![];
    for t in &tiers {
        let scaler = if plan.scale && !stop.is_cancelled() {
            send(GauntletEvent::Calibrating { tier: t.name().into() }).await;
            tokio::select! {
                m = crate::slowdown::measure(t.clone(), 1, crate::slowdown::Work::Full) => crate::slowdown::Scaler::for_load(&plan.limits, m, REMEASURE),
                _ = stop.cancelled() => crate::slowdown::Scaler::as_written(&plan.limits),
            }
        } else {
            crate::slowdown::Scaler::as_written(&plan.limits)
        };
        scales.push(TierScale {
            tier: t.name().into(),
            slowdown: scaler.slowdown.clone(),
            cpu_time_ms: [0, 0],
            wall_time_ms: [0, 0],
            written_ms: [plan.limits.cpu_time.as_millis() as u64, plan.limits.wall_time.as_millis() as u64],
        });
        scalers.push(scaler);
    }
    let repeat = plan.repeat;
    let mut cells = vec![];
    let mut latency_samples: std::collections::BTreeMap<(String, String), Vec<f64>> = Default::default();
    'all: for s in &samples {
        for (ti, t) in tiers.iter().enumerate() {
            let n = if s.is_hostile() { 1 } else { repeat.max(1) };
            for i in 0..n {
                if stop.is_cancelled() {
                    break 'all;
                }
                if scalers[ti].is_due() {
                    scalers[ti].measuring();
                    send(GauntletEvent::Calibrating { tier: t.name().into() }).await;
                    let got = tokio::select! {
                        r = crate::slowdown::round(t.clone(), scalers[ti].work()) => r,
                        _ = stop.cancelled() => break 'all,
                    };
                    scalers[ti].took(got);
                    scales[ti].slowdown = scalers[ti].slowdown.clone();
                }
                send(GauntletEvent::CellStarted { sample: s.name.clone(), tier: t.name().into() }).await;
                let limits = scalers[ti].limits.clone();
                scales[ti].used(&limits);
                let cell = run_cell_until(t.clone(), s, &limits, &stop).await;
                // Start to exit, as every latency figure (teardown is not the program's wait).
                if !s.is_hostile() && cell.verdict == Verdict::Ran {
                    let exit = crate::compare::exit_ms(&cell.report);
                    latency_samples.entry((t.name().to_string(), cell.start.clone())).or_default().push(exit);
                }
                // Repeats of a benign control only feed the latency figures;
                // the matrix keeps the first run, unless a later one failed.
                if i == 0 || !cell.as_expected {
                    send(GauntletEvent::CellDone(Box::new(cell.clone()))).await;
                    if i > 0 {
                        cells.retain(|c: &Cell| !(c.sample == cell.sample && c.tier == cell.tier));
                    }
                    cells.push(cell);
                }
            }
        }
    }
    let latency = latency_samples
        .into_iter()
        .map(|((tier, start), mut v)| {
            v.sort_by(f64::total_cmp);
            Latency {
                tier,
                start,
                runs: v.len(),
                p50_ms: crate::stats::percentile(&v, 0.5),
                p95_ms: crate::stats::percentile(&v, 0.95),
            }
        })
        .collect();
    let mismatches = cells.iter().filter(|c| c.is_mismatch()).count();
    let m = Matrix {
        tiers: tiers.iter().map(|t| t.name().to_string()).collect(),
        skipped_tiers,
        samples: samples.iter().map(|s| s.name.clone()).collect(),
        cells,
        latency,
        mismatches,
        cancelled: stop.is_cancelled(),
        scales: if plan.scale { scales } else { vec![] },
    };
    send(GauntletEvent::Finished(Box::new(m.clone()))).await;
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, ExitStatus, RunContext, Stream};
    use crate::tier::contract::{Availability, BoxFuture, TierExit};

    /// A deliberately broken sandbox: the program runs on the host with the
    /// launcher's environment passed through (what a wrapper without `env -i`
    /// does). The canaries must call that an escape.
    struct Leaky;

    impl Tier for Leaky {
        fn name(&self) -> &'static str {
            "leaky"
        }
        fn describe(&self) -> &'static str {
            "no isolation at all (test)"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "leaky".into(), available: true, summary: "test".into(), checks: vec![] }
            })
        }
        fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                let out = tokio::process::Command::new("/usr/bin/python3")
                    .arg("-c")
                    .arg(&spec.code)
                    .env_clear()
                    .envs(&spec.launcher_env)
                    .envs(&spec.env)
                    .kill_on_drop(true)
                    .output()
                    .await?;
                ctx.emit(EventKind::Output(Stream::Stdout, out.stdout)).await;
                ctx.emit(EventKind::Output(Stream::Stderr, out.stderr)).await;
                ctx.emit(EventKind::Exit(ExitStatus { code: out.status.code(), signal: None })).await;
                Ok(TierExit::default())
            })
        }
    }

    fn sample(name: &str) -> Sample {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/hostile").join(name);
        Sample::parse(&path, std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// A hostile cell whose judge stopped short is never contained, and a
    /// benign one never ran cleanly: incomplete is no pass on either.
    #[test]
    fn an_incomplete_cell_is_no_pass() {
        let bound = crate::event::Incomplete {
            bound: "scratch_walk_entries".into(),
            limit: Some(100_000),
            at: "the loader's walk of /work".into(),
            detail: "the loader's walk of /work stopped after 100000 names".into(),
        };
        for name in ["blinded_scan.py", "hidden_deep_file.py"] {
            let s = sample(name);
            let mut r = RunReport::failed("docker", "python", &s.name, "");
            r.error = None;
            r.outcome = Outcome::Incomplete;
            r.incomplete = vec![bound.clone()];
            let c = judge(&s, "docker", r, Findings::default());
            assert!(matches!(c.verdict, Verdict::Incomplete { .. }), "{name}: {:?}", c.verdict);
            assert!(!c.as_expected && c.is_mismatch(), "{name}: {:?}", c.mismatch);
            assert!(c.verdict.short().starts_with("INCOMPLETE"), "{}", c.verdict.short());
        }
        let benign = Sample::parse(
            std::path::Path::new("benign/x.py"),
            "# expect: *=ok
"
            .into(),
        )
        .unwrap();
        let mut r = RunReport::failed("docker", "python", "x", "");
        r.error = None;
        r.outcome = Outcome::Incomplete;
        r.incomplete = vec![bound];
        let c = judge(&benign, "docker", r, Findings::default());
        assert!(matches!(c.verdict, Verdict::Incomplete { .. }) && c.is_mismatch(), "{:?}", c.verdict);
    }

    /// A peer's declared hole is shown as ESCAPED and counts as declared;
    /// the same escape anywhere it is not declared is a mismatch.
    #[test]
    fn a_declared_peer_escape_is_as_declared_and_only_there() {
        let s = Sample::parse(
            std::path::Path::new("hostile/x.py"),
            "# expect: *=ok bwrap=escaped\n# escaped-if: \"OPENED\"\n".into(),
        )
        .unwrap();
        let mut report = RunReport::failed("bwrap", "python", "x", "e");
        report.outcome = Outcome::Ok;
        report.error = None;
        let found = || Findings { escapes: vec!["output shows a breach: \"OPENED\"".into()], ..Default::default() };
        let peer = judge(&s, "bwrap", report.clone(), found());
        assert!(matches!(peer.verdict, Verdict::Escaped { .. }) && peer.as_expected, "{:?}", peer.mismatch);
        assert_eq!(peer.expected.as_deref(), Some("escaped"));
        let other = judge(&s, "nsjail", report.clone(), found());
        assert!(!other.as_expected, "an undeclared escape is a mismatch");
        let stale = judge(&s, "bwrap", report, Findings::default());
        assert!(!stale.as_expected, "a declared escape that did not happen is stale");
    }

    /// A report that saw a process of the run left after its verdict is a
    /// mismatch, whatever the outcome; one that saw none, or that has no
    /// such count (other tiers), is judged as before.
    #[test]
    fn a_process_seen_left_after_the_verdict_is_a_mismatch() {
        let s = sample("zygote_parent.py");
        let mut r = RunReport::failed("process", "python", &s.name, "");
        r.error = None;
        r.outcome = Outcome::Ok;
        let cases = [
            (serde_json::Value::Null, true),
            (serde_json::json!({ "confirmed": true, "namespace_others": 0, "cgroup_pids": 0 }), true),
            (serde_json::json!({ "confirmed": false, "namespace_others": 2, "cgroup_pids": 0 }), false),
            (serde_json::json!({ "confirmed": false, "namespace_others": 0, "cgroup_pids": 1 }), false),
            (serde_json::json!({ "confirmed": false, "namespace_others": null, "cgroup_pids": 3 }), false),
        ];
        for (seen, ok) in cases {
            r.details = serde_json::json!({ "processes_after": seen });
            let c = judge(&s, "process", r.clone(), Findings::default());
            assert_eq!(c.as_expected, ok, "{seen}: {:?}", c.mismatch);
        }
    }

    #[test]
    fn a_cancelled_cell_has_no_verdict_and_is_no_mismatch_unless_something_got_out() {
        let s = sample("cpu_spin_multi.py");
        let mut r = RunReport::failed("bwrap", "python", &s.name, "");
        r.error = None;
        r.outcome = Outcome::Cancelled;
        r.usage.cpu_ms = Some(4860);
        let c = judge(&s, "bwrap", r.clone(), Findings::default());
        assert_eq!(c.verdict, Verdict::Cancelled);
        assert!(!c.as_expected && !c.is_mismatch(), "{:?}", c.mismatch);
        assert_eq!(c.verdict.short(), "cancelled (no verdict)");
        // What got out before the cancel is still an escape.
        let f = Findings { escapes: vec!["the secret file was read".into()], ..Default::default() };
        let c = judge(&s, "bwrap", r, f);
        assert!(matches!(c.verdict, Verdict::Escaped { .. }) && c.is_mismatch());
    }

    #[tokio::test]
    async fn a_leaky_sandbox_is_judged_escaped_by_the_planted_secrets() {
        if !std::path::Path::new("/usr/bin/python3").exists() {
            eprintln!("SKIP: no /usr/bin/python3");
            return;
        }
        let env = run_cell(Arc::new(Leaky), &sample("secrets_env.py"), &default_limits()).await;
        let Verdict::Escaped { what } = &env.verdict else { panic!("{:?}: {}", env.verdict, env.report.stdout) };
        assert!(what.iter().any(|w| w.contains("ANTHROPIC_API_KEY")), "{what:?}");
        assert!(!env.as_expected);
        let file = run_cell(Arc::new(Leaky), &sample("secrets_file.py"), &default_limits()).await;
        let Verdict::Escaped { what } = &file.verdict else { panic!("{:?}: {}", file.verdict, file.report.stdout) };
        assert!(what.iter().any(|w| w.contains("secret file")), "{what:?}");
        // No network path of its own: the sample runs with none (said so),
        // and the direct connections of a program on the host are escapes.
        let direct = run_cell(Arc::new(Leaky), &sample("egress_direct.py"), &default_limits()).await;
        assert!(direct.findings.notes.iter().any(|n| n.starts_with("ran with network none")), "{:?}", direct.findings);
        let Verdict::Escaped { what } = &direct.verdict else {
            panic!("{:?}: {}", direct.verdict, direct.report.stdout)
        };
        let all = what.join("\n");
        assert!(all.contains("canary host") && all.contains("request for direct.gauntlet.test"), "{all}");
        // Planted in every cell, named in its findings, gone afterwards.
        for c in [&env, &file] {
            assert!(c.findings.planted.iter().any(|p| p.contains("fake ANTHROPIC_API_KEY")), "{:?}", c.findings);
            let files: Vec<&String> = c.findings.planted.iter().filter(|p| p.starts_with("secret file ")).collect();
            assert!(!files.is_empty(), "{:?}", c.findings);
            for f in files {
                assert!(!std::path::Path::new(f.trim_start_matches("secret file ")).exists(), "{f} left behind");
            }
        }
    }
}
