//! `sandbench doctor`: per tier, available or exactly why not, and the fix.

use crate::cli::{DoctorArgs, Format};
use crate::config::Config;
use crate::tier::{self, Availability};

pub async fn probe_all(config: &Config) -> Vec<Availability> {
    let mut out = vec![];
    // sandbench's tiers, then the peers (other tools' sandboxes): installed
    // with their version, or the command that installs them.
    let mut names: Vec<String> = tier::KNOWN.iter().map(|s| s.to_string()).collect();
    match tier::peer_names() {
        Ok(peers) => names.extend(peers.into_iter().map(String::from)),
        Err(e) => out.push(Availability { tier: "peers".into(), available: false, summary: e, checks: vec![] }),
    }
    for name in &names {
        match tier::by_name(name, config) {
            Ok(t) => out.push(t.probe().await),
            Err(e) => out.push(Availability {
                tier: name.to_string(),
                available: false,
                summary: format!("{e:#}"),
                checks: vec![],
            }),
        }
    }
    out
}

pub async fn run(args: DoctorArgs, config: &Config) -> anyhow::Result<i32> {
    let all = probe_all(config).await;
    match args.format {
        Format::Json => super::emit_json(&all)?,
        Format::Text => super::emit(&render(&all))?,
    }
    Ok(0)
}

/// The text `doctor` prints: per tier ✓ ready, ⚠ ready with a warning (a
/// fallback that works, slower or weaker, and why), ✗ unavailable; per check
/// the same, with the fix.
pub fn render(all: &[Availability]) -> String {
    let mut s = String::new();
    for a in all {
        // Ready through a slower or weaker fallback: ready, with a warning.
        let warned = a.checks.iter().any(|c| c.level == crate::tier::CheckLevel::Warn);
        let glyph = match (a.available, warned) {
            (false, _) => "✗",
            (true, true) => "⚠",
            (true, false) => "✓",
        };
        s.push_str(&format!("{:<9} {glyph} {}\n", a.tier, a.summary));
        for c in &a.checks {
            s.push_str(&format!("    {} {:<11} {}\n", c.glyph(), c.name, c.detail));
            if let Some(fix) = &c.fix {
                s.push_str(&format!("      fix: {fix}\n"));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::render;
    use crate::tier::{Availability, Check};

    #[test]
    fn a_working_but_slower_fallback_is_a_warning_with_its_reason() {
        let a = Availability {
            tier: "microvm".into(),
            available: true,
            summary: "ready (accel tcg)".into(),
            checks: vec![
                Check::ok("qemu", "QEMU 7.2"),
                Check::warn("accel", "TCG (software emulation, slow): KVM guest failed to start", "fix KVM"),
            ],
        };
        let text = render(std::slice::from_ref(&a));
        assert!(text.starts_with("microvm   ⚠ ready"), "{text}");
        assert!(text.contains("    ⚠ accel       TCG (software emulation, slow): KVM guest failed to start"), "{text}");
        assert!(text.contains("      fix: fix KVM"), "{text}");
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["checks"][1]["level"], "warn");
        assert_eq!(json["checks"][1]["ok"], true, "it works");
        assert_eq!(json["checks"][0]["level"], "ok");
        let failed = Check::fail("key", "E2B_API_KEY is not set", "export it");
        assert_eq!(serde_json::to_value(&failed).unwrap()["level"], "fail");
    }
}
