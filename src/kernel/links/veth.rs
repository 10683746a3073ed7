//! `veth`: a veth pair, the host end `tap<hash>` (its name and MAC fixed by the VMI), the other
//! end made directly in the pod. The node's own vRouter takes the host end (`POST /vm`).

#![allow(
    clippy::disallowed_methods,
    reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
)]

use super::{HostLink, Kind, Site, pod_end, take_leftover};
use crate::error::Result;
use crate::ids::VmiUuid;
use crate::kernel::names;
use crate::kernel::netlink::{Socket, VethEnd};
use crate::state::Record;
use crate::vmi::Mac;

pub(super) struct Veth;

impl Kind for Veth {
    fn host_name(&self, vmi_uuid: &VmiUuid) -> String {
        names::host_ifname(vmi_uuid.as_str())
    }

    /// The host end by its derived name (up), the other end directly in the pod.
    fn create(&self, site: &mut Site, record: &Record) -> Result<()> {
        let end = &pod_end(record, site.mtu)?;
        let host_end = VethEnd {
            name: record.host_ifname.as_str(),
            mac: Some(names::host_mac(record.vmi_uuid.as_str())),
            mtu: end.mtu,
        };
        match site.host.create_veth(&host_end, end, site.netns) {
            // The host name is derived from the VMI this pod now holds: a veth of that name
            // that no other pod's state names is a leftover of an earlier sandbox or of a
            // crashed ADD whose DEL never came. Replace it; anything else is left alone.
            Err(e) if e.is_exists() => {
                let leftover = site.host.link(record.host_ifname.as_str())?;
                take_leftover(site, record, leftover, "veth")?;
                site.host.create_veth(&host_end, end, site.netns)
            }
            other => other,
        }?;
        Ok(())
    }

    /// The Go plugin's veth is named after (`vm-ifname`, `vm-uuid`), and is the attachment's
    /// only when its file names that link too.
    fn host_link(&self, r: &Record) -> Option<HostLink> {
        let name = if r.is_legacy() {
            let derived = names::legacy_link(false, r.ifname.as_str(), r.vm_uuid.as_str());
            if r.host_ifname.as_str() != derived {
                return None;
            }
            derived
        } else {
            r.host_ifname.to_string()
        };
        Some(HostLink { name, kind: "veth" })
    }

    /// Fixed by the VMI: no need to ask.
    fn host_mac(&self, _: &mut Socket, record: &Record) -> Result<Option<Mac>> {
        Ok(Some(Mac(names::host_mac(record.vmi_uuid.as_str()))))
    }
}
