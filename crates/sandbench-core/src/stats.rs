//! Statistics shared by every measuring front end (bench, compare,
//! gauntlet latency, reports): one percentile, one way to summarise.

/// The `p` quantile (0..=1) of sorted samples, nearest rank; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// One bar of a histogram: samples in `lo_ms..hi_ms` (the last bin
/// includes its upper edge).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bin {
    pub lo_ms: f64,
    pub hi_ms: f64,
    pub count: usize,
}

/// `bins` equal-width bins from the smallest to the largest sample (oha's
/// histogram). Non-finite samples are left out; no samples, no bins; all
/// samples equal, one bin.
pub fn histogram(samples: &[f64], bins: usize) -> Vec<Bin> {
    let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    let (Some(lo), Some(hi)) = (v.iter().copied().reduce(f64::min), v.iter().copied().reduce(f64::max)) else {
        return vec![];
    };
    if hi <= lo || bins <= 1 {
        return vec![Bin { lo_ms: lo, hi_ms: hi, count: v.len() }];
    }
    let w = (hi - lo) / bins as f64;
    let mut out: Vec<Bin> =
        (0..bins).map(|i| Bin { lo_ms: lo + w * i as f64, hi_ms: lo + w * (i + 1) as f64, count: 0 }).collect();
    for x in v {
        let i = (((x - lo) / w) as usize).min(bins - 1);
        out[i].count += 1;
    }
    out[bins - 1].hi_ms = hi;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_cover_every_sample() {
        let h = histogram(&[1.0, 2.0, 2.5, 10.0, f64::NAN], 3);
        assert_eq!(h.iter().map(|b| b.count).collect::<Vec<_>>(), [3, 0, 1]);
        assert_eq!((h[0].lo_ms, h[2].hi_ms), (1.0, 10.0));
        assert_eq!(histogram(&[5.0, 5.0], 8), [Bin { lo_ms: 5.0, hi_ms: 5.0, count: 2 }]);
        assert!(histogram(&[], 4).is_empty());
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.95), 95.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
