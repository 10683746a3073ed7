//! `contrail-k8s-cni inspect`: this node's attachments from the state directory, joined with
//! what the pods' namespaces, the host and the agent show, with a health verdict for each.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::agent::{Agent, Class};
use crate::config::{self, Contrail};
use crate::error::{Error, Result};
use crate::ids::VmName;
use crate::kernel::links::{Debris, Kinds, Links};
use crate::state::{Record, StateDir, Then};
use crate::vmi::Mac;

/// Which node-wide file, and how to print (`cli` documents each option).
#[derive(Debug)]
pub struct Options {
    /// Default: the one a CNI call reads.
    pub config: Option<PathBuf>,
    pub json: bool,
}

/// Who made an attachment, as the report says it.
const OURS: &str = "contrail-k8s-cni";
const LEGACY: &str = "opensdn-go-cni";

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Row {
    pub pod: String,
    pub sandbox: String,
    pub ifname: String,
    pub network: String,
    pub vmi: String,
    pub host: String,
    /// Nested mode: the host side's VLAN tag.
    pub vlan: Option<u16>,
    pub mac: String,
    pub addresses: Vec<String>,
    pub health: String,
    /// What to do about it ("-" when healthy).
    pub fix: String,
    /// Who made the attachment: this plugin, or the OpenSDN Go plugin before it was rolled
    /// out ("-" for what is no attachment).
    pub made_by: String,
}

/// What the agent says of a VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentView {
    Registered(String),
    /// An IP configuration of a port nothing registers (nested mode).
    Configured,
    /// 404: not registered, or registered without IPAM; either way no IP configuration.
    NoIpConfig,
    Unreachable,
}

/// What was observed for one record; [`health`] turns it into a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub netns_exists: bool,
    /// Its pieces (the pod's end, the host side) are all there.
    pub whole: bool,
    /// What its kind calls them ("interface", "vhost-user link").
    pub pieces: &'static str,
    pub agent: AgentView,
    /// What CHECK would find different, when there is an interface and an IP configuration to
    /// compare it with ([`crate::kernel::interface::Spec::verify`]: the same comparison).
    pub differs: Option<String>,
}

/// A verdict: on an attachment, or on something no attachment explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    Ok,
    StaleSandbox,
    /// Its pieces, as its kind calls them, are not all there.
    Missing(&'static str),
    NoIpConfig,
    RegisteredAs(String),
    AgentUnreachable,
    /// What CHECK reports: the interface differs from what ADD made.
    Differs(String),
    EmptyPodDirectory,
    DeregistrationPending,
    /// An attachment whose ADD failed: it keeps its VMI, without an interface.
    Failed,
    TempFile(String),
    Unreadable(String),
    /// Empty or torn, from before this boot: left by a power loss.
    Torn(String),
    /// Registered with the agent (for pod vm-uuid) without a state file.
    RegisteredWithoutState(String),
    NotOurs,
    StaleLock,
    OrphanHostLink(String),
    /// A `uvh_vif_` link into `vhost-dir` that no attachment explains.
    OrphanVhostLink(String),
    /// An ADD refused for want of a VMI (code 101, when, the log's reason): nothing of it was
    /// made, only the log has it.
    NoVmi {
        at: String,
        why: String,
    },
    /// A pod's directory in `vhost-dir` no attachment owns (what it holds, or what is there
    /// instead of a directory): what a release left there, not this plugin's to remove.
    VhostDirLeft(String),
    /// A pod's directory in `vhost-dir` that the attachments of other pods name too (they were
    /// made with its UID): those pods, by VM name.
    VhostDirNamedByOthers(String),
}

