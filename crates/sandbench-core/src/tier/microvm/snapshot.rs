//! Snapshot restore: boot a guest once until the agent waits for a program,
//! save the whole VM with QEMU's migration to a file (`migrate exec:cat >
//! file`, over QMP), and start later guests from it with `-incoming`. The
//! saved state is specific to the artefacts, the guest shape and the QEMU
//! version; `meta.json` beside it records how long a cold boot and a restore
//! took, so the tier can use whichever is faster.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::artefacts::{Manifest, Paths};
use super::clock;
use super::vm::{self, qemu_version, Boot, Guest, Shape, WaitEnd};
use crate::config::MicrovmConfig;

pub(crate) const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub key: String,
    /// Spawn → agent READY on a cold boot, ms.
    pub boot_ms: f64,
    /// Spawn → agent answering after a restore, ms.
    pub restore_ms: f64,
    pub size_bytes: u64,
    /// The TSC rate the saved guest's kernel was given (None: jiffies).
    #[serde(default)]
    pub tsc_khz: Option<u64>,
}

impl SnapshotMeta {
    pub fn faster_than_boot(&self) -> bool {
        self.restore_ms < self.boot_ms
    }
}

pub(crate) fn files(p: &Paths, shape: Shape) -> (PathBuf, PathBuf) {
    let base = format!("{}m-{}c-{}", shape.mem_mib, shape.cpus, shape.accel.name());
    (p.snapshots.join(format!("{base}.state")), p.snapshots.join(format!("{base}.json")))
}

/// Everything the saved guest was started with: QEMU, the artefacts, the
/// shape and the kernel's command line. The TSC rate in it stands as 0
/// here: a second measurement of one host differs in the last digits, so
/// the rate is kept in the meta and compared with a tolerance.
fn key(cfg: &MicrovmConfig, p: &Paths, shape: Shape) -> String {
    format!(
        "{}|{}|{:?}|{}",
        qemu_version(&cfg.qemu).unwrap_or_default(),
        Manifest::load(p).fingerprint(),
        shape,
        vm::kernel_args(false, None, clock::host_tsc_khz().map(|_| 0))
    )
}

/// The snapshot for this shape, if one exists for the current artefacts
/// (and this host's clock: a guest saved on a host whose TSC ran at another
/// rate would keep the wrong time).
pub(crate) fn load(cfg: &MicrovmConfig, p: &Paths, shape: Shape) -> Option<(PathBuf, SnapshotMeta)> {
    let (state, meta) = files(p, shape);
    let m: SnapshotMeta = serde_json::from_slice(&std::fs::read(&meta).ok()?).ok()?;
    (m.key == key(cfg, p, shape) && clock::same_rate(m.tsc_khz, clock::host_tsc_khz()) && state.is_file())
        .then_some((state, m))
}

/// Boot, save, then time one restore. Replaces an older snapshot of the shape.
pub(crate) async fn create(cfg: &MicrovmConfig, p: &Paths, shape: Shape) -> anyhow::Result<SnapshotMeta> {
    std::fs::create_dir_all(&p.snapshots).with_context(|| format!("cannot create {}", p.snapshots.display()))?;
    let (state, meta) = files(p, shape);
    let tmp = state.with_extension("part");
    let never = CancellationToken::new();
    let mut g = Guest::spawn(&cfg.qemu, p, shape, Boot::Cold(None), true)?;
    let saved = async {
        g.wait_for(false, BOOT_TIMEOUT, &never).await?;
        let sock = g.qmp.clone().ok_or_else(|| anyhow!("no QMP socket"))?;
        migrate(&sock, &tmp).await
    }
    .await;
    let boot_ms = g.boot_ms.unwrap_or(f64::NAN);
    g.kill().await;
    if let Err(e) = saved {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &state)?;
    let mut r = Guest::spawn(&cfg.qemu, p, shape, Boot::Restore(&state), false)?;
    let restored = async {
        vm::ping(&mut r).await?;
        r.wait_for(true, BOOT_TIMEOUT, &never).await
    }
    .await;
    let restore_ms = r.boot_ms.unwrap_or(f64::NAN);
    r.kill().await;
    match restored {
        Ok(WaitEnd::Ready) => {}
        Ok(WaitEnd::Stopped) => bail!("restore interrupted"),
        Err(e) => {
            let _ = std::fs::remove_file(&state);
            return Err(e.context("a guest restored from the snapshot did not answer"));
        }
    }
    let m = SnapshotMeta {
        key: key(cfg, p, shape),
        boot_ms,
        restore_ms,
        size_bytes: std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0),
        tsc_khz: clock::host_tsc_khz(),
    };
    std::fs::write(&meta, serde_json::to_vec_pretty(&m)?)?;
    Ok(m)
}

/// Save the running VM to `to` over QMP and wait until it is complete.
async fn migrate(sock: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    let mut stream = None;
    for _ in 0..100 {
        if let Ok(s) = tokio::net::UnixStream::connect(sock).await {
            stream = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stream = stream.ok_or_else(|| anyhow!("cannot connect to QEMU's QMP socket"))?;
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    lines.next_line().await?; // greeting
    w.write_all(line(serde_json::json!({"execute": "qmp_capabilities"})).as_bytes()).await?;
    reply(&mut lines).await?;
    let uri = format!("exec:cat > '{}'", to.to_string_lossy().replace('\'', "'\\''"));
    w.write_all(line(serde_json::json!({"execute": "migrate", "arguments": {"uri": uri}})).as_bytes()).await?;
    reply(&mut lines).await?;
    for _ in 0..600 {
        w.write_all(line(serde_json::json!({"execute": "query-migrate"})).as_bytes()).await?;
        let r = reply(&mut lines).await?;
        match r.get("status").and_then(|s| s.as_str()) {
            Some("completed") => return Ok(()),
            Some("failed") | Some("cancelled") => {
                bail!("saving the VM failed: {}", r.get("error-desc").cloned().unwrap_or_default())
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    bail!("saving the VM did not finish within 30 s")
}

type QmpLines = tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>;

fn line(cmd: serde_json::Value) -> String {
    format!("{cmd}\n")
}

/// The next command reply, skipping asynchronous events.
async fn reply(lines: &mut QmpLines) -> anyhow::Result<serde_json::Value> {
    loop {
        let l = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| anyhow!("QMP did not answer"))??
            .ok_or_else(|| anyhow!("QMP closed"))?;
        let v: serde_json::Value = serde_json::from_str(&l).unwrap_or_default();
        if let Some(e) = v.get("error") {
            bail!("QMP error: {e}");
        }
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
    }
}
