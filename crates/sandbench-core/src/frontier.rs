//! The safety × latency frontier: what each tier costs (warm p50 time to a
//! finished `print`-sized run, log scale) against what it stops (the share of
//! the last gauntlet's hostile samples it contained). The one computation
//! behind the report's chart, the workbench's chart and the README picture,
//! plus its rendering as a self-contained SVG.
//!
//! Every point says where its figures come from: which measurement its
//! latency is (source, start kind, runs: one source per tier, never the
//! fastest of several), and how many hostile cells its share leaves out
//! (stopped by a cancel, or sandbench failed: neither is a verdict).

use serde::{Deserialize, Serialize};

use crate::compare::Summary;
use crate::gauntlet::{Cell, Latency, Verdict};

/// One measured latency of a tier (start to exit, p50).
#[derive(Debug, Clone, PartialEq)]
pub struct Obs {
    pub tier: String,
    /// "warm", "cold", "snapshot", ...
    pub start: String,
    pub p50_ms: f64,
    pub runs: usize,
    /// Which measurement: "compare", "gauntlet", "benchmark".
    pub source: String,
}

/// Latencies a gauntlet measured on its benign controls.
pub fn obs_of_gauntlet(l: &[Latency]) -> Vec<Obs> {
    l.iter()
        .map(|l| Obs {
            tier: l.tier.clone(),
            start: l.start.clone(),
            p50_ms: l.p50_ms,
            runs: l.runs,
            source: "gauntlet".into(),
        })
        .collect()
}

