//! Making sure the sandbox image is there (`sandbench setup docker`): use the
//! configured image when present, else pull it, else build a local Python
//! image from Debian packages (mmdebstrap + import) and record its name in
//! the config. Idempotent and quick when nothing is missing.

use std::path::Path;
use std::time::Duration;

use crate::setup::Progress;
use anyhow::{anyhow, bail, Context};
use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::engine::{cause, Engine};
use crate::config::{Config, DockerConfig};

/// How long a pull may stay silent before it counts as failed (no registry).
const PULL_SILENCE: Duration = Duration::from_secs(20);

/// Revision of the built-in image's package set: bumped whenever
/// [`PACKAGES`] changes, so a new set is built under a new name and never
/// replaces an image that runs (or that other sandbench versions use) under
/// the old one.
pub(crate) const IMAGE_REVISION: u32 = 2;

/// Name of the image built from Debian packages ([`PACKAGES`]).
pub(crate) fn local_image_name(cfg: &DockerConfig) -> String {
    format!("sandbench/runtime:{}-{IMAGE_REVISION}", cfg.debian_suite)
}

/// The names earlier versions built their image under, with fewer packages
/// (`sandbench/python:<suite>`: python3 only; `sandbench/runtime:<suite>`:
/// python3 and nodejs): a config that still names one is moved to
/// [`local_image_name`].
pub(crate) fn legacy_image_names(cfg: &DockerConfig) -> [String; 2] {
    [format!("sandbench/python:{}", cfg.debian_suite), format!("sandbench/runtime:{}", cfg.debian_suite)]
}

/// Debian packages the local image is built with, besides the essential
/// set: the interpreters, the data libraries agents import (numpy, pandas,
/// matplotlib) and the commands their shell snippets use (curl, wget, ps).
/// python3-munkres meets matplotlib's fonttools' `python3-scipy |
/// python3-munkres`: without it apt takes scipy, whose pythran brings g++
/// and boost (a 1.2 GB image instead of a few hundred MB).
pub(crate) const PACKAGES: &str =
    "python3,nodejs,python3-numpy,python3-pandas,python3-matplotlib,python3-munkres,curl,wget,procps";

/// What `ensure` did.
#[derive(Debug, PartialEq)]
pub(crate) enum Ensured {
    Present(String),
    Pulled(String),
    /// A local image already built earlier; the config now names it.
    Switched(String),
    Built(String),
}

impl Ensured {}

pub(crate) async fn ensure(
    engine: &Engine,
    cfg: &DockerConfig,
    image: &str,
    progress: &dyn Progress,
) -> anyhow::Result<Ensured> {
    let local = local_image_name(cfg);
    if legacy_image_names(cfg).iter().any(|l| l == image) {
        // Built by an earlier sandbench with fewer packages (no Node.js, no
        // data libraries): programs that use them need the new one.
        progress
            .line(&format!("{image} (built by an earlier sandbench) lacks packages of {PACKAGES}; moving to {local}"));
        if engine.has_image(&local).await? {
            return Ok(Ensured::Switched(local));
        }
        progress.line(&format!("building {local} from Debian {} packages ({PACKAGES})", cfg.debian_suite));
        build(engine, cfg, &local, progress).await?;
        return Ok(Ensured::Built(local));
    }
    if engine.has_image(image).await? {
        return Ok(Ensured::Present(image.to_string()));
    }
    progress.line(&format!("image {image} is not present at {}; trying to pull it", engine.host));
    match pull(engine, image, progress).await {
        Ok(()) => return Ok(Ensured::Pulled(image.to_string())),
        Err(e) => progress.line(&format!("pull failed: {e:#}")),
    }
    if local != image && engine.has_image(&local).await? {
        progress.line(&format!("using {local}, built earlier from Debian packages"));
        return Ok(Ensured::Switched(local));
    }
    progress.line(&format!("building {local} from Debian {} packages ({PACKAGES}, essential tools)", cfg.debian_suite));
    build(engine, cfg, &local, progress).await?;
    Ok(Ensured::Built(local))
}

