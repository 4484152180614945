//! `sandbench doctor`: per tier, available or exactly why not, and the fix.

use crate::cli::{DoctorArgs, Format};
use crate::config::Config;
use crate::tier::{self, Availability};

pub async fn probe_all(config: &Config) -> Vec<Availability> {
    let mut out = vec![];
    // sandbench's tiers, then the peers (other tools' sandboxes): installed
    // with their version, or the command that installs them.
    let mut names: Vec<String> = tier::KNOWN.iter().map(|s| s.to_string()).collect();
    match tier::peer::names() {
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

pub fn render(all: &[Availability]) -> String {
    let mut s = String::new();
    for a in all {
        s.push_str(&format!("{:<9} {} {}\n", a.tier, if a.available { "✓" } else { "✗" }, a.summary));
        for c in &a.checks {
            s.push_str(&format!("    {} {:<11} {}\n", if c.ok { "✓" } else { "✗" }, c.name, c.detail));
            if let Some(fix) = &c.fix {
                s.push_str(&format!("      fix: {fix}\n"));
            }
        }
    }
    s
}
