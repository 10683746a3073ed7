//! Stand-in for the Tungsten Fabric vRouter agent's port-IPC REST API, for tests.
//!
//! It follows the agent's port-IPC contract (docs/simulator.md; the agent's
//! `port_ipc/rest_server.cc` and `port_ipc_handler.cc`) so that a plugin that works against it
//! works unchanged against the real agent: same paths, status codes, bodies, UUID ordering,
//! kept-alive connections, and an IP configuration that exists only once the port was
//! registered with `POST /vm`. The only additions are under `/sim/`, which the plugin never
//! calls: `GET /sim/ports`, the registered ports, each with `sim-registered-ns`, when it was
//! registered on the node's CLOCK_MONOTONIC, and `sim-ip-answered-ns`, when a `GET
//! /vm/<vm-uuid>/<vmi-uuid>` first answered 200 for that registration (for the benchmark's
//! readiness lag), `GET /sim/stats`, `{"requests": N}`, every request served so far but the
//! `/sim/` ones, `GET /sim/requests`, the same by method, route and status
//! (`{"GET /vm/<vm-uuid>/<vmi-uuid> 404": n, ...}`; for the benchmark's request counts),
//! `GET /sim/violations`, the requests a nested node must never send that it received,
//! `GET /sim/load`, the agent's DB per second (see `db.rs`), and with `--log-requests`,
//! `GET /sim/log`, every request with its arrival time and the connection it came on.
//!
//! With `--exclusion` it models what requests cost the agent (`db.rs`): each holds the agent's
//! DB for a while, and a VMI's IP configuration exists only once its own DB work, queued behind
//! whatever came first, is done. Without it, an IP configuration exists from the end of its
//! `ip-delay-ms`.
//!
//! A VMI with a `vlan-id` is a nested pod's (its node is a VM of this hypervisor's vRouter):
//! `/vm-cfg` carries the tag (and `sub-interface: false`, as the agent's first answers say),
//! its IP configuration is there from config alone, without a registration, and a `POST /vm`
//! for it turns it into a tap that does not exist: it loses its IP configuration.
//!
//! Usage: `agent_sim --help`.
//!
//! The fault switches make requests whose method is METHOD and whose path starts with
//! PATH_PREFIX misbehave, the first matching switch winning: `--fail` answers STATUS with an
//! agent-style error body (`{"error":"..."}`); `--flaky` answers 500 to the first N matching
//! requests only, as a briefly busy agent would; `--hang` reads the request and never answers, holding the
//! connection until the client gives up; `--garbage` answers 200 with malformed JSON;
//! `--truncate` answers 200 with half of the real answer's body under its full Content-Length,
//! then closes (the request still takes effect, as when an answer is cut off on the way);
//! `--respond` answers STATUS with the exact bytes of FILE (read at start), for hostile
//! answers crafted by tests; `--raw` sends the exact bytes of FILE as the whole answer, status
//! line and headers included (for HTTP quirks), then serves the connection's next request as
//! if the answer had been well-formed (whatever its headers say). `--delay-ms` delays every
//! answer.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use std::{process, thread};

use clap::{CommandFactory, FromArgMatches, Parser};

mod db;

const AUTHOR: &str = "/usr/bin/contrail-vrouter-agent";
const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";
const NO_VLAN: u16 = 65535;
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1 << 20;
/// What `--garbage` answers: the start of a /vm-cfg answer, cut off mid-string.
const GARBAGE: &str = r#"[{"id": "b86a"#;
/// Keeps a silent or stuck client from pinning a thread forever.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The POST /vm fields the agent refuses to do without.
const REQUIRED: [&str; 5] = ["vm-uuid", "host-ifname", "vm-name", "vn-uuid", "vmi-uuid"];

// ---------------------------------------------------------------- pod description file

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodFile {
    pods: Vec<PodSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodSpec {
    name: String,
    namespace: String,
    #[serde(default = "default_cluster")]
    cluster: String,
    uuid: String,
    vmis: Vec<VmiSpec>,
}

fn default_cluster() -> String {
    "k8s".into()
}

// Unknown keys are rejected so that a typo in a test fixture fails loudly instead of
// silently dropping, say, a delay.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct VmiSpec {
    uuid: String,
    network: String,
    vn_name: Option<String>,
    vn_uuid: Option<String>,
    mac: String,
    ip: Option<String>,
    gateway: Option<String>,
    dns: Option<String>,
    ip6: Option<String>,
    v6_plen: Option<u8>,
    v6_gateway: Option<String>,
    v6_dns: Option<String>,
    interface: Option<String>,
    #[serde(default)]
    default_gw: bool,
    #[serde(default)]
    cfg_delay_ms: u64,
    #[serde(default)]
    ip_delay_ms: u64,
    /// A nested pod's VMI (its node is a VM of this hypervisor's vRouter): its VLAN tag. Any
    /// 16-bit value, so that tests can hand out tags the plugin must refuse.
    vlan_id: Option<u16>,
}

/// A pod as the agent knows it; `vmis` is sorted by UUID because that is the order in
/// which the agent lists them.
struct Pod {
    uuid: String,
    name: String,
    vm_name: String,
    vmis: Vec<Vmi>,
}

struct Vmi {
    vn_uuid: String,
    vn_name: String,
    annotations: Vec<String>,
    /// v4 address and prefix length split out of the `ip` CIDR.
    v4: Option<(String, u8)>,
    spec: VmiSpec,
}

