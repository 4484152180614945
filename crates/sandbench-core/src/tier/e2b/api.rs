//! E2B's REST API (the control plane): create, kill and list sandboxes.
//!
//! Shapes follow E2B's OpenAPI spec and the official SDK (`e2b` 2.63, whose
//! generated client is built from that spec): `POST /v2/sandboxes` with a
//! `NewSandboxV2` body (`templateID`, `timeout` in seconds, `autoPause`,
//! `allow_internet_access`, `metadata`; access is always secured, so v2 has no
//! `secure`) answers 201 with a `Sandbox` (`sandboxID`, `envdVersion`,
//! `envdAccessToken`, `domain`); `DELETE /sandboxes/{sandboxID}` answers 204
//! (404 when already gone); `GET /v2/sandboxes?metadata=&state=&limit=` lists,
//! a page at a time, the next page's token in the `x-next-token` header. The
//! v1 `POST /sandboxes` and `GET /sandboxes` are deprecated in the spec and not
//! used. Every call carries `X-API-Key`. Errors are `{"code": int, "message": string}`.

use crate::http::{self, message_line, one_line, retry_after};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::enforce::{allow_out, ALL_TRAFFIC};
use super::settings::Settings;

/// Longest `retry-after` we honour on a 429 before giving up with a message.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
const CREATE_ATTEMPTS: u32 = 3;
/// Sandboxes per list page (the SDK's default).
const LIST_PAGE: u32 = 100;
/// Pages read at most: a listing is for housekeeping and doctor, and must end.
const LIST_MAX_PAGES: u32 = 50;

#[derive(Debug, Clone, Deserialize)]
pub struct Created {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID", default)]
    pub template_id: Option<String>,
    #[serde(rename = "envdVersion", default)]
    pub envd_version: Option<String>,
    #[serde(rename = "envdAccessToken", default)]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
}

/// What went wrong talking to E2B, already worded for a user.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("E2B rejected the API key (HTTP {status}: {message}); check E2B_API_KEY (keys: https://e2b.dev/dashboard?tab=keys)")]
    Unauthorized { status: u16, message: String },
    #[error("E2B says not found (HTTP 404: {message}){hint}")]
    NotFound { message: String, hint: String },
    #[error("E2B rate limit (HTTP 429: {message}); {retry}")]
    RateLimited { message: String, retry: String },
    #[error("E2B server error (HTTP {status}: {message}); try again later")]
    Server { status: u16, message: String },
    #[error("E2B refused the request (HTTP {status}: {message})")]
    Other { status: u16, message: String },
    #[error("cannot reach E2B at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("E2B answered something sandbench cannot read ({0})")]
    Malformed(String),
}

