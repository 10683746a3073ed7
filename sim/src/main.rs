//! Stand-in for the Tungsten Fabric vRouter agent's port-IPC REST API, for tests.
//!
//! It follows the agent's port-IPC contract (docs/simulator.md; the agent's
//! `port_ipc/rest_server.cc` and `port_ipc_handler.cc`) so that a plugin that works against it
//! works unchanged against the real agent: same paths, status codes, bodies, UUID ordering,
//! kept-alive connections, and an IP configuration that exists only once the port was
//! registered with `POST /vm`. The only additions are under `/sim/`, which the plugin never
//! calls: `GET /sim/ports`, the registered ports, each with `sim-registered-ns`, when it was
//! registered on the node's CLOCK_MONOTONIC, and `sim-ip-answered-ns`, when a `GET
//! /vm/<vm-uuid>/<vmi-uuid>` first answered 200 for that registration, and `sim-ip-misses` and
//! `sim-ip-missed-ns`, how many answered 404 before it and when the last one came (for the
//! benchmark's readiness lag), `GET /sim/stats`, `{"requests": N}`, every request served so far but the
//! `/sim/` ones, `GET /sim/requests`, the same by method, route and status
//! (`{"GET /vm/<vm-uuid>/<vmi-uuid> 404": n, ...}`; for the benchmark's request counts),
//! `GET /sim/violations`, the requests a nested node must never send that it received,
//! `GET /sim/kube-manager`, how kube-manager read the networks annotation of each pod the pod
//! file gives by its annotation (`kube_manager.rs`: which entries got a VMI, which were skipped
//! and why),
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
//! `POST /port`, `GET /port/<vmi>` and `DELETE /port/<vmi>` are the agent's Nova path
//! (`port.rs`): the registration a vhost-user port needs on a DPDK vRouter. Each route's DELETE
//! drops only its own registrations; one VMI through both routes is a violation. With `--dpdk`,
//! a vrouter-dpdk stand-in connects to each such port's socket (`vhost.rs`, `GET /sim/vhost`).
//!
//! Usage: `contrail-agent-sim --help`.
//!
//! The fault switches make requests whose method is METHOD and whose path starts with
//! PATH_PREFIX misbehave, the first matching switch winning: `--fail` answers STATUS with an
//! agent-style error body (`{"error":"..."}`); `--flaky` answers 500 to the first N matching
//! requests only, as a briefly busy agent would; `--not-yet` answers 404 (the agent's "not there
//! yet") to the first N matching requests only, so that a wait is sure to wait; `--hang` reads the request and never answers, holding the
//! connection until the client gives up; `--garbage` answers 200 with malformed JSON;
//! `--truncate` answers 200 with half of the real answer's body under its full Content-Length,
//! then closes (the request still takes effect, as when an answer is cut off on the way);
//! `--respond` answers STATUS with the exact bytes of FILE (read at start), for hostile
//! answers crafted by tests; `--raw` sends the exact bytes of FILE as the whole answer, status
//! line and headers included (for HTTP quirks), then serves the connection's next request as
//! if the answer had been well-formed (whatever its headers say). `--delay-ms` delays every
//! answer.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use std::{process, thread};

mod cli;
mod db;
mod http;
mod kube_api;
mod kube_manager;
mod pods;
mod port;
mod vhost;
mod vmi_spec;

use cli::{Fault, Rule, parse_args};
use http::{Request, serve};
use pods::{Pod, Vmi, is_name, is_uuid, load_pods};

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

/// The two ways to register a port: `POST /vm` (the CNI's) and `POST /port` (Nova's). The
/// agent keeps them apart: each route's DELETE drops only its own registrations.
#[derive(Clone, Copy, PartialEq)]
enum Route {
    Vm,
    Port,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Vm => "POST /vm",
            Route::Port => "POST /port",
        }
    }
}

/// A registered port: its record per route (as POSTed or reloaded; the `POST /port` one as the
/// agent keeps it), and since when the VMI is registered (a POST for a VMI registered already
/// updates the record, not the time). Times are on CLOCK_MONOTONIC, which other processes can
/// read too. A VMI registered through both routes is a contract violation.
struct Port {
    by_vm: Option<Value>,
    by_port: Option<Value>,
    since_ns: u64,
    /// When its config work ended: its IP configuration exists from then (see [`db`]).
    ready_ns: Option<u64>,
    /// When a `GET /vm/<vm-uuid>/<vmi-uuid>` first answered 200 for this registration: the
    /// benchmark splits an ADD's readiness lag there.
    answered_ns: Option<u64>,
    /// The `GET /vm/<vm-uuid>/<vmi-uuid>` that answered 404 for this registration before that:
    /// how many, and when the last one came (the benchmark's floor of the poll that saw it).
    misses: u64,
    missed_ns: Option<u64>,
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
    fn new(since_ns: u64) -> Port {
        Port {
            by_vm: None,
            by_port: None,
            since_ns,
            ready_ns: None,
            answered_ns: None,
            misses: 0,
            missed_ns: None,
        }
    }

