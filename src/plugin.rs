//! Plugin mode: ADD, DEL and CHECK of the one attachment (CNI_CONTAINERID, CNI_IFNAME) a
//! meta-plugin asked for. Each is a flat pipeline: identify, resolve, act, answer.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::agent::Agent;
use crate::attach::{self, Plan};
use crate::cni::{Env, Error, Outcome, Result, code};
use crate::config::NetConf;
use crate::netlink::{Netlink, Netns};
use crate::pod::Pod;
use crate::state::{PodDir, Record, STATE_VERSION};
use crate::vmi::{self, Attachment, Mac, Unresolved, Vmi};

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let what = format!("{what} {}", path.display());
    move |e| Error::io(format!("{what}: {e}"))
}

fn lock(conf: &NetConf, vm_name: &str) -> Result<PodDir> {
    let dir = &conf.contrail.config_dir;
    PodDir::lock(dir, vm_name).map_err(io_err("locking pod state in", &dir.join(vm_name)))
}

fn open_netns(path: &str) -> Result<Netns> {
    Netns::open(Path::new(path))
        .map_err(|e| Error::env("CNI_NETNS", format!("cannot open {path}: {e}")))
}

fn netlink() -> Result<Netlink> {
    Netlink::new().map_err(|e| Error::new(code::INTERFACE, format!("opening netlink: {e}")))
}

fn now() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:03}", t.as_secs(), t.subsec_millis())
}

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

/// The VMI chosen for this attachment and its state record, held under the pod's claim.
struct Claimed {
    vmi: Vmi,
    record: Record,
    /// False when this (container id, ifname) held the claim before this call: a rollback then
    /// leaves it, as it belongs to an earlier ADD.
    fresh: bool,
}

