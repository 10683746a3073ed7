//! VMIs (virtual machine interfaces) as the agent describes them, and the choice of the VMIs
//! a call sets up. Pure: the agent's answers decoded into typed data and checked, and decisions
//! over plain data; no I/O.

mod malformed;
mod resolve;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cni::check_ifname;
use crate::ids::{Invalid, VmUuid, VmiUuid, VnUuid};
pub use malformed::Malformed;

#[cfg(feature = "thick")]
pub(crate) use resolve::for_pod;
pub use resolve::{Attachment, Choice, Claim, Unresolved, resolve};
pub(crate) use resolve::{Wanted, for_attachment};

/// A parser's verdict on an answer of the agent.
pub type Parsed<T> = std::result::Result<T, Malformed>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// A unicast, non-zero MAC in `aa:bb:cc:dd:ee:ff` form; anything else is not a port's MAC.
    pub fn parse(s: &str) -> Option<Mac> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut out {
            let p = parts.next()?;
            // from_str_radix alone would take "+2".
            if p.len() != 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            *b = u8::from_str_radix(p, 16).ok()?;
        }
        let unicast = out[0] & 1 == 0 && out != [0; 6];
        (parts.next().is_none() && unicast).then_some(Mac(out))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// UUIDs become URL path segments and file names ([`crate::ids::check_uuid`]).
pub fn valid_uuid(s: &str) -> bool {
    crate::ids::check_uuid(s).is_ok()
}

/// One VMI from `GET /vm-cfg/<vm-name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vmi {
    pub uuid: VmiUuid,
    pub vm_uuid: VmUuid,
    pub vn_uuid: VnUuid,
    pub mac: Mac,
    /// The NetworkAttachmentDefinition name, `default` for the cluster pod network.
    pub network: String,
    /// k of `index` k/N.
    pub index: u32,
    /// N of `index` k/N: how many VMIs the pod has in all.
    pub count: u32,
    /// The interface name the pod asked for (`net-a@eth5`).
    pub interface: Option<String>,
    pub default_gw: bool,
    /// An annotation whose value this plugin does not recognise and ignores (it carries what a
    /// pod's network selection said), for the caller to log.
    pub ignored: Option<(&'static str, String)>,
    /// The pod kube-manager made the VMI for: its `namespace` and `name` annotations.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// A nested pod's VLAN tag (`vlan-id`; the agent's 65535 means none). Checked to be a tag
    /// (1..=4094) by nested mode, which needs one; the agent's `sub-interface` is not
    /// trustworthy (it lags behind the tag).
    pub vlan: Option<u16>,
}

/// The agent's `vlan-id` for "no VLAN".
const NO_VLAN: u64 = 65535;

/// Decodes an agent answer into `T`: invalid JSON, or JSON of another shape than the contract's
/// (naming where, never quoting the answer's bytes), is refused.
fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> Parsed<T> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let invalid = |e: serde_json::Error| Malformed::Json {
        what: what.to_string(),
        why: e.to_string(),
    };
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        let e = e.into_inner();
        if e.is_data() {
            // serde's own text quotes the offending value; only a missing field's name is ours.
            let why = e.to_string();
            let missing = why
                .strip_prefix("missing field `")
                .and_then(|w| w.split_once('`'))
                .map(|(field, _)| field.to_string());
            Malformed::Shape {
                what: what.to_string(),
                at,
                missing,
            }
        } else {
            invalid(e)
        }
    })?;
    de.end().map_err(invalid)?;
    Ok(value)
}

fn field(what: &str, field: &'static str, problem: &'static str) -> Malformed {
    Malformed::Field {
        what: what.to_string(),
        field,
        problem,
    }
}

/// One element of the `/vm-cfg` answer, as the agent writes it.
#[derive(Deserialize)]
struct CfgItem {
    id: String,
    #[serde(rename = "vm-uuid")]
    vm_uuid: String,
    #[serde(rename = "vn-id")]
    vn_id: String,
    #[serde(rename = "mac-address")]
    mac: String,
    /// `{key:value}` strings; anything else in the list is not an annotation and is skipped.
    #[serde(default)]
    annotations: Vec<Value>,
    #[serde(rename = "vlan-id")]
    vlan_id: Option<u64>,
}

