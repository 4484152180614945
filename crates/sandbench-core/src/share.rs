//! The report to share (`sandbench report`): the last gauntlet, a latency
//! benchmark of every tier, the safety × latency frontier, the host's
//! responsiveness during the runs and the machine facts that matter, as one
//! record (`--format json`) and as one self-contained HTML page rendered from
//! that same record. The page loads nothing (no scripts, no network, no
//! external assets; a Content-Security-Policy says so to the browser), and
//! everything that came out of a sandbox is made inert and HTML-escaped: the
//! programs that produced it were hostile.
//!
//! Every number the page shows carries `data-json` (a JSON pointer into the
//! record) and `data-dp` (decimal places), so a test in a real browser can
//! check that the page says what the JSON says.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::compare::{self, Dist, Summary};
use crate::frontier::{self, Point};
use crate::gauntlet::{canary::HostProbe, Cell, Matrix, Verdict};
use crate::spec::{Language, RunSpec};
use crate::stats::{histogram, percentile, Bin};
use crate::tier::contract::{Availability, Tier};

/// Bytes of each output stream a cell's evidence shows.
pub const OUTPUT_SHOWN: usize = 2048;
/// Bars of each latency histogram.
pub const HIST_BINS: usize = 12;
/// The latency benchmark's program.
pub const LATENCY_PROGRAM: &str = "print(1)";

/// Spawn latency of `/bin/true` on the host (ms), summarised.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostStats {
    pub samples: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl HostStats {
    pub fn of(v: &[f64]) -> HostStats {
        let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| (!v.is_empty()).then(|| percentile(&v, p));
        HostStats { samples: v.len(), p50_ms: q(0.5), p99_ms: q(0.99), max_ms: v.last().copied() }
    }
}

/// The report's latency benchmark as kept in the state dir.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRun {
    pub summary: Summary,
    /// The host's responsiveness while the benchmark ran.
    pub host: HostStats,
}

/// `print(1)` on every tier, `repeat` interleaved rounds, one run at a time,
/// with the host probed meanwhile. Warm pools should be filled first
/// (`Tier::prewarm`): the frontier plots warm latency.
pub async fn measure_latency(
    tiers: &[Arc<dyn Tier>],
    skipped: Vec<(String, String)>,
    repeat: usize,
    limits: crate::spec::Limits,
    done: &mut (dyn FnMut(&crate::report::RunReport) + Send),
) -> LatencyRun {
    let mut spec = RunSpec::new(Language::Python, LATENCY_PROGRAM);
    spec.label = LATENCY_PROGRAM.into();
    // The configured limits: the shape warm pools were filled with.
    spec.limits = limits;
    let probe = HostProbe::start();
    let reports = compare::run(tiers, &spec, repeat, compare::Mode::Sequential, done).await;
    let host = tokio::task::spawn_blocking(move || probe.samples()).await.unwrap_or_default();
    let order: Vec<String> = tiers.iter().map(|t| t.name().to_string()).collect();
    let summary = compare::summarize(&order, &reports, compare::Mode::Sequential, repeat, &spec.label, skipped);
    LatencyRun { summary, host: HostStats::of(&host) }
}

/// One fact `doctor` reported about a tier (inert).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckFact {
    pub name: String,
    pub ok: bool,
    /// "ok", "warn" (works, as a slower or weaker fallback) or "fail".
    #[serde(default)]
    pub level: String,
    pub detail: String,
}

/// A tier as the report's probe found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierFacts {
    pub tier: String,
    pub available: bool,
    pub summary: String,
    pub checks: Vec<CheckFact>,
}

impl TierFacts {
    pub fn of(a: &Availability) -> TierFacts {
        let i = |s: &str| crate::sanitize::inert_line(s, 300);
        TierFacts {
            tier: i(&a.tier),
            available: a.available,
            summary: i(&a.summary),
            checks: a
                .checks
                .iter()
                .map(|c| CheckFact {
                    name: i(&c.name),
                    ok: c.ok,
                    level: serde_json::to_value(c.level)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    detail: i(&c.detail),
                })
                .collect(),
        }
    }
}

/// The machine the numbers were measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub os: Option<String>,
    pub kernel: String,
    pub arch: String,
    pub cpu_model: Option<String>,
    pub cpus: usize,
    pub memory_bytes: Option<u64>,
    /// "v1", "v2" or "none".
    pub cgroup: String,
    /// The microVM accelerator (KVM or TCG) as the microvm tier found it;
    /// null when that tier was not probed.
    pub accelerator: Option<String>,
    /// "tier: what" for every engine and wrapped tool the tiers named.
    pub engines: Vec<String>,
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// cgroup v2 when the unified hierarchy carries controllers at the root, v1
/// when per-controller hierarchies are mounted.
pub fn cgroup_version() -> &'static str {
    if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2"
    } else if std::path::Path::new("/sys/fs/cgroup/memory").is_dir() {
        "v1"
    } else {
        "none"
    }
}

