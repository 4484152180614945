//! The registry: sandbench's own tiers by name, the peers after them, and
//! what is done to every tier at once (reaping leftovers, shutting down).
//! The one module above the tiers that names them; everything else takes a
//! `dyn Tier` through [`super::contract`].

use std::sync::Arc;

use super::contract::{refuse_allow_list, refuse_secrets, LimitMaxima, Tier};
use super::kinds::{self, Egress, Setup, KINDS};
pub use super::kinds::{TierKind, KNOWN};
use super::{background, docker, e2b, microvm, peer, process};
use crate::config::Config;

/// Build one of sandbench's own tiers: the registry's one match on the
/// kinds (a row added to `kinds::KINDS` needs its variant, and the compiler
/// then asks for its arm here).
fn build(kind: TierKind, config: &Config) -> Arc<dyn Tier> {
    match kind {
        TierKind::Process => Arc::new(process::ProcessTier::new(config)),
        TierKind::Docker => Arc::new(docker::DockerTier::docker(config)),
        TierKind::Gvisor => Arc::new(docker::DockerTier::gvisor(config)),
        TierKind::Microvm => Arc::new(microvm::MicrovmTier::new(config)),
        TierKind::E2b => Arc::new(e2b::E2bTier::new(config)),
    }
}

/// Who removes a kind's leftovers (docker and gvisor share the engine's).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reaper {
    Process,
    Docker,
    Microvm,
    /// Remote sandboxes end with their runs (and `shutdown`).
    Nothing,
}

fn reaper(kind: TierKind) -> Reaper {
    match kind {
        TierKind::Process => Reaper::Process,
        TierKind::Docker | TierKind::Gvisor => Reaper::Docker,
        TierKind::Microvm => Reaper::Microvm,
        TierKind::E2b => Reaper::Nothing,
    }
}

async fn reap(r: Reaper, config: &Config) {
    match r {
        Reaper::Process => process::reap_leftovers(&config.host),
        Reaper::Docker => docker::reap_leftovers(&config.host).await,
        Reaper::Microvm => microvm::reap_leftovers(),
        Reaper::Nothing => {}
    }
}

/// What `sandbench setup TARGET` builds: one of the own tiers' `Setup`
/// (its kinds row), or every peer's tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupTarget {
    Tier(Setup),
    Peers,
}

/// The setup targets for people: the own tiers with something to build, in
/// table order, then `peers`.
pub fn setup_targets() -> Vec<&'static str> {
    kinds::setup_targets().map(|(name, _)| name).chain(["peers"]).collect()
}

/// The named setup target. `Err` is the user's to fix (an unknown target,
/// or a peer profile that does not load), worded for them.
pub fn setup_target(name: &str) -> Result<SetupTarget, String> {
    if name == "peers" {
        peer::entries()?;
        return Ok(SetupTarget::Peers);
    }
    match kinds::of(name).and_then(|k| k.setup).map(SetupTarget::Tier) {
        Some(t) => Ok(t),
        None => Err(format!("nothing to set up for '{name}' (known: {})", setup_targets().join(", "))),
    }
}

/// Build what `target` needs on this machine, each step told to `progress`.
/// Idempotent: quick when nothing is missing; `force` rebuilds the guest.
pub async fn setup(
    target: SetupTarget,
    config: &Config,
    force: bool,
    progress: &dyn crate::setup::Progress,
) -> anyhow::Result<()> {
    match target {
        SetupTarget::Tier(Setup::Image { runtime }) => docker::setup(config, runtime, progress).await,
        SetupTarget::Tier(Setup::Guest) => microvm::setup(config, force, progress).await,
        SetupTarget::Peers => peer::setup(progress).await,
    }
}

/// Whether the named tier can take secrets, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_secrets(name: &str, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    match super::kinds::of(name).map(|k| k.egress) {
        Some(Egress::Proxy) => Ok(()),
        // The one provider filter is E2B's, with its own wording.
        Some(Egress::Provider) => e2b::refuse_secrets(secrets),
        None => refuse_secrets(name, secrets),
    }
}

