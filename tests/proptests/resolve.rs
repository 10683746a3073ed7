//! `vmi::resolve` over generated pods: the VMI an attachment gets given the agent's VMIs, the
//! node's claims and the agent's registrations, independent of their order; sequential
//! attachments of one network take indexes in order.

use std::collections::BTreeSet;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

use contrail_k8s_cni::ids::{ContainerId, IfName, VmUuid, VmiUuid, VnUuid};
use contrail_k8s_cni::vmi::{self, Attachment, Claim, Mac, Unresolved, Vmi};
use contrail_testkit::uuid_of;

use crate::config;
use crate::strategies::VM_UUID;

const NETWORKS: &[&str] = &["default", "net-a", "net-b"];
const IFNAMES: &[&str] = &["eth0", "net1", "net2", "net3", "eth5"];
const THIS: &str = "sandbox-this";
const OLD: &str = "sandbox-old";

fn test_vmi(uuid: String, network: &str, index: u32, count: u32, interface: Option<&str>) -> Vmi {
    Vmi {
        mac: Mac([2, 0, 0, 0, (index >> 8) as u8, index as u8]),
        vm_uuid: VmUuid::parse(VM_UUID).unwrap(),
        vn_uuid: VnUuid::parse("f95af4cc-e4ba-44c8-9936-269d891e0ee9").unwrap(),
        uuid: VmiUuid::parse(uuid).unwrap(),
        network: network.into(),
        index,
        count,
        interface: interface.map(str::to_string),
        default_gw: false,
        ignored: None,
        namespace: Some("default".into()),
        name: Some("p".into()),
        vlan: None,
    }
}

/// Resolution with the agent's registrations known: the VMI, and the VMIs the agent was asked
/// about, in order.
fn resolved<'a>(
    at: Attachment<'_>,
    vmis: &'a [Vmi],
    claims: &[Claim],
    registered: &[VmiUuid],
) -> (Result<&'a Vmi, Unresolved>, Vec<VmiUuid>) {
    let mut asked = Vec::new();
    let got = vmi::resolve(at, vmis, claims).and_then(|choice| {
        choice
            .take(|v| {
                asked.push(v.uuid.clone());
                registered.contains(&v.uuid)
            })
            .ok_or(Unresolved::AllTaken {
                count: vmis.iter().filter(|v| v.network == at.network).count(),
            })
    });
    (got, asked)
}

/// Distinct, kube-manager-like (shared prefix) VMI uuids.
fn sibling_uuids(n: usize) -> BoxedStrategy<Vec<String>> {
    any::<u64>()
        .prop_map(move |base| {
            (0..n as u128)
                .map(|i| uuid_of((u128::from(base) << 64) | (0xb196_0025_9000_0000 + i)))
                .collect()
        })
        .boxed()
}

#[derive(Debug, Clone)]
struct Scenario {
    vmis: Vec<Vmi>,
    claims: Vec<Claim>,
    registered: Vec<VmiUuid>,
    network: &'static str,
    ifname: &'static str,
    /// A permutation of the VMIs and one of the claims, for the order-independence check.
    vmi_order: Vec<usize>,
    claim_order: Vec<usize>,
}

fn id(s: &str) -> ContainerId {
    ContainerId::parse(s).unwrap()
}

fn if_name(s: &str) -> IfName {
    IfName::parse(s).unwrap()
}

/// The interface of sandbox `sandbox` that holds the claim, if it is that sandbox's.
fn held_by<'c>(c: &'c Claim, sandbox: &str) -> Option<&'c str> {
    c.holder
        .as_ref()
        .filter(|(id, _)| id.as_str() == sandbox)
        .map(|(_, i)| i.as_str())
}

fn holder() -> BoxedStrategy<Option<String>> {
    prop_oneof![
        3 => Just(Some(THIS.to_string())),
        2 => Just(Some(OLD.to_string())),
        1 => Just(None),
    ]
    .boxed()
}