impl Machine {
    /// This machine, with the engines and the accelerator from `tiers`.
    pub fn here(tiers: &[TierFacts]) -> Machine {
        let i = |s: &str| crate::sanitize::inert_line(s.trim(), 200);
        let os = read("/etc/os-release")
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| i(v.trim_matches('"'))));
        let uts = nix::sys::utsname::uname().ok();
        let kernel = uts.as_ref().map(|u| i(&u.release().to_string_lossy())).unwrap_or_default();
        let arch =
            uts.as_ref().map(|u| i(&u.machine().to_string_lossy())).unwrap_or_else(|| std::env::consts::ARCH.into());
        let cpu_model = read("/proc/cpuinfo").and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("model name").map(|v| i(v.trim_start_matches([' ', '\t', ':']))))
        });
        let memory_bytes = read("/proc/meminfo").and_then(|t| {
            let kb: u64 = t
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kb * 1024)
        });
        // The VM tier's probe names its accelerator (KVM or TCG) in a check
        // of that name; no other tier has one.
        let accelerator = tiers.iter().flat_map(|t| &t.checks).find(|c| c.name == "accel").map(|c| c.detail.clone());
        let mut engines = vec![];
        for t in tiers {
            for c in &t.checks {
                // The engine behind a tier: Docker's daemon, QEMU, the guest
                // kernel, a wrapped tool (its check carries the tier's name).
                if c.ok && (matches!(c.name.as_str(), "daemon" | "qemu" | "kernel" | "runtime") || c.name == t.tier) {
                    let e = format!("{}: {}", t.tier, c.detail);
                    if !engines.contains(&e) {
                        engines.push(e);
                    }
                }
            }
        }
        Machine {
            os,
            kernel,
            arch,
            cpu_model,
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            memory_bytes,
            cgroup: cgroup_version().into(),
            accelerator,
            engines,
        }
    }
}

/// A measured part of the report: when, by which sandbench, and whether it
/// was measured for this report or reused from an earlier run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section<T> {
    /// RFC 3339, UTC.
    pub measured_at: String,
    pub sandbench_version: String,
    pub reused: bool,
    pub data: T,
}

/// Seconds since 1970 as RFC 3339 (UTC).
pub fn rfc3339(secs: u64) -> String {
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| secs.to_string())
}

/// What one tier stopped in the gauntlet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSafety {
    pub tier: String,
    pub hostile: usize,
    pub contained: usize,
    pub escaped: usize,
    pub errors: usize,
    /// Benign controls that ran, of all benign controls.
    pub benign_ran: usize,
    pub benign: usize,
    /// Cells that differ from what their samples declare.
    pub mismatches: usize,
    pub degraded: usize,
    /// Hostile cells stopped by a cancel (no verdict, not in the counts above).
    #[serde(default)]
    pub cancelled: usize,
}

/// The host's responsiveness while one tier's gauntlet cells ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRow {
    pub tier: String,
    pub cells: usize,
    /// Median of the cells' median spawn times.
    pub p50_ms: Option<f64>,
    /// The worst spawn time during any cell.
    pub max_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierHistogram {
    pub tier: String,
    pub n: usize,
    pub p50_ms: Option<f64>,
    pub bins: Vec<Bin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frontier {
    pub points: Vec<Point>,
    /// Tiers without a point, and why.
    pub missing: Vec<(String, String)>,
}

/// Everything the page shows, and exactly what `--format json` prints
/// (written inert, [`crate::sanitize::inert`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Report {
    pub sandbench_version: String,
    pub generated_at: String,
    pub machine: Machine,
    pub tiers: Vec<TierFacts>,
    pub gauntlet: Option<Section<Matrix>>,
    pub safety: Vec<TierSafety>,
    pub latency: Option<Section<LatencyRun>>,
    pub histograms: Vec<TierHistogram>,
    pub host_during_gauntlet: Vec<HostRow>,
    pub frontier: Frontier,
}

crate::sanitize::inert::inert_serialize!(Report);

fn cut(s: &mut String, truncated: &mut bool) {
    if s.len() > OUTPUT_SHOWN {
        let mut end = OUTPUT_SHOWN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        *truncated = true;
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| percentile(v, 0.5))
}

