//! HTTP helpers shared by the remote clients (the e2b tier and the agent's
//! Anthropic client): one client shape, one reading of `Retry-After`, one
//! way to quote what a remote service said and why a request failed.

use std::time::Duration;

/// A client that never uses a proxy for loopback addresses (tests, local
/// gateways) and otherwise follows the usual proxy variables.
pub fn client(urls: &[&str]) -> anyhow::Result<reqwest::Client> {
    Ok(builder(urls).build()?)
}

/// The shape every remote client starts from (one user agent, a connect
/// deadline, no proxy for loopback), for callers that add to it.
pub fn builder(urls: &[&str]) -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("sandbench/", env!("CARGO_PKG_VERSION")));
    if urls.iter().all(|u| is_loopback(u)) {
        b.no_proxy()
    } else {
        b
    }
}

pub fn is_loopback(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    match u.host_str() {
        Some("localhost") => true,
        Some(h) => {
            h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        None => false,
    }
}

/// `retry-after-ms` (the official SDKs' extension) or `retry-after` in
/// seconds (integer or decimal); HTTP dates are not sent by either service.
pub fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(ms) = get("retry-after-ms").filter(|v| v.is_finite() && *v >= 0.0) {
        return Some(Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0));
    }
    get("retry-after").filter(|v| v.is_finite() && *v >= 0.0).map(|s| Duration::from_secs_f64(s.min(86_400.0)))
}

/// A remote service's message as one line: controls become spaces, cut at
/// `max` characters; "no message" when nothing is left.
pub fn message_line(s: &str, max: usize) -> String {
    let clean: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let clean = clean.trim();
    if clean.is_empty() {
        return "no message".into();
    }
    if clean.chars().count() > max {
        format!("{}…", clean.chars().take(max).collect::<String>())
    } else {
        clean.to_string()
    }
}

/// reqwest errors chain their causes; keep it to one readable line.
pub fn one_line(e: &reqwest::Error) -> String {
    use std::error::Error;
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "connection failed".to_string()
    } else {
        "request failed".to_string()
    };
    let mut src = e.source();
    let mut last = String::new();
    while let Some(c) = src {
        last = c.to_string();
        src = c.source();
    }
    if !last.is_empty() {
        s.push_str(": ");
        s.push_str(&message_line(&last, 160));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_ms_first_then_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", "-1".parse().unwrap());
        h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn messages_are_one_bounded_line() {
        assert_eq!(message_line("  a\nb\x1b[2J ", 10), "a b [2J");
        assert_eq!(message_line("\n\t", 10), "no message");
        assert_eq!(message_line("abcdef", 3), "abc…");
    }

    #[test]
    fn loopback_urls() {
        assert!(is_loopback("http://127.0.0.1:8080/x"));
        assert!(is_loopback("http://[::1]:1/"));
        assert!(is_loopback("http://localhost/"));
        assert!(!is_loopback("https://api.e2b.app"));
        assert!(!is_loopback("not a url"));
    }
}
