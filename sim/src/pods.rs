//! The pod description file (`--pods`): the pods and VMIs the agent has config for.

use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::str::FromStr;

use super::kube_api::{Cluster, NadObject, PodObject};
use super::kube_manager::{self, Nad};
use super::vmi_spec::{VmiSpec, derived_uuid};
use super::{AUTHOR, NIL_UUID, NO_VLAN, Port, agent_time};

// ---------------------------------------------------------------- pod description file

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PodFile {
    pub(crate) pods: Vec<PodSpec>,
    /// The cluster's NetworkAttachmentDefinitions, for the pods given by their annotation.
    #[serde(default)]
    pub(crate) nads: Vec<Nad>,
}

/// A pod: by its VMIs, or by its networks annotation, from which kube-manager makes them
/// ([`kube_manager`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PodSpec {
    pub(crate) name: String,
    pub(crate) namespace: String,
    #[serde(default = "default_cluster")]
    pub(crate) cluster: String,
    pub(crate) uuid: String,
    #[serde(default)]
    pub(crate) vmis: Vec<VmiSpec>,
    /// `k8s.v1.cni.cncf.io/networks`, as the pod has it.
    #[serde(rename = "networks-annotation", default)]
    pub(crate) networks_annotation: Option<String>,
    /// The pod's other annotations, as the Kubernetes API serves them (CNI-Genie's `cni`, say).
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
}

/// The networks annotation's key.
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

pub(crate) fn default_cluster() -> String {
    "k8s".into()
}

/// A pod as the agent knows it; `vmis` is sorted by UUID because that is the order in
/// which the agent lists them.
pub(crate) struct Pod {
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) vm_name: String,
    pub(crate) vmis: Vec<Vmi>,
    /// A pod given by its annotation: how kube-manager read it (`GET /sim/kube-manager`).
    pub(crate) kube_manager: Option<Value>,
}

pub(crate) struct Vmi {
    pub(crate) vn_uuid: String,
    pub(crate) vn_name: String,
    pub(crate) annotations: Vec<String>,
    /// v4 address and prefix length split out of the `ip` CIDR.
    pub(crate) v4: Option<(String, u8)>,
    pub(crate) spec: VmiSpec,
}

impl Vmi {
    /// Whether the agent has this VMI's config, `cfg_age` (ns) after the pod was first asked
    /// about.
    pub(crate) fn configured(&self, cfg_age: u64) -> bool {
        cfg_age >= self.spec.cfg_delay_ms * 1_000_000
    }

    /// A nested pod's VMI: a VLAN sub-interface of its node's VMI, which the agent makes from
    /// config alone (`VM_VLAN_ON_VMI`), never from a registration.
    pub(crate) fn nested(&self) -> bool {
        self.spec.vlan_id.is_some()
    }

    /// Whether GET /vm/... may show this VMI at `at`: it needs IPAM, and an interface entry
    /// whose config work ended (`ready`, see [`db`]). A pod's VMI has one only once registered
    /// with POST /vm (config alone never creates one); a nested pod's VMI from config.
    pub(crate) fn ip_ready(&self, ready: Option<u64>, at: u64) -> bool {
        let has_ipam = self.v4.is_some() || self.spec.ip6.is_some();
        ready.is_some_and(|t| t <= at) && has_ipam
    }

    /// `ip-delay-ms` in nanoseconds: the controller's delay before the VMI's config work.
    pub(crate) fn ip_delay(&self) -> u64 {
        self.spec.ip_delay_ms * 1_000_000
    }

