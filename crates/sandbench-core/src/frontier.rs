//! The safety × latency frontier: what each tier costs (warm p50 time to a
//! finished `print`-sized run, log scale) against what it stops (the share of
//! the last gauntlet's hostile samples it contained). The one computation
//! behind the report's chart, the workbench's chart and the README picture,
//! plus its rendering as a self-contained SVG.

use serde::{Deserialize, Serialize};

use crate::compare::Summary;
use crate::gauntlet::{Cell, Latency, Verdict};

/// One measured latency of a tier.
#[derive(Debug, Clone, PartialEq)]
pub struct Obs {
    pub tier: String,
    /// "warm", "cold", "snapshot", ...
    pub start: String,
    pub p50_ms: f64,
    pub runs: usize,
}

/// Latencies a gauntlet measured on its benign controls.
pub fn obs_of_gauntlet(l: &[Latency]) -> Vec<Obs> {
    l.iter().map(|l| Obs { tier: l.tier.clone(), start: l.start.clone(), p50_ms: l.p50_ms, runs: l.runs }).collect()
}

/// Latencies of a compare (time to exit, per start kind).
pub fn obs_of_compare(s: &Summary) -> Vec<Obs> {
    s.tiers
        .iter()
        .flat_map(|t| {
            t.exit_p50_by_start_ms.iter().map(|(start, p50)| Obs {
                tier: t.tier.clone(),
                start: start.clone(),
                p50_ms: *p50,
                runs: t.starts.get(start).copied().unwrap_or(0),
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub tier: String,
    /// p50 latency (ms) of the start kind below: warm when the tier has warm
    /// runs, else its fastest measured kind (a tier without a pool is never warm).
    pub latency_ms: f64,
    pub start: String,
    /// Hostile cells of the tier that were contained, of all its hostile cells
    /// (an escape or an error counts as not contained).
    pub contained: usize,
    pub hostile: usize,
    /// contained / hostile, 0..=1.
    pub share: f64,
}

/// A point per tier of `tiers` that has both hostile cells and a latency.
/// Tiers without one are returned with the reason, for a footnote.
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
            missing.push((t.clone(), "no hostile sample ran on it".into()));
            continue;
        }
        let contained = mine.iter().filter(|c| matches!(c.verdict, Verdict::Contained { .. })).count();
        let obs: Vec<&Obs> =
            latency.iter().filter(|o| &o.tier == t && o.p50_ms.is_finite() && o.p50_ms > 0.0).collect();
        let warm: Vec<&&Obs> = obs.iter().filter(|o| o.start == "warm").collect();
        let pick = if warm.is_empty() {
            obs.iter().min_by(|a, b| a.p50_ms.total_cmp(&b.p50_ms))
        } else {
            warm.into_iter().max_by_key(|o| o.runs)
        };
        let Some(o) = pick else {
            missing.push((t.clone(), "no latency measured".into()));
            continue;
        };
        out.push(Point {
            tier: t.clone(),
            latency_ms: o.p50_ms,
            start: o.start.clone(),
            contained,
            hostile: mine.len(),
            share: contained as f64 / mine.len() as f64,
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
    crate::sanitize::inert_line(s, 200)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
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
<text x=\"{:.1}\" y=\"{:.1}\">{tier} · {} {} · {c}/{n} contained</text></g>\n",
            py + 3.5,
            lx + 7.0,
            ly - 4.0,
            lx + 7.0,
            ly - 0.5,
            lx + 20.0,
            ly,
            tick_label((p.latency_ms * 10.0).round() / 10.0),
            escape(&p.start),
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

    fn obs(tier: &str, start: &str, p50: f64, runs: usize) -> Obs {
        Obs { tier: tier.into(), start: start.into(), p50_ms: p50, runs }
    }

    #[test]
    fn points_use_warm_latency_and_count_escapes_and_errors_as_not_contained() {
        let cells = vec![
            cell("process", true, contained()),
            cell("process", true, Verdict::Escaped { what: vec!["x".into()] }),
            cell("process", true, Verdict::Error { why: "y".into() }),
            cell("process", true, contained()),
            cell("process", false, Verdict::Ran),
            cell("docker", true, contained()),
            cell("e2b", false, Verdict::Ran),
        ];
        let lat = vec![
            obs("process", "cold", 20.0, 3),
            obs("process", "warm", 9.0, 1),
            obs("process", "warm", 8.0, 5),
            obs("docker", "cold", 300.0, 3),
            obs("docker", "snapshot", 200.0, 3),
        ];
        let tiers: Vec<String> = ["process", "docker", "e2b", "gvisor"].map(String::from).to_vec();
        let (p, missing) = points(&tiers, &cells, &lat);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].latency_ms, p[0].start.as_str()), (8.0, "warm"));
        assert_eq!((p[0].contained, p[0].hostile, p[0].share), (2, 4, 0.5));
        // No warm runs: the fastest kind measured, and it says which.
        assert_eq!((p[1].latency_ms, p[1].start.as_str(), p[1].share), (200.0, "snapshot", 1.0));
        assert_eq!(missing.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(), ["e2b", "gvisor"]);
    }

    #[test]
    fn log_axis_spans_whole_decades() {
        let p = |ms: f64| Point {
            tier: "t".into(),
            latency_ms: ms,
            start: "warm".into(),
            contained: 1,
            hostile: 1,
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
                contained: 15,
                hostile: 17,
                share: 15.0 / 17.0,
            },
            Point {
                tier: "microvm".into(),
                latency_ms: 950.0,
                start: "warm".into(),
                contained: 17,
                hostile: 17,
                share: 1.0,
            },
            Point {
                tier: "<script>alert(1)</script>\x1b]52;c;eA==\x07".into(),
                latency_ms: 60.0,
                start: "cold".into(),
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
