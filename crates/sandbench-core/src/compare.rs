//! The compare engine shared by `sandbench compare`, the workbench's compare
//! view and `sandbench report`: one program on several tiers, one tier after
//! another by default (tiers running side by side slow each other down: hello
//! on process took 93–119 ms inside an all-at-once compare against 21 ms
//! alone), repeated in interleaved rounds so that machine noise hits every
//! tier alike, and summarised per tier as distributions, not single runs.
//! Renderers return strings (markdown, CSV, JSON); front ends print them.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};

use crate::report::{Outcome, RunReport};
use crate::runner;
use crate::spec::RunSpec;
use crate::stats::percentile;
use crate::tier::contract::Tier;

/// How the tiers of one round run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Mode {
    /// One run at a time: the timings are each tier's own.
    Sequential,
    /// Every tier of a round at once: quicker, but the tiers compete for the
    /// machine, so the timings are skewed (and labelled so).
    Concurrent,
}

impl Mode {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// The order of the runs: `repeat` rounds, each with every tier once. Each
/// round starts one tier later than the one before, so no tier always runs
/// first (right after the previous round's last, with the caches of another).
pub fn schedule(tiers: &[String], repeat: usize) -> Vec<(usize, String)> {
    let n = tiers.len();
    let mut out = Vec::with_capacity(n * repeat);
    for round in 0..repeat {
        for i in 0..n {
            out.push((round, tiers[(round + i) % n].clone()));
        }
    }
    out
}

/// Run `spec` on `tiers`, `repeat` rounds. `done(report)` after each run
/// (progress). Reports come back in the order they finished.
pub async fn run(
    tiers: &[Arc<dyn Tier>],
    spec: &RunSpec,
    repeat: usize,
    mode: Mode,
    done: &mut (dyn FnMut(&RunReport) + Send),
) -> Vec<RunReport> {
    let mut reports = vec![];
    let names: Vec<String> = tiers.iter().map(|t| t.name().to_string()).collect();
    let by_name = |n: &str| tiers.iter().find(|t| t.name() == n).cloned();
    match mode {
        Mode::Sequential => {
            for (_, name) in schedule(&names, repeat.max(1)) {
                let Some(t) = by_name(&name) else { continue };
                let r = runner::run(t, spec.clone()).await;
                done(&r);
                reports.push(r);
            }
        }
        Mode::Concurrent => {
            for _ in 0..repeat.max(1) {
                let round = join_all(tiers.iter().map(|t| runner::run(t.clone(), spec.clone()))).await;
                for r in round {
                    done(&r);
                    reports.push(r);
                }
            }
        }
    }
    reports
}

/// Nearest-rank percentiles and the range of a set of times (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub p50: f64,
    pub p95: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Dist {
    /// `None` for no samples: nothing was measured, which is not zero.
    pub fn of(v: &[f64]) -> Option<Dist> {
        let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Dist { p50: percentile(&v, 0.5), p95: percentile(&v, 0.95), min: v[0], max: v[v.len() - 1], n: v.len() })
    }
}

/// One tier's runs, summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSummary {
    pub tier: String,
    pub runs: usize,
    /// Run start → first byte of output; null when no run printed anything.
    pub first_output_ms: Option<Dist>,
    /// Run start → the program's exit (setup + run; teardown excluded).
    pub exit_ms: Option<Dist>,
    /// Every run's time to exit, in run order (the histogram's data).
    pub exit_samples_ms: Vec<f64>,
    /// Runs per start kind as the tier reported it ("cold", "warm",
    /// "snapshot"; "unknown" when the tier did not say).
    pub starts: BTreeMap<String, usize>,
    /// p50 time to exit per start kind (the frontier uses the warm one).
    pub exit_p50_by_start_ms: BTreeMap<String, f64>,
    /// p50 time to exit over the fastest tier's; null when not measured.
    pub ratio_to_fastest: Option<f64>,
    /// p50 CPU time of the runs that measured it; null when none did.
    pub cpu_ms_p50: Option<f64>,
    /// Highest peak memory of the runs that measured it; null when none did.
    pub peak_memory_bytes: Option<u64>,
    /// Runs per outcome ("ok", "violation", ...).
    pub outcomes: BTreeMap<String, usize>,
    /// Violation kinds seen, each once.
    pub violations: Vec<String>,
    /// The first error, when a run failed.
    pub error: Option<String>,
}

