//! Node-wide commands of CNI 1.1: GC releases attachments whose sandbox is gone; STATUS says
//! whether ADD can work.

use std::collections::HashSet;

use crate::agent::Agent;
use crate::attach;
use crate::config::NetConf;
use crate::error::{Error, Result};
use crate::state::{STATE_VERSION, StateDir};

/// GC: finishes every pending resync and removes what killed calls left (temp files, empty
/// pod directories, lock files), then releases every attachment this plugin made whose
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
    let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? else {
        return Ok(());
    };
    let agent = Agent::new(&conf.contrail);
    let (mut released, mut failed) = (0, Vec::new());
    for vm_name in state.pods().map_err(Error::io("reading", dir))? {
        let result = attach::open_pod(&agent, &state, &vm_name).and_then(|mut pod| {
            let (records, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
            let mut locks = Vec::new();
            let mut stale = Vec::new();
            for r in records {
                if r.state_version != STATE_VERSION || live.contains(r.container_id.as_str()) {
                    continue;
                }
                // A call on the attachment is running: it is not stale, or that call ends it.
                let key = (
                    r.container_id.clone(),
                    attach::scope(conf, &r.ifname).unwrap_or("").to_string(),
                );
                if !locks.iter().any(|(k, _)| *k == key) {
                    let lock = state
                        .try_lock_attachment(&vm_name, &key.0, &key.1)
                        .map_err(Error::io("locking an attachment in", dir))?;
                    let Some(lock) = lock else { continue };
                    locks.push((key, lock));
                }
                stale.push(r);
            }
            for r in &stale {
                log::info!(
                    "GC: releasing {} of sandbox {} in pod {vm_name}",
                    r.ifname,
                    r.container_id
                );
            }
            let dropped = attach::drop_attachments(&agent, &mut pod, &stale);
            attach::close(pod)?;
            for (_, lock) in locks {
                if let Err(e) = lock.remove() {
                    log::warn!("GC: removing an attachment's lock: {e}");
                }
            }
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
    match state.sweep_locks() {
        Ok(swept) if !swept.is_empty() => log::info!("GC removed stale locks {swept:?}"),
        Ok(_) => {}
        Err(e) => failed.push(format!("locks: {e}")),
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