/// A uuid of the answer, as the identifier `T` (`VmiUuid::parse`, ...).
fn checked_uuid<T>(
    s: String,
    parse: fn(String) -> Result<T, Invalid>,
    key: &'static str,
    what: &str,
) -> Parsed<T> {
    parse(s).map_err(|e| field(what, key, e.rule))
}

fn mac(s: &str, what: &str) -> Parsed<Mac> {
    Mac::parse(s).ok_or_else(|| field(what, "mac-address", "is not a unicast MAC"))
}

/// More interfaces than any pod has: a count beyond it in the agent's answer is refused before
/// it drives an allocation or a loop.
pub(crate) const MAX_VMIS: u32 = 4096;

/// Parses the body of `GET /vm-cfg/<vm-name>`.
pub fn parse_cfg(body: &[u8]) -> Parsed<Vec<Vmi>> {
    let items: Vec<CfgItem> = decode(body, "the pod's VMIs")?;
    if items.len() > MAX_VMIS as usize {
        return Err(Malformed::TooMany {
            count: items.len(),
            max: MAX_VMIS,
        });
    }
    let lone = items.len() == 1;
    items.into_iter().map(|item| vmi(item, lone)).collect()
}

fn vmi(item: CfgItem, lone: bool) -> Parsed<Vmi> {
    let uuid = checked_uuid(item.id, VmiUuid::parse, "id", "a VMI")?;
    let what = format!("VMI {uuid}");
    let mac = mac(&item.mac, &what)?;
    let mut network = None;
    let mut index = None;
    let mut interface = None;
    let mut default_gw = false;
    let mut ignored = None;
    let (mut namespace, mut name) = (None, None);
    for a in &item.annotations {
        // `{key:value}`, split at the first colon: values may contain colons.
        let Some((k, v)) = a
            .as_str()
            .and_then(|s| s.strip_prefix('{')?.strip_suffix('}')?.split_once(':'))
        else {
            continue;
        };
        match k {
            "network" => network = Some(v.to_string()),
            "namespace" => namespace = Some(v.to_string()),
            "name" => name = Some(v.to_string()),
            "index" => {
                let parsed = v
                    .split_once('/')
                    .and_then(|(k, n)| Some((k.parse().ok()?, n.parse().ok()?)));
                match parsed {
                    Some((k, n)) if k < n && n <= MAX_VMIS => index = Some((k, n)),
                    _ => {
                        let problem = "is not k/N (k < N <= 4096)";
                        return Err(field(&what, "index annotation", problem));
                    }
                }
            }
            "interface" => {
                let problem = "names an interface Linux or this plugin refuses";
                check_ifname(v).map_err(|_| field(&what, "interface annotation", problem))?;
                interface = Some(v.to_string());
            }
            "default-gw" => match yes_or_no(v) {
                Some(yes) => default_gw = yes,
                None => ignored = Some(("default-gw", v.to_string())),
            },
            _ => {}
        }
    }
    // VMIs from a kube-manager without multi-network support carry no index: one such VMI is
    // the whole pod.
    let (index, count) = match index {
        Some(i) => i,
        None if lone => (0, 1),
        None => return Err(field(&what, "index annotation", "is missing")),
    };
    let vlan = match item.vlan_id {
        None | Some(NO_VLAN) => None,
        Some(tag) => Some(
            u16::try_from(tag).map_err(|_| field(&what, "vlan-id", "is not a 16-bit number"))?,
        ),
    };
    Ok(Vmi {
        vm_uuid: checked_uuid(item.vm_uuid, VmUuid::parse, "vm-uuid", &what)?,
        vn_uuid: checked_uuid(item.vn_id, VnUuid::parse, "vn-id", &what)?,
        mac,
        network: network.unwrap_or_else(|| "default".to_string()),
        index,
        count,
        interface,
        default_gw,
        ignored,
        namespace,
        name,
        vlan,
        uuid,
    })
}