impl TierSummary {
    /// "ok", or "ok 4 · violation 1 (memory)".
    pub fn verdict(&self) -> String {
        let mut s = if self.outcomes.len() == 1 {
            self.outcomes.keys().next().cloned().unwrap_or_default()
        } else {
            self.outcomes.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(" · ")
        };
        if !self.violations.is_empty() {
            s.push_str(&format!(" ({})", self.violations.join(",")));
        }
        s
    }

    /// "3 cold / 2 warm".
    pub fn starts_line(&self) -> String {
        self.starts.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(" / ")
    }
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mode: Mode,
    pub repeat: usize,
    /// What was run (file or sample name).
    pub program: String,
    pub tiers: Vec<TierSummary>,
    /// Tiers asked for but not available: (tier, why).
    pub skipped: Vec<(String, String)>,
}

/// "cold", "warm", "snapshot", or "unknown" when the tier did not say.
pub fn start_of(r: &RunReport) -> String {
    r.details
        .get("start")
        .and_then(|s| s.as_str())
        .map(|s| crate::sanitize::inert_line(s, 16))
        .unwrap_or_else(|| "unknown".into())
}

/// Start of the run → the program's exit.
pub fn exit_ms(r: &RunReport) -> f64 {
    r.timings_ms.setup + r.timings_ms.run
}

/// Summarise `reports` per tier, tiers in the order of `tiers` (then any
/// other tier met in the reports). Runs that failed (outcome error) count in
/// the outcomes but not in the timings: they measured sandbench failing.
pub fn summarize(
    tiers: &[String],
    reports: &[RunReport],
    mode: Mode,
    repeat: usize,
    program: &str,
    skipped: Vec<(String, String)>,
) -> Summary {
    let mut order: Vec<String> = tiers.to_vec();
    for r in reports {
        if !order.contains(&r.tier) {
            order.push(r.tier.clone());
        }
    }
    let mut out: Vec<TierSummary> = order
        .iter()
        .map(|t| {
            let runs: Vec<&RunReport> = reports.iter().filter(|r| &r.tier == t).collect();
            let timed: Vec<&RunReport> = runs.iter().copied().filter(|r| r.outcome != Outcome::Error).collect();
            let first: Vec<f64> = timed.iter().filter_map(|r| r.timings_ms.first_output).collect();
            let exit: Vec<f64> = timed.iter().map(|r| exit_ms(r)).collect();
            let cpu: Vec<f64> = timed.iter().filter_map(|r| r.usage.cpu_ms).map(|c| c as f64).collect();
            let mut starts = BTreeMap::new();
            let mut by_start: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for r in &timed {
                by_start.entry(start_of(r)).or_default().push(exit_ms(r));
            }
            let mut outcomes = BTreeMap::new();
            let mut violations: Vec<String> = vec![];
            for r in &runs {
                *starts.entry(start_of(r)).or_insert(0) += 1;
                *outcomes.entry(r.outcome.name().to_string()).or_insert(0) += 1;
                for v in &r.violations {
                    let k = v.kind.name().to_string();
                    if !violations.contains(&k) {
                        violations.push(k);
                    }
                }
            }
            TierSummary {
                tier: t.clone(),
                runs: runs.len(),
                first_output_ms: Dist::of(&first),
                exit_ms: Dist::of(&exit),
                exit_samples_ms: exit,
                starts,
                exit_p50_by_start_ms: by_start.into_iter().filter_map(|(k, v)| Some((k, Dist::of(&v)?.p50))).collect(),
                ratio_to_fastest: None,
                cpu_ms_p50: Dist::of(&cpu).map(|d| d.p50),
                // No program that ran has a peak of zero bytes: a zero is a
                // tier that did not measure, shown as unknown.
                peak_memory_bytes: timed.iter().filter_map(|r| r.usage.peak_memory_bytes).filter(|b| *b > 0).max(),
                outcomes,
                violations,
                error: runs.iter().find_map(|r| r.error.as_deref()).map(|e| crate::sanitize::inert_line(e, 200)),
            }
        })
        .collect();
    let fastest = out.iter().filter_map(|s| s.exit_ms.as_ref().map(|d| d.p50)).filter(|p| *p > 0.0).reduce(f64::min);
    for s in &mut out {
        s.ratio_to_fastest = match (&s.exit_ms, fastest) {
            (Some(d), Some(f)) => Some(d.p50 / f),
            _ => None,
        };
    }
    Summary { mode, repeat, program: crate::sanitize::inert_line(program, 120), tiers: out, skipped }
}

