//! Gauntlet view: the matrix (rows = samples, columns = tiers) filling live,
//! and the selected cell's details below it (Enter zooms them).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell as TCell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use super::common::{bold, pane};
use super::scene::Scene;
use crate::gauntlet::Verdict;
use crate::spec::format_duration;
use crate::spec::format_size;
use crate::tui::gauntlet_view::{CellView, GState, GauntletView, Head};
use crate::tui::theme::Theme;
use crate::units::duration_ms;

pub struct GLayout {
    pub matrix: Rect,
    pub details: Rect,
}

/// Lines under the matrix at `width` columns (borders included): the
/// failure, the latency and the skipped tiers (wrapped, never cut), and the
/// legend when the cells are abbreviated.
fn info(t: &Theme, g: &GauntletView, width: u16) -> Vec<Line<'static>> {
    let w = width.saturating_sub(2).max(10) as usize;
    let mut out = vec![];
    if let Some(e) = &g.error {
        out.push(Line::from(Span::styled(format!("the gauntlet failed: {e}"), bold(Style::new().fg(t.ui.error)))));
    }
    if !g.latency.is_empty() {
        let units: Vec<Vec<Span<'static>>> = g
            .latency
            .iter()
            .map(|l| {
                vec![
                    Span::styled(format!("{} ", l.tier), bold(Style::new().fg(t.ui.accent))),
                    Span::styled(
                        format!(
                            "{} p50 {} p95 {} ({} runs)",
                            l.start,
                            duration_ms(l.p50_ms),
                            duration_ms(l.p95_ms),
                            l.runs
                        ),
                        Style::new().fg(t.ui.fg),
                    ),
                ]
            })
            .collect();
        out.extend(wrap_units(Span::styled("benign latency ", t.dim()), units, w));
    }
    if !g.skipped.is_empty() {
        let units = g
            .skipped
            .iter()
            .map(|(n, why)| vec![Span::styled(format!("{n} ({why})"), Style::new().fg(t.ui.warn))])
            .collect();
        out.extend(wrap_units(Span::styled("not in the matrix: ", t.dim()), units, w));
    }
    if abbreviated(g, width) {
        // Only the short names the cells use.
        let (_, col, _) = columns(g, width);
        let shown: Vec<String> = g.cells.iter().flatten().flatten().map(|cv| fitted_text(cv, col as usize)).collect();
        let mut units = vec!["a limit's name = contained by it".to_string()];
        for (short, long) in [
            ("wall", "wall time"),
            ("cpu", "CPU time"),
            ("mem", "memory"),
            ("fsize", "file size"),
            ("out", "output"),
            ("net", "network"),
            ("blocked", "refused"),
        ] {
            let used = shown.iter().any(|c| c.split([' ', '+']).any(|w| w == short));
            if used {
                units.push(format!("{short} = {long}"));
            }
        }
        units.push("Enter: details".into());
        let units = units.into_iter().map(|u| vec![Span::styled(u, t.dim())]).collect();
        out.extend(wrap_units(Span::styled("short cells: ", t.dim()), units, w));
    }
    let (_, _, window) = columns(g, width);
    if window.len() < g.tiers.len() {
        let text = format!(
            "tiers {}–{} of {} shown: ←→ moves along them (a wider window shows them all)",
            window.start + 1,
            window.end,
            g.tiers.len()
        );
        out.push(Line::from(Span::styled(text, Style::new().fg(t.ui.warn))));
    }
    out
}

/// Fill lines of `w` columns with whole units (a tier's figures), two
/// spaces apart, after `head`; a unit longer than a line gets one of its own.
fn wrap_units(head: Span<'static>, units: Vec<Vec<Span<'static>>>, w: usize) -> Vec<Line<'static>> {
    let width = |u: &[Span]| u.iter().map(|s| s.content.chars().count()).sum::<usize>();
    let mut lines = vec![];
    let mut cur = vec![head.clone()];
    let mut used = head.content.chars().count();
    for u in units {
        let n = width(&u);
        if used > 0 && used + 2 + n > w && cur.len() > 1 {
            lines.push(Line::from(std::mem::take(&mut cur)));
            cur.push(Span::raw(" ".repeat(head.content.chars().count())));
            used = head.content.chars().count();
        }
        if cur.len() > 1 {
            cur.push(Span::raw("  "));
            used += 2;
        }
        cur.extend(u);
        used += n;
    }
    lines.push(Line::from(cur));
    lines
}

