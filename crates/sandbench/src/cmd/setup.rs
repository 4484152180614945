//! `sandbench setup TARGET`: build what a tier needs on this machine (images,
//! guest kernels, ...). Idempotent: quick when nothing is missing. One arm per
//! kind of set-up (`tier::kinds::Setup`); which tier needs which is the
//! kinds table's.

use std::sync::Arc;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::cli::SetupArgs;
use crate::config::Config;
use crate::setup::{Progress, Step};
use crate::tier::kinds::{self, Setup};
use crate::tier::microvm::{self, MicrovmTier};

use super::usage;

/// Set-up progress on the terminal: spinners and bars on a terminal, plain
/// lines when stderr is not one (CI logs keep every step).
pub struct Bars {
    mp: MultiProgress,
}

impl Bars {
    pub fn new() -> Bars {
        Bars { mp: MultiProgress::new() }
    }
}

impl Default for Bars {
    fn default() -> Self {
        Bars::new()
    }
}

struct Bar(ProgressBar);

impl Progress for Bars {
    fn line(&self, text: &str) {
        if self.mp.is_hidden() {
            eprintln!("{text}");
        } else {
            let _ = self.mp.println(text);
        }
    }

    fn step(&self, text: &str, total: Option<u64>) -> Arc<dyn Step> {
        let pb = match total {
            Some(len) => {
                let pb = ProgressBar::new(len);
                pb.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                pb
            }
            None => {
                let pb = ProgressBar::new_spinner();
                pb.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                pb.enable_steady_tick(Duration::from_millis(120));
                pb
            }
        };
        let pb = self.mp.add(pb);
        pb.set_message(text.to_string());
        Arc::new(Bar(pb))
    }
}