/// Build the named tier.
pub fn by_name(name: &str, config: &Config) -> anyhow::Result<Arc<dyn Tier>> {
    match name.parse::<TierKind>() {
        Ok(kind) => Ok(build(kind, config)),
        Err(_) => match peer::by_name(name, config).map_err(|e| anyhow::anyhow!(e))? {
            Some(t) => Ok(t),
            None => anyhow::bail!("unknown tier '{name}' (known: {})", known_names().join(", ")),
        },
    }
}

/// The maxima of the named tier, without building it (the workbench's limits
/// form checks against the tier the next run goes to).
pub fn max_limits(name: &str) -> LimitMaxima {
    match name.parse::<TierKind>() {
        // The only tier whose maxima are the host's, known without a probe.
        Ok(TierKind::Process) => process::host_maxima(),
        _ => LimitMaxima::default(),
    }
}

/// Whether the named tier can enforce `network`, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_network(name: &str, network: &crate::egress::Network) -> Result<(), String> {
    match super::kinds::of(name).map(|k| k.egress) {
        Some(Egress::Proxy) => Ok(()),
        Some(Egress::Provider) => e2b::check_allow_list(network),
        None => refuse_allow_list(name, network),
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
    reap_kinds(KINDS.iter().map(|k| k.kind), config).await;
    peer::reap_leftovers(&config.host);
}

/// Reap leftovers of the named tiers only. A one-shot command pays for its
/// own tier's check, not for asking a Docker engine it will not use (~30 ms
/// of `sandbench run --tier process`); other tiers' leftovers go at their
/// next use or the next command that uses every tier (workbench, doctor).
pub async fn reap_leftovers_of(names: &[String], config: &Config) {
    let named = KINDS.iter().map(|k| k.kind).filter(|k| names.iter().any(|n| n == k.name()));
    reap_kinds(named, config).await;
    if names.iter().any(|n| !KNOWN.contains(&n.as_str())) {
        peer::reap_leftovers(&config.host);
    }
}

/// Each reaper once, in table order.
async fn reap_kinds(kinds: impl Iterator<Item = TierKind>, config: &Config) {
    let mut done: Vec<Reaper> = vec![];
    for r in kinds.map(reaper) {
        if !done.contains(&r) {
            reap(r, config).await;
            done.push(r);
        }
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

/// Resources carrying this process's owner token, after every run and the
/// warm pools are gone. `None`: could not be looked at (e.g. no daemon).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, Default)]
pub struct Leftovers {
    pub cgroups: usize,
    pub containers: Option<usize>,
    pub qemu: usize,
    pub rundirs: usize,
    pub total: usize,
}

/// Everything on this machine (and its Docker engine) that carries this
/// process's owner token.
pub async fn leftovers(env: &crate::config::HostEnv) -> Leftovers {
    let Ok(token) = crate::owner::token() else {
        return Leftovers::default();
    };
    let prefix = format!("{token}-");
    // One run's cgroup is a directory per hierarchy (v1): count runs.
    let cgroups: std::collections::BTreeSet<_> =
        process::owned_cgroups(token, env).into_iter().filter_map(|p| p.file_name().map(|n| n.to_owned())).collect();
    let mut l = Leftovers { cgroups: cgroups.len(), ..Default::default() };
    l.containers = docker::owned_containers(token, env).await.map(|v| v.len());
    l.qemu = microvm::vm::owned_qemu(token).len();
    let mut dirs = vec![microvm::artefacts::paths().runs, peer::rundir::base(env), docker::scratch::base()];
    dirs.dedup();
    for d in dirs {
        if let Ok(rd) = std::fs::read_dir(&d) {
            l.rundirs += rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).count();
        }
    }
    l.total = l.cgroups + l.containers.unwrap_or(0) + l.qemu + l.rundirs;
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leftovers_count_what_carries_our_token() {
        let env = crate::config::HostEnv::default();
        let base = peer::rundir::base(&env);
        std::fs::create_dir_all(&base).unwrap();
        let d = base.join(format!("{}-999999-soaktest", crate::owner::token().unwrap()));
        std::fs::create_dir(&d).unwrap();
        let l = leftovers(&env).await;
        std::fs::remove_dir(&d).unwrap();
        assert!(l.rundirs >= 1 && l.total >= 1, "{l:?}");
    }
}
