//! The specs of a simulated pod and of its VMIs, as the simulator serves them.

use serde_json::{Value, json};

use crate::bins::{tag, uuid};

/// One VMI of a simulated pod.
#[derive(Clone, Debug)]
pub struct VmiSpec {
    pub uuid: String,
    pub network: String,
    pub mac: String,
    pub ip: Option<String>,
    pub gateway: Option<String>,
    pub ip6: Option<String>,
    pub v6_gateway: Option<String>,
    pub extra: Value,
}

impl VmiSpec {
    /// A VMI on `network` numbered `n` within the test: 10.<n>.0.<n+10>/24, fd00:<n>::<n+10>.
    pub fn new(network: &str, n: u8) -> VmiSpec {
        VmiSpec {
            uuid: uuid(),
            network: network.to_string(),
            mac: format!("02:{:02x}:{:02x}:00:00:{:02x}", rand_byte(), rand_byte(), n),
            ip: Some(format!("10.{n}.0.{}/24", n + 10)),
            gateway: Some(format!("10.{n}.0.1")),
            ip6: None,
            v6_gateway: None,
            extra: json!({}),
        }
    }

    pub fn dual_stack(mut self) -> VmiSpec {
        let n = self
            .ip
            .as_ref()
            .unwrap()
            .split('.')
            .nth(1)
            .unwrap()
            .to_string();
        self.ip6 = Some(format!("fd00:{n}::{n}a"));
        self.v6_gateway = Some(format!("fd00:{n}::1"));
        self
    }

    pub fn with(mut self, key: &str, value: Value) -> VmiSpec {
        self.extra[key] = value;
        self
    }

    pub fn addr(&self) -> String {
        self.ip.clone().unwrap()
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"uuid": self.uuid, "network": self.network, "mac": self.mac});
        for (k, val) in [
            ("ip", &self.ip),
            ("gateway", &self.gateway),
            ("ip6", &self.ip6),
            ("v6-gateway", &self.v6_gateway),
        ] {
            if let Some(x) = val {
                v[k] = json!(x);
            }
        }
        for (k, val) in self.extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v
    }
}

fn rand_byte() -> u8 {
    u8::from_str_radix(&uuid()[..2], 16).unwrap()
}

/// A simulated pod: namespace/name and its VMIs in index order.
#[derive(Clone)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub uuid: String,
    pub vmis: Vec<VmiSpec>,
    /// A pod given by its `k8s.v1.cni.cncf.io/networks` annotation instead of its VMIs: the
    /// simulator makes them as kube-manager does, from the NADs it was started with
    /// ([`Sim::start_cluster`](crate::Sim::start_cluster)).
    pub networks_annotation: Option<String>,
    /// Its other annotations, as the Kubernetes API serves them (CNI-Genie's `cni`).
    pub annotations: Vec<(String, String)>,
}

impl PodSpec {
    pub fn new(vmis: Vec<VmiSpec>) -> PodSpec {
        PodSpec {
            namespace: "default".into(),
            name: format!("pod-{}", tag()),
            uuid: uuid(),
            vmis,
            networks_annotation: None,
            annotations: Vec::new(),
        }
    }

    /// A pod of `namespace` by its networks annotation.
    pub fn annotated(namespace: &str, annotation: &str) -> PodSpec {
        PodSpec {
            namespace: namespace.into(),
            networks_annotation: Some(annotation.into()),
            ..PodSpec::new(Vec::new())
        }
    }

    /// With another annotation.
    pub fn annotate(mut self, key: &str, value: &str) -> PodSpec {
        self.annotations.push((key.into(), value.into()));
        self
    }

    pub fn vm_name(&self) -> String {
        format!("k8s__{}__{}", self.namespace, self.name)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"name": self.name, "namespace": self.namespace, "uuid": self.uuid,
               "vmis": self.vmis.iter().map(VmiSpec::to_json).collect::<Vec<_>>()});
        if let Some(annotation) = &self.networks_annotation {
            v["networks-annotation"] = json!(annotation);
        }
        if !self.annotations.is_empty() {
            v["annotations"] = self.annotations.iter().cloned().collect();
        }
        v
    }

    /// CNI_ARGS as a runtime sends them to its CNI plugin (containerd's and CRI-O's keys; the
    /// sandbox's container id is `K8S_POD_INFRA_CONTAINER_ID`).
    pub fn runtime_args(&self, container_id: &str) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};\
             K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID={}",
            self.namespace, self.name, self.uuid
        )
    }

    /// CNI_ARGS exactly as Multus thin builds them: its own keys, then the runtime's again.
    pub fn multus_args(&self, container_id: &str) -> String {
        let own = format!(
            "K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID={}",
            self.namespace, self.name, self.uuid
        );
        format!("IgnoreUnknown=true;{own};IgnoreUnknown=1;{own}")
    }
}