/// The values a yes/no annotation (`default-gw`) may have, in any case: `true`, `yes`, `1`, and
/// `false`, `no`, `0`. Anything else is neither.
fn yes_or_no(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// Whether the agent's answer for the pod is the pod's: every VMI made for this pod (its
/// `namespace` and `name` annotations) and all of one VM. Anything else would hand another
/// pod's interface to this one.
pub(crate) fn check_owner(vmis: &[Vmi], namespace: &str, name: &str) -> Parsed<()> {
    for v in vmis {
        if v.namespace.as_deref() != Some(namespace) || v.name.as_deref() != Some(name) {
            return Err(Malformed::NotThePods {
                vmi: v.uuid.to_string(),
                pod: format!("{namespace}/{name}"),
            });
        }
    }
    let vm = vmis.first().map(|v| &v.vm_uuid);
    if let Some(v) = vmis.iter().find(|v| Some(&v.vm_uuid) != vm) {
        return Err(Malformed::OtherVm {
            vmi: v.uuid.to_string(),
        });
    }
    Ok(())
}

/// Whether the agent has every VMI of the pod: N of them, indexes 0..N, all of one VM; sized by
/// the VMIs at hand, never by the N they announce. VMIs that cannot be one pod's (two with one
/// index, or announcing different N) are refused at once: waiting would not mend them.
pub fn complete(vmis: &[Vmi]) -> Parsed<bool> {
    let Some(first) = vmis.first() else {
        return Ok(false);
    };
    if let Some(v) = vmis.iter().find(|v| v.count != first.count) {
        let problem = "announces another count of interfaces (index k/N) than the pod's other VMIs";
        return Err(field(
            &format!("VMI {}", v.uuid),
            "index annotation",
            problem,
        ));
    }
    let mut by_index: Vec<&Vmi> = vmis.iter().collect();
    by_index.sort_by_key(|v| v.index);
    if let Some(w) = by_index.windows(2).find(|w| w[0].index == w[1].index) {
        let problem = "repeats the index of another VMI of the pod";
        return Err(field(
            &format!("VMI {}", w[1].uuid),
            "index annotation",
            problem,
        ));
    }
    // Each index is below N (parsing checked) and none repeats: N of them are exactly 0..N.
    Ok(vmis.len() == first.count as usize && vmis.iter().all(|v| v.vm_uuid == first.vm_uuid))
}

/// The VMI whose interface carries the pod's default route: the one annotated `default-gw`,
/// else the cluster network's.
pub fn default_gw(vmis: &[Vmi]) -> Option<&Vmi> {
    vmis.iter()
        .filter(|v| v.default_gw)
        .min_by_key(|v| v.index)
        .or_else(|| {
            vmis.iter()
                .filter(|v| v.network == "default")
                .min_by_key(|v| v.index)
        })
}

/// The IP configuration of one VMI, from `GET /vm/<vm-uuid>/<vmi-uuid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    pub v4: Option<Ipv4Network>,
    pub v4_gateway: Option<Ipv4Addr>,
    pub v4_dns: Option<Ipv4Addr>,
    /// The agent sends no v6 prefix length; when it does (`v6-plen`) it is used, else /128.
    pub v6: Option<Ipv6Network>,
    pub v6_gateway: Option<Ipv6Addr>,
    pub v6_dns: Option<Ipv6Addr>,
    pub mac: Mac,
    /// The host interface registered for the VMI, if any.
    pub registered_as: Option<String>,
    /// The VLAN tag the vRouter expects the VMI's frames with (nested mode), if a valid one.
    pub vlan: Option<u16>,
}

impl IpConfig {
    pub fn addresses(&self) -> Vec<IpNetwork> {
        self.v4
            .map(IpNetwork::V4)
            .into_iter()
            .chain(self.v6.map(IpNetwork::V6))
            .collect()
    }

    pub fn nameservers(&self) -> Vec<String> {
        let v4 = self.v4_dns.map(IpAddr::V4);
        let v6 = self.v6_dns.map(IpAddr::V6);
        v4.into_iter().chain(v6).map(|a| a.to_string()).collect()
    }
}

/// One element of the `/vm/...` answer, as the agent writes it. A family's fields are present
/// only when its network has IPAM.
#[derive(Deserialize)]
struct IpItem {
    id: String,
    /// The VM (pod) the VMI belongs to.
    #[serde(rename = "instance-id")]
    instance_id: Option<String>,
    #[serde(rename = "mac-address")]
    mac: String,
    #[serde(rename = "system-name")]
    system_name: Option<String>,
    #[serde(rename = "ip-address")]
    ip: Option<String>,
    plen: Option<Plen>,
    gateway: Option<String>,
    #[serde(rename = "dns-server")]
    dns: Option<String>,
    #[serde(rename = "v6-ip-address")]
    ip6: Option<String>,
    /// The real agent sends none; the seed design's sample does.
    #[serde(rename = "v6-plen")]
    plen6: Option<Plen>,
    #[serde(rename = "v6-gateway")]
    gateway6: Option<String>,
    #[serde(rename = "v6-dns-server")]
    dns6: Option<String>,
    /// The VLAN tag the vRouter applies to the VMI (a nested pod's); read leniently, as it only
    /// ever makes CHECK stricter.
    #[serde(rename = "rx-vlan-id")]
    rx_vlan: Option<Value>,
}

