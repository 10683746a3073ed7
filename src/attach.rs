//! The attachment engine: everything about one VMI's interface, from its state record to its
//! veth and its registration with the agent. Plugin mode runs it for the one attachment of a
//! call; thick mode for every VMI of the pod.
//!
//! The agent's order: the claim is recorded, the veth created, the port registered
//! (`POST /vm`), and only then does the agent have an IP configuration to give. Registrations
//! cannot be undone one VMI at a time, so the pod's registrations are kept equal to its state
//! files: whatever removes a file re-registers the files that stay ([`release`]).

use std::net::IpAddr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use ipnetwork::IpNetwork;

use crate::agent::Agent;
use crate::cni::{self, Env, Error, Interface, Outcome, Result, code};
use crate::config::NetConf;
use crate::netlink::{self, Netlink, Netns, Route, Socket, VethEnd};
use crate::pod::Pod;
use crate::state::{self, PodDir, Record, STATE_VERSION};
use crate::vmi::{self, IpConfig, Mac, Vmi};

pub fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let what = format!("{what} {}", path.display());
    move |e| Error::io(format!("{what}: {e}"))
}

/// Takes the pod's state lock (see [`PodDir::lock`]) and first finishes a resync that an
/// earlier call left pending (it was killed, or the agent did not answer it).
pub fn open_pod(agent: &Agent, conf: &NetConf, vm_name: &str) -> Result<PodDir> {
    let dir = &conf.contrail.config_dir;
    let pod =
        PodDir::lock(dir, vm_name).map_err(io_err("locking pod state in", &dir.join(vm_name)))?;
    match pod.resync_pending() {
        Ok(Some(vm_uuid)) => {
            log::info!("pod {vm_name}: finishing an interrupted deregistration");
            settle(agent, &pod, &vm_uuid);
        }
        Ok(None) => {}
        Err(e) => log::warn!("pod {vm_name}: reading its resync marker: {e}"),
    }
    Ok(pod)
}

/// Ends a critical section on the pod: the directory goes when nothing is left in it.
pub fn close(pod: PodDir) -> Result<()> {
    let path = pod.path().to_path_buf();
    pod.close().map_err(io_err("removing", &path))
}

pub fn open_netns(path: &str) -> Result<Netns> {
    Netns::open(Path::new(path))
        .map_err(|e| Error::env("CNI_NETNS", format!("cannot open {path}: {e}")))
}

pub fn netlink() -> Result<Netlink> {
    Netlink::new().map_err(|e| Error::new(code::INTERFACE, format!("opening netlink: {e}")))
}

/// The pod directory holding this sandbox's attachments (the one on `ifname`, or any): from
/// CNI_ARGS, else by scanning (a DEL from a caller that sends no pod name). `None` when there
/// is nothing to act on.
pub fn locate(
    conf: &NetConf,
    env: &Env,
    pod: Option<&Pod>,
    ifname: Option<&str>,
) -> Result<Option<String>> {
    let dir = &conf.contrail.config_dir;
    let vm_name = match pod {
        Some(p) => p.vm_name(&conf.contrail.cluster_name),
        None => match state::find_pod(dir, &env.container_id, ifname)
            .map_err(io_err("searching", dir))?
        {
            Some(name) => name,
            None => return Ok(None),
        },
    };
    Ok(dir.join(&vm_name).is_dir().then_some(vm_name))
}

/// The state record of one attachment: the agent's POST /vm body plus ours.
pub fn record(env: &Env, vm_name: &str, vmi: &Vmi, ifname: &str, default_gw: bool) -> Record {
    crate::logging::note_vmi(&vmi.uuid);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Record {
        time: format!("{}.{:03}", t.as_secs(), t.subsec_millis()),
        container_id: env.container_id.clone(),
        vm_uuid: vmi.vm_uuid.clone(),
        vm_name: vm_name.to_string(),
        host_ifname: vmi::host_ifname(&vmi.uuid),
        ifname: ifname.to_string(),
        netns: env.netns.clone(),
        vn_uuid: vmi.vn_uuid.clone(),
        vmi_uuid: vmi.uuid.clone(),
        state_version: STATE_VERSION.to_string(),
        network: vmi.network.clone(),
        mac: vmi.mac.to_string(),
        default_gw: default_gw.to_string(),
    }
}

