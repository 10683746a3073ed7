//! Names the plugin derives: a VMI's host interface and an attachment's lock. Deterministic, so
//! that a DEL, a crashed ADD's retry and GC find them again; short, as the kernel and the file
//! system want them.

use crate::ids::{ContainerId, VmName};

/// FNV-1a over `bytes`: small and stable across versions and machines (names made with it
/// outlive the process that made them).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The host-side interface name of a VMI's veth: `tap` + 12 hex digits (48 bits) of a hash of
/// the VMI uuid. Unique across pods and 15 bytes. A hash rather than a uuid prefix because
/// kube-manager's time-based uuids of one pod share their leading digits; FNV-1a, then
/// murmur3's finalizer so that uuids differing in one digit differ in every part of the name.
pub fn host_ifname(vmi_uuid: &str) -> String {
    hashed(VETH, vmi_uuid)
}

/// Nested mode: the name of a VMI's VLAN sub-interface, `cvl` and the same 12 hex digits. The
/// name is how a VLAN link is known as this plugin's: the node's other VLAN links are never
/// touched.
pub(crate) fn vlan_ifname(vmi_uuid: &str) -> String {
    hashed(VLAN, vmi_uuid)
}

/// Nested mode: the name a pod's macvlan is made under, in the pod, before it is renamed to
/// `CNI_IFNAME` there. A new link's name is looked up in the namespace of the request, the
/// node's, where the pod's name (eth0) is often the node's own NIC.
pub(crate) fn macvlan_tmp_ifname(vmi_uuid: &str) -> String {
    hashed(MACVLAN_TMP, vmi_uuid)
}

const VETH: &str = "tap";
const VLAN: &str = "cvl";
const MACVLAN_TMP: &str = "cmv";

fn hashed(prefix: &str, vmi_uuid: &str) -> String {
    let mut h = fnv1a(vmi_uuid.bytes());
    for m in [0xff51_afd7_ed55_8ccd, 0xc4ce_b9fe_1a85_ec53] {
        h = (h ^ (h >> 33)).wrapping_mul(m);
    }
    format!("{prefix}{:012x}", (h ^ (h >> 33)) >> 16)
}

/// The host link the OpenSDN Go plugin made for an attachment: `tap` (its veth's host end) or
/// `vlan` (nested mode's 802.1Q link) and the first 11 characters of `<ifname>-<pod uuid>`
/// (tf-controller `src/container/cni/internal/common/veth.go` `buildHostIfName`, `macvlan.go`
/// `buildVlanIfName`, `interface.go` `CNI_UUID_IFNAME_LEN`), e.g. `tapeth0-40936d`. Its state
/// file names the veth end as `host-ifname`, but in nested mode the parent interface there
/// (`MacVlan.GetHostIfName`), which is the node's, never the attachment's.
pub(crate) fn legacy_link(nested: bool, ifname: &str, vm_uuid: &str) -> String {
    let prefix = if nested { "vlan" } else { "tap" };
    let name: String = format!("{ifname}-{vm_uuid}").chars().take(11).collect();
    format!("{prefix}{name}")
}

/// Whether a host link is named as this plugin names them (a veth end or a VLAN).
pub(crate) fn is_ours(name: &str) -> bool {
    name.len() == 15
        && (name.starts_with(VETH) || name.starts_with(VLAN))
        && name[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The MAC of a VMI's host end: fixed by the VMI (locally administered, unicast), so that an
/// interface made again (a retried ADD) looks as the runtime's cached result says.
pub(crate) fn host_mac(vmi_uuid: &str) -> [u8; 6] {
    let h = fnv1a(vmi_uuid.bytes().chain(*b"/host-mac")).to_be_bytes();
    [(h[0] & 0xfc) | 0x02, h[1], h[2], h[3], h[4], h[5]]
}

/// An attachment's lock file name: the pod's, then a hash of (container id, ifname). A
/// collision only makes two calls wait for each other.
pub(crate) fn attachment_lock(
    vm_name: &VmName,
    container_id: &ContainerId,
    ifname: &str,
) -> String {
    let h = fnv1a(
        container_id
            .as_str()
            .bytes()
            .chain([0])
            .chain(ifname.bytes()),
    );
    format!("{vm_name}@{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_short_deterministic_and_distinct_for_sibling_uuids() {
        let a = host_ifname("b86ac068-cf0e-11e8-b196-002590aaa964");
        let b = host_ifname("b86ac068-cf0e-11e8-b196-002590aaa965");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("tap"));
        // Siblings share no long run of the name.
        assert!(a[3..9] != b[3..9] && a[9..] != b[9..], "{a} {b}");
        assert_eq!(a, host_ifname("b86ac068-cf0e-11e8-b196-002590aaa964"));
        assert!(crate::cni::check_ifname(&a).is_ok());
    }

    #[test]
    fn vlan_names_share_the_hash_and_are_recognised() {
        let vmi = "b86ac068-cf0e-11e8-b196-002590aaa964";
        assert_eq!(vlan_ifname(vmi), "cvl56dc21f0fa67");
        assert!(is_ours(&vlan_ifname(vmi)) && is_ours(&host_ifname(vmi)));
        for other in ["eth0.100", "cvl56dc21f0fa6", "tap56dc21f0fa6z", "vlan100"] {
            assert!(!is_ours(other), "{other}");
        }
    }

    #[test]
    fn host_macs_are_local_unicast_and_fixed_by_the_vmi() {
        let a = host_mac("b86ac068-cf0e-11e8-b196-002590aaa964");
        assert_eq!(a[0] & 0x03, 0x02, "locally administered, unicast: {a:02x?}");
        assert_eq!(a, host_mac("b86ac068-cf0e-11e8-b196-002590aaa964"));
        assert_ne!(a, host_mac("b86ac068-cf0e-11e8-b196-002590aaa965"));
    }

    #[test]
    fn names_made_by_earlier_versions_are_found_again() {
        // Links and locks outlive upgrades: these values were computed by 0.1.0.
        assert_eq!(
            host_ifname("b86ac068-cf0e-11e8-b196-002590aaa964"),
            HOST_0_1_0
        );
        assert_eq!(
            attachment_lock(
                &VmName::parse("k8s__default__p").unwrap(),
                &ContainerId::parse("c1").unwrap(),
                "net1"
            ),
            LOCK_0_1_0
        );
    }

    #[test]
    fn the_go_plugins_links_are_named_as_it_names_them() {
        let pod = "40936d96-cf0e-11e8-9892-002590aaa964";
        assert_eq!(legacy_link(false, "eth0", pod), "tapeth0-40936d");
        assert_eq!(legacy_link(true, "net1", pod), "vlannet1-40936d");
        // Eleven characters of the interface name alone when it is that long.
        assert_eq!(legacy_link(false, "averylongname15", pod), "tapaverylongna");
    }

    const HOST_0_1_0: &str = "tap56dc21f0fa67";
    const LOCK_0_1_0: &str = "k8s__default__p@3a9e2c666410a33d";
}
