//! The network limit of a run: `none`, or `allow=HOST[:PORT],...`. Parsing,
//! matching a request's target against the allow list, and the address
//! check every resolved address passes before the proxy connects to it.
//!
//! A bare host allows ports 80 and 443; `HOST:PORT` exactly that port.
//! `*.example.org` allows every name under example.org (not the apex). An IP
//! literal (`203.0.113.7`, `[2001:db8::1]:8443`) allows that address, and is
//! the only way a loopback, private, link-local or metadata address passes
//! the address check when DNS answered it (names pinned in `[network] hosts`
//! are the operator's word and pass as they are).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most entries an allow list may have.
pub(crate) const MAX_ENTRIES: usize = 64;
/// Ports a bare host entry allows.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// A host as a request names it: a DNS name (lowercase, no trailing dot) or
/// an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
        }
    }
}

impl Host {
    /// A host name or address as written in a URL, a Host header, an SNI or
    /// an allow entry (IPv6 in brackets or bare). Refuses what is neither a
    /// valid DNS name nor a dotted-quad or IPv6 address: `127.1`,
    /// `0x7f.0.0.1` and `2130706433` are not names and not addresses here.
    pub fn parse(s: &str) -> Result<Host, String> {
        let t = s.strip_suffix('.').unwrap_or(s);
        if let Some(inner) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return inner
                .parse::<Ipv6Addr>()
                .map(|a| Host::Ip(canonical(IpAddr::V6(a))))
                .map_err(|_| format!("'{}' is not an IPv6 address", shown(s)));
        }
        if let Ok(a) = t.parse::<IpAddr>() {
            return Ok(Host::Ip(canonical(a)));
        }
        valid_name(t).map(Host::Name).map_err(|why| format!("'{}' is not a host name ({why})", shown(s)))
    }

    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip(a) => Some(*a),
            Host::Name(_) => None,
        }
    }
}

/// A target as `host:port` (CONNECT's authority, a URL's host and port).
pub(crate) fn parse_authority(s: &str, default_port: Option<u16>) -> Result<(Host, u16), String> {
    let (h, p) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']').ok_or_else(|| format!("'{}': unclosed '['", shown(s)))?;
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(format!("'{}': junk after the address", shown(s))),
        };
        (&s[..end + 2], port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match p {
        Some(p) => parse_port(p).map_err(|e| format!("'{}': {e}", shown(s)))?,
        None => default_port.ok_or_else(|| format!("'{}' has no port", shown(s)))?,
    };
    Ok((Host::parse(h)?, port))
}

fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad port '{}'", shown(p)));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("bad port '{}'", shown(p))),
        Ok(n) => Ok(n),
    }
}

/// What a program wrote, shown in a message: bounded and inert.
fn shown(s: &str) -> String {
    crate::sanitize::inert_line(s, 80)
}

fn valid_name(t: &str) -> Result<String, &'static str> {
    if t.is_empty() {
        return Err("empty");
    }
    if t.len() > 253 {
        return Err("longer than 253 characters");
    }
    let lower = t.to_ascii_lowercase();
    let labels: Vec<&str> = lower.split('.').collect();
    for l in &labels {
        if l.is_empty() || l.len() > 63 {
            return Err("a label is empty or longer than 63 characters");
        }
        if !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err("only letters, digits, '-' and '_' are allowed");
        }
        if l.starts_with('-') || l.ends_with('-') {
            return Err("a label starts or ends with '-'");
        }
    }
    // `127.1` or `2130706433` would be an address to some resolvers: never a name.
    if labels.last().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return Err("the last label is a number");
    }
    Ok(lower)
}

/// IPv4-mapped IPv6 addresses are the IPv4 address they carry: matched and
/// checked as that.
pub(crate) fn canonical(a: IpAddr) -> IpAddr {
    a.to_canonical()
}

/// Which hosts an entry covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Name(String),
    /// `*.example.org`: every name below `example.org`.
    Below(String),
    Ip(IpAddr),
}

/// One `HOST[:PORT]` of an allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    pub host: Pattern,
    /// None: ports 80 and 443.
    pub port: Option<u16>,
}

