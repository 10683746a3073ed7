//! HTTP/1.1 to the vRouter agent, with ureq: requests to the configured address (no TLS, no
//! proxy, no name to resolve) on a connection kept alive between the requests of a call, each
//! within the timeout it is given (connecting included), answers bounded in size. ureq frames
//! the answers as RFC 9112 says (a 204 has no body, Content-Length is digits only, `close`
//! among the Connection options closes, chunked bodies are read), which a hand-written client
//! got wrong.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// An answer's status line and headers; the agent's are about 100 bytes.
const MAX_HEAD: usize = 8 * 1024;
/// ureq's read and write buffers, zeroed (and so resident) for every connection: its default
/// 128 KiB is for bodies far larger than an answer of the agent.
const BUFFER: usize = 16 * 1024;

/// An answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no answer this plugin takes.
#[derive(Debug)]
pub enum Failure {
    /// No answer: refused, reset, timed out, cut short. Asking again may help.
    Transport(TransportError),
    /// An answer that breaks HTTP, or larger than the bound. Asking again gets the same.
    Broken(HttpViolation),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transport(e) => e.fmt(f),
            Failure::Broken(e) => e.fmt(f),
        }
    }
}

/// Why a request got no answer at all, by kind, with what there is to know: the time it was
/// given, the errno.
#[derive(Debug)]
pub enum TransportError {
    /// Connecting took longer than the connect timeout.
    ConnectTimedOut { after: Duration },
    /// The answer took longer than the request's timeout (connecting included).
    TimedOut { after: Duration },
    /// Connecting failed: refused (nothing listens on the port).
    Connect(io::Error),
    /// The connection closed before the answer was whole.
    CutShort,
    /// Another I/O error on the connection (a reset, ...).
    Io(io::Error),
    /// Any other failure ureq reports, in its words (the error type is ureq's: it stays here).
    Other(String),
}

impl TransportError {
    /// The OS error number, for the failures that have one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            TransportError::Connect(e) | TransportError::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::ConnectTimedOut { after } => {
                write!(f, "connecting timed out after {} ms", after.as_millis())
            }
            TransportError::TimedOut { after } => {
                write!(f, "timed out after {} ms", after.as_millis())
            }
            TransportError::Connect(e) => write!(f, "connecting: {e}"),
            TransportError::CutShort => {
                f.write_str("the connection closed before the answer was whole")
            }
            TransportError::Io(e) => e.fmt(f),
            TransportError::Other(e) => f.write_str(e),
        }
    }
}

/// What is wrong with an answer that breaks HTTP/1.1 (its framing, its head) or the size bound:
/// the kind, never the answer's bytes, which are not this plugin's to repeat.
#[derive(Debug, PartialEq, Eq)]
pub enum HttpViolation {
    /// A Content-Length that is not a number.
    BadContentLength,
    /// Several Content-Lengths.
    ConflictingLengths,
    /// Both Transfer-Encoding and Content-Length.
    LengthAndChunked,
    /// A head that does not parse (the status line, a header), in ureq's parser's words.
    BadHead(String),
    /// Any other breach ureq's protocol layer reports, in its words.
    Other(String),
    /// A status line and headers larger than `max` bytes.
    HeadTooLarge { max: usize },
    /// A body larger than `max` bytes.
    BodyTooLarge { max: usize },
}

impl From<ureq_proto::Error> for HttpViolation {
    fn from(e: ureq_proto::Error) -> HttpViolation {
        use ureq_proto::Error as P;
        match e {
            P::BadContentLengthHeader => HttpViolation::BadContentLength,
            P::TooManyContentLengthHeaders => HttpViolation::ConflictingLengths,
            P::ConflictingBodyHeaders => HttpViolation::LengthAndChunked,
            P::HttpParseFail(_) | P::HttpParseTooManyHeaders | P::BadHeader(_) => {
                HttpViolation::BadHead(e.to_string())
            }
            e => HttpViolation::Other(e.to_string()),
        }
    }
}

impl fmt::Display for HttpViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let breaks = "agent sent an answer that breaks HTTP/1.1";
        match self {
            HttpViolation::BadContentLength
            | HttpViolation::ConflictingLengths
            | HttpViolation::LengthAndChunked => {
                let e = match self {
                    HttpViolation::BadContentLength => ureq_proto::Error::BadContentLengthHeader,
                    HttpViolation::ConflictingLengths => {
                        ureq_proto::Error::TooManyContentLengthHeaders
                    }
                    _ => ureq_proto::Error::ConflictingBodyHeaders,
                };
                write!(f, "{breaks}: {e}")
            }
            HttpViolation::BadHead(e) | HttpViolation::Other(e) => write!(f, "{breaks}: {e}"),
            HttpViolation::HeadTooLarge { max } => {
                write!(f, "{breaks}: a head larger than {max} bytes")
            }
            HttpViolation::BodyTooLarge { max } => write!(
                f,
                "agent sent an answer larger than the {max} bytes an answer may have"
            ),
        }
    }
}

