//! A VMI as the pod description file gives it, or as kube-manager makes it from a pod's
//! networks annotation: what `pods` builds the agent's VMIs from.

use serde::Deserialize;

// Unknown keys are rejected so that a typo in a test fixture fails loudly instead of
// silently dropping, say, a delay.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct VmiSpec {
    pub(crate) uuid: String,
    pub(crate) network: String,
    pub(crate) vn_name: Option<String>,
    pub(crate) vn_uuid: Option<String>,
    pub(crate) mac: String,
    pub(crate) ip: Option<String>,
    pub(crate) gateway: Option<String>,
    pub(crate) dns: Option<String>,
    pub(crate) ip6: Option<String>,
    pub(crate) v6_plen: Option<u8>,
    pub(crate) v6_gateway: Option<String>,
    pub(crate) v6_dns: Option<String>,
    pub(crate) interface: Option<String>,
    #[serde(default)]
    pub(crate) default_gw: bool,
    #[serde(default)]
    pub(crate) cfg_delay_ms: u64,
    #[serde(default)]
    pub(crate) ip_delay_ms: u64,
    /// A nested pod's VMI (its node is a VM of this hypervisor's vRouter): its VLAN tag. Any
    /// 16-bit value, so that tests can hand out tags the plugin must refuse.
    pub(crate) vlan_id: Option<u16>,
}

impl VmiSpec {
    /// A VMI kube-manager made (see `kube_manager::vmis`).
    pub(crate) fn derived(
        uuid: String,
        network: String,
        mac: String,
        ip: String,
        gateway: String,
        interface: Option<String>,
    ) -> VmiSpec {
        VmiSpec {
            uuid,
            network,
            vn_name: None,
            vn_uuid: None,
            mac,
            ip: Some(ip),
            gateway: Some(gateway),
            dns: None,
            ip6: None,
            v6_plen: None,
            v6_gateway: None,
            v6_dns: None,
            interface,
            default_gw: false,
            cfg_delay_ms: 0,
            ip_delay_ms: 0,
            vlan_id: None,
        }
    }
}

/// Stable across runs and Rust versions (unlike std's hasher): two FNV-1a passes with
/// different offsets give the 128 bits of a UUID-shaped VN id.
pub(crate) fn derived_uuid(seed: &str) -> String {
    let fnv = |basis: u64| {
        seed.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let hex = format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x8422_2325_cbf2_9ce4)
    );
    let (a, b, c, d, e) = (
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
    );
    format!("{a}-{b}-{c}-{d}-{e}")
}