impl Finding {
    pub(crate) fn health(&self) -> String {
        match self {
            Finding::Ok => "ok".into(),
            Finding::StaleSandbox => "stale sandbox".into(),
            Finding::Missing(pieces) => format!("{pieces} missing"),
            Finding::NoIpConfig => "agent has no IP configuration for it".into(),
            Finding::RegisteredAs(h) => format!("agent has it as {h}"),
            Finding::AgentUnreachable => "agent unreachable".into(),
            Finding::Differs(what) => what.clone(),
            Finding::EmptyPodDirectory => "empty pod directory".into(),
            Finding::DeregistrationPending => "deregistration pending".into(),
            Finding::Failed => "ADD failed: holds its VMI, no interface".into(),
            Finding::TempFile(name) => format!("temp file left by a killed call: {name}"),
            Finding::Unreadable(why) => format!("unreadable state file: {why}"),
            Finding::Torn(name) => {
                format!("state file left empty or torn by a power loss: {name}")
            }
            Finding::RegisteredWithoutState(_) => {
                "registered with the agent without a state file".into()
            }
            Finding::NotOurs => "not this plugin's".into(),
            Finding::StaleLock => "stale lock".into(),
            Finding::OrphanHostLink(_) => "orphan host link".into(),
            Finding::OrphanVhostLink(_) => "orphan vhost-user link".into(),
            Finding::NoVmi { at, why } => format!("ADD refused at {at}, no VMI: {why}"),
            Finding::VhostDirLeft(what) => format!("vhost-user directory left, {what}"),
            Finding::VhostDirNamedByOthers(pods) => {
                format!("vhost-user directory named by other pods' attachments: {pods}")
            }
        }
    }

    pub(crate) fn fix(&self) -> String {
        match self {
            Finding::Ok => "-".into(),
            Finding::StaleSandbox => {
                "GC or the sweep releases it (the sandbox's DEL never came)".into()
            }
            Finding::Missing(_) | Finding::RegisteredAs(_) | Finding::Differs(_) => {
                "delete the pod: its new sandbox gets all its interfaces".into()
            }
            Finding::NoIpConfig => {
                "check the VMI and its IPAM in Contrail, then delete the pod".into()
            }
            Finding::AgentUnreachable => "check the vRouter agent on this node".into(),
            Finding::EmptyPodDirectory | Finding::TempFile(_) | Finding::Torn(_) => {
                "the next call for the pod, or GC, removes it".into()
            }
            Finding::DeregistrationPending => {
                "the next call for the pod, or GC, retries it once the agent answers".into()
            }
            Finding::Failed => {
                "the runtime retries the ADD (it gets this VMI) or DELs it; GC releases it once \
                 the sandbox is gone"
                    .into()
            }
            Finding::Unreadable(_) => {
                "left alone: look at it, and remove it if no pod needs it".into()
            }
            Finding::RegisteredWithoutState(vm_uuid) => {
                format!("if the pod is gone: DELETE /vm/{vm_uuid} on the agent")
            }
            Finding::NotOurs => "left alone: remove it if nothing needs it".into(),
            Finding::StaleLock => "GC removes it".into(),
            Finding::OrphanHostLink(name) => format!("if no pod uses it: ip link del {name}"),
            Finding::OrphanVhostLink(path) => format!("if no pod uses it: rm {path}"),
            Finding::VhostDirLeft(_) => "what a release left there is not this plugin's: \
                                          look at it, and remove the directory once its pod \
                                          is gone"
                .into(),
            Finding::VhostDirNamedByOthers(_) => "a runtime gave these pods this pod's \
                                                  K8S_POD_UID: delete them (their releases \
                                                  leave the directory alone) and fix the runtime"
                .into(),
            Finding::NoVmi { .. } => format!(
                "fix the pod's networks annotation or its NAD, then recreate the pod: {}",
                crate::error::NO_VMI_DOCS
            ),
        }
    }
}

/// The most important problem first: a sandbox that is gone explains everything after it.
pub(crate) fn health(record: &Record, o: &Observed) -> Finding {
    match (o.netns_exists, o.whole, &o.agent) {
        (false, _, _) => Finding::StaleSandbox,
        (_, false, _) => Finding::Missing(o.pieces),
        (_, _, AgentView::NoIpConfig) => Finding::NoIpConfig,
        (_, _, AgentView::Registered(h)) if h != record.host_ifname.as_str() => {
            Finding::RegisteredAs(h.clone())
        }
        (_, _, AgentView::Unreachable) => Finding::AgentUnreachable,
        _ => match &o.differs {
            Some(what) => Finding::Differs(what.clone()),
            None => Finding::Ok,
        },
    }
}

fn load(config: Option<&Path>) -> Result<Contrail> {
    let node = match config {
        Some(path) => config::load_node_from(path)?,
        None => config::load_node()?,
    };
    Ok(node.contrail)
}

