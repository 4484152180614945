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
            let mark = if c.as_expected { "" } else { " ✗" };
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
    out.push_str(&footer(m));
    out
}

fn footer(m: &Matrix) -> String {
    let mut out = String::new();
    if !m.latency.is_empty() {
        out.push_str("\nbenign latency (start→exit, ms):\n");
        for l in &m.latency {
            out.push_str(&format!(
                "  {:<8} {:<8} p50 {:>8.1}  p95 {:>8.1}  ({} runs)\n",
                l.tier, l.start, l.p50_ms, l.p95_ms, l.runs
            ));
        }
    }
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
            Some(format!("{t} {max:.1} ms"))
        })
        .collect();
    if !lat.is_empty() {
        out.push_str(&format!("host responsiveness (worst spawn of /bin/true during a run): {}\n", lat.join(", ")));
    }
    out.push_str(&versions(m));
    for (t, why) in &m.skipped_tiers {
        out.push_str(&format!("skipped {t}: {why}\n"));
    }
    for c in m.cells.iter().filter(|c| !c.as_expected) {
        out.push_str(&format!(
            "✗ {} on {}: {} (expected {})\n",
            c.sample,
            c.tier,
            c.mismatch.as_deref().unwrap_or("?"),
            c.expected.as_deref().unwrap_or("nothing declared")
        ));
    }
    for c in m.cells.iter().filter(|c| c.degraded) {
        out.push_str(&format!(
            "⚠ {} on {}: DEGRADED, the sandbox lacked {}\n",
            c.sample,
            c.tier,
            c.report.degraded.join("; ")
        ));
    }
    out.push_str(&if m.mismatches == 0 {
        format!("all {} cells as declared\n", m.cells.len())
    } else {
        format!("{} of {} cells differ from what the samples declare\n", m.mismatches, m.cells.len())
    });
    out
}

/// Tiers that wrap another tool (peers) name its version in their reports:
/// one line with the versions, the kernel and the date, so a published
/// matrix says what it was measured on.
fn versions(m: &Matrix) -> String {
    let mut v: Vec<String> = vec![];
    for t in &m.tiers {
        let found = m.cells.iter().filter(|c| &c.tier == t).find_map(|c| c.report.details.get("version")?.as_str());
        if let Some(ver) = found {
            v.push(format!("{t} = {}", crate::sanitize::visible_controls(ver.as_bytes())));
        }
    }
    if v.is_empty() {
        return String::new();
    }
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    format!("measured {} on Linux {kernel}: {}\n", today_utc(), v.join(", "))
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
    out.push_str(&footer(m));
    out
}

pub fn json(m: &Matrix) -> String {
    serde_json::to_string_pretty(m).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_from_days() {
        assert_eq!(super::date_of_day(0), "1970-01-01");
        assert_eq!(super::date_of_day(19_723), "2024-01-01");
        assert_eq!(super::date_of_day(19_782), "2024-02-29");
        assert_eq!(super::today_utc().len(), 10);
    }
}
