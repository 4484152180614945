//! What a remote client (an agent speaking MCP) may ask of sandbench. The
//! operator's config and flags set the tiers it may use and a ceiling for
//! every limit; a client can lower limits, never raise one past the ceiling,
//! and never pick a tier the operator did not allow. The checks live here,
//! not in a front end, so every server built on the engine enforces the same.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{self, format_duration, format_size, Language, Limits, RunSpec};

/// Largest program a client may send (bytes). A model's program is a few
/// KiB; anything near this is a mistake or an attack on the log.
pub const MAX_CODE_BYTES: usize = 256 << 10;

/// Limits a client asks for. Sizes and durations are written as on the
/// command line ("256M", "5s"); unset fields keep the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitRequest {
    /// CPU time of the whole sandbox, e.g. "5s", "500ms".
    pub cpu_time: Option<String>,
    /// Wall-clock time from start to kill, e.g. "10s".
    pub wall_time: Option<String>,
    /// Memory, e.g. "256M", "1G".
    pub memory: Option<String>,
    /// Processes and threads alive at once.
    pub pids: Option<u64>,
    /// Largest file the program may write, e.g. "16M".
    pub file_size: Option<String>,
    /// Size of the writable scratch space, e.g. "64M".
    pub disk: Option<String>,
    /// stdout + stderr captured before the run is stopped, e.g. "1M".
    pub output: Option<String>,
    /// Network: "none", or "allow=HOST[:PORT],..." within what this server allows.
    pub network: Option<String>,
}

/// The operator's terms for remote clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Tiers a client may use; the first is the default.
    pub tiers: Vec<String>,
    /// Limits of a run whose client asked for none (never above `ceiling`).
    pub base: Limits,
    /// The most a client may ask for.
    pub ceiling: Limits,
}

impl Policy {
    /// `base` is cut down to `ceiling` wherever it is higher, so a default
    /// never exceeds what a client could ask for explicitly.
    pub fn new(tiers: Vec<String>, base: Limits, ceiling: Limits) -> Result<Policy, String> {
        if tiers.is_empty() {
            return Err("no tier allowed: pass --tiers with at least one tier".into());
        }
        let mut b = base;
        b.cpu_time = b.cpu_time.min(ceiling.cpu_time);
        b.wall_time = b.wall_time.min(ceiling.wall_time);
        b.memory_bytes = b.memory_bytes.min(ceiling.memory_bytes);
        b.pids = b.pids.min(ceiling.pids);
        b.file_size_bytes = b.file_size_bytes.min(ceiling.file_size_bytes);
        b.disk_bytes = b.disk_bytes.min(ceiling.disk_bytes);
        b.output_bytes = b.output_bytes.min(ceiling.output_bytes);
        b.open_files = b.open_files.min(ceiling.open_files);
        b.cpus = b.cpus.min(ceiling.cpus);
        if b.network.within(&ceiling.network).is_err() {
            b.network = crate::egress::Network::None;
        }
        Ok(Policy { tiers, base: b, ceiling })
    }

    /// The tier a request runs on: the one it names if allowed, else the default.
    pub fn tier(&self, requested: Option<&str>) -> Result<String, String> {
        match requested.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(self.tiers[0].clone()),
            Some(t) if self.tiers.iter().any(|a| a == t) => Ok(t.to_string()),
            Some(t) => Err(format!(
                "tier '{}' is not offered by this server (allowed: {})",
                crate::sanitize::inert_line(t, 40),
                self.tiers.join(", ")
            )),
        }
    }

    /// The limits of a run: the base with the client's requests applied,
    /// each checked against the ceiling.
    pub fn limits(&self, req: &LimitRequest) -> Result<Limits, String> {
        let mut l = self.base.clone();
        let c = &self.ceiling;
        if let Some(s) = &req.cpu_time {
            l.cpu_time = duration("cpu_time", s, c.cpu_time, "--max-cpu")?;
        }
        if let Some(s) = &req.wall_time {
            l.wall_time = duration("wall_time", s, c.wall_time, "--max-wall")?;
        }
        if let Some(s) = &req.memory {
            l.memory_bytes = size("memory", s, c.memory_bytes, "--max-memory")?;
        }
        if let Some(n) = req.pids {
            if n == 0 {
                return Err("limits.pids must be at least 1".into());
            }
            if n > c.pids {
                return Err(format!("limits.pids {n} is above this server's ceiling {} (--max-pids)", c.pids));
            }
            l.pids = n;
        }
        if let Some(s) = &req.file_size {
            l.file_size_bytes = size("file_size", s, c.file_size_bytes, "--max-file-size")?;
        }
        if let Some(s) = &req.disk {
            l.disk_bytes = size("disk", s, c.disk_bytes, "--max-disk")?;
        }
        if let Some(s) = &req.output {
            l.output_bytes = size("output", s, c.output_bytes, "--max-output")?;
        }
        if let Some(s) = &req.network {
            let n: crate::egress::Network = s.parse().map_err(|e| format!("limits.network: {e}"))?;
            n.within(&c.network)
                .map_err(|e| format!("limits.{e} (the operator sets it with sandbench mcp --network)"))?;
            l.network = n;
        }
        Ok(l)
    }

    /// A whole request checked: the spec to run and the tier's name.
    pub fn spec(
        &self,
        language: &str,
        code: &str,
        tier: Option<&str>,
        limits: &LimitRequest,
    ) -> Result<(RunSpec, String), String> {
        let language: Language = language.parse().map_err(|e: String| format!("language: {e}"))?;
        if code.trim().is_empty() {
            return Err("code is empty: nothing to run".into());
        }
        if code.len() > MAX_CODE_BYTES {
            return Err(format!(
                "code is {} bytes; this server takes at most {} per program",
                code.len(),
                format_size(MAX_CODE_BYTES as u64)
            ));
        }
        let tier = self.tier(tier)?;
        let mut spec = RunSpec::new(language, code);
        spec.limits = self.limits(limits)?;
        Ok((spec, tier))
    }
}

