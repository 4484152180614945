//! Host-side scratch mounts for gVisor containers (issue 10, item 8). gVisor
//! keeps a container's own tmpfs inside its user-space kernel, where the
//! host cannot watch it (runsc 20221219 has no fanotify either). So, with a
//! local engine and sandbench as root, each gVisor container gets `/work`,
//! `/tmp` and `/dev/shm` as host tmpfs mounts (same size and inode limits)
//! bound in; gVisor's gofer does the program's file work on them, and the
//! host watches them with [`crate::highwater::Watch`] like any other.
//!
//! The mounts live under `/run/sandbench/scratch/<owner token>-<run id>/`
//! (a root-only folder), are removed with their container, and the ones a
//! dead sandbench left are removed at the next start (their token's lock
//! proves the owner dead, see `owner.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::container::Shape;

/// The three mounts, by their name inside the container.
pub(crate) const MOUNTS: [(&str, &str); 3] = [("work", "/work"), ("tmp", "/tmp"), ("shm", "/dev/shm")];

pub(crate) fn base() -> PathBuf {
    PathBuf::from("/run/sandbench/scratch")
}

/// Container id → its scratch folder, for [`release`].
fn registry() -> &'static Mutex<HashMap<String, PathBuf>> {
    static R: std::sync::OnceLock<Mutex<HashMap<String, PathBuf>>> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Can this process make host scratch mounts (root, Linux)?
pub(crate) fn available() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Make the folder and its three tmpfs mounts for a container not yet
/// created. Nothing is left behind on failure.
pub(crate) fn create(run_id: &str, shape: &Shape) -> anyhow::Result<PathBuf> {
    let token = crate::owner::token()?;
    let base = base();
    std::fs::create_dir_all(&base)?;
    std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let dir = base.join(format!("{token}-{run_id}"));
    std::fs::create_dir(&dir)?;
    let made = (|| -> anyhow::Result<()> {
        for (name, _) in MOUNTS {
            let m = dir.join(name);
            std::fs::create_dir(&m)?;
            mount(
                Some("tmpfs"),
                &m,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(shape.host_tmpfs_options().as_str()),
            )
            .map_err(|e| anyhow::anyhow!("mount tmpfs on {}: {e}", m.display()))?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        destroy(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// The bind mounts for a container's create request.
pub(crate) fn binds(dir: &Path) -> Vec<String> {
    MOUNTS.iter().map(|(name, inside)| format!("{}:{inside}:rw", dir.join(name).display())).collect()
}

/// Remember which folder a created container uses.
pub(crate) fn register(id: &str, dir: PathBuf) {
    registry().lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), dir);
}

/// The folder of a container (None: it has none).
pub(crate) fn of(id: &str) -> Option<PathBuf> {
    registry().lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
}

/// The container is gone: its mounts go too.
pub(crate) fn release(id: &str) {
    let dir = registry().lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    if let Some(d) = dir {
        destroy(&d);
    }
}

/// Unmount (lazily: a container still holding a bind keeps its own
/// reference) and remove a scratch folder.
pub(crate) fn destroy(dir: &Path) {
    for (name, _) in MOUNTS {
        let m = dir.join(name);
        if let Err(e) = umount2(&m, MntFlags::MNT_DETACH) {
            if e != nix::errno::Errno::EINVAL && e != nix::errno::Errno::ENOENT {
                tracing::warn!("cannot unmount {}: {e}", m.display());
            }
        }
        let _ = std::fs::remove_dir(&m);
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove {}: {e}", dir.display());
        }
    }
}

/// Remove the scratch folders of dead sandbench processes; the number removed.
pub(crate) fn reap() -> usize {
    let Ok(rd) = std::fs::read_dir(base()) else { return 0 };
    let mut sweep = crate::owner::Sweep::new();
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if sweep.name_dead(&name) {
            destroy(&e.path());
            n += 1;
        }
    }
    n
}