    fn record(&mut self, route: Route) -> &mut Option<Value> {
        match route {
            Route::Vm => &mut self.by_vm,
            Route::Port => &mut self.by_port,
        }
    }

    /// The interface it was registered under: `host-ifname` (`POST /vm`) or `system-name`.
    fn system_name(&self) -> &str {
        let vm = self.by_vm.as_ref().map(|b| str_field(b, "host-ifname"));
        let port = self.by_port.as_ref().map(|b| str_field(b, "system-name"));
        vm.or(port).flatten().unwrap_or_default()
    }

    /// What `GET` answers as `vhostuser-mode`: the agent's default 0, or what `POST /port` said.
    fn vhostuser_mode(&self) -> Value {
        match (&self.by_vm, &self.by_port) {
            (None, Some(b)) => b["vhostuser-mode"].clone(),
            _ => 0.into(),
        }
    }

    /// The port as `GET /sim/ports` lists it: one entry per route that registered it, with
    /// `sim-route`; on a DPDK node, with `sim-transport` (`pmd` for a `POST /port` VM port, a
    /// vhost-user socket; `af-packet` for `POST /vm`, a kernel device).
    fn listed(&self, dpdk: bool) -> Vec<Value> {
        let each = [(Route::Vm, &self.by_vm), (Route::Port, &self.by_port)];
        let each = each.into_iter().filter_map(|(route, body)| {
            let mut v = body.clone()?;
            v["sim-route"] = route.name().into();
            if dpdk {
                let pmd = route == Route::Port && v["type"] == 0;
                v["sim-transport"] = if pmd { "pmd" } else { "af-packet" }.into();
            }
            v["sim-registered-ns"] = self.since_ns.into();
            if let Some(ns) = self.ready_ns {
                v["sim-ip-ready-ns"] = ns.into();
            }
            if let Some(ns) = self.answered_ns {
                v["sim-ip-answered-ns"] = ns.into();
            }
            v["sim-ip-misses"] = self.misses.into();
            if let Some(ns) = self.missed_ns {
                v["sim-ip-missed-ns"] = ns.into();
            }
            Some(v)
        });
        each.collect()
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
        ["", "port"] => "/port",
        ["", "port", _] => "/port/<vmi-uuid>",
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
    /// Requests that break the agent's contract, for `GET /sim/violations`: what a nested node
    /// must never send (`POST /vm` or `POST /port` for a nested VMI, `DELETE /vm` of a nested
    /// pod), a VMI registered through both `POST /vm` and `POST /port`, a `POST /port` whose
    /// uuid fields the agent takes as the nil uuid.
    violations: Vec<Value>,
}

struct Sim {
    pods: Vec<Pod>,
    rules: Vec<Rule>,
    delay: Duration,
    state_dir: Option<PathBuf>,
    /// `--ports-dir`: where `POST /port` records go, as in the agent's ports directory.
    ports_dir: Option<PathBuf>,
    /// `--dpdk`: the vrouter-dpdk stand-ins of the PMD ports.
    vhost: Option<vhost::Vhost>,
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

    /// A registration through `route` from `at` on (an update of that route's record if the
    /// VMI is registered already): a new port's config work falls due after its controller
    /// delay. A VMI registered through both routes is recorded as a violation.
    fn registered(&self, st: &mut State, vmi: &str, route: Route, body: Value, at: u64) {
        if !st.ports.contains_key(vmi) {
            let mut spec = self.pods.iter().flat_map(|p| &p.vmis);
            if let Some(v) = spec.find(|v| v.spec.uuid == vmi) {
                st.db.due(vmi, at + v.ip_delay());
            }
        }
        let port = st.ports.entry(vmi.to_owned()).or_insert(Port::new(at));
        let other = if route == Route::Vm {
            &port.by_port
        } else {
            &port.by_vm
        };
        if other.is_some() {
            let (this, other) = (
                route.name(),
                if route == Route::Vm {
                    Route::Port
                } else {
                    Route::Vm
                },
            );
            st.violations.push(json!({"request": this, "vmi-uuid": vmi,
                "registered-by": other.name(),
                "why": "one VMI registered through both POST /vm and POST /port"}));
        }
        *st.ports.get_mut(vmi).expect("just inserted").record(route) = Some(body);
    }

    /// A route's registration of `vmi` is gone; the port with it once no route holds it.
    fn unregistered(st: &mut State, vmi: &str, route: Route) {
        if let Some(port) = st.ports.get_mut(vmi) {
            *port.record(route) = None;
            if port.by_vm.is_none() && port.by_port.is_none() {
                st.ports.remove(vmi);
                st.db.cancel(vmi);
            }
        }
    }