/// An unknown value is "—", never 0.
fn or_dash<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

fn ms(v: f64) -> String {
    crate::units::duration_ms(v)
}

/// The table's header, shared by the text formats (each cell carries its
/// unit). The time to exit and the verdict first: on a narrow screen they are
/// what shows.
pub const COLUMNS: [&str; 13] = [
    "tier",
    "runs",
    "exit p50",
    "× fastest",
    "verdict",
    "exit p95",
    "exit min–max",
    "starts",
    "1st out p50",
    "1st out p95",
    "1st out min–max",
    "cpu p50",
    "peak memory",
];

/// The column of the verdict in `COLUMNS` (styled apart).
pub const VERDICT_COLUMN: usize = 4;

/// One row of text cells per tier, in `COLUMNS` order.
pub fn rows(s: &Summary) -> Vec<Vec<String>> {
    s.tiers
        .iter()
        .map(|t| {
            let d = |x: &Option<Dist>, f: fn(&Dist) -> String| or_dash(x.as_ref(), f);
            vec![
                t.tier.clone(),
                t.runs.to_string(),
                d(&t.exit_ms, |d| ms(d.p50)),
                or_dash(t.ratio_to_fastest, |r| format!("{r:.2}×")),
                if t.runs == 0 { "—".into() } else { t.verdict() },
                d(&t.exit_ms, |d| ms(d.p95)),
                d(&t.exit_ms, |d| format!("{}–{}", ms(d.min), ms(d.max))),
                t.starts_line(),
                d(&t.first_output_ms, |d| ms(d.p50)),
                d(&t.first_output_ms, |d| ms(d.p95)),
                d(&t.first_output_ms, |d| format!("{}–{}", ms(d.min), ms(d.max))),
                or_dash(t.cpu_ms_p50, ms),
                or_dash(t.peak_memory_bytes, crate::units::size),
            ]
        })
        .collect()
}

/// How many bins `n` samples are worth (about 2√n, 2 to 12): three runs in
/// twelve bins would be nine empty rows.
pub fn bins_for(n: usize) -> usize {
    ((2.0 * (n as f64).sqrt()).ceil() as usize).clamp(2, 12)
}

/// The bins of a tier's histogram at most `rows` high, and each bin's lower
/// edge written with enough decimals that no two edges read alike.
pub fn histogram_bins(samples: &[f64], rows: usize) -> Vec<(crate::stats::Bin, String)> {
    let bins = crate::stats::histogram(samples, rows.clamp(1, bins_for(samples.len())));
    let step = bins.first().map_or(0.0, |b| b.hi_ms - b.lo_ms);
    bins.into_iter()
        .map(|b| {
            let label = crate::units::duration_ms_step(b.lo_ms, step);
            (b, label)
        })
        .collect()
}