impl AllowEntry {
    pub fn parse(s: &str) -> Result<AllowEntry, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an empty entry".into());
        }
        if let Some(rest) = s.strip_prefix("*.") {
            let (h, port) = split_port(rest)?;
            return match Host::parse(h)? {
                Host::Name(n) => Ok(AllowEntry { host: Pattern::Below(n), port }),
                Host::Ip(_) => Err(format!("'{}': '*.' needs a name after it", shown(s))),
            };
        }
        if s.contains('*') {
            return Err(format!("'{}': a wildcard is only allowed as a leading '*.'", shown(s)));
        }
        // A bare IPv6 address (several colons, no brackets) has no port.
        if !s.starts_with('[') && s.matches(':').count() > 1 {
            let a = s.parse::<Ipv6Addr>().map_err(|_| format!("'{}' is not an IPv6 address", shown(s)))?;
            return Ok(AllowEntry { host: Pattern::Ip(canonical(IpAddr::V6(a))), port: None });
        }
        let (h, port) = split_port(s)?;
        let host = match Host::parse(h)? {
            Host::Name(n) => Pattern::Name(n),
            Host::Ip(a) => Pattern::Ip(a),
        };
        Ok(AllowEntry { host, port })
    }

    fn ports(&self) -> &[u16] {
        match &self.port {
            Some(p) => std::slice::from_ref(p),
            None => &DEFAULT_PORTS,
        }
    }

    fn covers_host(&self, h: &Host) -> bool {
        match (&self.host, h) {
            (Pattern::Name(a), Host::Name(b)) => a == b,
            (Pattern::Below(a), Host::Name(b)) => {
                b.len() > a.len() + 1 && b.ends_with(a.as_str()) && { b.as_bytes()[b.len() - a.len() - 1] == b'.' }
            }
            (Pattern::Ip(a), Host::Ip(b)) => canonical(*a) == canonical(*b),
            _ => false,
        }
    }

    pub fn allows(&self, h: &Host, port: u16) -> bool {
        self.covers_host(h) && self.ports().contains(&port)
    }

    /// Does this entry allow everything `other` allows?
    pub fn covers(&self, other: &AllowEntry) -> bool {
        let hosts = match (&self.host, &other.host) {
            (Pattern::Name(a), Pattern::Name(b)) => a == b,
            (Pattern::Below(_), Pattern::Name(b)) => self.covers_host(&Host::Name(b.clone())),
            (Pattern::Below(a), Pattern::Below(b)) => a == b || self.covers_host(&Host::Name(b.clone())),
            (Pattern::Ip(a), Pattern::Ip(b)) => canonical(*a) == canonical(*b),
            _ => false,
        };
        hosts && other.ports().iter().all(|p| self.ports().contains(p))
    }
}

fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']').ok_or_else(|| format!("'{}': unclosed '['", shown(s)))?;
        let after = &rest[end + 1..];
        return match after.strip_prefix(':') {
            Some(p) => Ok((&s[..end + 2], Some(parse_port(p).map_err(|e| format!("'{}': {e}", shown(s)))?))),
            None if after.is_empty() => Ok((s, None)),
            None => Err(format!("'{}': junk after the address", shown(s))),
        };
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok((h, Some(parse_port(p).map_err(|e| format!("'{}': {e}", shown(s)))?))),
        None => Ok((s, None)),
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Pattern::Name(n) => f.write_str(n)?,
            Pattern::Below(n) => write!(f, "*.{n}")?,
            Pattern::Ip(IpAddr::V4(a)) => write!(f, "{a}")?,
            Pattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// The network limit of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// No network at all (the default).
    #[default]
    None,
    /// Only through sandbench's egress proxy, to these hosts and ports.
    Allow(Vec<AllowEntry>),
}

impl Network {
    pub fn is_none(&self) -> bool {
        matches!(self, Network::None)
    }

    pub fn entries(&self) -> &[AllowEntry] {
        match self {
            Network::None => &[],
            Network::Allow(e) => e,
        }
    }

    /// The entry that allows `host:port`, if any.
    pub fn allows(&self, host: &Host, port: u16) -> Option<&AllowEntry> {
        self.entries().iter().find(|e| e.allows(host, port))
    }

    /// Is `addr` named by an IP-literal entry (so it passes the address
    /// check whatever its range)?
    pub fn names_address(&self, addr: IpAddr) -> bool {
        self.entries().iter().any(|e| matches!(e.host, Pattern::Ip(a) if canonical(a) == canonical(addr)))
    }

