//! Who owns a container, and removing what dead sandbench processes left:
//! containers labelled by an owner that is gone, and `runsc-sandbox` /
//! `runsc-gofer` processes of containers the engine no longer lists (a runsc
//! container that failed to start can leave those behind, FACTS.md).

use std::collections::{HashMap, HashSet};

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};

use super::container::{LABEL_OWNER, LABEL_PID, LABEL_RUN};
use super::engine::Engine;

/// The labels of a container owned by this process.
/// After the token in the owner label. Reapers of earlier sandbench versions
/// read the label as `machine:pid:starttime` and judged anything malformed
/// dead; with this suffix they read the token as a machine that is not theirs
/// and leave the container alone, so old and new versions can share an engine.
const OWNER_SUFFIX: &str = ":owner-lock:v2";

/// The owner label's value for `token`.
pub(crate) fn owner_label(token: &str) -> String {
    format!("{token}{OWNER_SUFFIX}")
}

/// The owner token in an owner label; None for labels of earlier versions.
pub(crate) fn token_of(label: &str) -> Option<&str> {
    label.strip_suffix(OWNER_SUFFIX)
}

/// The owner label carries this process's owner token: with a shared (remote)
/// engine, other hosts' sandbench processes see it names another host.
pub(crate) fn labels(run_id: &str, tier: &str) -> anyhow::Result<HashMap<String, String>> {
    Ok(HashMap::from([
        (LABEL_RUN.to_string(), run_id.to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
        (LABEL_OWNER.to_string(), owner_label(crate::owner::token()?)),
        (super::container::LABEL_TIER.to_string(), tier.to_string()),
    ]))
}

/// Containers (any state) whose owner label names `token`.
pub(crate) async fn owned(engine: &Engine, token: &str) -> anyhow::Result<Vec<String>> {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_OWNER}={}", owner_label(token))])]);
    let list = engine
        .docker
        .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
        .await
        .map_err(|e| anyhow::anyhow!("cannot list containers: {}", super::engine::cause(&e)))?;
    Ok(list.into_iter().filter_map(|c| c.id).collect())
}

/// Remove containers whose owner is provably dead (see `owner`): a container
/// of another host, another boot, or with a malformed owner label is never
/// touched. Kill stray runsc processes when the engine is local. Returns how many containers and processes went.
pub(crate) async fn reap(engine: &Engine) -> anyhow::Result<(usize, usize)> {
    let filters = HashMap::from([("label".to_string(), vec![LABEL_RUN.to_string()])]);
    let list = engine
        .docker
        .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
        .await
        .map_err(|e| anyhow::anyhow!("cannot list containers: {}", super::engine::cause(&e)))?;
    let mut gone = 0;
    let mut removals = vec![];
    let mut sweep = crate::owner::Sweep::new();
    for c in &list {
        let Some(id) = c.id.clone() else { continue };
        let owner = c.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)).map(String::as_str).unwrap_or("");
        if token_of(owner).is_some_and(|t| sweep.dead(t)) {
            let docker = engine.docker.clone();
            removals.push(async move {
                docker
                    .remove_container(&id, Some(RemoveContainerOptions { force: true, v: true, ..Default::default() }))
                    .await
                    .map(|_| id)
            });
        }
    }
    for r in futures_util::future::join_all(removals).await {
        match r {
            Ok(id) => {
                tracing::info!("removed leftover container {}", &id[..12.min(id.len())]);
                gone += 1;
            }
            Err(e) if super::engine::is_not_found(&e) => {}
            Err(e) => tracing::warn!("cannot remove a leftover container: {e}"),
        }
    }
    let mut killed = 0;
    if engine.local {
        // Every container the engine knows, whoever made it: a runsc process
        // of a known container is none of our business.
        let all = engine
            .docker
            .list_containers(Some(ListContainersOptions { all: true, ..Default::default() }))
            .await
            .map_err(|e| anyhow::anyhow!("cannot list containers: {}", super::engine::cause(&e)))?;
        let known: HashSet<String> = all.into_iter().filter_map(|c| c.id).collect();
        for (pid, id) in runsc_processes() {
            if !known.contains(&id) {
                tracing::info!("killing stray runsc process {pid} of vanished container {}", &id[..12]);
                if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
        }
    }
    Ok((gone, killed))
}

/// (pid, container id) of every runsc sandbox/gofer process Docker started
/// (their bundle lives under containerd's `moby` namespace).
pub fn runsc_processes() -> Vec<(i32, String)> {
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if let Some(id) = runsc_container_id(&cmdline) {
            out.push((pid, id));
        }
    }
    out
}

fn runsc_container_id(cmdline: &[u8]) -> Option<String> {
    let mut args = cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned());
    let argv0 = args.next()?;
    if argv0 != "runsc-sandbox" && argv0 != "runsc-gofer" {
        return None;
    }
    for a in args {
        if let Some(i) = a.find("/moby/") {
            let id: String = a[i + 6..].chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            if id.len() == 64 {
                return Some(id);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_labels_carry_the_token_and_old_reapers_read_another_machine() {
        let l = labels("r", "docker").unwrap();
        let owner = &l[LABEL_OWNER];
        assert_eq!(token_of(owner), Some(crate::owner::token().unwrap()));
        // What earlier versions did with the label: machine:pid:starttime.
        let mut it = owner.rsplitn(3, ':');
        let (_, _, machine) = (it.next(), it.next(), it.next().unwrap());
        assert_eq!(machine, crate::owner::token().unwrap(), "no machine id: an old reaper leaves it alone");
        assert_eq!(token_of("0123:42:77"), None, "an old label is never judged");
    }

    #[test]
    fn runsc_ids_come_from_the_bundle_path() {
        let id = "fe44b7de5eec98126b5d7c219eb3afd145f4b1ab53d2a43aa813971f30e70b9a";
        let cmd = format!("runsc-gofer\0--root=/var/run/docker/runtime-runc/moby\0gofer\0--bundle\0/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{id}\0");
        assert_eq!(runsc_container_id(cmd.as_bytes()).as_deref(), Some(id));
        assert_eq!(runsc_container_id(b"runsc\0--bundle\0/x/moby/abc\0"), None);
        assert_eq!(runsc_container_id(b"sleep\x0030\0"), None);
    }
}
