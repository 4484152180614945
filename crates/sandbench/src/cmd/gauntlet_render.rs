//! The gauntlet matrix as a terminal table, markdown (stable, pasteable,
//! diffable) or JSON.

use sandbench_core::gauntlet::{Cell, Matrix};

fn cell<'a>(m: &'a Matrix, sample: &str, tier: &str) -> Option<&'a Cell> {
    m.cells.iter().find(|c| c.sample == sample && c.tier == tier)
}

fn text_of(c: Option<&Cell>) -> String {
    match c {
        None => "—".into(),
        Some(c) => {
            let mark = if c.is_mismatch() { " ✗" } else { "" };
            let degraded = if c.degraded { " ⚠ DEGRADED" } else { "" };
            format!("{}{degraded}{mark}", c.verdict.short())
        }
    }
}

fn hostile_mark(m: &Matrix, sample: &str) -> &'static str {
    match m.cells.iter().find(|c| c.sample == sample) {
        Some(c) if !c.hostile => " (control)",
        _ => "",
    }
}

pub fn table(m: &Matrix) -> String {
    let mut rows: Vec<Vec<String>> = vec![];
    let mut head = vec!["program".to_string()];
    head.extend(m.tiers.iter().cloned());
    rows.push(head);
    for s in &m.samples {
        let mut r = vec![format!("{s}{}", hostile_mark(m, s))];
        for t in &m.tiers {
            r.push(text_of(cell(m, s, t)));
        }
        rows.push(r);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0).min(48)).collect();
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let c: String = c.chars().take(*w).collect();
                format!("{c:<w$}", w = *w)
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if n == 0 {
            out.push_str(&widths.iter().map(|w| "─".repeat(*w)).collect::<Vec<_>>().join("  "));
            out.push('\n');
        }
    }
    out.push_str(&footer(m, false));
    out
}

/// What each tier's cells ran under: the wall limit stretched by the load
/// measured on it, or as written (one line for all of those).
fn scale_notes(m: &Matrix) -> Vec<String> {
    let s = |ms: u64| crate::units::duration_ms(ms as f64);
    let range = |r: [u64; 2]| if r[0] == r[1] { s(r[0]) } else { format!("{}–{}", s(r[0]), s(r[1])) };
    let mut out = vec![];
    let mut as_written = vec![];
    for t in m.scales.iter().filter(|t| t.cpu_time_ms[1] > 0) {
        let d = &t.slowdown;
        if let Some(why) = &d.error {
            out.push(format!("limits as written on {}: the load on it could not be measured ({why})", t.tier));
        } else if t.scaled() {
            let mut parts = vec![];
            if t.cpu_time_ms[1] > t.written_ms[0] {
                parts.push(format!(
                    "an emulated CPU (the host's work took ×{} the CPU there), its limits scaled ×{} (at most ×{} in a gauntlet): cpu {} → {}",
                    d.factor,
                    d.emulated_scale(),
                    crate::gauntlet::EMULATED_CAP,
                    s(t.written_ms[0]),
                    range(t.cpu_time_ms)
                ));
            }
            if t.wall_time_ms[1] > t.written_ms[1] {
                parts.push(format!(
                    "wall {} → {} (load: CPU-bound work took ×{} its CPU time there)",
                    s(t.written_ms[1]),
                    range(t.wall_time_ms),
                    d.load_factor
                ));
            }
            out.push(format!("on {} ({} measures): {}", t.tier, d.rounds, parts.join("; ")));
        } else {
            as_written.push(format!("{} ×{}", t.tier, d.load_factor));
        }
    }
    if !as_written.is_empty() {
        out.push(format!(
            "limits as written on {} (load under ×{}: CPU-bound work's running time over its CPU time)",
            as_written.join(", "),
            crate::gauntlet::SCALE_FROM
        ));
    }
    out
}

