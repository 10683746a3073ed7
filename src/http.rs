//! HTTP/1.1 to the vRouter agent, as little as its REST API needs: one kept-alive TCP
//! connection to an address (no TLS, no proxy, no name to resolve), a request with an optional
//! JSON body, an answer bounded in size and in time. The agent answers with a Content-Length and
//! keeps the connection open; an answer without one is read to the end of the connection, which
//! is then not reused. A general HTTP client was most of the code on an ADD's path, for three
//! small requests on loopback.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// An answer's status line and headers; the agent's are about 100 bytes.
const MAX_HEAD: usize = 8 * 1024;

/// An answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The client: an address, and the connection kept between requests.
pub(crate) struct Client {
    addr: SocketAddr,
    connect_timeout: Duration,
    max_body: usize,
    conn: RefCell<Option<TcpStream>>,
}

/// Why a request failed.
enum Failure {
    /// A kept connection the agent had closed meanwhile: the request never reached it, and is
    /// sent again on a new connection.
    Stale,
    /// For the operator.
    Said(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure::Said(why)
    }
}

impl Client {
    pub(crate) fn new(addr: SocketAddr, connect_timeout: Duration, max_body: usize) -> Client {
        Client {
            addr,
            connect_timeout,
            max_body,
            conn: RefCell::new(None),
        }
    }

    /// One request, answered within `timeout` (connecting included); the error says what went
    /// wrong, for the operator.
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, String> {
        let deadline = Instant::now() + timeout;
        let request = self.request(method, path, body);
        let kept = self.conn.borrow_mut().take();
        if let Some(conn) = kept {
            match self.exchange(conn, &request, deadline, true) {
                Err(Failure::Stale) => {}
                other => return self.keep(other),
            }
        }
        let conn = self.connect(deadline)?;
        self.keep(self.exchange(conn, &request, deadline, false))
    }

    fn keep(&self, r: Result<(Answer, Option<TcpStream>), Failure>) -> Result<Answer, String> {
        match r {
            Ok((answer, conn)) => {
                *self.conn.borrow_mut() = conn;
                Ok(answer)
            }
            Err(Failure::Said(why)) => Err(why),
            // Only a kept connection can be stale.
            Err(Failure::Stale) => Err("the connection closed before the answer".into()),
        }
    }

    fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        let mut r = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: contrail-k8s-cni\r\nAccept: \
             application/json\r\n",
            self.addr
        )
        .into_bytes();
        if let Some(body) = body {
            let head = format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            );
            r.extend_from_slice(head.as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        r.extend_from_slice(body.unwrap_or_default());
        r
    }

    fn connect(&self, deadline: Instant) -> Result<TcpStream, String> {
        let t = left(deadline)?.min(self.connect_timeout);
        let conn = TcpStream::connect_timeout(&self.addr, t).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                format!("connecting timed out after {t:?}")
            }
            _ => format!("connecting: {e}"),
        })?;
        // Requests are single small writes: no waiting for an ACK to coalesce them.
        conn.set_nodelay(true)
            .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
        Ok(conn)
    }

    /// Sends `request` on `conn` and reads the answer; returns the connection when it can be
    /// used again.
    fn exchange(
        &self,
        mut conn: TcpStream,
        request: &[u8],
        deadline: Instant,
        kept: bool,
    ) -> Result<(Answer, Option<TcpStream>), Failure> {
        let stale = |e: &io::Error| kept && is_closed(e);
        conn.set_write_timeout(Some(left(deadline)?))
            .map_err(|e| format!("setting a timeout: {e}"))?;
        if let Err(e) = conn.write_all(request) {
            return Err(if stale(&e) {
                Failure::Stale
            } else {
                Failure::Said(io_failure("sending the request", &e, deadline))
            });
        }
        let mut buf = Vec::with_capacity(4096);
        let head = loop {
            match read_some(&mut conn, &mut buf, deadline) {
                Ok(0) if buf.is_empty() && kept => return Err(Failure::Stale),
                Ok(0) => {
                    return Err(format!(
                        "the connection closed after {} bytes of the answer's head",
                        buf.len()
                    )
                    .into());
                }
                Ok(_) => {}
                Err(e) if buf.is_empty() && stale(&e) => return Err(Failure::Stale),
                Err(e) => return Err(io_failure("reading the answer", &e, deadline).into()),
            }
            if let Some(head) = parse_head(&buf)? {
                break head;
            }
            if buf.len() >= MAX_HEAD {
                return Err(format!("the answer's head is larger than {MAX_HEAD} bytes").into());
            }
        };
        let mut body = buf.split_off(head.len);
        let exact = self.read_body(&mut conn, &mut body, head.length, deadline)?;
        let conn = (head.reusable && exact).then_some(conn);
        let answer = Answer {
            status: head.status,
            body,
        };
        Ok((answer, conn))
    }

    /// Reads the rest of the body (`length` bytes, or up to the end of the connection) after
    /// the part that came with the head; returns whether the connection ends with it.
    fn read_body(
        &self,
        conn: &mut TcpStream,
        body: &mut Vec<u8>,
        length: Option<usize>,
        deadline: Instant,
    ) -> Result<bool, String> {
        let max = self.max_body;
        if length.is_some_and(|n| n > max) {
            return Err(format!(
                "an answer of {} bytes, more than the {max} an answer may have",
                length.unwrap_or_default()
            ));
        }
        loop {
            if let Some(n) = length.filter(|n| body.len() >= *n) {
                // Bytes beyond the answer are no answer to anything: the connection goes.
                let exact = body.len() == n;
                body.truncate(n);
                return Ok(exact);
            }
            match read_some(conn, body, deadline) {
                // No length: the answer ends with the connection.
                Ok(0) if length.is_none() => return Ok(false),
                Ok(0) => {
                    return Err(format!(
                        "the connection closed after {} of the answer's {} bytes",
                        body.len(),
                        length.unwrap_or_default()
                    ));
                }
                Ok(_) if body.len() > max => {
                    return Err(format!(
                        "an answer of more than the {max} bytes an answer may have"
                    ));
                }
                Ok(_) => {}
                Err(e) => return Err(io_failure("reading the answer", &e, deadline)),
            }
        }
    }
}

/// The time left before `deadline`, or the error of a request that ran out of it.
fn left(deadline: Instant) -> Result<Duration, String> {
    let t = deadline.saturating_duration_since(Instant::now());
    if t.is_zero() {
        return Err("timed out".into());
    }
    Ok(t)
}

/// Reads what is there (appended to `buf`), waiting at most until `deadline`.
fn read_some(conn: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<usize> {
    let t = left(deadline).map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?;
    conn.set_read_timeout(Some(t))?;
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(4096);
    }
    let start = buf.len();
    buf.resize(buf.capacity(), 0);
    let n = conn.read(&mut buf[start..]);
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    n
}

/// A connection the other end closed (a kept connection the agent dropped while idle).
fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

fn io_failure(doing: &str, e: &io::Error, deadline: Instant) -> String {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => format!("{doing}: timed out"),
        _ if Instant::now() >= deadline => format!("{doing}: timed out"),
        _ => format!("{doing}: {e}"),
    }
}

/// An answer's status line and headers, as far as this client needs them.
struct Head {
    status: u16,
    /// Its own length in bytes.
    len: usize,
    /// The body's, when given.
    length: Option<usize>,
    /// Whether the connection may carry another request.
    reusable: bool,
}