/// The registration body of a record.
pub fn port(record: &Record) -> Result<serde_json::Value> {
    serde_json::to_value(record).map_err(|e| Error::new(code::INTERNAL, e.to_string()))
}

fn plan<'a>(conf: &NetConf, record: &'a Record, ip: &'a IpConfig) -> Plan<'a> {
    Plan {
        host_ifname: &record.host_ifname,
        ifname: &record.ifname,
        netns_path: &record.netns,
        // Files the agent wrote for another plugin carry no MAC: the agent's is the truth.
        mac: Mac::parse(&record.mac).unwrap_or(ip.mac),
        mtu: conf.contrail.mtu,
        ip,
        default_route: record.default_gw == "true",
    }
}

/// Fails with code 102, before anything is created, when one of `ifnames` exists in the pod:
/// another attachment owns that name.
pub fn check_free(nl: &Netlink, netns: &Netns, ifnames: &[&str]) -> Result<()> {
    let ctr = nl.open(netns).map_err(link_err)?;
    for name in ifnames {
        if ctr.link(name).map_err(link_err)?.is_some() {
            return Err(Error::new(
                code::INTERFACE,
                format!(
                    "interface {name} already exists in {}; another attachment owns that name",
                    netns.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// Brings claimed attachments up, in the agent's order: every veth (with the VMI's MAC and the
/// MTU), every registration, then the wait for the IP configuration (which the agent only has
/// for a registered port), then addresses and routes. One outcome per record. On failure no
/// interface of the records is left; claims and registrations are the caller's to release.
pub fn bring_up(
    agent: &Agent,
    conf: &NetConf,
    nl: &Netlink,
    netns: &Netns,
    records: &[Record],
) -> Result<Vec<Outcome>> {
    let host = nl.host().map_err(link_err)?;
    let ctr = nl.open(netns).map_err(link_err)?;
    let mut created = Vec::new();
    let result = (|| {
        for r in records {
            create_veth(&host, conf.contrail.mtu, r, netns)?;
            created.push(r.host_ifname.as_str());
        }
        crate::crash::point("veth");
        for r in records {
            agent.register(&port(r)?)?;
        }
        crate::crash::point("registered");
        let uuids: Vec<&str> = records.iter().map(|r| r.vmi_uuid.as_str()).collect();
        let vm_uuid = records.first().map_or("", |r| r.vm_uuid.as_str());
        // A DEL of the attachment meanwhile (a runtime that gave up) removed its record and
        // its registration: then no IP configuration will come.
        let abandoned = || {
            let gone = records
                .iter()
                .find(|r| !state::exists(&conf.contrail.config_dir, r))?;
            Some(Error::new(
                code::INTERFACE,
                format!("{} was deleted while it was being added", gone.ifname),
            ))
        };
        let ips = agent.wait_for_ips(vm_uuid, &uuids, abandoned)?;
        crate::crash::point("ip");
        let outcomes = records
            .iter()
            .zip(&ips)
            .map(|(r, ip)| configure(&host, &ctr, &plan(conf, r, ip)))
            .collect::<Result<Vec<_>>>()?;
        crate::crash::point("addressed");
        Ok(outcomes)
    })();
    if result.is_err() {
        for name in created {
            if let Err(e) = host.delete_link(name) {
                log::warn!("rollback: could not delete {name}: {e}");
            }
        }
    }
    result
}

/// CHECK of one attachment: the agent still has the port under our host name with its IP
/// configuration, and the interfaces are as [`bring_up`] left them.
pub fn verify(
    agent: &Agent,
    conf: &NetConf,
    nl: &Netlink,
    netns: &Netns,
    record: &Record,
) -> Result<()> {
    let fail = |msg: String| Error::new(code::CHECK_FAILED, msg);
    let ip = agent
        .ip_config(
            &record.vm_uuid,
            &record.vmi_uuid,
            conf.contrail.poll_timeout,
        )?
        .ok_or_else(|| {
            fail(format!(
                "the agent has no IP configuration for VMI {} of pod {}, which this node \
                 registered as {}: the agent lost the port or its network has no IPAM",
                record.vmi_uuid, record.vm_name, record.host_ifname
            ))
        })?;
    if ip.registered_as.as_deref() != Some(record.host_ifname.as_str()) {
        return Err(fail(format!(
            "the agent has VMI {} registered as {:?}, not {}",
            record.vmi_uuid,
            ip.registered_as.as_deref().unwrap_or("nothing"),
            record.host_ifname
        )));
    }
    check(nl, netns, &plan(conf, record, &ip))
}

/// Removes records from the (locked) pod directory and brings the agent in line: the marker
/// first, so that a registration is never left without a file that explains it, then the
/// files, then [`settle`]. The agent part is best effort: when it fails, the marker stays and
/// the next call for the pod, or GC, finishes it.
pub fn release(agent: &Agent, pod: &PodDir, gone: &[Record]) -> Result<()> {
    let Some(first) = gone.first() else {
        return Ok(());
    };
    pod.mark_resync(&first.vm_uuid)
        .map_err(io_err("writing state in", pod.path()))?;
    crate::crash::point("marked");
    for r in gone {
        pod.remove(&r.vmi_uuid)
            .map_err(io_err("removing state in", pod.path()))?;
    }
    crate::crash::point("forgotten");
    settle(agent, pod, &first.vm_uuid);
    Ok(())
}

/// Makes the agent's registrations for the pod exactly its files' (see [`Agent::resync`]) and
/// clears the marker; on failure the marker stays.
fn settle(agent: &Agent, pod: &PodDir, vm_uuid: &str) {
    let ports = pod.ports().map_err(io_err("reading", pod.path()));
    let done = ports
        .and_then(|ports| agent.resync(vm_uuid, &ports))
        .and_then(|()| {
            pod.clear_resync()
                .map_err(io_err("removing the resync marker in", pod.path()))
        });
    if let Err(e) = done {
        log::warn!(
            "pod {} left registered with the agent beyond its attachments; the next call for \
             the pod or GC retries: {e}",
            pod.path().display()
        );
    }
}

/// Undoes claims after a failed ADD. Errors are logged: the caller is already failing.
pub fn undo(agent: &Agent, conf: &NetConf, vm_name: &str, gone: &[Record]) {
    let done = open_pod(agent, conf, vm_name)
        .and_then(|pod| release(agent, &pod, gone).and_then(|()| close(pod)));
    if let Err(e) = done {
        log::warn!("rollback of the claims of pod {vm_name}: {e}");
    }
}

/// Everything needed to build one interface: plain data, decided before any effect.
#[derive(Debug, Clone)]
struct Plan<'a> {
    pub host_ifname: &'a str,
    pub ifname: &'a str,
    pub netns_path: &'a str,
    pub mac: Mac,
    pub mtu: u32,
    pub ip: &'a IpConfig,
    /// Whether this interface carries the pod's default route.
    pub default_route: bool,
}

fn link_err(e: netlink::Error) -> Error {
    Error::new(code::INTERFACE, e.to_string())
}

/// An IPv6 network must carry at least 1280 bytes; say so before creating anything rather
/// than fail later with a bare EINVAL.
fn check_mtu(plan: &Plan) -> Result<()> {
    if plan.ip.v6.is_some() && plan.mtu < 1280 {
        return Err(Error::config(
            "contrail.mtu",
            format!(
                "{} is below 1280, the IPv6 minimum, and interface {} gets an IPv6 address",
                plan.mtu, plan.ifname
            ),
        ));
    }
    Ok(())
}

/// The routes a plan installs in the container: an on-link host route to each gateway outside
/// its address's prefix (an IPv6 /128 always), then the default routes if this interface
/// carries them.
fn routes(plan: &Plan) -> (Vec<cni::Route>, Vec<cni::Route>) {
    let gateways: Vec<(IpNetwork, IpAddr)> = [
        plan.ip
            .v4
            .map(IpNetwork::V4)
            .zip(plan.ip.v4_gateway.map(IpAddr::V4)),
        plan.ip
            .v6
            .map(IpNetwork::V6)
            .zip(plan.ip.v6_gateway.map(IpAddr::V6)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let on_link = gateways
        .iter()
        .filter(|(net, gw)| !net.contains(*gw))
        .map(|(_, gw)| cni::Route {
            dst: IpNetwork::from(*gw),
            gw: None,
        })
        .collect();
    let default = if plan.default_route {
        gateways
            .iter()
            .map(|(_, gw)| {
                let dst = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
                cni::Route {
                    dst: dst.parse().expect("literal prefix"),
                    gw: Some(*gw),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    (on_link, default)
}

/// Creates the VMI's veth: the host end by its derived name, the container end directly in the
/// pod's netns with the VMI's MAC; both up.
fn create_veth(host: &Socket, mtu: u32, record: &Record, netns: &Netns) -> Result<()> {
    let mac = Mac::parse(&record.mac).ok_or_else(|| {
        Error::new(
            code::INTERNAL,
            format!("state record of VMI {} has no MAC", record.vmi_uuid),
        )
    })?;
    let host_end = VethEnd {
        name: &record.host_ifname,
        mac: None,
        mtu,
    };
    let peer = VethEnd {
        name: &record.ifname,
        mac: Some(mac.0),
        mtu,
    };
    match host.create_veth(&host_end, &peer, netns) {
        // The host name is derived from the VMI we now hold: whatever holds it is a leftover
        // of an earlier sandbox or a crashed ADD whose DEL never came. Replace it.
        Err(e) if e.is_exists() => {
            log::info!("replacing leftover host interface {}", record.host_ifname);
            host.delete_link(&record.host_ifname).map_err(link_err)?;
            host.create_veth(&host_end, &peer, netns).map_err(link_err)
        }
        other => other.map_err(link_err),
    }?;
    let up = host
        .link(&record.host_ifname)
        .map_err(link_err)?
        .map(|l| host.set_up(l.index));
    match up {
        Some(r) => r.map_err(link_err),
        None => Err(vanished(&record.host_ifname)),
    }
}

fn vanished(name: &str) -> Error {
    Error::new(
        code::INTERFACE,
        format!("interface {name} vanished right after creation"),
    )
}

/// Configures a created, registered interface with the agent's IP configuration: container
/// end up, addresses, routes; the outcome for the result.
fn configure(host: &Socket, ctr: &Socket, plan: &Plan) -> Result<Outcome> {
    check_mtu(plan)?;
    let link = ctr
        .link(plan.ifname)
        .map_err(link_err)?
        .ok_or_else(|| vanished(plan.ifname))?;
    ctr.set_up(link.index).map_err(link_err)?;
    let addresses = plan.ip.addresses();
    for addr in &addresses {
        ctr.add_addr(link.index, *addr).map_err(link_err)?;
    }
    let (on_link, mut default) = routes(plan);
    // A network attached twice has one gateway for both interfaces: each gets its own host
    // route to it, appended next to the other's rather than refused as a duplicate.
    for r in &on_link {
        ctr.append_route(&Route {
            dst: r.dst,
            gateway: None,
            oif: Some(link.index),
        })
        .map_err(link_err)?;
    }
    // Another plugin's interface (the cluster network under CNI-Genie, say) may already carry
    // the pod's default route: it stays theirs, and ours is left out of the result.
    let mut taken = Vec::new();
    for r in &default {
        if let Some(oif) = other_default(ctr, r.dst, link.index)? {
            log::info!(
                "{}: the pod's {} default route is on interface #{oif} already: leaving it",
                plan.ifname,
                r.dst
            );
            taken.push(r.dst);
        }
    }
    default.retain(|r| !taken.contains(&r.dst));
    for r in &default {
        ctr.add_route(&Route {
            dst: r.dst,
            gateway: r.gw,
            oif: Some(link.index),
        })
        .map_err(link_err)?;
    }
    let host_link = host
        .link(plan.host_ifname)
        .map_err(link_err)?
        .ok_or_else(|| vanished(plan.host_ifname))?;
    let ips = addresses
        .iter()
        .map(|a| cni::IpConfig {
            address: *a,
            gateway: match a {
                IpNetwork::V4(_) => plan.ip.v4_gateway.map(IpAddr::V4),
                IpNetwork::V6(_) => plan.ip.v6_gateway.map(IpAddr::V6),
            },
            interface: 1,
        })
        .collect();
    Ok(Outcome {
        interfaces: vec![
            Interface {
                name: plan.host_ifname.to_string(),
                mac: host_link
                    .mac
                    .map(|m| Mac(m).to_string())
                    .unwrap_or_default(),
                mtu: plan.mtu,
                sandbox: None,
            },
            Interface {
                name: plan.ifname.to_string(),
                mac: plan.mac.to_string(),
                mtu: plan.mtu,
                sandbox: Some(plan.netns_path.to_string()),
            },
        ],
        ips,
        routes: default,
        nameservers: plan.ip.nameservers(),
    })
}

/// The interface index of a default route of `dst`'s family on another interface than ours.
fn other_default(ctr: &Socket, dst: IpNetwork, ours: u32) -> Result<Option<u32>> {
    let routes = ctr.routes(dst.is_ipv6()).map_err(link_err)?;
    Ok(routes
        .iter()
        .filter(|r| r.dst == dst)
        .filter_map(|r| r.oif)
        .find(|oif| *oif != ours))
}

/// Verifies that the container still has what [`setup`] created.
fn check(nl: &Netlink, netns: &Netns, plan: &Plan) -> Result<()> {
    let fail = |what: String| Error::new(code::CHECK_FAILED, what);
    let host = nl.host().map_err(link_err)?;
    let ctr = nl.open(netns).map_err(link_err)?;
    let link = ctr.link(plan.ifname).map_err(link_err)?.ok_or_else(|| {
        fail(format!(
            "interface {} is missing from {}",
            plan.ifname, plan.netns_path
        ))
    })?;
    if link.mac != Some(plan.mac.0) {
        let has = link.mac.map(|m| Mac(m).to_string()).unwrap_or_default();
        return Err(fail(format!(
            "interface {} has MAC {has}, the agent says {}",
            plan.ifname, plan.mac
        )));
    }
    if !link.up {
        return Err(fail(format!("interface {} is down", plan.ifname)));
    }
    let have = ctr.addrs(link.index).map_err(link_err)?;
    for want in plan.ip.addresses() {
        if !have.contains(&want) {
            return Err(fail(format!(
                "interface {} lacks address {want}",
                plan.ifname
            )));
        }
    }
    let (on_link, default) = routes(plan);
    if !on_link.is_empty() {
        let have = ctr.routes(false).map_err(link_err)?;
        let have6 = ctr.routes(true).map_err(link_err)?;
        for want in &on_link {
            let found = have
                .iter()
                .chain(&have6)
                .any(|r| r.dst == want.dst && r.gateway.is_none() && r.oif == Some(link.index));
            if !found {
                return Err(fail(format!(
                    "the route to gateway {} on {} is missing",
                    want.dst.ip(),
                    plan.ifname
                )));
            }
        }
    }
    for want in default {
        let routes = ctr.routes(want.dst.is_ipv6()).map_err(link_err)?;
        let ours = routes
            .iter()
            .any(|r| r.dst == want.dst && r.gateway == want.gw && r.oif == Some(link.index));
        if !ours && other_default(&ctr, want.dst, link.index)?.is_none() {
            return Err(fail(format!(
                "the default route via {} on {} is missing",
                want.gw.map(|g| g.to_string()).unwrap_or_default(),
                plan.ifname
            )));
        }
    }
    if host.link(plan.host_ifname).map_err(link_err)?.is_none() {
        return Err(fail(format!(
            "host interface {} is missing",
            plan.host_ifname
        )));
    }
    Ok(())
}

/// Removes the veth by its host name (which removes both ends, wherever the container end
/// is); `Ok` when it is already gone, as after a node reboot or with the netns deleted.
pub fn teardown(nl: &Netlink, host_ifname: &str) -> Result<()> {
    let host = nl.host().map_err(link_err)?;
    host.delete_link(host_ifname).map(|_| ()).map_err(link_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(v4: Option<&str>, v4gw: Option<&str>, v6: Option<&str>, v6gw: Option<&str>) -> IpConfig {
        IpConfig {
            v4: v4.map(|s| s.parse().unwrap()),
            v4_gateway: v4gw.map(|s| s.parse().unwrap()),
            v4_dns: None,
            v6: v6.map(|s| s.parse().unwrap()),
            v6_gateway: v6gw.map(|s| s.parse().unwrap()),
            v6_dns: None,
            mac: Mac([2, 0, 0, 0, 0, 1]),
            registered_as: None,
        }
    }

    fn plan<'a>(ip: &'a IpConfig, default_route: bool, mtu: u32) -> Plan<'a> {
        Plan {
            host_ifname: "tap000000000000",
            ifname: "net1",
            netns_path: "/run/netns/x",
            mac: Mac([2, 0, 0, 0, 0, 1]),
            mtu,
            ip,
            default_route,
        }
    }

    #[test]
    fn secondary_network_gets_no_default_route() {
        let ip = ip(Some("10.1.0.3/24"), Some("10.1.0.1"), None, None);
        let (on_link, default) = routes(&plan(&ip, false, 1500));
        assert!(on_link.is_empty());
        assert!(default.is_empty());
    }

    #[test]
    fn default_gw_interface_gets_both_families() {
        let ip = ip(
            Some("10.1.0.3/24"),
            Some("10.1.0.1"),
            Some("fd00::3/128"),
            Some("fd00::1"),
        );
        let (on_link, default) = routes(&plan(&ip, true, 1500));
        // A /128 never contains its gateway: reach it on-link.
        assert_eq!(
            on_link,
            vec![cni::Route {
                dst: "fd00::1/128".parse().unwrap(),
                gw: None
            }]
        );
        assert_eq!(default.len(), 2);
        assert_eq!(default[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(default[1].dst.to_string(), "::/0");
        assert_eq!(default[1].gw, Some("fd00::1".parse().unwrap()));
    }

    #[test]
    fn v6_with_prefix_and_v4_host_route() {
        let ip = ip(
            Some("10.1.0.3/32"),
            Some("10.1.0.1"),
            Some("fd00::3/64"),
            Some("fd00::1"),
        );
        let (on_link, _) = routes(&plan(&ip, false, 1500));
        assert_eq!(
            on_link,
            vec![cni::Route {
                dst: "10.1.0.1/32".parse().unwrap(),
                gw: None
            }]
        );
    }

    #[test]
    fn v6_needs_1280() {
        let v6 = ip(None, None, Some("fd00::3/64"), None);
        assert_eq!(
            check_mtu(&plan(&v6, false, 1279)).unwrap_err().code,
            code::INVALID_CONFIG
        );
        assert!(check_mtu(&plan(&v6, false, 1280)).is_ok());
        let v4 = ip(Some("10.1.0.3/24"), None, None, None);
        assert!(check_mtu(&plan(&v4, false, 576)).is_ok());
    }
}
