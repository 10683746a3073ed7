//! A stand-in for the Kubernetes API server, serving what the meta-plugins ask of it: Multus
//! thin and thick (client-go 0.35) and CNI-Genie (an older client-go). It serves the pods and
//! NetworkAttachmentDefinitions of the pod description file, the very ones the simulator's
//! kube-manager makes the VMIs of (`kube_manager.rs`), so that what a meta-plugin reads and what
//! kube-manager made cannot part ways.
//!
//! HTTP/1.1, plain or (with a TLS configuration, `tls.rs`) HTTPS on the same port, no
//! authentication, JSON answers (client-go takes JSON where it asked for protobuf too). What it
//! serves:
//! - pods: GET one; LIST and WATCH, all or a namespace's, with `fieldSelector`
//!   (`spec.nodeName`, `metadata.name`, `metadata.namespace`); PUT of the pod or its `status`
//!   (JSON, or protobuf as client-go sends it: `proto.rs`), which takes the annotations (and a
//!   JSON body's status), refusing a stale `resourceVersion` with 409 as the API server does;
//!   PATCH (strategic-merge and merge patches: a JSON merge, which is what a strategic merge
//!   does to annotations); POST; DELETE (a test's "the pod is gone");
//! - NetworkAttachmentDefinitions (`k8s.cni.cncf.io/v1`): GET one, LIST and WATCH;
//! - events (`v1` and `events.k8s.io/v1`): POST, PATCH and PUT taken, LIST;
//! - `/version`, and the discovery documents `/api` and `/apis`.
//!
//! A WATCH streams JSON lines in chunks: with `sendInitialEvents=true` (client-go's watch-list),
//! an ADDED event per object, then a BOOKMARK annotated `k8s.io/initial-events-end: "true"`;
//! from a `resourceVersion`, every change after it; without one (or "0"), ADDED events for what
//! exists, then the changes. It ends after `timeoutSeconds` (at most 5 minutes), as the API
//! server ends a watch, and client-go watches again from where it was.

mod http;
mod proto;
mod tls;

pub(crate) use tls::server_config as tls_config;

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use http::Request;

/// The longest a watch lasts: client-go asks for 5 to 10 minutes; a test is shorter.
const MAX_WATCH: Duration = Duration::from_secs(300);

/// The kinds of object it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Pod,
    Nad,
    Event,
}

impl Kind {
    /// As the API's paths and errors name it.
    fn resource(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Nad => "network-attachment-definitions.k8s.cni.cncf.io",
            Kind::Event => "events",
        }
    }

    fn list_kind(self) -> &'static str {
        match self {
            Kind::Pod => "PodList",
            Kind::Nad => "NetworkAttachmentDefinitionList",
            Kind::Event => "EventList",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::Nad => "k8s.cni.cncf.io/v1",
            Kind::Pod | Kind::Event => "v1",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Nad => "NetworkAttachmentDefinition",
            Kind::Event => "Event",
        }
    }
}

type Key = (Kind, String, String);

/// A change, as a watch sends it.
struct Change {
    rv: u64,
    kind: Kind,
    what: &'static str,
    object: Value,
}

struct Objects {
    /// The cluster's resourceVersion: every change takes the next one.
    rv: u64,
    items: BTreeMap<Key, Value>,
    log: Vec<Change>,
}

/// The cluster as the API server has it.
pub(crate) struct Cluster {
    node: String,
    objects: Mutex<Objects>,
    changed: Condvar,
}

/// A pod of the description: what the API has of it.
pub(crate) struct PodObject {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: String,
    pub(crate) annotations: BTreeMap<String, String>,
}

/// A NetworkAttachmentDefinition of the description.
pub(crate) struct NadObject {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) config: Option<String>,
}

/// An answer: a status and its JSON body.
type Reply = (u16, Value);

