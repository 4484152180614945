//! HTTP/1.1 message framing, read strictly and written canonically (RFC 9112),
//! for requests going up and responses coming down through the proxy.
//!
//! Request smuggling lives in the gap between two parsers: the proxy reads a
//! message one way and forwards bytes the upstream reads another way
//! (`Content-Length: +49`, a `Transfer-Encoding` beside a `Content-Length`,
//! an obfuscated `chunked`, a bare LF, a folded header line). So nothing of
//! the program's framing is passed on as written: the head is checked byte
//! by byte where `httparse` is lenient ([`check_head`]), the body's length is
//! decided once, from fields that mean one thing only ([`request_body`],
//! [`response_body`]), and the proxy writes its own framing fields and its
//! own chunk lines ([`relay_chunked`]). Anything that could be read two ways
//! is refused with a reason. Every line, head, chunk line and trailer is
//! bounded.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest line of a head (start line or one field line).
pub(crate) const MAX_LINE: usize = 8 << 10;
/// Longest chunk-size line, extensions included.
pub(crate) const MAX_CHUNK_LINE: usize = 1 << 10;
/// Most hex digits of a chunk size (a u64; leading zeros count).
const MAX_CHUNK_DIGITS: usize = 16;
/// Most trailer fields after the last chunk (read and dropped).
pub(crate) const MAX_TRAILERS: usize = 32;
/// Most interim (1xx) responses before the final one.
pub(crate) const MAX_INTERIM: usize = 8;
/// Most decimal digits of a Content-Length (a u64).
const MAX_LENGTH_DIGITS: usize = 19;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// None at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding (re-chunked on the way through).
    Chunked,
    /// Until the sender closes (responses only).
    Close,
}

/// Why a relay stopped early.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The bytes broke the framing rules: refused, with the reason.
    Refused(String),
    /// The peer went away, or was silent for too long: not a refusal.
    Gone,
}

/// What a sender wrote, shown in a reason: bounded and inert.
fn shown(b: &[u8]) -> String {
    crate::sanitize::inert_line(&String::from_utf8_lossy(b), 60)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Byte-level rules for a head (start line, field lines, the empty line that
/// ends it), beyond what `httparse` checks: every line ends in CRLF (no bare
/// LF or CR anywhere), no field line is folded (obs-fold), a field name is a
/// token directly followed by `:` (no whitespace before the colon), a value
/// holds no control but HTAB (no NUL), and lines and field counts are bounded.
pub(crate) fn check_head(head: &[u8], max_fields: usize) -> Result<(), String> {
    // Every line with its CR, the LF that ends the last one taken off.
    let Some(lines) = head.strip_suffix(b"\n\r\n") else {
        return Err("a head that does not end in an empty CRLF line".into());
    };
    let mut fields = 0usize;
    for (i, line) in lines.split(|b| *b == b'\n').enumerate() {
        let Some(line) = line.strip_suffix(b"\r") else {
            return Err("a bare LF in the head (every line must end in CRLF)".into());
        };
        if line.contains(&b'\r') {
            return Err("a bare CR in the head".into());
        }
        if line.len() > MAX_LINE {
            return Err(format!("a head line longer than {} KiB", MAX_LINE >> 10));
        }
        if i == 0 {
            if line.is_empty() || line[0] == b' ' || line[0] == b'\t' {
                return Err("a start line that is empty or starts with whitespace".into());
            }
            if line.iter().any(|b| b.is_ascii_control()) {
                return Err("a control character in the start line".into());
            }
            continue;
        }
        check_field_line(line)?;
        fields += 1;
        if fields > max_fields {
            return Err(format!("more than {max_fields} header fields"));
        }
    }
    Ok(())
}

/// One field line (without its CRLF): `name:value`, strictly.
fn check_field_line(line: &[u8]) -> Result<(), String> {
    if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
        return Err("a folded header line (obs-fold)".into());
    }
    let Some(colon) = line.iter().position(|b| *b == b':') else {
        return Err(format!("a header line without a colon ({})", shown(line)));
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) {
        return Err(format!("a header name that is not a token, or whitespace before its colon ({})", shown(name)));
    }
    if value.iter().any(|b| (b.is_ascii_control() && *b != b'\t') || *b == 0x7f) {
        return Err(format!("a control character (NUL, CR, LF, ...) in the value of {}", shown(name)));
    }
    Ok(())
}

fn trim_ows(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| *c != b' ' && *c != b'\t').unwrap_or(b.len());
    let end = b.iter().rposition(|c| *c != b' ' && *c != b'\t').map_or(start, |e| e + 1);
    &b[start..end]
}

