//! What a remote client (an agent speaking MCP) may ask of sandbench. The
//! operator's config and flags set the tiers it may use and a ceiling for
//! every limit; a client can lower limits, never raise one past the ceiling,
//! and never pick a tier the operator did not allow. The checks live here,
//! not in a front end, so every server built on the engine enforces the same.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{self, format_duration, format_size, Language, Limits, RunSpec};

/// Sessions a server keeps open at once unless the operator says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 4;

/// Runs in flight at once, all clients together, unless the operator says otherwise.
pub const DEFAULT_MAX_RUNS: usize = 4;
/// Runs one client may have in flight at once.
pub const DEFAULT_MAX_RUNS_PER_CLIENT: usize = 2;
/// Calls waiting for a slot, all clients together.
pub const DEFAULT_MAX_QUEUE: usize = 16;
/// Processes and threads across everything in flight.
pub const DEFAULT_BUDGET_PIDS: u64 = 2048;

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
    /// Network: "none", or `allow=HOST[:PORT],...` within what this server allows.
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
    /// Sessions the server keeps open at once (all clients together); 0: none.
    pub max_sessions: usize,
    /// A session's idle timeout, and the longest a client may ask for.
    pub session_idle: Duration,
    /// A session's lifetime cap, and the longest a client may ask for.
    pub session_life: Duration,
    /// How much may be in flight at once (runs, queue, memory, pids).
    pub bounds: Bounds,
}

/// What a server holds at once, whatever its clients ask: runs in flight
/// (one-shot runs and calls in sessions), calls waiting for a slot, and a
/// budget of memory and pids that every run and every open session takes
/// its limits from. A run or session is admitted only if its limits fit
/// what is left (`admission.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// Runs in flight, all clients together.
    pub max_runs: usize,
    /// Runs one client may have in flight; it may have as many more
    /// waiting, or half the queue. A client is who authenticated: the stdio
    /// client, or one bearer token over HTTP, whatever the form of its
    /// requests (MCP sessions, or the stateless requests of 2026-07-28).
    pub max_runs_per_client: usize,
    /// Sessions (`open_session`) one client may hold open at once.
    pub max_sessions_per_client: usize,
    /// Calls waiting for a slot, all clients together; one more is refused.
    pub max_queue: usize,
    /// Bytes of memory limits across runs in flight and open sessions.
    pub budget_memory: u64,
    /// Pids limits across runs in flight and open sessions.
    pub budget_pids: u64,
}

impl Default for Bounds {
    /// The defaults, with a memory budget of half the host's memory.
    fn default() -> Bounds {
        Bounds {
            max_runs: DEFAULT_MAX_RUNS,
            max_runs_per_client: DEFAULT_MAX_RUNS_PER_CLIENT,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS,
            max_queue: DEFAULT_MAX_QUEUE,
            budget_memory: crate::host::memory_total().map(|m| m / 2).unwrap_or(2 << 30),
            budget_pids: DEFAULT_BUDGET_PIDS,
        }
    }
}