impl Cluster {
    /// The description's pods, all bound to `node`, and NADs.
    pub(crate) fn new(node: &str, pods: Vec<PodObject>, nads: Vec<NadObject>) -> Cluster {
        let mut objects = Objects {
            rv: 0,
            items: BTreeMap::new(),
            log: Vec::new(),
        };
        for p in pods {
            let annotations: Map<String, Value> = p
                .annotations
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid,
                             "creationTimestamp": now(), "annotations": annotations},
                "spec": {"nodeName": node,
                         "containers": [{"name": "app", "image": "busybox"}]},
                "status": {"phase": "Pending"},
            });
            objects.put(Kind::Pod, "ADDED", pod);
        }
        for n in nads {
            let mut nad = json!({
                "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": n.name, "namespace": n.namespace,
                             "uid": uuid_of(&format!("nad/{}/{}", n.namespace, n.name)),
                             "creationTimestamp": now()},
                "spec": {},
            });
            if let Some(config) = n.config {
                nad["spec"]["config"] = config.into();
            }
            objects.put(Kind::Nad, "ADDED", nad);
        }
        Cluster {
            node: node.to_string(),
            objects: Mutex::new(objects),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `listener` until the process ends, a thread per connection; with `tls`, a
    /// connection that opens with a TLS handshake gets HTTPS.
    pub(crate) fn serve(
        self: Arc<Cluster>,
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) {
        for conn in listener.incoming() {
            match conn {
                Ok(stream) => {
                    let cluster = Arc::clone(&self);
                    let tls = tls.clone();
                    thread::spawn(move || {
                        if let Err(e) = cluster.connection(stream, tls.as_ref()) {
                            eprintln!("kube-api: {e}");
                        }
                    });
                }
                Err(e) => eprintln!("kube-api: accept: {e}"),
            }
        }
    }

    fn connection(
        &self,
        stream: TcpStream,
        tls: Option<&Arc<rustls::ServerConfig>>,
    ) -> io::Result<()> {
        match tls {
            Some(config) if tls::opens_tls(&stream)? => {
                tls::serve_tls(config, stream, |s| self.exchange(s))
            }
            _ => self.exchange(stream),
        }
    }

    /// A connection's requests, answered in turn.
    fn exchange(&self, stream: impl Read + Write) -> io::Result<()> {
        let mut conn = BufReader::new(stream);
        while let Some(req) = http::read_request(&mut conn)? {
            if req.method == "GET" && req.flag("watch") {
                // A watch holds its connection to the end.
                return self.watch(&req, conn.get_mut());
            }
            let (status, body) = self.route(&req);
            http::answer(conn.get_mut(), status, &body)?;
        }
        Ok(())
    }

    fn route(&self, req: &Request) -> Reply {
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        let m = req.method.as_str();
        match (m, segments.as_slice()) {
            ("GET", ["version"]) => (200, version()),
            ("GET", ["api"]) => (200, json!({"kind": "APIVersions", "versions": ["v1"]})),
            ("GET", ["apis"]) => (200, api_groups()),
            ("GET", ["api", "v1", "pods"]) => self.list(Kind::Pod, None, req),
            ("GET", ["api", "v1", "namespaces", ns, "pods"]) => self.list(Kind::Pod, Some(ns), req),
            ("POST", ["api", "v1", "namespaces", ns, "pods"]) => self.create(Kind::Pod, ns, req),
            ("GET", ["api", "v1", "namespaces", ns, "pods", name])
            | ("GET", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
                self.get(Kind::Pod, ns, name)
            }
            ("PUT", ["api", "v1", "namespaces", ns, "pods", name])
            | ("PUT", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
                self.update_pod(ns, name, req)
            }
            ("PATCH", ["api", "v1", "namespaces", ns, "pods", name])
            | ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
                self.patch(Kind::Pod, ns, name, req)
            }
            ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
                self.delete(Kind::Pod, ns, name)
            }
            (
                "GET",
                [
                    "apis",
                    "k8s.cni.cncf.io",
                    "v1",
                    "network-attachment-definitions",
                ],
            ) => self.list(Kind::Nad, None, req),
            (
                "GET",
                [
                    "apis",
                    "k8s.cni.cncf.io",
                    "v1",
                    "namespaces",
                    ns,
                    "network-attachment-definitions",
                ],
            ) => self.list(Kind::Nad, Some(ns), req),
            (
                "GET",
                [
                    "apis",
                    "k8s.cni.cncf.io",
                    "v1",
                    "namespaces",
                    ns,
                    "network-attachment-definitions",
                    name,
                ],
            ) => self.get(Kind::Nad, ns, name),
            ("GET", ["api", "v1", "events"]) => self.list(Kind::Event, None, req),
            ("GET", ["api", "v1", "namespaces", ns, "events"])
            | ("GET", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
                self.list(Kind::Event, Some(ns), req)
            }
            ("POST", ["api", "v1", "namespaces", ns, "events"])
            | ("POST", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
                self.create(Kind::Event, ns, req)
            }
            ("PATCH", ["api", "v1", "namespaces", ns, "events", name])
            | (
                "PATCH",
                [
                    "apis",
                    "events.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "events",
                    name,
                ],
            ) => self.patch(Kind::Event, ns, name, req),
            ("PUT", ["api", "v1", "namespaces", ns, "events", name])
            | (
                "PUT",
                [
                    "apis",
                    "events.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "events",
                    name,
                ],
            ) => self.replace_event(ns, name, req),
            _ => status(404, "NotFound", &format!("{m} {}: no such route", req.path)),
        }
    }

    fn get(&self, kind: Kind, ns: &str, name: &str) -> Reply {
        match self.lock().items.get(&key(kind, ns, name)) {
            Some(o) => (200, o.clone()),
            None => not_found(kind, name),
        }
    }

    fn list(&self, kind: Kind, ns: Option<&str>, req: &Request) -> Reply {
        let selector = match Selector::parse(req) {
            Ok(s) => s,
            Err(e) => return status(400, "BadRequest", &e),
        };
        let objects = self.lock();
        let items: Vec<Value> = objects
            .items
            .iter()
            .filter(|((k, n, _), o)| {
                *k == kind && ns.is_none_or(|ns| ns == n) && selector.matches(o)
            })
            .map(|(_, o)| o.clone())
            .collect();
        let list = json!({
            "apiVersion": kind.api_version(), "kind": kind.list_kind(),
            "metadata": {"resourceVersion": objects.rv.to_string()}, "items": items,
        });
        (200, list)
    }

    fn create(&self, kind: Kind, ns: &str, req: &Request) -> Reply {
        // client-go's event recorder writes protobuf (Multus's), the rest JSON.
        let read = if kind == Kind::Event && req.content_type.contains("protobuf") {
            proto::decode_event(&req.body)
        } else {
            serde_json::from_slice(&req.body).map_err(|e| e.to_string())
        };
        let mut object: Value = match read {
            Ok(o) => o,
            Err(e) => return status(400, "BadRequest", &format!("the body: {e}")),
        };
        let name = match object["metadata"]["name"].as_str() {
            Some(n) => n.to_string(),
            // Events of client-go's recorder are named; a generateName gets a suffix.
            None => match object["metadata"]["generateName"].as_str() {
                Some(prefix) => format!("{prefix}{}", &uuid_of(&now_nanos().to_string())[..5]),
                None => return status(422, "Invalid", "metadata.name: Required value"),
            },
        };
        object["metadata"]["name"] = name.clone().into();
        object["metadata"]["namespace"] = ns.into();
        object["metadata"]["uid"] =
            uuid_of(&format!("{kind:?}/{ns}/{name}/{}", now_nanos())).into();
        object["metadata"]["creationTimestamp"] = now().into();
        object["apiVersion"] = kind.api_version().into();
        object["kind"] = kind.kind().into();
        if kind == Kind::Pod && object["spec"]["nodeName"].is_null() {
            object["spec"]["nodeName"] = self.node.clone().into();
        }
        let mut objects = self.lock();
        if objects.items.contains_key(&key(kind, ns, &name)) {
            return status(
                409,
                "AlreadyExists",
                &format!("{} {name:?} already exists", kind.kind()),
            );
        }
        let stored = objects.put(kind, "ADDED", object);
        drop(objects);
        self.changed.notify_all();
        (201, stored)
    }

    /// PUT of a pod or its status: the annotations it carries (and a JSON body's status) over
    /// the pod's; a `resourceVersion` that is not the pod's is a conflict.
    fn update_pod(&self, ns: &str, name: &str, req: &Request) -> Reply {
        let (rv, annotations, pod_status) = if req.content_type.contains("protobuf") {
            match proto::decode_pod(&req.body) {
                Ok(meta) if meta.name == name && meta.namespace == ns => {
                    let annotations: Map<String, Value> = meta
                        .annotations
                        .into_iter()
                        .map(|(k, v)| (k, Value::String(v)))
                        .collect();
                    (meta.resource_version, Value::Object(annotations), None)
                }
                Ok(meta) => {
                    let what = format!("the body is pod {}/{}", meta.namespace, meta.name);
                    return status(400, "BadRequest", &what);
                }
                Err(e) => return status(400, "BadRequest", &format!("the protobuf body: {e}")),
            }
        } else {
            let body: Value = match serde_json::from_slice(&req.body) {
                Ok(b) => b,
                Err(e) => return status(400, "BadRequest", &format!("the body: {e}")),
            };
            let rv = body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let annotations = body["metadata"]["annotations"].clone();
            (rv, annotations, Some(body["status"].clone()))
        };
        let mut objects = self.lock();
        let Some(current) = objects.items.get(&key(Kind::Pod, ns, name)) else {
            return not_found(Kind::Pod, name);
        };
        if !rv.is_empty() && current["metadata"]["resourceVersion"] != rv.as_str() {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on pods {name:?}: the object has been \
                     modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        let mut pod = current.clone();
        pod["metadata"]["annotations"] = if annotations.is_null() {
            json!({})
        } else {
            annotations
        };
        if let Some(s) = pod_status.filter(|s| s.is_object()) {
            pod["status"] = s;
        }
        let stored = objects.put(Kind::Pod, "MODIFIED", pod);
        drop(objects);
        self.changed.notify_all();
        (200, stored)
    }

    /// PATCH: a strategic-merge or merge patch, applied as a JSON merge (RFC 7386).
    fn patch(&self, kind: Kind, ns: &str, name: &str, req: &Request) -> Reply {
        let merges = [
            "application/strategic-merge-patch+json",
            "application/merge-patch+json",
        ];
        if !merges.iter().any(|t| req.content_type.starts_with(t)) {
            let what = format!("PATCH as {:?}: only merge patches here", req.content_type);
            return status(415, "UnsupportedMediaType", &what);
        }
        let patch: Value = match serde_json::from_slice(&req.body) {
            Ok(p) => p,
            Err(e) => return status(400, "BadRequest", &format!("the patch: {e}")),
        };
        let mut objects = self.lock();
        let Some(current) = objects.items.get(&key(kind, ns, name)) else {
            return not_found(kind, name);
        };
        let mut object = current.clone();
        merge(&mut object, &patch);
        let stored = objects.put(kind, "MODIFIED", object);
        drop(objects);
        self.changed.notify_all();
        (200, stored)
    }

    fn replace_event(&self, ns: &str, name: &str, req: &Request) -> Reply {
        let body: Value = match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => return status(400, "BadRequest", &format!("the body: {e}")),
        };
        let mut objects = self.lock();
        if !objects.items.contains_key(&key(Kind::Event, ns, name)) {
            return not_found(Kind::Event, name);
        }
        let stored = objects.put(Kind::Event, "MODIFIED", body);
        drop(objects);
        self.changed.notify_all();
        (200, stored)
    }

    fn delete(&self, kind: Kind, ns: &str, name: &str) -> Reply {
        let mut objects = self.lock();
        let Some(mut object) = objects.items.remove(&key(kind, ns, name)) else {
            return not_found(kind, name);
        };
        objects.rv += 1;
        object["metadata"]["resourceVersion"] = objects.rv.to_string().into();
        let rv = objects.rv;
        objects.log.push(Change {
            rv,
            kind,
            what: "DELETED",
            object: object.clone(),
        });
        drop(objects);
        self.changed.notify_all();
        (200, object)
    }

    /// A WATCH, streamed to its end.
    fn watch(&self, req: &Request, w: &mut impl Write) -> io::Result<()> {
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        let (kind, ns) = match segments.as_slice() {
            ["api", "v1", "pods"] => (Kind::Pod, None),
            ["api", "v1", "namespaces", ns, "pods"] => (Kind::Pod, Some(ns.to_string())),
            [
                "apis",
                "k8s.cni.cncf.io",
                "v1",
                "network-attachment-definitions",
            ] => (Kind::Nad, None),
            [
                "apis",
                "k8s.cni.cncf.io",
                "v1",
                "namespaces",
                ns,
                "network-attachment-definitions",
            ] => (Kind::Nad, Some(ns.to_string())),
            _ => {
                let (code, body) = status(404, "NotFound", &format!("no watch of {}", req.path));
                return http::answer(w, code, &body);
            }
        };
        let selector = match Selector::parse(req) {
            Ok(s) => s,
            Err(e) => {
                let (code, body) = status(400, "BadRequest", &e);
                return http::answer(w, code, &body);
            }
        };
        let fits = |k: Kind, o: &Value| {
            k == kind
                && ns
                    .as_deref()
                    .is_none_or(|ns| o["metadata"]["namespace"] == ns)
                && selector.matches(o)
        };
        let timeout = req
            .param("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .map_or(MAX_WATCH, |t| Duration::from_secs(t).min(MAX_WATCH));
        let deadline = Instant::now() + timeout;
        let from = req.param("resourceVersion").unwrap_or("");
        http::start_stream(w)?;
        let mut objects = self.lock();
        // Where the stream starts: after `from`, or at now with what exists sent as added.
        let mut seen = match from.parse::<u64>() {
            Ok(rv) if rv > 0 && !req.flag("sendInitialEvents") => rv,
            _ => {
                let now = objects.rv;
                let initial: Vec<Value> = objects
                    .items
                    .iter()
                    .filter(|((k, _, _), o)| fits(*k, o))
                    .map(|(_, o)| json!({"type": "ADDED", "object": o}))
                    .collect();
                drop(objects);
                for event in &initial {
                    http::chunk(w, event)?;
                }
                if req.flag("sendInitialEvents") {
                    let bookmark = json!({"type": "BOOKMARK", "object": {
                        "apiVersion": kind.api_version(), "kind": kind.kind(),
                        "metadata": {"resourceVersion": now.to_string(),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}});
                    http::chunk(w, &bookmark)?;
                }
                objects = self.lock();
                now
            }
        };
        loop {
            let events: Vec<Value> = objects
                .log
                .iter()
                .filter(|c| c.rv > seen && fits(c.kind, &c.object))
                .map(|c| json!({"type": c.what, "object": c.object}))
                .collect();
            seen = objects.rv;
            drop(objects);
            for event in &events {
                http::chunk(w, event)?;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return http::end_stream(w);
            }
            objects = self.lock();
            if objects.rv == seen {
                objects = self
                    .changed
                    .wait_timeout(objects, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }
}

impl Objects {
    /// Stores an object under the next resourceVersion and logs the change: the object stored.
    fn put(&mut self, kind: Kind, what: &'static str, mut object: Value) -> Value {
        self.rv += 1;
        object["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        self.items.insert((kind, ns, name), object.clone());
        self.log.push(Change {
            rv: self.rv,
            kind,
            what,
            object: object.clone(),
        });
        object
    }
}

fn key(kind: Kind, ns: &str, name: &str) -> Key {
    (kind, ns.to_string(), name.to_string())
}

/// A LIST's or WATCH's `fieldSelector`: `field=value` pairs (or `field==value`, `!=`), over the
/// fields the meta-plugins select on.
struct Selector(Vec<(String, bool, String)>);

impl Selector {
    fn parse(req: &Request) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for term in req
            .param("fieldSelector")
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
        {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("fieldSelector term {term:?}"));
            };
            if !matches!(
                field,
                "spec.nodeName" | "metadata.name" | "metadata.namespace"
            ) {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), equal, value.to_string()));
        }
        Ok(Selector(terms))
    }

    fn matches(&self, o: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let at = field.split('.').fold(o, |v, k| &v[k]);
            (at.as_str().unwrap_or("") == value) == *equal
        })
    }
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The API server's error object.
fn status(code: u16, reason: &str, message: &str) -> Reply {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Failure", "message": message, "reason": reason, "code": code});
    (code, body)
}