    /// The fault switch, if any, that applies to a request; a --flaky switch applies only
    /// while it has failures left, and spends one.
    fn fault(&self, method: &str, path: &str) -> Option<&Fault> {
        let rule = self.rules.iter().find(|r| {
            let matches = r.method == method && path.starts_with(&r.prefix);
            matches
                && match &r.fault {
                    Fault::Flaky(left, _) => left
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
            ("POST", ["", "port"]) => self.register_port(st, at, body),
            ("GET", ["", "port", vmi]) if is_uuid(vmi) => self.port_oper(st, at, vmi),
            ("DELETE", ["", "port", vmi]) if is_uuid(vmi) => Ok(self.deregister_port(st, vmi)),
            // The agent's router answers this for every path no handler matches.
            _ => Err((404, "Unknown Request".into())),
        }
    }

    /// The simulator's own routes (`/sim/...`), outside the agent's schedule.
    fn sim_route(&self, method: &str, path: &str) -> Reply {
        let mut st = self.lock();
        Self::place_until(&mut st, monotonic_ns());
        match (method, path) {
            ("GET", "/sim/ports") => {
                let dpdk = self.vhost.is_some();
                Ok(st.ports.values().flat_map(|p| p.listed(dpdk)).collect())
            }
            ("GET", "/sim/vhost") => self
                .vhost
                .as_ref()
                .map(vhost::Vhost::report)
                .ok_or_else(|| (404, "start the simulator with --dpdk".into())),
            ("GET", "/sim/stats") => Ok(json!({"requests": self.served.load(Ordering::SeqCst)})),
            ("GET", "/sim/requests") => {
                let by = self
                    .served_by
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                Ok(json!(*by))
            }
            ("GET", "/sim/violations") => Ok(st.violations.clone().into()),
            // How kube-manager read the annotations of the pods given by theirs.
            ("GET", "/sim/kube-manager") => Ok(self
                .pods
                .iter()
                .filter_map(|p| {
                    let mut report = p.kube_manager.clone()?;
                    report["pod"] = p.vm_name.clone().into();
                    Some(report)
                })
                .collect()),
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
        // The whole-pod form answers only once every VMI of the pod is ready.
        if wanted.is_empty() || !wanted.iter().all(|v| v.ip_ready(Self::ready(st, v), at)) {
            if let Some(p) = vmi.and_then(|u| st.ports.get_mut(u))
                && p.answered_ns.is_none()
            {
                p.misses += 1;
                p.missed_ns = Some(at);
            }
            return Err(not_found());
        }
        let answer = wanted.iter().map(|v| v.oper_json(pod, port(v))).collect();
        if let Some(p) = vmi.and_then(|u| st.ports.get_mut(u)) {
            p.answered_ns.get_or_insert(at);
        }
        Ok(answer)
    }

    /// When the interface entry of `v` came to exist, if it did.
    fn ready(st: &State, v: &Vmi) -> Option<u64> {
        match (v.nested(), st.ports.get(&v.spec.uuid)) {
            (true, None) => st.nested_ready.get(&v.spec.uuid).copied(),
            // Registered, a nested VMI became a tap on this hypervisor (`VM_ON_TAP`), which
            // does not exist: it has no interface entry any more.
            (true, Some(_)) => None,
            (false, p) => p.and_then(|p| p.ready_ns),
        }
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
        self.registered(st, &vmi, Route::Vm, port, at);
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
            // Only what POST /vm registered: a POST /port registration stays.
            for v in self.pods[i].vmis.iter().filter(|v| v.configured(age)) {
                Self::unregistered(st, &v.spec.uuid, Route::Vm);
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

fn die(msg: &str) -> ! {
    eprintln!("contrail-agent-sim: {msg}");
    process::exit(2)
}

fn main() {
    let (args, rules) = parse_args();
    let (pods, cluster) = load_pods(&args.pods, &args.node_name).unwrap_or_else(|e| die(&e));
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
    if let Some(kube_api) = &args.kube_api {
        let listener = TcpListener::bind(kube_api)
            .unwrap_or_else(|e| die(&format!("cannot listen on {kube_api}: {e}")));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| die(&e.to_string()));
        let tls = args
            .kube_api_tls
            .as_deref()
            .map(|dir| kube_api::tls_config(dir).unwrap_or_else(|e| die(&e)));
        println!("kube-api listening on {addr}");
        let cluster = Arc::new(cluster);
        thread::spawn(move || cluster.serve(listener, tls));
    }
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
        ports_dir: args.ports_dir.clone(),
        vhost: args.dpdk.then(|| {
            let retry = Duration::from_millis(args.vhost_retry_ms);
            vhost::Vhost::new(args.vr_socket_dir.clone(), retry)
        }),
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
    // The agent's order (`PortIpcHandler::ReloadAllPorts`): its own `POST /port` copies, then
    // the files of the state directory's pod directories.
    if let Some(dir) = &args.ports_dir {
        sim.reload_nova_ports(dir, origin);
    }
    {
        let mut st = sim.lock();
        for (vmi, port) in ports {
            sim.registered(&mut st, &vmi, Route::Vm, port, origin);
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
