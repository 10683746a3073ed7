//! VMIs (virtual machine interfaces) as the agent describes them, and the choice of the VMIs
//! a call sets up. Pure: the agent's answers decoded into typed data and checked, and decisions
//! over plain data; no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cni::check_ifname;
#[cfg(feature = "thick")]
use crate::error::Conflict;
use crate::error::Malformed;

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

/// UUIDs become URL path segments and file names: only the agent's lowercase dashed form.
pub fn valid_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// One VMI from `GET /vm-cfg/<vm-name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vmi {
    pub uuid: String,
    pub vm_uuid: String,
    pub vn_uuid: String,
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

fn checked_uuid(s: String, key: &'static str, what: &str) -> Parsed<String> {
    if !valid_uuid(&s) {
        return Err(field(what, key, "is not a lowercase uuid"));
    }
    Ok(s)
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
    let uuid = checked_uuid(item.id, "id", "a VMI")?;
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
        vm_uuid: checked_uuid(item.vm_uuid, "vm-uuid", &what)?,
        vn_uuid: checked_uuid(item.vn_id, "vn-id", &what)?,
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
                vmi: v.uuid.clone(),
                pod: format!("{namespace}/{name}"),
            });
        }
    }
    let vm = vmis.first().map(|v| &v.vm_uuid);
    if let Some(v) = vmis.iter().find(|v| Some(&v.vm_uuid) != vm) {
        return Err(Malformed::OtherVm {
            vmi: v.uuid.clone(),
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

/// An attachment recorded in a local state file: which sandbox and interface hold which VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub vmi: String,
    /// `None` for a state file that cannot be read: its holder is unknown, so it counts as live.
    pub container_id: Option<String>,
    pub ifname: String,
}

/// What the resolver was asked, besides the data.
#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The pod has no VMI on that network; these are the networks it has.
    NoSuchNetwork { known: Vec<String> },
    /// Every VMI of the network is held by another interface of the pod.
    AllTaken { count: usize },
    /// The pod has no VMIs at all (thick mode).
    NoVmis,
}

/// What resolution leaves to the agent to settle, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice<'a> {
    /// This attachment's VMI: named by its `interface` annotation, or claimed by it already.
    Held(&'a Vmi),
    /// The free VMIs, lowest index first, each with whether a registration of it would be
    /// unexplained (no state file names it, and the network has more than one VMI to tell
    /// apart): such a VMI is taken only if the agent has not registered it.
    Free(Vec<(&'a Vmi, bool)>),
}

impl<'a> Choice<'a> {
    /// The VMI: the held one, else the first free one that is not `registered` where that
    /// needs asking. `registered` is asked about one VMI at a time, in order, and only until
    /// one fits: requests do not grow with the number of the network's VMIs.
    pub fn take(self, mut registered: impl FnMut(&Vmi) -> bool) -> Option<&'a Vmi> {
        match self {
            Choice::Held(v) => Some(v),
            Choice::Free(free) => free
                .into_iter()
                .find(|(v, unexplained)| !unexplained || !registered(v))
                .map(|(v, _)| v),
        }
    }
}

/// Chooses the VMI for one attachment. Among the network's VMIs in index order:
/// 1. the VMI whose `interface` annotation names this ifname;
/// 2. else the VMI this (container id, ifname) already claimed (a retried or crashed ADD, or
///    one that failed and kept its VMI), unless it asked for another interface name;
/// 3. else the lowest index that asked for no interface name and is not claimed by another
///    interface of this sandbox (a claim of an older sandbox of the pod may be taken over),
///    and is not registered with the agent unless a state file explains it ([`Choice::take`]).
pub fn resolve<'a>(
    at: Attachment<'_>,
    vmis: &'a [Vmi],
    claims: &[Claim],
) -> std::result::Result<Choice<'a>, Unresolved> {
    let mut candidates: Vec<&Vmi> = vmis.iter().filter(|v| v.network == at.network).collect();
    if candidates.is_empty() {
        let mut known: Vec<String> = vmis.iter().map(|v| v.network.clone()).collect();
        known.sort();
        known.dedup();
        return Err(Unresolved::NoSuchNetwork { known });
    }
    candidates.sort_by_key(|v| v.index);
    let claimed_by = |v: &Vmi| {
        claims
            .iter()
            .filter(move |c| c.vmi == v.uuid)
            .collect::<Vec<_>>()
    };
    let named = candidates
        .iter()
        .find(|v| v.interface.as_deref() == Some(at.ifname));
    let ours = || {
        candidates.iter().find(|v| {
            // Never a VMI that asked for another name, whatever a state file says.
            v.interface.as_deref().is_none_or(|i| i == at.ifname)
                && claimed_by(v).iter().any(|c| {
                    c.container_id.as_deref() == Some(at.container_id) && c.ifname == at.ifname
                })
        })
    };
    if let Some(v) = named.or_else(ours) {
        return Ok(Choice::Held(v));
    }
    let live = |c: &&Claim| {
        c.container_id
            .as_deref()
            .is_none_or(|id| id == at.container_id)
    };
    let several = candidates.len() > 1;
    let free: Vec<(&Vmi, bool)> = candidates
        .iter()
        .filter(|v| v.interface.is_none() && !claimed_by(v).iter().any(live))
        .map(|v| (*v, several && claimed_by(v).is_empty()))
        .collect();
    if free.is_empty() {
        return Err(Unresolved::AllTaken {
            count: candidates.len(),
        });
    }
    Ok(Choice::Free(free))
}