async fn pull(engine: &Engine, image: &str, progress: &dyn Progress) -> anyhow::Result<()> {
    let (repo, tag) = split_tag(image);
    let pb = progress.step(&format!("pulling {image}"), None);
    let mut stream = engine.docker.create_image(
        Some(CreateImageOptions {
            from_image: Some(repo.to_string()),
            tag: Some(tag.to_string()),
            ..Default::default()
        }),
        None,
        None,
    );
    let r = loop {
        match tokio::time::timeout(PULL_SILENCE, stream.next()).await {
            Err(_) => break Err(anyhow!("no progress for {} s (is a registry reachable?)", PULL_SILENCE.as_secs())),
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(anyhow!("{}", cause(&e))),
            Ok(Some(Ok(info))) => {
                if let Some(s) = info.status {
                    let detail = format!("pulling {image}: {s} {}", info.progress.unwrap_or_default());
                    pb.message(&crate::sanitize::inert_line(&detail, 120));
                }
            }
        }
    };
    pb.finish();
    r?;
    if !engine.has_image(image).await? {
        bail!("the pull ended but {image} is still not there");
    }
    Ok(())
}

fn split_tag(image: &str) -> (&str, &str) {
    // A colon after the last slash separates the tag (a colon before it is a registry port).
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => (&image[..i], &image[i + 1..]),
        _ => (image, "latest"),
    }
}