fn scenario() -> BoxedStrategy<Scenario> {
    (1usize..=7)
        .prop_flat_map(|n| {
            (
                sibling_uuids(n + 2),
                vec(select(NETWORKS), n),
                Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
                vec(option::weighted(0.25, select(IFNAMES)), n),
                // One state file per VMI at most (files are named by VMI uuid); two stray
                // claims on VMIs the agent no longer lists.
                vec(option::weighted(0.5, (holder(), select(IFNAMES))), n + 2),
                vec(any::<bool>(), n + 2),
                // Mostly a network the pod has; sometimes one it may not, or none it has.
                (any::<prop::sample::Index>(), 0u8..8),
                select(IFNAMES),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                any::<prop::sample::Index>(),
            )
        })
        .prop_map(
            |(uuids, nets, idx, ifs, claims, reg, (pick, how), ifname, vmi_order, rot)| {
                let n = nets.len();
                let network = match how {
                    0 => "net-z",
                    1 => NETWORKS[pick.index(NETWORKS.len())],
                    _ => nets[pick.index(n)],
                };
                let vmis: Vec<Vmi> = (0..n)
                    .map(|i| test_vmi(uuids[i].clone(), nets[i], idx[i], n as u32, ifs[i]))
                    .collect();
                let claims: Vec<Claim> = claims
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        c.map(|(container_id, name)| Claim {
                            vmi: VmiUuid::parse(uuids[i].clone()).unwrap(),
                            holder: container_id.map(|c| (id(&c), if_name(name))),
                        })
                    })
                    .collect();
                let registered = uuids
                    .iter()
                    .zip(reg)
                    .filter(|(_, r)| *r)
                    .map(|(u, _)| VmiUuid::parse(u.clone()).unwrap())
                    .collect();
                let mut claim_order: Vec<usize> = (0..claims.len()).collect();
                if !claim_order.is_empty() {
                    let k = rot.index(claim_order.len());
                    claim_order.rotate_left(k);
                    claim_order.reverse();
                }
                Scenario {
                    vmis,
                    claims,
                    registered,
                    network,
                    ifname,
                    vmi_order,
                    claim_order,
                }
            },
        )
        .boxed()
}

fn claims_on<'c>(claims: &'c [Claim], v: &'c Vmi) -> impl Iterator<Item = &'c Claim> {
    claims.iter().filter(move |c| c.vmi == v.uuid)
}

