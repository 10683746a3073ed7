//! HTTP/1.1 as the agent's sessions speak it, and the fault switches' misbehaviour.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::thread;

use super::{
    Fault, GARBAGE, IO_TIMEOUT, MAX_BODY, MAX_HEAD, Sim, error_body, route_of, sleep_until,
    status_message,
};

// ---------------------------------------------------------------- HTTP

pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) body: Vec<u8>,
}

/// Reads one request; `Ok(None)` when the peer closed without sending anything, `Err`
/// with the status to answer when the request is malformed.
pub(crate) fn read_request(r: &mut impl BufRead) -> Result<Option<Request>, u16> {
    let mut lines = Vec::new();
    let mut used = 0;
    loop {
        let mut line = Vec::new();
        let limit = (MAX_HEAD - used) as u64;
        let n = r
            .by_ref()
            .take(limit)
            .read_until(b'\n', &mut line)
            .map_err(|_| 400u16)?;
        if n == 0 && used == 0 {
            return Ok(None);
        }
        used += n;
        // Covers EOF mid-head and a head larger than MAX_HEAD alike.
        let Some(line) = line.strip_suffix(b"\n") else {
            return Err(400);
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        lines.push(String::from_utf8(line.to_vec()).map_err(|_| 400u16)?);
    }
    let (request_line, headers) = lines.split_first().ok_or(400u16)?;
    let [method, path, version] = request_line.split(' ').collect::<Vec<_>>()[..] else {
        return Err(400);
    };
    let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    if !method_ok || !path.starts_with('/') || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(400);
    }
    let mut length = None;
    for header in headers {
        let (name, value) = header.split_once(':').ok_or(400u16)?;
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(400); // The agent's clients send Content-Length; no chunking here.
        }
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value.trim().parse().map_err(|_| 400u16)?;
            if length.is_some_and(|l| l != n) {
                return Err(400);
            }
            length = Some(n);
        }
    }
    let length = length.unwrap_or(0);
    if length > MAX_BODY {
        return Err(413);
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).map_err(|_| 400u16)?;
    let (method, path) = (method.to_owned(), path.to_owned());
    Ok(Some(Request { method, path, body }))
}

/// Serves one connection. Like the agent's HTTP session, it stays open after an answer for
/// the client's next request, until the client closes it (or stays silent past IO_TIMEOUT).
pub(crate) fn serve(sim: &Sim, stream: TcpStream) {
    let connection = sim.connections.fetch_add(1, Ordering::SeqCst);
    // Timeouts are best effort: failing to set one only loses the protection.
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut reader = BufReader::new(&stream);
    while let Some(request) = read_request(&mut reader).transpose() {
        sim.count(&request);
        thread::sleep(sim.delay);
        let req = match request {
            Ok(req) => req,
            Err(status) => {
                sim.tally(format!("malformed {status}"), None);
                eprintln!("- - {status} (malformed request)");
                respond(&stream, status, &error_body(status_message(status)));
                // Unread input would make close() send a reset that can destroy the answer
                // before the client reads it, so swallow a bounded amount of it.
                let _ = stream.shutdown(Shutdown::Write);
                let _ = io::copy(&mut reader.take(2 * MAX_BODY as u64), &mut io::sink());
                return;
            }
        };
        let (method, path) = (req.method.as_str(), req.path.as_str());
        if path.starts_with("/sim/") {
            let (status, body) = match sim.sim_route(method, path) {
                Ok(v) => (200, v.to_string()),
                Err((status, msg)) => (status, error_body(&msg)),
            };
            respond(&stream, status, &body);
            continue;
        }
        let fault = sim.fault(method, path);
        let handled = sim.handle(
            &req,
            connection,
            matches!(fault, None | Some(Fault::Truncate)),
        );
        sleep_until(handled.end);
        let kind = |outcome: &str| format!("{method} {} {outcome}", route_of(path));
        match (fault, handled.answer) {
            (None, Some((status, body, msg))) => {
                sim.tally(kind(&status.to_string()), Some(handled.arrived));
                let msg = if msg.is_empty() {
                    msg
                } else {
                    format!(" ({msg})")
                };
                eprintln!("{method} {path} {status}{msg}");
                respond(&stream, status, &body);
            }
            (fault, answer) => {
                let fault = fault.unwrap_or(&Fault::Hang);
                sim.tally(kind(fault.flag()), Some(handled.arrived));
                let real = answer.map(|(_, body, _)| body).unwrap_or_default();
                if !misbehave(sim, &stream, &req, fault, &real, handled.logged) {
                    return;
                }
            }
        }
    }
}

