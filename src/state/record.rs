//! One attachment's state file: the record, and what reading one may find.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::STATE_VERSION;
use crate::ids::{ContainerId, IfName, PodUid, VmName, VmUuid, VmiUuid, VnUuid};
use crate::vmi::{Claim, Mac};

/// One attachment. The agent's keys first (all strings, as the agent reads them), then ours;
/// the agent tolerates extra keys, and files the agent wrote itself lack ours. Its identifiers
/// are checked as strictly as the agent's answers' when a file is read: they become request
/// paths to the agent, interface names, lock and directory names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub time: String,
    /// CNI_CONTAINERID of the sandbox that holds the attachment.
    #[serde(rename = "vm-id")]
    pub container_id: ContainerId,
    #[serde(rename = "vm-uuid")]
    pub vm_uuid: VmUuid,
    #[serde(rename = "vm-name")]
    pub vm_name: VmName,
    /// The host side's name; a vhost-user record's file names it `system-name` (see
    /// [`Record::file_json`]).
    #[serde(rename = "host-ifname", alias = "system-name")]
    pub host_ifname: IfName,
    #[serde(rename = "vm-ifname")]
    pub ifname: IfName,
    #[serde(rename = "vm-namespace", default)]
    pub netns: String,
    #[serde(rename = "vn-uuid")]
    pub vn_uuid: VnUuid,
    #[serde(rename = "vmi-uuid")]
    pub vmi_uuid: VmiUuid,
    #[serde(
        rename = "contrail-k8s-cni-state",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub state_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// The VMI's MAC, checked as the agent's answers are ([`Mac::parse`]): a file with
    /// anything else is unreadable. Absent (or empty) in a file is `None`.
    #[serde(
        rename = "mac-address",
        default,
        skip_serializing_if = "Option::is_none",
        with = "string_mac"
    )]
    pub mac: Option<Mac>,
    /// Whether this interface carries the pod's default route; written as "true"/"false"
    /// like the agent's own keys, absent from files the agent wrote.
    #[serde(rename = "default-gw", default, with = "string_bool")]
    pub default_gw: bool,
    /// The MTU the attachment was made with (the network's config may set it), for `inspect`
    /// to compare as CHECK does; absent from older files.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mtu: String,
    /// The boot the claim was made in (the kernel's boot_id) and when, in ms since that boot
    /// (CLOCK_BOOTTIME): times no clock step moves, for the sweep's grace. Absent from files of
    /// 0.1 and the agent's own.
    #[serde(
        rename = "claimed-boot",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub claimed_boot: String,
    #[serde(
        rename = "claimed-uptime-ms",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub claimed_uptime_ms: String,
    /// Nested mode: the VLAN tag of the attachment's sub-interface.
    #[serde(
        rename = "vlan-id",
        default,
        skip_serializing_if = "Option::is_none",
        with = "string_tag"
    )]
    pub vlan: Option<u16>,
    /// How the agent was told of the port: `POST /vm` (veth, the default, and every file
    /// written before vhost-user) or `POST /port` (vhost-user). Absent means `vm`, and a `vm`
    /// record is written without it, as before.
    #[serde(rename = "port-route", default, skip_serializing_if = "Route::is_vm")]
    pub route: Route,
    /// A vhost-user attachment: the pod's UID (`K8S_POD_UID`), which names its directory under
    /// `vhost-dir`, so that DEL, GC and the sweep find it without the runtime's arguments.
    #[serde(rename = "pod-uid", default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<PodUid>,
    /// A vhost-user attachment's device-info file (the runtime's `CNIDeviceInfoFile`, checked
    /// to be the attachment's own name in `device-info-dir`), which its removal takes with it.
    #[serde(
        rename = "device-info",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub device_info: Option<PathBuf>,
    /// Read, not written: a file without this plugin's marker (the OpenSDN Go plugin's, see
    /// [`Record::is_legacy`]) last written before this boot. Such a file has no claim times;
    /// its sandbox died with the node (no network namespace outlives a boot).
    #[serde(skip)]
    pub written_before_boot: bool,
}

