//! The table of sandbench's own tier kinds: one row per tier, in order of
//! isolation strength, with what it is (its boundary), what the host needs
//! for it, the limits it enforces, its network, and what `sandbench setup`
//! builds for it. Every place that lists, checks or sets up "all the tiers"
//! iterates [`KINDS`]; only the registry (`super::registry::build`) turns a
//! row into a tier. Plain data, below the tiers: the peers reserve these
//! names and the contract's refusals name the tiers with egress from here.

use serde::Serialize;

/// sandbench's own tiers, in the order of [`KINDS`]. Peers (other tools'
/// sandboxes, `peer::names()`) are tiers too, named by their profiles.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum TierKind {
    Process,
    Docker,
    Gvisor,
    Microvm,
    E2b,
}

impl TierKind {
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Its row.
    pub fn row(self) -> &'static Kind {
        // KINDS is in variant order (a test holds it so).
        &KINDS[self as usize]
    }
}

/// How a tier's sandbox reaches the network when the limit allows hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Egress {
    /// Through sandbench's per-run egress proxy: any allow list, and
    /// secrets (the proxy substitutes them).
    Proxy,
    /// Through the provider's own filter: names only (the tier refuses the
    /// entries it cannot enforce), and no secrets.
    Provider,
}

/// What `sandbench setup NAME` builds for a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setup {
    /// The container image, on the daemon's default runtime or this one.
    Image { runtime: Option<&'static str> },
    /// The guest kernel, root disk and agent (and the accelerator probe).
    Guest,
}

/// How `sandbench bench` measures a tier: which of its start paths it times
/// and the floor each is held against (`bench.rs` has one plan per shape;
/// a new tier of a known shape needs no bench code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bench {
    /// A sandbox built on the host, cold and from a spare made ahead:
    /// against the bare interpreter and `bwrap --unshare-all`.
    Spare,
    /// A container on a Docker runtime (`None`: the daemon's default), cold
    /// and from the pool: against `docker run --rm` with the same flags.
    Container { runtime: Option<&'static str> },
    /// A VM with its own kernel: a cold boot against a plain QEMU boot, a
    /// snapshot restore, a pooled guest.
    Guest,
    /// Someone else's machines: against the local process tier (what leaving
    /// the machine costs), no target.
    Remote,
}

/// One row of [`KINDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Kind {
    pub kind: TierKind,
    /// What stands between the program and the host.
    pub boundary: &'static str,
    /// What the host needs for it.
    pub needs: &'static str,
    /// The limits it enforces (beyond those the runner enforces for every
    /// tier: wall time and output).
    pub enforces: &'static str,
    pub egress: Egress,
    /// `sandbench setup NAME`, when it has something to build.
    pub setup: Option<Setup>,
    pub bench: Bench,
}

impl Kind {
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
}

/// sandbench's own tiers, in order of isolation strength.
pub const KINDS: &[Kind] = &[
    Kind {
        kind: TierKind::Process,
        boundary: "a limited subprocess on the host kernel: namespaces, a per-run cgroup, Landlock, seccomp, rlimits, a per-run uid",
        needs: "Linux with python3 in /usr/bin; root (or a delegated cgroup) for cgroup limits",
        enforces: "cpu time, memory, pids, file size, open files, disk, cpus, network",
        egress: Egress::Proxy,
        setup: None,
        bench: Bench::Spare,
    },
    Kind {
        kind: TierKind::Docker,
        boundary: "a hardened container (runc) through the Docker Engine API: no capabilities, read-only root, uid 65534",
        needs: "a Docker daemon and the sandbench/runtime image",
        enforces: "cpu time, memory, pids, file size, open files, disk, cpus, network",
        egress: Egress::Proxy,
        setup: Some(Setup::Image { runtime: None }),
        bench: Bench::Container { runtime: None },
    },
    Kind {
        kind: TierKind::Gvisor,
        boundary: "the same container on gVisor (runsc): a user-space kernel between program and host",
        needs: "runsc registered with the Docker daemon, and the image",
        enforces: "cpu time, memory, pids, file size, open files, disk, cpus, network",
        egress: Egress::Proxy,
        setup: Some(Setup::Image { runtime: Some("runsc") }),
        bench: Bench::Container { runtime: Some("runsc") },
    },
    Kind {
        kind: TierKind::Microvm,
        boundary: "a QEMU microVM with its own kernel: no network device, read-only root disk",
        needs: "qemu-system-x86, a kernel in /boot, and the guest artefacts (root)",
        enforces: "cpu time, memory, pids, file size, open files, disk, cpus, network",
        egress: Egress::Proxy,
        setup: Some(Setup::Guest),
        bench: Bench::Guest,
    },
    Kind {
        kind: TierKind::E2b,
        boundary: "a Firecracker microVM on E2B's hosts, over its REST and envd APIs",
        needs: "E2B_API_KEY",
        enforces: "cpu time, memory, network (names on ports 80 and 443)",
        egress: Egress::Provider,
        setup: None,
        bench: Bench::Remote,
    },
];

/// The names of sandbench's own tiers, in order of isolation strength.
pub const KNOWN: &[&str] = <TierKind as strum::VariantNames>::VARIANTS;

/// The row of one of sandbench's own tiers.
pub fn of(name: &str) -> Option<&'static Kind> {
    name.parse::<TierKind>().ok().map(TierKind::row)
}

/// The tiers whose traffic sandbench's egress proxy carries.
pub fn proxied() -> impl Iterator<Item = &'static str> {
    KINDS.iter().filter(|k| k.egress == Egress::Proxy).map(Kind::name)
}

/// [`proxied`] as a list for people: "process, docker, gvisor, microvm".
pub fn with_proxy() -> String {
    proxied().collect::<Vec<_>>().join(", ")
}

/// [`proxied`] as a choice for people: "process, docker, gvisor or microvm".
pub fn with_proxy_or() -> String {
    let names: Vec<&str> = proxied().collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The samples' class key for the tiers in [`proxied`] (`egress=ok` in an
/// `expect:` line).
pub const PROXIED_CLASS: &str = "egress";

/// Names no peer profile may take: the own tiers, `all`, and the class key
/// of the samples' headers (a peer by that name would be read as the class).
pub fn reserved(name: &str) -> bool {
    name == "all" || name == PROXIED_CLASS || KNOWN.contains(&name)
}

/// `sandbench setup` targets with something to build, in table order.
pub fn setup_targets() -> impl Iterator<Item = (&'static str, Setup)> {
    KINDS.iter().filter_map(|k| k.setup.map(|s| (k.name(), s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_variant_order_and_complete() {
        assert_eq!(KINDS.len(), KNOWN.len());
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(k.kind as usize, i, "row {i} ({}) is out of order", k.name());
            assert_eq!(k.name(), KNOWN[i]);
            assert_eq!(of(k.name()), Some(k));
        }
        assert_eq!(of("bwrap"), None);
    }

    #[test]
    fn derived_lists() {
        assert_eq!(with_proxy(), "process, docker, gvisor, microvm");
        assert_eq!(with_proxy_or(), "process, docker, gvisor or microvm");
        assert!(reserved("process") && reserved("all") && reserved("egress") && !reserved("bwrap"));
        let targets: Vec<&str> = setup_targets().map(|(n, _)| n).collect();
        assert_eq!(targets, ["docker", "gvisor", "microvm"]);
    }

    #[test]
    fn a_container_is_benched_on_the_runtime_its_image_is_set_up_for() {
        for k in KINDS {
            if let Bench::Container { runtime } = k.bench {
                assert_eq!(k.setup, Some(Setup::Image { runtime }), "{}", k.name());
            }
        }
    }
}