    pub(crate) fn cfg_json(&self, vm_uuid: &str) -> Value {
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
    pub(crate) fn oper_json(&self, pod: &Pod, port: Option<&Port>) -> Value {
        let system_name = match port {
            Some(port) => port.system_name().to_string(),
            None => format!("{}__{}", pod.name, self.spec.uuid),
        };
        let vlan = self.spec.vlan_id.unwrap_or(NO_VLAN);
        let Value::Object(mut m) = json!({
            "id": self.spec.uuid, "instance-id": pod.uuid, "vn-id": self.vn_uuid,
            "vm-project-id": NIL_UUID, "mac-address": self.spec.mac,
            "system-name": system_name, "rx-vlan-id": vlan, "tx-vlan-id": vlan,
            "vhostuser-mode": port.map_or(0.into(), Port::vhostuser_mode), "author": AUTHOR, "time": agent_time(),
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

/// The pod description file: the pods as the agent knows them, with the VMIs kube-manager made,
/// and, on `node`, the cluster the Kubernetes API serves: the same pods and NADs.
pub(crate) fn load_pods(path: &Path, node: &str) -> Result<(Vec<Pod>, Cluster), String> {
    let path = path.display();
    let text = fs::read_to_string(path.to_string()).map_err(|e| format!("{path}: {e}"))?;
    let file: PodFile = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let cluster = Cluster::new(
        node,
        file.pods.iter().map(PodSpec::object).collect(),
        file.nads
            .iter()
            .map(|n| NadObject {
                name: n.name.clone(),
                namespace: n.namespace.clone(),
                config: n.config.clone(),
            })
            .collect(),
    );
    let mut seen = HashSet::new();
    let mut pods = Vec::new();
    for mut spec in file.pods {
        let report = match spec.networks_annotation.take() {
            None => None,
            Some(_) if !spec.vmis.is_empty() => {
                return Err(format!(
                    "{path}: pod {}: give its vmis or its networks-annotation, not both",
                    spec.name
                ));
            }
            Some(annotation) => {
                let read = kube_manager::networks(&annotation, &spec.namespace, &file.nads);
                let mut report = match &read {
                    Ok((_, readings)) => json!({
                        "annotation": annotation,
                        "entries": readings.iter().map(|r| json!({
                            "entry": r.entry, "kept": r.kept, "why": r.why,
                        })).collect::<Vec<_>>(),
                    }),
                    // The pod fails in kube-manager: it never gets VMIs.
                    Err(why) => json!({"annotation": annotation, "failed": why}),
                };
                if let Ok((networks, _)) = &read {
                    spec.vmis = kube_manager::vmis(&spec.uuid, networks);
                    report["vmis"] = spec.vmis.iter().map(kube_manager::made).collect();
                }
                Some(report)
            }
        };
        let mut pod = build_pod(spec, report.is_some()).map_err(|e| format!("{path}: {e}"))?;
        pod.kube_manager = report;
        // Lookups go by vm-name and by UUID, so each must name one thing only.
        let keys = [&pod.uuid, &pod.vm_name].into_iter();
        for key in keys.chain(pod.vmis.iter().map(|v| &v.spec.uuid)) {
            if !seen.insert(key.clone()) {
                return Err(format!("{path}: {key} appears more than once"));
            }
        }
        pods.push(pod);
    }
    Ok((pods, cluster))
}

impl PodSpec {
    /// The pod as the Kubernetes API has it: its annotations, the networks annotation among
    /// them.
    fn object(&self) -> PodObject {
        let mut annotations = self.annotations.clone();
        // An empty one is the description's "the cluster network only": no annotation.
        if let Some(a) = self.networks_annotation.as_ref().filter(|a| !a.is_empty()) {
            annotations.insert(NETWORKS.to_string(), a.clone());
        }
        PodObject {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uuid.clone(),
            annotations,
        }
    }
}

/// Validates one pod; `derived`: its VMIs are kube-manager's (none when it failed the pod).
pub(crate) fn build_pod(spec: PodSpec, derived: bool) -> Result<Pod, String> {
    let PodSpec {
        name,
        namespace,
        cluster,
        uuid,
        vmis,
        networks_annotation: _,
        annotations: _,
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
    if vmis.is_empty() && !derived {
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
        kube_manager: None,
    })
}

/// Validates one VMI of the pod named by `[cluster, namespace, name]`; `index` is "k/N".
pub(crate) fn build_vmi(
    spec: VmiSpec,
    [cluster, ns, pod]: [&str; 3],
    index: String,
) -> Result<Vmi, String> {
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
pub(crate) fn check_addr<T: FromStr>(
    what: &str,
    value: Option<&str>,
    allowed: bool,
) -> Result<(), String> {
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
pub(crate) fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

pub(crate) fn is_mac(s: &str) -> bool {
    s.len() == 17
        && s.bytes().enumerate().all(|(i, b)| match i % 3 {
            2 => b == b':',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// Names end up as URL path segments, directory names and /sys/class/net entries, so
/// anything that could escape a directory or split a request line is refused.
pub(crate) fn is_name(s: &str) -> bool {
    !matches!(s, "" | "." | "..") && !s.chars().any(|c| c == '/' || c.is_whitespace())
}