pub struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    pub fn new(s: &Settings, key: &str) -> anyhow::Result<Api> {
        let mut urls = vec![s.api_url.as_str()];
        if let Some(u) = &s.sandbox_url {
            urls.push(u);
        }
        Ok(Api { http: http::client(&urls)?, base: s.api_url.trim_end_matches('/').to_string(), key: key.to_string() })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("X-API-Key", &self.key)
            .timeout(Duration::from_secs(60))
    }

    fn unreachable(&self, e: &reqwest::Error) -> ApiError {
        ApiError::Unreachable { url: self.base.clone(), detail: one_line(e) }
    }

    /// Create a sandbox. Retries a 429 as long as `retry-after` stays short;
    /// never retries 5xx (the sandbox may exist and we would not know its id —
    /// its own timeout reaps it).
    pub async fn create(
        &self,
        template: &str,
        timeout_s: u64,
        network: &crate::egress::Network,
        on_wait: &(dyn Fn(String) + Sync),
    ) -> Result<Created, ApiError> {
        // autoPause false: at its timeout the sandbox is killed, not kept
        // paused (the SDK's default too, sent explicitly as the SDK does).
        let mut body = json!({
            "templateID": template,
            "timeout": timeout_s,
            "autoPause": false,
            "allow_internet_access": !network.is_none(),
            "metadata": ownership_metadata(),
        });
        if !network.is_none() {
            // E2B's own egress rules (SandboxNetworkConfig): the allowed
            // hosts, everything else denied (`ALL_TRAFFIC`), as the SDK's
            // `network={"allow_out": [...], "deny_out": [ALL_TRAFFIC]}` sends.
            body["network"] = json!({
                "allowOut": allow_out(network),
                "denyOut": [ALL_TRAFFIC],
            });
        }
        let mut attempt = 1;
        loop {
            let resp = self
                .req(reqwest::Method::POST, "/v2/sandboxes")
                .json(&body)
                .send()
                .await
                .map_err(|e| self.unreachable(&e))?;
            let status = resp.status().as_u16();
            if status == 200 || status == 201 {
                let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
                return serde_json::from_str::<Created>(&text)
                    .map_err(|e| ApiError::Malformed(format!("create sandbox: {e}")));
            }
            let retry_after = retry_after(resp.headers());
            let message = error_message(resp).await;
            if status == 429 && attempt < CREATE_ATTEMPTS {
                if let Some(wait) = retry_after.filter(|w| *w <= MAX_RETRY_WAIT) {
                    on_wait(format!("E2B rate limit (429); retrying in {:.1} s as it asks", wait.as_secs_f64()));
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    continue;
                }
            }
            return Err(classify(status, message, retry_after, Some(template)));
        }
    }

    /// Kill a sandbox. `Ok(false)` when it was already gone (404).
    pub async fn kill(&self, id: &str) -> Result<bool, ApiError> {
        let resp = self
            .req(reqwest::Method::DELETE, &format!("/sandboxes/{id}"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => {
                let ra = retry_after(resp.headers());
                Err(classify(status, error_message(resp).await, ra, None))
            }
        }
    }

    /// Kill with a few retries (network blips, 429, 5xx): the one call that
    /// must not be skipped.
    pub async fn kill_with_retry(&self, id: &str) -> Result<bool, ApiError> {
        let mut last = None;
        for attempt in 0..4u32 {
            match self.kill(id).await {
                Ok(k) => return Ok(k),
                Err(e @ ApiError::Unauthorized { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(250 << attempt)).await;
        }
        Err(last.unwrap_or(ApiError::Malformed("kill".into())))
    }

    /// Running sandboxes (`GET /v2/sandboxes?state=running`): the cheapest
    /// authenticated call, used by `doctor`.
    pub async fn list(&self) -> Result<Vec<serde_json::Value>, ApiError> {
        self.list_query(None).await
    }

    /// Running sandboxes whose metadata match `k=v` (`metadata=k%3Dv`).
    pub async fn list_by_metadata(&self, filter: &str) -> Result<Vec<serde_json::Value>, ApiError> {
        self.list_query(Some(filter)).await
    }

    async fn list_query(&self, metadata: Option<&str>) -> Result<Vec<serde_json::Value>, ApiError> {
        let mut all = vec![];
        let mut next: Option<String> = None;
        for _ in 0..LIST_MAX_PAGES {
            let limit = LIST_PAGE.to_string();
            let mut q: Vec<(&str, &str)> = vec![("state", "running"), ("limit", &limit)];
            if let Some(m) = metadata {
                q.push(("metadata", m));
            }
            if let Some(t) = &next {
                q.push(("nextToken", t));
            }
            let resp = self
                .req(reqwest::Method::GET, "/v2/sandboxes")
                .query(&q)
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .map_err(|e| self.unreachable(&e))?;
            let status = resp.status().as_u16();
            if status != 200 {
                let ra = retry_after(resp.headers());
                return Err(classify(status, error_message(resp).await, ra, None));
            }
            next = resp
                .headers()
                .get("x-next-token")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
            let page: Vec<serde_json::Value> =
                serde_json::from_str(&text).map_err(|e| ApiError::Malformed(format!("list sandboxes: {e}")))?;
            all.extend(page);
            if next.is_none() {
                return Ok(all);
            }
        }
        Err(ApiError::Malformed(format!("list sandboxes: still more after {LIST_MAX_PAGES} pages")))
    }
}

/// Metadata every sandbox gets, so that a later sandbench can tell its own
/// orphans (a sandbench killed with SIGKILL cannot clean up) from anyone
/// else's: the owner token (see `owner`). Without one the sandbox is never
/// judged an orphan and E2B's own timeout ends it.
pub(crate) fn ownership_metadata() -> serde_json::Value {
    json!({
        "created_by": "sandbench",
        "sandbench_owner": crate::owner::token().unwrap_or(""),
        "sandbench_pid": std::process::id().to_string(),
    })
}

pub(crate) fn classify(
    status: u16,
    message: String,
    retry_after: Option<Duration>,
    template: Option<&str>,
) -> ApiError {
    match status {
        401 | 403 => ApiError::Unauthorized { status, message },
        404 => ApiError::NotFound {
            message,
            hint: template
                .map(|t| format!("; is the template '{t}' right? set [e2b] template in the config"))
                .unwrap_or_default(),
        },
        429 => ApiError::RateLimited {
            message,
            retry: match retry_after {
                Some(w) => format!("E2B asks to retry after {:.0} s", w.as_secs_f64().ceil()),
                None => "retry later".into(),
            },
        },
        500..=599 => ApiError::Server { status, message },
        _ => ApiError::Other { status, message },
    }
}

/// The `message` of an E2B error body, else the body's first line, bounded.
pub(crate) async fn error_message(resp: reqwest::Response) -> String {
    let text = resp.text().await.unwrap_or_default();
    let msg = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| text.lines().next().unwrap_or("").to_string());
    message_line(&msg, 200)
}
