//! What one attachment's interface must look like, described once, from its record (the VMI and
//! the names), the agent's IP configuration and the MTU: ADD applies the description, CHECK
//! compares the kernel (and the runtime's `prevResult`) with it, the result is made from it.
//! Pure: the kernel's state comes in as [`Seen`], gathered by the caller.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::cni::{self, Interface, Outcome};
use crate::error::{Error, Result};
use crate::ids::{ContainerId, IfName, VmName, VmiUuid};
use crate::kernel::netlink::Route;
use crate::state::Record;
use crate::vmi::{IpConfig, Mac};

/// One attachment's interface, as ADD makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Its name in the pod, and the pod's netns path.
    pub ifname: IfName,
    pub netns: String,
    /// The host side's name, and its VLAN tag in nested mode.
    pub host_ifname: IfName,
    pub vlan: Option<u16>,
    pub mac: Mac,
    pub mtu: u32,
    /// Each address with its family's gateway.
    pub addresses: Vec<(IpNetwork, Option<IpAddr>)>,
    /// On-link host routes to gateways outside their address's prefix (an IPv6 /128 always).
    pub on_link: Vec<IpNetwork>,
    /// The pod's default routes, when this interface carries them: (destination, gateway).
    pub defaults: Vec<(IpNetwork, IpAddr)>,
    pub nameservers: Vec<String>,
}

/// The IPv6 minimum MTU (RFC 8200).
const IPV6_MIN_MTU: u32 = 1280;

/// The interface of `record` with the agent's IP configuration `ip` and `mtu`. An IPv6 network
/// needs 1280 bytes: refused here, before anything is configured, rather than later with a bare
/// EINVAL.
pub fn describe(record: &Record, ip: &IpConfig, mtu: u32) -> Result<Spec> {
    if ip.v6.is_some() && mtu < IPV6_MIN_MTU {
        return Err(Error::config(
            "contrail.mtu",
            format!(
                "{mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum, and interface {} gets an IPv6 \
                 address",
                record.ifname
            ),
        ));
    }
    let addresses: Vec<(IpNetwork, Option<IpAddr>)> = [
        ip.v4
            .map(|a| (IpNetwork::V4(a), ip.v4_gateway.map(IpAddr::V4))),
        ip.v6
            .map(|a| (IpNetwork::V6(a), ip.v6_gateway.map(IpAddr::V6))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let on_link = addresses
        .iter()
        .filter_map(|(net, gw)| gw.filter(|gw| !net.contains(*gw)).map(IpNetwork::from))
        .collect();
    let defaults = if record.default_gw {
        addresses
            .iter()
            .filter_map(|(_, gw)| *gw)
            .map(|gw| (default_dst(gw.is_ipv6()), gw))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Spec {
        ifname: record.ifname.clone(),
        netns: record.netns.clone(),
        host_ifname: record.host_ifname.clone(),
        // The tag the vRouter applies now (it may have changed since ADD), else the one ADD used.
        vlan: record.vlan.map(|t| ip.vlan.unwrap_or(t)),
        // Files the agent wrote for another plugin carry no MAC: the agent's is the truth.
        mac: record.mac.unwrap_or(ip.mac),
        mtu,
        addresses,
        on_link,
        defaults,
        nameservers: ip.nameservers(),
    })
}

fn default_dst(v6: bool) -> IpNetwork {
    let any = if v6 {
        IpAddr::from([0u16; 8])
    } else {
        IpAddr::from([0u8; 4])
    };
    IpNetwork::new(any, 0).expect("a /0 of the unspecified address")
}

/// What the kernel shows of one link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSeen {
    pub index: u32,
    pub mac: Option<Mac>,
    pub mtu: u32,
    pub up: bool,
    /// A VLAN link's tag.
    pub vlan: Option<u16>,
    /// A veth end.
    pub veth: bool,
    /// The device it sits on (a veth's peer, a macvlan's VLAN link), and whether that is in
    /// another network namespace.
    pub lower: Option<u32>,
    pub lower_elsewhere: bool,
}

/// Whether `pod`, the link in the pod, is the one whose host side is `host`: it sits on the host
/// side's index in another namespace (a veth's peer, a macvlan's VLAN link), and a veth's host
/// end sits on it in turn. A look-alike a pod made itself (a veth of its own with the VMI's MAC,
/// MTU and addresses, once the real one was renamed away) has its peer in the pod, and the host
/// end still leads to the real one. Shared by CHECK, `inspect` and a retried ADD.
pub fn leads_to(pod: &LinkSeen, host: &LinkSeen) -> bool {
    let sits_on_host = pod.lower == Some(host.index) && pod.lower_elsewhere;
    sits_on_host && (!host.veth || host.lower == Some(pod.index))
}

/// What the kernel shows of an attachment: its link in the pod with that link's addresses, the
/// pod's routes (both families), and its host side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub link: Option<LinkSeen>,
    pub addresses: Vec<IpNetwork>,
    pub routes: Vec<Route>,
    pub host: Option<LinkSeen>,
}