/// The lines under the matrix: one set of facts, drawn as plain text or as
/// markdown (a table and a list, so the whole output stays markdown).
fn footer(m: &Matrix, md: bool) -> String {
    let mut out = String::new();
    if !m.latency.is_empty() {
        if md {
            out.push_str(
                "\nBenign latency (start→exit):\n\n| tier | start | p50 | p95 | runs |\n|---|---|---:|---:|---:|\n",
            );
        } else {
            out.push_str("\nbenign latency (start→exit):\n");
        }
        let d = crate::units::duration_ms;
        for l in &m.latency {
            out.push_str(&if md {
                format!("| {} | {} | {} | {} | {} |\n", l.tier, l.start, d(l.p50_ms), d(l.p95_ms), l.runs)
            } else {
                format!(
                    "  {:<8} {:<8} p50 {:>8}  p95 {:>8}  ({} runs)\n",
                    l.tier,
                    l.start,
                    d(l.p50_ms),
                    d(l.p95_ms),
                    l.runs
                )
            });
        }
    }
    let mut notes: Vec<String> = vec![];
    let lat: Vec<String> = m
        .tiers
        .iter()
        .filter_map(|t| {
            let max = m
                .cells
                .iter()
                .filter(|c| &c.tier == t)
                .filter_map(|c| c.findings.host_latency_ms_max)
                .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))))?;
            Some(format!("{t} {}", crate::units::duration_ms(max)))
        })
        .collect();
    if !lat.is_empty() {
        notes.push(format!("host responsiveness (worst spawn of /bin/true during a run): {}", lat.join(", ")));
    }
    notes.extend(scale_notes(m));
    notes.extend(versions(m));
    for (t, why) in &m.skipped_tiers {
        notes.push(format!("skipped {t}: {why}"));
    }
    for c in m.cells.iter().filter(|c| c.is_mismatch()) {
        notes.push(format!(
            "✗ {} on {}: {} (expected {})",
            c.sample,
            c.tier,
            c.mismatch.as_deref().unwrap_or("?"),
            c.expected.as_deref().unwrap_or("nothing declared")
        ));
    }
    for c in m.cells.iter().filter(|c| c.degraded) {
        notes.push(format!(
            "⚠ {} on {}: DEGRADED, the sandbox lacked {}",
            c.sample,
            c.tier,
            c.report.degraded.join("; ")
        ));
    }
    if md && !notes.is_empty() {
        out.push('\n');
    }
    for n in notes {
        if md {
            out.push_str(&format!("- {}\n", md_inline(&n)));
        } else {
            out.push_str(&n);
            out.push('\n');
        }
    }
    if md {
        out.push('\n');
    }
    if m.cancelled {
        out.push_str(&format!(
            "CANCELLED before the end: {} cell(s) stopped without a verdict, the rest never ran\n",
            m.cancelled_cells()
        ));
    }
    let na: Vec<&crate::gauntlet::Cell> =
        m.cells.iter().filter(|c| matches!(c.verdict, crate::gauntlet::Verdict::NotAvailable { .. })).collect();
    if let Some(first) = na.first() {
        out.push_str(&format!(
            "{} cell(s) not run: the tier cannot start the sample's language here (e.g. {} on {}: {})\n",
            na.len(),
            first.sample,
            first.tier,
            first.verdict.short()
        ));
    }
    let judged = m.cells.len() - m.cancelled_cells() - na.len();
    out.push_str(&if m.mismatches == 0 {
        format!("all {judged} cells as declared\n")
    } else {
        format!("{} of {judged} cells differ from what the samples declare\n", m.mismatches)
    });
    out
}

/// Text inside a markdown list item: characters markdown would act on are
/// escaped, so a mismatch's detail reads as written.
fn md_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if matches!(ch, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// Tiers that wrap another tool (peers) name its version in their reports:
/// one line with the versions, the kernel and the date, so a published
/// matrix says what it was measured on.
fn versions(m: &Matrix) -> Option<String> {
    let mut v: Vec<String> = vec![];
    for t in &m.tiers {
        let found = m.cells.iter().filter(|c| &c.tier == t).find_map(|c| c.report.details.get("version")?.as_str());
        if let Some(ver) = found {
            v.push(format!("{t} = {}", crate::sanitize::visible_controls(ver.as_bytes())));
        }
    }
    if v.is_empty() {
        return None;
    }
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    Some(format!("measured {} on Linux {kernel}: {}", today_utc(), v.join(", ")))
}

/// Today's date (UTC) as YYYY-MM-DD, from the days since 1970 (Hinnant's civil_from_days).
fn today_utc() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    date_of_day((secs / 86_400) as i64)
}