/// The agent's route a port was registered through; it decides how it is released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// `POST /vm`, released by `DELETE /vm/<vm-uuid>` and re-registering the pod's others.
    #[default]
    Vm,
    /// `POST /port` (a vhost-user port on a DPDK vRouter), released by `DELETE /port/<vmi>`.
    Port,
}

impl Route {
    pub fn is_vm(&self) -> bool {
        *self == Route::Vm
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Vm => "vm",
            Route::Port => "port",
        }
    }
}

/// `POST /port`'s `vm-project-id` when the project is not known: the agent accepts a nil uuid.
pub const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// `POST /port`'s `type` for a VM port: on a DPDK vRouter's agent, a PMD (vhost-user) port.
pub const PORT_TYPE_VM: i64 = 0;

/// `POST /port`'s `vhostuser-mode` 1: the vRouter is the vhost-user client, the application the
/// server (vrouter-dpdk turns 0 into 1 anyway; sent explicitly).
pub const VHOSTUSER_MODE_CLIENT: i64 = 1;

/// A VLAN tag kept as a string (every value in these files is a string).
mod string_tag {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(tag: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match tag {
            Some(t) => s.serialize_str(&t.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Some).map_err(D::Error::custom)
    }
}

/// A MAC kept as `aa:bb:cc:dd:ee:ff`; "" is none.
mod string_mac {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use crate::vmi::Mac;

    pub fn serialize<S: Serializer>(mac: &Option<Mac>, s: S) -> Result<S::Ok, S::Error> {
        match mac {
            Some(m) => s.collect_str(m),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mac>, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Ok(None);
        }
        Mac::parse(&s)
            .map(Some)
            .ok_or_else(|| D::Error::custom("mac-address is not a unicast MAC"))
    }
}

/// A bool kept as the string "true" or "false" (every value in these files is a string).
mod string_bool {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *b { "true" } else { "false" })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(String::deserialize(d)? == "true")
    }
}

impl Record {
    pub fn claim(&self) -> Claim {
        Claim {
            vmi: self.vmi_uuid.clone(),
            holder: Some((self.container_id.clone(), self.ifname.clone())),
        }
    }

    pub fn is(&self, container_id: &ContainerId, ifname: &IfName) -> bool {
        self.container_id == *container_id && self.ifname == *ifname
    }

    /// A file in the agent's format without this plugin's marker: the OpenSDN Go plugin wrote
    /// it (its `addVmFile`, before its `POST /vm`), on a node this plugin was rolled out onto.
    /// Whether the vhost-user directory its `pod-uid` names is its pod's: kube-manager makes a
    /// pod's VM with the pod's UID, so a record whose `pod-uid` is not its `vm-uuid` was made
    /// with another pod's UID (a runtime's bug, which ADD now refuses) and its release
    /// leaves that directory alone.
    pub fn owns_its_vhost_dir(&self) -> bool {
        self.pod_uid
            .as_ref()
            .is_some_and(|u| u.as_str().eq_ignore_ascii_case(self.vm_uuid.as_str()))
    }

    /// The attachment of the sandbox and interface it names (`vm-id`, `vm-ifname`), released as
    /// this plugin's are; only its host link is named the Go plugin's way
    /// ([`crate::kernel::names::legacy_link`]).
    pub fn is_legacy(&self) -> bool {
        self.state_version.is_empty()
    }

    /// Whether the sandbox that holds this attachment belongs to an earlier boot: claimed then
    /// (this plugin's records say when), or written then (the Go plugin's). Every sandbox of an
    /// earlier boot is gone: no network namespace survives a reboot.
    pub fn of_an_earlier_boot(&self, boot_id: &str) -> bool {
        if self.claimed_boot.is_empty() {
            self.written_before_boot
        } else {
            self.claimed_boot != boot_id
        }
    }