/// How an attachment differs from what ADD made (CHECK's code 103).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// No attachment of this container (on this interface) is recorded.
    NotRecorded {
        container_id: ContainerId,
        ifname: Option<IfName>,
    },
    /// The attachment's ADD failed: it holds its VMI but has no interface.
    Failed {
        ifname: IfName,
        vmi: VmiUuid,
    },
    /// The agent has no IP configuration for the VMI (it lost the port, or the network has no
    /// IPAM).
    NotRegistered {
        vmi: VmiUuid,
        vm_name: VmName,
        host_ifname: IfName,
    },
    /// The agent has the VMI under another host interface (`has`: the agent's words).
    RegisteredAs {
        vmi: VmiUuid,
        has: Option<String>,
        host_ifname: IfName,
    },
    /// The interface in the pod is not the one attached to the host side (a look-alike, or the
    /// attachment's interface renamed away and another given its name).
    NotAttached {
        ifname: IfName,
        host_ifname: IfName,
    },
    /// An interface is gone from `place` (the pod's netns path, or the host).
    Missing {
        ifname: IfName,
        place: String,
    },
    /// vhost-user: the link vrouter-dpdk connects through, to the pod's socket, is gone.
    SocketLinkMissing {
        link: PathBuf,
    },
    /// The interface's MAC (`has`: none, when the link reports no MAC) is not the VMI's.
    Mac {
        ifname: IfName,
        has: Option<Mac>,
        wants: Mac,
    },
    Mtu {
        ifname: IfName,
        has: u32,
        wants: u32,
    },
    /// Nested mode: the VLAN link carries another tag (or none).
    Vlan {
        ifname: IfName,
        has: Option<u16>,
        wants: u16,
    },
    Down {
        ifname: IfName,
    },
    Address {
        ifname: IfName,
        wants: IpNetwork,
    },
    Route {
        ifname: IfName,
        dst: IpNetwork,
        gw: Option<IpAddr>,
    },
    /// The runtime's `prevResult` lists something this attachment does not have.
    Listed {
        what: String,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::NotRecorded {
                container_id,
                ifname,
            } => {
                let on = ifname
                    .as_ref()
                    .map(|i| format!(" interface {i}"))
                    .unwrap_or_default();
                write!(
                    f,
                    "no attachment is recorded for container {container_id}{on}"
                )
            }
            Mismatch::Failed { ifname, vmi } => write!(
                f,
                "the ADD of {ifname} failed: it holds VMI {vmi} but has no interface; retry the \
                 ADD or DEL it"
            ),
            Mismatch::NotRegistered {
                vmi,
                vm_name,
                host_ifname,
            } => write!(
                f,
                "the agent has no IP configuration for VMI {vmi} of pod {vm_name}, which this \
                 node registered as {host_ifname}: the agent lost the port or its network has \
                 no IPAM"
            ),
            Mismatch::RegisteredAs {
                vmi,
                has,
                host_ifname,
            } => write!(
                f,
                "the agent has VMI {vmi} registered as {:?}, not {host_ifname}",
                has.as_deref().unwrap_or("nothing")
            ),
            Mismatch::Missing { ifname, place } => {
                write!(f, "interface {ifname} is missing from {place}")
            }
            Mismatch::SocketLinkMissing { link } => write!(
                f,
                "the link to the pod's socket, {}, is missing from the vRouter's socket directory",
                link.display()
            ),
            Mismatch::NotAttached {
                ifname,
                host_ifname,
            } => write!(
                f,
                "interface {ifname} in the pod is not the one attached to host interface \
                 {host_ifname}: the attachment's interface was renamed away or replaced"
            ),
            Mismatch::Mac { ifname, has, wants } => match has {
                Some(has) => write!(
                    f,
                    "interface {ifname} has MAC {has}, the agent says {wants}"
                ),
                None => write!(f, "interface {ifname} has no MAC, the agent says {wants}"),
            },
            Mismatch::Mtu { ifname, has, wants } => {
                write!(
                    f,
                    "interface {ifname} has MTU {has}, the config says {wants}"
                )
            }
            Mismatch::Vlan { ifname, has, wants } => match has {
                Some(has) => write!(
                    f,
                    "VLAN link {ifname} has tag {has}, the agent says {wants}"
                ),
                None => write!(
                    f,
                    "{ifname} is not a VLAN link (the agent's tag is {wants})"
                ),
            },
            Mismatch::Down { ifname } => write!(f, "interface {ifname} is down"),
            Mismatch::Address { ifname, wants } => {
                write!(f, "interface {ifname} lacks address {wants}")
            }
            Mismatch::Route { ifname, dst, gw } => match gw {
                Some(gw) => write!(f, "the route to {dst} via {gw} on {ifname} is missing"),
                None => write!(f, "the route to {dst} on {ifname} is missing"),
            },
            Mismatch::Listed { what } => write!(f, "prevResult lists {what}"),
        }
    }
}