/// `samples` as an oha-style histogram `width` columns wide, at most `rows`
/// bins: a line per bin with its lower edge, its count and a bar scaled to
/// the fullest bin. Fewer than two samples: one line saying so.
pub fn histogram_lines(samples: &[f64], rows: usize, width: usize) -> Vec<String> {
    if samples.len() < 2 {
        return vec![format!("{} run(s): repeat to see a distribution", samples.len())];
    }
    let bins = histogram_bins(samples, rows);
    let max = bins.iter().map(|(b, _)| b.count).max().unwrap_or(1).max(1);
    let cw = bins.iter().map(|(b, _)| b.count.to_string().len()).max().unwrap_or(1);
    let lw = bins.iter().map(|(_, l)| l.chars().count()).max().unwrap_or(8).max(8);
    bins.iter()
        .map(|(b, edge)| {
            let label = format!("{edge:>lw$} [{:>cw$}] ", b.count);
            let room = width.saturating_sub(label.chars().count()).max(1);
            let n = (b.count * room).div_ceil(max).min(room);
            format!("{label}{}", "■".repeat(n)).trim_end().to_string()
        })
        .collect()
}

/// The one line that says how the numbers were taken.
pub fn headline(s: &Summary) -> String {
    let how = match s.mode {
        Mode::Sequential => "one tier at a time".to_string(),
        Mode::Concurrent => "CONCURRENT: the tiers ran at once and slowed each other down".to_string(),
    };
    format!("compare {} · {} round(s), interleaved · {how} · times from the run's start", s.program, s.repeat)
}