/// Looks at one record on the node (through its kind) and in the agent.
fn observe(
    links: &mut Links,
    agent: &Agent,
    conf: &Contrail,
    r: &Record,
) -> (Observed, Option<Mac>, Vec<String>) {
    let ip = agent.ip_config(Class::Poll, &r.vm_uuid, &r.vmi_uuid, conf.poll_timeout);
    let agent_view = match &ip {
        // A port registered elsewhere: the IP configuration is all there is to see.
        Ok(Some(_)) if !links.kinds().registration(r).by_this_node() => AgentView::Configured,
        Ok(Some(ip)) => ip
            .registered_as
            .clone()
            .map_or(AgentView::NoIpConfig, AgentView::Registered),
        Ok(None) => AgentView::NoIpConfig,
        Err(_) => AgentView::Unreachable,
    };
    // Compared with what the attachment was made with.
    let mtu = r.mtu.parse().unwrap_or(conf.mtu);
    let seen = links.observe(r, ip.as_ref().ok().and_then(Option::as_ref), mtu);
    let o = Observed {
        netns_exists: seen.sandbox,
        whole: seen.whole,
        pieces: seen.pieces,
        agent: agent_view,
        differs: seen.differs,
    };
    (o, seen.mac, seen.addresses)
}

/// A row about an attachment (or a failed attachment's reservation), whose host link `links`
/// names.
fn attachment(
    links: &Links,
    r: &Record,
    finding: &Finding,
    mac: Option<Mac>,
    addresses: Vec<String>,
) -> Row {
    Row {
        pod: r
            .vm_name
            .as_str()
            .split("__")
            .skip(1)
            .collect::<Vec<_>>()
            .join("/"),
        sandbox: r.container_id.as_str().chars().take(12).collect(),
        ifname: r.ifname.to_string(),
        network: r.network.clone(),
        vmi: r.vmi_uuid.to_string(),
        host: links.shown_host(r),
        vlan: r.vlan,
        mac: mac.map(|m| m.to_string()).unwrap_or_default(),
        addresses,
        health: finding.health(),
        fix: finding.fix(),
        made_by: if r.is_legacy() { LEGACY } else { OURS }.to_string(),
    }
}

/// A row about something that no attachment explains.
fn debris(pod: &str, finding: &Finding) -> Row {
    Row {
        pod: pod.to_string(),
        health: finding.health(),
        fix: finding.fix(),
        ..Row::default()
    }
}

pub(crate) fn rows(conf: &Contrail) -> Result<Vec<Row>> {
    let dir = &conf.config_dir;
    let mut records = Vec::new();
    let mut rows = Vec::new();
    // inspect removes nothing: no wait.
    let mut links = Links::new(Kinds::new(conf), std::time::Instant::now())?;
    let agent = Agent::new(conf, std::time::Instant::now());
    if let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? {
        for vm_name in state.pods().map_err(Error::io("reading", dir))? {
            let files = state
                .read_pod(&vm_name)
                .map_err(Error::io("reading", &dir.join(&vm_name)))?;
            let empty = files.records.is_empty()
                && files.unreadable.is_empty()
                && files.torn.is_empty()
                && files.reserved.is_empty()
                && files.pending.is_empty()
                && files.temps.is_empty()
                && files.others.is_empty()
                && files.legacy_resync.is_none();
            if empty {
                rows.push(debris(vm_name.as_str(), &Finding::EmptyPodDirectory));
            }
            if files.legacy_resync.is_some() {
                rows.push(debris(vm_name.as_str(), &Finding::DeregistrationPending));
            }
            for p in files.pending.iter().filter(|p| p.then == Then::Gone) {
                rows.push(Row {
                    vmi: p.vmi_uuid.to_string(),
                    ..debris(vm_name.as_str(), &Finding::DeregistrationPending)
                });
            }
            for r in &files.reserved {
                let row = attachment(&links, r, &Finding::Failed, r.mac, Vec::new());
                rows.push(row);
            }
            for t in files.temps {
                rows.push(debris(vm_name.as_str(), &Finding::TempFile(t)));
            }
            for t in files.torn {
                rows.push(debris(vm_name.as_str(), &Finding::Torn(t)));
            }
            for name in files.others {
                rows.push(debris(&format!("{vm_name}/{name}"), &Finding::NotOurs));
            }
            for u in files.unreadable {
                rows.push(Row {
                    vmi: u.vmi_uuid.to_string(),
                    ..debris(vm_name.as_str(), &Finding::Unreadable(u.why))
                });
            }
            let mut found = files.records;
            rows.extend(stray_registrations(&agent, conf, &vm_name, &found));
            records.append(&mut found);
        }
        for name in state.strays().map_err(Error::io("reading", dir))? {
            rows.push(debris(&name, &Finding::NotOurs));
        }
        for name in state
            .stale_locks(false)
            .map_err(Error::io("reading", dir))?
        {
            rows.push(debris(&name, &Finding::StaleLock));
        }
    }
    for r in &records {
        let (o, mac, addresses) = observe(&mut links, &agent, conf, r);
        rows.push(attachment(&links, r, &health(r, &o), mac, addresses));
    }
    for d in links.debris(&records) {
        let (host, finding) = match d {
            Debris::Link(name) => (name.clone(), Finding::OrphanHostLink(name)),
            Debris::VhostLink { name, path } => {
                (name, Finding::OrphanVhostLink(path.display().to_string()))
            }
            Debris::VhostDirLeft { path, held } => {
                (path.display().to_string(), Finding::VhostDirLeft(held))
            }
            Debris::VhostDirNamedByOthers { path, pods } => (
                path.display().to_string(),
                Finding::VhostDirNamedByOthers(pods),
            ),
        };
        rows.push(Row {
            host,
            ..debris("-", &finding)
        });
    }
    rows.extend(refused(conf));
    Ok(rows)
}

