//! How every front end writes a measured duration or size: one rounding rule
//! and a unit on every figure, so that the same quantity reads the same in the
//! workbench, the command line and the exports (`12 ms`, `1.29 s`, `17.3 MiB`).
//! Limits keep their own, parseable syntax (`5s`, `256M`: `spec::format_*`);
//! machine formats (JSON, CSV) keep raw numbers with the unit in the field name.

/// A duration given in milliseconds, to three significant figures: `0.42 ms`,
/// `5.34 ms`, `17.5 ms`, `472 ms`, `1.29 s`, `12.3 s`, `125 s`. Unknown (not a
/// finite, non-negative number) is `—`.
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "—".into();
    }
    if ms == 0.0 {
        return "0 ms".into();
    }
    // Decide on the rounded value, so 999.6 ms reads "1.00 s", not "1000 ms".
    if ms < 9.995 {
        format!("{ms:.2} ms")
    } else if ms < 99.95 {
        format!("{ms:.1} ms")
    } else if ms < 999.5 {
        format!("{ms:.0} ms")
    } else if ms < 9995.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms < 99_950.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{:.0} s", ms / 1000.0)
    }
}

/// `duration_ms` with at least enough decimals that values `step_ms` apart
/// read differently (histogram bin edges: `19.2 ms`, `19.6 ms`, not `19 ms` twice).
pub fn duration_ms_step(ms: f64, step_ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "—".into();
    }
    let (v, unit, step) = if ms >= 999.5 { (ms / 1000.0, "s", step_ms / 1000.0) } else { (ms, "ms", step_ms) };
    let plain = duration_ms(ms);
    let shown = plain.split(' ').next().unwrap_or("").split('.').nth(1).map_or(0, str::len);
    let needed = if step > 0.0 && step.is_finite() { (-step.log10()).ceil().max(0.0) as usize } else { 0 };
    if needed <= shown {
        plain
    } else {
        format!("{v:.prec$} {unit}", prec = needed.min(4))
    }
}

const UNITS: [(&str, &str); 5] = [("B", "B"), ("KiB", "K"), ("MiB", "M"), ("GiB", "G"), ("TiB", "T")];

/// (value, unit index) of `bytes`, after the rounding `size` shows: a value
/// that rounds to 1024 moves up a unit.
fn scaled(bytes: u64) -> (f64, usize) {
    let mut v = bytes as f64;
    let mut i = 0;
    while i + 1 < UNITS.len() && (v >= 1024.0 || (i > 0 && round_shown(v) >= 1024.0)) {
        v /= 1024.0;
        i += 1;
    }
    (v, i)
}

fn round_shown(v: f64) -> f64 {
    if v >= 99.95 {
        v.round()
    } else {
        v
    }
}

/// Three significant figures (whole bytes as they are).
fn number(v: f64, i: usize) -> String {
    if i == 0 || v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A size in bytes with a binary unit, to three significant figures:
/// `512 B`, `10.1 KiB`, `5.73 MiB`, `256 MiB`, `1.50 GiB`.
pub fn size(bytes: u64) -> String {
    let (v, i) = scaled(bytes);
    format!("{} {}", number(v, i), UNITS[i].0)
}

/// The same figure for narrow panes, with the one-letter units of the limit
/// syntax: `512B`, `10.1K`, `5.73M`, `256M`.
pub fn size_short(bytes: u64) -> String {
    let (v, i) = scaled(bytes);
    format!("{}{}", number(v, i), UNITS[i].1)
}

/// An optional figure: unknown is `—`, never 0.
pub fn or_dash<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_keep_three_figures_and_a_unit() {
        let cases = [
            (0.0, "0 ms"),
            (0.004, "0.00 ms"),
            (0.424, "0.42 ms"),
            (5.344, "5.34 ms"),
            (9.996, "10.0 ms"),
            (17.5, "17.5 ms"),
            (99.96, "100 ms"),
            (999.4, "999 ms"),
            (999.6, "1.00 s"),
            (1292.9, "1.29 s"),
            (12_345.0, "12.3 s"),
            (125_000.0, "125 s"),
        ];
        for (ms, want) in cases {
            assert_eq!(duration_ms(ms), want, "{ms}");
        }
        assert_eq!(duration_ms(f64::NAN), "—");
        assert_eq!(duration_ms(-1.0), "—");
    }

    #[test]
    fn bin_edges_a_step_apart_read_differently() {
        let edges: Vec<String> = (0..5).map(|i| duration_ms_step(118.7 + i as f64 * 0.45, 0.45)).collect();
        assert_eq!(edges, ["118.7 ms", "119.2 ms", "119.6 ms", "120.0 ms", "120.5 ms"]);
        let mut dedup = edges.clone();
        dedup.dedup();
        assert_eq!(dedup, edges);
        // Coarse steps keep the plain form.
        assert_eq!(duration_ms_step(120.0, 20.0), "120 ms");
        assert_eq!(duration_ms_step(2610.0, 150.0), "2.61 s");
        assert_eq!(duration_ms_step(2610.0, 5.0), "2.610 s");
    }

    #[test]
    fn sizes_use_binary_units_and_move_up_when_they_round_to_1024() {
        let cases = [
            (0u64, "0 B", "0B"),
            (512, "512 B", "512B"),
            (10_342, "10.1 KiB", "10.1K"),
            (10_385 << 10, "10.1 MiB", "10.1M"),
            (5_870 << 10, "5.73 MiB", "5.73M"),
            (256 << 20, "256 MiB", "256M"),
            ((3 << 30) / 2, "1.50 GiB", "1.50G"),
            ((1 << 20) - 1, "1.00 MiB", "1.00M"),
        ];
        for (b, long, short) in cases {
            assert_eq!((size(b).as_str(), size_short(b).as_str()), (long, short), "{b}");
        }
    }
}