/// A prefix length as agents send it: a number, or a string holding one.
#[derive(Deserialize)]
#[serde(untagged)]
enum Plen {
    Number(serde_json::Number),
    Text(String),
}

impl Plen {
    /// The length within `1..=max`; `None` for an empty string.
    fn get(&self, key: &'static str, max: u8, what: &str) -> Parsed<Option<u8>> {
        let n = match self {
            Plen::Text(s) if s.trim().is_empty() => return Ok(None),
            Plen::Text(s) => s.trim().parse::<u64>().ok(),
            Plen::Number(n) => n.as_u64(),
        };
        match n {
            Some(n) if (1..=u64::from(max)).contains(&n) => Ok(Some(n as u8)),
            _ if max == 32 => Err(field(what, key, "is not 1..=32")),
            _ => Err(field(what, key, "is not 1..=128")),
        }
    }
}

/// An address: absent, empty, `0.0.0.0` and `::` all mean "none" (older agents send the
/// unspecified address, with stray spaces, for a family without IPAM).
fn addr<T: FromStr + Into<IpAddr> + Copy>(
    s: Option<&str>,
    key: &'static str,
    what: &str,
) -> Parsed<Option<T>> {
    let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let a: T = s
        .parse()
        .map_err(|_| field(what, key, "is not an address"))?;
    Ok((!a.into().is_unspecified()).then_some(a))
}

/// Parses the body of `GET /vm/<vm-uuid>/<vmi-uuid>`: an array holding that VMI, of that VM.
pub fn parse_ip(body: &[u8], vm_uuid: &str, vmi_uuid: &str) -> Parsed<IpConfig> {
    let what = format!("VMI {vmi_uuid}");
    let items: Vec<IpItem> = decode(body, &format!("the IP config of {what}"))?;
    let item = items
        .into_iter()
        .find(|i| i.id == vmi_uuid)
        .ok_or_else(|| Malformed::Absent { what: what.clone() })?;
    if item.instance_id.as_deref().is_some_and(|i| i != vm_uuid) {
        return Err(Malformed::OtherInstance {
            vmi: vmi_uuid.to_string(),
            vm: vm_uuid.to_string(),
        });
    }
    let mac = mac(&item.mac, &what)?;
    let v4 = match addr::<Ipv4Addr>(item.ip.as_deref(), "ip-address", &what)? {
        None => None,
        Some(ip) => {
            let plen = match &item.plen {
                Some(p) => p.get("plen", 32, &what)?,
                None => None,
            }
            .ok_or_else(|| field(&what, "plen", "is missing beside its ip-address"))?;
            // `get` bounds the length: this cannot fail.
            Ipv4Network::new(ip, plen).ok()
        }
    };
    let v6 = match addr::<Ipv6Addr>(item.ip6.as_deref(), "v6-ip-address", &what)? {
        None => None,
        Some(ip) => {
            let plen = match &item.plen6 {
                Some(p) => p.get("v6-plen", 128, &what)?,
                None => None,
            };
            Ipv6Network::new(ip, plen.unwrap_or(128)).ok()
        }
    };
    if v4.is_none() && v6.is_none() {
        return Err(Malformed::NoAddress { what });
    }
    Ok(IpConfig {
        v4,
        v4_gateway: addr(item.gateway.as_deref(), "gateway", &what)?,
        v4_dns: addr(item.dns.as_deref(), "dns-server", &what)?,
        v6,
        v6_gateway: addr(item.gateway6.as_deref(), "v6-gateway", &what)?,
        v6_dns: addr(item.dns6.as_deref(), "v6-dns-server", &what)?,
        mac,
        registered_as: item.system_name.filter(|s| check_ifname(s).is_ok()),
        vlan: item
            .rx_vlan
            .and_then(|v| v.as_u64())
            .and_then(|t| u16::try_from(t).ok())
            .filter(|t| (1..=4094).contains(t)),
    })
}
