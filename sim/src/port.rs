//! `POST /port`, the Nova path (tf-controller `port_ipc_handler.cc`, `AddPortFromJson` and
//! `MakeAddVmiUuidRequest`): a body is checked field by field in the agent's order, and the
//! first failure is the message of the 500 (`{"error":"{ <message> }"}`). The record the agent
//! keeps (and writes to `<ports-dir>/<vmi-uuid>`) is `MakeVmiUuidJson`'s.

use serde_json::{Map, Value, json};
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::{AUTHOR, NIL_UUID, Reply, Route, Sim, State, agent_time, not_found};
use crate::pods::is_uuid;

/// The agent's `kInvalidVlanId`.
const INVALID_VLAN: u32 = 0xFFFF;

/// One port as `MakeAddVmiUuidRequest` takes it.
pub(crate) struct NovaPort {
    /// The VMI, lowercase; the nil uuid when `id` was not one (the agent's `StringToUuid`).
    pub(crate) id: String,
    pub(crate) system_name: String,
    /// `type` 0 (VMPORT, any value but 1 and 2): a PMD port on a DPDK vRouter.
    pub(crate) vm_port: bool,
    /// The record as the agent keeps it.
    pub(crate) record: Value,
    /// UUID fields that were strings but no UUIDs: the agent takes them as the nil uuid.
    pub(crate) nil_taken: Vec<&'static str>,
}

/// A UUID as boost's stream extraction reads it: 36 characters, hex of either case with dashes;
/// anything else is the nil uuid (None).
fn agent_uuid(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    is_uuid(&lower).then_some(lower)
}

/// rapidjson's `IsInt`: an integer that fits in 32 signed bits (not a float, not null).
fn int_member(d: &Value, key: &str) -> Option<i32> {
    d.get(key)?.as_i64().and_then(|n| i32::try_from(n).ok())
}

/// `PortIpcHandler::ValidateMac`: five colons, six hex bytes (`sscanf("%2hhx:...")`, no `x`),
/// not all zero.
fn valid_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    let bytes: Option<Vec<u8>> = parts
        .iter()
        .map(|p| {
            let hex = (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit());
            hex.then(|| u8::from_str_radix(p, 16).ok()).flatten()
        })
        .collect();
    parts.len() == 6 && bytes.is_some_and(|b| b.iter().any(|&x| x != 0))
}

/// `MakeAddVmiUuidRequest`: the port, or the message of the agent's refusal.
pub(crate) fn parse_port(d: &Value) -> Result<NovaPort, String> {
    let mut nil_taken = Vec::new();
    let mut uuid = |key: &'static str| -> Result<String, String> {
        let s = d
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("Invalid or missing data for <{key}>"))?;
        Ok(agent_uuid(s).unwrap_or_else(|| {
            nil_taken.push(key);
            NIL_UUID.to_owned()
        }))
    };
    let id = uuid("id")?;
    let instance = uuid("instance-id")?;
    let vn = uuid("vn-id")?;
    let project = uuid("vm-project-id")?;
    let string = |key: &str| -> Result<&str, String> {
        d.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("Invalid or missing field for <{key}>"))
    };
    let int = |key: &str| {
        int_member(d, key).ok_or_else(|| format!("Invalid or missing field for <{key}>"))
    };
    let display_name = string("display-name")?;
    // Parsed with the error ignored: what is not an address is the unspecified one.
    let ip4: Ipv4Addr = string("ip-address")?
        .parse()
        .unwrap_or(Ipv4Addr::UNSPECIFIED);
    let ip6: Ipv6Addr = string("ip6-address")?
        .parse()
        .unwrap_or(Ipv6Addr::UNSPECIFIED);
    let kind = match int("type")? {
        1 => 1,
        2 => 2,
        _ => 0,
    };
    if kind == 0 && vn == NIL_UUID {
        return Err("Invalid VN uuid".into());
    }
    let system_name = string("system-name")?;
    let mac = string("mac-address")?;
    if !valid_mac(mac) {
        return Err("Invalid MAC, Use xx:xx:xx:xx:xx:xx format".into());
    }
    let rx = int("rx-vlan-id")?;
    let tx = int("tx-vlan-id")?;
    if rx as u32 != INVALID_VLAN && tx as u32 == INVALID_VLAN - 1 {
        return Err("Invalid request. RX (isolated) vlan set, but TX vlan not set".into());
    }
    // Optional (DPDK/vhost-user): anything but an int is 0.
    let vhostuser_mode = int_member(d, "vhostuser-mode").unwrap_or(0);
    let mut record = json!({
        "id": id, "instance-id": instance, "display-name": display_name,
        "ip-address": ip4.to_string(), "ip6-address": ip6.to_string(), "vn-id": vn,
        "vm-project-id": project, "mac-address": mac, "system-name": system_name,
        "type": kind, "rx-vlan-id": rx, "tx-vlan-id": tx, "vhostuser-mode": vhostuser_mode,
    });
    if kind == 2 {
        record["link-state"] = int_member(d, "link-state").unwrap_or(0).into();
    }
    Ok(NovaPort {
        id,
        system_name: system_name.to_owned(),
        vm_port: kind == 0,
        record,
        nil_taken,
    })
}