/// How far back `inspect` reads the log for refused attachments.
const REFUSALS_WITHIN: std::time::Duration = std::time::Duration::from_secs(3600);

/// The attachments the last hour's ADDs were refused for want of a VMI, which no success or DEL
/// followed: a refusal makes nothing, so only the node's log has them.
fn refused(conf: &Contrail) -> Vec<Row> {
    let Some(log) = &conf.log_file else {
        return Vec::new();
    };
    crate::ops::logging::refusals(log, crate::error::code::NO_VMI, REFUSALS_WITHIN)
        .into_iter()
        .map(|r| Row {
            sandbox: r.container.chars().take(12).collect(),
            ifname: r.ifname,
            network: r.network,
            ..debris(
                &r.pod,
                &Finding::NoVmi {
                    at: r.at,
                    // Its first sentence: the rest (the likely causes) is in the log.
                    why: r.why.split(". ").next().unwrap_or_default().to_string(),
                },
            )
        })
        .collect()
}

/// The pod's VMIs that the agent has registered although no state file explains them.
fn stray_registrations(
    agent: &Agent,
    conf: &Contrail,
    vm_name: &VmName,
    records: &[Record],
) -> Vec<Row> {
    let t = conf.poll_timeout;
    let Ok(Some(vmis)) = agent.pod_config(Class::Poll, vm_name, t) else {
        return Vec::new();
    };
    vmis.iter()
        .filter(|v| !records.iter().any(|r| r.vmi_uuid == v.uuid))
        .filter_map(|v| {
            let ip = agent
                .ip_config(Class::Poll, &v.vm_uuid, &v.uuid, t)
                .ok()??;
            let finding = Finding::RegisteredWithoutState(v.vm_uuid.to_string());
            Some(Row {
                vmi: v.uuid.to_string(),
                host: ip.registered_as?,
                ..debris(vm_name.as_str(), &finding)
            })
        })
        .collect()
}

impl Default for Row {
    fn default() -> Row {
        let dash = || "-".to_string();
        Row {
            pod: dash(),
            sandbox: dash(),
            ifname: dash(),
            network: dash(),
            vmi: dash(),
            host: dash(),
            vlan: None,
            mac: dash(),
            addresses: Vec::new(),
            health: dash(),
            fix: dash(),
            made_by: dash(),
        }
    }
}

