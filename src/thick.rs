//! Thick mode (`contrail.mode: "thick"`, built with `--features thick`): the runtime calls the
//! plugin once per pod and it sets up every interface the pod has in Contrail, with the same
//! attachment engine plugin mode runs once per call.

use crate::agent::Agent;
use crate::attach::{self, io_err};
use crate::cni::{Env, Error, Outcome, Result, check_ifname, code};
use crate::config::NetConf;
use crate::pod::Pod;
use crate::state::{PodDir, Record};
use crate::vmi::Vmi;

/// Interface names for the pod's VMIs (sorted by index): the `interface` annotation, else
/// CNI_IFNAME for index 0 and `eth<index>` for the rest. Two VMIs may not share a name.
pub fn names(vmis: &[&Vmi], ifname: &str) -> Result<Vec<String>> {
    let names: Vec<String> = vmis
        .iter()
        .map(|v| match (&v.interface, v.index) {
            (Some(name), _) => name.clone(),
            (None, 0) => ifname.to_string(),
            (None, k) => format!("eth{k}"),
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        check_ifname(name)
            .map_err(|why| Error::new(code::INTERFACE, format!("interface name {name:?} {why}")))?;
        if let Some(j) = names[..i].iter().position(|n| n == name) {
            return Err(Error::new(
                code::INTERFACE,
                format!(
                    "VMIs {} (index {}) and {} (index {}) would both be {name}: fix the pod's interface names",
                    vmis[j].uuid, vmis[j].index, vmis[i].uuid, vmis[i].index
                ),
            ));
        }
    }
    Ok(names)
}

/// The VMI that carries the default route: annotated `default-gw`, else index 0.
fn default_gw<'a>(vmis: &[&'a Vmi]) -> Option<&'a Vmi> {
    vmis.iter()
        .find(|v| v.default_gw)
        .or_else(|| vmis.first())
        .copied()
}

pub fn add(env: &Env, conf: &NetConf, pod: &Pod) -> Result<Outcome> {
    let netns = attach::open_netns(&env.netns)?;
    let agent = Agent::new(&conf.contrail);
    let vm_name = pod.vm_name(&conf.contrail.cluster_name);
    let all = agent.wait_for_pod(&vm_name)?;
    let mut vmis: Vec<&Vmi> = all.iter().collect();
    vmis.sort_by_key(|v| v.index);
    let names = names(&vmis, &env.ifname)?;
    let nl = attach::netlink()?;
    let gw = default_gw(&vmis).map(|v| v.uuid.clone());

    // Every claim first, under one lock: a crash from here on leaves records DEL acts on. A
    // claim this sandbox holds already is an interrupted ADD's, whose interface is replaced;
    // a new one needs its name free in the pod.
    let (records, fresh) = {
        let dir = attach::open_pod(&agent, conf, &vm_name)?;
        let (held, _) = dir.records().map_err(io_err("reading", dir.path()))?;
        let is_new = |v: &Vmi, name: &str| {
            !held
                .iter()
                .any(|h| h.vmi_uuid == v.uuid && h.is(&env.container_id, name))
        };
        let new_names: Vec<&str> = vmis
            .iter()
            .zip(&names)
            .filter(|(v, name)| is_new(v, name))
            .map(|(_, name)| name.as_str())
            .collect();
        if let Err(e) = attach::check_free(&nl, &netns, &new_names) {
            attach::close(dir)?;
            return Err(e);
        }
        let mut records = Vec::new();
        let mut fresh = Vec::new();
        for (v, name) in vmis.iter().zip(&names) {
            let record = attach::record(env, &vm_name, v, name, gw.as_ref() == Some(&v.uuid));
            dir.write(&record)
                .map_err(io_err("writing state in", dir.path()))?;
            if is_new(v, name) {
                fresh.push(record.clone());
            }
            records.push(record);
        }
        (records, fresh)
    };
    crate::crash::point("claimed");
    match attach::bring_up(&agent, conf, &nl, &netns, &records) {
        // The runtime knows only the first interface: the result describes it alone.
        Ok(outcomes) => outcomes
            .into_iter()
            .next()
            .ok_or_else(|| Error::new(code::NO_VMI, format!("pod {vm_name} has no VMIs"))),
        Err(e) => {
            log::warn!("thick ADD failed, rolling back every interface: {e}");
            attach::undo(&agent, conf, &vm_name, &fresh);
            Err(e)
        }
    }
}

/// This sandbox's records in the pod (every interface; older sandboxes' are left alone).
fn ours(agent: &Agent, conf: &NetConf, env: &Env, vm_name: &str) -> Result<(PodDir, Vec<Record>)> {
    let dir = attach::open_pod(agent, conf, vm_name)?;
    let (records, _) = dir.records().map_err(io_err("reading", dir.path()))?;
    let mine = records
        .into_iter()
        .filter(|r| r.container_id == env.container_id)
        .collect();
    Ok((dir, mine))
}

