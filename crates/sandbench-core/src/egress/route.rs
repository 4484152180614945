//! Where each connection of a run's proxy goes: read its request, check it
//! against the allow list and the addresses, then hand it to a plain
//! tunnel or forward ([`super::proxy`]) or, when one of the run's secrets
//! is bound to its host, to the interception that substitutes it
//! ([`super::intercept`]). Above both, so that neither needs the other's
//! way in.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::framing::{self, Body};
use super::intercept::{self, RunSecrets};
use super::proxy::{
    addresses, answer, check_plain, connect_tunnel, forward_plain, header, inert, read_head, target, Conn, Shared,
    MAX_OPEN, MAX_TOTAL,
};

/// Serve one client connection to its end.
pub(crate) async fn serve<S>(sh: Arc<Shared>, secrets: Option<Arc<RunSecrets>>, mut client: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let c = Conn::new(&sh);
    if c.rec.id > MAX_TOTAL {
        answer(&mut client, 429, "Too Many Requests", "too many connections in this run").await;
        // Past the cap only the first refusal is recorded: a flood of
        // refusals must not flood the report.
        if c.rec.id == MAX_TOTAL + 1 {
            c.deny(&sh, format!("more than {MAX_TOTAL} connections in one run")).await;
        }
        return;
    }
    let Ok(_permit) = sh.open.clone().try_acquire_owned() else {
        answer(&mut client, 429, "Too Many Requests", "too many connections open at once").await;
        c.deny(&sh, format!("more than {MAX_OPEN} connections open at once")).await;
        return;
    };
    let stop = sh.stop.clone();
    let work = handle(&sh, secrets.as_deref(), c, &mut client);
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => {}
        _ = stop.cancelled() => {
            // The run is over (its program gone): a connection still being
            // decided, say a refused handshake, gets a moment to be recorded.
            let _ = tokio::time::timeout(DECIDE_AFTER_STOP, &mut work).await;
        }
    }
}

/// How long a connection still being decided when the run ends may take to
/// reach its record (the report waits for it; its program is gone).
const DECIDE_AFTER_STOP: std::time::Duration = std::time::Duration::from_millis(500);

async fn handle<S>(sh: &Shared, secrets: Option<&RunSecrets>, mut c: Conn, client: &mut S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let head = match read_head(client).await {
        Ok(h) => h,
        Err((0, _)) => return, // a connect-and-close is not a request
        Err((code, why)) => {
            c.rec.method = "?".into();
            answer(client, code, "Bad Request", &why).await;
            return c.deny(sh, why).await;
        }
    };
    c.rec.method = inert(&head.method);
    let (host, port, path) = match target(&head) {
        Ok(t) => t,
        Err((code, why)) => {
            c.rec.host = inert(&head.target);
            answer(client, code, "Bad Request", &why).await;
            return c.deny(sh, why).await;
        }
    };
    c.rec.host = inert(&host.to_string());
    c.rec.port = port;
    if sh.network.allows(&host, port).is_none() {
        let why = format!("{host}:{port} is not in the allow list ({})", sh.network);
        answer(client, 403, "Forbidden", &why).await;
        return c.deny(sh, why).await;
    }
    let body = match &path {
        None if !header(&head, "content-length").is_empty() || !header(&head, "transfer-encoding").is_empty() => {
            Err((400, "a CONNECT request with a body (Content-Length or Transfer-Encoding)".to_string()))
        }
        None => Ok(Body::Empty),
        Some(_) => check_plain(&head, &host, port)
            .map_err(|why| (403, why))
            .and_then(|()| framing::request_body(head.version, &head.headers).map_err(|why| (400, why))),
    };
    let body = match body {
        Ok(b) => b,
        Err((code, why)) => {
            answer(client, code, if code == 400 { "Bad Request" } else { "Forbidden" }, &why).await;
            return c.deny(sh, why).await;
        }
    };
    let addrs = match addresses(sh, &host).await {
        Ok(a) => a,
        Err((code, why)) => {
            answer(client, code, if code == 403 { "Forbidden" } else { "Bad Gateway" }, &why).await;
            return c.deny(sh, why).await;
        }
    };
    match (path, secrets) {
        (None, Some(rs)) if !rs.bound(&host, port, true).is_empty() => {
            intercept::tunnel(sh, rs, c, client, &host, port, &addrs, head.rest).await
        }
        (None, _) => connect_tunnel(sh, c, client, &host, port, &addrs, head.rest).await,
        (Some(p), Some(rs)) => intercept::plain(sh, rs, c, client, &head, body, &host, port, &addrs, &p).await,
        (Some(p), None) => forward_plain(sh, c, client, &head, body, port, &addrs, &p).await,
    }
}