/// Put the report together. `order`: the tiers in the order they were asked
/// for (others met in the data follow).
pub fn build(
    order: &[String],
    tiers: Vec<TierFacts>,
    machine: Machine,
    gauntlet: Option<Section<Matrix>>,
    latency: Option<Section<LatencyRun>>,
) -> Report {
    let mut gauntlet = gauntlet;
    if let Some(g) = &mut gauntlet {
        for c in &mut g.data.cells {
            let r = &mut c.report;
            cut(&mut r.stdout, &mut r.stdout_truncated);
            cut(&mut r.stderr, &mut r.stderr_truncated);
        }
    }
    let mut names: Vec<String> = order.to_vec();
    let mut add = |t: &String| {
        if !names.contains(t) {
            names.push(t.clone());
        }
    };
    if let Some(g) = &gauntlet {
        g.data.tiers.iter().for_each(&mut add);
    }
    if let Some(l) = &latency {
        l.data.summary.tiers.iter().for_each(|t| add(&t.tier));
    }
    let cells: Vec<&Cell> = gauntlet.iter().flat_map(|g| &g.data.cells).collect();
    let in_gauntlet = |t: &String| gauntlet.as_ref().is_some_and(|g| g.data.tiers.contains(t));
    let safety: Vec<TierSafety> = names
        .iter()
        .filter(|t| in_gauntlet(t))
        .map(|t| {
            let mine: Vec<&&Cell> = cells.iter().filter(|c| &c.tier == t).collect();
            let hostile: Vec<&&&Cell> = mine.iter().filter(|c| c.hostile).collect();
            let count = |f: fn(&Verdict) -> bool| hostile.iter().filter(|c| f(&c.verdict)).count();
            TierSafety {
                tier: t.clone(),
                hostile: hostile.len(),
                contained: count(|v| matches!(v, Verdict::Contained { .. })),
                escaped: count(|v| matches!(v, Verdict::Escaped { .. })),
                // Not seen whole: never contained (counted with the errors).
                errors: count(|v| matches!(v, Verdict::Error { .. } | Verdict::Incomplete { .. })),
                benign_ran: mine.iter().filter(|c| !c.hostile && c.verdict == Verdict::Ran).count(),
                benign: mine.iter().filter(|c| !c.hostile).count(),
                mismatches: mine.iter().filter(|c| c.is_mismatch()).count(),
                degraded: mine.iter().filter(|c| c.degraded).count(),
                cancelled: count(|v| *v == Verdict::Cancelled),
            }
        })
        .collect();
    let host_during_gauntlet = names
        .iter()
        .filter(|t| in_gauntlet(t))
        .map(|t| {
            let mine: Vec<&&Cell> = cells.iter().filter(|c| &c.tier == t).collect();
            let mut p50: Vec<f64> = mine.iter().filter_map(|c| c.findings.host_latency_ms_p50).collect();
            let max = mine.iter().filter_map(|c| c.findings.host_latency_ms_max).reduce(f64::max);
            HostRow { tier: t.clone(), cells: mine.len(), p50_ms: median(&mut p50), max_ms: max }
        })
        .collect();
    let histograms = latency
        .iter()
        .flat_map(|l| &l.data.summary.tiers)
        .map(|t| TierHistogram {
            tier: t.tier.clone(),
            n: t.exit_samples_ms.len(),
            p50_ms: t.exit_ms.as_ref().map(|d| d.p50),
            bins: histogram(&t.exit_samples_ms, HIST_BINS),
        })
        .collect();
    // x is the latency benchmark's print(1); a tier it did not measure falls
    // back to the gauntlet's benign controls (and the point says which start).
    // In that order of preference: a point takes one source, and says which.
    let mut obs = vec![];
    if let Some(l) = &latency {
        obs.extend(frontier::obs_of_compare(&l.data.summary, "benchmark"));
    }
    if let Some(g) = &gauntlet {
        obs.extend(frontier::obs_of_gauntlet(&g.data.latency));
    }
    let (points, mut missing) = frontier::points(&names, cells.iter().copied(), &obs);
    // A tier that was not available says so, not "no sample ran on it".
    for (t, why) in &mut missing {
        if let Some(f) = tiers.iter().find(|f| &f.tier == t && !f.available) {
            why.clone_from(&f.summary);
        }
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Report {
        sandbench_version: env!("CARGO_PKG_VERSION").into(),
        generated_at: rfc3339(now),
        machine,
        tiers,
        gauntlet,
        safety,
        latency,
        histograms,
        host_during_gauntlet,
        frontier: Frontier { points, missing },
    }
}

pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

// ---- HTML ----------------------------------------------------------------

/// One line of untrusted text, inert and escaped.
pub fn esc(s: &str) -> String {
    crate::sanitize::inert::html_text(s, 400)
}

/// A block of untrusted output (kept lines), inert and escaped.
pub fn esc_block(s: &str) -> String {
    crate::sanitize::inert::html_block(s)
}

fn fmt_num(v: f64, dp: usize) -> String {
    format!("{v:.dp$}")
}

/// A number the browser test checks against the JSON at `ptr`.
fn num(ptr: &str, v: Option<f64>, dp: usize) -> String {
    let text = v.map(|v| fmt_num(v, dp)).unwrap_or_else(|| "—".into());
    format!(
        "<span class=\"n\" data-json=\"{}\" data-dp=\"{dp}\">{text}</span>",
        crate::sanitize::inert::escape_markup(ptr)
    )
}

fn int(ptr: &str, v: usize) -> String {
    num(ptr, Some(v as f64), 0)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

const CSS: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;\
padding:0 16px;color:#1b1f24;background:#fff}h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;\
border-bottom:1px solid #d0d7de;padding-bottom:4px}table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid \
#d0d7de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}td.r,th.r{text-align:right}\
.muted{color:#57606a}.ok{background:#dafbe1}.bad{background:#ffebe9}.err{background:#fff8c5}.deg{outline:2px solid \
#bf8700}a.cell{color:inherit;text-decoration:none;display:block}pre{background:#f6f8fa;padding:6px;overflow:auto;\
max-height:240px;white-space:pre-wrap;word-break:break-all;margin:4px 0}details{margin:4px 0;border:1px solid #d0d7de;\
padding:4px 8px;border-radius:4px}summary{cursor:pointer}.grid{display:flex;flex-wrap:wrap;gap:12px}.matrix td{font-size:\
12px;min-width:90px}.scroll{overflow-x:auto}.note{font-size:12px}";

/// The whole page.
pub fn html(r: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>sandbench report — {}</title><style>{CSS}</style></head><body>\n",
        esc(&r.generated_at)
    );
    let _ = writeln!(
        h,
        "<h1>sandbench report</h1><p class=\"muted\">generated {} by sandbench {} · what each sandbox stops, what it \
costs, on this machine</p>",
        esc(&r.generated_at),
        esc(&r.sandbench_version)
    );
    frontier_section(&mut h, r);
    gauntlet_section(&mut h, r);
    latency_section(&mut h, r);
    host_section(&mut h, r);
    machine_section(&mut h, r);
    h.push_str("</body></html>\n");
    h
}

fn provenance<T>(s: &Section<T>) -> String {
    format!(
        "measured {} by sandbench {}{}",
        esc(&s.measured_at),
        esc(&s.sandbench_version),
        if s.reused { " (reused: the last one kept in the state dir)" } else { " for this report" }
    )
}

fn frontier_section(h: &mut String, r: &Report) {
    h.push_str("<h2 id=\"frontier\">Safety × latency</h2>\n");
    h.push_str(
        "<p>One point per tier: x the warm p50 time from start to exit of <code>print(1)</code> in the latency \
benchmark below (log scale; the start kind with the most runs when a tier has no warm start; the gauntlet's benign \
controls for a tier the benchmark did not measure, and the table says so), y the share of the gauntlet's hostile \
samples it contained of those judged (an escape counts against it; a cell stopped by a cancel or that sandbench \
failed to judge is left out, and counted). Up and to the left is better.</p>\n",
    );
    h.push_str(&frontier::svg(&r.frontier.points));
    h.push_str(
        "<table><tr><th>tier</th><th class=\"r\">latency (ms)</th><th>start</th><th class=\"r\">runs</th>\
<th>measured by</th><th class=\"r\">contained</th><th class=\"r\">judged</th><th class=\"r\">left out</th>\
<th class=\"r\">share (%)</th></tr>\n",
    );
    for (i, p) in r.frontier.points.iter().enumerate() {
        let b = format!("/frontier/points/{i}");
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"r\">{}</td><td>{}</td><td class=\"r\">{}</td><td>{}</td>\
<td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td></tr>",
            esc(&p.tier),
            num(&format!("{b}/latency_ms"), Some(p.latency_ms), 1),
            esc(&p.start),
            int(&format!("{b}/runs"), p.runs),
            esc(&p.source),
            int(&format!("{b}/contained"), p.contained),
            int(&format!("{b}/hostile"), p.hostile),
            p.left_out(),
            format_args!("{:.1}", p.share * 100.0),
        );
    }
    h.push_str("</table>\n");
    for (t, why) in &r.frontier.missing {
        let _ = writeln!(h, "<p class=\"note\">no point for {}: {}</p>", esc(t), esc(why));
    }
}