/// The API server's 404: `pods "web-0" not found` (the resource, not the kind: Multus, which
/// means to tolerate a pod gone under its status update, looks for `pod "` and never finds it).
fn not_found(kind: Kind, name: &str) -> Reply {
    let resource = kind.resource();
    let (code, mut body) = status(404, "NotFound", &format!("{resource} {name:?} not found"));
    let (kind, group) = resource.split_once('.').unwrap_or((resource, ""));
    body["details"] = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        body["details"]["group"] = group.into();
    }
    (code, body)
}

fn version() -> Value {
    json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0", "platform": "linux/amd64"})
}

fn api_groups() -> Value {
    let group = |name: &str, version: &str| {
        let gv = format!("{name}/{version}");
        json!({"name": name, "versions": [{"groupVersion": gv, "version": version}],
               "preferredVersion": {"groupVersion": gv, "version": version}})
    };
    json!({"kind": "APIGroupList", "apiVersion": "v1",
           "groups": [group("k8s.cni.cncf.io", "v1"), group("events.k8s.io", "v1")]})
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// Now in the API's time format (RFC 3339, seconds, UTC).
fn now() -> String {
    let secs = (now_nanos() / 1_000_000_000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, min, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}Z")
}

/// A UUID derived from `seed` (the simulator's way: see `vmi_spec::derived_uuid`).
fn uuid_of(seed: &str) -> String {
    crate::vmi_spec::derived_uuid(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_sets_and_removes_keys() {
        let mut pod = json!({"metadata": {"annotations": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        merge(
            &mut pod,
            &json!({"metadata": {"annotations": {"a": null, "c": "3"}}}),
        );
        assert_eq!(
            pod,
            json!({"metadata": {"annotations": {"b": "2", "c": "3"}}, "spec": {"x": 1}})
        );
    }

    #[test]
    fn time_is_rfc_3339() {
        let t = now();
        assert_eq!(
            (t.len(), &t[4..5], &t[10..11], &t[19..]),
            (20, "-", "T", "Z")
        );
    }
}