/// `AddPortFromJson`: the ports of a body (an object, or an array taken all or none), or the
/// 500's message. An array with a bad element is no port at all, yet answered 200.
pub(crate) fn parse_body(body: &[u8]) -> Result<Vec<NovaPort>, String> {
    let text = String::from_utf8_lossy(body);
    let d: Value =
        serde_json::from_slice(body).map_err(|_| format!("Invalid Json string ==> {text}"))?;
    match &d {
        Value::Array(elems) => {
            let all: Result<Vec<NovaPort>, String> = elems
                .iter()
                .map(|e| match e {
                    Value::Object(_) => parse_port(e),
                    _ => Err(format!("Json Array has invalid element ==> {text}")),
                })
                .collect();
            Ok(all.unwrap_or_else(|e| {
                eprintln!("POST /port: array refused, nothing added: {e}");
                Vec::new()
            }))
        }
        Value::Object(_) => parse_port(&d).map(|p| vec![p]),
        _ => Err(format!("Unexpected Json string ==> {text}")),
    }
}

/// Writes `<dir>/<vmi>` like `WriteJsonToFile`: the record plus author and time, never
/// overwriting an existing file.
pub(crate) fn write_file(dir: &Path, port: &NovaPort) -> std::io::Result<()> {
    let path = dir.join(&port.id);
    if path.exists() {
        return Ok(());
    }
    let mut record: Map<String, Value> = port.record.as_object().cloned().unwrap_or_default();
    record.insert("author".into(), AUTHOR.into());
    record.insert("time".into(), agent_time().into());
    fs::write(path, serde_json::to_vec_pretty(&record)?)
}

/// `DeleteVmiUuidEntry`: the file goes with the port (a failure is only logged).
pub(crate) fn remove_file(dir: &Path, vmi: &str) {
    let path = dir.join(vmi);
    if path.is_file()
        && let Err(e) = fs::remove_file(&path)
    {
        eprintln!("DELETE /port: {}: {e}", path.display());
    }
}

/// What the agent does at start: re-add every UUID-named regular file directly under `dir`
/// (on a DPDK vRouter without looking for a kernel device).
pub(crate) fn reload(dir: &Path) -> Vec<NovaPort> {
    let files = fs::read_dir(dir).into_iter().flatten().flatten();
    let mut ports = Vec::new();
    for file in files.filter(|f| f.file_name().to_str().is_some_and(is_uuid)) {
        let path = file.path();
        if !path.is_file() {
            continue;
        }
        let read = fs::read(&path).map_err(|e| e.to_string()).and_then(|b| {
            let d: Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
            parse_port(&d)
        });
        match read {
            Ok(port) => ports.push(port),
            Err(e) => eprintln!("skipping {}: {e}", path.display()),
        }
    }
    eprintln!(
        "re-added {} /port port(s) from {}",
        ports.len(),
        dir.display()
    );
    ports
}