fn verdict_class(c: &Cell) -> &'static str {
    match c.verdict {
        Verdict::Escaped { .. } | Verdict::Incomplete { .. } => "bad",
        Verdict::Error { .. } | Verdict::Cancelled | Verdict::NotAvailable { .. } => "err",
        _ if !c.as_expected => "bad",
        _ => "ok",
    }
}

fn gauntlet_section(h: &mut String, r: &Report) {
    h.push_str("<h2 id=\"gauntlet\">The gauntlet</h2>\n");
    let Some(g) = &r.gauntlet else {
        h.push_str("<p>No gauntlet: this report has no safety figures.</p>\n");
        return;
    };
    let m = &g.data;
    // Say what was run, not "every sample": a gauntlet may have run a
    // subset (`--samples`, a cancel) or fewer tiers than exist.
    let kind = |hostile: bool| {
        m.samples
            .iter()
            .filter(|s| m.cells.iter().find(|c| &c.sample == *s).is_some_and(|c| c.hostile == hostile))
            .count()
    };
    let (hostile, benign) = (kind(true), kind(false));
    let _ = writeln!(
        h,
        "<p class=\"muted\">{} · {hostile} hostile sample{}, and {benign} benign one{} as a control, on {} tier{}{}; \
judged by host-side canaries, never by what the program says. Select a cell for its evidence.</p>",
        provenance(g),
        if hostile == 1 { "" } else { "s" },
        if benign == 1 { "" } else { "s" },
        m.tiers.len(),
        if m.tiers.len() == 1 { "" } else { "s" },
        if m.cancelled { " (stopped before every cell ran: partial)" } else { "" },
    );
    h.push_str(
        "<table><tr><th>tier</th><th class=\"r\">hostile</th><th class=\"r\">contained</th><th class=\"r\">escaped</th>\
<th class=\"r\">errors</th><th class=\"r\">benign ran</th><th class=\"r\">differ from declared</th>\
<th class=\"r\">degraded</th></tr>\n",
    );
    for (i, s) in r.safety.iter().enumerate() {
        let b = format!("/safety/{i}");
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td>\
<td class=\"r\">{} of {}</td><td class=\"r\">{}</td><td class=\"r\">{}</td></tr>",
            esc(&s.tier),
            int(&format!("{b}/hostile"), s.hostile),
            int(&format!("{b}/contained"), s.contained),
            int(&format!("{b}/escaped"), s.escaped),
            int(&format!("{b}/errors"), s.errors),
            int(&format!("{b}/benign_ran"), s.benign_ran),
            int(&format!("{b}/benign"), s.benign),
            int(&format!("{b}/mismatches"), s.mismatches),
            int(&format!("{b}/degraded"), s.degraded),
        );
    }
    h.push_str("</table>\n<div class=\"scroll\"><table class=\"matrix\"><tr><th>program</th>");
    for t in &m.tiers {
        let _ = write!(h, "<th>{}</th>", esc(t));
    }
    h.push_str("</tr>\n");
    let index = |s: &str, t: &str| m.cells.iter().position(|c| c.sample == s && c.tier == t);
    for s in &m.samples {
        let control = m.cells.iter().find(|c| &c.sample == s).is_some_and(|c| !c.hostile);
        let _ = write!(
            h,
            "<tr><td>{}{}</td>",
            esc(s),
            if control { " <span class=\"muted\">(control)</span>" } else { "" }
        );
        for t in &m.tiers {
            match index(s, t) {
                None => h.push_str("<td class=\"muted\">—</td>"),
                Some(i) => {
                    let c = &m.cells[i];
                    let _ = write!(
                        h,
                        "<td class=\"{}{}\"><a class=\"cell\" href=\"#cell-{i}\">{}{}{}</a></td>",
                        verdict_class(c),
                        if c.degraded { " deg" } else { "" },
                        esc(&c.verdict.short()),
                        if c.degraded { " ⚠ DEGRADED" } else { "" },
                        if c.is_mismatch() { " ✗" } else { "" },
                    );
                }
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table></div>\n");
    let _ = writeln!(
        h,
        "<p>{} of {} cells differ from what the samples declare (✗).</p>",
        int("/gauntlet/data/mismatches", m.mismatches),
        m.cells.len()
    );
    if m.cancelled {
        let _ = writeln!(
            h,
            "<p class=\"note\">This gauntlet was cancelled before its end: {} cell(s) stopped without a verdict, \
the rest never ran.</p>",
            m.cancelled_cells()
        );
    }
    for (t, why) in &m.skipped_tiers {
        let _ = writeln!(h, "<p class=\"note\">skipped {}: {}</p>", esc(t), esc(why));
    }
    h.push_str("<h3>Evidence</h3>\n");
    for (i, c) in m.cells.iter().enumerate() {
        evidence(h, i, c);
    }
}

fn evidence(h: &mut String, i: usize, c: &Cell) {
    let b = format!("/gauntlet/data/cells/{i}");
    let rep = &c.report;
    let _ = write!(
        h,
        "<details id=\"cell-{i}\"><summary>{} on {} — <b>{}</b>{}</summary>",
        esc(&c.sample),
        esc(&c.tier),
        esc(&c.verdict.short()),
        if c.is_mismatch() { " ✗" } else { "" }
    );
    h.push_str("<table>");
    let row = |h: &mut String, k: &str, v: String| {
        let _ = write!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    row(h, "expected", c.expected.as_deref().map(esc).unwrap_or_else(|| "nothing declared".into()));
    row(
        h,
        "got",
        format!(
            "{}{}",
            esc(rep.outcome.name()),
            c.mismatch.as_deref().map(|m| format!(" — differs: {}", esc(m))).unwrap_or_default()
        ),
    );
    if let Verdict::Escaped { what } = &c.verdict {
        row(h, "escaped", what.iter().map(|w| esc(w)).collect::<Vec<_>>().join("<br>"));
    }
    if let Verdict::Error { why } = &c.verdict {
        row(h, "error", esc(why));
    }
    if let Verdict::Incomplete { bounds } = &c.verdict {
        row(h, "incomplete", bounds.iter().map(|b| esc(b)).collect::<Vec<_>>().join("<br>"));
    }
    let viol: Vec<String> = rep
        .violations
        .iter()
        .enumerate()
        .map(|(j, v)| {
            format!(
                "{} at {} ms: {}",
                esc(v.kind.name()),
                num(&format!("{b}/report/violations/{j}/at_ms"), Some(v.at_ms), 1),
                esc(&v.detail)
            )
        })
        .collect();
    row(h, "violations", if viol.is_empty() { "none".into() } else { viol.join("<br>") });
    row(h, "exit", esc(&rep.exit.describe()));
    let t = &rep.timings_ms;
    row(
        h,
        "timings (ms)",
        format!(
            "setup {} · first output {} · run {} · teardown {} · total {} · {} start",
            num(&format!("{b}/report/timings_ms/setup"), Some(t.setup), 1),
            num(&format!("{b}/report/timings_ms/first_output"), t.first_output, 1),
            num(&format!("{b}/report/timings_ms/run"), Some(t.run), 1),
            num(&format!("{b}/report/timings_ms/teardown"), Some(t.teardown), 1),
            num(&format!("{b}/report/timings_ms/total"), Some(t.total), 1),
            esc(&c.start)
        ),
    );
    let u = &rep.usage;
    row(
        h,
        "usage",
        format!(
            "cpu {} ms · peak memory {} bytes · peak processes {}",
            num(&format!("{b}/report/usage/cpu_ms"), u.cpu_ms.map(|v| v as f64), 0),
            num(&format!("{b}/report/usage/peak_memory_bytes"), u.peak_memory_bytes.map(|v| v as f64), 0),
            num(&format!("{b}/report/usage/peak_pids"), u.peak_pids.map(|v| v as f64), 0),
        ),
    );
    let f = &c.findings;
    row(
        h,
        "host during the run",
        format!(
            "spawning /bin/true: p50 {} ms, worst {} ms",
            num(&format!("{b}/findings/host_latency_ms_p50"), f.host_latency_ms_p50, 1),
            num(&format!("{b}/findings/host_latency_ms_max"), f.host_latency_ms_max, 1)
        ),
    );
    if !f.planted.is_empty() {
        row(h, "canaries planted", f.planted.iter().map(|p| esc(p)).collect::<Vec<_>>().join("<br>"));
    }
    if !rep.degraded.is_empty() {
        row(h, "DEGRADED", rep.degraded.iter().map(|d| esc(d)).collect::<Vec<_>>().join("<br>"));
    }
    if let Some(e) = &rep.error {
        row(h, "sandbench error", esc(e));
    }
    h.push_str("</table>");
    for (name, text, cut) in
        [("stdout", &rep.stdout, rep.stdout_truncated), ("stderr", &rep.stderr, rep.stderr_truncated)]
    {
        if !text.is_empty() {
            let _ = write!(
                h,
                "<div class=\"muted\">{name}{} (shown inert):</div><pre>{}</pre>",
                if cut { ", first bytes only" } else { "" },
                esc_block(text)
            );
        }
    }
    h.push_str("</details>\n");
}

fn latency_section(h: &mut String, r: &Report) {
    h.push_str("<h2 id=\"latency\">Latency</h2>\n");
    let Some(l) = &r.latency else {
        h.push_str("<p>No latency benchmark in this report.</p>\n");
        return;
    };
    let s = &l.data.summary;
    let _ = writeln!(
        h,
        "<p class=\"muted\">{} · <code>{}</code> on every tier, {} round(s) interleaved, one tier at a time; times in \
ms from the run's start.</p>",
        provenance(l),
        esc(&s.program),
        int("/latency/data/summary/repeat", s.repeat)
    );
    h.push_str(
        "<table><tr><th>tier</th><th class=\"r\">runs</th><th>starts</th><th class=\"r\">first output p50</th>\
<th class=\"r\">p95</th><th class=\"r\">exit p50</th><th class=\"r\">p95</th><th class=\"r\">min</th>\
<th class=\"r\">max</th><th class=\"r\">× fastest</th><th class=\"r\">cpu p50 (ms)</th><th class=\"r\">peak memory \
(bytes)</th><th>verdict</th></tr>\n",
    );
    for (i, t) in s.tiers.iter().enumerate() {
        let b = format!("/latency/data/summary/tiers/{i}");
        // An unmeasured distribution is null itself, not a null field.
        let d = |k: &str, x: &Option<Dist>, f: fn(&Dist) -> f64, name: &str| match x {
            Some(x) => num(&format!("{b}/{k}/{name}"), Some(f(x)), 1),
            None => num(&format!("{b}/{k}"), None, 1),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"r\">{}</td><td>{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td>\
<td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td>\
<td class=\"r\">{}</td><td class=\"r\">{}</td><td>{}</td></tr>",
            esc(&t.tier),
            int(&format!("{b}/runs"), t.runs),
            esc(&t.starts_line()),
            d("first_output_ms", &t.first_output_ms, |d| d.p50, "p50"),
            d("first_output_ms", &t.first_output_ms, |d| d.p95, "p95"),
            d("exit_ms", &t.exit_ms, |d| d.p50, "p50"),
            d("exit_ms", &t.exit_ms, |d| d.p95, "p95"),
            d("exit_ms", &t.exit_ms, |d| d.min, "min"),
            d("exit_ms", &t.exit_ms, |d| d.max, "max"),
            num(&format!("{b}/ratio_to_fastest"), t.ratio_to_fastest, 2),
            num(&format!("{b}/cpu_ms_p50"), t.cpu_ms_p50, 0),
            num(&format!("{b}/peak_memory_bytes"), t.peak_memory_bytes.map(|v| v as f64), 0),
            esc(&t.verdict()),
        );
    }
    h.push_str("</table>\n");
    for (t, why) in &s.skipped {
        let _ = writeln!(h, "<p class=\"note\">unavailable {}: {}</p>", esc(t), esc(why));
    }
    for t in s.tiers.iter().filter_map(|t| t.error.as_ref().map(|e| (t, e))) {
        let _ = writeln!(h, "<p class=\"note\">{}: error: {}</p>", esc(&t.0.tier), esc(t.1));
    }
    h.push_str("<h3>Distributions: time to exit per tier</h3>\n<div class=\"grid\">\n");
    for (i, hist) in r.histograms.iter().enumerate() {
        h.push_str(&histogram_svg(hist, i));
    }
    h.push_str("</div>\n");
}

/// One tier's histogram (oha's, drawn): bars of equal width from the fastest
/// to the slowest run, the p50 marked.
pub fn histogram_svg(t: &TierHistogram, i: usize) -> String {
    let (w, hgt) = (340.0, 180.0);
    let (ml, mr, mt, mb) = (36.0, 12.0, 24.0, 34.0);
    let (pw, ph) = (w - ml - mr, hgt - mt - mb);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {hgt}\" width=\"{w}\" height=\"{hgt}\" role=\"img\" \
aria-label=\"time to exit on {}\" font-family=\"sans-serif\" font-size=\"11\" class=\"hist\">\
<rect width=\"{w}\" height=\"{hgt}\" fill=\"#ffffff\" stroke=\"#d0d7de\"/>\
<text x=\"{ml}\" y=\"15\" font-weight=\"bold\">{} · <tspan data-json=\"/histograms/{i}/n\" data-dp=\"0\">{}</tspan> runs</text>",
        esc(&t.tier),
        esc(&t.tier),
        t.n
    );
    let max = t.bins.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let bw = pw / t.bins.len().max(1) as f64;
    for (j, b) in t.bins.iter().enumerate() {
        let bh = ph * b.count as f64 / max as f64;
        let _ = write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#1f6feb\"><title>{:.1}–{:.1} ms: {} run(s)</title></rect>",
            ml + bw * j as f64 + 1.0,
            mt + ph - bh,
            (bw - 2.0).max(1.0),
            bh,
            b.lo_ms,
            b.hi_ms,
            b.count
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{ml}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{max}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
        mt + ph,
        ml + pw,
        mt + ph,
        ml - 4.0,
        mt + 8.0,
        ml - 4.0,
        mt + ph
    );
    if let (Some(first), Some(last)) = (t.bins.first(), t.bins.last()) {
        let _ = write!(
            s,
            "<text x=\"{ml}\" y=\"{:.1}\">{:.1} ms</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.1} ms</text>",
            mt + ph + 14.0,
            first.lo_ms,
            ml + pw,
            mt + ph + 14.0,
            last.hi_ms
        );
        if let Some(p50) = t.p50_ms {
            let span = (last.hi_ms - first.lo_ms).max(f64::EPSILON);
            let x = if t.bins.len() == 1 { ml + pw / 2.0 } else { ml + (p50 - first.lo_ms) / span * pw };
            let _ = write!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{mt}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#cf222e\" stroke-dasharray=\"3 2\"/>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#cf222e\">p50 {p50:.1} ms</text>",
                mt + ph,
                x.clamp(ml + 30.0, ml + pw - 30.0),
                mt + ph + 28.0
            );
        }
    } else {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no run finished</text>",
            w / 2.0,
            hgt / 2.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn host_section(h: &mut String, r: &Report) {
    h.push_str(
        "<h2 id=\"host\">Host responsiveness during the runs</h2>\n<p class=\"muted\">The time to spawn \
<code>/bin/true</code> on the host, every 50 ms, while sandboxes ran: a sandbox that holds the machine hostage \
shows here.</p>\n<table><tr><th>during</th><th class=\"r\">samples</th><th class=\"r\">p50 (ms)</th>\
<th class=\"r\">p99 (ms)</th><th class=\"r\">worst (ms)</th></tr>\n",
    );
    if let Some(l) = &r.latency {
        let x = &l.data.host;
        let b = "/latency/data/host";
        let _ = writeln!(
            h,
            "<tr><td>the latency benchmark</td><td class=\"r\">{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td>\
<td class=\"r\">{}</td></tr>",
            int(&format!("{b}/samples"), x.samples),
            num(&format!("{b}/p50_ms"), x.p50_ms, 1),
            num(&format!("{b}/p99_ms"), x.p99_ms, 1),
            num(&format!("{b}/max_ms"), x.max_ms, 1),
        );
    }
    for (i, x) in r.host_during_gauntlet.iter().enumerate() {
        let b = format!("/host_during_gauntlet/{i}");
        let _ = writeln!(
            h,
            "<tr><td>the gauntlet on {} ({} cells; p50 is the median of the cells' medians)</td><td class=\"r\">—</td>\
<td class=\"r\">{}</td><td class=\"r\">—</td><td class=\"r\">{}</td></tr>",
            esc(&x.tier),
            int(&format!("{b}/cells"), x.cells),
            num(&format!("{b}/p50_ms"), x.p50_ms, 1),
            num(&format!("{b}/max_ms"), x.max_ms, 1),
        );
    }
    h.push_str("</table>\n");
}

fn machine_section(h: &mut String, r: &Report) {
    let m = &r.machine;
    h.push_str("<h2 id=\"machine\">The machine</h2>\n<table>\n");
    let row = |h: &mut String, k: &str, v: String| {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    row(h, "sandbench", esc(&r.sandbench_version));
    row(h, "system", m.os.as_deref().map(esc).unwrap_or_else(|| "—".into()));
    row(h, "kernel", format!("Linux {} ({})", esc(&m.kernel), esc(&m.arch)));
    row(
        h,
        "processor",
        format!(
            "{} × {}",
            int("/machine/cpus", m.cpus),
            m.cpu_model.as_deref().map(esc).unwrap_or_else(|| "unknown model".into())
        ),
    );
    row(h, "memory", m.memory_bytes.map(mib).unwrap_or_else(|| "—".into()));
    row(h, "cgroups", esc(&m.cgroup));
    row(
        h,
        "microVM accelerator",
        m.accelerator.as_deref().map(esc).unwrap_or_else(|| "not probed (no microvm tier in this report)".into()),
    );
    row(
        h,
        "engines",
        if m.engines.is_empty() {
            "—".into()
        } else {
            m.engines.iter().map(|e| esc(e)).collect::<Vec<_>>().join("<br>")
        },
    );
    h.push_str("</table>\n<h3>Tiers as probed for this report</h3>\n");
    for t in &r.tiers {
        let _ = write!(
            h,
            "<details><summary>{} — {}</summary><table>",
            esc(&t.tier),
            if t.available {
                format!("ready: {}", esc(&t.summary))
            } else {
                format!("unavailable: {}", esc(&t.summary))
            }
        );
        for c in &t.checks {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                match (c.ok, c.level.as_str()) {
                    (true, "warn") => "⚠",
                    (true, _) => "✔",
                    (false, _) => "✖",
                },
                esc(&c.name),
                esc(&c.detail)
            );
        }
        h.push_str("</table></details>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gauntlet::canary::Findings;
    use crate::report::{Outcome, RunReport};

    fn matrix() -> Matrix {
        let hostile = crate::samples::Sample::parse(
            std::path::Path::new("hostile/x.py"),
            "# name: <img src=x onerror=alert(1)>\n# tries: x\n# must: y\n# expect: *=violation:memory\nprint(1)\n"
                .into(),
        )
        .unwrap();
        let mut r = RunReport::failed("process", "python", "x", "");
        r.outcome = Outcome::Violation;
        r.error = None;
        r.stdout = format!("<script>alert('x')</script>\x1b]52;c;aGk=\x07\u{202E}{}", "y".repeat(OUTPUT_SHOWN * 2));
        r.violations.push(crate::event::Violation {
            kind: crate::event::ViolationKind::Memory,
            at_ms: 12.25,
            detail: "memory limit hit <b>".into(),
        });
        let findings =
            Findings { host_latency_ms_p50: Some(1.5), host_latency_ms_max: Some(9.0), ..Default::default() };
        let cell = crate::gauntlet::judge(&hostile, "process", r, findings);
        Matrix {
            tiers: vec!["process".into()],
            skipped_tiers: vec![],
            samples: vec![cell.sample.clone()],
            cells: vec![cell],
            latency: vec![],
            mismatches: 0,
            cancelled: false,
            scales: vec![],
        }
    }

    fn latency() -> LatencyRun {
        let mut reports = vec![];
        for ms in [10.0, 12.0, 30.0] {
            let mut r = RunReport::failed("process", "python", "print(1)", "");
            r.outcome = Outcome::Ok;
            r.error = None;
            r.timings_ms.run = ms;
            r.details = serde_json::json!({"start": "warm"});
            reports.push(r);
        }
        let summary =
            compare::summarize(&["process".into()], &reports, compare::Mode::Sequential, 3, "print(1)", vec![]);
        LatencyRun { summary, host: HostStats::of(&[1.0, 2.0, 50.0]) }
    }

    fn section<T>(data: T) -> Section<T> {
        Section { measured_at: rfc3339(0), sandbench_version: "x".into(), reused: true, data }
    }

    #[test]
    fn the_page_is_inert_self_contained_and_says_what_the_record_says() {
        let tiers = vec![TierFacts {
            tier: "process".into(),
            available: true,
            summary: "ready".into(),
            checks: vec![CheckFact { name: "cgroup".into(), ok: true, level: "ok".into(), detail: "v1".into() }],
        }];
        let machine = Machine::here(&tiers);
        let r = build(&["process".into()], tiers, machine, Some(section(matrix())), Some(section(latency())));
        assert_eq!(r.frontier.points.len(), 1, "{:?}", r.frontier);
        assert_eq!((r.frontier.points[0].latency_ms, r.frontier.points[0].contained), (12.0, 1));
        assert_eq!(r.safety[0].contained, 1);
        assert_eq!(r.host_during_gauntlet[0].max_ms, Some(9.0));
        assert_eq!(r.histograms[0].bins.iter().map(|b| b.count).sum::<usize>(), 3);
        assert!(r.gauntlet.as_ref().unwrap().data.cells[0].report.stdout.len() <= OUTPUT_SHOWN);
        let page = html(&r);
        // Nothing from the sandbox acts: no markup, no escapes, no reordering.
        assert!(!page.contains("<script") && !page.contains("<img"), "markup got through");
        assert!(!page.contains('\x1b') && !page.contains('\x07') && !page.contains('\u{202E}'));
        assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;␛]52;c;aGk=^G&lt;U+202E&gt;"));
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
        // It says what ran (one sample on one tier), never "every sample".
        assert!(page.contains("1 hostile sample, and 0 benign ones as a control, on 1 tier;"), "the gauntlet's count");
        assert!(!page.contains("every hostile sample"));
        // Nothing loads from anywhere.
        for bad in ["http://", "https://", "src=\"", "<link", "url("] {
            let hits: Vec<&str> = page.matches(bad).collect();
            let allowed = bad == "http://" && hits.len() == page.matches("http://www.w3.org/2000/svg").count();
            assert!(hits.is_empty() || allowed, "{bad} in the page");
        }
        // Every tagged number is the record's, formatted as the page says.
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        let mut checked = 0;
        for part in page.split("data-json=\"").skip(1) {
            let ptr = &part[..part.find('"').unwrap()];
            let dp: usize = part.split("data-dp=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            let text = &part[part.find('>').unwrap() + 1..part.find('<').unwrap()];
            let want = match v.pointer(ptr) {
                Some(serde_json::Value::Number(n)) => fmt_num(n.as_f64().unwrap(), dp),
                Some(serde_json::Value::Null) => "—".into(),
                other => panic!("{ptr}: {other:?}"),
            };
            assert_eq!(text, want, "{ptr}");
            checked += 1;
        }
        assert!(checked > 30, "{checked}");
    }

    #[test]
    fn a_report_without_measurements_says_so() {
        let r = build(&["process".into()], vec![], Machine::here(&[]), None, None);
        let page = html(&r);
        assert!(page.contains("No gauntlet") && page.contains("No latency benchmark"));
        assert!(r.frontier.points.is_empty());
    }

    #[test]
    fn host_stats_and_time() {
        let s = HostStats::of(&[3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!((s.samples, s.p50_ms, s.max_ms), (3, Some(2.0), Some(3.0)));
        assert_eq!(HostStats::of(&[]).p50_ms, None);
        assert_eq!(rfc3339(86_400), "1970-01-02T00:00:00Z");
    }
}