/// What a client asks of a session beyond its limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SessionRequest {
    /// Close the session when no call used it for this long, e.g. "2m"
    /// (at most the server's).
    pub idle_timeout: Option<String>,
    /// Close the session this long after it opened, whatever happens, e.g.
    /// "30m" (at most the server's).
    pub max_life: Option<String>,
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
        Ok(Policy {
            tiers,
            base: b,
            ceiling,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: crate::session::DEFAULT_IDLE,
            session_life: crate::session::DEFAULT_MAX_LIFE,
            bounds: Bounds::default(),
        })
    }

    /// The server's bounds, checked against the limits: a budget that could
    /// not hold even one run with the default limits admits nothing.
    pub fn with_bounds(mut self, bounds: Bounds) -> Result<Policy, String> {
        if bounds.max_runs == 0 {
            return Err("--max-runs must be at least 1".into());
        }
        if bounds.max_runs_per_client == 0 {
            return Err("--max-runs-per-client must be at least 1".into());
        }
        if bounds.max_sessions_per_client == 0 {
            return Err("--max-sessions-per-client must be at least 1 (--max-sessions 0 keeps no sessions)".into());
        }
        if bounds.budget_memory < self.base.memory_bytes {
            return Err(format!(
                "--budget-memory {} is below the default memory limit {}: no run would fit (raise the budget or lower --memory)",
                format_size(bounds.budget_memory),
                format_size(self.base.memory_bytes)
            ));
        }
        if bounds.budget_pids < self.base.pids {
            return Err(format!(
                "--budget-pids {} is below the default pids limit {}: no run would fit (raise the budget or lower --pids)",
                bounds.budget_pids, self.base.pids
            ));
        }
        self.bounds = bounds;
        Ok(self)
    }

    /// The session terms: how many at once, idle timeout and lifetime cap.
    pub fn with_sessions(mut self, max: usize, idle: Duration, life: Duration) -> Policy {
        self.max_sessions = max;
        self.session_idle = idle;
        self.session_life = life;
        self
    }

    /// A session request checked: the session's spec and the tier's name.
    /// Its limits are the sandbox's own for every call, and the most of
    /// each per-call limit (CPU time, wall time, output) a call may ask for.
    pub fn session(
        &self,
        tier: Option<&str>,
        limits: &LimitRequest,
        req: &SessionRequest,
    ) -> Result<(crate::session::SessionSpec, String), String> {
        if self.max_sessions == 0 {
            return Err(
                "this server keeps no sessions (the operator allows them with sandbench mcp --max-sessions N)".into()
            );
        }
        let tier = self.tier(tier)?;
        let limits = self.limits(limits)?;
        if !limits.network.is_none() {
            // A session's sandbox outlives one call, and its egress relay is
            // built per run; rather than a relay that could drift from the
            // policy the client saw, sessions are offline.
            return Err("limits.network: a session has no network; use run_code for a run with an allow list".into());
        }
        let mut spec = crate::session::SessionSpec::new(limits);
        spec.idle_timeout = self.session_idle;
        spec.max_life = self.session_life;
        if let Some(s) = &req.idle_timeout {
            spec.idle_timeout = duration("idle_timeout", s, self.session_idle, "--session-idle")?;
        }
        if let Some(s) = &req.max_life {
            spec.max_life = duration("max_life", s, self.session_life, "--session-life")?;
        }
        Ok((spec, tier))
    }

    /// The limits of a call in a session: the session's, with the per-call
    /// ones (CPU time, wall time, output) lowered where the call asks. The
    /// sandbox's own limits were set when the session opened.
    pub fn call_limits(&self, session: &Limits, req: &LimitRequest) -> Result<Limits, String> {
        for (name, set) in [
            ("memory", req.memory.is_some()),
            ("pids", req.pids.is_some()),
            ("disk", req.disk.is_some()),
            ("file_size", req.file_size.is_some()),
        ] {
            if set {
                return Err(format!(
                    "limits.{name} belongs to the whole session (set it in open_session); a call in a session \
                     may set only cpu_time, wall_time and output"
                ));
            }
        }
        let mut l = session.clone();
        if let Some(s) = &req.cpu_time {
            l.cpu_time = duration("cpu_time", s, session.cpu_time, "open_session limits.cpu_time")?;
        }
        if let Some(s) = &req.wall_time {
            l.wall_time = duration("wall_time", s, session.wall_time, "open_session limits.wall_time")?;
        }
        if let Some(s) = &req.output {
            l.output_bytes = size("output", s, session.output_bytes, "open_session limits.output")?;
        }
        Ok(l)
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
        let mut spec = self.program(language, code)?;
        let tier = self.tier(tier)?;
        spec.limits = self.limits(limits)?;
        Ok((spec, tier))
    }

    /// The program checked (language known, code not empty nor too big),
    /// with the base limits.
    pub fn program(&self, language: &str, code: &str) -> Result<RunSpec, String> {
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
        let mut spec = RunSpec::new(language, code);
        spec.limits = self.base.clone();
        Ok(spec)
    }
}

