//! Node-wide commands of CNI 1.1: GC releases attachments whose sandbox is gone; STATUS says
//! whether ADD can work.

use std::collections::HashSet;
use std::fs;

use crate::agent::Agent;
use crate::attach;
use crate::config::NetConf;
use crate::error::{Error, Result};
use crate::state::STATE_VERSION;

/// GC: finishes every pending resync, then releases every attachment this plugin made whose
/// container is not among the valid attachments. A container that appears there with any
/// interface is alive: Multus forwards GC only to the cluster network, so the list names eth0
/// alone and the pod's other attachments must survive it. State files this plugin did not
/// write are left alone. Keeps going after errors and reports them at the end.
pub fn gc(conf: &NetConf) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config(
            "cni.dev/valid-attachments",
            "GC needs the list of attachments still in use",
        )
    })?;
    let live: HashSet<&str> = valid.iter().map(|a| a.container_id.as_str()).collect();
    let dir = &conf.contrail.config_dir;
    let pods = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", dir)(e)),
    };
    let agent = Agent::new(&conf.contrail);
    let (mut released, mut failed) = (0, Vec::new());
    for pod in pods
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
    {
        let Some(vm_name) = pod.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let result = attach::open_pod(&agent, conf, &vm_name).and_then(|pod| {
            let (records, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
            let stale: Vec<_> = records
                .into_iter()
                .filter(|r| {
                    r.state_version == STATE_VERSION && !live.contains(r.container_id.as_str())
                })
                .collect();
            for r in &stale {
                log::info!(
                    "GC: releasing {} of sandbox {} in pod {vm_name}",
                    r.ifname,
                    r.container_id
                );
            }
            let dropped = attach::drop_attachments(&agent, &pod, &stale);
            attach::close(pod)?;
            dropped.map(|()| stale.len())
        });
        match result {
            Ok(n) => released += n,
            Err(e) => {
                log::warn!("GC of pod {vm_name}: {e}");
                failed.push(format!("{vm_name}: {e}"));
            }
        }
    }
    log::info!("GC released {released} attachment(s)");
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Io {
            what: format!("GC released {released} attachment(s) but failed for"),
            source: std::io::Error::other(failed.join("; ")),
        })
    }
}

/// STATUS: ready when the agent answers.
pub fn status(conf: &NetConf) -> Result<()> {
    Agent::new(&conf.contrail).reachable()
}
