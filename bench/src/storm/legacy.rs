//! Section 9's legacy policy: a model of the legacy Go CNI's requests (only its requests: it
//! makes no interfaces), and the record of one call that every policy's calls share.

use crate::context::NODE_ATTACHMENTS;
use crate::measure::CniEnv;

use contrail_testkit::{PodSpec, Sim, exchange};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The legacy Go CNI's poll-timeout: the pause after a poll that found nothing.
const LEGACY_PERIOD: Duration = Duration::from_secs(3);

/// One call: when it ran, whether it worked, and what it printed when it did not.
pub(crate) struct Done {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) ok: bool,
    pub(crate) said: String,
}

/// The legacy Go CNI's requests for one pod (`vrouter.go`: `PollVmCfg`, `Add`, `PollVm`, `Del`),
/// on one kept-alive connection as Go's HTTP client keeps it.
pub(crate) struct Legacy<'a> {
    sim: &'a Sim,
    pod: &'a PodSpec,
    container_id: String,
    netns: String,
    conn: Option<std::io::BufReader<std::net::TcpStream>>,
}

impl<'a> Legacy<'a> {
    pub(crate) fn new(sim: &'a Sim, pod: &'a PodSpec, sandbox: &CniEnv) -> Legacy<'a> {
        Legacy {
            sim,
            pod,
            container_id: sandbox.container_id.clone(),
            netns: sandbox.netns.clone(),
            conn: None,
        }
    }

    fn request(&mut self, method: &str, path: &str, body: Option<&Value>) -> (bool, Value) {
        let conn = self.conn.get_or_insert_with(|| self.sim.connect());
        let (status, body) = exchange(conn, method, path, body);
        (
            status.split(' ').nth(1) == Some("200"),
            serde_json::from_str(&body).unwrap_or(Value::Null),
        )
    }

    /// Attachment `k`'s ADD or DEL.
    pub(crate) fn call(&mut self, command: &str, k: usize) -> Done {
        let start = Instant::now();
        let ok = match command {
            "ADD" => self.add(k),
            _ => {
                let path = format!("/vm/{}", self.pod.uuid);
                self.request("DELETE", &path, None).0
            }
        };
        Done {
            start,
            end: Instant::now(),
            ok,
            said: String::new(),
        }
    }

    fn add(&mut self, k: usize) -> bool {
        let deadline = Instant::now() + LEGACY_PERIOD * 20;
        let vm_name = self.pod.vm_name();
        // PollVmCfg: until every VMI of the pod is there.
        let vmis = loop {
            let (ok, cfg) = self.request("GET", &format!("/vm-cfg/{vm_name}"), None);
            let known = cfg.as_array().map_or(0, Vec::len);
            if ok && known == self.pod.vmis.len() {
                break cfg;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(LEGACY_PERIOD);
        };
        let vmi = &self.pod.vmis[k];
        let vn = vmis
            .as_array()
            .and_then(|a| a.iter().find(|v| v["id"] == vmi.uuid.as_str()))
            .map_or(Value::Null, |v| v["vn-id"].clone());
        let ifname = NODE_ATTACHMENTS[k].0;
        let body = json!({
            "time": "0", "vm-id": self.container_id, "vm-uuid": self.pod.uuid,
            "vm-name": vm_name, "host-ifname": format!("tapl{:011x}", k), "vm-ifname": ifname,
            "vm-namespace": self.netns, "vn-uuid": vn, "vmi-uuid": vmi.uuid,
        });
        if !self.request("POST", "/vm", Some(&body)).0 {
            return false;
        }
        // PollVm: at once, then every poll-timeout.
        let path = format!("/vm/{}/{}", self.pod.uuid, vmi.uuid);
        loop {
            if self.request("GET", &path, None).0 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(LEGACY_PERIOD);
        }
    }
}
