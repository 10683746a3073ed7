//! Node-wide commands of CNI 1.1: GC releases attachments whose sandbox is gone; STATUS says
//! whether ADD can work.

use std::collections::HashSet;
use std::fs;

use crate::agent::Agent;
use crate::attach::{self, io_err};
use crate::cni::{Error, Result, code};
use crate::config::NetConf;
use crate::state::STATE_VERSION;

/// GC: releases every attachment this plugin made whose container is not among the valid
/// attachments. A container that appears there with any interface is alive: Multus forwards GC
/// only to the cluster network, so the list names eth0 alone and the pod's other attachments
/// must survive it. State files this plugin did not write are left alone. Keeps going after
/// errors and reports them at the end.
pub fn gc(conf: &NetConf) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config(
            "cni.dev/valid-attachments",
            "GC needs the list of attachments still in use",
        )
    })?;
    let live: HashSet<&str> = valid.iter().map(|(c, _)| c.as_str()).collect();
    let dir = &conf.contrail.config_dir;
    let pods = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("reading", dir)(e)),
    };
    let agent = Agent::new(&conf.contrail);
    let nl = attach::netlink()?;
    let (mut released, mut failed) = (0, Vec::new());
    for pod in pods
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
    {
        let Some(vm_name) = pod.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let result = attach::open_pod(&agent, conf, &vm_name).and_then(|pod_dir| {
            let (records, _) = pod_dir
                .records()
                .map_err(io_err("reading", pod_dir.path()))?;
            let stale: Vec<_> = records
                .into_iter()
                .filter(|r| {
                    r.state_version == STATE_VERSION && !live.contains(r.container_id.as_str())
                })
                .collect();
            if stale.is_empty() {
                return attach::close(pod_dir).map(|()| 0);
            }
            for r in &stale {
                log::info!(
                    "GC: releasing {} of sandbox {} in pod {vm_name}",
                    r.ifname,
                    r.container_id
                );
                attach::teardown(&nl, &r.host_ifname)?;
            }
            attach::release(&agent, &pod_dir, &stale)?;
            attach::close(pod_dir).map(|()| stale.len())
        });
        match result {
            Ok(n) => released += n,
            Err(e) => {
                log::warn!("GC of pod {vm_name}: {e}");
                failed.push(format!("{vm_name}: {}", e.msg));
            }
        }
    }
    log::info!("GC released {released} attachment(s)");
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            code::IO,
            format!(
                "GC released {released} attachment(s) but failed for {}",
                failed.join("; ")
            ),
        ))
    }
}

/// STATUS: ready when the agent answers.
pub fn status(conf: &NetConf) -> Result<()> {
    Agent::new(&conf.contrail).reachable()
}