/// One interface a call sets up: its VMI, its name in the pod, and whether it carries the pod's
/// default route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted<'a> {
    pub vmi: &'a Vmi,
    pub ifname: String,
    pub default_gw: bool,
}

/// Plugin mode: the interface for `vmi`, this attachment's VMI among the pod's `vmis`.
pub(crate) fn for_attachment<'a>(vmis: &'a [Vmi], vmi: &'a Vmi, ifname: &str) -> Wanted<'a> {
    Wanted {
        vmi,
        ifname: ifname.to_string(),
        default_gw: default_gw(vmis) == Some(vmi),
    }
}

/// Thick mode: every VMI of the pod in index order, named by its `interface` annotation, else
/// `ifname` (CNI_IFNAME) for index 0 and `eth<index>`. Two VMIs may not share a name.
#[cfg(feature = "thick")]
pub(crate) fn for_pod<'a>(
    vmis: &'a [Vmi],
    ifname: &str,
) -> std::result::Result<Vec<Wanted<'a>>, Conflict> {
    let mut sorted: Vec<&Vmi> = vmis.iter().collect();
    sorted.sort_by_key(|v| v.index);
    let gw = default_gw(vmis);
    let mut wanted: Vec<Wanted> = Vec::with_capacity(sorted.len());
    for v in sorted {
        let name = match (&v.interface, v.index) {
            (Some(name), _) => name.clone(),
            (None, 0) => ifname.to_string(),
            (None, k) => format!("eth{k}"),
        };
        if let Err(why) = check_ifname(&name) {
            return Err(Conflict::BadName { name, why });
        }
        if let Some(other) = wanted.iter().find(|w| w.ifname == name) {
            return Err(Conflict::SameName {
                name,
                first: (other.vmi.uuid.clone(), other.vmi.index),
                second: (v.uuid.clone(), v.index),
            });
        }
        wanted.push(Wanted {
            vmi: v,
            ifname: name,
            default_gw: gw == Some(v),
        });
    }
    Ok(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Malformed;
    use serde_json::json;

    const VM: &str = "40936d96-cf0e-11e8-9892-002590aaa964";

    fn uuid(n: u8) -> String {
        format!("b86ac068-cf0e-11e8-b196-0025900000{n:02x}")
    }

    fn vmi(n: u8, network: &str, index: u32, count: u32) -> Vmi {
        Vmi {
            uuid: uuid(n),
            vm_uuid: VM.into(),
            vn_uuid: "f95af4cc-e4ba-44c8-9936-269d891e0ee9".into(),
            mac: Mac([2, 0, 0, 0, 0, n]),
            network: network.into(),
            index,
            count,
            interface: None,
            default_gw: false,
            ignored: None,
            namespace: Some("default".into()),
            name: Some("p".into()),
            vlan: None,
        }
    }

    fn claim(n: u8, container_id: &str, ifname: &str) -> Claim {
        Claim {
            vmi: uuid(n),
            container_id: Some(container_id.into()),
            ifname: ifname.into(),
        }
    }

    fn at<'a>(network: &'a str, ifname: &'a str) -> Attachment<'a> {
        Attachment {
            network,
            container_id: "sandbox-2",
            ifname,
        }
    }

    /// default(0), net-a(1), net-b(2), net-a(3); UUIDs deliberately not in index order.
    fn pod() -> Vec<Vmi> {
        vec![
            vmi(9, "net-a", 3, 4),
            vmi(7, "net-b", 2, 4),
            vmi(8, "default", 0, 4),
            vmi(5, "net-a", 1, 4),
        ]
    }

    /// The VMI resolution picks when the agent has `reg` registered: the last byte of its uuid.
    fn pick(
        vmis: &[Vmi],
        a: Attachment,
        claims: &[Claim],
        reg: &[String],
    ) -> std::result::Result<u8, Unresolved> {
        let choice = resolve(a, vmis, claims)?;
        let v = choice
            .take(|v| reg.contains(&v.uuid))
            .ok_or(Unresolved::AllTaken { count: 2 })?;
        Ok(u8::from_str_radix(&v.uuid[34..], 16).unwrap())
    }

    #[test]
    fn repeated_network_gets_lowest_free_index_in_order() {
        let vmis = pod();
        // First net-a attachment: index 1 (uuid 5), whatever the uuid order.
        assert_eq!(pick(&vmis, at("net-a", "net1"), &[], &[]), Ok(5));
        // Once claimed, the second gets index 3.
        let claims = [claim(5, "sandbox-2", "net1")];
        assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(9));
    }

    #[test]
    fn ifname_number_does_not_imply_index() {
        // [macvlan-net, net-a, net-a]: Multus calls us for net2 and net3; kube-manager numbered
        // only the Contrail networks: default 0, net-a 1, net-a 2.
        let vmis = vec![
            vmi(3, "net-a", 2, 3),
            vmi(1, "default", 0, 3),
            vmi(2, "net-a", 1, 3),
        ];
        assert_eq!(pick(&vmis, at("net-a", "net2"), &[], &[]), Ok(2));
        assert_eq!(
            pick(
                &vmis,
                at("net-a", "net3"),
                &[claim(2, "sandbox-2", "net2")],
                &[]
            ),
            Ok(3)
        );
    }

    #[test]
    fn own_claim_wins_again_on_retry() {
        let vmis = pod();
        let claims = [claim(9, "sandbox-2", "net3"), claim(5, "sandbox-2", "net1")];
        assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(9));
        assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[]), Ok(5));
    }

    #[test]
    fn interface_annotation_wins_over_everything() {
        let mut vmis = pod();
        vmis[0].interface = Some("eth5".into()); // index 3 asked for eth5
        assert_eq!(
            pick(
                &vmis,
                at("net-a", "eth5"),
                &[claim(5, "sandbox-2", "eth5")],
                &[]
            ),
            Ok(9)
        );
        // ...and is never handed to an interface with another name.
        let claims = [claim(5, "sandbox-2", "net1")];
        assert_eq!(
            pick(&vmis, at("net-a", "net2"), &claims, &[]),
            Err(Unresolved::AllTaken { count: 2 })
        );
    }

    #[test]
    fn claims_of_an_older_sandbox_can_be_taken_over() {
        let vmis = pod();
        let claims = [claim(5, "sandbox-1", "net1"), claim(9, "sandbox-1", "net3")];
        let reg = [uuid(5), uuid(9)];
        assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &reg), Ok(5));
    }

    #[test]
    fn registered_without_any_state_file_is_skipped() {
        let vmis = pod();
        assert_eq!(pick(&vmis, at("net-a", "net1"), &[], &[uuid(5)]), Ok(9));
        assert_eq!(
            pick(&vmis, at("net-a", "net1"), &[], &[uuid(5), uuid(9)]),
            Err(Unresolved::AllTaken { count: 2 })
        );
        // A network attached once has nothing to tell apart: no question for the agent.
        let choice = resolve(at("net-b", "net2"), &vmis, &[]).unwrap();
        assert_eq!(
            choice.take(|_| panic!("asked the agent")).unwrap().uuid,
            uuid(7)
        );
    }

    #[test]
    fn the_agent_is_asked_about_one_candidate_at_a_time_in_order() {
        let vmis: Vec<Vmi> = (0..8)
            .map(|k| vmi(k + 1, "net-a", u32::from(k) + 1, 9))
            .collect();
        let mut asked = Vec::new();
        let choice = resolve(at("net-a", "net1"), &vmis, &[]).unwrap();
        let v = choice.take(|v| {
            asked.push(v.index);
            v.index < 3
        });
        assert_eq!(v.unwrap().index, 3);
        assert_eq!(asked, [1, 2, 3], "only until one fits");
        // A claim of an older sandbox explains a registration: taken over without asking.
        let claims = [claim(1, "sandbox-1", "net1")];
        let choice = resolve(at("net-a", "net1"), &vmis, &claims).unwrap();
        assert_eq!(choice.take(|_| true).unwrap().index, 1);
    }

    #[test]
    fn a_failed_attachment_keeps_its_vmi_from_its_siblings() {
        // net2's ADD failed and kept index 2 (a claim with no interface): net3 gets index 3,
        // and net2's retry gets index 2 again.
        let vmis = vec![
            vmi(1, "default", 0, 4),
            vmi(2, "net-a", 1, 4),
            vmi(3, "net-a", 2, 4),
            vmi(4, "net-a", 3, 4),
        ];
        let claims = [
            claim(1, "sandbox-2", "eth0"),
            claim(2, "sandbox-2", "net1"),
            claim(3, "sandbox-2", "net2"),
        ];
        assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(4));
        assert_eq!(pick(&vmis, at("net-a", "net2"), &claims, &[]), Ok(3));
    }

    #[test]
    fn all_taken_by_live_interfaces() {
        let vmis = pod();
        let claims = [claim(5, "sandbox-2", "net1"), claim(9, "sandbox-2", "net3")];
        assert_eq!(
            pick(&vmis, at("net-a", "net4"), &claims, &[]),
            Err(Unresolved::AllTaken { count: 2 })
        );
    }

    #[test]
    fn unknown_network_lists_known_ones() {
        let err = pick(&pod(), at("net-z", "net1"), &[], &[]).unwrap_err();
        assert_eq!(
            err,
            Unresolved::NoSuchNetwork {
                known: vec!["default".into(), "net-a".into(), "net-b".into()]
            }
        );
    }

    #[test]
    fn single_network_and_default() {
        let vmis = pod();
        assert_eq!(pick(&vmis, at("net-b", "net2"), &[], &[]), Ok(7));
        assert_eq!(pick(&vmis, at("default", "eth0"), &[], &[]), Ok(8));
    }

    #[test]
    fn other_pods_claims_do_not_matter_for_other_vmis() {
        let vmis = pod();
        // A claim on an unrelated uuid changes nothing.
        let claims = [claim(0, "sandbox-2", "net1")];
        assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[]), Ok(5));
    }

    #[test]
    fn an_unreadable_claim_holds_its_vmi() {
        let vmis = pod();
        let claims = [Claim {
            vmi: uuid(5),
            container_id: None,
            ifname: String::new(),
        }];
        assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[uuid(5)]), Ok(9));
    }

    #[test]
    fn completeness() {
        let vmis = pod();
        assert_eq!(complete(&vmis), Ok(true));
        assert_eq!(complete(&vmis[..3]), Ok(false));
        assert_eq!(complete(&[]), Ok(false));
        let mut other_vm = pod();
        other_vm[1].vm_uuid = uuid(1);
        assert_eq!(complete(&other_vm), Ok(false));
        // Never one pod's: refused at once, naming the VMI and the problem.
        let mut dup = pod();
        dup[1].index = 3;
        let e = complete(&dup).unwrap_err().to_string();
        assert!(e.contains("repeats the index"), "{e}");
        let mut disagree = pod();
        disagree[2].count = 5;
        let e = complete(&disagree).unwrap_err().to_string();
        assert!(e.contains(&uuid(8)) && e.contains("another count"), "{e}");
        // Only part of the pod yet, but already two with one index: refused too.
        let e = complete(&dup[..2]).unwrap_err().to_string();
        assert!(e.contains("repeats the index"), "{e}");
    }

    #[test]
    fn default_gw_takes_yes_and_no_and_ignores_the_rest() {
        let gw = |value: &str| {
            let body = json!([cfg_item(
                &uuid(1),
                json!([format!("{{default-gw:{value}}}")])
            )]);
            let v = parse_cfg(body.to_string().as_bytes()).unwrap().remove(0);
            (v.default_gw, v.ignored)
        };
        for yes in ["true", "True", "yes", "1"] {
            assert_eq!(gw(yes), (true, None), "{yes}");
        }
        for no in ["false", "FALSE", "no", "0"] {
            assert_eq!(gw(no), (false, None), "{no}");
        }
        for other in ["", "maybe", "nope", "2", "t\u{1b}[31m"] {
            assert_eq!(
                gw(other),
                (false, Some(("default-gw", other.to_string()))),
                "{other}"
            );
        }
    }

    #[test]
    fn default_gw_annotation_else_cluster_network() {
        let mut vmis = pod();
        assert_eq!(default_gw(&vmis).unwrap().uuid, uuid(8));
        vmis[1].default_gw = true;
        assert_eq!(default_gw(&vmis).unwrap().uuid, uuid(7));
        let secondary_only = vec![vmi(1, "net-a", 1, 2)];
        assert_eq!(default_gw(&secondary_only), None);
    }

    fn cfg_item(id: &str, annotations: Value) -> Value {
        json!({"id": id, "vm-uuid": VM, "vn-id": "f95af4cc-e4ba-44c8-9936-269d891e0ee9",
               "vn-name": "default-domain:k8s-default:net-a", "mac-address": "02:b8:6a:c0:68:cf",
               "sub-interface": false, "vlan-id": 65535, "annotations": annotations})
    }

    #[test]
    fn parses_the_agents_cfg_answer() {
        let body = json!([cfg_item(
            &uuid(1),
            json!([
                "{cluster:k8s}",
                "{network:net-a}",
                "{index:1/3}",
                "{interface:eth5}",
                "{default-gw:true}",
                "{note:a:b:c}",
                "garbage"
            ])
        )]);
        let v = &parse_cfg(body.to_string().as_bytes()).unwrap()[0];
        assert_eq!((v.network.as_str(), v.index, v.count), ("net-a", 1, 3));
        assert_eq!(v.interface.as_deref(), Some("eth5"));
        assert!(v.default_gw);
        assert_eq!(v.mac.to_string(), "02:b8:6a:c0:68:cf");
    }

    #[test]
    fn a_lone_vmi_without_annotations_is_the_whole_pod() {
        let mut item = cfg_item(&uuid(1), json!([]));
        item.as_object_mut().unwrap().remove("annotations");
        let v = parse_cfg(json!([item]).to_string().as_bytes()).unwrap();
        assert_eq!(
            (v[0].network.as_str(), v[0].index, v[0].count),
            ("default", 0, 1)
        );
        assert_eq!(complete(&v), Ok(true));
    }

    #[test]
    fn hostile_cfg_answers_are_decode_errors() {
        let bad = [
            json!({"not": "an array"}),
            json!([cfg_item("../../etc/passwd", json!(["{index:0/1}"]))]),
            json!([cfg_item(
                "B86AC068-CF0E-11E8-B196-002590AAA964",
                json!(["{index:0/1}"])
            )]),
            json!([cfg_item(&uuid(1), json!(["{index:2/2}"]))]),
            json!([cfg_item(&uuid(1), json!(["{index:x}"]))]),
            // A count that would size an allocation: refused, whatever memory there is.
            json!([cfg_item(&uuid(1), json!(["{index:0/4294967295}"]))]),
            json!([cfg_item(&uuid(1), json!(["{index:0/4097}"]))]),
            json!([cfg_item(
                &uuid(1),
                json!(["{index:0/1}", "{interface:../x}"])
            )]),
            json!([
                cfg_item(&uuid(1), json!(["{network:a}"])),
                cfg_item(&uuid(2), json!(["{network:a}"]))
            ]),
        ];
        let fields = [
            None,
            Some("id"),
            Some("id"),
            Some("index annotation"),
            Some("index annotation"),
            Some("index annotation"),
            Some("index annotation"),
            Some("interface annotation"),
            Some("index annotation"),
        ];
        for (b, want) in bad.into_iter().zip(fields) {
            let got = match parse_cfg(b.to_string().as_bytes()).unwrap_err() {
                Malformed::Field { field, .. } => Some(field),
                Malformed::Shape { .. } => None,
                other => panic!("{b}: {other}"),
            };
            assert_eq!(got, want, "{b}");
        }
        let mut bad_mac = cfg_item(&uuid(1), json!(["{index:0/1}"]));
        for mac in [
            "01:00:5e:00:00:01",
            "00:00:00:00:00:00",
            "zz:00:00:00:00:00",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
        ] {
            bad_mac["mac-address"] = json!(mac);
            assert!(
                parse_cfg(json!([bad_mac]).to_string().as_bytes()).is_err(),
                "{mac}"
            );
        }
        assert!(parse_cfg(b"[{\"id\": ").is_err());
    }

    fn ip_item() -> Value {
        json!({"id": uuid(1), "instance-id": VM, "mac-address": "02:d8:da:c0:68:aa", "system-name": uuid(1),
               "ip-address": "30.1.1.252", "plen": 24, "dns-server": "30.1.1.253", "gateway": "30.1.1.254",
               "v6-ip-address": "fd00:30::fc", "v6-dns-server": "fd00:30::fd", "v6-gateway": "fd00:30::fe"})
    }

    #[test]
    fn parses_dual_stack_ip_config() {
        let ip = parse_ip(json!([ip_item()]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
        assert_eq!(ip.v4.unwrap().to_string(), "30.1.1.252/24");
        assert_eq!(ip.v6.unwrap().to_string(), "fd00:30::fc/128");
        assert_eq!(ip.v6_gateway.unwrap().to_string(), "fd00:30::fe");
        assert_eq!(ip.nameservers(), vec!["30.1.1.253", "fd00:30::fd"]);
        // A 36-character uuid is not a host interface: not registered yet.
        assert_eq!(ip.registered_as, None);
    }

    #[test]
    fn v6_plen_is_used_when_present_and_unspecified_means_absent() {
        let mut item = ip_item();
        item["v6-plen"] = json!(64);
        item["ip-address"] = json!(" 0.0.0.0");
        item["system-name"] = json!("tap0123456789ab");
        let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
        assert_eq!(ip.v6.unwrap().to_string(), "fd00:30::fc/64");
        assert_eq!(ip.v4, None);
        assert_eq!(ip.registered_as.as_deref(), Some("tap0123456789ab"));
    }

    #[test]
    fn the_vlan_tag_is_read_when_it_is_one() {
        for (rx, want) in [
            (json!(10), Some(10)),
            (json!(4094), Some(4094)),
            (json!(65535), None),
            (json!(0), None),
            (json!("10"), None),
            (json!(-1), None),
        ] {
            let mut item = ip_item();
            item["rx-vlan-id"] = rx.clone();
            let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
            assert_eq!(ip.vlan, want, "{rx}");
        }
    }

    #[test]
    fn seed_style_strings_are_accepted() {
        let mut item = ip_item();
        item["ip-address"] = json!(" 10.47.255.250");
        item["plen"] = json!("12");
        item["v6-ip-address"] = json!("::");
        item["v6-plen"] = json!("");
        let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
        assert_eq!(ip.v4.unwrap().to_string(), "10.47.255.250/12");
        assert_eq!(ip.v6, None);
    }

    #[test]
    fn hostile_ip_answers_are_decode_errors() {
        let mutations: [(&str, Value); 8] = [
            ("plen", json!(33)),
            ("plen", json!(0)),
            ("plen", json!("x")),
            ("ip-address", json!("300.1.1.1")),
            ("ip-address", json!(7)),
            ("v6-plen", json!(129)),
            ("mac-address", json!("ff:ff:ff:ff:ff:ff")),
            ("gateway", json!("not-an-ip")),
        ];
        for (k, v) in mutations {
            let mut item = ip_item();
            item[k] = v.clone();
            match parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap_err() {
                Malformed::Field { field, .. } => assert_eq!(field, k),
                // A number where the contract has a string.
                Malformed::Shape { at, .. } => assert_eq!(at, format!("[0].{k}")),
                other => panic!("{k}={v}: {other}"),
            }
        }
        let mut other_vm = ip_item();
        other_vm["instance-id"] = json!(uuid(3));
        assert!(matches!(
            parse_ip(json!([other_vm]).to_string().as_bytes(), VM, &uuid(1)),
            Err(Malformed::OtherInstance { .. })
        ));
        let mut none = ip_item();
        none["ip-address"] = json!("");
        none["v6-ip-address"] = json!("::");
        assert!(parse_ip(json!([none]).to_string().as_bytes(), VM, &uuid(1)).is_err());
        assert!(parse_ip(json!([ip_item()]).to_string().as_bytes(), VM, &uuid(2)).is_err());
        let mut no_plen = ip_item();
        no_plen.as_object_mut().unwrap().remove("plen");
        assert!(parse_ip(json!([no_plen]).to_string().as_bytes(), VM, &uuid(1)).is_err());
    }

    #[test]
    fn uuids() {
        assert!(valid_uuid(VM));
        for bad in [
            "",
            "40936d96-cf0e-11e8-9892-002590aaa96",
            "40936D96-cf0e-11e8-9892-002590aaa964",
            "40936d96-cf0e-11e8-9892/002590aaa964",
            "../../../../../../../../../../etc/x",
        ] {
            assert!(!valid_uuid(bad), "{bad}");
        }
    }

    #[test]
    fn plugin_mode_wants_one_vmi_with_the_default_route_rule() {
        let vmis = pod();
        let w = for_attachment(&vmis, &vmis[2], "eth0");
        assert_eq!(
            (w.vmi.uuid.as_str(), w.ifname.as_str(), w.default_gw),
            (uuid(8).as_str(), "eth0", true)
        );
        let w = for_attachment(&vmis, &vmis[3], "net1");
        assert!(!w.default_gw);
        let why = resolve(at("net-z", "net9"), &vmis, &[]).unwrap_err();
        assert_eq!(
            why,
            Unresolved::NoSuchNetwork {
                known: vec!["default".into(), "net-a".into(), "net-b".into()]
            }
        );
    }

    #[cfg(feature = "thick")]
    #[test]
    fn thick_mode_names_follow_index_and_annotations() {
        let mut vmis = pod();
        vmis[0].interface = Some("data0".into()); // net-a, index 3
        let names: Vec<String> = for_pod(&vmis, "eth0")
            .unwrap()
            .into_iter()
            .map(|w| w.ifname)
            .collect();
        assert_eq!(names, ["eth0", "eth1", "eth2", "data0"]);
        assert_eq!(for_pod(&vmis, "ceth0").unwrap()[0].ifname, "ceth0");
        // The default route: annotated, else the cluster network's.
        let gw: Vec<bool> = for_pod(&vmis, "eth0")
            .unwrap()
            .iter()
            .map(|w| w.default_gw)
            .collect();
        assert_eq!(gw, [true, false, false, false]);
        vmis[1].default_gw = true; // net-b, index 2
        let gw: Vec<bool> = for_pod(&vmis, "eth0")
            .unwrap()
            .iter()
            .map(|w| w.default_gw)
            .collect();
        assert_eq!(gw, [false, false, true, false]);
    }

    #[cfg(feature = "thick")]
    #[test]
    fn thick_mode_name_clashes_fail_before_anything_happens() {
        let mut vmis = pod();
        vmis[1].interface = Some("eth1".into()); // index 2 asks for eth1, index 1's name
        let err = for_pod(&vmis, "eth0").unwrap_err();
        assert!(
            matches!(&err, Conflict::SameName { name, .. } if name == "eth1"),
            "{err}"
        );
        // CNI_IFNAME itself may clash with an annotation.
        let mut vmis = pod();
        vmis[3].interface = Some("eth0".into());
        assert!(for_pod(&vmis, "eth0").is_err());
    }
}
