//! What E2B enforces of a run's network, secrets and limits, and what it
//! cannot: the tier contract's checks, the egress rules the create call
//! sends and every run's and call's account of its limits. Its own file
//! because the API client and a session read it as well as the tier.

use serde_json::json;

use crate::spec::{format_size, RunSpec};

/// E2B's "all traffic" selector (the SDK's `ALL_TRAFFIC`).
pub(crate) const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// E2B's sandboxes reach the internet through E2B's own network, which
/// sandbench's egress proxy never sees: a secret could only be handed to
/// the program, so a run with one is refused.
pub(crate) fn refuse_secrets(secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    if secrets.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the e2b tier's sandbox uses E2B's own network, which sandbench's egress proxy never sees: a secret could only be handed to the program; run it on {}",
        crate::tier::kinds::with_proxy_or()
    ))
}

/// The allow list as E2B's `allowOut`: names and `*.` wildcards only.
pub(crate) fn allow_out(n: &crate::egress::Network) -> Vec<String> {
    n.entries().iter().map(|e| e.to_string()).collect()
}

/// E2B filters names on port 80 (Host header) and 443 (SNI) only, and an
/// address for every port: only bare names (sandbench's 80 and 443) map
/// onto its rules without widening them.
pub(crate) fn check_allow_list(n: &crate::egress::Network) -> Result<(), String> {
    use crate::egress::policy::Pattern;
    for e in n.entries() {
        let why = match (&e.host, e.port) {
            (Pattern::Ip(_), _) => "E2B would allow an address on every port, not only 80 and 443",
            (_, Some(_)) => "E2B filters names on ports 80 and 443 together and cannot limit one port",
            _ => continue,
        };
        return Err(format!("the e2b tier cannot enforce the allow entry {e}: {why}; allow the bare name instead"));
    }
    Ok(())
}

/// What the tier does with each limit: E2B gives a VM of the template's size
/// and nothing finer, so what it cannot enforce is said, never dropped.
pub(crate) fn limit_enforcement(spec: &RunSpec) -> serde_json::Value {
    let l = &spec.limits;
    json!({
        "wall_time": "enforced: sandbench kills the sandbox; E2B's own timeout is wall time + margin",
        "output": "enforced by sandbench (stops reading and kills the sandbox)",
        "network": if l.network.is_none() {
            "blocked by E2B (allow_internet_access=false)".to_string()
        } else {
            format!("E2B's own egress rules: allowOut {:?}, denyOut [{ALL_TRAFFIC}] (HTTP Host on port 80, TLS SNI on 443; E2B lets DNS to its nameserver through); not seen by sandbench", allow_out(&l.network))
        },
        "cpu_time": "per process only (ulimit -t inside the VM), not for the sandbox as a whole",
        "file_size": "enforced per process (ulimit -f inside the VM)",
        "open_files": "enforced per process (ulimit -n inside the VM)",
        "memory": format!("not enforced: {} requested; the template's VM memory applies", format_size(l.memory_bytes)),
        "pids": format!("not enforced: {} requested; E2B has no process limit", l.pids),
        "disk": format!("not enforced: {} requested; the template's disk applies", format_size(l.disk_bytes)),
        "cpus": format!("not enforced: {} requested; the template's vCPUs apply", l.cpus),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Language;

    #[test]
    fn every_limit_is_accounted_for() {
        let spec = RunSpec::new(Language::Sh, "true");
        let e = limit_enforcement(&spec);
        let limits = serde_json::to_value(&spec.limits).unwrap();
        for k in limits.as_object().unwrap().keys() {
            let name = k.trim_end_matches("_bytes");
            assert!(e.get(name).is_some(), "limit {k} is not described");
        }
        assert!(e["memory"].as_str().unwrap().starts_with("not enforced"));
        assert!(e["pids"].as_str().unwrap().starts_with("not enforced"));
    }
}