/// A plain table: one header line, one line per row, columns as wide as their widest cell.
pub(crate) fn table(rows: &[Row]) -> String {
    let header = [
        "POD",
        "SANDBOX",
        "IFNAME",
        "NETWORK",
        "VMI",
        "HOST",
        "MAC",
        "ADDRESSES",
        "HEALTH",
        "FIX",
    ];
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            let addrs = if r.addresses.is_empty() {
                "-".to_string()
            } else {
                r.addresses.join(",")
            };
            let host = match r.vlan {
                Some(tag) => format!("{} (vlan {tag})", r.host),
                None => r.host.clone(),
            };
            [
                &r.pod, &r.sandbox, &r.ifname, &r.network, &r.vmi, &host, &r.mac, &addrs,
                &r.health, &r.fix,
            ]
            .map(|s| s.clone())
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cols: Vec<&str>| {
        let padded: Vec<String> = cols
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        cells
            .iter()
            .map(|row| line(row.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// The report, as a table or JSON.
pub fn run(opts: &Options) -> Result<String> {
    let conf = load(opts.config.as_deref())?;
    let rows = rows(&conf)?;
    Ok(if opts.json {
        serde_json::to_string_pretty(&rows).map_err(|e| Error::Io {
            what: "formatting the report as JSON",
            path: None,
            source: std::io::Error::other(e),
        })?
    } else {
        table(&rows)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        serde_json::from_value(serde_json::json!({"vm-id": "c", "vm-uuid": "40936d96-cf0e-11e8-9892-002590aaa964", "vm-name": "k8s__ns__p",
            "host-ifname": "tap000000000001", "vm-ifname": "net1", "vn-uuid": "f95af4cc-e4ba-44c8-9936-269d891e0ee9", "vmi-uuid": "b86ac068-cf0e-11e8-b196-002590000001"}))
        .unwrap()
    }

    fn seen(netns: bool, ifs: bool, agent: AgentView) -> Observed {
        Observed {
            netns_exists: netns,
            whole: ifs,
            pieces: "interface",
            agent,
            differs: None,
        }
    }

    #[test]
    fn health_names_the_first_problem() {
        let r = record();
        let ours = || AgentView::Registered("tap000000000001".into());
        let cases = [
            (seen(true, true, ours()), Finding::Ok),
            (
                seen(false, false, AgentView::NoIpConfig),
                Finding::StaleSandbox,
            ),
            (seen(true, false, ours()), Finding::Missing("interface")),
            (seen(true, true, AgentView::NoIpConfig), Finding::NoIpConfig),
            (
                seen(true, true, AgentView::Registered("tapother".into())),
                Finding::RegisteredAs("tapother".into()),
            ),
            (
                seen(true, true, AgentView::Unreachable),
                Finding::AgentUnreachable,
            ),
            (
                Observed {
                    differs: Some("interface net1 is down".into()),
                    ..seen(true, true, ours())
                },
                Finding::Differs("interface net1 is down".into()),
            ),
        ];
        for (observed, finding) in cases {
            assert_eq!(health(&r, &observed), finding, "{observed:?}");
        }
        assert_eq!(
            Finding::RegisteredAs("tapother".into()).health(),
            "agent has it as tapother"
        );
    }

    #[test]
    fn every_problem_says_what_to_do() {
        // Each finding's fix names the action (or who takes it), never an empty promise.
        let all = [
            (Finding::StaleSandbox, "GC or the sweep releases it"),
            (Finding::Missing("interface"), "delete the pod"),
            (Finding::NoIpConfig, "check the VMI and its IPAM"),
            (Finding::RegisteredAs("tapx".into()), "delete the pod"),
            (Finding::AgentUnreachable, "check the vRouter agent"),
            (Finding::Differs("x".into()), "delete the pod"),
            (Finding::EmptyPodDirectory, "or GC, removes it"),
            (
                Finding::DeregistrationPending,
                "retries it once the agent answers",
            ),
            (Finding::Failed, "retries the ADD"),
            (Finding::TempFile(".x.tmp".into()), "or GC, removes it"),
            (Finding::Torn("x".into()), "or GC, removes it"),
            (
                Finding::Unreadable("a FIFO".into()),
                "remove it if no pod needs it",
            ),
            (
                Finding::RegisteredWithoutState("u".into()),
                "DELETE /vm/u on the agent",
            ),
            (Finding::NotOurs, "remove it if nothing needs it"),
            (Finding::StaleLock, "GC removes it"),
            (Finding::OrphanHostLink("tapx".into()), "ip link del tapx"),
            (Finding::Missing("vhost-user link"), "delete the pod"),
            (
                Finding::OrphanVhostLink("/v/uvh_vif_tapx".into()),
                "rm /v/uvh_vif_tapx",
            ),
        ];
        for (f, words) in all {
            assert_ne!(f.health(), "ok", "{f:?}");
            assert!(f.fix().contains(words), "{f:?}: {}", f.fix());
        }
        assert_eq!(Finding::Ok.fix(), "-");
    }

    #[test]
    fn table_aligns_columns() {
        let rows = [Row {
            pod: "ns/p".into(),
            addresses: vec!["10.0.0.1/24".into(), "fd00::1/128".into()],
            health: "ok".into(),
            ..Row::default()
        }];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("POD   SANDBOX"), "{t}");
        assert!(lines[1].starts_with("ns/p  -"), "{t}");
        assert!(
            lines[1].contains("10.0.0.1/24,fd00::1/128")
                && lines[1].split_whitespace().rev().take(2).eq(["-", "ok"]),
            "{t}"
        );
    }
}