/// DEL: every interface and record of this sandbox, then the pod's registration.
pub fn del(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<()> {
    let Some(vm_name) = attach::locate(conf, env, pod, None)? else {
        return Ok(());
    };
    let agent = Agent::new(&conf.contrail);
    let (dir, records) = ours(&agent, conf, env, &vm_name)?;
    // Keep going after a failure so one stuck interface does not strand the others.
    if let Some(e) = teardown_all(&records).into_iter().next() {
        return Err(e);
    }
    attach::release(&agent, &dir, &records)?;
    attach::close(dir)
}

/// Deleting a veth returns only once the kernel has finished tearing it down (~20 ms, mostly
/// waiting for RCU after the RTNL lock is released), so deletions from several threads
/// overlap almost entirely. Each thread has its own runtime and socket in the host netns (the
/// one the plugin runs in; none of them enters a container's netns). Returns every failure.
fn teardown_all(records: &[Record]) -> Vec<Error> {
    const THREADS: usize = 16;
    let per_thread = records.len().div_ceil(THREADS).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = records
            .chunks(per_thread)
            .map(|chunk| {
                s.spawn(move || {
                    let nl = match attach::netlink() {
                        Ok(nl) => nl,
                        Err(e) => return vec![e],
                    };
                    chunk
                        .iter()
                        .filter_map(|r| {
                            attach::teardown(&nl, &r.host_ifname)
                                .inspect_err(|e| log::warn!("DEL of {}: {e}", r.ifname))
                                .err()
                        })
                        .collect()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|_| vec![Error::new(code::INTERNAL, "a DEL thread panicked")])
            })
            .collect()
    })
}

/// CHECK: every interface of the sandbox.
pub fn check(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<()> {
    let missing = || {
        Error::new(
            code::CHECK_FAILED,
            format!(
                "no attachment is recorded for container {}",
                env.container_id
            ),
        )
    };
    let vm_name = attach::locate(conf, env, pod, None)?.ok_or_else(missing)?;
    let agent = Agent::new(&conf.contrail);
    let (dir, records) = ours(&agent, conf, env, &vm_name)?;
    attach::close(dir)?;
    if records.is_empty() {
        return Err(missing());
    }
    let (nl, netns) = (attach::netlink()?, attach::open_netns(&env.netns)?);
    records
        .iter()
        .try_for_each(|r| attach::verify(&agent, conf, &nl, &netns, r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmi::Mac;

    fn vmi(index: u32, interface: Option<&str>) -> Vmi {
        Vmi {
            uuid: format!("b86ac068-cf0e-11e8-b196-0025900000{index:02x}"),
            vm_uuid: "40936d96-cf0e-11e8-9892-002590aaa964".into(),
            vn_uuid: "f95af4cc-e4ba-44c8-9936-269d891e0ee9".into(),
            vn_name: String::new(),
            mac: Mac([2, 0, 0, 0, 0, index as u8]),
            network: "net".into(),
            index,
            count: 3,
            interface: interface.map(str::to_string),
            default_gw: false,
        }
    }

    #[test]
    fn names_follow_index_and_annotations() {
        let v = [vmi(0, None), vmi(1, Some("data0")), vmi(2, None)];
        let refs: Vec<&Vmi> = v.iter().collect();
        assert_eq!(names(&refs, "eth0").unwrap(), ["eth0", "data0", "eth2"]);
        assert_eq!(names(&refs, "ceth0").unwrap()[0], "ceth0");
    }

    #[test]
    fn clashing_names_fail_before_anything_happens() {
        let v = [vmi(0, None), vmi(1, None), vmi(2, Some("eth1"))];
        let refs: Vec<&Vmi> = v.iter().collect();
        let err = names(&refs, "eth0").unwrap_err();
        assert_eq!(err.code, code::INTERFACE);
        assert!(err.msg.contains("both be eth1"), "{}", err.msg);
        // CNI_IFNAME itself may clash with an annotation.
        let v = [vmi(0, None), vmi(1, Some("eth0"))];
        assert!(names(&v.iter().collect::<Vec<_>>(), "eth0").is_err());
    }

    #[test]
    fn default_route_on_annotated_vmi_else_index_0() {
        let mut v = [vmi(0, None), vmi(1, None), vmi(2, None)];
        assert_eq!(default_gw(&v.iter().collect::<Vec<_>>()).unwrap().index, 0);
        v[2].default_gw = true;
        assert_eq!(default_gw(&v.iter().collect::<Vec<_>>()).unwrap().index, 2);
    }
}
