//! Where and how to reach E2B: the API's and envd's addresses, from the
//! config or given directly. Its own file because the tier, the API client
//! and a session all take it, and none of them should reach it through
//! `mod.rs`, which uses them.

use std::time::Duration;

use crate::config::Config;

// Here, not in envd.rs: the addresses below need it, and envd.rs uses the
// API client, which takes these settings.
pub(crate) const ENVD_PORT: u16 = 49983;

/// The domains whose edge routes envd traffic by headers at
/// `sandbox.<domain>` (the SDK's `SUPPORTED_SANDBOX_DOMAINS`, e2b 2.63).
pub(crate) const HEADER_ROUTED_DOMAINS: &[&str] =
    &["e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev", "e2b-tango.dev", "e2b-juliett.dev", "foxtrot-2.e2b.dev"];
/// Where the SDK's debug mode finds the API (a local E2B).
const DEBUG_API_URL: &str = "http://localhost:3000";

/// Where and how to reach E2B. Built from the config, or given directly
/// (tests, the TUI).
#[derive(Debug, Clone)]
pub struct Settings {
    pub api_key: Option<String>,
    pub domain: String,
    pub api_url: String,
    /// Every envd call goes here when set (`E2B_SANDBOX_URL`).
    pub sandbox_url: Option<String>,
    /// The SDK's debug mode: envd at `http://localhost:49983`.
    pub debug: bool,
    pub template: String,
    /// Added to the wall time for the sandbox's own E2B timeout.
    pub timeout_margin: Duration,
}

impl Settings {
    /// The SDK's precedence: an explicit URL, then debug mode, then the domain.
    pub fn from_config(config: &Config) -> Settings {
        let env = &config.env;
        let domain = env.e2b_domain.clone().unwrap_or_else(|| "e2b.app".into());
        let api_url = match (&env.e2b_api_url, env.e2b_debug) {
            (Some(u), _) => u.clone(),
            (None, true) => DEBUG_API_URL.into(),
            (None, false) => format!("https://api.{domain}"),
        };
        Settings {
            api_key: env.e2b_api_key.clone(),
            api_url,
            sandbox_url: env.e2b_sandbox_url.clone(),
            debug: env.e2b_debug,
            domain,
            template: config.e2b.template.clone(),
            timeout_margin: Duration::from_secs(config.e2b.timeout_margin_secs),
        }
    }

    /// envd's base URL for a sandbox; `sandbox_domain` is the `domain` the
    /// create answered (null unless the sandbox lives elsewhere).
    pub fn envd_url(&self, id: &str, sandbox_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.clone();
        }
        if self.debug {
            return format!("http://localhost:{}", ENVD_PORT);
        }
        let domain = sandbox_domain.map(str::trim).filter(|d| !d.is_empty()).unwrap_or(&self.domain);
        if HEADER_ROUTED_DOMAINS.contains(&domain) {
            format!("https://sandbox.{domain}")
        } else {
            format!("https://{}-{id}.{domain}", ENVD_PORT)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envd_routing_follows_the_sdk() {
        let mut s = Settings::from_config(&Config::default());
        assert_eq!(s.api_url, "https://api.e2b.app");
        // E2B's domains: one host, routed by the E2b-Sandbox-* headers.
        assert_eq!(s.envd_url("abc", None), "https://sandbox.e2b.app");
        assert_eq!(s.envd_url("abc", Some("e2b.dev")), "https://sandbox.e2b.dev");
        // Any other domain (self-hosted): the per-sandbox host.
        assert_eq!(s.envd_url("abc", Some("e2b.example.org")), "https://49983-abc.e2b.example.org");
        s.sandbox_url = Some("http://127.0.0.1:9".into());
        assert_eq!(s.envd_url("abc", Some("e2b.dev")), "http://127.0.0.1:9");
    }
}
