//! The host's watch of a one-shot run's scratch mounts (`highwater`): the
//! high-water marks of its files and mounts seen from outside the container,
//! with the scratch guard served for runc when sandbench is root. Where the
//! host cannot see them, the loader's own checks judge alone.

use std::path::PathBuf;

use super::container;
use super::engine::{self, Engine};
use super::lifecycle::short;
use super::{scratch, DockerTier};
use crate::event::RunContext;
use crate::highwater;

impl DockerTier {
    /// The host's watch of the container's scratch mounts: runc on a local
    /// engine with sandbench as root marks them through the loader's
    /// `/proc/<pid>/root` (and serves the guard: the loader's pid is
    /// returned). Otherwise None, and the loader's own checks judge.
    pub(super) async fn host_watch(
        &self,
        engine: &Engine,
        id: &str,
        known_pid: Option<i32>,
        limits: &crate::spec::Limits,
        ctx: &RunContext,
    ) -> (Option<highwater::Watch>, Option<i32>) {
        if !engine.local {
            return (None, None);
        }
        if self.runtime.is_some() {
            // gVisor: its host scratch mounts, if it has them; no guard
            // (runsc 20221219 has no seccomp user notification).
            let Some(dir) = scratch::of(id) else {
                ctx.note("gVisor scratch space judged by the loader alone (no host scratch mounts: not root, or they could not be made)").await;
                return (None, None);
            };
            let mounts: Vec<highwater::Scratch> =
                scratch::MOUNTS.iter().map(|(name, inside)| highwater::Scratch::new(inside, dir.join(name))).collect();
            return match highwater::Watch::new(&mounts, limits.file_size_bytes, highwater::Mode::Handles) {
                Ok(w) if w.sees_files() => (Some(w), None),
                Ok(_) | Err(_) => (None, None),
            };
        }
        if !nix::unistd::geteuid().is_root() {
            ctx.note("scratch space judged by the loader alone (sandbench is not root): a full scratch emptied at once, or a capped file deleted or truncated, may go unreported").await;
            return (None, None);
        }
        let pid = match known_pid {
            Some(p) => Some(p),
            None => match engine
                .docker
                .inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>)
                .await
            {
                Ok(i) => i.state.and_then(|s| s.pid).filter(|p| *p > 0).map(|p| p as i32),
                Err(e) => {
                    tracing::debug!("inspect {}: {}", short(id), engine::cause(&e));
                    None
                }
            },
        };
        let Some(pid) = pid else {
            ctx.note("scratch space judged by the loader alone (the container's process was not found)").await;
            return (None, None);
        };
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mounts: Vec<highwater::Scratch> = [container::WORKDIR, container::TMPDIR, container::SHMDIR]
            .iter()
            .map(|m| highwater::Scratch::new(m, root.join(m.trim_start_matches('/'))))
            .collect();
        match highwater::Watch::new(&mounts, limits.file_size_bytes, highwater::Mode::Pin) {
            Ok(w) if w.sees_files() => (Some(w), Some(pid)),
            Ok(w) => {
                ctx.note(format!(
                    "scratch files not watched from the host ({}): the loader's checks judge",
                    w.why_not().unwrap_or("?")
                ))
                .await;
                (None, None)
            }
            Err(e) => {
                ctx.note(format!("scratch space not watched from the host ({e}): the loader's checks judge")).await;
                (None, None)
            }
        }
    }
}

/// Start the host's watch thread once the program's process exists, with
/// the scratch guard's listener taken from the loader when one was asked for.
pub(super) fn start_watch(
    w: highwater::Watch,
    wanted: bool,
    guard: Option<i32>,
    loader_pid: Option<i32>,
) -> Result<highwater::Running, String> {
    let guard = match (wanted, guard, loader_pid) {
        (false, _, _) => None,
        (true, Some(fd), Some(pid)) => Some(
            highwater::take_fd(pid, fd)
                .and_then(highwater::Guard::new)
                .map_err(|e| format!("cannot serve the scratch guard ({e})"))?,
        ),
        (true, _, _) => return Err("the loader did not hand over the scratch guard".into()),
    };
    highwater::Running::spawn(w, guard)
}