impl Step for Bar {
    fn message(&self, text: &str) {
        self.0.set_message(text.to_string());
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn elapsed_secs(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// Targets `setup` knows, for the error message: the tiers with something
/// to build (the kinds table's `setup` column), then the peers.
pub fn targets() -> Vec<&'static str> {
    kinds::setup_targets().map(|(name, _)| name).chain(["peers"]).collect()
}

pub async fn run(args: SetupArgs, config: &Config) -> anyhow::Result<i32> {
    if args.target == "peers" {
        return setup_peers().await;
    }
    match kinds::setup_targets().find(|(name, _)| *name == args.target).map(|(_, s)| s) {
        Some(Setup::Image { runtime }) => docker(config, runtime).await,
        Some(Setup::Guest) => setup_microvm(&args, config).await,
        None => Err(usage(format!("nothing to set up for '{}' (known: {})", args.target, targets().join(", ")))),
    }
}

async fn setup_microvm(args: &SetupArgs, config: &Config) -> anyhow::Result<i32> {
    let cfg = &config.microvm;
    microvm::artefacts::setup(cfg, args.force, &Bars::new()).await?;
    let p = microvm::artefacts::paths();
    if microvm::accel::cached(cfg, &p).is_none() {
        eprintln!(
            "… accel      probing (a KVM guest must reach user space within {} s)",
            microvm::accel::KVM_PROBE_TIMEOUT.as_secs()
        );
    }
    let choice = microvm::accel::choose(cfg, &p).await;
    eprintln!("✓ accel      {}", choice.detail);
    let tier = MicrovmTier::new(config);
    if cfg.snapshot {
        let shape = tier.shape(&config.limits, choice.accel);
        match microvm::snapshot::load(cfg, &p, shape) {
            Some((_, m)) if !args.force => eprintln!(
                "✓ snapshot   up to date ({} guest: restore {} vs boot {})",
                crate::units::size(shape.mem_mib << 20),
                crate::units::duration_ms(m.restore_ms),
                crate::units::duration_ms(m.boot_ms)
            ),
            _ => {
                eprintln!("… snapshot   booting a {} MiB guest to save it (takes a boot or two)", shape.mem_mib);
                match tier.make_snapshot().await {
                    Ok(m) => eprintln!(
                        "✓ snapshot   restore {} vs boot {} — {}",
                        crate::units::duration_ms(m.restore_ms),
                        crate::units::duration_ms(m.boot_ms),
                        if m.faster_than_boot() {
                            "restores will be used"
                        } else {
                            "boots are faster; snapshots stay unused"
                        }
                    ),
                    Err(e) => eprintln!("! snapshot   not available ({e:#}); runs boot cold"),
                }
            }
        }
    }
    eprintln!("microvm is ready: try `sandbench run --tier microvm hello.py`");
    Ok(0)
}

async fn docker(config: &Config, runtime: Option<&str>) -> anyhow::Result<i32> {
    use crate::tier::docker::{configured_image, engine::Engine, image, runsc_fix};
    let engine = Engine::connect(&crate::tier::docker::engine::Endpoint::of(&config.host)).await?;
    eprintln!("setup: Docker engine {} at {} (API {})", engine.server_version, engine.host, engine.api_version);
    let wanted = configured_image(config);
    let bars = Bars::new();
    let done = image::ensure(&engine, &config.docker, &wanted, &bars).await?;
    match &done {
        image::Ensured::Present(i) => eprintln!("setup: image {i} is present"),
        image::Ensured::Pulled(i) => eprintln!("setup: pulled {i}"),
        image::Ensured::Switched(i) | image::Ensured::Built(i) => {
            let path = Config::path().ok_or_else(|| anyhow::anyhow!("no config directory; set SANDBENCH_CONFIG"))?;
            image::record_image(&path, i)?;
            if matches!(done, image::Ensured::Built(_)) {
                eprintln!("setup: built {i}");
            }
            eprintln!("setup: {} now says [docker] image = \"{i}\"", path.display());
            if config.host.docker_image.is_some() {
                eprintln!("setup: note: SANDBENCH_DOCKER_IMAGE={wanted} still overrides the config");
            }
        }
    }
    if let Some(rt) = runtime {
        if !engine.runtimes.contains(rt) {
            anyhow::bail!("the image is ready, but the daemon has no '{rt}' runtime: {}", runsc_fix());
        }
        eprintln!("setup: runtime {rt} is registered");
    }
    eprintln!("setup: ready (check with: sandbench doctor)");
    Ok(0)
}

/// Install every peer's tool (apt, pip, npm: the profile's `install` line).
/// Installed tools are left alone. No account is made: as root, each peer
/// run gets a uid of its own from the process tier's range.
async fn setup_peers() -> anyhow::Result<i32> {
    use crate::tier::peer;
    let root = nix::unistd::geteuid().is_root();
    let entries = peer::entries().map_err(usage)?;
    let mut apt_updated = false;
    let mut failed = vec![];
    for e in entries {
        let p = &e.profile;
        if peer::missing(p).is_empty() {
            eprintln!("✓ {:<9} installed ({})", p.name, peer::tool_version(p).await);
            continue;
        }
        if !root {
            eprintln!("✗ {:<9} not installed; as root run: {}", p.name, p.install);
            failed.push(p.name.clone());
            continue;
        }
        if p.install.contains("apt-get") && !apt_updated {
            apt_updated = true;
            let _ = tokio::process::Command::new("apt-get").args(["update", "-qq"]).status().await;
        }
        eprintln!("… {:<9} installing: {}", p.name, p.install);
        let st = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&p.install)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .status()
            .await;
        let missing = peer::missing(p);
        match (st, missing.is_empty()) {
            (Ok(s), true) if s.success() => eprintln!("✓ {:<9} installed ({})", p.name, peer::tool_version(p).await),
            (st, _) => {
                let why = match st {
                    Ok(s) if !s.success() => format!("the install command exited with {s}"),
                    Err(e) => format!("cannot run sh: {e}"),
                    _ => format!("still missing: {}", missing.join(", ")),
                };
                eprintln!("✗ {:<9} {why}", p.name);
                failed.push(p.name.clone());
            }
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("not installed: {} (see above; `sandbench doctor` shows each peer)", failed.join(", "));
    }
    eprintln!(
        "peers are ready: try `sandbench gauntlet --tiers process,{}`",
        entries.iter().map(|e| e.profile.name.as_str()).collect::<Vec<_>>().join(",")
    );
    Ok(0)
}
