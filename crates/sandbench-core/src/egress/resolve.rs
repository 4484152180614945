//! Names are resolved by the proxy, never by the sandbox (which has no
//! resolver and no route to one). Two sources: the operator's `[network]
//! hosts` map (like /etc/hosts; its addresses are the operator's word, so
//! they pass the address check whatever their range) and the system
//! resolver (whose answers must be public addresses). Only names the allow
//! list allows are ever looked up, so a program cannot make the proxy send
//! a secret-bearing name to a DNS server by asking for it.
//!
//! The first answer for a name is kept for the rest of the run (DNS
//! pinning): a name that answered an allowed address cannot answer another
//! one later (rebinding).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::policy::{canonical, Host};

/// How long a system lookup may take.
pub(crate) const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Addresses kept from one answer.
const MAX_ADDRS: usize = 16;
/// Names of system lookups kept for the report.
const MAX_LOOKUPS: usize = 64;

/// `[network] hosts`: name → one address or a list. Several addresses are
/// answered in turn, one rotation per lookup, as round-robin DNS does (and
/// only the first answer counts within a run).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Hosts(pub BTreeMap<String, Vec<IpAddr>>);

impl Hosts {
    /// `other`'s names over ours.
    pub fn merged(&self, other: &Hosts) -> Hosts {
        let mut m = self.0.clone();
        m.extend(other.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        Hosts(m)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn insert(&mut self, name: &str, addrs: Vec<IpAddr>) {
        self.0.insert(name.to_ascii_lowercase(), addrs);
    }
}

impl<'de> Deserialize<'de> for Hosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hosts, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Addrs {
            One(String),
            Many(Vec<String>),
        }
        let raw = BTreeMap::<String, Addrs>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (name, a) in raw {
            let key = match Host::parse(&name) {
                Ok(Host::Name(n)) => n,
                _ => return Err(serde::de::Error::custom(format!("[network] hosts: '{name}' is not a host name"))),
            };
            let list = match a {
                Addrs::One(s) => vec![s],
                Addrs::Many(v) => v,
            };
            if list.is_empty() {
                return Err(serde::de::Error::custom(format!("[network] hosts: '{name}' has no address")));
            }
            let mut addrs = vec![];
            for s in list {
                let ip = s.trim().parse::<IpAddr>().map_err(|_| {
                    serde::de::Error::custom(format!("[network] hosts: '{s}' (for {name}) is not an IP address"))
                })?;
                addrs.push(canonical(ip));
            }
            out.insert(key, addrs);
        }
        Ok(Hosts(out))
    }
}

/// What a name resolved to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    pub addrs: Vec<IpAddr>,
    /// From `[network] hosts` (the operator's word), not from DNS.
    pub pinned_by_operator: bool,
}

#[derive(Default)]
struct State {
    /// The answer each name gave first in this run.
    pins: HashMap<String, Resolved>,
    /// Rotation of each multi-address `hosts` entry.
    turns: HashMap<String, usize>,
    lookups: Vec<String>,
}

/// One run's resolver.
pub(crate) struct Resolver {
    hosts: Hosts,
    state: Mutex<State>,
}

impl Resolver {
    pub(crate) fn new(hosts: Hosts) -> Resolver {
        Resolver { hosts, state: Mutex::new(State::default()) }
    }

    /// The addresses of `name` (a valid, lowercase name): the run's pinned
    /// answer, else a fresh one (then pinned).
    pub(crate) async fn resolve(&self, name: &str) -> Result<Resolved, String> {
        if let Some(r) = self.state.lock().ok().and_then(|s| s.pins.get(name).cloned()) {
            return Ok(r);
        }
        let fresh = self.lookup(name).await?;
        let mut s = self.state.lock().map_err(|_| "resolver state poisoned".to_string())?;
        // A concurrent lookup of the same name may have pinned first: that one counts.
        Ok(s.pins.entry(name.to_string()).or_insert(fresh).clone())
    }

    /// One answer of the source (the hosts map, else the system resolver).
    async fn lookup(&self, name: &str) -> Result<Resolved, String> {
        if let Some(list) = self.hosts.0.get(name) {
            let turn = {
                let mut s = self.state.lock().map_err(|_| "resolver state poisoned".to_string())?;
                let t = s.turns.entry(name.to_string()).or_insert(0);
                let now = *t;
                *t += 1;
                now
            };
            let mut addrs = list.clone();
            addrs.rotate_left(turn % list.len());
            return Ok(Resolved { addrs, pinned_by_operator: true });
        }
        if let Ok(mut s) = self.state.lock() {
            if s.lookups.len() < MAX_LOOKUPS {
                s.lookups.push(name.to_string());
            }
        }
        let answer = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, 0)))
            .await
            .map_err(|_| format!("resolving {name} took more than {} s", RESOLVE_TIMEOUT.as_secs()))?
            .map_err(|e| format!("cannot resolve {name}: {e}"))?;
        let mut addrs: Vec<IpAddr> = vec![];
        for a in answer.map(|sa| canonical(sa.ip())) {
            if !addrs.contains(&a) && addrs.len() < MAX_ADDRS {
                addrs.push(a);
            }
        }
        if addrs.is_empty() {
            return Err(format!("{name} has no address"));
        }
        Ok(Resolved { addrs, pinned_by_operator: false })
    }

    /// Names this run asked the system resolver for (bounded).
    pub(crate) fn lookups(&self) -> Vec<String> {
        self.state.lock().map(|s| s.lookups.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(toml_text: &str) -> Hosts {
        #[derive(Deserialize)]
        struct W {
            hosts: Hosts,
        }
        toml::from_str::<W>(toml_text).unwrap().hosts
    }

    #[test]
    fn the_hosts_map_parses_and_refuses_garbage() {
        let h = hosts("[hosts]\n\"PyPI.test\" = \"127.0.0.5\"\n\"rr.test\" = [\"127.0.0.6\", \"::ffff:127.0.0.7\"]\n");
        assert_eq!(h.0["pypi.test"], vec!["127.0.0.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(h.0["rr.test"][1], "127.0.0.7".parse::<IpAddr>().unwrap(), "mapped addresses are IPv4");
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct W {
            hosts: Hosts,
        }
        for bad in
            ["[hosts]\n\"a.test\" = \"nope\"\n", "[hosts]\n\"1.2.3.4\" = \"1.2.3.4\"\n", "[hosts]\n\"a.test\" = []\n"]
        {
            assert!(toml::from_str::<W>(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn answers_are_pinned_for_the_run_and_rotate_across_lookups() {
        let h = hosts("[hosts]\n\"rebind.test\" = [\"127.0.0.5\", \"127.0.0.66\"]\n");
        let r = Resolver::new(h.clone());
        let first = r.resolve("rebind.test").await.unwrap();
        assert_eq!(first.addrs[0], "127.0.0.5".parse::<IpAddr>().unwrap());
        assert!(first.pinned_by_operator);
        // The source answers the other address next time...
        assert_eq!(r.lookup("rebind.test").await.unwrap().addrs[0], "127.0.0.66".parse::<IpAddr>().unwrap());
        // ...but the run keeps its first answer.
        assert_eq!(r.resolve("rebind.test").await.unwrap(), first);
        assert!(r.lookups().is_empty(), "the hosts map is not DNS");
        // A system lookup is listed (localhost comes from /etc/hosts, no DNS query).
        let l = r.resolve("localhost").await.unwrap();
        assert!(!l.pinned_by_operator && l.addrs.iter().all(|a| a.is_loopback()), "{l:?}");
        assert_eq!(r.lookups(), ["localhost"]);
    }
}