fn check_resolve(s: &Scenario) -> Result<(), TestCaseError> {
    let (this, name) = (id(THIS), if_name(s.ifname));
    let at = Attachment {
        network: s.network,
        container_id: &this,
        ifname: &name,
    };
    let (got, asked) = resolved(at, &s.vmis, &s.claims, &s.registered);

    // Order independence: the agent's order and the directory order do not matter.
    let vmis2: Vec<Vmi> = s.vmi_order.iter().map(|&i| s.vmis[i].clone()).collect();
    let claims2: Vec<Claim> = s.claim_order.iter().map(|&i| s.claims[i].clone()).collect();
    let (got2, _) = resolved(at, &vmis2, &claims2, &s.registered);
    prop_assert_eq!(
        got.as_ref().map(|v| &v.uuid),
        got2.as_ref().map(|v| &v.uuid),
        "order changed the answer"
    );

    let mut candidates: Vec<&Vmi> = s.vmis.iter().filter(|v| v.network == s.network).collect();
    candidates.sort_by_key(|v| v.index);
    let annotated_for_us = candidates
        .iter()
        .find(|v| v.interface.as_deref() == Some(s.ifname));
    let not_for_another = |v: &Vmi| v.interface.as_deref().is_none_or(|i| i == s.ifname);
    let held = candidates.iter().find(|v| {
        not_for_another(v) && claims_on(&s.claims, v).any(|c| held_by(c, THIS) == Some(s.ifname))
    });
    // The agent is asked only about VMIs no state file names, of a network attached more than
    // once, in index order, and about none after the one taken.
    let asked_vmis: Vec<&Vmi> = asked
        .iter()
        .map(|u| *candidates.iter().find(|v| &v.uuid == u).unwrap())
        .collect();
    prop_assert!(
        asked_vmis.windows(2).all(|w| w[0].index < w[1].index),
        "asked out of order"
    );
    for v in &asked_vmis {
        prop_assert!(
            candidates.len() > 1 && claims_on(&s.claims, v).next().is_none(),
            "asked about {}",
            v.uuid
        );
    }
    if let (Ok(v), Some(last)) = (&got, asked_vmis.last()) {
        prop_assert!(last.index <= v.index, "asked beyond the one taken");
    }

    match got {
        Ok(v) => {
            prop_assert_eq!(&v.network, s.network);
            prop_assert!(
                not_for_another(v),
                "VMI {} (index {}) is annotated for {:?}, not {}",
                v.uuid,
                v.index,
                v.interface,
                s.ifname
            );
            if v.interface.as_deref() != Some(s.ifname) {
                for c in claims_on(&s.claims, v) {
                    prop_assert!(
                        held_by(c, THIS).is_none_or(|i| i == s.ifname),
                        "VMI {} is held by {:?} of this sandbox",
                        v.uuid,
                        held_by(c, THIS)
                    );
                }
            }
            if let Some(named) = annotated_for_us {
                prop_assert_eq!(
                    &v.uuid,
                    &named.uuid,
                    "the VMI annotated for this ifname wins"
                );
            } else if let Some(held) = held {
                prop_assert_eq!(&v.uuid, &held.uuid, "a retried ADD gets its own VMI back");
            }
        }
        Err(Unresolved::NoSuchNetwork { known }) => {
            prop_assert!(candidates.is_empty());
            let want: BTreeSet<&str> = s.vmis.iter().map(|v| v.network.as_str()).collect();
            prop_assert!(known.iter().map(String::as_str).eq(want));
        }
        Err(Unresolved::NoVmis) => prop_assert!(false, "plugin mode never finds no VMIs"),
        Err(Unresolved::AllTaken { count }) => {
            prop_assert_eq!(count, candidates.len());
            prop_assert!(!candidates.is_empty());
            prop_assert!(annotated_for_us.is_none() && held.is_none());
            // Nothing free was overlooked.
            for v in &candidates {
                let claims: Vec<&Claim> = claims_on(&s.claims, v).collect();
                let live = claims
                    .iter()
                    .any(|c| c.holder.as_ref().is_none_or(|(id, _)| id.as_str() == THIS));
                let unexplained =
                    candidates.len() > 1 && s.registered.contains(&v.uuid) && claims.is_empty();
                prop_assert!(
                    v.interface.is_some() || live || unexplained,
                    "VMI {} (index {}) was free",
                    v.uuid,
                    v.index
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn resolve_picks_a_fitting_vmi(s in scenario()) {
        check_resolve(&s)?;
    }

    /// K attachments of one network, one after another, each recording its claim (replacing
    /// an older sandbox's): K distinct VMIs in index order; a retry gets the same VMI again;
    /// one more is refused.
    #[test]
    fn resolve_sequential_attachments_take_indexes_in_order(
        (vmis, old, ifnames) in (1usize..=6, 0usize..=3).prop_flat_map(|(k, others)| {
            let n = k + others;
            (
                sibling_uuids(n),
                Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
                vec(select(&["default", "net-b"][..]), others),
                vec(any::<bool>(), n),
                proptest::sample::subsequence(
                    vec!["eth0", "net1", "net2", "net3", "net4", "net5", "net6", "eth5"], k,
                ).prop_shuffle(),
            )
                .prop_map(move |(uuids, idx, other_nets, old, ifnames)| {
                    let vmis: Vec<Vmi> = (0..n)
                        .map(|i| {
                            let net = if i < k { "net-a" } else { other_nets[i - k] };
                            test_vmi(uuids[i].clone(), net, idx[i], n as u32, None)
                        })
                        .collect();
                    (vmis, old, ifnames)
                })
        }),
    ) {
        // An older sandbox of the pod left state files (and the agent still has them
        // registered) on some VMIs.
        let mut claims: Vec<Claim> = vmis
            .iter()
            .zip(&old)
            .filter(|(_, o)| **o)
            .map(|(v, _)| Claim { vmi: v.uuid.clone(), holder: Some((id(OLD), if_name("eth0"))) })
            .collect();
        let registered: Vec<VmiUuid> = claims.iter().map(|c| c.vmi.clone()).collect();
        let this = id(THIS);
        let mut on_net: Vec<&Vmi> = vmis.iter().filter(|v| v.network == "net-a").collect();
        on_net.sort_by_key(|v| v.index);
        let mut got = Vec::new();
        for name in &ifnames {
            let name = if_name(name);
            let at = Attachment { network: "net-a", container_id: &this, ifname: &name };
            let v = match resolved(at, &vmis, &claims, &registered).0 {
                Ok(v) => v,
                Err(e) => return Err(TestCaseError::fail(format!("{name}: {e:?} after {got:?}"))),
            };
            claims.retain(|c| c.vmi != v.uuid);
            claims.push(Claim { vmi: v.uuid.clone(), holder: Some((this.clone(), name)) });
            got.push(v.uuid.clone());
        }
        let want: Vec<VmiUuid> = on_net.iter().map(|v| v.uuid.clone()).collect();
        prop_assert_eq!(&got, &want);
        for (name, uuid) in ifnames.iter().zip(&got) {
            let name = if_name(name);
            let at = Attachment { network: "net-a", container_id: &this, ifname: &name };
            prop_assert_eq!(resolved(at, &vmis, &claims, &registered).0.map(|v| &v.uuid), Ok(uuid));
        }
        let extra = if_name("extra0");
        let at = Attachment { network: "net-a", container_id: &this, ifname: &extra };
        prop_assert_eq!(
            resolved(at, &vmis, &claims, &registered).0.map(|v| &v.uuid),
            Err(Unresolved::AllTaken { count: ifnames.len() })
        );
    }
}