/// The answer's head once it is whole.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut headers);
    let len = match answer.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP answer: {e}")),
    };
    let mut length = None;
    let mut close = answer.version != Some(1);
    for h in answer.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| format!("Content-Length {value:?} is not a length"))?;
            if length.is_some_and(|m| m != n) {
                return Err("two different Content-Lengths".into());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // The agent's server never encodes its answers.
            return Err(format!("Transfer-Encoding {value:?} is not supported"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= value.eq_ignore_ascii_case("close");
        }
    }
    Ok(Some(Head {
        status: answer.code.unwrap_or_default(),
        len,
        length,
        reusable: !close,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread;

    /// What [`serve`] gives a test.
    struct Served {
        client: Client,
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
                let (mut conn, _) = listener.accept().unwrap();
                for answer in conn_answers {
                    let mut buf = [0u8; 4096];
                    let n = conn.read(&mut buf).unwrap();
                    seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    conn.write_all(answer).unwrap();
                }
                drop(conn);
                let _ = tx.send(());
            }
            seen
        });
        Served {
            client: Client::new(addr, Duration::from_secs(1), 1 << 20),
            server,
            closed,
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn requests_share_one_connection_and_bodies_are_sent_with_their_length() {
        let ok: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let missing: &[u8] =
            b"HTTP/1.1 404 OK\r\nContent-Length: 24\r\n\r\n{\"error\":\"{ Not Found }\"}";
        let Served { client, server, .. } = serve(vec![vec![ok, missing]]);
        let a = client
            .send("POST", "/vm", Some(b"{\"a\":1}"), SECOND)
            .unwrap();
        assert_eq!(
            a,
            Answer {
                status: 200,
                body: b"{}".to_vec()
            }
        );
        let b = client.send("GET", "/vm/x/y", None, SECOND).unwrap();
        assert_eq!(b.status, 404);
        assert_eq!(b.body.len(), 24);
        let seen = server.join().unwrap();
        assert!(seen[0].starts_with("POST /vm HTTP/1.1\r\n"), "{}", seen[0]);
        assert!(
            seen[0].contains("Content-Length: 7\r\n") && seen[0].ends_with("\r\n\r\n{\"a\":1}")
        );
        assert!(
            seen[1].starts_with("GET /vm/x/y HTTP/1.1\r\n") && !seen[1].contains("Content-Length")
        );
    }

    #[test]
    fn a_kept_connection_the_agent_closed_is_replaced() {
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        // The first connection serves one request, then closes while idle.
        let s = serve(vec![vec![ok], vec![ok]]);
        s.client.send("GET", "/a", None, SECOND).unwrap();
        s.closed.recv_timeout(SECOND).unwrap();
        assert_eq!(
            s.client.send("GET", "/b", None, SECOND).unwrap().status,
            200
        );
        assert_eq!(s.server.join().unwrap().len(), 2);
    }

    #[test]
    fn broken_answers_say_what_broke() {
        for (answer, words) in [
            (
                &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\""[..],
                "closed after 4 of the answer's 10 bytes",
            ),
            (b"garbage\r\n\r\n", "not an HTTP answer"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                "is not a length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                "not supported",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
                "more than the",
            ),
            (
                b"HTTP/1.1 200",
                "closed after 12 bytes of the answer's head",
            ),
        ] {
            let Served { client, server, .. } = serve(vec![vec![answer]]);
            let e = client.send("GET", "/", None, SECOND).unwrap_err();
            assert!(e.contains(words), "{words}: {e}");
            server.join().unwrap();
        }
    }

    #[test]
    fn an_answer_without_length_ends_with_the_connection() {
        let Served { client, server, .. } = serve(vec![vec![b"HTTP/1.0 200 OK\r\n\r\n{\"x\": 1}"]]);
        let a = client.send("GET", "/", None, SECOND).unwrap();
        assert_eq!(a.body, b"{\"x\": 1}");
        assert!(client.conn.borrow().is_none());
        server.join().unwrap();
    }

    #[test]
    fn a_silent_agent_times_out_and_a_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = Client::new(listener.local_addr().unwrap(), SECOND, 1 << 20);
        let e = client
            .send("GET", "/", None, Duration::from_millis(50))
            .unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let e = Client::new(addr, SECOND, 1 << 20)
            .send("GET", "/", None, SECOND)
            .unwrap_err();
        assert!(e.contains("connecting") && e.contains("refused"), "{e}");
    }
}