/// The one length every `Content-Length` field (and list member) says:
/// decimal digits only (no sign, no `0x`, no inner space), identical
/// repeats collapsed, differing ones refused.
pub(crate) fn content_length(values: &[&[u8]]) -> Result<Option<u64>, String> {
    let mut len: Option<u64> = None;
    for raw in values {
        for member in raw.split(|b| *b == b',') {
            let t = trim_ows(member);
            if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
                return Err(format!("a Content-Length that is not a decimal number ('{}')", shown(raw)));
            }
            if t.len() > MAX_LENGTH_DIGITS {
                return Err(format!("a Content-Length too large ('{}')", shown(raw)));
            }
            let n: u64 = std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("a Content-Length too large ('{}')", shown(raw)))?;
            match len {
                Some(l) if l != n => return Err(format!("Content-Length values that differ ({l} and {n})")),
                _ => len = Some(n),
            }
        }
    }
    Ok(len)
}

/// Whether the `Transfer-Encoding` fields say `chunked` and nothing else
/// (case aside): any other coding, a list, an empty member or a repeat is
/// refused, so no parser can read it as anything but chunked.
pub(crate) fn transfer_chunked(values: &[&[u8]]) -> Result<bool, String> {
    if values.is_empty() {
        return Ok(false);
    }
    let members: Vec<&[u8]> = values.iter().flat_map(|v| v.split(|b| *b == b',')).map(trim_ows).collect();
    if members.len() == 1 && members[0].eq_ignore_ascii_case(b"chunked") {
        return Ok(true);
    }
    let all: Vec<String> = values.iter().map(|v| shown(v)).collect();
    Err(format!("Transfer-Encoding '{}': only a single 'chunked' is forwarded", all.join(", ")))
}

fn field<'a>(fields: &'a [(String, Vec<u8>)], name: &str) -> Vec<&'a [u8]> {
    fields.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_slice()).collect()
}

/// The framing both kinds of message share: TE and CL never together.
fn framing(fields: &[(String, Vec<u8>)]) -> Result<(bool, Option<u64>), String> {
    let te = field(fields, "transfer-encoding");
    let cl = field(fields, "content-length");
    if !te.is_empty() && !cl.is_empty() {
        return Err("both Transfer-Encoding and Content-Length (the two could be read differently)".into());
    }
    Ok((transfer_chunked(&te)?, content_length(&cl)?))
}

/// A request's body (`version`: 0 for HTTP/1.0, 1 for 1.1). Field names are
/// lowercase.
pub(crate) fn request_body(version: u8, fields: &[(String, Vec<u8>)]) -> Result<Body, String> {
    let (chunked, len) = framing(fields)?;
    if chunked {
        if version == 0 {
            return Err("Transfer-Encoding in an HTTP/1.0 request".into());
        }
        return Ok(Body::Chunked);
    }
    Ok(match len {
        None | Some(0) => Body::Empty,
        Some(n) => Body::Length(n),
    })
}

/// A response's body, given its status and whether the request was HEAD.
pub(crate) fn response_body(status: u16, head_request: bool, fields: &[(String, Vec<u8>)]) -> Result<Body, String> {
    let (chunked, len) = framing(fields)?;
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Body::Empty);
    }
    Ok(match (chunked, len) {
        (true, _) => Body::Chunked,
        (false, Some(0)) => Body::Empty,
        (false, Some(n)) => Body::Length(n),
        (false, None) => Body::Close,
    })
}

/// The size of one chunk-size line (without its CRLF): 1 to 16 hex digits,
/// then nothing or extensions (`;name=value`, dropped on the way through).
pub(crate) fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(format!("a chunk-size line that does not start with a hex size ('{}')", shown(line)));
    }
    if digits > MAX_CHUNK_DIGITS {
        return Err(format!("a chunk size longer than {MAX_CHUNK_DIGITS} hex digits"));
    }
    let rest = &line[digits..];
    let ext = trim_ows(rest);
    if !ext.is_empty() && (ext[0] != b';' || ext.iter().any(|b| b.is_ascii_control() && *b != b'\t')) {
        return Err(format!("junk after a chunk size ('{}')", shown(line)));
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| "a chunk size that is not hex".to_string())?;
    u64::from_str_radix(hex, 16).map_err(|_| "a chunk size too large".to_string())
}

