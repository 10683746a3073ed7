//! Plugin mode: ADD, DEL and CHECK of the one attachment (CNI_CONTAINERID, CNI_IFNAME) a
//! meta-plugin asked for. Each is a flat pipeline: identify, resolve, act, answer.

use crate::agent::Agent;
use crate::attach::{self, io_err};
use crate::cni::{Env, Error, Outcome, Result, code};
use crate::config::NetConf;
use crate::pod::Pod;
use crate::state::Record;
use crate::vmi::{self, Attachment, Unresolved, Vmi};

/// Runtimes and meta-plugins may ask for an IP or MAC; Contrail allocates both, so a request
/// is logged and ignored (documented in the README), never silently honoured in part.
fn warn_about_requests(conf: &NetConf, env: &Env) {
    let sources = [
        ("runtimeConfig", conf.runtime_config.as_ref()),
        ("args.cni", conf.args.as_ref().and_then(|a| a.get("cni"))),
    ];
    for (section, value) in sources {
        for key in ["ips", "mac"] {
            if let Some(v) = value.and_then(|r| r.get(key)) {
                log::warn!("ignoring {section}.{key} {v}: Contrail allocates addresses and MACs");
            }
        }
    }
    for kv in env
        .args
        .split(';')
        .filter(|kv| kv.starts_with("IP=") || kv.starts_with("MAC="))
    {
        log::warn!("ignoring CNI_ARGS {kv}: Contrail allocates addresses and MACs");
    }
}

