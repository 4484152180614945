//! The guest's clock. A microvm has no HPET, no ACPI PM timer and (under
//! TCG) no kvm-clock, so unless told otherwise its kernel keeps time with
//! jiffies: every timestamp, sleep and CPU count in 4 ms steps, and a
//! periodic tick even while the guest idles in the pool. Its TSC, though,
//! is the host's own counter (TCG's `rdtsc` reads the host's; under KVM it
//! runs at the host's rate), so a guest told the host's TSC rate can use
//! it: `tsc_early_khz` gives the rate (and skips a calibration that hangs
//! under TCG), `tsc=reliable` says there is nothing to check it against.
//! The rate is measured here, once per process, against the host kernel's
//! own clock. Only a TSC the host kernel itself keeps time with is used
//! (`tsc=reliable` turns the guest's own checks off, so the host's verdict
//! stands in for them: a TSC it found unsynchronized between CPUs would
//! jump as QEMU's thread moves); any other host keeps the jiffies clock.
#![allow(unsafe_code)] // rdtsc

use std::sync::OnceLock;
use std::time::Duration;

/// The host's TSC rate in kHz, when the host has an invariant TSC and its
/// kernel keeps time with it.
pub fn host_tsc_khz() -> Option<u64> {
    static KHZ: OnceLock<Option<u64>> = OnceLock::new();
    *KHZ.get_or_init(|| host_keeps_time_with_tsc().then(|| measure(Duration::from_millis(10))).flatten())
}

/// The host's TSC is invariant and its kernel's clocksource.
fn host_keeps_time_with_tsc() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let clock =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource").unwrap_or_default();
    invariant(&cpuinfo) && clock.trim() == "tsc"
}

/// What a guest's clock will be, for `setup` and `doctor`: Ok when it is
/// the host's TSC, Err (a warning) when it is jiffies.
pub(crate) fn describe(tsc_khz: Option<u64>) -> Result<String, String> {
    match tsc_khz {
        Some(k) => Ok(format!("the guest keeps time with the host's TSC ({:.1} MHz)", k as f64 / 1000.0)),
        None => {
            Err("guests keep time in 4 ms jiffies: the host's TSC is not invariant, or not its kernel's clock".into())
        }
    }
}

/// The kernel command line's clock part for a guest given this rate.
pub(crate) fn kernel_args(tsc_khz: Option<u64>) -> String {
    match tsc_khz {
        Some(k) => format!("tsc_early_khz={k} tsc=reliable"),
        // A nominal rate only skips the calibration; the kernel does not
        // trust the TSC and keeps time with jiffies.
        None => "tsc_early_khz=2000000".into(),
    }
}

/// A guest booted with rate `then` keeps time with a host whose rate is
/// `now`: two measurements of one host differ by tens of parts per million;
/// 200 ppm is 12 ms a minute, and the host sets the guest's clock each call.
pub(crate) fn same_rate(then: Option<u64>, now: Option<u64>) -> bool {
    match (then, now) {
        (None, None) => true,
        (Some(a), Some(b)) => a.abs_diff(b).saturating_mul(5_000) <= b,
        _ => false,
    }
}

/// Both flags: a TSC that ticks at one rate whatever the core's frequency
/// and power state.
fn invariant(cpuinfo: &str) -> bool {
    cpuinfo.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
        let has = |name: &str| l.split_whitespace().any(|x| x == name);
        has("constant_tsc") && has("nonstop_tsc")
    })
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    #[allow(unused_unsafe)] // a safe fn in newer toolchains
    // SAFETY: reads the time-stamp counter; every x86_64 CPU has it.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// One reading of the host's raw monotonic clock (ns) and the TSC at that
/// moment (the middle of two reads around it), with the two reads' distance.
#[cfg(target_arch = "x86_64")]
fn pair() -> Option<(u128, u64, u64)> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let before = rdtsc();
    // SAFETY: `t` is a valid timespec for the kernel to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut t) } == 0;
    let after = rdtsc();
    let gap = after.checked_sub(before).filter(|_| ok)?;
    let ns = u128::try_from(t.tv_sec).ok()? * 1_000_000_000 + u128::try_from(t.tv_nsec).ok()?;
    Some((ns, before + gap / 2, gap))
}

/// The tightest of a few readings: one taken while the thread was
/// preempted would be off by the preemption.
#[cfg(target_arch = "x86_64")]
fn best_pair() -> Option<(u128, u64)> {
    let (ns, tsc, gap) = (0..16).filter_map(|_| pair()).min_by_key(|p| p.2)?;
    // ~10 µs at the slowest rate accepted below: a 10 ms window then errs
    // by less than 0.1%; a quiet host's gap is well under a microsecond.
    (gap < 20_000).then_some((ns, tsc))
}

/// TSC ticks over `over` of the host kernel's raw clock, in kHz; None for a
/// result no real TSC has (a counter that stood still or ran backwards).
#[cfg(target_arch = "x86_64")]
fn measure(over: Duration) -> Option<u64> {
    let (t0, c0) = best_pair()?;
    std::thread::sleep(over);
    let (t1, c1) = best_pair()?;
    let (dt, dc) = (t1.checked_sub(t0)?, c1.checked_sub(c0)?);
    let khz = u64::try_from(dc as u128 * 1_000_000 / dt.max(1)).ok()?;
    (100_000..=20_000_000).contains(&khz).then_some(khz)
}

#[cfg(not(target_arch = "x86_64"))]
fn measure(_over: Duration) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_flags_make_an_invariant_tsc() {
        assert!(invariant("processor : 0\nflags\t\t: fpu tsc constant_tsc rep_good nonstop_tsc cpuid\n"));
        assert!(!invariant("flags\t\t: fpu tsc constant_tsc\n"));
        assert!(!invariant("flags\t\t: fpu tsc nonstop_tsc_x constant_tsc\n"));
        assert!(!invariant(""));
    }

    #[test]
    fn rates_within_two_hundred_parts_per_million_are_the_same_clock() {
        assert!(same_rate(Some(2_445_428), Some(2_445_428)));
        assert!(same_rate(Some(2_445_900), Some(2_445_428)));
        assert!(!same_rate(Some(2_446_000), Some(2_445_428)));
        assert!(!same_rate(Some(2_000_000), Some(2_445_428)));
        assert!(!same_rate(None, Some(2_445_428)) && !same_rate(Some(2_445_428), None));
        assert!(same_rate(None, None));
    }

    #[test]
    fn the_kernel_is_told_a_measured_rate_or_keeps_jiffies() {
        assert_eq!(kernel_args(Some(2_445_428)), "tsc_early_khz=2445428 tsc=reliable");
        assert!(!kernel_args(None).contains("reliable"));
        assert_eq!(describe(Some(2_445_428)).unwrap(), "the guest keeps time with the host's TSC (2445.4 MHz)");
        assert!(describe(None).unwrap_err().contains("4 ms jiffies"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn two_measurements_of_this_host_agree() {
        if !host_keeps_time_with_tsc() {
            // Such a host's guests keep the jiffies clock.
            assert_eq!(host_tsc_khz(), None);
            return;
        }
        let a = measure(Duration::from_millis(5)).expect("an invariant TSC is measurable");
        let b = measure(Duration::from_millis(20)).expect("an invariant TSC is measurable");
        assert!(same_rate(Some(a), Some(b)), "{a} vs {b} kHz");
        assert!(host_tsc_khz().is_some());
    }
}