/// Buffered reading of one side of a connection: what already arrived with
/// a head, then the stream. Every wait is bounded by `idle`.
pub(crate) struct Feed<'a, R> {
    buf: Vec<u8>,
    pos: usize,
    src: &'a mut R,
    idle: Duration,
    eof: bool,
    /// Bytes taken from the sender: what came with the head, and what was read since.
    read: u64,
}

impl<'a, R: AsyncRead + Unpin> Feed<'a, R> {
    pub(crate) fn new(early: Vec<u8>, src: &'a mut R, idle: Duration) -> Feed<'a, R> {
        let read = early.len() as u64;
        Feed { buf: early, pos: 0, src, idle, eof: false, read }
    }

    /// Bytes taken from the sender so far.
    pub(crate) fn read(&self) -> u64 {
        self.read
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Read more; false at the end of the stream.
    async fn fill(&mut self) -> Result<bool, Stop> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > (64 << 10) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 16 << 10];
        match tokio::time::timeout(self.idle, self.src.read(&mut chunk)).await {
            Ok(Ok(0)) => {
                self.eof = true;
                Ok(false)
            }
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.read += n as u64;
                Ok(true)
            }
            Ok(Err(_)) | Err(_) => Err(Stop::Gone),
        }
    }

    /// One line without its CRLF, at most `max` bytes; a bare LF or CR in
    /// it is refused, and so is a stream that ends inside it.
    pub(crate) async fn line(&mut self, max: usize) -> Result<Vec<u8>, Stop> {
        loop {
            if let Some(i) = self.pending().iter().position(|b| *b == b'\n') {
                let line = &self.pending()[..i];
                let Some(line) = line.strip_suffix(b"\r") else {
                    return Err(Stop::Refused("a bare LF where a CRLF must end a line".into()));
                };
                if line.contains(&b'\r') {
                    return Err(Stop::Refused("a bare CR in a line".into()));
                }
                if line.len() > max {
                    return Err(Stop::Refused(format!("a line longer than {max} bytes")));
                }
                let line = line.to_vec();
                self.pos += i + 1;
                return Ok(line);
            }
            if self.pending().len() > max + 1 {
                return Err(Stop::Refused(format!("a line longer than {max} bytes")));
            }
            if !self.fill().await? {
                return Err(Stop::Refused("the stream ended in the middle of a line".into()));
            }
        }
    }

    /// A whole head, up to and with its empty line, at most `max` bytes.
    /// `Ok(None)`: the stream ended before any byte of it.
    pub(crate) async fn head(&mut self, max: usize) -> Result<Option<Vec<u8>>, Stop> {
        let mut from = 0;
        loop {
            let p = self.pending();
            if let Some(i) = p[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                let end = from + i + 4;
                let head = p[..end].to_vec();
                self.pos += end;
                return Ok(Some(head));
            }
            if p.len() > max {
                return Err(Stop::Refused(format!("a head longer than {} KiB", max >> 10)));
            }
            from = p.len().saturating_sub(3);
            if !self.fill().await? {
                return if self.pending().is_empty() {
                    Ok(None)
                } else {
                    Err(Stop::Refused("the stream ended in the middle of a head".into()))
                };
            }
        }
    }

    /// Copy exactly `n` bytes to `out`.
    pub(crate) async fn copy<W: AsyncWrite + Unpin>(&mut self, mut n: u64, out: &mut W) -> Result<(), Stop> {
        while n > 0 {
            if self.pending().is_empty() && !self.fill().await? {
                return Err(Stop::Refused("the stream ended before the length it declared".into()));
            }
            let take = self.pending().len().min(usize::try_from(n).unwrap_or(usize::MAX));
            out.write_all(&self.pending()[..take]).await.map_err(|_| Stop::Gone)?;
            self.pos += take;
            n -= take as u64;
        }
        Ok(())
    }

    /// Copy everything to the end of the stream.
    pub(crate) async fn copy_to_end<W: AsyncWrite + Unpin>(&mut self, out: &mut W) -> Result<(), Stop> {
        loop {
            if !self.pending().is_empty() {
                out.write_all(self.pending()).await.map_err(|_| Stop::Gone)?;
                self.pos = self.buf.len();
            }
            if !self.fill().await? {
                return Ok(());
            }
        }
    }

    /// The trailer fields after a last chunk, up to the empty line: read,
    /// checked and dropped.
    async fn trailers(&mut self) -> Result<(), Stop> {
        for n in 0.. {
            let t = self.line(MAX_LINE).await?;
            if t.is_empty() {
                break;
            }
            if n >= MAX_TRAILERS {
                return Err(Stop::Refused(format!("more than {MAX_TRAILERS} trailer fields")));
            }
            check_field_line(&t).map_err(|e| Stop::Refused(format!("trailer: {e}")))?;
        }
        Ok(())
    }

    /// The next piece of a body's payload (its framing taken off), read as
    /// strictly as [`Feed::body`] reads it; `None` at its end. For relays
    /// that change the payload on the way (the interception) and write
    /// their own framing ([`write_chunk`]).
    pub(crate) async fn piece(&mut self, p: &mut Pieces) -> Result<Option<Vec<u8>>, Stop> {
        loop {
            match p.0 {
                Piece::Done => return Ok(None),
                Piece::Size => {
                    let line = self.line(MAX_CHUNK_LINE).await?;
                    match chunk_size(&line).map_err(Stop::Refused)? {
                        0 => {
                            self.trailers().await?;
                            p.0 = Piece::Done;
                        }
                        n => p.0 = Piece::Chunk(n),
                    }
                }
                Piece::Chunk(0) => {
                    if !self.line(MAX_CHUNK_LINE).await?.is_empty() {
                        return Err(Stop::Refused("chunk data longer than its size (no CRLF after it)".into()));
                    }
                    p.0 = Piece::Size;
                }
                Piece::Length(0) => p.0 = Piece::Done,
                Piece::Length(n) | Piece::Chunk(n) => {
                    if self.pending().is_empty() && !self.fill().await? {
                        return Err(Stop::Refused("the stream ended before the length it declared".into()));
                    }
                    let take = self.pending().len().min(usize::try_from(n).unwrap_or(usize::MAX));
                    let v = self.pending()[..take].to_vec();
                    self.pos += take;
                    let left = n - take as u64;
                    p.0 = if matches!(p.0, Piece::Length(_)) { Piece::Length(left) } else { Piece::Chunk(left) };
                    return Ok(Some(v));
                }
                Piece::Close => {
                    if self.pending().is_empty() && !self.fill().await? {
                        p.0 = Piece::Done;
                        continue;
                    }
                    let v = self.pending().to_vec();
                    self.pos = self.buf.len();
                    return Ok(Some(v));
                }
            }
        }
    }

    /// Copy a body framed as `body` (Empty and Length(0) copy nothing).
    pub(crate) async fn body<W: AsyncWrite + Unpin>(&mut self, body: Body, out: &mut W) -> Result<(), Stop> {
        match body {
            Body::Empty => Ok(()),
            Body::Length(n) => self.copy(n, out).await,
            Body::Chunked => relay_chunked(self, out).await,
            Body::Close => self.copy_to_end(out).await,
        }
    }
}