/// Resolves and records the claim under the pod's lock, so that concurrent ADDs of one pod
/// never take the same VMI, and a crash after this point leaves a record DEL can act on.
/// Returns the record, and whether this call made the claim (false when this (container id,
/// ifname) held it already: a rollback then leaves it, as it belongs to an earlier ADD).
/// `check_free` runs before a new claim is written; a held one is an earlier, interrupted ADD
/// of this attachment, whose interface the new one replaces.
fn claim(
    agent: &Agent,
    conf: &NetConf,
    env: &Env,
    vm_name: &str,
    vmis: &[Vmi],
    check_free: impl FnOnce() -> Result<()>,
) -> Result<(Record, bool)> {
    let dir = attach::open_pod(agent, conf, vm_name)?;
    let (records, unreadable) = dir.records().map_err(io_err("reading", dir.path()))?;
    for u in &unreadable {
        log::warn!(
            "leaving unreadable state file {} alone: {}",
            u.path.display(),
            u.why
        );
    }
    let claims: Vec<_> = records
        .iter()
        .map(Record::claim)
        .chain(unreadable.iter().map(|u| u.claim()))
        .collect();
    // Only a network attached more than once needs the agent's view to tell VMIs apart. Asked
    // under the lock, after open_pod settled the pod, so that it matches the files.
    let on_network: Vec<&str> = vmis
        .iter()
        .filter(|v| v.network == conf.network)
        .map(|v| v.uuid.as_str())
        .collect();
    let registered = match on_network.len() {
        0 | 1 => Vec::new(),
        _ => agent.registered(&vmis[0].vm_uuid, &on_network),
    };
    let at = Attachment {
        network: &conf.network,
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    let vmi = match vmi::resolve(at, vmis, &claims, &registered) {
        Ok(vmi) => vmi,
        Err(why) => {
            attach::close(dir)?;
            return Err(unresolved(&conf.network, vm_name, why));
        }
    };
    log::debug!(
        "{} resolved to VMI {} (index {})",
        env.ifname,
        vmi.uuid,
        vmi.index
    );
    let fresh = !records
        .iter()
        .any(|r| r.vmi_uuid == vmi.uuid && r.is(&env.container_id, &env.ifname));
    if fresh {
        if let Err(e) = check_free() {
            attach::close(dir)?;
            return Err(e);
        }
    }
    if let Some(old) = records
        .iter()
        .find(|r| r.vmi_uuid == vmi.uuid && r.container_id != env.container_id)
    {
        log::info!(
            "VMI {} was held by older sandbox {} as {}: taking it over",
            vmi.uuid,
            old.container_id,
            old.ifname
        );
    }
    let default_gw = vmi::default_gw(vmis).map(|v| &v.uuid) == Some(&vmi.uuid);
    let record = attach::record(env, vm_name, vmi, &env.ifname, default_gw);
    dir.write(&record)
        .map_err(io_err("writing state in", dir.path()))?;
    Ok((record, fresh))
}

fn unresolved(network: &str, vm_name: &str, why: Unresolved) -> Error {
    let msg = match why {
        Unresolved::NoSuchNetwork { known } => format!(
            "pod {vm_name} has no interface on network {network:?}; the agent knows it on: {}. \
             Check that the NetworkAttachmentDefinition name matches the pod's networks annotation",
            known.join(", ")
        ),
        Unresolved::AllTaken { count } => format!(
            "all {count} interface(s) of pod {vm_name} on network {network:?} are already attached under other \
             interface names; the pod references that network fewer times than it is being attached"
        ),
    };
    Error::new(code::NO_VMI, msg)
}

pub fn add(env: &Env, conf: &NetConf, pod: &Pod) -> Result<Outcome> {
    warn_about_requests(conf, env);
    let netns = attach::open_netns(&env.netns)?;
    let nl = attach::netlink()?;
    let agent = Agent::new(&conf.contrail);
    let vm_name = pod.vm_name(&conf.contrail.cluster_name);
    let vmis = agent.wait_for_pod(&vm_name)?;
    let check_free = || attach::check_free(&nl, &netns, &[&env.ifname]);
    let (record, fresh) = claim(&agent, conf, env, &vm_name, &vmis, check_free)?;
    crate::crash::point("claimed");
    let records = std::slice::from_ref(&record);
    let outcome = match attach::bring_up(&agent, conf, &nl, &netns, records) {
        Ok(mut outcomes) => outcomes.remove(0),
        Err(e) => {
            log::warn!("ADD of {} failed, rolling back: {e}", env.ifname);
            if fresh {
                attach::undo(&agent, conf, &vm_name, records);
            }
            return Err(e);
        }
    };
    // A runtime that gave up on this ADD may have sent DEL meanwhile, which removed the claim:
    // then undo what was just built rather than leave an interface no record knows.
    let dir = attach::open_pod(&agent, conf, &vm_name)?;
    let (held, _) = dir.records().map_err(io_err("reading", dir.path()))?;
    if !held.contains(&record) {
        attach::teardown(&nl, &record.host_ifname)?;
        // Our POST may have come after that DEL's deregistration.
        attach::release(&agent, &dir, records)?;
        attach::close(dir)?;
        return Err(Error::new(
            code::INTERFACE,
            format!(
                "{} was deleted while it was being added; undone",
                env.ifname
            ),
        ));
    }
    Ok(outcome)
}

/// DEL: removes exactly this attachment. Nothing recorded for (container id, ifname) - a
/// repeated DEL, a failed ADD already rolled back, an older sandbox's late DEL - is success.
pub fn del(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<()> {
    let Some(vm_name) = attach::locate(conf, env, pod, Some(&env.ifname))? else {
        return Ok(());
    };
    let agent = Agent::new(&conf.contrail);
    let dir = attach::open_pod(&agent, conf, &vm_name)?;
    let (records, _) = dir.records().map_err(io_err("reading", dir.path()))?;
    if let Some(record) = records
        .into_iter()
        .find(|r| r.is(&env.container_id, &env.ifname))
    {
        crate::logging::note_vmi(&record.vmi_uuid);
        attach::teardown(&attach::netlink()?, &record.host_ifname)?;
        crate::crash::point("unlinked");
        attach::release(&agent, &dir, &[record])?;
    }
    attach::close(dir)
}

/// CHECK: the interface, its MAC, addresses and default route are as ADD left them, and the
/// agent still has the port registered.
pub fn check(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<()> {
    let missing = || {
        Error::new(
            code::CHECK_FAILED,
            format!(
                "no attachment is recorded for container {} interface {}",
                env.container_id, env.ifname
            ),
        )
    };
    let vm_name = attach::locate(conf, env, pod, Some(&env.ifname))?.ok_or_else(missing)?;
    let agent = Agent::new(&conf.contrail);
    let record = {
        let dir = attach::open_pod(&agent, conf, &vm_name)?;
        let (records, _) = dir.records().map_err(io_err("reading", dir.path()))?;
        attach::close(dir)?;
        records
            .into_iter()
            .find(|r| r.is(&env.container_id, &env.ifname))
            .ok_or_else(missing)?
    };
    attach::verify(
        &agent,
        conf,
        &attach::netlink()?,
        &attach::open_netns(&env.netns)?,
        &record,
    )
}
