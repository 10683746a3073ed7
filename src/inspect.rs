//! `contrail-k8s-cni inspect`: this node's attachments from the state directory, joined with
//! what the pods' namespaces, the host and the agent show, with a health verdict for each.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::agent::Agent;
use crate::config::{self, NetConf};
use crate::error::{Error, Result};
use crate::netlink::{Netns, Socket};
use crate::state::{self, Record};
use crate::vmi::Mac;

/// Show this node's attachments, joined with the pods' namespaces, the host and the agent.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The node-wide config (default: the first *contrail.conf in /etc/cni/net.d, or in
    /// $CONTRAIL_CNI_CONF_DIR).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print JSON for tools instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub pod: String,
    pub sandbox: String,
    pub ifname: String,
    pub network: String,
    pub vmi: String,
    pub host: String,
    pub mac: String,
    pub addresses: Vec<String>,
    pub health: String,
}

/// What the agent says of a VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentView {
    Registered(String),
    /// 404: not registered, or registered without IPAM; either way no IP configuration.
    NoIpConfig,
    Unreachable,
}

/// What was observed for one record; [`health`] turns it into a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub netns_exists: bool,
    pub container_if: bool,
    pub host_if: bool,
    pub agent: AgentView,
}

/// The most important problem first: a sandbox that is gone explains everything after it.
pub fn health(record: &Record, o: &Observed) -> String {
    match (o.netns_exists, o.container_if && o.host_if, &o.agent) {
        (false, _, _) => "stale sandbox".into(),
        (_, false, _) => "interface missing".into(),
        (_, _, AgentView::NoIpConfig) => "agent has no IP configuration for it".into(),
        (_, _, AgentView::Registered(h)) if *h != record.host_ifname => {
            format!("agent has it as {h}")
        }
        (_, _, AgentView::Unreachable) => "agent unreachable".into(),
        _ => "ok".into(),
    }
}

fn load(config: Option<&Path>) -> Result<NetConf> {
    let node = match config {
        Some(path) => {
            let text = std::fs::read(path).map_err(Error::io("reading", path))?;
            let v = serde_json::from_slice(&text)
                .map_err(|e| Error::config(path.display(), format!("not valid JSON: {e}")))?;
            Some((path.to_path_buf(), v))
        }
        None => {
            let dir = std::env::var_os(config::NODE_CONF_DIR_ENV).map_or_else(
                || PathBuf::from(config::DEFAULT_NODE_CONF_DIR),
                PathBuf::from,
            );
            config::load_node_defaults(&dir)?
        }
    };
    config::parse(
        br#"{"cniVersion":"1.0.0"}"#,
        node.as_ref().map(|(p, v)| (p.as_path(), v)),
    )
}

/// Looks at one record in its netns, on the host and in the agent.
fn observe(
    host: &mut Socket,
    agent: &Agent,
    conf: &NetConf,
    r: &Record,
) -> (Observed, String, Vec<String>) {
    let host_if = host.link(&r.host_ifname).ok().flatten().is_some();
    let netns = Netns::open(Path::new(&r.netns)).ok();
    let link = netns.as_ref().and_then(|ns| {
        let mut sock = Socket::open(ns).ok()?;
        let link = sock.link(&r.ifname).ok()??;
        let addrs = sock.addrs(link.index).unwrap_or_default();
        Some((link, addrs))
    });
    let agent_view = match agent.ip_config(&r.vm_uuid, &r.vmi_uuid, conf.contrail.poll_timeout) {
        Ok(Some(ip)) => ip
            .registered_as
            .map_or(AgentView::NoIpConfig, AgentView::Registered),
        Ok(None) => AgentView::NoIpConfig,
        Err(_) => AgentView::Unreachable,
    };
    let (mac, addrs) = match &link {
        Some((l, a)) => (
            l.mac.map(|m| Mac(m).to_string()).unwrap_or_default(),
            a.iter()
                .filter(|n| !n.ip().is_loopback() && !is_link_local(n))
                .map(|n| n.to_string())
                .collect(),
        ),
        None => (r.mac.clone(), Vec::new()),
    };
    let o = Observed {
        netns_exists: netns.is_some(),
        container_if: link.is_some(),
        host_if,
        agent: agent_view,
    };
    (o, mac, addrs)
}