/// Where a body being read piece by piece is ([`Feed::piece`]).
pub(crate) struct Pieces(Piece);

#[derive(Debug, Clone, Copy)]
enum Piece {
    Length(u64),
    Size,
    Chunk(u64),
    Close,
    Done,
}

impl Pieces {
    pub(crate) fn new(body: Body) -> Pieces {
        Pieces(match body {
            Body::Empty => Piece::Done,
            Body::Length(n) => Piece::Length(n),
            Body::Chunked => Piece::Size,
            Body::Close => Piece::Close,
        })
    }
}

/// One canonical chunk (nothing for an empty piece: a zero-size chunk
/// would end the body).
pub(crate) async fn write_chunk<W: AsyncWrite + Unpin>(out: &mut W, data: &[u8]) -> Result<(), Stop> {
    if data.is_empty() {
        return Ok(());
    }
    let mut v = format!("{:x}\r\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    out.write_all(&v).await.map_err(|_| Stop::Gone)
}

/// The last chunk, no trailers.
pub(crate) async fn end_chunks<W: AsyncWrite + Unpin>(out: &mut W) -> Result<(), Stop> {
    out.write_all(b"0\r\n\r\n").await.map_err(|_| Stop::Gone)
}

/// Read a chunked body and write it again in canonical chunks: a size in
/// lowercase hex, no extensions, CRLFs, the last chunk `0` and no trailers
/// (they are read, checked and dropped). What followed the last chunk is
/// never read, so never passed on.
pub(crate) async fn relay_chunked<R, W>(feed: &mut Feed<'_, R>, out: &mut W) -> Result<(), Stop>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let line = feed.line(MAX_CHUNK_LINE).await?;
        let size = chunk_size(&line).map_err(Stop::Refused)?;
        if size == 0 {
            feed.trailers().await?;
            out.write_all(b"0\r\n\r\n").await.map_err(|_| Stop::Gone)?;
            return Ok(());
        }
        out.write_all(format!("{size:x}\r\n").as_bytes()).await.map_err(|_| Stop::Gone)?;
        feed.copy(size, out).await?;
        if !feed.line(MAX_CHUNK_LINE).await?.is_empty() {
            return Err(Stop::Refused("chunk data longer than its size (no CRLF after it)".into()));
        }
        out.write_all(b"\r\n").await.map_err(|_| Stop::Gone)?;
    }
}