/// Latencies of a compare (time to exit, per start kind); `source` names it
/// ("compare", or "benchmark" for the report's print(1) rounds).
pub fn obs_of_compare(s: &Summary, source: &str) -> Vec<Obs> {
    s.tiers
        .iter()
        .flat_map(|t| {
            t.exit_p50_by_start_ms.iter().map(|(start, p50)| Obs {
                tier: t.tier.clone(),
                start: start.clone(),
                p50_ms: *p50,
                runs: t.starts.get(start).copied().unwrap_or(0),
                source: source.into(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub tier: String,
    /// p50 time from start to exit (ms) of the start kind below, from one
    /// measurement (`source`): its warm runs when it has any (a tier without
    /// a pool is never warm), else its most frequent start kind.
    pub latency_ms: f64,
    pub start: String,
    /// Runs behind `latency_ms`.
    #[serde(default)]
    pub runs: usize,
    /// Which measurement the latency is: "compare", "gauntlet" (its benign
    /// controls) or "benchmark" (the report's print(1) rounds).
    #[serde(default)]
    pub source: String,
    /// Hostile cells contained, of the hostile cells judged (contained or
    /// escaped: an escape counts against the tier).
    pub contained: usize,
    pub hostile: usize,
    /// Hostile cells left out of the share, and said: stopped by a cancel,
    /// or sandbench failed to judge them (error). Neither is a verdict.
    #[serde(default)]
    pub cancelled: usize,
    #[serde(default)]
    pub errors: usize,
    /// contained / hostile, 0..=1.
    pub share: f64,
}

impl Point {
    /// Hostile cells the share leaves out.
    pub fn left_out(&self) -> usize {
        self.cancelled + self.errors
    }
}

/// A point per tier of `tiers` that has both judged hostile cells and a
/// latency. Tiers without one are returned with the reason, for a footnote.
/// `latency` is in order of preference: a tier's point takes its latency
/// from the first source that measured it, never the fastest of several
/// (they ran different programs at different times).
pub fn points<'a>(
    tiers: &[String],
    cells: impl IntoIterator<Item = &'a Cell>,
    latency: &[Obs],
) -> (Vec<Point>, Vec<(String, String)>) {
    let cells: Vec<&Cell> = cells.into_iter().filter(|c| c.hostile).collect();
    let mut out = vec![];
    let mut missing = vec![];
    for t in tiers {
        let mine: Vec<&&Cell> = cells.iter().filter(|c| &c.tier == t).collect();
        if mine.is_empty() {
            missing.push((t.clone(), "not in the gauntlet".into()));
            continue;
        }
        let count = |f: fn(&Verdict) -> bool| mine.iter().filter(|c| f(&c.verdict)).count();
        let contained = count(|v| matches!(v, Verdict::Contained { .. }));
        let escaped = count(|v| matches!(v, Verdict::Escaped { .. }));
        let cancelled = count(|v| *v == Verdict::Cancelled);
        let errors = count(|v| matches!(v, Verdict::Error { .. }));
        // A cell a judge could not see whole is not contained: it counts
        // against the tier, never for it.
        let incomplete = count(|v| matches!(v, Verdict::Incomplete { .. }));
        let judged = contained + escaped + incomplete;
        if judged == 0 {
            missing.push((t.clone(), format!("no hostile cell judged ({cancelled} cancelled, {errors} error(s))")));
            continue;
        }
        let usable = |o: &&Obs| &o.tier == t && o.p50_ms.is_finite() && o.p50_ms > 0.0;
        let Some(source) = latency.iter().find(usable).map(|o| o.source.clone()) else {
            missing.push((t.clone(), "no latency measured".into()));
            continue;
        };
        let obs: Vec<&Obs> = latency.iter().filter(usable).filter(|o| o.source == source).collect();
        let warm = obs.iter().filter(|o| o.start == "warm").max_by_key(|o| o.runs);
        let most = obs.iter().max_by(|a, b| a.runs.cmp(&b.runs).then(b.p50_ms.total_cmp(&a.p50_ms)));
        let Some(o) = warm.or(most) else { continue };
        out.push(Point {
            tier: t.clone(),
            latency_ms: o.p50_ms,
            start: o.start.clone(),
            runs: o.runs,
            source,
            contained,
            hostile: judged,
            cancelled,
            errors,
            share: contained as f64 / judged as f64,
        });
    }
    (out, missing)
}

/// Decades of the log x axis: (10^lo, 10^hi) around every point.
pub fn x_range(points: &[Point]) -> (f64, f64) {
    let lo = points.iter().map(|p| p.latency_ms).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.latency_ms).fold(0.0, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return (1.0, 1000.0);
    }
    let lo = lo.log10().floor();
    let mut hi = hi.log10().ceil();
    if hi <= lo {
        hi = lo + 1.0;
    }
    (10f64.powf(lo), 10f64.powf(hi))
}

/// "5 ms", "20 ms", "1 s", "2 s".
pub fn tick_label(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{} s", trim(ms / 1000.0))
    } else {
        format!("{} ms", trim(ms))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Ticks at 1, 2 and 5 of each decade in the range.
pub fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut v = vec![];
    let mut d = lo;
    while d <= hi * 1.000001 {
        for m in [1.0, 2.0, 5.0] {
            let t = d * m;
            if t <= hi * 1.000001 {
                v.push(t);
            }
        }
        d *= 10.0;
    }
    v
}

/// Text for SVG/HTML: inert (no control characters) and escaped.
pub fn escape(s: &str) -> String {
    crate::sanitize::inert::xml_text(s, 200)
}

/// The chart as one self-contained SVG element (no scripts, no external
/// references): log-scale x with ticks, y 0–100 %, a labelled dot per tier.
pub fn svg(points: &[Point]) -> String {
    // The plot, then a legend of two columns: each point is numbered, and the
    // legend names it with its figures (labels beside points collide when
    // tiers sit close together, as they do at 100 %).
    let legend_rows = points.len().div_ceil(2) as f64;
    let (w, plot_h) = (640.0, 400.0);
    let h = plot_h + if points.is_empty() { 0.0 } else { 10.0 + 18.0 * legend_rows };
    let (ml, mr, mt, mb) = (64.0, 24.0, 36.0, 52.0);
    let (pw, ph) = (w - ml - mr, plot_h - mt - mb);
    let (lo, hi) = x_range(points);
    let x = |ms: f64| ml + (ms.log10() - lo.log10()) / (hi.log10() - lo.log10()) * pw;
    let y = |share: f64| mt + (1.0 - share) * ph;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" \
role=\"img\" aria-label=\"safety against latency, one point per tier\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    s.push_str(&format!("<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n"));
    s.push_str(&format!(
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">Safety × latency: \
hostile samples contained against warm p50 latency</text>\n",
        w / 2.0
    ));
    for pct in [0, 20, 40, 60, 80, 100] {
        let yy = y(pct as f64 / 100.0);
        s.push_str(&format!(
            "<line x1=\"{ml}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#dddddd\"/>\n\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{pct}%</text>\n",
            ml + pw,
            ml - 6.0,
            yy + 4.0
        ));
    }
    for t in ticks(lo, hi) {
        let xx = x(t);
        s.push_str(&format!(
            "<line x1=\"{xx:.1}\" y1=\"{mt}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#eeeeee\"/>\n\
<line x1=\"{xx:.1}\" y1=\"{:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\n\
<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            mt + ph,
            mt + ph,
            mt + ph + 5.0,
            mt + ph + 18.0,
            tick_label(t)
        ));
    }
    s.push_str(&format!(
        "<line x1=\"{ml}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\n\
<line x1=\"{ml}\" y1=\"{mt}\" x2=\"{ml}\" y2=\"{:.1}\" stroke=\"#333333\"/>\n",
        mt + ph,
        ml + pw,
        mt + ph,
        mt + ph
    ));
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">warm p50 latency, start → exit (log scale)</text>\n\
<text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">hostile samples contained</text>\n",
        ml + pw / 2.0,
        plot_h - 10.0,
        mt + ph / 2.0,
        mt + ph / 2.0
    ));
    const PALETTE: [&str; 8] = ["#1f6feb", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#0a7b83", "#bc4c00", "#57606a"];
    for (i, p) in points.iter().enumerate() {
        let (px, py) = (x(p.latency_ms), y(p.share));
        let colour = PALETTE[i % PALETTE.len()];
        let (lx, ly) = (if i % 2 == 0 { 24.0 } else { w / 2.0 + 8.0 }, plot_h + 14.0 + 18.0 * (i / 2) as f64);
        s.push_str(&format!(
            "<g class=\"point\" data-tier=\"{tier}\" data-latency-ms=\"{lat:.1}\" data-contained=\"{c}\" data-hostile=\"{n}\">\
<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"8\" fill=\"{colour}\" fill-opacity=\"0.85\"/>\
<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" font-weight=\"bold\" fill=\"#ffffff\">{num}</text>\
<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"7\" fill=\"{colour}\"/>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" font-weight=\"bold\" fill=\"#ffffff\">{num}</text>\
<text x=\"{:.1}\" y=\"{:.1}\">{tier} · {} {} · {c}/{n} contained{left}</text></g>\n",
            py + 3.5,
            lx + 7.0,
            ly - 4.0,
            lx + 7.0,
            ly - 0.5,
            lx + 20.0,
            ly,
            tick_label((p.latency_ms * 10.0).round() / 10.0),
            escape(&p.start),
            left = if p.left_out() > 0 { format!(" ({} left out)", p.left_out()) } else { String::new() },
            num = i + 1,
            tier = escape(&p.tier),
            lat = p.latency_ms,
            c = p.contained,
            n = p.hostile,
        ));
    }
    if points.is_empty() {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no tier has both a gauntlet and a latency yet</text>\n",
            ml + pw / 2.0,
            mt + ph / 2.0
        ));
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gauntlet::canary::Findings;
    use crate::report::RunReport;

    fn cell(tier: &str, hostile: bool, verdict: Verdict) -> Cell {
        Cell {
            sample: "s".into(),
            hostile,
            tier: tier.into(),
            verdict,
            expected: None,
            as_expected: true,
            mismatch: None,
            total_ms: 1.0,
            start: "cold".into(),
            degraded: false,
            findings: Findings::default(),
            report: RunReport::failed(tier, "python", "s", ""),
        }
    }

    fn contained() -> Verdict {
        Verdict::Contained { by: "pids".into() }
    }

    fn obs(tier: &str, start: &str, p50: f64, runs: usize, source: &str) -> Obs {
        Obs { tier: tier.into(), start: start.into(), p50_ms: p50, runs, source: source.into() }
    }

    #[test]
    fn points_count_escapes_against_the_tier_and_leave_cancels_and_errors_out_said() {
        let cells = vec![
            cell("process", true, contained()),
            cell("process", true, Verdict::Escaped { what: vec!["x".into()] }),
            cell("process", true, Verdict::Error { why: "y".into() }),
            cell("process", true, contained()),
            cell("process", true, Verdict::Cancelled),
            cell("process", false, Verdict::Ran),
            cell("docker", true, contained()),
            cell("e2b", false, Verdict::Ran),
            cell("srt", true, Verdict::Cancelled),
        ];
        let lat = vec![
            obs("process", "cold", 20.0, 3, "compare"),
            obs("process", "warm", 9.0, 1, "compare"),
            obs("process", "warm", 8.0, 5, "compare"),
            obs("process", "warm", 4.0, 9, "gauntlet"),
            obs("docker", "cold", 300.0, 3, "compare"),
            obs("docker", "snapshot", 200.0, 3, "compare"),
            obs("srt", "cold", 900.0, 3, "compare"),
        ];
        let tiers: Vec<String> = ["process", "docker", "e2b", "gvisor", "srt"].map(String::from).to_vec();
        let (p, missing) = points(&tiers, &cells, &lat);
        assert_eq!(p.len(), 2);
        // The first source that measured the tier, its warm runs: not the
        // faster figure of another source.
        assert_eq!((p[0].latency_ms, p[0].start.as_str(), p[0].runs), (8.0, "warm", 5));
        assert_eq!(p[0].source, "compare");
        // 2 contained of 3 judged (the escape counts against it); the cancel
        // and the error are left out, and counted.
        assert_eq!((p[0].contained, p[0].hostile, p[0].cancelled, p[0].errors), (2, 3, 1, 1));
        assert!((p[0].share - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(p[0].left_out(), 2);
        // No warm runs: the kind with the most runs (then the faster), and it says which.
        assert_eq!((p[1].latency_ms, p[1].start.as_str(), p[1].share), (200.0, "snapshot", 1.0));
        let why: Vec<(&str, &str)> = missing.iter().map(|m| (m.0.as_str(), m.1.as_str())).collect();
        assert_eq!(
            why,
            [
                ("e2b", "not in the gauntlet"),
                ("gvisor", "not in the gauntlet"),
                ("srt", "no hostile cell judged (1 cancelled, 0 error(s))")
            ]
        );
    }

    #[test]
    fn log_axis_spans_whole_decades() {
        let p = |ms: f64| Point {
            tier: "t".into(),
            latency_ms: ms,
            start: "warm".into(),
            runs: 1,
            source: "compare".into(),
            contained: 1,
            hostile: 1,
            cancelled: 0,
            errors: 0,
            share: 1.0,
        };
        assert_eq!(x_range(&[p(8.0), p(450.0)]), (1.0, 1000.0));
        assert_eq!(x_range(&[p(10.0)]), (10.0, 100.0));
        assert_eq!(ticks(1.0, 100.0), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(tick_label(2000.0), "2 s");
        assert_eq!(tick_label(0.5), "0.5 ms");
    }

    #[test]
    fn svg_snapshot_and_hostile_names_are_inert() {
        let pts = vec![
            Point {
                tier: "process".into(),
                latency_ms: 8.4,
                start: "warm".into(),
                runs: 10,
                source: "benchmark".into(),
                cancelled: 0,
                errors: 0,
                contained: 15,
                hostile: 17,
                share: 15.0 / 17.0,
            },
            Point {
                tier: "microvm".into(),
                latency_ms: 950.0,
                start: "warm".into(),
                runs: 10,
                source: "benchmark".into(),
                cancelled: 0,
                errors: 0,
                contained: 17,
                hostile: 17,
                share: 1.0,
            },
            Point {
                tier: "<script>alert(1)</script>\x1b]52;c;eA==\x07".into(),
                latency_ms: 60.0,
                start: "cold".into(),
                runs: 10,
                source: "benchmark".into(),
                cancelled: 0,
                errors: 0,
                contained: 10,
                hostile: 17,
                share: 10.0 / 17.0,
            },
        ];
        let s = svg(&pts);
        assert!(!s.contains("<script") && !s.contains('\x1b') && !s.contains('\x07'), "{s}");
        assert!(s.contains("&lt;script&gt;"));
        insta::assert_snapshot!(s);
    }
}