impl Vmi {
    /// Whether the agent has this VMI's config, `cfg_age` (ns) after the pod was first asked
    /// about.
    fn configured(&self, cfg_age: u64) -> bool {
        cfg_age >= self.spec.cfg_delay_ms * 1_000_000
    }

    /// A nested pod's VMI: a VLAN sub-interface of its node's VMI, which the agent makes from
    /// config alone (`VM_VLAN_ON_VMI`), never from a registration.
    fn nested(&self) -> bool {
        self.spec.vlan_id.is_some()
    }

    /// Whether GET /vm/... may show this VMI at `at`: it needs IPAM, and an interface entry
    /// whose config work ended (`ready`, see [`db`]). A pod's VMI has one only once registered
    /// with POST /vm (config alone never creates one); a nested pod's VMI from config.
    fn ip_ready(&self, ready: Option<u64>, at: u64) -> bool {
        let has_ipam = self.v4.is_some() || self.spec.ip6.is_some();
        ready.is_some_and(|t| t <= at) && has_ipam
    }

    /// `ip-delay-ms` in nanoseconds: the controller's delay before the VMI's config work.
    fn ip_delay(&self) -> u64 {
        self.spec.ip_delay_ms * 1_000_000
    }

    fn cfg_json(&self, vm_uuid: &str) -> Value {
        // `sub-interface` lags behind the tag in the agent (it is computed before the parent
        // is updated): it says false, and a client must key on `vlan-id`.
        json!({
            "id": self.spec.uuid, "vm-uuid": vm_uuid, "vn-id": self.vn_uuid,
            "vn-name": self.vn_name, "mac-address": self.spec.mac,
            "sub-interface": false, "vlan-id": self.spec.vlan_id.unwrap_or(NO_VLAN),
            "annotations": self.annotations,
        })
    }

    /// The answer for a VMI with an interface entry: `system-name` is the host interface it was
    /// registered under, or a nested VMI's display name (`<pod>__<uuid>`).
    fn oper_json(&self, pod: &Pod, port: Option<&Port>) -> Value {
        let system_name = match port {
            Some(port) => str_field(&port.body, "host-ifname")
                .unwrap_or_default()
                .to_string(),
            None => format!("{}__{}", pod.name, self.spec.uuid),
        };
        let vlan = self.spec.vlan_id.unwrap_or(NO_VLAN);
        let Value::Object(mut m) = json!({
            "id": self.spec.uuid, "instance-id": pod.uuid, "vn-id": self.vn_uuid,
            "vm-project-id": NIL_UUID, "mac-address": self.spec.mac,
            "system-name": system_name, "rx-vlan-id": vlan, "tx-vlan-id": vlan,
            "vhostuser-mode": 0, "author": AUTHOR, "time": agent_time(),
        }) else {
            unreachable!("json! object literal")
        };
        let s = &self.spec;
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(v) = value {
                m.insert(key.into(), v);
            }
        };
        put(
            "ip-address",
            self.v4.as_ref().map(|(a, _)| a.as_str().into()),
        );
        put("plen", self.v4.as_ref().map(|&(_, p)| p.into()));
        put("gateway", s.gateway.as_deref().map(Into::into));
        put("dns-server", s.dns.as_deref().map(Into::into));
        put("v6-ip-address", s.ip6.as_deref().map(Into::into));
        put("v6-plen", s.v6_plen.map(Into::into));
        put("v6-gateway", s.v6_gateway.as_deref().map(Into::into));
        put("v6-dns-server", s.v6_dns.as_deref().map(Into::into));
        Value::Object(m)
    }
}

fn load_pods(path: &Path) -> Result<Vec<Pod>, String> {
    let path = path.display();
    let text = fs::read_to_string(path.to_string()).map_err(|e| format!("{path}: {e}"))?;
    let file: PodFile = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let mut seen = HashSet::new();
    let mut pods = Vec::new();
    for spec in file.pods {
        let pod = build_pod(spec).map_err(|e| format!("{path}: {e}"))?;
        // Lookups go by vm-name and by UUID, so each must name one thing only.
        let keys = [&pod.uuid, &pod.vm_name].into_iter();
        for key in keys.chain(pod.vmis.iter().map(|v| &v.spec.uuid)) {
            if !seen.insert(key.clone()) {
                return Err(format!("{path}: {key} appears more than once"));
            }
        }
        pods.push(pod);
    }
    Ok(pods)
}

