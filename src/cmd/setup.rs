//! `sandbench setup TARGET`: build what a tier needs on this machine.

use crate::cli::SetupArgs;
use crate::config::Config;
use crate::tier::microvm::{self, MicrovmTier};

use super::usage;

pub async fn run(args: SetupArgs, config: &Config) -> anyhow::Result<i32> {
    match args.target.as_str() {
        "microvm" => setup_microvm(&args, config).await,
        other => Err(usage(format!("nothing to set up for '{other}' (known: microvm)"))),
    }
}

async fn setup_microvm(args: &SetupArgs, config: &Config) -> anyhow::Result<i32> {
    let cfg = &config.microvm;
    microvm::artefacts::setup(cfg, args.force).await?;
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
                "✓ snapshot   up to date ({} MiB guest: restore {:.0} ms vs boot {:.0} ms)",
                shape.mem_mib, m.restore_ms, m.boot_ms
            ),
            _ => {
                eprintln!("… snapshot   booting a {} MiB guest to save it (takes a boot or two)", shape.mem_mib);
                match tier.make_snapshot().await {
                    Ok(m) => eprintln!(
                        "✓ snapshot   restore {:.0} ms vs boot {:.0} ms — {}",
                        m.restore_ms,
                        m.boot_ms,
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
