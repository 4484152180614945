//! `sandbench setup <target>`: get a tier ready on this machine (images,
//! guest kernels, ...). Idempotent: quick when nothing is missing. One arm per
//! target; a new tier adds its own.

use crate::cli::SetupArgs;
use crate::config::Config;

use super::usage;

/// Targets `setup` knows, for the error message.
pub const TARGETS: &[&str] = &["docker", "gvisor"];

pub async fn run(args: SetupArgs, config: &Config) -> anyhow::Result<i32> {
    match args.target.as_str() {
        "docker" => docker(config, None).await,
        "gvisor" => docker(config, Some("runsc")).await,
        other => Err(usage(format!("nothing to set up for '{other}' (targets: {})", TARGETS.join(", ")))),
    }
}

async fn docker(config: &Config, runtime: Option<&str>) -> anyhow::Result<i32> {
    use crate::tier::docker::{configured_image, engine::Engine, image, runsc_fix};
    let engine = Engine::connect().await?;
    eprintln!("setup: Docker engine {} at {} (API {})", engine.server_version, engine.host, engine.api_version);
    let wanted = configured_image(&config.docker);
    let done = image::ensure(&engine, &config.docker, &wanted).await?;
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
            if std::env::var_os("SANDBENCH_DOCKER_IMAGE").is_some() {
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