fn info_lines(theme: &Theme, g: &GauntletView, width: u16) -> u16 {
    info(theme, g, width).len() as u16
}

/// Narrowest tier column: `■ cancelled`, `▶ running…`, `✓ pids+wall`.
pub const MIN_CELL: u16 = 11;

/// Width of the name column and of each tier's column at `width`, and the
/// tiers shown: all of them when each gets `MIN_CELL` columns (the names
/// give way first, down to 16), else a window around the selected tier.
pub fn columns(g: &GauntletView, width: u16) -> (u16, u16, std::ops::Range<usize>) {
    let want = g.rows.iter().map(|r| r.name.chars().count() + 2).max().unwrap_or(8).clamp(10, 22) as u16;
    let n = g.tiers.len().max(1) as u16;
    let fits = |name_w: u16| width.saturating_sub(2 + name_w) / (MIN_CELL + 1);
    let name_w = if fits(want) >= n { want } else { want.min(16) };
    let fit = fits(name_w).clamp(1, n) as usize;
    let window = crate::tui::widgets::side::tier_window(g.tiers.len(), g.sel.1, fit);
    let shown = window.len().max(1) as u16;
    let col_w = width.saturating_sub(2 + name_w + shown) / shown;
    (name_w, col_w, window)
}

/// Whether some cell shows a shortened form at `width` (its full text would not fit).
fn abbreviated(g: &GauntletView, width: u16) -> bool {
    let (_, col, _) = columns(g, width);
    g.cells.iter().flatten().flatten().any(|cv| !cv.cancelled() && full_text(cv).chars().count() > col as usize)
}

/// A violation kind as short as a cell needs it.
fn short_kind(k: &str) -> &str {
    match k {
        "wall_timeout" => "wall",
        "cpu_time" => "cpu",
        "memory" => "mem",
        "file_size" => "fsize",
        "output_limit" => "out",
        "network" => "net",
        k => k,
    }
}