/// The client of one call: its connection pool holds the connection kept alive between the
/// call's requests.
pub(crate) struct Client {
    http: ureq::Agent,
    /// `http://<vrouter-ip>:<vrouter-port>`, the start of every request's URL.
    base: String,
    connect_timeout: Duration,
    max_body: usize,
}

/// The agent's address is an IP literal (`vrouter-ip`): nothing to resolve, no DNS ever.
/// ureq's default resolver would also start a thread per request to bound the lookup by the
/// request's timeout. `ureq::unversioned` is outside ureq's semver promise: Cargo.lock pins
/// 3.5.1, and an update of ureq that changed it fails to build, loudly.
#[derive(Debug)]
struct Literal(SocketAddr);

impl Resolver for Literal {
    fn resolve(
        &self,
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(self.0);
        Ok(addrs)
    }
}

impl Client {
    pub(crate) fn new(addr: SocketAddr, connect_timeout: Duration, max_body: usize) -> Client {
        let config = ureq::Agent::config_builder()
            // The agent is a local address: a proxy from the environment (http_proxy, ...)
            // would only break it, or send the pod's identity elsewhere.
            .proxy(None)
            // 404 (not yet) and 500 are answers the caller decides on, with their bodies read
            // so that the connection stays usable.
            .http_status_as_error(false)
            // The agent never redirects: a 3xx is an answer like any other status.
            .max_redirects(0)
            .timeout_connect(Some(connect_timeout))
            .user_agent("contrail-k8s-cni")
            .accept("application/json")
            .input_buffer_size(BUFFER)
            .output_buffer_size(BUFFER)
            .max_response_header_size(MAX_HEAD)
            .build();
        let http = ureq::Agent::with_parts(config, DefaultConnector::new(), Literal(addr));
        let base = match addr {
            SocketAddr::V4(a) => format!("http://{a}"),
            SocketAddr::V6(a) => format!("http://[{}]:{}", a.ip(), a.port()),
        };
        Client {
            http,
            base,
            connect_timeout,
            max_body,
        }
    }

    /// `http://<address>:<port>`, as errors name the agent.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// One request with an optional JSON body, answered within `timeout` (connecting and the
    /// whole body included). `path` must be one [`is_path`] takes: it is not escaped.
    pub(crate) fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let url = format!("{}{path}", self.base);
        let t = Some(timeout);
        let answer = match method {
            Method::Get => self
                .http
                .get(&url)
                .config()
                .timeout_global(t)
                .build()
                .call(),
            Method::Delete => self
                .http
                .delete(&url)
                .config()
                .timeout_global(t)
                .build()
                .call(),
            Method::Post => self
                .http
                .post(&url)
                .config()
                .timeout_global(t)
                .build()
                .content_type("application/json")
                .send(body.unwrap_or_default()),
        };
        let mut answer = answer.map_err(|e| self.failure(e, timeout))?;
        let status = answer.status().as_u16();
        let body = answer.body_mut();
        // Refused from its head, before anything of it is read.
        if body
            .content_length()
            .is_some_and(|n| n > self.max_body as u64)
        {
            return Err(self.too_large());
        }
        // One byte over the bound, so that an answer of exactly the bound passes and a larger
        // one is refused after reading no more than that.
        let body = body
            .with_config()
            .limit(self.max_body as u64 + 1)
            .read_to_vec()
            .map_err(|e| self.failure(e, timeout))?;
        Ok(Answer { status, body })
    }

    fn too_large(&self) -> Failure {
        Failure::Broken(HttpViolation::BodyTooLarge { max: self.max_body })
    }

    /// What went wrong, by kind: no answer (asking again may help), or an answer that breaks
    /// HTTP or the size bound (asking again gets the same).
    fn failure(&self, e: ureq::Error, timeout: Duration) -> Failure {
        match e {
            ureq::Error::Protocol(e) => Failure::Broken(e.into()),
            ureq::Error::LargeResponseHeader(_, max) => {
                Failure::Broken(HttpViolation::HeadTooLarge { max })
            }
            ureq::Error::BodyExceedsLimit(_) => self.too_large(),
            ureq::Error::Timeout(ureq::Timeout::Connect) => {
                Failure::Transport(TransportError::ConnectTimedOut {
                    after: self.connect_timeout,
                })
            }
            ureq::Error::Timeout(_) => {
                Failure::Transport(TransportError::TimedOut { after: timeout })
            }
            ureq::Error::Io(e) => Failure::Transport(match e.kind() {
                io::ErrorKind::ConnectionRefused => TransportError::Connect(e),
                io::ErrorKind::UnexpectedEof => TransportError::CutShort,
                _ => TransportError::Io(e),
            }),
            e => Failure::Transport(TransportError::Other(e.to_string())),
        }
    }
}