impl Sim {
    /// POST /port: each port of the body registered through [`Route::Port`] (the agent
    /// answers 200 and registers nothing when it cannot write the port's file); on a DPDK
    /// node, a VM port's vrouter-dpdk stand-in starts connecting to its socket.
    pub(crate) fn register_port(&self, st: &mut State, at: u64, body: &[u8]) -> Reply {
        let ports = parse_body(body).map_err(|e| (500, format!("{{ {e} }}")))?;
        for port in ports {
            self.add_port(st, at, port);
        }
        Ok(json!({}))
    }

    fn add_port(&self, st: &mut State, at: u64, port: NovaPort) {
        if !port.nil_taken.is_empty() {
            st.violations.push(json!({"request": "POST /port", "vmi-uuid": port.id,
                "why": format!("not uuids, taken as the nil uuid: {}", port.nil_taken.join(", "))}));
        }
        if let Some(dir) = &self.ports_dir
            && let Err(e) = write_file(dir, &port)
        {
            eprintln!("POST /port: writing the port file failed, port not added: {e}");
            return;
        }
        // Registered under the nil uuid, no request can reach it (`GetPortInfo` refuses it).
        if port.id == NIL_UUID {
            return;
        }
        let nested = self
            .pods
            .iter()
            .flat_map(|p| &p.vmis)
            .filter(|v| v.nested());
        if nested.into_iter().any(|v| v.spec.uuid == port.id) {
            st.violations
                .push(json!({"request": "POST /port", "vmi-uuid": port.id}));
        }
        self.registered(st, &port.id, Route::Port, port.record, at);
        if let Some(vhost) = self.vhost.as_ref().filter(|_| port.vm_port) {
            vhost.attach(&port.id, &port.system_name);
        }
    }

    /// Re-adds the ports of `--ports-dir` at start, as the agent does.
    pub(crate) fn reload_nova_ports(&self, dir: &Path, at: u64) {
        let mut st = self.lock();
        for port in reload(dir) {
            self.add_port(&mut st, at, port);
        }
    }

    /// GET /port/<vmi>: `GetPortInfo`, the VMI's IP configuration as `GET /vm/<vm>/<vmi>`
    /// answers it, whichever route registered it, but the object alone, not in an array.
    pub(crate) fn port_oper(&self, st: &mut State, at: u64, vmi: &str) -> Reply {
        let i = self
            .pods
            .iter()
            .position(|p| p.vmis.iter().any(|v| v.spec.uuid == vmi))
            .ok_or_else(not_found)?;
        let age = self.age(st, i, at);
        Self::place_until(st, at);
        let pod = &self.pods[i];
        let v = pod
            .vmis
            .iter()
            .find(|v| v.spec.uuid == vmi)
            .expect("found above");
        if !v.configured(age) || !v.ip_ready(Self::ready(st, v), at) {
            return Err(not_found());
        }
        let answer = v.oper_json(pod, st.ports.get(vmi));
        if let Some(p) = st.ports.get_mut(vmi) {
            p.answered_ns.get_or_insert(at);
        }
        Ok(answer)
    }

    /// DELETE /port/<vmi>: drops only a `POST /port` registration (with its file and its
    /// stand-in); 200 `{}` always.
    pub(crate) fn deregister_port(&self, st: &mut State, vmi: &str) -> Value {
        Self::unregistered(st, vmi, Route::Port);
        if let Some(dir) = &self.ports_dir {
            remove_file(dir, vmi);
        }
        if let Some(vhost) = &self.vhost {
            vhost.detach(vmi);
        }
        json!({})
    }
}