fn size(field: &str, s: &str, max: u64, flag: &str) -> Result<u64, String> {
    let v = spec::parse_size(s).map_err(|e| format!("limits.{field}: {e}"))?;
    if v > max {
        return Err(format!("limits.{field} {} is above {}", format_size(v), ceiling(format_size(max), flag)));
    }
    Ok(v)
}

fn duration(field: &str, s: &str, max: Duration, flag: &str) -> Result<Duration, String> {
    let prefix = if field.contains("life") || field.contains("idle") { "" } else { "limits." };
    let v = spec::parse_duration(s).map_err(|e| format!("{prefix}{field}: {e}"))?;
    if v > max {
        return Err(format!("{prefix}{field} {} is above {}", format_duration(v), ceiling(format_duration(max), flag)));
    }
    Ok(v)
}

/// "this server's ceiling X (the operator raises it with …)", or, for a
/// call in a session, "the session's X (…)".
fn ceiling(max: String, flag: &str) -> String {
    match flag.strip_prefix("open_session ") {
        Some(f) => format!("this session's {max} (open a session with a higher {f})"),
        None => format!("this server's ceiling {max} (the operator raises it with sandbench mcp {flag})"),
    }
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
    fn bounds_that_could_admit_nothing_are_refused_at_start() {
        let b = |runs, memory, pids| Bounds {
            max_runs: runs,
            max_runs_per_client: 1,
            max_sessions_per_client: 1,
            max_queue: 4,
            budget_memory: memory,
            budget_pids: pids,
        };
        assert!(policy().with_bounds(b(2, 1 << 30, 100)).is_ok());
        assert!(policy().with_bounds(b(0, 1 << 30, 100)).unwrap_err().contains("--max-runs"));
        let e = policy().with_bounds(b(2, 100 << 20, 100)).unwrap_err();
        assert!(e.contains("--budget-memory 100M is below the default memory limit 256M"), "{e}");
        assert!(policy().with_bounds(b(2, 1 << 30, 10)).unwrap_err().contains("--budget-pids 10"));
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

    #[test]
    fn sessions_are_bounded_and_calls_in_them_only_lower_per_call_limits() {
        let p = policy().with_sessions(2, Duration::from_secs(60), Duration::from_secs(600));
        let (spec, tier) = p
            .session(
                Some("docker"),
                &LimitRequest { memory: Some("128M".into()), ..Default::default() },
                &SessionRequest { idle_timeout: Some("30s".into()), ..Default::default() },
            )
            .unwrap();
        assert_eq!((tier.as_str(), spec.limits.memory_bytes), ("docker", 128 << 20));
        assert_eq!((spec.idle_timeout, spec.max_life), (Duration::from_secs(30), Duration::from_secs(600)));
        let e = p
            .session(
                None,
                &LimitRequest::default(),
                &SessionRequest { max_life: Some("2h".into()), ..Default::default() },
            )
            .unwrap_err();
        assert!(
            e.starts_with("max_life 7200s is above this server's ceiling 600s") && e.contains("--session-life"),
            "{e}"
        );
        let e = p.session(None, &LimitRequest { memory: Some("2G".into()), ..Default::default() }, &Default::default());
        assert!(e.unwrap_err().contains("limits.memory 2G is above this server's ceiling 512M"));
        let none = policy().with_sessions(0, Duration::from_secs(1), Duration::from_secs(1));
        assert!(none
            .session(None, &LimitRequest::default(), &Default::default())
            .unwrap_err()
            .contains("--max-sessions"));

        let l =
            p.call_limits(&spec.limits, &LimitRequest { wall_time: Some("2s".into()), ..Default::default() }).unwrap();
        assert_eq!((l.wall_time, l.memory_bytes), (Duration::from_secs(2), 128 << 20));
        let e = p
            .call_limits(&spec.limits, &LimitRequest { memory: Some("64M".into()), ..Default::default() })
            .unwrap_err();
        assert!(e.contains("limits.memory belongs to the whole session"), "{e}");
        let e = p
            .call_limits(&spec.limits, &LimitRequest { wall_time: Some("1m".into()), ..Default::default() })
            .unwrap_err();
        assert!(e.contains("limits.wall_time 60s is above this session's 10s"), "{e}");
    }
}