pub(crate) fn respond(stream: &TcpStream, status: u16, body: &str) {
    respond_raw(stream, status, body.as_bytes(), body.len());
}

/// Sends `body` under a Content-Length of `length`, which only a fault makes differ.
pub(crate) fn respond_raw(mut stream: &TcpStream, status: u16, body: &[u8], length: usize) {
    // The agent says "OK" whatever the code; clients must key on the number only. Its answers
    // carry no Connection header: the connection stays open.
    let head = format!(
        "HTTP/1.1 {status} OK\r\nContent-Type: application/json; charset=UTF-8\r\n\
         Content-Length: {length}\r\n\r\n"
    );
    // The client may already be gone; there is nobody left to tell.
    let _ = stream.write_all(&[head.as_bytes(), body].concat());
}

/// Writes `bytes` until the client stops taking them; how many it took.
pub(crate) fn send_raw(mut stream: &TcpStream, bytes: &[u8]) -> usize {
    let mut sent = 0;
    while sent < bytes.len() {
        match stream.write(&bytes[sent..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => sent += n,
        }
    }
    sent
}

/// Answers a request the way its fault switch says (`real`: the real answer's body, for
/// --truncate; `logged`: its entry in `GET /sim/log`); false when the connection is over.
pub(crate) fn misbehave(
    sim: &Sim,
    stream: &TcpStream,
    req: &Request,
    fault: &Fault,
    real: &str,
    logged: Option<usize>,
) -> bool {
    let (method, path) = (req.method.as_str(), req.path.as_str());
    match fault {
        Fault::Fail(status) => {
            eprintln!("{method} {path} {status} (--fail)");
            respond(stream, *status, &error_body(status_message(*status)));
        }
        Fault::Flaky(_, status) => {
            eprintln!("{method} {path} {status} ({})", fault.flag());
            respond(stream, *status, &error_body(status_message(*status)));
        }
        Fault::Hang => {
            eprintln!("{method} {path} hanging (--hang)");
            // No answer, but no close either: only the client's own timeout gets it out.
            // Reading until the client closes (or resets) frees this thread when it does.
            let _ = stream.set_read_timeout(None);
            let _ = io::copy(&mut &*stream, &mut io::sink());
            return false;
        }
        Fault::Garbage => {
            eprintln!("{method} {path} 200 (--garbage)");
            respond(stream, 200, GARBAGE);
        }
        Fault::Truncate => {
            // The real answer, so the request has its effect; only its delivery fails.
            eprintln!("{method} {path} 200 truncated (--truncate)");
            respond_raw(stream, 200, &real.as_bytes()[..real.len() / 2], real.len());
            // A FIN, not a reset, so the client sees a short body rather than a lost one.
            let _ = stream.shutdown(Shutdown::Write);
            return false;
        }
        Fault::Respond(status, body) => {
            eprintln!("{method} {path} {status} (--respond, {} bytes)", body.len());
            respond_raw(stream, *status, body, body.len());
        }
        Fault::Raw(bytes) => {
            eprintln!("{method} {path} (--raw, {} bytes)", bytes.len());
            let sent = send_raw(stream, bytes);
            // How much of it went out before the client closed the connection: one that refuses
            // an answer too large stops reading early.
            sim.note(logged, "raw-sent", sent.into());
            return sent == bytes.len();
        }
    }
    true
}
