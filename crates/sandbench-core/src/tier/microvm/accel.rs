//! Which accelerator runs the guests: KVM only when a probe guest actually
//! reaches user space within a short timeout (on some hosts `/dev/kvm` opens
//! and the guest then hangs, e.g. under nested virtualization), TCG
//! otherwise. The verdict is cached in `accel.json`, keyed by the QEMU
//! version, the host kernel and the guest artefacts.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::artefacts::{Manifest, Paths};
use super::vm::{kernel_args, qemu_version, Accel};
use crate::config::{AccelSetting, MicrovmConfig};

pub(crate) const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(8);
const MARKER: &[u8] = b"sandbench-probe-ok";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AccelChoice {
    pub accel: Accel,
    /// Why: "KVM guest booted in 0.4 s" / "KVM guest did not reach user space ...".
    pub detail: String,
    pub key: String,
}

fn key(cfg: &MicrovmConfig, p: &Paths) -> String {
    let host = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    format!(
        "{}|{}|{}|{}",
        qemu_version(&cfg.qemu).unwrap_or_default(),
        host,
        Manifest::load(p).fingerprint(),
        <&str>::from(cfg.accel)
    )
}

pub(crate) fn cached(cfg: &MicrovmConfig, p: &Paths) -> Option<AccelChoice> {
    let c: AccelChoice = serde_json::from_slice(&std::fs::read(&p.accel).ok()?).ok()?;
    (c.key == key(cfg, p)).then_some(c)
}

/// The cached choice, or probe now (a few seconds at most) and cache it.
pub(crate) async fn choose(cfg: &MicrovmConfig, p: &Paths) -> AccelChoice {
    if let Some(c) = cached(cfg, p) {
        return c;
    }
    let k = key(cfg, p);
    let choice = match cfg.accel {
        AccelSetting::Tcg => {
            AccelChoice { accel: Accel::Tcg, detail: "TCG (software emulation) as configured".into(), key: k }
        }
        AccelSetting::Kvm => AccelChoice { accel: Accel::Kvm, detail: "KVM as configured (not probed)".into(), key: k },
        AccelSetting::Auto => match probe_kvm(cfg, p).await {
            Ok(d) => AccelChoice {
                accel: Accel::Kvm,
                detail: format!("KVM: a probe guest reached user space in {:.2} s", d.as_secs_f64()),
                key: k,
            },
            Err(why) => {
                AccelChoice { accel: Accel::Tcg, detail: format!("TCG (software emulation, slow): {why:#}"), key: k }
            }
        },
    };
    if let Ok(b) = serde_json::to_vec_pretty(&choice) {
        let _ = std::fs::write(&p.accel, b);
    }
    choice
}

/// Boot the initramfs alone under KVM; it prints a marker and powers off.
async fn probe_kvm(cfg: &MicrovmConfig, p: &Paths) -> anyhow::Result<Duration> {
    std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").context(
        "/dev/kvm cannot be opened (no hardware virtualization, or no permission: add the user to group kvm)",
    )?;
    let t0 = Instant::now();
    let mut cmd = tokio::process::Command::new(&cfg.qemu);
    cmd.args(["-M", "microvm,accel=kvm,x-option-roms=off,rtc=off,pcie=off", "-cpu", "host", "-m", "256M"])
        .args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"])
        .args(["-name", &format!("{}{}-probe", super::vm::NAME_PREFIX, crate::owner::token()?)])
        .args(["-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"])
        .arg("-kernel")
        .arg(&p.kernel)
        .arg("-initrd")
        .arg(&p.initrd)
        .args(["-append", &kernel_args(true, None, super::clock::host_tsc_khz())])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    super::vm::die_with_sandbench(&mut cmd);
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", cfg.qemu))?;
    let mut out = child.stdout.take().context("no stdout")?;
    let mut err = child.stderr.take().context("no stderr")?;
    let seen = async {
        let mut buf = vec![];
        let mut chunk = [0u8; 4096];
        loop {
            match out.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(MARKER.len()).any(|w| w == MARKER) {
                        return true;
                    }
                    let keep = buf.len().saturating_sub(64);
                    buf.drain(..keep);
                }
            }
        }
    };
    let r = tokio::time::timeout(KVM_PROBE_TIMEOUT, seen).await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    match r {
        Ok(true) => Ok(t0.elapsed()),
        Ok(false) => {
            let mut e = String::new();
            let _ = err.read_to_string(&mut e).await;
            let line = e.lines().find(|l| !l.trim().is_empty()).unwrap_or("no output").to_string();
            anyhow::bail!("KVM guest failed to start: {}", crate::sanitize::visible_controls(line.as_bytes()))
        }
        Err(_) => anyhow::bail!(
            "/dev/kvm opens but a KVM guest did not reach user space within {} s (nested virtualization?)",
            KVM_PROBE_TIMEOUT.as_secs()
        ),
    }
}