/// The longest form of a cell that fits `w` columns: the full words, the
/// limits' names, their short names, the first one and a `+`; cut with `…`
/// only when none fits.
fn fitted_text(cv: &CellView, w: usize) -> String {
    let fits = |s: &String| s.chars().count() <= w;
    let full = full_text(cv);
    if fits(&full) {
        return full;
    }
    let short = short_text(cv);
    if fits(&short) {
        return short;
    }
    if let Verdict::Contained { by } = &cv.cell.verdict {
        let mark = if cv.cell.as_expected { "✓" } else { "✗" };
        let deg = if cv.cell.degraded { "⚠ " } else { "" };
        let kinds: Vec<&str> = by.split('+').map(short_kind).collect();
        let abbr = format!("{mark} {deg}{}", kinds.join("+"));
        if fits(&abbr) {
            return abbr;
        }
        let first = format!("{mark} {deg}{}+", kinds[0]);
        if kinds.len() > 1 && fits(&first) {
            return first;
        }
    }
    let mut cut: String = short.chars().take(w.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn full_text(cv: &CellView) -> String {
    let mark = if cv.cell.as_expected { "✓" } else { "✗" };
    if cv.cell.degraded {
        format!("{mark} ⚠ {} (degraded)", cv.cell.verdict.short())
    } else {
        format!("{mark} {}", cv.cell.verdict.short())
    }
}

/// The short form: the limit that contained it, "blocked", "ran", "ESCAPED", "error".
fn short_text(cv: &CellView) -> String {
    let mark = if cv.cell.as_expected { "✓" } else { "✗" };
    let what = match &cv.cell.verdict {
        Verdict::Ran => "ran".to_string(),
        Verdict::Contained { by } => by.clone(),
        Verdict::Escaped { .. } => "ESCAPED".into(),
        Verdict::Error { .. } => "error".into(),
        Verdict::Cancelled => "cancelled".into(),
        Verdict::Incomplete { .. } => "INCOMPLETE".into(),
        Verdict::NotAvailable { .. } => "n/a".into(),
    };
    format!("{mark} {}{what}", if cv.cell.degraded { "⚠ " } else { "" })
}

pub fn layout(sc: &Scene, body: Rect) -> GLayout {
    match sc.gauntlet {
        Some(g) if g.zoom => GLayout { matrix: Rect { height: 0, ..body }, details: body },
        Some(g) => {
            let want = g.rows.len() as u16 + 3 + info_lines(sc.theme, g, body.width);
            let h = want.min(body.height.saturating_mul(55) / 100).max(5.min(body.height));
            let [matrix, details] = Layout::vertical([Constraint::Length(h), Constraint::Min(0)]).areas(body);
            GLayout { matrix, details }
        }
        None => GLayout { matrix: body, details: Rect { height: 0, ..body } },
    }
}

/// Rows the table shows (without its header) and lines the details pane shows.
pub fn rows(sc: &Scene, body: Rect) -> (u16, u16) {
    let l = layout(sc, body);
    let info = sc.gauntlet.map_or(0, |g| info_lines(sc.theme, g, body.width));
    (l.matrix.height.saturating_sub(3 + info), l.details.height.saturating_sub(2))
}

pub fn draw(sc: &Scene, f: &mut Frame, body: Rect) {
    let Some(g) = sc.gauntlet else {
        let t = sc.theme;
        let hint = vec![
            Line::from(Span::styled("no gauntlet yet", t.dim())),
            Line::from(vec![
                Span::styled("r", t.key()),
                Span::styled(" runs every sample on every ready tier; ", t.dim()),
                Span::styled("Esc", t.key()),
                Span::styled(" goes back", t.dim()),
            ]),
        ];
        // The gauntlet kept from an earlier run still draws the frontier.
        let fr = sc.frontier.as_ref().filter(|_| body.height >= 14);
        if let Some(fr) = fr {
            let mut hint = hint;
            hint.push(Line::from(Span::styled(
                "the frontier below is from the last gauntlet kept in the state dir (sandbench gauntlet or report)",
                t.dim(),
            )));
            let [top, chart] = Layout::vertical([Constraint::Length(5), Constraint::Min(8)]).areas(body);
            f.render_widget(
                Paragraph::new(hint).wrap(Wrap { trim: false }).block(pane(sc.theme, " gauntlet ", true)),
                top,
            );
            super::frontier::draw(sc.theme, f, chart, fr);
        } else {
            f.render_widget(Paragraph::new(hint).block(pane(sc.theme, " gauntlet ", true)), body);
        }
        return;
    };
    let l = layout(sc, body);
    if !g.zoom {
        draw_matrix(sc.theme, g, f, l.matrix);
    }
    // The frontier beside the details once the screen is wide enough for both.
    let fr = sc
        .frontier
        .as_ref()
        .filter(|fr| !g.zoom && l.details.width >= 100 && l.details.height >= 8 && !fr.points.is_empty());
    if let Some(fr) = fr {
        let [details, chart] = Layout::horizontal([Constraint::Min(50), Constraint::Percentage(45)]).areas(l.details);
        draw_details(sc.theme, g, f, details);
        super::frontier::draw(sc.theme, f, chart, fr);
    } else {
        draw_details(sc.theme, g, f, l.details);
    }
}

fn state_text(g: &GauntletView) -> String {
    let (done, total) = (g.done(), g.total());
    let bad = g.live_mismatches();
    let bad = if bad == 0 { "0 mismatches".to_string() } else { format!("{bad} ✗ mismatch(es)") };
    let stopped = g.cancelled_cells();
    let bad = if stopped > 0 { format!("{stopped} stopped without a verdict · {bad} among the rest") } else { bad };
    match g.state {
        GState::Running => match g.running.and_then(|(r, c)| Some((g.rows.get(r)?, g.tiers.get(c)?))) {
            _ if g.calibrating.is_some() => format!(
                "{done}/{total} · measuring the load on {} (its limits follow it) · {bad}",
                g.calibrating.as_deref().unwrap_or_default()
            ),
            Some((row, tier)) => format!("{done}/{total} · running {} on {tier} · {bad}", row.name),
            None => format!("{done}/{total} · {bad}"),
        },
        GState::Cancelling => format!("{done}/{total} · cancelling (cleaning up the cell in progress)…"),
        GState::Finished => format!("finished · {done}/{total} cells · {bad}"),
        GState::Cancelled => format!("CANCELLED · {done} of {total} cells ran · {bad}"),
        GState::Failed => format!("failed · {done}/{total} cells"),
    }
}

/// Short text and style of a cell.
fn cell_text(t: &Theme, g: &GauntletView, r: usize, c: usize, col_w: u16) -> (String, Style) {
    match &g.cells[r][c] {
        Some(cv) if cv.cancelled() => ("■ cancelled".into(), Style::new().fg(t.ui.warn)),
        Some(cv) => {
            // The full words when they fit, else a short form (the legend says how to read it).
            let text = fitted_text(cv, col_w as usize);
            // A pass in a sandbox that lacked protections is no plain pass.
            let st = if cv.cell.degraded { Style::new().fg(t.ui.warn) } else { verdict_style(t, &cv.cell.verdict) };
            (text, st)
        }
        None if g.running == Some((r, c)) => ("▶ running…".into(), bold(Style::new().fg(t.ui.accent))),
        None if g.active() => ("·".into(), t.dim()),
        None => ("– not run".into(), t.dim()),
    }
}

pub fn verdict_style(theme: &Theme, v: &Verdict) -> Style {
    let t = &theme.ui;
    match v {
        Verdict::Ran | Verdict::Contained { .. } => Style::new().fg(t.ok),
        Verdict::Escaped { .. } | Verdict::Incomplete { .. } => bold(Style::new().fg(t.violation)),
        Verdict::Error { .. } | Verdict::Cancelled | Verdict::NotAvailable { .. } => Style::new().fg(t.warn),
    }
}

fn draw_matrix(t: &Theme, g: &GauntletView, f: &mut Frame, area: Rect) {
    let title = format!(" gauntlet · {} ", state_text(g));
    let block = pane(t, title, !g.zoom);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let info = info(t, g, area.width);
    // The matrix keeps three rows (and its header) before the notes get theirs.
    let keep = 1 + (g.rows.len() as u16).min(3);
    let info_h = (info.len() as u16).min(inner.height.saturating_sub(keep));
    let [table_area, info_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(info_h)]).areas(inner);

    let (name_w, col_w, window) = columns(g, area.width);
    let mut header = vec![TCell::from("program")];
    header.extend(g.tiers[window.clone()].iter().map(|n| TCell::from(n.clone())));
    let header = Row::new(header).style(bold(Style::new().fg(t.ui.title)));
    let rows = g.rows.iter().enumerate().map(|(r, row)| {
        let tag = if row.hostile {
            Span::styled("☠ ", Style::new().fg(t.ui.violation))
        } else {
            Span::styled("· ", Style::new().fg(t.ui.ok))
        };
        let name: String = if row.name.chars().count() + 2 > name_w as usize {
            row.name.chars().take((name_w as usize).saturating_sub(3)).chain(['…']).collect()
        } else {
            row.name.clone()
        };
        let mut cells = vec![TCell::from(Line::from(vec![tag, Span::styled(name, Style::new().fg(t.ui.fg))]))];
        for c in window.clone() {
            let (text, mut st) = cell_text(t, g, r, c, col_w);
            if g.sel == (r, c) {
                st = st.bg(t.ui.selection_bg).add_modifier(Modifier::BOLD);
            }
            cells.push(TCell::from(Span::styled(text, st)));
        }
        Row::new(cells)
    });
    let mut widths = vec![Constraint::Length(name_w)];
    widths.extend(window.clone().map(|_| Constraint::Fill(1)));
    let table = Table::new(rows, widths).header(header).column_spacing(1);
    let mut state = TableState::default().with_selected(Some(g.sel.0));
    f.render_stateful_widget(table, table_area, &mut state);

    f.render_widget(Paragraph::new(info), info_area);
}

fn draw_details(theme: &Theme, g: &GauntletView, f: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    let (r, c) = g.sel;
    let (Some(row), Some(tier)) = (g.rows.get(r), g.tiers.get(c)) else {
        f.render_widget(Paragraph::new("no cell").block(pane(theme, " details ", g.zoom)), area);
        return;
    };
    let hint = if g.zoom { "Enter/Esc back · ↑↓ scroll" } else { "Enter zooms" };
    let title = format!(" {} on {tier} · {hint} ", row.name);
    let block = pane(theme, title, g.zoom);
    let lines = detail_lines(theme, g, r, c);
    let inner = block.inner(area);
    // Rows the wrapped lines take (word wrapping may take a few more).
    let w = inner.width.max(1) as usize;
    let total: usize = lines.iter().map(|l| l.width().div_ceil(w).max(1)).sum();
    let scroll = if g.zoom { g.scroll.fit(0, total as u64, inner.height as u64) } else { 0 };
    f.render_widget(
        Paragraph::new(lines).block(block).wrap(Wrap { trim: false }).scroll((scroll.min(u16::MAX as u64) as u16, 0)),
        area,
    );
}

fn field<'a>(theme: &Theme, k: &str, v: impl Into<Line<'a>>) -> Line<'a> {
    let mut spans = vec![Span::styled(format!("{k:<11}"), theme.key())];
    spans.extend(v.into().spans);
    Line::from(spans)
}