/// Resolves and records the claim under the pod's lock, so that concurrent ADDs of one pod
/// never take the same VMI, and a crash after this point leaves a record DEL can act on.
fn claim(
    conf: &NetConf,
    env: &Env,
    vm_name: &str,
    vmis: &[Vmi],
    registered: &[String],
) -> Result<Claimed> {
    let dir = lock(conf, vm_name)?;
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
    let at = Attachment {
        network: &conf.network,
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    let vmi = vmi::resolve(at, vmis, &claims, registered)
        .map_err(|why| unresolved(&conf.network, vm_name, why))?;
    let fresh = !records
        .iter()
        .any(|r| r.vmi_uuid == vmi.uuid && r.is(&env.container_id, &env.ifname));
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
    let record = Record {
        time: now(),
        container_id: env.container_id.clone(),
        vm_uuid: vmi.vm_uuid.clone(),
        vm_name: vm_name.to_string(),
        host_ifname: vmi::host_ifname(&vmi.uuid),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        vn_uuid: vmi.vn_uuid.clone(),
        vmi_uuid: vmi.uuid.clone(),
        state_version: STATE_VERSION.to_string(),
        network: vmi.network.clone(),
        mac: vmi.mac.to_string(),
        default_gw: (vmi::default_gw(vmis).map(|v| &v.uuid) == Some(&vmi.uuid)).to_string(),
    };
    dir.write(&record)
        .map_err(io_err("writing state in", dir.path()))?;
    Ok(Claimed {
        vmi: vmi.clone(),
        record,
        fresh,
    })
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
    let netns = open_netns(&env.netns)?;
    let agent = Agent::new(&conf.contrail);
    let vm_name = pod.vm_name(&conf.contrail.cluster_name);
    let vmis = agent.wait_for_pod(&vm_name)?;
    // Only a network attached more than once needs the agent's view to tell VMIs apart.
    let on_network: Vec<&str> = vmis
        .iter()
        .filter(|v| v.network == conf.network)
        .map(|v| v.uuid.as_str())
        .collect();
    let registered = match on_network.len() {
        0 | 1 => Vec::new(),
        _ => agent.registered(&vmis[0].vm_uuid, &on_network),
    };
    let claimed = claim(conf, env, &vm_name, &vmis, &registered)?;
    log::debug!(
        "attachment {} resolved to VMI {} (index {})",
        env.ifname,
        claimed.vmi.uuid,
        claimed.vmi.index
    );
    set_up_claimed(&agent, env, conf, &netns, &claimed).inspect_err(|e| {
        log::warn!("ADD of {} failed, rolling back: {e}", env.ifname);
        if claimed.fresh {
            release(&agent, conf, &claimed.record, &vm_name);
        }
    })
}

fn set_up_claimed(
    agent: &Agent,
    env: &Env,
    conf: &NetConf,
    netns: &Netns,
    claimed: &Claimed,
) -> Result<Outcome> {
    let record = &claimed.record;
    let ip = agent.wait_for_ip(&record.vm_uuid, &record.vmi_uuid)?;
    let plan = Plan {
        host_ifname: &record.host_ifname,
        ifname: &env.ifname,
        netns_path: &env.netns,
        mac: claimed.vmi.mac,
        mtu: conf.contrail.mtu,
        ip: &ip,
        default_route: record.default_gw == "true",
    };
    let nl = netlink()?;
    let outcome = attach::setup(&nl, netns, &plan)?;
    agent.register(record).inspect_err(|_| {
        if let Err(e) = attach::teardown(&nl, &record.host_ifname) {
            log::warn!("rollback: {e}");
        }
    })?;
    Ok(outcome)
}

/// Undoes a claim: the state file, then the pod's directory and agent registration when it was
/// the pod's last attachment. Errors are logged; the caller is already failing.
fn release(agent: &Agent, conf: &NetConf, record: &Record, vm_name: &str) {
    match lock(conf, vm_name) {
        Ok(dir) => {
            if let Err(e) = forget(agent, dir, record) {
                log::warn!("rollback of {}: {e}", record.vmi_uuid);
            }
        }
        Err(e) => log::warn!("rollback of {}: {e}", record.vmi_uuid),
    }
}

/// Removes a record from the (locked) pod directory; when no other attachment of the pod is
/// left, deregisters the pod from the agent (best effort: the agent has no per-VMI delete) and
/// removes the directory.
fn forget(agent: &Agent, dir: PodDir, record: &Record) -> Result<()> {
    dir.remove(&record.vmi_uuid)
        .map_err(io_err("removing state in", dir.path()))?;
    let (records, unreadable) = dir.records().map_err(io_err("reading", dir.path()))?;
    if records.is_empty() && unreadable.is_empty() {
        if let Err(e) = agent.unregister_pod(&record.vm_uuid) {
            log::warn!("pod {} left registered with the agent: {e}", record.vm_name);
        }
        let path = dir.path().to_path_buf();
        dir.remove_if_empty().map_err(io_err("removing", &path))?;
    }
    Ok(())
}

/// The pod directory holding this attachment: from CNI_ARGS, else by scanning (a DEL from a
/// caller that sends no pod name). `None` when there is nothing to act on.
fn locate(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<Option<String>> {
    let dir = &conf.contrail.config_dir;
    let vm_name = match pod {
        Some(p) => p.vm_name(&conf.contrail.cluster_name),
        None => match crate::state::find_pod(dir, &env.container_id, &env.ifname)
            .map_err(io_err("searching", dir))?
        {
            Some(name) => name,
            None => return Ok(None),
        },
    };
    Ok(dir.join(&vm_name).is_dir().then_some(vm_name))
}

/// DEL: removes exactly this attachment. Nothing recorded for (container id, ifname) - a
/// repeated DEL, a failed ADD already rolled back, an older sandbox's late DEL - is success.
pub fn del(env: &Env, conf: &NetConf, pod: Option<&Pod>) -> Result<()> {
    let Some(vm_name) = locate(env, conf, pod)? else {
        return Ok(());
    };
    let dir = lock(conf, &vm_name)?;
    let (records, _) = dir.records().map_err(io_err("reading", dir.path()))?;
    let Some(record) = records
        .into_iter()
        .find(|r| r.is(&env.container_id, &env.ifname))
    else {
        return Ok(());
    };
    attach::teardown(&netlink()?, &record.host_ifname)?;
    forget(&Agent::new(&conf.contrail), dir, &record)
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
    let vm_name = locate(env, conf, pod)?.ok_or_else(missing)?;
    let record = {
        let dir = lock(conf, &vm_name)?;
        let (records, _) = dir.records().map_err(io_err("reading", dir.path()))?;
        records
            .into_iter()
            .find(|r| r.is(&env.container_id, &env.ifname))
            .ok_or_else(missing)?
    };
    let agent = Agent::new(&conf.contrail);
    let ip = agent
        .ip_config(
            &record.vm_uuid,
            &record.vmi_uuid,
            conf.contrail.poll_timeout,
        )?
        .ok_or_else(|| {
            Error::new(
                code::CHECK_FAILED,
                format!(
                    "the agent no longer has VMI {} of pod {vm_name}",
                    record.vmi_uuid
                ),
            )
        })?;
    if ip.registered_as.as_deref() != Some(record.host_ifname.as_str()) {
        return Err(Error::new(
            code::CHECK_FAILED,
            format!(
                "the agent has VMI {} registered as {:?}, not {}",
                record.vmi_uuid,
                ip.registered_as.as_deref().unwrap_or("nothing"),
                record.host_ifname
            ),
        ));
    }
    let mac = Mac::parse(&record.mac).unwrap_or(ip.mac);
    let plan = Plan {
        host_ifname: &record.host_ifname,
        ifname: &env.ifname,
        netns_path: &env.netns,
        mac,
        mtu: conf.contrail.mtu,
        ip: &ip,
        default_route: record.default_gw == "true",
    };
    attach::check(&netlink()?, &open_netns(&env.netns)?, &plan)
}