/// Field lines written again as `Name: value\r\n`, leaving out `drop` (the
/// framing, hop-by-hop and proxy fields the proxy writes itself).
pub(crate) fn fields_except(fields: &[(String, Vec<u8>)], drop: &[&str]) -> Vec<u8> {
    let mut out = vec![];
    for (name, value) in fields {
        if drop.contains(&name.as_str()) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(trim_ows(value));
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The framing field for a body, as the proxy writes it.
pub(crate) fn framing_field(body: Body) -> String {
    match body {
        Body::Length(n) => format!("Content-Length: {n}\r\n"),
        Body::Chunked => "Transfer-Encoding: chunked\r\n".into(),
        Body::Empty | Body::Close => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
    }

    #[test]
    fn content_length_is_digits_and_one_value() {
        assert_eq!(content_length(&[b"49"]), Ok(Some(49)));
        assert_eq!(content_length(&[b"0049"]), Ok(Some(49)));
        assert_eq!(content_length(&[b"49", b"49"]), Ok(Some(49)), "identical repeats collapse");
        assert_eq!(content_length(&[b"49, 49"]), Ok(Some(49)));
        assert_eq!(content_length(&[]), Ok(None));
        for bad in
            [&b"+49"[..], b"-1", b"0x31", b"4 9", b"49;", b"", b"49,", b"1e3", b"\xd9\xa4", b"99999999999999999999"]
        {
            assert!(content_length(&[bad]).is_err(), "{bad:?}");
        }
        assert!(content_length(&[b"49", b"50"]).unwrap_err().contains("differ"));
    }

    #[test]
    fn transfer_encoding_is_chunked_alone() {
        assert_eq!(transfer_chunked(&[b"chunked"]), Ok(true));
        assert_eq!(transfer_chunked(&[b"CHUNKED"]), Ok(true));
        assert_eq!(transfer_chunked(&[]), Ok(false));
        for bad in [
            &[&b"chunked"[..], b"chunked"][..],
            &[b"chunked", b"x"],
            &[b"xchunked"],
            &[b"chunked, identity"],
            &[b"gzip, chunked"],
            &[b"chunked,"],
            &[b"identity"],
            &[b"chunked\x0b"],
        ] {
            assert!(transfer_chunked(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bodies_are_decided_once() {
        assert_eq!(request_body(1, &f(&[("content-length", "5")])), Ok(Body::Length(5)));
        assert_eq!(request_body(1, &f(&[("transfer-encoding", "chunked")])), Ok(Body::Chunked));
        assert_eq!(request_body(1, &f(&[])), Ok(Body::Empty));
        assert!(request_body(0, &f(&[("transfer-encoding", "chunked")])).is_err());
        assert!(request_body(1, &f(&[("content-length", "5"), ("transfer-encoding", "chunked")])).is_err());
        assert_eq!(response_body(200, false, &f(&[])), Ok(Body::Close));
        assert_eq!(response_body(200, true, &f(&[("content-length", "5")])), Ok(Body::Empty));
        assert_eq!(response_body(304, false, &f(&[("content-length", "5")])), Ok(Body::Empty));
        assert!(response_body(200, false, &f(&[("content-length", "+5")])).is_err());
    }

    #[test]
    fn heads_are_checked_byte_by_byte() {
        let ok = b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Empty:\r\nX-Tab:\tv\r\n\r\n";
        assert_eq!(check_head(ok, 64), Ok(()));
        for (bad, why) in [
            (&b"GET / HTTP/1.1\nHost: a\r\n\r\n"[..], "bare LF"),
            (b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", "bare LF"),
            (b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", "bare CR"),
            (b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", "obs-fold"),
            (b"GET / HTTP/1.1\r\nHost: a\r\n\tfolded\r\n\r\n", "obs-fold"),
            (b"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n", "before its colon"),
            (b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", "control"),
            (b"GET / HTTP/1.1\r\nX: a\x0bb\r\n\r\n", "control"),
            (b"GET / HTTP/1.1\r\nnocolon\r\n\r\n", "without a colon"),
            (b"\r\nGET / HTTP/1.1\r\n\r\n", "start line"),
        ] {
            let e = check_head(bad, 64).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let many: String = (0..5).map(|i| format!("X{i}: v\r\n")).collect();
        assert!(check_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes(), 4).is_err());
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_LINE));
        assert!(check_head(long.as_bytes(), 64).is_err());
    }

    #[test]
    fn chunk_sizes_are_hex_bounded_and_extensions_dropped() {
        assert_eq!(chunk_size(b"1a"), Ok(26));
        assert_eq!(chunk_size(b"5;ext=1"), Ok(5));
        assert_eq!(chunk_size(b"5 ; name=\"v\""), Ok(5));
        assert_eq!(chunk_size(b"ffffffffffffffff"), Ok(u64::MAX));
        for bad in [&b""[..], b"x", b"0x5", b"+5", b"5 5", b"5\x00", b"fffffffffffffffff", b"5;\x0b"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    async fn rechunk(input: &[u8]) -> (Result<(), Stop>, Vec<u8>) {
        let mut src: &[u8] = input;
        let mut feed = Feed::new(vec![], &mut src, Duration::from_secs(1));
        let mut out = vec![];
        let r = relay_chunked(&mut feed, &mut out).await;
        (r, out)
    }

    #[tokio::test]
    async fn pieces_are_the_payload_read_as_strictly() {
        async fn all(input: &[u8], body: Body) -> Result<Vec<u8>, Stop> {
            let mut src: &[u8] = input;
            let mut feed = Feed::new(vec![], &mut src, Duration::from_secs(1));
            let mut p = Pieces::new(body);
            let mut out = vec![];
            while let Some(x) = feed.piece(&mut p).await? {
                out.extend(x);
            }
            Ok(out)
        }
        let chunked = b"5;ext=x\r\nhello\r\n3\r\n, w\r\n0\r\nT: t\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n";
        assert_eq!(all(chunked, Body::Chunked).await.unwrap(), b"hello, w");
        assert_eq!(all(b"hello world", Body::Length(5)).await.unwrap(), b"hello");
        assert_eq!(all(b"to the end", Body::Close).await.unwrap(), b"to the end");
        assert_eq!(all(b"ignored", Body::Empty).await.unwrap(), b"");
        assert!(matches!(all(b"hel", Body::Length(5)).await, Err(Stop::Refused(_))));
        for bad in [&b"5\r\nhelloX\r\n0\r\n\r\n"[..], b"5\nhello\r\n0\r\n\r\n", b"0\r\nTrailer : t\r\n\r\n"] {
            assert!(matches!(all(bad, Body::Chunked).await, Err(Stop::Refused(_))), "{bad:?}");
        }
        let mut out = vec![];
        write_chunk(&mut out, b"").await.unwrap();
        write_chunk(&mut out, b"0123456789abcdefX").await.unwrap();
        end_chunks(&mut out).await.unwrap();
        assert_eq!(out, b"11\r\n0123456789abcdefX\r\n0\r\n\r\n");
    }

    #[tokio::test]
    async fn chunked_bodies_are_written_again_canonically() {
        let (r, out) = rechunk(
            b"5;ext=x\r\nhello\r\n00A\r\n0123456789\r\n0;last\r\nTrailer: t\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
        )
        .await;
        assert_eq!(r, Ok(()));
        assert_eq!(out, b"5\r\nhello\r\na\r\n0123456789\r\n0\r\n\r\n", "what followed the last chunk is not read");
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5\r\nhel",
            b"ffffffffffffffff1\r\n",
            b"0\r\n folded: t\r\n\r\n",
            b"0\r\nTrailer : t\r\n\r\n",
        ] {
            let (r, _) = rechunk(bad).await;
            assert!(matches!(r, Err(Stop::Refused(_))), "{bad:?}: {r:?}");
        }
    }
}