async fn build(engine: &Engine, cfg: &DockerConfig, name: &str, progress: &dyn Progress) -> anyhow::Result<()> {
    let Some(mm) = crate::host::which("mmdebstrap") else {
        bail!("mmdebstrap is needed to build the image here: apt-get install mmdebstrap (or make {name} or another Python image available and set [docker] image)");
    };
    let dir = crate::config::data_dir().join("docker");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Named after the image: two set-ups building different revisions at
    // once do not write one file.
    let stem = format!("rootfs-{}-{IMAGE_REVISION}", cfg.debian_suite);
    let tar = dir.join(format!("{stem}.tar"));
    let partial = dir.join(format!("{stem}.tar.partial"));
    let _ = std::fs::remove_file(&partial);
    let pb = progress.step(&format!("mmdebstrap {}", cfg.debian_suite), None);
    let mut child = tokio::process::Command::new(mm)
        .args([
            "--variant=essential",
            &format!("--include={PACKAGES}"),
            "--format=tar",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/info/*",
        ])
        .arg(&cfg.debian_suite)
        .arg(&partial)
        .arg(&cfg.debian_mirror)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start mmdebstrap")?;
    let mut lines =
        tokio::io::BufReader::new(child.stderr.take().ok_or_else(|| anyhow!("mmdebstrap has no stderr"))?).lines();
    let mut tail: Vec<String> = vec![];
    while let Ok(Some(line)) = lines.next_line().await {
        let clean = crate::sanitize::inert_line(&line, 200);
        pb.message(&format!("mmdebstrap {}: {}", cfg.debian_suite, clean.trim_start_matches("I: ")));
        tail.push(clean);
        if tail.len() > 15 {
            tail.remove(0);
        }
    }
    let status = child.wait().await.context("mmdebstrap")?;
    pb.finish();
    if !status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!("mmdebstrap failed ({status}); is {} reachable? last lines: {}", cfg.debian_mirror, tail.join(" | "));
    }
    std::fs::rename(&partial, &tar).context("cannot keep the rootfs tarball")?;
    progress.line(&format!(
        "rootfs built ({}); importing it as {name}",
        crate::units::size(std::fs::metadata(&tar)?.len())
    ));
    let r = import(engine, &tar, name, progress).await;
    let _ = std::fs::remove_file(&tar);
    r
}

async fn import(engine: &Engine, tar: &Path, name: &str, progress: &dyn Progress) -> anyhow::Result<()> {
    let len = std::fs::metadata(tar)?.len();
    let pb = progress.step(&format!("importing {name}"), Some(len));
    let file = tokio::fs::File::open(tar).await.with_context(|| format!("cannot open {}", tar.display()))?;
    let bar = pb.clone();
    let body = futures_util::stream::unfold(file, move |mut f| {
        let bar = bar.clone();
        async move {
            let mut buf = vec![0u8; 1 << 20];
            match f.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => {
                    buf.truncate(n);
                    bar.advance(n as u64);
                    Some((buf.into(), f))
                }
            }
        }
    });
    let (repo, tag) = split_tag(name);
    let mut stream = engine.docker.create_image(
        Some(CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.to_string()),
            tag: Some(tag.to_string()),
            message: Some("built by sandbench setup from Debian packages".into()),
            ..Default::default()
        }),
        Some(bollard::body_stream(body)),
        None,
    );
    let mut result = Ok(());
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            result = Err(anyhow!("importing {name} failed: {}", cause(&e)));
            break;
        }
    }
    pb.finish();
    result?;
    if !engine.has_image(name).await? {
        bail!("the import ended but {name} is not there");
    }
    Ok(())
}

/// Set `[docker] image` in the config file, keeping everything else of the
/// file (comments included) as it is.
pub(crate) fn record_image(path: &Path, image: &str) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let updated = set_image_in(&text, image);
    toml::from_str::<Config>(&updated).with_context(|| {
        format!("{} would not stay valid; set [docker] image = \"{image}\" by hand", path.display())
    })?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, updated).with_context(|| format!("cannot write {}", path.display()))
}

fn set_image_in(text: &str, image: &str) -> String {
    let value = format!("image = {}", toml::Value::String(image.to_string()));
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let header = lines.iter().position(|l| l.trim() == "[docker]");
    match header {
        Some(h) => {
            let end =
                lines[h + 1..].iter().position(|l| l.trim_start().starts_with('[')).map_or(lines.len(), |i| h + 1 + i);
            let existing = (h + 1..end).find(|&i| {
                let l = lines[i].trim_start();
                l.strip_prefix("image").is_some_and(|r| r.trim_start().starts_with('='))
            });
            match existing {
                Some(i) => lines[i] = value,
                None => lines.insert(h + 1, value),
            }
        }
        None => {
            if lines.last().is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            lines.push("[docker]".into());
            lines.push(value);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(split_tag("python:3.12-slim"), ("python", "3.12-slim"));
        assert_eq!(split_tag("reg:5000/x/y"), ("reg:5000/x/y", "latest"));
        assert_eq!(split_tag("reg:5000/x/y:1"), ("reg:5000/x/y", "1"));
    }

    #[test]
    fn the_new_package_set_has_a_name_of_its_own_and_old_built_in_names_move_to_it() {
        let cfg = DockerConfig::default();
        let local = local_image_name(&cfg);
        assert_eq!(local, format!("sandbench/runtime:bookworm-{IMAGE_REVISION}"));
        // The image the previous package set was built under stays as it
        // is (runs may use it); a config naming it is moved.
        assert!(legacy_image_names(&cfg).contains(&"sandbench/runtime:bookworm".to_string()));
        assert!(legacy_image_names(&cfg).contains(&"sandbench/python:bookworm".to_string()));
        assert!(!legacy_image_names(&cfg).contains(&local));
        for p in ["python3-numpy", "python3-pandas", "python3-matplotlib", "curl", "wget", "procps", "nodejs"] {
            assert!(PACKAGES.split(',').any(|x| x == p), "{p}");
        }
    }

    #[test]
    fn config_edit_keeps_the_rest() {
        let t = "# mine\ndefault_tier = \"docker\"\n\n[docker]\n# keep\npool_size = 4\nimage = \"old\"\n\n[limits]\npids = 9\n";
        let u = set_image_in(t, "sandbench/python:bookworm");
        assert!(u.contains("# mine") && u.contains("# keep") && u.contains("pool_size = 4"));
        let c: Config = toml::from_str(&u).unwrap();
        assert_eq!(c.docker.image, "sandbench/python:bookworm");
        assert_eq!(c.docker.pool_size, 4);
        assert_eq!(c.limits.pids, 9);
        let u = set_image_in("[docker]\npool_size = 1\n", "x");
        assert_eq!(toml::from_str::<Config>(&u).unwrap().docker.image, "x");
        let u = set_image_in("", "x\"y");
        assert_eq!(toml::from_str::<Config>(&u).unwrap().docker.image, "x\"y");
    }
}
