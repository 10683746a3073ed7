//! HTTP/1.1 as client-go speaks it to an API server: requests with a Content-Length body on a
//! kept-alive connection (heads parsed by httparse), answers with a length, and watches as a
//! chunked stream of JSON lines.

use std::io::{self, BufRead, BufReader, Read, Write};

use serde_json::Value;

/// The largest head and body the stand-in reads: a pod or a status update is a few KiB.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 4 << 20;

pub(crate) struct Request {
    pub(crate) method: String,
    /// The path without its query.
    pub(crate) path: String,
    /// The query's pairs, percent-decoded.
    pub(crate) query: Vec<(String, String)>,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Request {
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a boolean query parameter is set (`true` or `1`).
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.param(key), Some("true" | "1"))
    }
}

/// Reads the next request of a connection; `Ok(None)` when the client closed it.
pub(crate) fn read_request(r: &mut BufReader<impl Read>) -> io::Result<Option<Request>> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let before = head.len();
        let n = r
            .by_ref()
            .take((MAX_HEAD - before) as u64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            if head.is_empty() {
                return Ok(None);
            }
            return Err(invalid("a request's head cut short or too long"));
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    if !parsed
        .parse(&head)
        .map_err(|e| invalid(&e.to_string()))?
        .is_complete()
    {
        return Err(invalid("an incomplete head"));
    }
    let header = |name: &str| {
        parsed
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let length: usize = header("content-length").map_or(Ok(0), |l| {
        l.parse().map_err(|_| invalid("a bad Content-Length"))
    })?;
    if length > MAX_BODY {
        return Err(invalid("a body over 4 MiB"));
    }
    let content_type = header("content-type").unwrap_or_default();
    let target = parsed.path.unwrap_or("/").to_string();
    let method = parsed.method.unwrap_or("GET").to_string();
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    Ok(Some(Request {
        method,
        path: path.to_string(),
        query,
        content_type,
        body,
    }))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A query component, percent-decoded (`+` is a space).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(x) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JSON answer with its length, on a connection that stays open.
pub(crate) fn answer(w: &mut impl Write, status: u16, body: &Value) -> io::Result<()> {
    let body = body.to_string();
    write!(
        w,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        reason(status),
        body.len()
    )?;
    w.flush()
}

/// A watch: the head of a chunked stream; each event is then one chunk ([`chunk`]).
pub(crate) fn start_stream(w: &mut impl Write) -> io::Result<()> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
          Connection: close\r\n\r\n",
    )?;
    w.flush()
}

/// One watch event, a JSON line, as a chunk of its own, sent at once.
pub(crate) fn chunk(w: &mut impl Write, event: &Value) -> io::Result<()> {
    let line = format!("{event}\n");
    write!(w, "{:x}\r\n{line}\r\n", line.len())?;
    w.flush()
}

/// The end of a watch's stream.
pub(crate) fn end_stream(w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        _ => "Internal Server Error",
    }
}