fn build_pod(spec: PodSpec) -> Result<Pod, String> {
    let PodSpec {
        name,
        namespace,
        cluster,
        uuid,
        vmis,
    } = spec;
    let ctx = format!("pod {namespace}/{name}");
    for (what, value) in [
        ("name", &name),
        ("namespace", &namespace),
        ("cluster", &cluster),
    ] {
        if !is_name(value) {
            return Err(format!("{ctx}: bad {what} {value:?}"));
        }
    }
    if !is_uuid(&uuid) {
        return Err(format!(
            "{ctx}: uuid {uuid:?} is not a lowercase dashed UUID"
        ));
    }
    if vmis.is_empty() {
        return Err(format!("{ctx}: no vmis"));
    }
    let total = vmis.len();
    let names = [cluster.as_str(), namespace.as_str(), name.as_str()];
    let mut built = vmis
        .into_iter()
        .enumerate()
        .map(|(k, s)| {
            build_vmi(s, names, format!("{k}/{total}")).map_err(|e| format!("{ctx}: vmi {k}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    built.sort_by(|a, b| a.spec.uuid.cmp(&b.spec.uuid));
    let vm_name = format!("{cluster}__{namespace}__{name}");
    Ok(Pod {
        uuid,
        name,
        vm_name,
        vmis: built,
    })
}

/// Validates one VMI of the pod named by `[cluster, namespace, name]`; `index` is "k/N".
fn build_vmi(spec: VmiSpec, [cluster, ns, pod]: [&str; 3], index: String) -> Result<Vmi, String> {
    let s = &spec;
    if !is_uuid(&s.uuid) {
        return Err(format!("uuid {:?} is not a lowercase dashed UUID", s.uuid));
    }
    if !is_name(&s.network) {
        return Err(format!("bad network {:?}", s.network));
    }
    if !is_mac(&s.mac) {
        return Err(format!("mac {:?} is not like 02:b8:6a:c0:68:cf", s.mac));
    }
    let vn_name = s
        .vn_name
        .clone()
        .unwrap_or_else(|| format!("default-domain:k8s-{ns}:{}", s.network));
    let vn_uuid = s.vn_uuid.clone().unwrap_or_else(|| derived_uuid(&vn_name));
    if !is_uuid(&vn_uuid) {
        return Err(format!(
            "vn-uuid {vn_uuid:?} is not a lowercase dashed UUID"
        ));
    }
    let v4 = match &s.ip {
        None => None,
        Some(cidr) => Some(
            cidr.split_once('/')
                .and_then(|(a, p)| Some((a.parse::<Ipv4Addr>().ok()?, p.parse::<u8>().ok()?)))
                .filter(|&(_, p)| p <= 32)
                .map(|(a, p)| (a.to_string(), p))
                .ok_or_else(|| format!("ip {cidr:?} is not an IPv4 CIDR like 10.10.0.3/24"))?,
        ),
    };
    check_addr::<Ipv4Addr>("gateway", s.gateway.as_deref(), v4.is_some())?;
    check_addr::<Ipv4Addr>("dns", s.dns.as_deref(), v4.is_some())?;
    check_addr::<Ipv6Addr>(
        "ip6 (plain address, prefix in v6-plen)",
        s.ip6.as_deref(),
        true,
    )?;
    check_addr::<Ipv6Addr>("v6-gateway", s.v6_gateway.as_deref(), s.ip6.is_some())?;
    check_addr::<Ipv6Addr>("v6-dns", s.v6_dns.as_deref(), s.ip6.is_some())?;
    if let Some(p) = s.v6_plen.filter(|&p| p > 128 || s.ip6.is_none()) {
        return Err(format!("v6-plen {p} needs ip6 and must be at most 128"));
    }
    if let Some(i) = s.interface.as_ref().filter(|i| !is_name(i)) {
        return Err(format!("bad interface {i:?}"));
    }
    let project = format!("k8s-{ns}");
    let mut pairs = vec![
        ("cluster", cluster),
        ("kind", "Pod"),
        ("name", pod),
        ("namespace", ns),
        ("network", s.network.as_str()),
        ("owner", "k8s"),
        ("project", project.as_str()),
        ("index", index.as_str()),
    ];
    pairs.extend(s.interface.as_deref().map(|i| ("interface", i)));
    if s.default_gw {
        pairs.push(("default-gw", "true"));
    }
    let annotations = pairs.iter().map(|(k, v)| format!("{{{k}:{v}}}")).collect();
    Ok(Vmi {
        vn_uuid,
        vn_name,
        annotations,
        v4,
        spec,
    })
}

/// Validates an optional address; `allowed` is false when its family has no address.
fn check_addr<T: FromStr>(what: &str, value: Option<&str>, allowed: bool) -> Result<(), String> {
    match value {
        None => Ok(()),
        Some(v) if !allowed => Err(format!("{what} {v:?} given without an address")),
        Some(v) => v
            .parse::<T>()
            .map(drop)
            .map_err(|_| format!("bad {what} {v:?}")),
    }
}

// ---------------------------------------------------------------- small helpers

/// Lowercase hex with dashes, the only UUID spelling the agent's routes accept.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

fn is_mac(s: &str) -> bool {
    s.len() == 17
        && s.bytes().enumerate().all(|(i, b)| match i % 3 {
            2 => b == b':',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// Names end up as URL path segments, directory names and /sys/class/net entries, so
/// anything that could escape a directory or split a request line is refused.
fn is_name(s: &str) -> bool {
    !matches!(s, "" | "." | "..") && !s.chars().any(|c| c == '/' || c.is_whitespace())
}

/// Stable across runs and Rust versions (unlike std's hasher): two FNV-1a passes with
/// different offsets give the 128 bits of a UUID-shaped VN id.
fn derived_uuid(seed: &str) -> String {
    let fnv = |basis: u64| {
        seed.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let hex = format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x8422_2325_cbf2_9ce4)
    );
    let (a, b, c, d, e) = (
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
    );
    format!("{a}-{b}-{c}-{d}-{e}")
}

/// The agent's timestamp format: hours since the epoch, then minutes, seconds, micros.
fn agent_time() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let s = t.as_secs();
    let (h, m, sec, us) = (s / 3600, s / 60 % 60, s % 60, t.subsec_micros());
    format!("{h}:{m:02}:{sec:02}.{us:06}")
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Checks a port record (POST /vm body or state file) the way the agent does, returning
/// the reason for refusing it.
fn check_port(port: &Value) -> Result<(), String> {
    if !port.is_object() {
        return Err("body is not a JSON object".into());
    }
    for key in REQUIRED {
        let value = str_field(port, key).unwrap_or("");
        // The agent parses the UUIDs; the names become paths here and in the agent.
        let ok = if key.ends_with("uuid") {
            is_uuid(value)
        } else {
            is_name(value)
        };
        if !ok {
            return Err(format!("missing or malformed {key} {value:?}"));
        }
    }
    Ok(())
}

/// The agent's error body (`REST::SendErrorResponse`): the message wrapped in a JSON object,
/// which is itself often brace-wrapped text, `{"error":"{ Not Found }"}`.
fn error_body(msg: &str) -> String {
    json!({ "error": msg }).to_string()
}

/// The message the agent sends with a status it answers itself (not a handler's).
fn status_message(status: u16) -> &'static str {
    match status {
        400 => "{ Bad Request }",
        404 => "{ Not Found }",
        413 => "{ Payload Too Large }",
        _ => "{ Internal Server Error }",
    }
}

// ---------------------------------------------------------------- the agent

/// An answer: JSON for 200, or an error status and the message its body carries.
type Reply = Result<Value, (u16, String)>;

fn not_found() -> (u16, String) {
    (404, status_message(404).into())
}

/// How a request matched by a fault switch misbehaves.
#[derive(Clone)]
enum Fault {
    Fail(u16),
    /// Answers 500 to the first N matching requests, then lets them through.
    Flaky(Arc<AtomicUsize>),
    Hang,
    Garbage,
    Truncate,
    Respond(u16, Vec<u8>),
    /// The whole answer, status line and headers included.
    Raw(Vec<u8>),
}

impl Fault {
    /// The switch that made it, for `GET /sim/requests`.
    fn flag(&self) -> &'static str {
        match self {
            Fault::Fail(_) => "--fail",
            Fault::Flaky(_) => "--flaky",
            Fault::Hang => "--hang",
            Fault::Garbage => "--garbage",
            Fault::Truncate => "--truncate",
            Fault::Respond(..) => "--respond",
            Fault::Raw(_) => "--raw",
        }
    }
}

#[derive(Clone)]
struct Rule {
    method: String,
    prefix: String,
    fault: Fault,
}

/// A registered port: the record as POSTed or reloaded, and since when the VMI is registered
/// (a POST for a VMI registered already updates the record, not the time). Times are on
/// CLOCK_MONOTONIC, which other processes can read too.
struct Port {
    body: Value,
    since_ns: u64,
    /// When its config work ended: its IP configuration exists from then (see [`db`]).
    ready_ns: Option<u64>,
    /// When a `GET /vm/<vm-uuid>/<vmi-uuid>` first answered 200 for this registration: the
    /// benchmark splits an ADD's readiness lag there.
    answered_ns: Option<u64>,
}

/// Now on CLOCK_MONOTONIC, the clock of `Instant`, which other processes can read too.
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Port {
    fn new(body: Value, since_ns: u64) -> Port {
        Port {
            body,
            since_ns,
            ready_ns: None,
            answered_ns: None,
        }
    }

    /// The port as `GET /sim/ports` lists it.
    fn listed(&self) -> Value {
        let mut v = self.body.clone();
        v["sim-registered-ns"] = self.since_ns.into();
        if let Some(ns) = self.ready_ns {
            v["sim-ip-ready-ns"] = ns.into();
        }
        if let Some(ns) = self.answered_ns {
            v["sim-ip-answered-ns"] = ns.into();
        }
        v
    }
}

/// Sleeps until `t` on CLOCK_MONOTONIC.
fn sleep_until(t: u64) {
    let now = monotonic_ns();
    if t > now {
        thread::sleep(Duration::from_nanos(t - now));
    }
}

/// The route of a path, its variable segments named: what `GET /sim/requests` counts by.
fn route_of(path: &str) -> &'static str {
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "vm-cfg", _] => "/vm-cfg/<vm-name>",
        ["", "vm"] => "/vm",
        ["", "vm", _] => "/vm/<vm-uuid>",
        ["", "vm", _, _] => "/vm/<vm-uuid>/<vmi-uuid>",
        _ => "<other>",
    }
}

struct State {
    /// Per pod (same index as `Sim::pods`): when a request first named it.
    first_seen: Vec<Option<u64>>,
    /// Registered ports keyed by vmi-uuid.
    ports: BTreeMap<String, Port>,
    /// Nested VMIs whose config work ended (they need no registration), keyed by vmi-uuid.
    nested_ready: BTreeMap<String, u64>,
    /// The agent's DB: the schedule of requests and config work.
    db: db::Db,
    /// Every request with its arrival time, when `--log-requests` asks for it.
    log: Option<Vec<Value>>,
    /// Requests a nested node must never send (`POST /vm` for a nested VMI, `DELETE /vm` of a
    /// nested pod), for `GET /sim/violations`.
    violations: Vec<Value>,
}

struct Sim {
    pods: Vec<Pod>,
    rules: Vec<Rule>,
    delay: Duration,
    state_dir: Option<PathBuf>,
    state: Mutex<State>,
    /// Requests read so far, malformed ones included, the simulator's own (`/sim/`) excluded.
    served: AtomicUsize,
    /// Connections accepted so far: each request's in `GET /sim/log` is numbered by it.
    connections: AtomicUsize,
    /// The same by "METHOD route outcome" (a status, or the fault switch that answered).
    served_by: Mutex<BTreeMap<String, u64>>,
}

impl Sim {
    /// Counts a request for `GET /sim/stats`, unless it is one of the simulator's own.
    fn count(&self, request: &Result<Request, u16>) {
        if !request.as_ref().is_ok_and(|r| r.path.starts_with("/sim/")) {
            self.served.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts a request under `key` ("METHOD route outcome") for `GET /sim/requests`, and for
    /// `GET /sim/load` in the second it `arrived` (a malformed one has no turn in the DB).
    fn tally(&self, key: String, arrived: Option<u64>) {
        if let Some(at) = arrived {
            self.lock().db.tally(at, &key);
        }
        let mut by = self
            .served_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *by.entry(key).or_default() += 1;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicked handler must not take every later request down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Time since a request first named pod `i`, at `at`, starting that clock on the first
    /// one: a nested pod's VMIs need no registration, their config work falls due from then.
    fn age(&self, st: &mut State, i: usize, at: u64) -> u64 {
        let first = *st.first_seen[i].get_or_insert_with(|| {
            for v in self.pods[i].vmis.iter().filter(|v| v.nested()) {
                st.db.due(&v.spec.uuid, at + v.ip_delay());
            }
            at
        });
        at.saturating_sub(first)
    }

    /// Places the config work due by `now`, noting when each VMI's IP configuration exists.
    fn place_until(st: &mut State, now: u64) {
        let State {
            db,
            ports,
            nested_ready,
            ..
        } = st;
        db.place_until(now, |vmi, end| match ports.get_mut(vmi) {
            Some(port) => port.ready_ns = Some(end),
            None => {
                nested_ready.insert(vmi.to_string(), end);
            }
        });
    }

    /// A registration from `at` on: the VMI's config work falls due after its controller delay.
    fn registered(&self, st: &mut State, vmi: &str, body: Value, at: u64) {
        let mut spec = self.pods.iter().flat_map(|p| &p.vmis);
        if let Some(v) = spec.find(|v| v.spec.uuid == vmi) {
            st.db.due(vmi, at + v.ip_delay());
        }
        st.ports.insert(vmi.to_string(), Port::new(body, at));
    }

    /// The fault switch, if any, that applies to a request; a --flaky switch applies only
    /// while it has failures left, and spends one.
    fn fault(&self, method: &str, path: &str) -> Option<&Fault> {
        let rule = self.rules.iter().find(|r| {
            let matches = r.method == method && path.starts_with(&r.prefix);
            matches
                && match &r.fault {
                    Fault::Flaky(left) => left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok(),
                    _ => true,
                }
        });
        rule.map(|r| &r.fault)
    }

    /// A request in the agent's order: its turn in the DB (see [`db`]), then, if `answer`, its
    /// answer as the agent's state stood when the turn began (status, body, the error message
    /// for the log). The answer is due at the turn's end.
    fn handle(&self, req: &Request, connection: usize, answer: bool) -> Handled {
        let mut st = self.lock();
        let arrived = monotonic_ns();
        Self::place_until(&mut st, arrived);
        let (start, end) = st.db.request(arrived);
        let logged = st.log.as_mut().map(|log| {
            let mut entry = json!({"arrived-ns": arrived, "method": req.method, "path": req.path,
                                   "connection": connection});
            if let Ok(body) = serde_json::from_slice::<Value>(&req.body) {
                entry["body"] = body;
            }
            log.push(entry);
            log.len() - 1
        });
        let answer =
            answer.then(
                || match self.route(&mut st, start, &req.method, &req.path, &req.body) {
                    Ok(v) => (200, v.to_string(), String::new()),
                    Err((status, msg)) => (status, error_body(&msg), msg),
                },
            );
        Handled {
            arrived,
            end,
            answer,
            logged,
        }
    }

    /// Adds `key` to the `GET /sim/log` entry `at`.
    fn note(&self, at: Option<usize>, key: &str, value: Value) {
        let mut st = self.lock();
        if let Some(entry) = at.and_then(|i| st.log.as_mut()?.get_mut(i)) {
            entry[key] = value;
        }
    }

    fn route(&self, st: &mut State, at: u64, method: &str, path: &str, body: &[u8]) -> Reply {
        let segments: Vec<&str> = path.split('/').collect();
        match (method, segments.as_slice()) {
            ("GET", ["", "vm-cfg", name]) => self.vm_cfg(st, at, name),
            ("GET", ["", "vm", vm]) if is_uuid(vm) => self.vm_oper(st, at, vm, None),
            ("GET", ["", "vm", vm, vmi]) if is_uuid(vm) && is_uuid(vmi) => {
                self.vm_oper(st, at, vm, Some(*vmi))
            }
            ("POST", ["", "vm"]) => self.register(st, at, body),
            ("DELETE", ["", "vm", vm]) if is_uuid(vm) => Ok(self.deregister(st, at, vm)),
            // The agent's router answers this for every path no handler matches.
            _ => Err((404, "Unknown Request".into())),
        }
    }

    /// The simulator's own routes (`/sim/...`), outside the agent's schedule.
    fn sim_route(&self, method: &str, path: &str) -> Reply {
        let mut st = self.lock();
        Self::place_until(&mut st, monotonic_ns());
        match (method, path) {
            ("GET", "/sim/ports") => Ok(st.ports.values().map(Port::listed).collect()),
            ("GET", "/sim/stats") => Ok(json!({"requests": self.served.load(Ordering::SeqCst)})),
            ("GET", "/sim/requests") => {
                let by = self
                    .served_by
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                Ok(json!(*by))
            }
            ("GET", "/sim/violations") => Ok(st.violations.clone().into()),
            ("GET", "/sim/load") => Ok(st.db.load()),
            ("GET", "/sim/log") => st
                .log
                .clone()
                .map(Value::from)
                .ok_or_else(|| (404, "start the simulator with --log-requests".into())),
            _ => Err((404, "Unknown Request".into())),
        }
    }

    fn vm_cfg(&self, st: &mut State, at: u64, name: &str) -> Reply {
        let i = self
            .pods
            .iter()
            .position(|p| p.vm_name == name)
            .ok_or_else(not_found)?;
        let age = self.age(st, i, at);
        let pod = &self.pods[i];
        let visible = pod.vmis.iter().filter(|v| v.configured(age));
        let cfg: Vec<Value> = visible.map(|v| v.cfg_json(&pod.uuid)).collect();
        if cfg.is_empty() {
            return Err(not_found());
        }
        Ok(cfg.into())
    }

    /// GET /vm/<vm> (`vmi` None) or /vm/<vm>/<vmi>: like the agent's `GetVmVnPort`, which
    /// walks the VMIs it has config for and fails (404) on the first one without an interface
    /// entry, that is, not registered, or without IPAM.
    fn vm_oper(&self, st: &mut State, at: u64, vm: &str, vmi: Option<&str>) -> Reply {
        let i = self
            .pods
            .iter()
            .position(|p| p.uuid == vm)
            .ok_or_else(not_found)?;
        let age = self.age(st, i, at);
        // A nested pod first heard of now may have work due at once.
        Self::place_until(st, at);
        let pod = &self.pods[i];
        let wanted: Vec<&Vmi> = pod
            .vmis
            .iter()
            .filter(|v| v.configured(age) && vmi.is_none_or(|u| v.spec.uuid == u))
            .collect();
        let port = |v: &Vmi| st.ports.get(&v.spec.uuid);
        let ready = |v: &Vmi| match (v.nested(), port(v)) {
            (true, None) => st.nested_ready.get(&v.spec.uuid).copied(),
            // Registered, a nested VMI became a tap on this hypervisor (`VM_ON_TAP`), which
            // does not exist: it has no interface entry any more.
            (true, Some(_)) => None,
            (false, p) => p.and_then(|p| p.ready_ns),
        };
        // The whole-pod form answers only once every VMI of the pod is ready.
        if wanted.is_empty() || !wanted.iter().all(|v| v.ip_ready(ready(v), at)) {
            return Err(not_found());
        }
        let answer = wanted.iter().map(|v| v.oper_json(pod, port(v))).collect();
        if let Some(p) = vmi.and_then(|u| st.ports.get_mut(u)) {
            p.answered_ns.get_or_insert(at);
        }
        Ok(answer)
    }

    /// POST /vm, as the agent's REST handler takes it: `AddVmVnPort(body, check_port=false)`
    /// does not look for the host interface (only a reload at agent start does).
    fn register(&self, st: &mut State, at: u64, body: &[u8]) -> Reply {
        let port: Value = serde_json::from_slice(body)
            .map_err(|e| (500, format!("{{ Invalid Json string ==> {e} }}")))?;
        // Naming a pod starts its delay clocks, even in a request that is refused.
        let (vm, name) = (str_field(&port, "vm-uuid"), str_field(&port, "vm-name"));
        for (i, p) in self.pods.iter().enumerate() {
            if vm == Some(p.uuid.as_str()) || name == Some(p.vm_name.as_str()) {
                self.age(st, i, at);
            }
        }
        check_port(&port).map_err(|e| (500, format!("{{ {e} }}")))?;
        let field = |key| str_field(&port, key).unwrap_or_default();
        if let Some(dir) = &self.state_dir {
            // The agent answers 200 even when it cannot write the file, but then does not
            // register the port (`AddVmVnPortEntry`'s failure is dropped by `AddVmVnPort`).
            if let Err(e) = write_port_file(&dir.join(field("vm-name")), field("vmi-uuid"), &port) {
                eprintln!("POST /vm: writing the port file failed, port not registered: {e}");
                return Ok(json!({}));
            }
        }
        let vmi = field("vmi-uuid").to_owned();
        let nested = self.pods.iter().flat_map(|p| &p.vmis);
        if nested.filter(|v| v.nested()).any(|v| v.spec.uuid == vmi) {
            st.violations
                .push(json!({"request": "POST /vm", "vmi-uuid": vmi}));
        }
        match st.ports.get_mut(&vmi) {
            Some(registered) => registered.body = port,
            None => self.registered(st, &vmi, port, at),
        }
        Ok(json!({}))
    }

    /// DELETE /vm/<vm>: drops the registration of every VMI the agent has config for in that
    /// pod (the agent's `DeleteVmVnPort` walks the pod's config VMIs); 200 `{}` always, also
    /// for a pod it does not know.
    fn deregister(&self, st: &mut State, at: u64, vm: &str) -> Value {
        if let Some(i) = self.pods.iter().position(|p| p.uuid == vm) {
            if self.pods[i].vmis.iter().any(Vmi::nested) {
                st.violations
                    .push(json!({"request": format!("DELETE /vm/{vm}")}));
            }
            let age = self.age(st, i, at);
            for v in self.pods[i].vmis.iter().filter(|v| v.configured(age)) {
                st.ports.remove(&v.spec.uuid);
                st.db.cancel(&v.spec.uuid);
            }
        }
        json!({})
    }
}

/// A request taken in the agent's order ([`Sim::handle`]).
struct Handled {
    arrived: u64,
    /// When its turn in the DB ends: its answer goes out then.
    end: u64,
    answer: Option<(u16, String, String)>,
    /// Its entry in `GET /sim/log`, when requests are logged.
    logged: Option<usize>,
}

/// Writes `<vm_dir>/<vmi>` like the agent: the record plus author and time, never
/// overwriting an existing file, readable by its owner only.
fn write_port_file(vm_dir: &Path, vmi: &str, port: &Value) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(vm_dir)?;
    let mut record: Map<String, Value> = port.as_object().cloned().unwrap_or_default();
    record.insert("author".into(), AUTHOR.into());
    record.insert("time".into(), agent_time().into());
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(vm_dir.join(vmi));
    match file {
        Ok(mut f) => f.write_all(&serde_json::to_vec(&record)?),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// What the agent does on restart: re-register every UUID-named file under `<dir>/*/`; the
/// ports by VMI.
fn reload_ports(dir: &Path) -> BTreeMap<String, Value> {
    let read = |path: &Path| -> Result<Value, String> {
        let bytes = fs::read(path).map_err(|e| e.to_string())?;
        let port: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        check_port(&port)?;
        Ok(port)
    };
    let vm_dirs = fs::read_dir(dir).into_iter().flatten().flatten();
    let files = vm_dirs
        .filter_map(|d| fs::read_dir(d.path()).ok())
        .flatten()
        .flatten();
    let mut ports = BTreeMap::new();
    for file in files.filter(|f| f.file_name().to_str().is_some_and(is_uuid)) {
        match read(&file.path()) {
            Ok(port) => {
                let vmi = str_field(&port, "vmi-uuid").unwrap_or_default().to_owned();
                ports.insert(vmi, port);
            }
            Err(e) => eprintln!("skipping {}: {e}", file.path().display()),
        }
    }
    eprintln!(
        "re-registered {} port(s) from {}",
        ports.len(),
        dir.display()
    );
    ports
}

// ---------------------------------------------------------------- HTTP

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// Reads one request; `Ok(None)` when the peer closed without sending anything, `Err`
/// with the status to answer when the request is malformed.
fn read_request(r: &mut impl BufRead) -> Result<Option<Request>, u16> {
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
fn serve(sim: &Sim, stream: TcpStream) {
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

fn respond(stream: &TcpStream, status: u16, body: &str) {
    respond_raw(stream, status, body.as_bytes(), body.len());
}

/// Sends `body` under a Content-Length of `length`, which only a fault makes differ.
fn respond_raw(mut stream: &TcpStream, status: u16, body: &[u8], length: usize) {
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
fn send_raw(mut stream: &TcpStream, bytes: &[u8]) -> usize {
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
fn misbehave(
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
        Fault::Flaky(_) => {
            eprintln!("{method} {path} 500 (--flaky)");
            respond(stream, 500, &error_body(status_message(500)));
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

// ---------------------------------------------------------------- command line

/// Stand-in for the vRouter agent's port-IPC REST API, for tests. A fault switch makes the
/// requests whose method is METHOD and whose path starts with PATH_PREFIX misbehave; the first
/// matching switch on the command line wins.
#[derive(Parser)]
#[command(name = "agent_sim")]
struct Args {
    /// The pods the agent knows, with their VMIs (like examples/demo-pod.json).
    #[arg(long, value_name = "FILE")]
    pods: PathBuf,
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9091")]
    listen: String,
    /// Write a port file there on registration, and reload them at start, as the agent does.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Delay every answer by N milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    delay_ms: u64,
    /// Model the agent's DB exclusion: each request holds the DB for --request-db-us, each
    /// VMI's config work (after its ip-delay-ms) needs --vmi-db-us of it, first come, first
    /// served; an IP configuration exists from the end of that work.
    #[arg(long)]
    exclusion: bool,
    /// With --exclusion: how long one request holds the agent's DB, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 250, requires = "exclusion")]
    request_db_us: u64,
    /// With --exclusion: how long one VMI's config work holds the agent's DB, in microseconds.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 2000,
        requires = "exclusion"
    )]
    vmi_db_us: u64,
    /// Keep every request with its arrival time, for `GET /sim/log`.
    #[arg(long)]
    log_requests: bool,
    /// Answer STATUS with an agent-style error body.
    #[arg(long, value_name = "METHOD:PATH_PREFIX:STATUS", value_parser = rule_of("--fail"))]
    fail: Vec<Rule>,
    /// Answer 500 to the first N matching requests only, as a briefly busy agent would.
    #[arg(long, value_name = "METHOD:PATH_PREFIX:N", value_parser = rule_of("--flaky"))]
    flaky: Vec<Rule>,
    /// Never answer, holding the connection until the client gives up.
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--hang"))]
    hang: Vec<Rule>,
    /// Answer 200 with malformed JSON.
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--garbage"))]
    garbage: Vec<Rule>,
    /// Answer 200 with half of the real body under its full Content-Length, then close (the
    /// request still takes effect).
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--truncate"))]
    truncate: Vec<Rule>,
    /// Answer STATUS with the exact bytes of FILE (read at start).
    #[arg(long, value_name = "METHOD:PATH_PREFIX:STATUS:FILE", value_parser = rule_of("--respond"))]
    respond: Vec<Rule>,
    /// Send the exact bytes of FILE (read at start) as the whole answer, status line and
    /// headers included, then serve the connection's next request whatever they say; with
    /// --log-requests, `GET /sim/log` notes how many of them went out before the client closed
    /// the connection ("raw-sent").
    #[arg(long, value_name = "METHOD:PATH_PREFIX:FILE", value_parser = rule_of("--raw"))]
    raw: Vec<Rule>,
}

fn rule_of(flag: &'static str) -> impl Fn(&str) -> Result<Rule, String> + Clone + Send + Sync {
    move |s| parse_rule(flag, s).ok_or_else(|| format!("not a {flag} switch"))
}

/// The arguments, and the fault switches in command-line order.
fn parse_args() -> (Args, Vec<Rule>) {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let switches = [
        ("fail", &args.fail),
        ("flaky", &args.flaky),
        ("hang", &args.hang),
        ("garbage", &args.garbage),
        ("truncate", &args.truncate),
        ("respond", &args.respond),
        ("raw", &args.raw),
    ];
    let mut rules: Vec<(usize, Rule)> = switches
        .iter()
        .flat_map(|(id, rules)| {
            let at = matches.indices_of(id).into_iter().flatten();
            at.zip(rules.iter().cloned())
        })
        .collect();
    rules.sort_by_key(|(at, _)| *at);
    (args, rules.into_iter().map(|(_, r)| r).collect())
}

/// `METHOD:PATH_PREFIX`, then `:STATUS` for --fail, `:N` for --flaky, `:STATUS:FILE` for
/// --respond and `:FILE` for --raw. The prefix may itself contain colons: for --respond, it
/// ends at the first `:NNN:`; for --raw, at the last colon (a file path has none here).
fn parse_rule(flag: &str, s: &str) -> Option<Rule> {
    let (method, rest) = s.split_once(':')?;
    let status = |s: &str, min| s.parse().ok().filter(|n| (min..600).contains(n));
    let (prefix, fault) = match flag {
        "--fail" => {
            let (prefix, code) = rest.rsplit_once(':')?;
            (prefix, Fault::Fail(status(code, 400)?))
        }
        "--flaky" => {
            let (prefix, n) = rest.rsplit_once(':')?;
            (
                prefix,
                Fault::Flaky(Arc::new(AtomicUsize::new(n.parse().ok()?))),
            )
        }
        "--respond" => {
            let (prefix, code, file) = rest.match_indices(':').find_map(|(i, _)| {
                let (code, file) = rest[i + 1..].split_once(':')?;
                (code.len() == 3).then_some((&rest[..i], code, file))
            })?;
            let body =
                fs::read(file).unwrap_or_else(|e| die(&format!("--respond {s:?}: {file}: {e}")));
            (prefix, Fault::Respond(status(code, 200)?, body))
        }
        "--raw" => {
            let (prefix, file) = rest.rsplit_once(':')?;
            let bytes =
                fs::read(file).unwrap_or_else(|e| die(&format!("--raw {s:?}: {file}: {e}")));
            (prefix, Fault::Raw(bytes))
        }
        "--hang" => (rest, Fault::Hang),
        "--garbage" => (rest, Fault::Garbage),
        _ => (rest, Fault::Truncate),
    };
    let ok = !method.is_empty() && prefix.starts_with('/');
    ok.then(|| Rule {
        method: method.into(),
        prefix: prefix.into(),
        fault,
    })
}

fn die(msg: &str) -> ! {
    eprintln!("agent_sim: {msg}");
    process::exit(2)
}

fn main() {
    let (args, rules) = parse_args();
    let pods = load_pods(&args.pods).unwrap_or_else(|e| die(&e));
    let ports = args
        .state_dir
        .as_deref()
        .map(reload_ports)
        .unwrap_or_default();
    let listener = TcpListener::bind(&args.listen)
        .unwrap_or_else(|e| die(&format!("cannot listen on {}: {e}", args.listen)));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| die(&e.to_string()));
    // Tests wait for exactly this line to learn the port, so it must not sit in a buffer.
    println!("listening on {addr}");
    io::stdout()
        .flush()
        .unwrap_or_else(|e| die(&format!("stdout: {e}")));
    let origin = monotonic_ns();
    let costs = if args.exclusion {
        db::Costs {
            request: args.request_db_us * 1000,
            work: args.vmi_db_us * 1000,
        }
    } else {
        db::Costs {
            request: 0,
            work: 0,
        }
    };
    if args.exclusion {
        // Answers are due at exact moments of the modelled schedule: no timer slack.
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1) };
    }
    let first_seen = vec![None; pods.len()];
    let sim = Arc::new(Sim {
        pods,
        rules,
        delay: Duration::from_millis(args.delay_ms),
        state_dir: args.state_dir,
        state: Mutex::new(State {
            first_seen,
            ports: BTreeMap::new(),
            nested_ready: BTreeMap::new(),
            db: db::Db::new(costs, origin),
            log: args.log_requests.then(Vec::new),
            violations: Vec::new(),
        }),
        served: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
        served_by: Mutex::new(BTreeMap::new()),
    });
    {
        let mut st = sim.lock();
        for (vmi, port) in ports {
            sim.registered(&mut st, &vmi, port, origin);
        }
    }
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let sim = Arc::clone(&sim);
                thread::spawn(move || serve(&sim, stream));
            }
            Err(e) => eprintln!("accept: {e}"),
        }
    }
}