fn is_link_local(n: &ipnetwork::IpNetwork) -> bool {
    matches!(n.ip(), std::net::IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80)
}

/// Host links named as this plugin names them (`tap` + 12 hex) that no record explains.
fn orphans(records: &[Record]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.len() == 15 && n.starts_with("tap") && n[3..].bytes().all(|b| b.is_ascii_hexdigit())
        })
        .filter(|n| !records.iter().any(|r| &r.host_ifname == n))
        .collect();
    names.sort();
    names
}

pub fn rows(conf: &NetConf) -> Result<Vec<Row>> {
    let dir = &conf.contrail.config_dir;
    let mut records = Vec::new();
    let mut rows = Vec::new();
    for pod in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (mut found, bad) =
            state::read_records(&pod.path()).map_err(Error::io("reading", &pod.path()))?;
        if state::resync_pending(&pod.path()).is_some() {
            rows.push(Row {
                pod: pod.file_name().to_string_lossy().into_owned(),
                health: "deregistration pending".into(),
                ..Row::default()
            });
        }
        for u in bad {
            rows.push(Row {
                pod: pod.file_name().to_string_lossy().into_owned(),
                vmi: u.vmi_uuid,
                health: format!("unreadable state file: {}", u.why),
                ..Row::default()
            });
        }
        records.append(&mut found);
    }
    let mut host = Socket::host()?;
    let agent = Agent::new(&conf.contrail);
    for r in &records {
        let (o, mac, addresses) = observe(&mut host, &agent, conf, r);
        rows.push(Row {
            pod: r.vm_name.split("__").skip(1).collect::<Vec<_>>().join("/"),
            sandbox: r.container_id.chars().take(12).collect(),
            ifname: r.ifname.clone(),
            network: r.network.clone(),
            vmi: r.vmi_uuid.clone(),
            host: r.host_ifname.clone(),
            mac,
            addresses,
            health: health(r, &o),
        });
    }
    for host in orphans(&records) {
        rows.push(Row {
            host,
            health: "orphan host link".into(),
            ..Row::default()
        });
    }
    Ok(rows)
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
            mac: dash(),
            addresses: Vec::new(),
            health: dash(),
        }
    }
}

/// A plain table: one header line, one line per row, columns as wide as their widest cell.
pub fn table(rows: &[Row]) -> String {
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
    ];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let addrs = if r.addresses.is_empty() {
                "-".to_string()
            } else {
                r.addresses.join(",")
            };
            [
                &r.pod, &r.sandbox, &r.ifname, &r.network, &r.vmi, &r.host, &r.mac, &addrs,
                &r.health,
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
        serde_json::to_string_pretty(&rows).map_err(|e| Error::Internal(e.to_string()))?
    } else {
        table(&rows)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        serde_json::from_value(serde_json::json!({"vm-id": "c", "vm-uuid": "u", "vm-name": "k8s__ns__p",
            "host-ifname": "tap000000000001", "vm-ifname": "net1", "vn-uuid": "v", "vmi-uuid": "i"}))
        .unwrap()
    }

    fn seen(netns: bool, ifs: bool, agent: AgentView) -> Observed {
        Observed {
            netns_exists: netns,
            container_if: ifs,
            host_if: ifs,
            agent,
        }
    }

    #[test]
    fn health_names_the_first_problem() {
        let r = record();
        let ours = || AgentView::Registered("tap000000000001".into());
        assert_eq!(health(&r, &seen(true, true, ours())), "ok");
        assert_eq!(
            health(&r, &seen(false, false, AgentView::NoIpConfig)),
            "stale sandbox"
        );
        assert_eq!(health(&r, &seen(true, false, ours())), "interface missing");
        assert_eq!(
            health(&r, &seen(true, true, AgentView::NoIpConfig)),
            "agent has no IP configuration for it"
        );
        assert_eq!(
            health(
                &r,
                &seen(true, true, AgentView::Registered("tapother".into()))
            ),
            "agent has it as tapother"
        );
        assert_eq!(
            health(&r, &seen(true, true, AgentView::Unreachable)),
            "agent unreachable"
        );
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
            lines[1].contains("10.0.0.1/24,fd00::1/128") && lines[1].ends_with("ok"),
            "{t}"
        );
    }
}
