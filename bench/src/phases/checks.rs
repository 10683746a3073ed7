//! What the phases check in the pods and the node: what an ADD must leave, what a DEL must
//! leave, and the same for a full node's pods and the agent's registrations.

use crate::context::{NODE_ATTACHMENTS, POD_ADDR, POD_GW};
use crate::error::R;

use contrail_testkit::{Netns, PodSpec, Sim, try_sh};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// What a single-interface ADD must leave: eth0 with the pod address, a default route.
pub(crate) fn assert_attached(ns: &Netns, who: &str) -> R<()> {
    let addrs = ns.addrs("eth0");
    let routes = ns.default_routes();
    let want = format!("{POD_ADDR}/24");
    if !addrs.contains(&want) || !routes.iter().any(|r| r.1 == POD_GW) {
        return Err(format!(
            "{who}: eth0 not set up as expected: {addrs:?} {routes:?}"
        ));
    }
    Ok(())
}

/// What a DEL must leave: only lo.
pub(crate) fn assert_empty(ns: &Netns, who: &str) -> R<()> {
    let names = ns.ifnames();
    if names != ["lo"] {
        return Err(format!("{who}: left {names:?} in {}", ns.name));
    }
    Ok(())
}

/// The links of a network namespace: name to MAC.
fn link_macs(ns: &Netns) -> R<BTreeMap<String, String>> {
    let out = try_sh("ip", &["-n", &ns.name, "-j", "link", "show"])?;
    let links: Value = serde_json::from_str(&out).map_err(|e| format!("ip -j link: {e}"))?;
    Ok(links
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (field("ifname"), field("address"))
        })
        .collect())
}

/// After the ADDs: every pod has exactly lo and its attachments' interfaces, each with the MAC
/// of its own VMI (MACs are unique on the node, so no VMI serves two interfaces), and the
/// agent has every VMI of these pods registered.
pub(crate) fn check_attached(sim: &Sim, pods: &[PodSpec], nss: &[Netns]) -> R<Vec<String>> {
    let mut problems = Vec::new();
    for (pod, ns) in pods.iter().zip(nss) {
        let mut got = link_macs(ns)?;
        got.remove("lo");
        let want: BTreeMap<String, String> = NODE_ATTACHMENTS
            .iter()
            .zip(&pod.vmis)
            .map(|((ifname, _, _), vmi)| (ifname.to_string(), vmi.mac.clone()))
            .collect();
        if got != want {
            problems.push(format!(
                "{}: interfaces {got:?}, expected {want:?}",
                pod.name
            ));
        }
    }
    let registered = registered_vmis(sim);
    let missing = pods
        .iter()
        .flat_map(|p| &p.vmis)
        .filter(|v| !registered.contains(&v.uuid))
        .count();
    if missing > 0 {
        problems.push(format!("{missing} VMIs not registered with the agent"));
    }
    Ok(problems)
}

/// The VMIs the agent has registered.
pub(crate) fn registered_vmis(sim: &Sim) -> BTreeSet<String> {
    let ports = sim.get("/sim/ports");
    ports
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["vmi-uuid"].as_str().map(str::to_string))
        .collect()
}

/// After the DELs: only lo in the pods and in the node (no host end left), nothing in the
/// state directory but its (empty) lock directory, no VMI of these pods registered.
pub(crate) fn check_nothing_left(
    sim: &Sim,
    pods: &[PodSpec],
    nss: &[Netns],
    state: &Path,
) -> R<Vec<String>> {
    let mut problems = Vec::new();
    let host: Vec<String> = fs::read_dir("/sys/class/net")
        .map_err(|e| format!("/sys/class/net: {e}"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    if !host.is_empty() {
        problems.push(format!("links left in the node: {host:?}"));
    }
    for (pod, ns) in pods.iter().zip(nss) {
        let names: Vec<String> = link_macs(ns)?.into_keys().collect();
        if names != ["lo"] {
            problems.push(format!("{}: left {names:?}", pod.name));
        }
    }
    let mut left = Vec::new();
    files_under(state, &mut left);
    left.retain(|p| p != &state.join(".locks") && p != &state.join(".budget"));
    if !left.is_empty() {
        problems.push(format!("left in the state directory: {left:?}"));
    }
    let registered = registered_vmis(sim);
    let still = pods
        .iter()
        .flat_map(|p| &p.vmis)
        .filter(|v| registered.contains(&v.uuid))
        .count();
    if still > 0 {
        problems.push(format!("{still} VMIs still registered with the agent"));
    }
    Ok(problems)
}

/// Every path below `dir`, directories included.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
    {
        let path = e.path();
        out.push(path.clone());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            files_under(&path, out);
        }
    }
}