fn date_of_day(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Markdown: no timings in the matrix itself, so two runs diff cleanly.
pub fn markdown(m: &Matrix) -> String {
    let mut out = String::from("| program |");
    for t in &m.tiers {
        out.push_str(&format!(" {t} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(m.tiers.len()));
    out.push('\n');
    for s in &m.samples {
        out.push_str(&format!("| {s}{} |", hostile_mark(m, s)));
        for t in &m.tiers {
            out.push_str(&format!(" {} |", text_of(cell(m, s, t)).replace('|', "\\|")));
        }
        out.push('\n');
    }
    out.push_str(&footer(m, true));
    out
}

pub fn json(m: &Matrix) -> String {
    serde_json::to_string_pretty(m).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use sandbench_core::gauntlet::{Latency, Matrix};

    #[test]
    fn markdown_is_markdown_to_the_last_line() {
        let m = Matrix {
            tiers: vec!["process".into()],
            skipped_tiers: vec![("e2b".into(), "no key: E2B_API_KEY is not set".into())],
            samples: vec![],
            cells: vec![],
            latency: vec![Latency {
                tier: "process".into(),
                start: "warm".into(),
                runs: 3,
                p50_ms: 20.0,
                p95_ms: 31.5,
            }],
            mismatches: 0,
            cancelled: false,
            scales: vec![],
        };
        let md = super::markdown(&m);
        assert!(md.contains("| process | warm | 20.0 ms | 31.5 ms | 3 |"), "{md}");
        assert!(md.contains("- skipped e2b: no key: E2B\\_API\\_KEY is not set"), "{md}");
        for line in md.lines() {
            // Indented lines would turn into code blocks or run into paragraphs.
            assert!(!line.starts_with(' '), "not markdown: {line:?}\n{md}");
        }
    }

    #[test]
    fn each_tiers_wall_limit_says_what_stretched_it() {
        use sandbench_core::gauntlet::{Slowdown, TierScale};
        let scale = |tier: &str, load: f64, wall: [u64; 2], error: Option<&str>| TierScale {
            tier: tier.into(),
            slowdown: Slowdown { load_factor: load, rounds: 4, error: error.map(String::from), ..Default::default() },
            cpu_time_ms: [2000, 2000],
            wall_time_ms: wall,
            written_ms: [2000, 5000],
        };
        let m = Matrix {
            tiers: vec![],
            skipped_tiers: vec![],
            samples: vec![],
            cells: vec![],
            latency: vec![],
            mismatches: 0,
            cancelled: false,
            scales: vec![
                scale("process", 1.04, [5000, 5000], None),
                scale("microvm", 2.6, [5000, 13000], None),
                scale("e2b", 1.0, [5000, 5000], Some("no python")),
            ],
        };
        let t = super::table(&m);
        assert!(
            t.contains("on microvm (4 measures): wall 5.00 s → 5.00 s–13.0 s (load: CPU-bound work took ×2.6 its CPU time there)"),
            "{t}"
        );
        assert!(t.contains("limits as written on process ×1.04 (load under ×1.5"), "{t}");
        assert!(t.contains("limits as written on e2b: the load on it could not be measured (no python)"), "{t}");
    }

    #[test]
    fn dates_from_days() {
        assert_eq!(super::date_of_day(0), "1970-01-01");
        assert_eq!(super::date_of_day(19_723), "2024-01-01");
        assert_eq!(super::date_of_day(19_782), "2024-02-29");
        assert_eq!(super::today_utc().len(), 10);
    }
}
