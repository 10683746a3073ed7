//! The cluster's NetworkAttachmentDefinitions, as the simulator's kube-manager and the
//! Kubernetes API stand-in take them (how Multus reads a pod's annotation is the real Multus's:
//! `e2e/examples.rs`).

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
