//! What a wait for the agent is for, and why its last poll was not ready yet: what its errors
//! name when the wait runs out or is stopped.

use std::fmt;

use super::http::Request;
use crate::ids::{VmName, VmUuid, VmiUuid};

/// What a wait for the agent waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Awaited {
    /// The agent to know every VMI of pod `vm_name`.
    PodInterfaces { vm_name: VmName },
    /// The IP address of one VMI.
    Ip { vmi: VmiUuid },
    /// The IP addresses of the `count` VMIs of pod `vm_uuid`.
    Ips { count: usize, vm_uuid: VmUuid },
    /// The IP configuration of one VMI (CHECK).
    IpConfig { vmi: VmiUuid },
    /// The agent to accept the port `ifname` of VMI `vmi`.
    Port { ifname: String, vmi: String },
    /// The agent to drop the ports of pod `vm_uuid`.
    PortsDropped { vm_uuid: VmUuid },
    /// The agent to drop the `POST /port` port of VMI `vmi`.
    PortDropped { vmi: VmiUuid },
    /// A turn for a request in the node's request budget.
    Turn(Request),
}

impl fmt::Display for Awaited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Awaited::PodInterfaces { vm_name } => {
                write!(f, "the agent to know every interface of pod {vm_name}")
            }
            Awaited::Ip { vmi } => write!(f, "the IP address of VMI {vmi}"),
            Awaited::Ips { count, vm_uuid } => {
                write!(f, "the IP addresses of the {count} VMIs of pod {vm_uuid}")
            }
            Awaited::IpConfig { vmi } => write!(f, "the IP configuration of VMI {vmi}"),
            Awaited::Port { ifname, vmi } => {
                write!(f, "the agent to accept port {ifname} of VMI {vmi}")
            }
            Awaited::PortsDropped { vm_uuid } => {
                write!(f, "the agent to drop the ports of pod {vm_uuid}")
            }
            Awaited::PortDropped { vmi } => {
                write!(f, "the agent to drop the port of VMI {vmi}")
            }
            Awaited::Turn(request) => request.fmt(f),
        }
    }
}

/// Why a poll's answer is not the one waited for yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// `GET /vm-cfg/<vm_name>`: 404, the agent does not know the pod yet.
    PodUnknown { vm_name: VmName },
    /// `GET /vm-cfg/<vm_name>`: `known` of the pod's `of` VMIs known.
    SomeKnown {
        vm_name: VmName,
        known: usize,
        of: u32,
    },
    /// `GET /vm/<vm_uuid>/<vmi>`: 404, no IP configuration yet.
    NoIp { vm_uuid: VmUuid, vmi: VmiUuid },
    /// `POST /vm`: 404.
    NotAccepted,
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pending::PodUnknown { vm_name } => write!(
                f,
                "GET /vm-cfg/{vm_name}: 404, the agent does not know the pod yet"
            ),
            Pending::SomeKnown { vm_name, known, of } => {
                write!(f, "GET /vm-cfg/{vm_name}: {known} of {of} interfaces known")
            }
            Pending::NoIp { vm_uuid, vmi } => {
                write!(f, "GET /vm/{vm_uuid}/{vmi}: 404, no IP configuration yet")
            }
            Pending::NotAccepted => f.write_str("POST /vm: 404"),
        }
    }
}