fn plain(theme: &Theme, s: String) -> Span<'static> {
    Span::styled(s, Style::new().fg(theme.ui.fg))
}

/// What the details pane shows for cell (r, c).
pub fn detail_lines(t: &Theme, g: &GauntletView, r: usize, c: usize) -> Vec<Line<'static>> {
    let row = &g.rows[r];
    let mut lines = vec![];
    lines.push(field(
        t,
        "sample",
        plain(t, format!("{} ({})", row.name, if row.hostile { "hostile" } else { "benign control" })),
    ));
    lines.push(field(t, "tries", plain(t, row.tries.clone())));
    lines.push(field(t, "must", plain(t, row.must.clone())));
    let cv: &CellView = match &g.cells[r][c] {
        Some(cv) => cv,
        None => {
            let what = if g.running == Some((r, c)) {
                "running now…"
            } else if g.active() {
                "waiting for its turn"
            } else {
                "not run (the gauntlet was cancelled or failed before it)"
            };
            lines.push(field(t, "verdict", Span::styled(what, t.dim())));
            return lines;
        }
    };
    let cell = &cv.cell;
    let rep = &cell.report;
    lines.push(field(t, "verdict", Span::styled(cell.verdict.short(), bold(verdict_style(t, &cell.verdict)))));
    lines.push(field(t, "expected", plain(t, cell.expected.clone().unwrap_or_else(|| "— (none declared)".into()))));
    if cell.degraded {
        let what = format!("⚠ degraded: {}", rep.degraded.join("; "));
        lines.push(field(t, "sandbox", Span::styled(what, bold(Style::new().fg(t.ui.warn)))));
    }
    let mut got = rep.outcome.name().to_string();
    if !rep.violations.is_empty() {
        let kinds: Vec<&str> = rep.violations.iter().map(|v| v.kind.name()).collect();
        got.push_str(&format!(":{}", kinds.join("|")));
    }
    let (mark, mst) = if cell.as_expected {
        ("✓ as declared".to_string(), Style::new().fg(t.ui.ok))
    } else if cv.cancelled() {
        // Stopped by the user: no verdict, not a mismatch. What the program
        // did until then (its violations, its usage) is below.
        let at = rep.timings_ms.total;
        (format!("■ stopped by the cancel at {}: no verdict", duration_ms(at)), bold(Style::new().fg(t.ui.warn)))
    } else {
        (format!("✗ {}", cell.mismatch.clone().unwrap_or_default()), bold(Style::new().fg(t.ui.violation)))
    };
    lines.push(field(t, "got", Line::from(vec![plain(t, format!("{got}  ")), Span::styled(mark, mst)])));
    if rep.violations.is_empty() {
        lines.push(field(t, "violations", Span::styled("none", t.dim())));
    }
    for (i, v) in rep.violations.iter().enumerate() {
        lines.push(field(
            t,
            if i == 0 { "violations" } else { "" },
            Span::styled(
                format!("{} at {}: {}", v.kind.name(), duration_ms(v.at_ms), v.detail),
                Style::new().fg(t.ui.violation),
            ),
        ));
    }
    // What the host-side canaries saw.
    if cell.findings.escapes.is_empty() {
        lines.push(field(t, "canaries", Span::styled("nothing got out", Style::new().fg(t.ui.ok))));
    }
    for (i, e) in cell.findings.escapes.iter().enumerate() {
        lines.push(field(
            t,
            if i == 0 { "canaries" } else { "" },
            Span::styled(format!("ESCAPED: {e}"), bold(Style::new().fg(t.ui.violation))),
        ));
    }
    let planted = &cell.findings.planted;
    let secret = if planted.is_empty() {
        Span::styled("not planted (the cell did not run)", Style::new().fg(t.ui.warn))
    } else {
        let files = planted.iter().filter(|p| p.starts_with("secret file")).count();
        Span::styled(format!("planted (fake ANTHROPIC_API_KEY + {files} secret file(s))"), t.dim())
    };
    lines.push(field(t, "secret", Line::from(vec![Span::styled("secret canary: ", t.dim()), secret])));
    let latency = match (cell.findings.host_latency_ms_p50, cell.findings.host_latency_ms_max) {
        (Some(p50), Some(max)) => {
            format!("p50 {} · max {} (spawning /bin/true during the run)", duration_ms(p50), duration_ms(max))
        }
        _ => "not measured".into(),
    };
    lines.push(field(t, "host", plain(t, latency)));
    let exit = match &rep.error {
        Some(e) => Span::styled(format!("{} · {}", rep.exit.describe(), e), Style::new().fg(t.ui.error)),
        None => plain(t, rep.exit.describe()),
    };
    lines.push(field(t, "exit", exit));
    let tm = &rep.timings_ms;
    lines.push(field(
        t,
        "timings",
        plain(
            t,
            format!(
                "setup {} · run {} · teardown {} · total {} · {} start",
                duration_ms(tm.setup),
                duration_ms(tm.run),
                duration_ms(tm.teardown),
                duration_ms(tm.total),
                cell.start
            ),
        ),
    ));
    let u = &rep.usage;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    lines.push(field(
        t,
        "usage",
        plain(
            t,
            format!(
                "cpu {} · peak memory {} · peak pids {}",
                opt(u.cpu_ms.map(|ms| duration_ms(ms as f64))),
                opt(u.peak_memory_bytes.filter(|b| *b > 0).map(crate::units::size)),
                opt(u.peak_pids.map(|p| p.to_string()))
            ),
        ),
    ));
    // What this cell ran under: the plan's limits, or those scaled for its
    // tier's measured slowdown.
    let l = &rep.limits;
    let whose = if l.cpu_time == g.limits.cpu_time && l.wall_time == g.limits.wall_time {
        "the gauntlet's defaults"
    } else {
        "scaled for this tier's measured load and CPU"
    };
    lines.push(field(
        t,
        "limits",
        Span::styled(
            format!(
                "cpu {} · wall {} · memory {} · pids {} ({whose})",
                format_duration(l.cpu_time),
                format_duration(l.wall_time),
                format_size(l.memory_bytes),
                l.pids
            ),
            t.dim(),
        ),
    ));
    for (name, head, trunc, st) in [
        ("stdout", &cv.stdout, rep.stdout_truncated, Style::new().fg(t.ui.stdout)),
        ("stderr", &cv.stderr, rep.stderr_truncated, Style::new().fg(t.ui.stderr)),
    ] {
        lines.extend(stream_lines(t, name, head, trunc, st));
    }
    lines
}

fn stream_lines(t: &Theme, name: &str, h: &Head, truncated: bool, st: Style) -> Vec<Line<'static>> {
    let mut note = format!("{} bytes", h.bytes);
    if h.more > 0 {
        note.push_str(&format!(", first {} lines shown", h.lines.len()));
    }
    if truncated {
        note.push_str(", cut at the output limit");
    }
    let mut out = vec![Line::from(vec![
        Span::styled(format!("── {name} "), bold(Style::new().fg(t.ui.title))),
        Span::styled(format!("({note})"), t.dim()),
    ])];
    out.extend(h.lines.iter().map(|l| Line::from(Span::styled(format!("  {l}"), st))));
    if h.more > 0 {
        out.push(Line::from(Span::styled(format!("  … {} more line(s)", h.more), t.dim())));
    }
    out
}
