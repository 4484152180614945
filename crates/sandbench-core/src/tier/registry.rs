//! The registry: sandbench's own tiers by name, the peers after them, and
//! what is done to every tier at once (reaping leftovers, shutting down).
//! The one module above the tiers that names them; everything else takes a
//! `dyn Tier` through [`super::contract`].

use std::sync::Arc;

use serde::Serialize;

use super::contract::{refuse_allow_list, refuse_secrets, LimitMaxima, Tier};
use super::{background, docker, e2b, microvm, peer, process};
use crate::config::Config;

/// sandbench's own tiers, in order of isolation strength. Peers (other
/// tools' sandboxes, `peer::names()`) are tiers too, named by their profiles.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum TierKind {
    Process,
    Docker,
    Gvisor,
    Microvm,
    E2b,
}

impl TierKind {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// The names of sandbench's own tiers, in order of isolation strength.
pub const KNOWN: &[&str] = <TierKind as strum::VariantNames>::VARIANTS;

/// Whether the named tier can take secrets, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_secrets(name: &str, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    match name {
        "process" | "docker" | "gvisor" | "microvm" => Ok(()),
        "e2b" => e2b::refuse_secrets(secrets),
        other => refuse_secrets(other, secrets),
    }
}

/// Build the named tier.
pub fn by_name(name: &str, config: &Config) -> anyhow::Result<Arc<dyn Tier>> {
    match name.parse::<TierKind>() {
        Ok(TierKind::Process) => Ok(Arc::new(process::ProcessTier::new(config))),
        Ok(TierKind::Docker) => Ok(Arc::new(docker::DockerTier::docker(config))),
        Ok(TierKind::Gvisor) => Ok(Arc::new(docker::DockerTier::gvisor(config))),
        Ok(TierKind::E2b) => Ok(Arc::new(e2b::E2bTier::new(config))),
        Ok(TierKind::Microvm) => Ok(Arc::new(microvm::MicrovmTier::new(config))),
        Err(_) => match peer::by_name(name, config).map_err(|e| anyhow::anyhow!(e))? {
            Some(t) => Ok(t),
            None => anyhow::bail!("unknown tier '{name}' (known: {})", known_names().join(", ")),
        },
    }
}

/// The maxima of the named tier, without building it (the workbench's limits
/// form checks against the tier the next run goes to).
pub fn max_limits(name: &str) -> LimitMaxima {
    match name {
        "process" => process::host_maxima(),
        _ => LimitMaxima::default(),
    }
}

/// Whether the named tier can enforce `network`, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_network(name: &str, network: &crate::egress::Network) -> Result<(), String> {
    match name {
        "process" | "docker" | "gvisor" | "microvm" => Ok(()),
        "e2b" => e2b::check_allow_list(network),
        other => refuse_allow_list(other, network),
    }
}

/// sandbench's tiers, then the peers (when their profiles load).
pub fn known_names() -> Vec<String> {
    KNOWN.iter().map(|s| s.to_string()).chain(peer::names().unwrap_or_default().into_iter().map(String::from)).collect()
}

/// Parse a comma-separated tier list, refusing unknown names.
pub fn parse_list(s: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !KNOWN.contains(&t) && !peer::names()?.contains(&t) {
            return Err(format!("unknown tier '{t}' (known: {})", known_names().join(", ")));
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    if out.is_empty() {
        return Err(format!("no tier given (known: {})", known_names().join(", ")));
    }
    Ok(out)
}

/// Probe the named tiers: the available ones, and (name, why) for the rest.
pub async fn probe_selected(
    names: &[String],
    config: &Config,
) -> anyhow::Result<(Vec<Arc<dyn Tier>>, Vec<(String, String)>)> {
    let mut ready = vec![];
    let mut skipped = vec![];
    for n in names {
        let t = by_name(n, config)?;
        let a = t.probe().await;
        if a.available {
            ready.push(t);
        } else {
            skipped.push((n.clone(), a.summary));
        }
    }
    Ok((ready, skipped))
}

/// Reap what earlier, dead sandbench processes left behind, for every tier.
pub async fn reap_leftovers(config: &Config) {
    process::reap_leftovers(&config.host);
    docker::reap_leftovers(&config.host).await;
    microvm::reap_leftovers();
    peer::reap_leftovers(&config.host);
}

/// Reap leftovers of the named tiers only. A one-shot command pays for its
/// own tier's check, not for asking a Docker engine it will not use (~30 ms
/// of `sandbench run --tier process`); other tiers' leftovers go at their
/// next use or the next command that uses every tier (workbench, doctor).
pub async fn reap_leftovers_of(names: &[String], config: &Config) {
    let has = |n: &str| names.iter().any(|t| t == n);
    if has("process") {
        process::reap_leftovers(&config.host);
    }
    if has("docker") || has("gvisor") {
        docker::reap_leftovers(&config.host).await;
    }
    if has("microvm") {
        microvm::reap_leftovers();
    }
    if names.iter().any(|n| !KNOWN.contains(&n.as_str())) {
        peer::reap_leftovers(&config.host);
    }
}

/// Clean up what this process still holds, before it exits (remote
/// sandboxes cost money and outlive us otherwise; warm containers too).
/// Front ends call it on every exit path (signals included: they own them)
/// and show the returned warnings.
pub async fn shutdown() -> Vec<String> {
    // Sessions first: their sandboxes are torn down by their tiers' own
    // close (an e2b session's sandbox is also in e2b's live list).
    crate::session::close_all("sandbench is exiting").await;
    let mut warnings = e2b::kill_live().await;
    docker::shutdown().await;
    microvm::MicrovmTier::drain_pool().await;
    let left = background::drain(std::time::Duration::from_secs(30)).await;
    if left > 0 {
        warnings.push(format!(
            "{left} sandbox teardown(s) still running at exit: the next sandbench start reaps what they leave"
        ));
    }
    warnings
}
