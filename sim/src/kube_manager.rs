//! kube-manager's side: the VMIs it makes for a pod from the pod's networks annotation and the
//! cluster's NetworkAttachmentDefinitions, quirks included, for pods the pod description file
//! gives by their annotation (`networks-annotation`) rather than by their VMIs. Read from
//! tf-controller `src/container/kube-manager/kube_manager/` (HEAD 2026-04):
//!
//! - Which NADs count (`kube/network_monitor.py` `process_event`): one whose `spec.config` is
//!   there, is JSON, and has a top-level `"type": "contrail-k8s-cni"`; a conflist (its type is
//!   in `plugins`) or another type does not. A config that is not JSON fails the event.
//! - The annotation (`common/kube_config_db.py` `PodKM._parse_annotations`): when its first
//!   character is `[`, JSON: a list of objects of which `namespace`, `name` and `interface` are
//!   kept; `name` must be there; an entry whose (namespace or the pod's, name) is no counted NAD
//!   is skipped; an interface named twice fails the pod. Else the string form: split at `,`, each
//!   entry split at `/` into namespace and name when it has one (two or more fail the pod),
//!   nothing trimmed and no `@ifname` read: `net-a@eth5` and ` net-a` name no NAD and are
//!   skipped.
//! - The VMIs (`vnc/vnc_pod.py` `vnc_pod_add`, `_create_vmi`): index 0 on the cluster network
//!   (`network` `default`), then one per kept entry in order, `index` `k/N` with N counting the
//!   cluster network, `network` the entry's name without its namespace, `interface` when asked.
//!   Made once, when kube-manager first sees the pod on a node: a pod whose annotation fails
//!   gets none (its VM is never made), and a later change of the annotation changes nothing.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::vmi_spec::{VmiSpec, derived_uuid};

/// A NetworkAttachmentDefinition as the cluster has it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Nad {
    pub(crate) name: String,
    #[serde(default = "default_namespace")]
    pub(crate) namespace: String,
    /// `spec.config`, as written (absent: none).
    pub(crate) config: Option<String>,
}

fn default_namespace() -> String {
    "default".into()
}

impl Nad {
    /// Whether kube-manager takes it for a Contrail network.
    fn counts(&self) -> bool {
        let Some(config) = self.config.as_deref().filter(|c| !c.is_empty()) else {
            return false;
        };
        serde_json::from_str::<Value>(config)
            .ok()
            .is_some_and(|v| v.get("type") == Some(&Value::from("contrail-k8s-cni")))
    }
}

/// One entry kube-manager keeps: a VMI's network and the interface it asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Network {
    pub(crate) name: String,
    pub(crate) interface: Option<String>,
}

/// What kube-manager made of one entry of the annotation, for `GET /sim/kube-manager`.
pub(crate) struct Reading {
    pub(crate) entry: String,
    pub(crate) kept: bool,
    pub(crate) why: String,
}

/// The networks kube-manager keeps from `annotation` of a pod in `namespace`, and how it read
/// each entry; `Err` when it fails the pod (which then gets no VMIs).
pub(crate) fn networks(
    annotation: &str,
    namespace: &str,
    nads: &[Nad],
) -> Result<(Vec<Network>, Vec<Reading>), String> {
    let is_nad = |name: &str, ns: &str| {
        nads.iter()
            .any(|n| n.name == name && n.namespace == ns && n.counts())
    };
    // (entry as written, namespace, name, interface asked for)
    let mut entries: Vec<(String, String, String, Option<String>)> = Vec::new();
    let json = annotation.starts_with('[');
    if json {
        let list: Vec<Map<String, Value>> = serde_json::from_str(annotation)
            .map_err(|e| format!("the JSON form does not load: {e}"))?;
        for element in list {
            let text = |k: &str| element.get(k).and_then(Value::as_str).map(str::to_string);
            let name = text("name").ok_or("an entry of the JSON form has no \"name\"")?;
            let ns = text("namespace").unwrap_or_else(|| namespace.to_string());
            let entry = Value::Object(element.clone()).to_string();
            entries.push((entry, ns, name, text("interface")));
        }
    } else {
        for entry in annotation.split(',') {
            let (ns, name) = match entry.split('/').collect::<Vec<_>>().as_slice() {
                [name] => (namespace.to_string(), name.to_string()),
                [ns, name] => (ns.to_string(), name.to_string()),
                _ => return Err(format!("{entry:?}: too many values to unpack at '/'")),
            };
            entries.push((entry.to_string(), ns, name, None));
        }
    }
    let (mut kept, mut read) = (Vec::new(), Vec::new());
    for (entry, ns, name, interface) in entries {
        if !is_nad(&name, &ns) {
            read.push(Reading {
                entry,
                kept: false,
                why: format!(
                    "skipped: {ns}/{name:?} is no NetworkAttachmentDefinition of type \
                     contrail-k8s-cni"
                ),
            });
            continue;
        }
        if let Some(i) = &interface
            && kept
                .iter()
                .any(|n: &Network| n.interface.as_ref() == Some(i))
        {
            return Err(format!("Interface {i} is defined more than once"));
        }
        read.push(Reading {
            entry,
            kept: true,
            why: format!("NetworkAttachmentDefinition {ns}/{name}"),
        });
        kept.push(Network { name, interface });
    }
    Ok((kept, read))
}

/// The VMIs of a pod kube-manager made from `networks`: the cluster network's, then one per
/// network, in order. Identifiers, MACs and addresses are derived from the pod's uuid and each
/// VMI's index, so that a restart serves the same ones.
pub(crate) fn vmis(pod_uuid: &str, networks: &[Network]) -> Vec<VmiSpec> {
    let default = Network {
        name: "default".into(),
        interface: None,
    };
    std::iter::once(&default)
        .chain(networks)
        .enumerate()
        .map(|(k, net)| {
            let seed = format!("{pod_uuid}/{k}");
            let hex = derived_uuid(&seed).replace('-', "");
            let b = |i: usize| &hex[i * 2..i * 2 + 2];
            // One subnet per network: 10.<x>.<y>.0/24, the VMI's host k + 10.
            let subnet = derived_uuid(&net.name).replace('-', "");
            let (x, y) = (
                u8::from_str_radix(&subnet[..2], 16).unwrap_or(0),
                u8::from_str_radix(&subnet[2..4], 16).unwrap_or(0),
            );
            VmiSpec::derived(
                derived_uuid(&seed),
                net.name.clone(),
                format!("02:{}:{}:{}:{}:{}", b(0), b(1), b(2), b(3), b(4)),
                format!("10.{x}.{y}.{}/24", k + 10),
                format!("10.{x}.{y}.254"),
                net.interface.clone(),
            )
        })
        .collect()
}

/// A VMI kube-manager made, as `GET /sim/kube-manager` reports it: in the pod description's own
/// form, so that a test knows the MAC and address each attachment must get.
pub(crate) fn made(vmi: &VmiSpec) -> Value {
    let mut made = Map::new();
    made.insert("uuid".into(), vmi.uuid.clone().into());
    made.insert("network".into(), vmi.network.clone().into());
    made.insert("mac".into(), vmi.mac.clone().into());
    for (key, value) in [
        ("ip", &vmi.ip),
        ("gateway", &vmi.gateway),
        ("interface", &vmi.interface),
    ] {
        if let Some(v) = value {
            made.insert(key.into(), v.clone().into());
        }
    }
    Value::Object(made)
}
