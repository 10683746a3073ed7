//! With `--dpdk`: a stand-in for vrouter-dpdk's side of each vhost-user (PMD) port.
//!
//! vrouter-dpdk connects, as a unix stream client, to `<vr_socket_dir>/uvh_vif_<system-name>`
//! (tf-vrouter `dpdk/vr_uvhost_msg.c`): the application in the pod is the vhost-user server, it
//! creates and listens on the socket. While the socket is missing, vrouter-dpdk retries every
//! 5 s; when the application goes away, it connects again; it never unlinks the socket file in
//! this mode (`vr_uvhost_client.c`). It copies at most 107 bytes of the path into `sun_path`:
//! a longer path is silently truncated, and so it is here. The stand-in only connects and
//! reads what the application sends (the vhost-user master's first messages); it never answers.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::net::Shutdown;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

/// What vrouter-dpdk copies of a socket path into `sun_path` (108 bytes, NUL-terminated).
const SUN_PATH_MAX: usize = 107;

/// The stand-ins, one per PMD port, keyed by VMI.
pub(crate) struct Vhost {
    dir: PathBuf,
    retry: Duration,
    ports: Mutex<BTreeMap<String, Arc<StandIn>>>,
}

struct StandIn {
    system_name: String,
    /// `<dir>/uvh_vif_<system-name>`, as vrouter-dpdk builds it.
    wanted: PathBuf,
    /// What it connects to: `wanted`, cut at 107 bytes.
    path: PathBuf,
    link: Mutex<Link>,
    wake: Condvar,
}

#[derive(Default)]
struct Link {
    /// The port was deleted: the thread ends, the connection is closed.
    stop: bool,
    connected: bool,
    /// connect() calls so far.
    attempts: u64,
    /// Successful ones.
    connects: u64,
    /// Bytes the application sent on its connections.
    received: u64,
    /// The last connect() error.
    error: Option<String>,
    /// A handle on the open connection, to shut it down on stop.
    stream: Option<UnixStream>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Vhost {
    pub(crate) fn new(dir: PathBuf, retry: Duration) -> Vhost {
        Vhost {
            dir,
            retry,
            ports: Mutex::new(BTreeMap::new()),
        }
    }

    /// The PMD port `vmi` is registered under `system_name`: its stand-in starts connecting (a
    /// registration update under the same name keeps the one it has).
    pub(crate) fn attach(&self, vmi: &str, system_name: &str) {
        let mut ports = lock(&self.ports);
        if ports.get(vmi).is_some_and(|s| s.system_name == system_name) {
            return;
        }
        if let Some(old) = ports.remove(vmi) {
            old.stop();
        }
        let wanted = self.dir.join(format!("uvh_vif_{system_name}"));
        let bytes = wanted.as_os_str().as_bytes();
        let path = PathBuf::from(OsStr::from_bytes(&bytes[..bytes.len().min(SUN_PATH_MAX)]));
        let standin = Arc::new(StandIn {
            system_name: system_name.to_owned(),
            wanted,
            path,
            link: Mutex::new(Link::default()),
            wake: Condvar::new(),
        });
        let (run, retry) = (Arc::clone(&standin), self.retry);
        thread::spawn(move || run.run(retry));
        ports.insert(vmi.to_owned(), standin);
    }

    /// The port is gone: its stand-in disconnects and stops (the socket file stays).
    pub(crate) fn detach(&self, vmi: &str) {
        if let Some(standin) = lock(&self.ports).remove(vmi) {
            standin.stop();
        }
    }

    /// `GET /sim/vhost`.
    pub(crate) fn report(&self) -> Value {
        let ports = lock(&self.ports);
        let each = ports.iter().map(|(vmi, s)| {
            let link = lock(&s.link);
            json!({
                "vmi-uuid": vmi, "system-name": s.system_name,
                "path": s.path.display().to_string(), "truncated": s.path != s.wanted,
                "connected": link.connected, "attempts": link.attempts,
                "connects": link.connects, "bytes-received": link.received,
                "error": link.error,
            })
        });
        each.collect()
    }
}

impl StandIn {
    fn stop(&self) {
        let mut link = lock(&self.link);
        link.stop = true;
        if let Some(stream) = &link.stream {
            // Wakes the reader with an end of file; the application sees the disconnect.
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.wake.notify_all();
    }

    /// Connects, holds the connection while the application keeps it, and tries again every
    /// `retry` while the socket is missing or after the application went away.
    fn run(&self, retry: Duration) {
        loop {
            {
                let mut link = lock(&self.link);
                if link.stop {
                    return;
                }
                link.attempts += 1;
            }
            let connected = UnixStream::connect(&self.path);
            let stream = {
                let mut link = lock(&self.link);
                match connected {
                    _ if link.stop => return,
                    Ok(stream) => {
                        link.connected = true;
                        link.connects += 1;
                        link.error = None;
                        link.stream = stream.try_clone().ok();
                        Some(stream)
                    }
                    Err(e) => {
                        link.error = Some(e.to_string());
                        None
                    }
                }
            };
            if let Some(stream) = stream {
                eprintln!("vhost: connected to {}", self.path.display());
                self.drain(stream);
                eprintln!("vhost: {} disconnected", self.path.display());
            }
            let link = lock(&self.link);
            let (link, _) = self
                .wake
                .wait_timeout_while(link, retry, |l| !l.stop)
                .unwrap_or_else(PoisonError::into_inner);
            if link.stop {
                return;
            }
        }
    }

    /// Reads what the application sends until it closes the connection (or stop shuts it).
    fn drain(&self, mut stream: UnixStream) {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => lock(&self.link).received += n as u64,
            }
        }
        let mut link = lock(&self.link);
        link.connected = false;
        link.stream = None;
    }
}
