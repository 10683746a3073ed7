//! The choice of the VMIs a call sets up: pure decisions over the pod's VMIs and the claims
//! its state files record.

#[cfg(feature = "thick")]
use crate::kernel::conflict::Conflict;

use super::{Vmi, default_gw};
use crate::ids::{ContainerId, IfName, VmiUuid};

/// An attachment recorded in a local state file: which sandbox and interface hold which VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub vmi: VmiUuid,
    /// The sandbox and its interface that hold it; `None` for a state file that cannot be read:
    /// its holder is unknown, so it counts as live.
    pub holder: Option<(ContainerId, IfName)>,
}

/// What the resolver was asked, besides the data.
#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a ContainerId,
    pub ifname: &'a IfName,
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
        .find(|v| v.interface.as_deref() == Some(at.ifname.as_str()));
    let ours = || {
        candidates.iter().find(|v| {
            // Never a VMI that asked for another name, whatever a state file says.
            v.interface
                .as_deref()
                .is_none_or(|i| i == at.ifname.as_str())
                && claimed_by(v).iter().any(|c| {
                    c.holder
                        .as_ref()
                        .is_some_and(|h| h.0 == *at.container_id && h.1 == *at.ifname)
                })
        })
    };
    if let Some(v) = named.or_else(ours) {
        return Ok(Choice::Held(v));
    }
    let live = |c: &&Claim| {
        c.holder
            .as_ref()
            .is_none_or(|(id, _)| id == at.container_id)
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
    pub ifname: IfName,
    pub default_gw: bool,
}

/// Plugin mode: the interface for `vmi`, this attachment's VMI among the pod's `vmis`.
pub(crate) fn for_attachment<'a>(vmis: &'a [Vmi], vmi: &'a Vmi, ifname: &IfName) -> Wanted<'a> {
    Wanted {
        vmi,
        ifname: ifname.clone(),
        default_gw: default_gw(vmis) == Some(vmi),
    }
}

/// Thick mode: every VMI of the pod in index order, named by its `interface` annotation, else
/// `ifname` (CNI_IFNAME) for index 0 and `eth<index>`. Two VMIs may not share a name.
#[cfg(feature = "thick")]
pub(crate) fn for_pod<'a>(
    vmis: &'a [Vmi],
    ifname: &IfName,
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
        let name =
            IfName::parse(name.as_str()).map_err(|e| Conflict::BadName { name, why: e.rule })?;
        if let Some(other) = wanted.iter().find(|w| w.ifname == name) {
            return Err(Conflict::SameName {
                name: name.to_string(),
                first: (other.vmi.uuid.to_string(), other.vmi.index),
                second: (v.uuid.to_string(), v.index),
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
