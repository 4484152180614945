//! The soak: a mix of benign and hostile samples on every selected tier with
//! N runs in flight for a set time, each judged as in the gauntlet (host-side
//! canaries, declared expectations). It reports runs completed, verdicts
//! that differ from what the samples declare, output bytes delivered against
//! bytes produced by programs whose output size is known in advance, the
//! host's `/bin/true` latency while it ran, and what the run left behind
//! (cgroups, containers, QEMU processes, run folders carrying this process's
//! owner token), which must be nothing. Each tier's limits are scaled by its
//! measured slowdown against the host (`slowdown`), so that a sample meets
//! the limit it declares and not one written for a faster CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;

use crate::gauntlet;
use crate::samples::Sample;
use crate::spec::Limits;
use crate::tier::contract::Tier;

/// How long leftovers may take to go after the last run and the pools' drain.
const SETTLE: Duration = Duration::from_secs(10);
/// How often each tier's slowdown is measured again while the soak runs
/// (the machine's load changes; one round in a slot of its own).
const REMEASURE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub duration: Duration,
    pub concurrency: usize,
    pub limits: Limits,
    /// Where leftovers are looked for (Docker endpoint, run folders).
    pub host: crate::config::HostEnv,
    /// The process tier's run uids (`[process] uid_base`, `uid_count`):
    /// no process may have one once the tiers are shut down.
    pub run_uids: (u32, u32),
    /// Beside the one-shot runs, one session per tier that has sessions,
    /// called again and again as an agent would (`--sessions`).
    pub sessions: bool,
}

/// One tier's session stream over the soak: an agent's steps, one after
/// another, each checking that the session kept what the last one wrote.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SessionSoak {
    pub tier: String,
    pub calls: usize,
    /// Calls that failed, or whose output or kept file was not right.
    pub failures: usize,
    /// The first failures, for a look.
    pub failure_examples: Vec<String>,
    /// Sessions opened again after one closed (at its lifetime cap, or
    /// after a failure).
    pub reopened: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// p99 of each window of [`SESSION_WINDOW`] (start in s, p99 in ms,
    /// calls): a call that gets slower over the soak shows here.
    pub p99_by_window: Vec<(f64, f64, usize)>,
}

/// A session stream's counts and its calls (seconds from the start, ms).
type Streamed = (SessionSoak, Vec<(f64, f64)>);

pub const SESSION_WINDOW: Duration = Duration::from_secs(60);
/// Windows reported at most: longer soaks get wider windows.
const MAX_WINDOWS: usize = 120;

impl SessionSoak {
    fn finish(mut self, calls: &[(f64, f64)]) -> SessionSoak {
        let mut all: Vec<f64> = calls.iter().map(|c| c.1).collect();
        all.sort_by(f64::total_cmp);
        self.p50_ms = (!all.is_empty()).then(|| crate::stats::percentile(&all, 0.5));
        self.p99_ms = (!all.is_empty()).then(|| crate::stats::percentile(&all, 0.99));
        let end = calls.iter().map(|c| c.0).fold(0.0, f64::max);
        let mut width = SESSION_WINDOW.as_secs_f64();
        while end / width >= MAX_WINDOWS as f64 {
            width *= 2.0;
        }
        let mut start = 0.0;
        while start <= end && !calls.is_empty() {
            let mut w: Vec<f64> = calls.iter().filter(|c| c.0 >= start && c.0 < start + width).map(|c| c.1).collect();
            if !w.is_empty() {
                w.sort_by(f64::total_cmp);
                self.p99_by_window.push((start, crate::stats::percentile(&w, 0.99), w.len()));
            }
            start += width;
        }
        self
    }
}