impl From<Mismatch> for Error {
    fn from(m: Mismatch) -> Error {
        Error::Check(m)
    }
}

/// The result's routes: each default route, via its gateway.
fn routes(defaults: &[(IpNetwork, IpAddr)]) -> Vec<cni::Route> {
    let each = defaults.iter().map(|(dst, gw)| cni::Route {
        dst: *dst,
        gw: Some(*gw),
    });
    each.collect()
}

impl Spec {
    /// The default routes to add: the wanted ones whose destination no other interface of the
    /// pod has a route for already (calico's eth0 under CNI-Genie keeps the pod's default).
    pub fn defaults_to_add(&self, routes: &[Route], ours: u32) -> Vec<(IpNetwork, IpAddr)> {
        self.defaults
            .iter()
            .filter(|(dst, _)| other_default(routes, *dst, ours).is_none())
            .copied()
            .collect()
    }

    /// The CNI result for this interface with the host side's MAC and the default routes that
    /// were added.
    pub fn outcome(&self, host_mac: Option<Mac>, defaults: &[(IpNetwork, IpAddr)]) -> Outcome {
        let host = Interface {
            name: self.host_ifname.to_string(),
            mac: host_mac.map(|m| m.to_string()).unwrap_or_default(),
            mtu: self.mtu,
            sandbox: None,
            socket_path: None,
        };
        Outcome {
            interfaces: vec![host, self.pod_interface(None)],
            ips: self.ips(1),
            routes: routes(defaults),
            nameservers: self.nameservers.clone(),
        }
    }

    /// The CNI result of a vhost-user attachment: no host side and nothing in the pod's
    /// netns, one interface with `sandbox` (so that Multus copies it and its addresses into
    /// `network-status`), the VMI's MAC and the socket as the pod sees it; the agent's
    /// addresses and the routes the application is to use.
    pub fn vhost_outcome(&self, socket_path: &str) -> Outcome {
        Outcome {
            interfaces: vec![self.pod_interface(Some(socket_path.to_string()))],
            ips: self.ips(0),
            routes: routes(&self.defaults),
            nameservers: self.nameservers.clone(),
        }
    }

    /// The result's interface in the pod: its name, the VMI's MAC, in the pod's netns.
    fn pod_interface(&self, socket_path: Option<String>) -> Interface {
        Interface {
            name: self.ifname.to_string(),
            mac: self.mac.to_string(),
            mtu: self.mtu,
            sandbox: Some(self.netns.clone()),
            socket_path,
        }
    }

    /// The agent's addresses, indexed to the result's interface `interface`.
    fn ips(&self, interface: usize) -> Vec<cni::IpConfig> {
        let each = self
            .addresses
            .iter()
            .map(|(address, gateway)| cni::IpConfig {
                address: *address,
                gateway: *gateway,
                interface,
            });
        each.collect()
    }

    /// Whether the kernel still has what ADD made; the first difference otherwise.
    pub fn verify(&self, seen: &Seen) -> std::result::Result<(), Mismatch> {
        let ifname = || self.ifname.clone();
        let link = seen.link.as_ref().ok_or_else(|| Mismatch::Missing {
            ifname: self.ifname.clone(),
            place: self.netns.clone(),
        })?;
        let host = seen.host.as_ref().ok_or_else(|| Mismatch::Missing {
            ifname: self.host_ifname.clone(),
            place: "the host".into(),
        })?;
        if !leads_to(link, host) {
            return Err(Mismatch::NotAttached {
                ifname: ifname(),
                host_ifname: self.host_ifname.clone(),
            });
        }
        if link.mac != Some(self.mac) {
            return Err(Mismatch::Mac {
                ifname: ifname(),
                has: link.mac,
                wants: self.mac,
            });
        }
        if link.mtu != self.mtu {
            return Err(Mismatch::Mtu {
                ifname: ifname(),
                has: link.mtu,
                wants: self.mtu,
            });
        }
        if !link.up {
            return Err(Mismatch::Down { ifname: ifname() });
        }
        if let Some((wants, _)) = self
            .addresses
            .iter()
            .find(|(a, _)| !seen.addresses.contains(a))
        {
            return Err(Mismatch::Address {
                ifname: ifname(),
                wants: *wants,
            });
        }
        for dst in &self.on_link {
            let found = seen
                .routes
                .iter()
                .any(|r| r.dst == *dst && r.gateway.is_none() && r.oif == Some(link.index));
            if !found {
                return Err(Mismatch::Route {
                    ifname: ifname(),
                    dst: *dst,
                    gw: None,
                });
            }
        }
        for (dst, gw) in &self.defaults {
            let ours = seen
                .routes
                .iter()
                .any(|r| r.dst == *dst && r.gateway == Some(*gw) && r.oif == Some(link.index));
            // Another plugin's interface may hold the pod's default route (see
            // `defaults_to_add`).
            if !ours && other_default(&seen.routes, *dst, link.index).is_none() {
                return Err(Mismatch::Route {
                    ifname: ifname(),
                    dst: *dst,
                    gw: Some(*gw),
                });
            }
        }
        if host.mtu != self.mtu {
            return Err(Mismatch::Mtu {
                ifname: self.host_ifname.clone(),
                has: host.mtu,
                wants: self.mtu,
            });
        }
        if !host.up {
            return Err(Mismatch::Down {
                ifname: self.host_ifname.clone(),
            });
        }
        if let Some(wants) = self.vlan.filter(|t| host.vlan != Some(*t)) {
            return Err(Mismatch::Vlan {
                ifname: self.host_ifname.clone(),
                has: host.vlan,
                wants,
            });
        }
        Ok(())
    }
}