    /// The registration body: the record itself (the agent ignores the keys it does not know).
    pub fn port(&self) -> serde_json::Value {
        // Cannot fail: every field is a string or a bool.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The state file's content. A `/vm` record is the agent's `POST /vm` body, which the agent
    /// registers again when it restarts. A `/port` record names its port `system-name`, not
    /// `host-ifname`: at its start the agent reloads every UUID-named file of config-dir's pod
    /// directories as a `POST /vm` port, on a DPDK node without looking for the interface
    /// (tf-controller `contrail_agent_init.cc` 195, `ReloadAllPorts(!vrouter_on_host_dpdk)`),
    /// and refuses a file without `host-ifname` (`port_ipc_handler.cc` 875). So the port stays
    /// the PMD port that the agent's own copy of the `POST /port` restores.
    pub fn file_json(&self) -> serde_json::Value {
        let mut v = self.port();
        if let (Route::Port, Some(fields)) = (self.route, v.as_object_mut()) {
            if let Some(name) = fields.remove("host-ifname") {
                fields.insert("system-name".into(), name);
            }
        }
        v
    }

    /// `POST /port`'s body for this record (the Nova route; the agent's `MakeAddVmiUuidRequest`
    /// requires every field, strings and integers as here, and refuses `null` VLAN ids).
    /// `ip-address` `0.0.0.0` lets the config's instance IP win; `system-name` is the name
    /// vrouter-dpdk's socket link `uvh_vif_<system-name>` carries.
    pub fn port_body(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.vmi_uuid.to_string(),
            "instance-id": self.vm_uuid.to_string(),
            "vn-id": self.vn_uuid.to_string(),
            "vm-project-id": NIL_UUID,
            "display-name": self.vm_name.to_string(),
            "ip-address": "0.0.0.0",
            "ip6-address": "",
            "system-name": self.host_ifname.to_string(),
            "mac-address": self.mac.map(|m| m.to_string()).unwrap_or_default(),
            "type": PORT_TYPE_VM,
            "rx-vlan-id": -1,
            "tx-vlan-id": -1,
            "vhostuser-mode": VHOSTUSER_MODE_CLIENT,
        })
    }
}

/// A state file that could not be read: reported, left in place, and treated as held by
/// someone else.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub vmi_uuid: VmiUuid,
    pub why: String,
    /// The file as the agent reads it on restart, when it is a JSON object for this VMI (a
    /// future version's file, say): it stays registered when the pod is re-registered.
    pub port: Option<serde_json::Value>,
}

impl Unreadable {
    pub fn claim(&self) -> Claim {
        Claim {
            vmi: self.vmi_uuid.clone(),
            holder: None,
        }
    }
}

/// A file's content as the agent reads it on restart, when it is a JSON object for `vmi`
/// registered through `POST /vm` (a file that names another route is never sent there: the
/// transport of a port is fixed when the agent first makes it).
pub(super) fn port_of(bytes: Option<&[u8]>, vmi: &str) -> Option<serde_json::Value> {
    bytes
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .filter(|v| v.get("vmi-uuid").and_then(|u| u.as_str()) == Some(vmi))
        .filter(|v| v.get("port-route").is_none_or(|r| r == "vm"))
}

/// A state file's record. Why one is refused names the key, never its bytes (which may hold
/// anything, a line break and a header).
pub(super) fn parse_record(bytes: &[u8], name: &str) -> Result<Record, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let r: Record = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let key = e.path().to_string();
        let e = e.into_inner();
        match e.classify() {
            serde_json::error::Category::Data if key != "." => {
                format!(
                    "its {key} {}",
                    e.to_string().split(" at line").next().unwrap_or("")
                )
            }
            _ => format!("not a state file: {e}"),
        }
    })?;
    if r.vmi_uuid.as_str() != name {
        return Err(format!(
            "names VMI {} but the file is named {name}",
            r.vmi_uuid
        ));
    }
    if !(r.state_version.is_empty() || r.state_version == STATE_VERSION) {
        return Err(format!(
            "state version {:?} is not one this plugin knows",
            r.state_version
        ));
    }
    Ok(r)
}
