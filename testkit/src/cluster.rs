//! The cluster's side of an attachment: NetworkAttachmentDefinitions, and Multus's reading of a
//! pod's networks annotation (kube-manager's reading of the same is the simulator's,
//! `sim/src/kube_manager.rs`). Read from multus-cni `pkg/k8sclient/k8sclient.go`
//! `parsePodNetworkAnnotation`, `parsePodNetworkObjectName`, and `pkg/multus/multus.go`
//! `getIfname`.

use serde_json::{Value, json};

/// A NetworkAttachmentDefinition.
#[derive(Clone, Debug)]
pub struct Nad {
    pub namespace: String,
    pub name: String,
    /// `spec.config`, as written.
    pub config: Option<String>,
}

impl Nad {
    /// The minimal Contrail NAD: `{"cniVersion": "0.3.1", "type": "contrail-k8s-cni"}`.
    pub fn contrail(namespace: &str, name: &str) -> Nad {
        Nad {
            namespace: namespace.into(),
            name: name.into(),
            config: Some(r#"{"cniVersion": "0.3.1", "type": "contrail-k8s-cni"}"#.into()),
        }
    }

    /// A NAD from a Kubernetes manifest (a YAML document as JSON).
    pub fn from_manifest(doc: &Value) -> Option<Nad> {
        (doc["kind"] == "NetworkAttachmentDefinition").then(|| Nad {
            namespace: doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .into(),
            name: doc["metadata"]["name"].as_str().unwrap_or("").into(),
            config: doc["spec"]["config"].as_str().map(str::to_string),
        })
    }

    pub fn to_json(&self) -> Value {
        json!({"namespace": self.namespace, "name": self.name, "config": self.config})
    }

    /// The network name Multus gives the delegate: the config's `name`, or the NAD's.
    pub fn network(&self) -> String {
        self.config
            .as_deref()
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
            .and_then(|c| c["name"].as_str().map(str::to_string))
            .unwrap_or_else(|| self.name.clone())
    }
}

/// One network a pod selects, as Multus reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub namespace: String,
    pub name: String,
    pub interface: Option<String>,
}

/// Multus's reading of a pod's `k8s.v1.cni.cncf.io/networks` annotation: JSON when it holds any
/// of `[`, `{` or `"`, else the comma-separated form, each entry trimmed and read as
/// `[namespace/]name[@ifname]` (names in DNS-1123 label form); the pod's namespace where none is
/// given.
pub fn multus_selections(annotation: &str, pod_namespace: &str) -> Result<Vec<Selection>, String> {
    if annotation.is_empty() {
        return Err("no networks annotation".into());
    }
    let mut out = Vec::new();
    if annotation.contains(['[', '{', '"']) {
        let list: Vec<Value> = serde_json::from_str(annotation).map_err(|e| e.to_string())?;
        for n in list {
            let text = |k: &str| n[k].as_str().map(str::to_string);
            out.push(Selection {
                namespace: text("namespace").unwrap_or_default(),
                name: text("name").unwrap_or_default(),
                interface: text("interface"),
            });
        }
    } else {
        for item in annotation.split(',') {
            let item = item.trim();
            let (ns, rest) = match item.split('/').collect::<Vec<_>>().as_slice() {
                [rest] => ("", *rest),
                [ns, rest] => (ns.trim(), *rest),
                _ => return Err(format!("{item:?}: invalid network object (failed at '/')")),
            };
            let (name, interface) = match rest.split('@').collect::<Vec<_>>().as_slice() {
                [name] => (name.trim(), None),
                [name, ifname] => (name.trim(), Some(ifname.trim().to_string())),
                _ => return Err(format!("{item:?}: invalid network object (failed at '@')")),
            };
            let label = |s: &str| {
                let b = s.as_bytes();
                s.is_empty()
                    || (b
                        .iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                        && b[0] != b'-'
                        && b[b.len() - 1] != b'-')
            };
            if !label(ns) || !label(name) {
                return Err(format!("{item:?}: not in DNS-1123 label form"));
            }
            out.push(Selection {
                namespace: ns.into(),
                name: name.into(),
                interface,
            });
        }
    }
    for s in &mut out {
        if s.namespace.is_empty() {
            s.namespace = pod_namespace.into();
        }
    }
    Ok(out)
}

/// The interface Multus gives delegate `idx` (the cluster network is 0): the one the selection
/// asks for, else `net<idx>`.
pub fn multus_ifname(selection: &Selection, idx: usize) -> String {
    selection
        .interface
        .clone()
        .unwrap_or_else(|| format!("net{idx}"))
}