/// The interface index of a route to `dst` on another interface than `ours`.
fn other_default(routes: &[Route], dst: IpNetwork, ours: u32) -> Option<u32> {
    routes
        .iter()
        .filter(|r| r.dst == dst)
        .filter_map(|r| r.oif)
        .find(|oif| *oif != ours)
}

/// What a runtime's `prevResult` says of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    mac: Option<String>,
    mtu: Option<u32>,
    sandbox: Option<String>,
    /// The addresses listed for it (`ips[].interface` is its index).
    addresses: Vec<IpNetwork>,
}

/// The interfaces and addresses of a `prevResult` (what CHECK must find, CNI spec "CHECK").
/// Entries this plugin cannot read are reported, not skipped.
fn listed(prev: &Map<String, Value>) -> std::result::Result<Vec<Listed>, Mismatch> {
    let unreadable = |what: &str| Mismatch::Listed {
        what: format!("{what} that cannot be read"),
    };
    let list = |key: &str| {
        prev.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for i in list("interfaces") {
        let s = |k: &str| i.get(k).and_then(Value::as_str).map(str::to_string);
        out.push(Listed {
            name: s("name").ok_or_else(|| unreadable("an interface"))?,
            mac: s("mac").filter(|m| !m.is_empty()),
            mtu: i.get("mtu").and_then(Value::as_u64).map(|m| m as u32),
            sandbox: s("sandbox").filter(|s| !s.is_empty()),
            addresses: Vec::new(),
        });
    }
    for ip in list("ips") {
        let address: IpNetwork = ip
            .get("address")
            .and_then(Value::as_str)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| unreadable("an IP"))?;
        if let Some(i) = ip.get("interface").and_then(Value::as_u64) {
            let entry = out.get_mut(i as usize).ok_or_else(|| unreadable("an IP"))?;
            entry.addresses.push(address);
        }
    }
    Ok(out)
}

/// CHECK against the runtime's `prevResult`: every interface it lists under this attachment's
/// names (the container side in its sandbox, the host side) must be there as listed, with the
/// addresses listed for it. Other plugins' entries in a chain are theirs to check.
pub fn verify_listed(
    prev: &Map<String, Value>,
    spec: &Spec,
    seen: &Seen,
) -> std::result::Result<(), Mismatch> {
    for l in listed(prev)? {
        let (link, place) =
            if l.name == spec.ifname.as_str() && l.sandbox.as_deref() == Some(&spec.netns) {
                (seen.link.as_ref(), spec.netns.as_str())
            } else if l.name == spec.host_ifname.as_str() && l.sandbox.is_none() {
                (seen.host.as_ref(), "the host")
            } else {
                continue;
            };
        let what = |thing: String| Mismatch::Listed {
            what: format!("{thing}, which {place} lacks"),
        };
        let link = link.ok_or_else(|| what(format!("interface {}", l.name)))?;
        if let Some(mac) = &l.mac {
            let has = link.mac.map(|m| m.to_string());
            if Mac::parse(mac).map(|m| m.to_string()) != has {
                return Err(what(format!("interface {} with MAC {mac}", l.name)));
            }
        }
        if let Some(mtu) = l.mtu.filter(|m| *m != link.mtu) {
            return Err(what(format!("interface {} with MTU {mtu}", l.name)));
        }
        let addresses: &[IpNetwork] = if l.sandbox.is_some() {
            &seen.addresses
        } else {
            &[]
        };
        if let Some(a) = l.addresses.iter().find(|a| !addresses.contains(a)) {
            return Err(what(format!("address {a} on interface {}", l.name)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