    /// Keep `self` within `ceiling`: every entry must be covered by one of
    /// the ceiling's. A remote client may only narrow what the operator allowed.
    pub fn within(&self, ceiling: &Network) -> Result<(), String> {
        for e in self.entries() {
            if !ceiling.entries().iter().any(|c| c.covers(e)) {
                return Err(if ceiling.is_none() {
                    format!("network {e} is not allowed: this server allows no network")
                } else {
                    format!("network {e} is not within this server's allow list ({ceiling})")
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::None => f.write_str("none"),
            Network::Allow(e) => {
                f.write_str("allow=")?;
                for (i, x) in e.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{x}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Network, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("off") {
            return Ok(Network::None);
        }
        let Some(list) = t.strip_prefix("allow=") else {
            return Err(format!(
                "invalid network '{}': expected none or allow=HOST[:PORT][,HOST[:PORT]...], e.g. allow=pypi.org,files.pythonhosted.org",
                shown(s)
            ));
        };
        let mut out: Vec<AllowEntry> = vec![];
        for item in list.split(',') {
            let e = AllowEntry::parse(item).map_err(|e| format!("invalid network allow entry: {e}"))?;
            if !out.contains(&e) {
                out.push(e);
            }
        }
        if out.len() > MAX_ENTRIES {
            return Err(format!("invalid network: {} entries, at most {MAX_ENTRIES}", out.len()));
        }
        Ok(Network::Allow(out))
    }
}

/// The limit is written as on the command line, in reports and the config.
impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            // Earlier versions wrote `network = false` (true never worked).
            Flag(bool),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Flag(false) => Ok(Network::None),
            Raw::Flag(true) => {
                Err(serde::de::Error::custom("network = true is not a limit: write network = \"allow=HOST,...\""))
            }
        }
    }
}

/// Why an address is not one the proxy connects to on DNS's word, or None
/// for a public address.
pub(crate) fn not_public(a: IpAddr) -> Option<&'static str> {
    match canonical(a) {
        IpAddr::V4(v) => not_public_v4(v),
        IpAddr::V6(v) => not_public_v6(v),
    }
}

fn not_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    if a == Ipv4Addr::new(169, 254, 169, 254) || a == Ipv4Addr::new(100, 100, 100, 200) {
        return Some("a cloud metadata address");
    }
    Some(match o {
        [0, ..] => "an unspecified ('this network') address",
        [127, ..] => "a loopback address",
        [10, ..] | [192, 168, ..] => "a private address",
        [172, b, ..] if (16..32).contains(&b) => "a private address",
        [169, 254, ..] => "a link-local address",
        [100, b, ..] if (64..128).contains(&b) => "a shared (carrier NAT) address",
        [192, 0, 0, _] => "an IETF protocol address",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "a documentation address",
        [198, b, ..] if b == 18 || b == 19 => "a benchmarking address",
        [a0, ..] if a0 >= 224 => "a multicast or reserved address",
        _ => return None,
    })
}