fn size(field: &str, s: &str, max: u64, flag: &str) -> Result<u64, String> {
    let v = spec::parse_size(s).map_err(|e| format!("limits.{field}: {e}"))?;
    if v > max {
        return Err(format!(
            "limits.{field} {} is above this server's ceiling {} (the operator raises it with sandbench mcp {flag})",
            format_size(v),
            format_size(max)
        ));
    }
    Ok(v)
}

fn duration(field: &str, s: &str, max: Duration, flag: &str) -> Result<Duration, String> {
    let v = spec::parse_duration(s).map_err(|e| format!("limits.{field}: {e}"))?;
    if v > max {
        return Err(format!(
            "limits.{field} {} is above this server's ceiling {} (the operator raises it with sandbench mcp {flag})",
            format_duration(v),
            format_duration(max)
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        let base = Limits::default();
        let mut ceiling = base.clone();
        ceiling.memory_bytes = 512 << 20;
        Policy::new(vec!["process".into(), "docker".into()], base, ceiling).unwrap()
    }

    #[test]
    fn clients_lower_limits_but_never_pass_the_ceiling() {
        let p = policy();
        let req = LimitRequest { memory: Some("128M".into()), wall_time: Some("2s".into()), ..Default::default() };
        let l = p.limits(&req).unwrap();
        assert_eq!(l.memory_bytes, 128 << 20);
        assert_eq!(l.wall_time, Duration::from_secs(2));
        // Up to the ceiling is fine, past it is refused with the ceiling named.
        assert_eq!(
            p.limits(&LimitRequest { memory: Some("512M".into()), ..Default::default() }).unwrap().memory_bytes,
            512 << 20
        );
        let e = p.limits(&LimitRequest { memory: Some("1G".into()), ..Default::default() }).unwrap_err();
        assert!(e.contains("limits.memory 1G is above") && e.contains("512M") && e.contains("--max-memory"), "{e}");
        let e = p.limits(&LimitRequest { wall_time: Some("1h".into()), ..Default::default() }).unwrap_err();
        assert!(e.contains("limits.wall_time") && e.contains("10s"), "{e}");
        let e = p.limits(&LimitRequest { pids: Some(10_000), ..Default::default() }).unwrap_err();
        assert!(e.contains("limits.pids"), "{e}");
        let e = p.limits(&LimitRequest { memory: Some("lots".into()), ..Default::default() }).unwrap_err();
        assert!(e.starts_with("limits.memory: invalid size"), "{e}");
    }

    #[test]
    fn a_client_may_narrow_the_network_but_never_widen_it() {
        let op: crate::egress::Network = "allow=pypi.test,*.pythonhosted.org:443".parse().unwrap();
        let base = Limits { network: op.clone(), ..Default::default() };
        let p = Policy::new(vec!["process".into()], base.clone(), base).unwrap();
        assert_eq!(p.limits(&LimitRequest::default()).unwrap().network, op, "the default is the operator's");
        let req = |n: &str| LimitRequest { network: Some(n.into()), ..Default::default() };
        assert_eq!(p.limits(&req("allow=pypi.test:443")).unwrap().network.to_string(), "allow=pypi.test:443");
        assert!(p.limits(&req("none")).unwrap().network.is_none());
        let e = p.limits(&req("allow=evil.test")).unwrap_err();
        assert!(e.starts_with("limits.network evil.test is not within") && e.contains("--network"), "{e}");
        assert!(p.limits(&req("allow=")).unwrap_err().starts_with("limits.network: invalid"));
        let closed = Policy::new(vec!["process".into()], Limits::default(), Limits::default()).unwrap();
        assert!(closed.limits(&req("allow=pypi.test")).unwrap_err().contains("allows no network"));
    }

    #[test]
    fn the_base_never_exceeds_the_ceiling() {
        let base = Limits { memory_bytes: 1 << 30, ..Default::default() };
        let ceiling = Limits { memory_bytes: 64 << 20, ..Default::default() };
        let p = Policy::new(vec!["process".into()], base, ceiling).unwrap();
        assert_eq!(p.base.memory_bytes, 64 << 20);
        assert!(Policy::new(vec![], Limits::default(), Limits::default()).is_err());
    }

    #[test]
    fn only_allowed_tiers_and_known_languages() {
        let p = policy();
        assert_eq!(p.tier(None).unwrap(), "process");
        assert_eq!(p.tier(Some("docker")).unwrap(), "docker");
        let e = p.tier(Some("e2b")).unwrap_err();
        assert!(e.contains("'e2b' is not offered") && e.contains("process, docker"), "{e}");
        let e = p.spec("ruby", "puts 1", None, &LimitRequest::default()).unwrap_err();
        assert!(e.starts_with("language: unknown language 'ruby'"), "{e}");
        assert!(p.spec("python", "  \n", None, &LimitRequest::default()).unwrap_err().contains("empty"));
        let big = "#".repeat(MAX_CODE_BYTES + 1);
        assert!(p.spec("python", &big, None, &LimitRequest::default()).unwrap_err().contains("at most"));
        let (spec, tier) = p.spec("sh", "echo hi", Some("docker"), &LimitRequest::default()).unwrap();
        assert_eq!((spec.language, tier.as_str()), (Language::Sh, "docker"));
    }
}