/// Call a session of `tier` until `until`, one step after another: each
/// writes a file and reads the one the step before wrote. A session that
/// closes is opened again (counted); a failed or wrong call is a failure.
async fn session_stream(tier: Arc<dyn Tier>, limits: Limits, until: Instant, started: Instant) -> Streamed {
    use crate::session::{Session, SessionSpec};
    let mut out = SessionSoak { tier: tier.name().to_string(), ..Default::default() };
    let mut calls = vec![];
    let spec = || SessionSpec {
        // Open for the whole soak (and a little over), closed by us at its end.
        max_life: until.saturating_duration_since(Instant::now()) + Duration::from_secs(300),
        ..SessionSpec::new(limits.clone())
    };
    let fail = |out: &mut SessionSoak, why: String| {
        out.failures += 1;
        if out.failure_examples.len() < 10 {
            out.failure_examples.push(crate::sanitize::inert_line(&why, 300));
        }
    };
    let mut session: Option<Session> = None;
    let mut step = 0u64;
    while Instant::now() < until {
        let s = match &session {
            Some(s) if !s.is_closed() => s.clone(),
            _ => match Session::open(tier.clone(), spec()).await {
                Ok(s) => {
                    if session.is_some() {
                        out.reopened += 1;
                    }
                    step = 0;
                    session = Some(s.clone());
                    s
                }
                Err(e) => {
                    fail(&mut out, format!("cannot open a session: {e:#}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        step += 1;
        // The step before's file is read and removed: an hour of steps
        // keeps two files, not one per step (4096 of them filled /work's
        // inodes after ~6 minutes).
        let code = format!(
            "import os\nopen('step{step}', 'w').write('{step}')\n\
             prev = open('step{p}').read() if {step} > 1 else '0'\n\
             if {step} > 1: os.remove('step{p}')\nprint({step}, prev)\n",
            p = step - 1
        );
        // The call asks for what the session was opened with, no more.
        let mut call = crate::spec::RunSpec::new(crate::spec::Language::Python, code);
        call.limits = limits.clone();
        let t = Instant::now();
        let r = s.run(call).await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        out.calls += 1;
        match r {
            Ok(r) if r.outcome == crate::report::Outcome::Ok && r.stdout == format!("{step} {}\n", step - 1) => {
                calls.push((started.elapsed().as_secs_f64(), ms));
            }
            Ok(r) => {
                fail(&mut out, format!("call {step}: {} · stdout {:?}", r.summary_line(), r.stdout));
                // A session whose call went wrong is in no known state; an
                // agent would start a fresh one, and so does the soak.
                s.close().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                let closed = s.is_closed();
                fail(&mut out, format!("call {step}: {e}"));
                if !closed {
                    // In no known state: a fresh one.
                    s.close().await;
                }
                // A failure that repeats is not retried in a tight loop.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    if let Some(s) = session {
        s.close().await;
    }
    (out, calls)
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct TierSoak {
    pub tier: String,
    pub runs: usize,
    pub mismatches: usize,
    pub errors: usize,
    /// What this tier cannot run on this machine, with the tier's reason
    /// (`javascript: node under TCG needs seconds …`): never scheduled, so
    /// never a pass and never a mismatch — the gauntlet's n/a, by the same
    /// rule (`Tier::language_support`).
    pub not_applicable: Vec<String>,
    /// Its measured slowdown against the host (the last measure), and the
    /// scale its limits got.
    pub slowdown: crate::slowdown::Slowdown,
    /// The CPU and wall limits its runs had (ms): the lowest and highest
    /// over the soak, as the measures changed them.
    pub cpu_time_ms: [u64; 2],
    pub wall_time_ms: [u64; 2],
}

impl TierSoak {
    fn used(&mut self, l: &Limits) {
        crate::slowdown::widen(&mut self.cpu_time_ms, &mut self.wall_time_ms, l);
    }
}

/// Bytes of programs that print a known amount (single large write, many
/// small writes, both streams interleaved, a write just before exit).
#[derive(Debug, Clone, Serialize, Default)]
pub struct OutputCheck {
    pub runs: usize,
    pub bytes_produced: u64,
    pub bytes_delivered: u64,
    /// Runs that delivered less than they produced without a truncation flag.
    pub lost_runs: usize,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub struct HostLatency {
    pub samples: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

// What the tiers leave behind is counted where the tiers are named.
pub use crate::tier::registry::{leftovers, Leftovers};

/// How much sandbench itself holds over the soak: its open descriptors
/// and resident memory, sampled every [`SELF_EVERY`]. A leak shows as a
/// slope; the first minute (pools filling, caches warming) is left out of it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SelfUse {
    /// (seconds from the start, open descriptors, resident bytes), at most
    /// [`SELF_MAX_SAMPLES`] (thinned evenly when a soak runs longer).
    pub samples: Vec<(f64, u64, u64)>,
    pub fds_max: u64,
    pub rss_max_bytes: u64,
    /// Least-squares slope after the first minute, per hour; None with
    /// fewer than three samples there.
    pub fds_per_hour: Option<f64>,
    pub rss_mib_per_hour: Option<f64>,
}

pub const SELF_EVERY: Duration = Duration::from_secs(10);
pub const SELF_MAX_SAMPLES: usize = 720;

impl SelfUse {
    fn from_samples(mut samples: Vec<(f64, u64, u64)>) -> SelfUse {
        while samples.len() > SELF_MAX_SAMPLES {
            // Every other one, the last kept: the shape stays, the size is bounded.
            let last = samples.last().copied();
            samples = samples.into_iter().step_by(2).collect();
            if let (Some(l), Some(k)) = (last, samples.last().copied()) {
                if l != k {
                    samples.push(l);
                }
            }
        }
        let after: Vec<&(f64, u64, u64)> = samples.iter().filter(|s| s.0 >= 60.0).collect();
        let slope = |f: &dyn Fn(&(f64, u64, u64)) -> f64| {
            if after.len() < 3 {
                return None;
            }
            let n = after.len() as f64;
            let mx = after.iter().map(|s| s.0).sum::<f64>() / n;
            let my = after.iter().map(|s| f(s)).sum::<f64>() / n;
            let sxx: f64 = after.iter().map(|s| (s.0 - mx).powi(2)).sum();
            let sxy: f64 = after.iter().map(|s| (s.0 - mx) * (f(s) - my)).sum();
            (sxx > 0.0).then(|| sxy / sxx * 3600.0)
        };
        SelfUse {
            fds_max: samples.iter().map(|s| s.1).max().unwrap_or(0),
            rss_max_bytes: samples.iter().map(|s| s.2).max().unwrap_or(0),
            fds_per_hour: slope(&|s| s.1 as f64),
            rss_mib_per_hour: slope(&|s| s.2 as f64 / (1024.0 * 1024.0)),
            samples,
        }
    }
}

/// This process's open descriptors and resident memory now.
fn self_use() -> (u64, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
        })
        .unwrap_or(0);
    (fds, rss * 1024)
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub duration_s: f64,
    pub concurrency: usize,
    pub tiers: Vec<String>,
    pub skipped_tiers: Vec<(String, String)>,
    pub runs: usize,
    pub mismatches: usize,
    /// The first mismatches (sample, tier, why), for a look.
    pub mismatch_examples: Vec<String>,
    pub per_tier: Vec<TierSoak>,
    pub output: OutputCheck,
    pub host_true: HostLatency,
    pub leftovers: Leftovers,
    pub processes: ProcessesLeft,
    /// sandbench's own descriptors and memory over the soak.
    pub sandbench: SelfUse,
    /// The session streams (`--sessions`), one per tier with sessions.
    pub sessions: Vec<SessionSoak>,
}

/// What the runs left of processes (issue 42: a few hundred runs once
/// exhausted the host's pids with zombies nobody reaped).
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProcessesLeft {
    /// Zombies in sandbench's own process tree once the last run is over
    /// (before the tiers shut down, while a zygote, a spare's init or a
    /// helper still stands to hold them): each holds a host pid for as
    /// long as its parent lives.
    pub zombies: usize,
    /// Processes with one of the process tier's run uids (any of their
    /// four uids, zombies included) once the tiers are shut down.
    pub run_uid_processes: usize,
}

impl SoakReport {
    /// Nothing left behind, no output lost, every verdict as declared.
    pub fn passed(&self) -> bool {
        self.leftovers.total == 0
            && self.processes.zombies == 0
            && self.processes.run_uid_processes == 0
            && self.output.lost_runs == 0
            && self.mismatches == 0
            && self.sessions.iter().all(|s| s.failures == 0 && s.calls > 0)
    }
}

/// Zombies in this process's tree now.
fn zombies_in_tree() -> usize {
    crate::host::process_tree(std::process::id() as i32)
        .into_iter()
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // The state follows the command name, which may hold `)`.
            stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) == Some('Z')
        })
        .count()
}

/// Processes on this host with a uid in `base .. base + count` that no live
/// run holds the lease of (see `uids::leased_now`).
fn processes_of_uids((base, count): (u32, u32)) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    rd.flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            // A run uid whose lease a live run holds is that run's (another
            // sandbench's, a test's beside the soak): not a leftover.
            status.lines().find_map(|l| l.strip_prefix("Uid:")).is_some_and(|ids| {
                ids.split_whitespace()
                    .filter_map(|u| u.parse::<u32>().ok())
                    .any(|u| u >= base && u - base < count && !crate::tier::process::uids::leased_now(u))
            })
        })
        .count()
}

/// One program with a known output: what it prints to each stream.
struct OutputProgram {
    sample: Sample,
    stdout: u64,
    stderr: u64,
}

fn output_program(name: &str, body: &str, stdout: u64, stderr: u64) -> OutputProgram {
    let code = format!(
        "# name: {name}\n# tries: print a known number of bytes (soak output check)\n# must: deliver all of it\n\
         # expect: *=ok\nimport os, sys\n{body}"
    );
    let sample = Sample::parse(std::path::Path::new(&format!("benign/{name}.py")), code)
        .expect("the soak's own output programs parse");
    OutputProgram { sample, stdout, stderr }
}

/// The output programs. Sizes stay well under the default output limit.
fn output_programs() -> Vec<OutputProgram> {
    const BIG: u64 = 256 << 10;
    vec![
        output_program("soak-one-large-write", &format!("sys.stdout.write('x' * {BIG})\nsys.stdout.flush()\n"), BIG, 0),
        // 4000 lines of 32 bytes each (31 characters and a newline).
        output_program(
            "soak-many-small-writes",
            "for i in range(4000):\n    print('y' * 31, flush=True)\n",
            4000 * 32,
            0,
        ),
        output_program(
            "soak-interleaved",
            "for i in range(2000):\n    sys.stdout.write('o' * 15 + '\\n'); sys.stdout.flush()\n    \
             sys.stderr.write('e' * 15 + '\\n'); sys.stderr.flush()\n",
            2000 * 16,
            2000 * 16,
        ),
        output_program("soak-write-then-exit", &format!("os.write(1, b'z' * {BIG})\nos._exit(0)\n"), BIG, 0),
    ]
}

/// `/bin/true` spawned every 100 ms on the host while the soak runs.
pub fn probe_host(stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<f64>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let bin = if std::path::Path::new("/bin/true").exists() { "/bin/true" } else { "true" };
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            if std::process::Command::new(bin).status().is_ok() {
                if let Ok(mut v) = out.lock() {
                    v.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

enum Job {
    Sample(usize),
    Output(usize),
}

/// What a slot of the soak finished.
enum Done {
    /// A cell: its tier, the output program it ran (if one), the cell.
    Cell(usize, Option<usize>, Box<gauntlet::Cell>),
    /// A measure of a tier's slowdown.
    Measured(usize, Result<crate::slowdown::Round, String>),
}

/// The (job, tier) slots of the soak's cycle: every job on every tier but
/// the languages a tier refused up front (`refused[tier]`).
fn schedulable(
    languages: &[crate::spec::Language],
    refused: &[Vec<(crate::spec::Language, String)>],
) -> Vec<(usize, usize)> {
    (0..languages.len())
        .flat_map(|j| (0..refused.len()).map(move |t| (j, t)))
        .filter(|(j, t)| !refused[*t].iter().any(|(l, _)| *l == languages[*j]))
        .collect()
}

/// Run the soak. The mix cycles through (output programs, then samples) ×
/// tiers, so even a short soak starts with the output check on every tier.
pub async fn run(
    tiers: Vec<Arc<dyn Tier>>,
    skipped_tiers: Vec<(String, String)>,
    samples: Vec<Sample>,
    cfg: SoakConfig,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> SoakReport {
    let outputs = Arc::new(output_programs());
    let samples = Arc::new(samples);
    let mut mix = vec![];
    for i in 0..outputs.len() {
        mix.push(Job::Output(i));
    }
    for i in 0..samples.len() {
        mix.push(Job::Sample(i));
    }
    // One rule for what a tier cannot run here, the gauntlet's: a language
    // the tier refuses up front is n/a on it, with its reason, and left out.
    let mut refused: Vec<Vec<(crate::spec::Language, String)>> = vec![vec![]; tiers.len()];
    for (t, tier) in tiers.iter().enumerate() {
        let mut langs: Vec<crate::spec::Language> = samples.iter().map(|s| s.language).collect();
        langs.extend(outputs.iter().map(|o| o.sample.language));
        langs.sort_by_key(|l| l.name());
        langs.dedup();
        for l in langs {
            if let Err(why) = tier.language_support(l).await {
                refused[t].push((l, crate::sanitize::inert_line(&why, 200)));
            }
        }
    }
    let languages: Vec<crate::spec::Language> = mix
        .iter()
        .map(|j| match j {
            Job::Output(i) => outputs[*i].sample.language,
            Job::Sample(i) => samples[*i].language,
        })
        .collect();
    let slots = schedulable(&languages, &refused);

    let stop_probe = Arc::new(AtomicBool::new(false));
    let host = Arc::new(Mutex::new(vec![]));
    let prober = probe_host(stop_probe.clone(), host.clone());
    let own = Arc::new(Mutex::new(vec![]));
    let own_sampler = {
        let (stop, own) = (stop_probe.clone(), own.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut next = t0;
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let (fds, rss) = self_use();
                    if let Ok(mut v) = own.lock() {
                        v.push((t0.elapsed().as_secs_f64(), fds, rss));
                    }
                    next += SELF_EVERY;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    // Every tier at once, as the soak will run them: each measure sees a
    // loaded host, as the runs will.
    let measured = futures_util::future::join_all(
        tiers.iter().map(|t| crate::slowdown::measure(t.clone(), crate::slowdown::ROUNDS, crate::slowdown::Work::Full)),
    )
    .await;
    let mut per_tier: Vec<TierSoak> = tiers
        .iter()
        .zip(&measured)
        .zip(&refused)
        .map(|((t, (s, _)), no)| TierSoak {
            tier: t.name().to_string(),
            slowdown: s.clone(),
            not_applicable: no.iter().map(|(l, why)| format!("{}: {why}", l.name())).collect(),
            ..Default::default()
        })
        .collect();
    let mut scalers: Vec<crate::slowdown::Scaler> =
        measured.into_iter().map(|m| crate::slowdown::Scaler::new(&cfg.limits, m, REMEASURE)).collect();

    let started = Instant::now();
    let until = started + cfg.duration;
    let streams: Vec<tokio::task::JoinHandle<Streamed>> = if cfg.sessions {
        tiers
            .iter()
            .filter(|t| t.sessions().is_ok())
            .map(|t| tokio::spawn(session_stream(t.clone(), cfg.limits.clone(), until, started)))
            .collect()
    } else {
        vec![]
    };
    let mut set = JoinSet::new();
    let mut next = 0usize;
    let mut output = OutputCheck::default();
    let mut examples = vec![];
    let (mut runs, mut mismatches) = (0usize, 0usize);
    let concurrency = cfg.concurrency.max(1);
    loop {
        while set.len() < concurrency && Instant::now() < until && !slots.is_empty() {
            if let Some(t) = scalers.iter().position(crate::slowdown::Scaler::is_due) {
                scalers[t].measuring();
                let tier = tiers[t].clone();
                set.spawn(
                    async move { Done::Measured(t, crate::slowdown::round(tier, crate::slowdown::Work::Full).await) },
                );
                continue;
            }
            let (j, t) = slots[next % slots.len()];
            next += 1;
            let tier = tiers[t].clone();
            let limits = scalers[t].limits.clone();
            per_tier[t].used(&limits);
            let (samples, outputs) = (samples.clone(), outputs.clone());
            let is_output = matches!(mix[j], Job::Output(_));
            let idx = match mix[j] {
                Job::Sample(i) | Job::Output(i) => i,
            };
            set.spawn(async move {
                let sample = if is_output { &outputs[idx].sample } else { &samples[idx] };
                let cell = gauntlet::run_cell(tier, sample, &limits).await;
                Done::Cell(t, is_output.then_some(idx), Box::new(cell))
            });
        }
        if set.is_empty() {
            break;
        }
        // Wake at the deadline too, so that no slot stays idle while waiting.
        let joined = if Instant::now() < until {
            tokio::select! {
                j = set.join_next() => j,
                _ = tokio::time::sleep_until(until.into()) => continue,
            }
        } else {
            set.join_next().await
        };
        let Some(joined) = joined else { break };
        let (t, out_idx, cell) = match joined {
            Ok(Done::Cell(t, o, c)) => (t, o, c),
            Ok(Done::Measured(t, got)) => {
                scalers[t].took(got);
                per_tier[t].slowdown = scalers[t].slowdown.clone();
                continue;
            }
            Err(e) => {
                mismatches += 1;
                examples.push(format!("a soak task failed: {e}"));
                continue;
            }
        };
        if let gauntlet::Verdict::NotAvailable { why } = &cell.verdict {
            // Refused only now (the tier changed its mind mid-soak): n/a as
            // above, not a run and not a mismatch.
            let line = crate::sanitize::inert_line(why, 200);
            if !per_tier[t].not_applicable.iter().any(|l| l.ends_with(&line)) {
                per_tier[t].not_applicable.push(line);
            }
            continue;
        }
        runs += 1;
        per_tier[t].runs += 1;
        if matches!(cell.verdict, gauntlet::Verdict::Error { .. }) {
            per_tier[t].errors += 1;
        }
        if !cell.as_expected {
            mismatches += 1;
            per_tier[t].mismatches += 1;
            if examples.len() < 20 {
                let why = cell.mismatch.clone().unwrap_or_default();
                examples.push(crate::sanitize::inert_line(&format!("{} on {}: {why}", cell.sample, cell.tier), 300));
            }
        }
        if let Some(i) = out_idx {
            let p = &outputs[i];
            let r = &cell.report;
            let (so, se) = (r.stdout.len() as u64, r.stderr.len() as u64);
            output.runs += 1;
            output.bytes_produced += p.stdout + p.stderr;
            output.bytes_delivered += so.min(p.stdout) + se.min(p.stderr);
            let short = (so < p.stdout && !r.stdout_truncated) || (se < p.stderr && !r.stderr_truncated);
            if short {
                output.lost_runs += 1;
            }
        }
        progress(runs, mismatches);
    }
    let mut sessions = vec![];
    for h in streams {
        match h.await {
            Ok((soak, calls)) => sessions.push(soak.finish(&calls)),
            Err(e) => sessions.push(SessionSoak {
                failures: 1,
                failure_examples: vec![format!("the session stream failed: {e}")],
                ..Default::default()
            }),
        }
    }
    let elapsed = started.elapsed();
    stop_probe.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || prober.join()).await;
    let _ = tokio::task::spawn_blocking(move || own_sampler.join()).await;
    let mut own = own.lock().map(|v| v.clone()).unwrap_or_default();
    // The end too, so a short soak has its last state.
    let (fds, rss) = self_use();
    own.push((elapsed.as_secs_f64(), fds, rss));
    let sandbench = SelfUse::from_samples(own);
    let mut lat = host.lock().map(|v| v.clone()).unwrap_or_default();
    lat.sort_by(f64::total_cmp);
    let host_true = HostLatency {
        samples: lat.len(),
        p50_ms: (!lat.is_empty()).then(|| crate::stats::percentile(&lat, 0.5)),
        p99_ms: (!lat.is_empty()).then(|| crate::stats::percentile(&lat, 0.99)),
        max_ms: lat.last().copied(),
    };

    // A zombie is a moment's state at most: one still there after the
    // settle was left unreaped by a parent that stands (a zygote's child,
    // parented there by a program), looked at before shutdown takes the
    // parents, and the zombies, along.
    let settle = Instant::now();
    let zombies = loop {
        let z = zombies_in_tree();
        if z == 0 || settle.elapsed() > SETTLE {
            break z;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Warm pools and spares hold containers, guests and helpers by design:
    // drain them and drop the tiers, then everything carrying our token must
    // be gone. A spare being made in the background as the last run ended
    // goes a moment later, hence the short settle.
    let tier_names = tiers.iter().map(|t| t.name().to_string()).collect();
    let _ = crate::tier::registry::shutdown().await;
    drop(tiers);
    let settle = Instant::now();
    let (leftovers, run_uid_processes) = loop {
        let l = leftovers(&cfg.host).await;
        let u = processes_of_uids(cfg.run_uids);
        if (l.total == 0 && u == 0) || settle.elapsed() > SETTLE {
            break (l, u);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    SoakReport {
        duration_s: elapsed.as_secs_f64(),
        concurrency,
        tiers: tier_names,
        skipped_tiers,
        runs,
        mismatches,
        mismatch_examples: examples,
        per_tier,
        output,
        host_true,
        leftovers,
        processes: ProcessesLeft { zombies, run_uid_processes },
        sandbench,
        sessions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_latency_is_reported_per_window_and_the_windows_stay_bounded() {
        // 10 minutes, a call every second, slower in the last minutes.
        let calls: Vec<(f64, f64)> = (0..600).map(|i| (i as f64, if i >= 540 { 50.0 } else { 10.0 })).collect();
        let s = SessionSoak::default().finish(&calls);
        assert_eq!(s.p99_by_window.len(), 10);
        assert_eq!(s.p99_by_window[0], (0.0, 10.0, 60));
        assert_eq!(s.p99_by_window[9].1, 50.0, "the slow last minute shows");
        assert_eq!(s.p50_ms, Some(10.0));
        // Ten hours: wider windows, never more than MAX_WINDOWS.
        let long: Vec<(f64, f64)> = (0..36_000).map(|i| (i as f64, 1.0)).collect();
        assert!(SessionSoak::default().finish(&long).p99_by_window.len() <= MAX_WINDOWS);
        assert!(SessionSoak::default().finish(&[]).p99_ms.is_none());
    }

    #[test]
    fn a_leak_shows_as_a_slope_and_the_samples_stay_bounded() {
        // 2 hours every 10 s: 1 fd and 1 MiB more each minute after a warm-up.
        let samples: Vec<(f64, u64, u64)> = (0..720)
            .map(|i| {
                let t = i as f64 * 10.0;
                (t, 20 + (t / 60.0) as u64, (100 << 20) + ((t / 60.0) as u64) * (1 << 20))
            })
            .collect();
        let u = SelfUse::from_samples(samples.clone());
        let fds = u.fds_per_hour.unwrap();
        assert!((fds - 60.0).abs() < 2.0, "{fds}");
        assert!((u.rss_mib_per_hour.unwrap() - 60.0).abs() < 2.0);
        let flat = SelfUse::from_samples(samples.iter().map(|s| (s.0, 20, 100 << 20)).collect());
        assert_eq!(flat.fds_per_hour, Some(0.0));
        let long = SelfUse::from_samples((0..3000).map(|i| (i as f64 * 10.0, 20, 1)).collect());
        assert!(long.samples.len() <= SELF_MAX_SAMPLES);
        assert_eq!(long.samples.last().unwrap().0, 29_990.0, "the last sample is kept");
        assert!(SelfUse::from_samples(vec![(0.0, 1, 1)]).fds_per_hour.is_none());
    }

    #[test]
    fn a_language_a_tier_refuses_is_never_scheduled_on_it_and_still_on_the_others() {
        use crate::spec::Language::{Javascript, Python};
        let langs = [Python, Javascript, Python];
        let refused = vec![vec![], vec![(Javascript, "node under TCG needs seconds of CPU".to_string())]];
        let slots = schedulable(&langs, &refused);
        assert!(slots.contains(&(1, 0)), "the other tier still runs JavaScript");
        assert!(!slots.contains(&(1, 1)), "refused up front, so never a mismatch");
        assert_eq!(slots.len(), 5);
    }

    #[test]
    fn output_programs_parse_and_declare_ok() {
        for p in output_programs() {
            assert!(!p.sample.is_hostile());
            assert!(p.sample.expect_for("process").is_some(), "{}", p.sample.name);
            assert!(p.stdout + p.stderr > 0);
        }
    }
}