fn not_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if a.is_unspecified() {
        return Some("an unspecified address");
    }
    if a.is_loopback() {
        return Some("a loopback address");
    }
    Some(match s {
        [0, 0, 0, 0, 0, 0, _, _] => "an IPv4-compatible address",
        [0x64, 0xff9b, ..] => "a NAT64 address (it reaches IPv4 addresses behind the translator)",
        [0x100, 0, 0, 0, ..] => "a discard address",
        [0x2001, 0xdb8, ..] => "a documentation address",
        [0x2001, b, ..] if b < 0x200 => "an IETF protocol address (Teredo among them)",
        [0x2002, ..] => "a 6to4 address (it reaches IPv4 addresses)",
        [x, ..] if x & 0xfe00 == 0xfc00 => "a unique-local (private) address",
        [x, ..] if x & 0xffc0 == 0xfe80 => "a link-local address",
        [x, ..] if x & 0xffc0 == 0xfec0 => "a site-local address",
        [x, ..] if x & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Network {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_prints_the_limit() {
        assert_eq!(net("none"), Network::None);
        let n = net("allow=PyPI.org,files.pythonhosted.org:443,*.example.org,127.0.0.5:8080,[::1]:443,2001:db8::7");
        assert_eq!(
            n.to_string(),
            "allow=pypi.org,files.pythonhosted.org:443,*.example.org,127.0.0.5:8080,[::1]:443,[2001:db8::7]"
        );
        assert_eq!(n.to_string().parse::<Network>().unwrap(), n);
        for bad in [
            "allow=",
            "allow=a..b",
            "allow=x:0",
            "allow=x:99999",
            "allow=ex*mple.org",
            "allow=*.1.2.3.4",
            "allow=127.1",
            "allow=2130706433",
            "allow=[::1",
            "allow=-a.org",
            "everything",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad} parsed");
        }
        let many = format!("allow={}", (0..65).map(|i| format!("h{i}.org")).collect::<Vec<_>>().join(","));
        assert!(many.parse::<Network>().unwrap_err().contains("at most"));
    }

    #[test]
    fn serde_takes_the_old_false() {
        #[derive(Deserialize)]
        struct W {
            network: Network,
        }
        assert_eq!(toml::from_str::<W>("network = false").unwrap().network, Network::None);
        assert!(toml::from_str::<W>("network = true").is_err());
        assert_eq!(toml::from_str::<W>("network = \"allow=a.org\"").unwrap().network, net("allow=a.org"));
    }

    #[test]
    fn matching_names_ports_and_addresses() {
        let n = net("allow=pypi.test,*.example.org,api.test:8443,127.0.0.5");
        let h = |s: &str| Host::parse(s).unwrap();
        assert!(n.allows(&h("PYPI.test."), 443).is_some());
        assert!(n.allows(&h("pypi.test"), 80).is_some());
        assert!(n.allows(&h("pypi.test"), 8080).is_none(), "a bare host is 80 and 443 only");
        assert!(n.allows(&h("x.pypi.test"), 443).is_none());
        assert!(n.allows(&h("a.b.example.org"), 443).is_some());
        assert!(n.allows(&h("example.org"), 443).is_none(), "the apex is not below itself");
        assert!(n.allows(&h("badexample.org"), 443).is_none());
        assert!(n.allows(&h("api.test"), 8443).is_some());
        assert!(n.allows(&h("api.test"), 443).is_none());
        // The mapped form of an allowed address is that address.
        assert!(n.allows(&h("[::ffff:127.0.0.5]"), 80).is_some());
        assert!(n.names_address("::ffff:7f00:5".parse().unwrap()));
        assert!(!n.names_address("127.0.0.6".parse().unwrap()));
        for bad in ["127.1", "0x7f.0.0.1", "2130706433", "a b", "", "a..b"] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_authority("pypi.test:443", None).unwrap(), (h("pypi.test"), 443));
        assert_eq!(parse_authority("[::1]:80", None).unwrap(), (h("::1"), 80));
        assert_eq!(parse_authority("pypi.test", Some(80)).unwrap().1, 80);
        assert!(parse_authority("pypi.test", None).is_err());
        assert!(parse_authority("pypi.test:http", None).is_err());
    }

    #[test]
    fn a_client_may_only_narrow() {
        let op = net("allow=pypi.test,*.pythonhosted.org:443");
        assert!(net("allow=pypi.test:443").within(&op).is_ok());
        assert!(net("allow=files.pythonhosted.org:443").within(&op).is_ok());
        assert!(Network::None.within(&op).is_ok());
        assert!(net("allow=evil.test").within(&op).unwrap_err().contains("not within"));
        assert!(net("allow=pypi.test:8080").within(&op).is_err());
        assert!(net("allow=files.pythonhosted.org").within(&op).is_err(), "port 80 was not allowed");
        assert!(net("allow=pypi.test").within(&Network::None).unwrap_err().contains("allows no network"));
    }

    #[test]
    fn only_public_addresses_on_dns_word() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001::1",
            "ff02::1",
            "::127.0.0.1",
        ] {
            assert!(not_public(a.parse().unwrap()).is_some(), "{a} passed");
        }
        for a in ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "172.32.0.1"] {
            assert!(not_public(a.parse().unwrap()).is_none(), "{a} refused");
        }
        assert_eq!(not_public("169.254.169.254".parse().unwrap()), Some("a cloud metadata address"));
    }
}