/// An aligned terminal table.
pub fn text(s: &Summary) -> String {
    let mut all = vec![COLUMNS.iter().map(|c| c.to_string()).collect::<Vec<_>>()];
    all.extend(rows(s));
    let w: Vec<usize> =
        (0..COLUMNS.len()).map(|i| all.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = format!("{}\n", headline(s));
    for r in &all {
        let line: Vec<String> = r.iter().zip(&w).map(|(c, w)| format!("{c:<w$}", w = *w)).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&tail(s));
    // With repeated runs, each tier's distribution of the time to exit.
    if s.tiers.iter().any(|t| t.exit_samples_ms.len() > 1) {
        for t in s.tiers.iter().filter(|t| !t.exit_samples_ms.is_empty()) {
            out.push_str(&format!("\n{} · time to exit, {} runs:\n", t.tier, t.exit_samples_ms.len()));
            for l in histogram_lines(&t.exit_samples_ms, 8, 60) {
                out.push_str(&format!("  {l}\n"));
            }
        }
    }
    out
}

fn tail(s: &Summary) -> String {
    let mut out = String::new();
    if let Some(note) = mixed_starts(s) {
        out.push_str(&note);
        out.push('\n');
    }
    for t in &s.tiers {
        if let Some(e) = &t.error {
            out.push_str(&format!("{}: error: {e}\n", t.tier));
        }
    }
    for (t, why) in &s.skipped {
        out.push_str(&format!("{t}: unavailable: {}\n", crate::sanitize::inert_line(why, 200)));
    }
    out
}

/// When the tiers' runs started differently (one cold, another warm), the
/// times compare unlike things: said, never silent (a JavaScript run had
/// left the process tier's spare to Node, and the first F6 compared its
/// cold run with the others' warm ones).
pub fn mixed_starts(s: &Summary) -> Option<String> {
    let kinds: std::collections::BTreeSet<&str> =
        s.tiers.iter().flat_map(|t| t.starts.keys().map(String::as_str)).collect();
    if kinds.len() < 2 {
        return None;
    }
    let each: Vec<String> =
        s.tiers.iter().filter(|t| !t.starts.is_empty()).map(|t| format!("{} {}", t.tier, t.starts_line())).collect();
    Some(format!(
        "mixed starts: {} — times of unlike starts compare unlike things (repeat with --repeat for warm runs on every tier)",
        each.join(", ")
    ))
}

/// A markdown table (pasteable); the headline above, the notes below.
pub fn markdown(s: &Summary) -> String {
    let cell = |c: &str| c.replace('|', "\\|");
    let mut out = format!("{}\n\n| {} |\n|", headline(s), COLUMNS.join(" | "));
    out.push_str(&"---|".repeat(COLUMNS.len()));
    out.push('\n');
    for r in rows(s) {
        out.push_str(&format!("| {} |\n", r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")));
    }
    let notes = tail(s);
    if !notes.is_empty() {
        out.push('\n');
        for l in notes.lines() {
            out.push_str(&format!("- {}\n", cell(l)));
        }
    }
    out
}

/// CSV (RFC 4180 quoting): the numbers only, unknown as an empty field.
pub fn csv(s: &Summary) -> String {
    let q = |c: &str| {
        if c.contains([',', '"', '\n']) {
            format!("\"{}\"", c.replace('"', "\"\""))
        } else {
            c.to_string()
        }
    };
    let mut out = String::from(
        "tier,mode,runs,first_output_p50_ms,first_output_p95_ms,first_output_min_ms,first_output_max_ms,\
exit_p50_ms,exit_p95_ms,exit_min_ms,exit_max_ms,cold,warm,other_starts,ratio_to_fastest,cpu_p50_ms,peak_memory_bytes,verdict\n",
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_default();
    for t in &s.tiers {
        let (fo, ex) = (t.first_output_ms.as_ref(), t.exit_ms.as_ref());
        let count = |k: &str| t.starts.get(k).copied().unwrap_or(0);
        let other: usize = t.starts.iter().filter(|(k, _)| *k != "cold" && *k != "warm").map(|(_, n)| n).sum();
        let fields = [
            q(&t.tier),
            s.mode.name().into(),
            t.runs.to_string(),
            f(fo.map(|d| d.p50)),
            f(fo.map(|d| d.p95)),
            f(fo.map(|d| d.min)),
            f(fo.map(|d| d.max)),
            f(ex.map(|d| d.p50)),
            f(ex.map(|d| d.p95)),
            f(ex.map(|d| d.min)),
            f(ex.map(|d| d.max)),
            count("cold").to_string(),
            count("warm").to_string(),
            other.to_string(),
            t.ratio_to_fastest.map(|r| format!("{r:.3}")).unwrap_or_default(),
            f(t.cpu_ms_p50),
            t.peak_memory_bytes.map(|b| b.to_string()).unwrap_or_default(),
            q(&t.verdict()),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

pub fn json(s: &Summary) -> String {
    serde_json::to_string_pretty(s).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Usage;

    fn rep(tier: &str, setup: f64, run: f64, first: Option<f64>, start: &str, mem: Option<u64>) -> RunReport {
        let mut r = RunReport::failed(tier, "python", "x", "");
        r.outcome = Outcome::Ok;
        r.error = None;
        r.timings_ms.setup = setup;
        r.timings_ms.run = run;
        r.timings_ms.first_output = first;
        r.usage = Usage { cpu_ms: None, peak_memory_bytes: mem, peak_pids: None };
        r.details = serde_json::json!({ "start": start });
        r
    }

    #[test]
    fn rounds_interleave_and_rotate() {
        let t: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let s: Vec<String> = schedule(&t, 2).into_iter().map(|(_, n)| n).collect();
        assert_eq!(s, ["a", "b", "c", "b", "c", "a"]);
        assert!(schedule(&t, 0).is_empty());
    }

    #[test]
    fn unlike_starts_are_said_never_silent() {
        let sum =
            |reps: Vec<RunReport>| summarize(&["a".into(), "b".into()], &reps, Mode::Sequential, 1, "p.py", vec![]);
        let alike = sum(vec![rep("a", 1.0, 1.0, None, "warm", None), rep("b", 1.0, 1.0, None, "warm", None)]);
        assert_eq!(mixed_starts(&alike), None);
        assert!(!text(&alike).contains("mixed starts"));
        let unlike = sum(vec![rep("a", 9.0, 1.0, None, "cold", None), rep("b", 1.0, 1.0, None, "warm", None)]);
        let note = mixed_starts(&unlike).unwrap();
        assert!(note.contains("a 1 cold, b 1 warm"), "{note}");
        assert!(text(&unlike).contains(&note) && markdown(&unlike).contains("mixed starts"));
    }

    #[test]
    fn summary_has_distributions_ratios_and_unknowns() {
        let reports = vec![
            rep("a", 10.0, 10.0, Some(15.0), "cold", Some(0)),
            rep("a", 5.0, 5.0, Some(8.0), "warm", None),
            rep("a", 5.0, 7.0, Some(9.0), "warm", None),
            rep("b", 30.0, 10.0, None, "cold", Some(4 << 20)),
        ];
        let s = summarize(&["a".into(), "b".into()], &reports, Mode::Sequential, 3, "p.py", vec![]);
        let a = &s.tiers[0];
        assert_eq!(a.runs, 3);
        let e = a.exit_ms.as_ref().unwrap();
        assert_eq!((e.p50, e.min, e.max), (12.0, 10.0, 20.0));
        assert_eq!(a.starts.get("warm"), Some(&2));
        assert_eq!(a.exit_p50_by_start_ms.get("warm"), Some(&12.0));
        assert_eq!(a.ratio_to_fastest, Some(1.0));
        // A zero peak is a tier that did not measure: unknown, not 0.
        assert_eq!(a.peak_memory_bytes, None);
        let b = &s.tiers[1];
        assert_eq!(b.first_output_ms, None);
        assert!((b.ratio_to_fastest.unwrap() - 40.0 / 12.0).abs() < 1e-9);
        let row = &rows(&s)[1];
        assert_eq!(row[8], "—");
        assert_eq!(row[12], "4.00 MiB");
        assert_eq!(rows(&s)[0][12], "—");
        assert_eq!(rows(&s)[0][11], "—");
        assert_eq!(COLUMNS[VERDICT_COLUMN], "verdict");
        assert!(csv(&s).lines().nth(1).unwrap().starts_with("a,sequential,3,9.0,"));
        // Repeated runs: a histogram per tier under the table.
        let t = text(&s);
        assert!(t.contains("a · time to exit, 3 runs:") && t.contains(" 10.0 ms [2] ■"), "{t}");
        assert!(markdown(&s).contains("| b | 1 | 40.0 ms | 3.33× | ok |"), "{}", markdown(&s));
    }

    #[test]
    fn histogram_edges_never_repeat_and_few_runs_get_few_bins() {
        // 30 runs between 18 and 23 ms: twelve bins 0.42 ms wide.
        let v: Vec<f64> = (0..30).map(|i| 18.0 + (i as f64 * 0.173) % 5.0).chain([23.0]).collect();
        let lines = histogram_lines(&v, 12, 60);
        assert_eq!(lines.len(), 12, "{lines:#?}");
        let edges: Vec<&str> = lines.iter().map(|l| l.split('[').next().unwrap().trim()).collect();
        let mut unique = edges.clone();
        unique.dedup();
        assert_eq!(unique, edges, "an edge repeats: {lines:#?}");
        assert!(edges.iter().all(|e| e.ends_with(" ms")), "{edges:?}");
        // Three runs are not spread over twelve rows.
        assert_eq!(histogram_lines(&[16.6, 19.3, 28.1], 12, 60).len(), 4);
    }

    #[test]
    fn concurrent_is_labelled_and_errors_are_not_timed() {
        let mut bad = rep("a", 1.0, 1.0, None, "cold", None);
        bad.outcome = Outcome::Error;
        bad.error = Some("boom\x1b]52;c;x\x07".into());
        let s = summarize(&["a".into()], &[bad], Mode::Concurrent, 1, "p", vec![]);
        assert!(text(&s).contains("CONCURRENT"));
        assert_eq!(s.tiers[0].exit_ms, None);
        assert_eq!(s.tiers[0].verdict(), "error");
        assert!(!text(&s).contains('\x1b'));
        let back: Summary = serde_json::from_str(&json(&s)).unwrap();
        assert_eq!(back, s);
    }
}
