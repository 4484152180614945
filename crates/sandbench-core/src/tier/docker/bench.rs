//! `sandbench bench --tier docker|gvisor`: cold and warm runs of `print(1)`
//! against `docker run --rm` with the same hardening flags (the baseline may
//! shell out to the docker CLI; the tier never does).

use std::sync::Arc;

use crate::bench::{Contender, Settle};
use crate::config::{Config, DockerConfig};
use crate::spec::Limits;

use super::container::Shape;
use super::{configured_image, DockerTier};

/// Fill `c` with the contenders; returns the targets (what, against, p50 ratio).
pub fn bench_plan(
    tier_name: &str,
    config: &Config,
    c: &mut Vec<Contender>,
    skipped: &mut Vec<String>,
) -> Vec<(String, String, Option<f64>)> {
    let runtime = (tier_name == "gvisor").then_some("runsc");
    let cold_cfg = Config { docker: DockerConfig { pool_size: 0, ..config.docker.clone() }, ..config.clone() };
    let warm_cfg = Config {
        docker: DockerConfig { pool_size: config.docker.pool_size.max(1), ..config.docker.clone() },
        ..config.clone()
    };
    let build = |cfg: &Config| {
        if runtime.is_some() {
            DockerTier::gvisor(cfg)
        } else {
            DockerTier::docker(cfg)
        }
    };
    let cold_name = format!("sandbench {tier_name} cold");
    let warm_name = format!("sandbench {tier_name} warm");
    let cli_name = if runtime.is_some() { "docker run --rm --runtime=runsc" } else { "docker run --rm" }.to_string();
    c.push(Contender::Tier { name: cold_name.clone(), tier: Arc::new(build(&cold_cfg)) });
    match crate::host::which("docker").map(|p| p.to_string_lossy().into_owned()) {
        Some(docker) => {
            let shape = Shape::new(&configured_image(config), runtime, &config.docker.user, &Limits::default());
            let mut argv = vec![docker, "run".into(), "--rm".into()];
            argv.extend(shape.cli_flags());
            argv.extend([shape.image.clone(), "python3".into(), "-c".into(), "print(1)".into()]);
            c.push(Contender::Command { name: cli_name.clone(), argv });
        }
        None => skipped.push("the docker CLI is not installed (apt-get install docker.io): no baseline".into()),
    }
    let warm = Arc::new(build(&warm_cfg));
    let w = warm.clone();
    let settle: Settle = Arc::new(move || {
        let w = w.clone();
        Box::pin(async move { w.prewarm_for(&Limits::default()).await.map(|_| ()) })
    });
    c.push(Contender::Settled { name: warm_name.clone(), tier: warm, settle });
    vec![(cold_name, cli_name.clone(), Some(1.0)), (warm_name, cli_name, Some(0.15))]
}