/// One request to the agent, as errors name it: `GET /vm-cfg/<vm-name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    pub path: String,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// The HTTP methods of the agent's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        })
    }
}

/// Whether `path` is an absolute URL path made of RFC 3986's path characters only (unreserved,
/// sub-delims, `:`, `@`, `/` and %-escapes): nothing in it can end the request line, start a
/// header, a query or a fragment. Requests are built from validated identifiers; a path that
/// is not one is a bug, and is never sent.
pub(crate) fn is_path(path: &str) -> bool {
    let b = path.as_bytes();
    b.first() == Some(&b'/')
        && b.iter().enumerate().all(|(i, &c)| match c {
            b'%' => b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)),
            _ => c.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&c),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::thread;

    /// A bound on what the in-process server does, which no test waits out: a busy machine
    /// may be slow to run its thread (the silent agent's timeout is a test of its own).
    const BOUND: Duration = Duration::from_secs(30);

    /// Reads one request (its head and its Content-Length's worth of body) as text.
    fn read_request(conn: &mut BufReader<TcpStream>) -> Option<String> {
        let mut request = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
            request.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        conn.read_exact(&mut body).unwrap();
        Some(request + &String::from_utf8(body).unwrap())
    }

    /// What [`serve`] gives a test.
    struct Served {
        client: Client,
        /// The requests, as the server read them.
        server: thread::JoinHandle<Vec<String>>,
        /// One message per connection the server closed.
        closed: mpsc::Receiver<()>,
    }

    /// A server on loopback that answers each connection's requests with `answers` in turn,
    /// then closes it.
    fn serve(answers: Vec<Vec<&'static [u8]>>) -> Served {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, closed) = mpsc::channel();
        let server = thread::spawn(move || {
            let mut seen = Vec::new();
            for conn_answers in answers {
                let (conn, _) = listener.accept().unwrap();
                let mut conn = BufReader::new(conn);
                for answer in conn_answers {
                    seen.extend(read_request(&mut conn));
                    conn.get_mut().write_all(answer).unwrap();
                }
                drop(conn);
                let _ = tx.send(());
            }
            seen
        });
        Served {
            client: Client::new(addr, BOUND, 1 << 20),
            server,
            closed,
        }
    }

    #[test]
    fn requests_share_one_connection_and_bodies_are_sent_with_their_length() {
        let ok: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let missing: &[u8] =
            b"HTTP/1.1 404 OK\r\nContent-Length: 24\r\n\r\n{\"error\":\"{ Not Found }\"}";
        let Served { client, server, .. } = serve(vec![vec![ok, missing]]);
        let a = client
            .send(Method::Post, "/vm", Some(b"{\"a\":1}"), BOUND)
            .unwrap();
        assert_eq!(
            a,
            Answer {
                status: 200,
                body: b"{}".to_vec()
            }
        );
        let b = client.send(Method::Get, "/vm/x/y", None, BOUND).unwrap();
        assert_eq!(b.status, 404);
        assert_eq!(b.body.len(), 24);
        let seen: Vec<String> = server
            .join()
            .unwrap()
            .iter()
            .map(|r| r.to_lowercase())
            .collect();
        assert!(seen[0].starts_with("post /vm http/1.1\r\n"), "{}", seen[0]);
        assert!(
            seen[0].contains("content-length: 7\r\n")
                && seen[0].contains("content-type: application/json\r\n")
                && seen[0].ends_with("\r\n\r\n{\"a\":1}"),
            "{}",
            seen[0]
        );
        assert!(
            seen[1].starts_with("get /vm/x/y http/1.1\r\n") && !seen[1].contains("content-length"),
            "{}",
            seen[1]
        );
    }

    #[test]
    fn a_kept_connection_the_agent_closed_is_replaced() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        // The first connection serves one request, then closes while idle.
        let s = serve(vec![vec![ok], vec![ok]]);
        s.client.send(Method::Get, "/a", None, BOUND).unwrap();
        s.closed.recv_timeout(BOUND).unwrap();
        let b = s.client.send(Method::Get, "/b", None, BOUND).unwrap();
        assert_eq!(b.status, 200);
        assert_eq!(s.server.join().unwrap().len(), 2);
    }

    #[test]
    fn broken_answers_say_what_broke() {
        type Kind = fn(&Failure) -> bool;
        let cases: [(&[u8], Kind); 6] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\"",
                |e| matches!(e, Failure::Transport(TransportError::CutShort)),
            ),
            (b"garbage\r\n\r\n", |e| {
                matches!(e, Failure::Broken(HttpViolation::BadHead(_)))
            }),
            (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", |e| {
                matches!(e, Failure::Broken(HttpViolation::BadContentLength))
            }),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                |e| matches!(e, Failure::Broken(HttpViolation::ConflictingLengths)),
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
                |e| {
                    matches!(
                        e,
                        Failure::Broken(HttpViolation::BodyTooLarge { max: 1_048_576 })
                    )
                },
            ),
            (b"HTTP/1.1 200", |e| {
                matches!(e, Failure::Transport(TransportError::CutShort))
            }),
        ];
        for (answer, kind) in cases {
            let Served { client, server, .. } = serve(vec![vec![answer]]);
            let e = client.send(Method::Get, "/", None, BOUND).unwrap_err();
            assert!(kind(&e), "{:?}: {e:?}", String::from_utf8_lossy(answer));
            server.join().unwrap();
        }
    }

    #[test]
    fn violations_read_as_they_did() {
        for (violation, text) in [
            (
                HttpViolation::BadContentLength,
                "agent sent an answer that breaks HTTP/1.1: content-length header not a number",
            ),
            (
                HttpViolation::ConflictingLengths,
                "agent sent an answer that breaks HTTP/1.1: conflicting content-length headers",
            ),
            (
                HttpViolation::LengthAndChunked,
                "agent sent an answer that breaks HTTP/1.1: both transfer-encoding and \
                 content-length headers",
            ),
            (
                HttpViolation::HeadTooLarge { max: 8192 },
                "agent sent an answer that breaks HTTP/1.1: a head larger than 8192 bytes",
            ),
            (
                HttpViolation::BodyTooLarge { max: 1024 },
                "agent sent an answer larger than the 1024 bytes an answer may have",
            ),
        ] {
            assert_eq!(violation.to_string(), text);
        }
        assert_eq!(
            TransportError::CutShort.to_string(),
            "the connection closed before the answer was whole"
        );
    }

    #[test]
    fn a_silent_agent_times_out_and_a_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = Client::new(listener.local_addr().unwrap(), BOUND, 1 << 20);
        let e = client
            .send(Method::Get, "/", None, Duration::from_millis(50))
            .unwrap_err();
        assert!(
            matches!(&e, Failure::Transport(TransportError::TimedOut { after })
                if *after == Duration::from_millis(50)),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "timed out after 50 ms");
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let e = Client::new(addr, BOUND, 1 << 20)
            .send(Method::Get, "/", None, BOUND)
            .unwrap_err();
        let Failure::Transport(e) = e else {
            panic!("{e:?}")
        };
        assert!(matches!(e, TransportError::Connect(_)), "{e:?}");
        assert_eq!(e.errno(), Some(libc::ECONNREFUSED));
        let e = e.to_string();
        assert!(e.contains("connecting") && e.contains("refused"), "{e}");
    }

    #[test]
    fn only_url_paths_are_sent() {
        for ok in [
            "/vm",
            "/vm-cfg/k8s__default__web-0",
            "/vm/40936d96-cf0e-11e8-9892-002590aaa964/b86ac068-cf0e-11e8-b196-002590aaa964",
            "/a%2Fb:c@d~e",
        ] {
            assert!(is_path(ok), "{ok}");
        }
        for bad in [
            "",
            "vm",
            "/vm/x HTTP/1.1\r\nX-Injected: 1",
            "/vm/x\ny",
            "/vm/x y",
            "/vm?x",
            "/vm#x",
            "/vm/%zz",
            "/vm/%4",
            "/vm/\u{e9}",
            "/vm/\0",
        ] {
            assert!(!is_path(bad), "{bad:?}");
        }
    }
}
