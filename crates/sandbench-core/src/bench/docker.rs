//! `sandbench bench --tier docker|gvisor`: cold and warm runs of `print(1)`
//! against `docker run --rm` with the same hardening flags (the baseline may
//! shell out to the docker CLI; the tier never does). Bench code, above the
//! tier: it builds the tier's contenders, the tier knows nothing of benches.

use std::sync::Arc;

use super::contender::{Contender, Settle, CODE};
use crate::config::{Config, DockerConfig};
use crate::spec::Limits;
use crate::tier::docker::container::Shape;
use crate::tier::docker::{configured_image, DockerTier};

/// `docker run --rm` with the tier's hardening flags (and `--runtime=runsc`
/// for gvisor) running `python3 -c {code}`: the bare equivalent. `None`
/// without a docker CLI.
pub fn cli_argv(runtime: Option<&str>, config: &Config) -> Option<(String, Vec<String>)> {
    let docker = crate::host::which("docker")?.to_string_lossy().into_owned();
    let shape = Shape::new(&configured_image(config), runtime, &config.docker.user, &Limits::default());
    // `-i`: the container's stdin is a pipe from the CLI. Without it the
    // shim hands the container the host's /dev/null, and runsc chowns its
    // standard streams to the container's user: the host's /dev/null became
    // nobody's after a gVisor bench (runc 1.1.5+ skips /dev/null; runsc not).
    let mut argv = vec![docker, "run".into(), "-i".into(), "--rm".into()];
    argv.extend(shape.cli_flags());
    argv.extend([shape.image.clone(), "python3".into(), "-c".into(), CODE.into()]);
    let name = if runtime.is_some() { "docker run --rm --runtime=runsc" } else { "docker run --rm" };
    Some((name.to_string(), argv))
}

/// Fill `c` with the contenders; returns the targets (what, against, p50 ratio).
pub(crate) fn bench_plan(
    tier_name: &'static str,
    runtime: Option<&'static str>,
    config: &Config,
    c: &mut Vec<Contender>,
    skipped: &mut Vec<String>,
) -> Vec<(String, String, Option<f64>)> {
    let cold_cfg = Config { docker: DockerConfig { pool_size: 0, ..config.docker.clone() }, ..config.clone() };
    let cold_name = format!("sandbench {tier_name} cold");
    let warm_name = format!("sandbench {tier_name} warm");
    let cli_name = if runtime.is_some() { "docker run --rm --runtime=runsc" } else { "docker run --rm" }.to_string();
    c.push(Contender::tier(cold_name.clone(), Arc::new(DockerTier::on_runtime(tier_name, runtime, &cold_cfg))));
    match cli_argv(runtime, config) {
        Some((_, argv)) => c.push(Contender::Command { name: cli_name.clone(), argv }),
        None => skipped.push("the docker CLI is not installed (apt-get install docker.io): no baseline".into()),
    }
    c.push(warm_contender(tier_name, runtime, config, warm_name.clone()));
    vec![(cold_name, cli_name.clone(), Some(1.0)), (warm_name, cli_name, Some(0.1))]
}

/// The warm path (a pool of at least one container, refilled untimed
/// between runs) as a contender named `name`.
pub(crate) fn warm_contender(
    tier_name: &'static str,
    runtime: Option<&'static str>,
    config: &Config,
    name: String,
) -> Contender {
    let warm_cfg = Config {
        docker: DockerConfig { pool_size: config.docker.pool_size.max(1), ..config.docker.clone() },
        ..config.clone()
    };
    let warm = Arc::new(DockerTier::on_runtime(tier_name, runtime, &warm_cfg));
    let w = warm.clone();
    let settle: Settle = Arc::new(move || {
        let w = w.clone();
        Box::pin(async move {
            crate::tier::background::drain(std::time::Duration::from_secs(60)).await;
            w.prewarm_for(&Limits::default()).await.map(|_| ())
        })
    });
    Contender::Tier { name, tier: warm, settle: Some(settle) }
}
