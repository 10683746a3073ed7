//! Node-wide commands of CNI 1.1 (GC releases attachments whose sandbox is gone; STATUS says
//! whether ADD can work), and the sweep that does GC's work where no runtime asks for it.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::agent::Agent;
use crate::attach;
use crate::config::{Contrail, NetConf};
use crate::error::{Error, Result};
use crate::state::{Record, STATE_VERSION, StateDir};

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
    release_where(&conf.contrail, "GC", |r| {
        !live.contains(r.container_id.as_str())
    })
}

/// The sweep of `install --watch`, for the attachments no runtime will GC or DEL (Multus sends
/// GC to the cluster network only, and a DEL it lost never comes): releases, as GC does, those
/// whose sandbox is provably gone (its network namespace no longer exists) and whose claim is
/// older than `grace`. A live sandbox, or one whose namespace path proves nothing, is kept.
pub fn sweep(conf: &Contrail, grace: Duration) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    release_where(conf, "sweep", |r| {
        let age = r.time.parse::<f64>().map_or(0.0, |t| now - t);
        age >= grace.as_secs_f64() && netns_gone(&r.netns)
    })
}

/// Whether a network namespace is provably gone: its path no longer exists while the directory
/// that held it does (the runtime's `/run/netns`, mounted from the host). A `/proc/<pid>` path
/// proves nothing from another PID namespace, and a directory this process cannot see proves
/// nothing either.
fn netns_gone(path: &str) -> bool {
    let p = Path::new(path);
    if !p.is_absolute() || p.starts_with("/proc") {
        return false;
    }
    let parent_there = p.parent().is_some_and(Path::is_dir);
    parent_there
        && matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// Finishes every pending resync and removes what killed calls left, then releases the
/// attachments (of this version's state files) that `picked` picks, skipping any a call is
/// working on. Keeps going after errors and reports them at the end.
fn release_where(conf: &Contrail, who: &str, picked: impl Fn(&Record) -> bool) -> Result<()> {
    let dir = &conf.config_dir;
    let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? else {
        return Ok(());
    };
    let agent = Agent::new(conf);
    let (mut released, mut failed) = (0, Vec::new());
    for vm_name in state.pods().map_err(Error::io("reading", dir))? {
        // A pod a call is working on is skipped: this never waits for a slow call, and that
        // call, or the next pass, finishes what is pending.
        let locked = state
            .try_lock_pod(&vm_name)
            .map_err(Error::io("locking pod state in", &dir.join(&vm_name)));
        let pod = match locked {
            Ok(Some(pod)) => pod,
            Ok(None) => {
                log::info!("{who}: pod {vm_name} is busy with a call: skipped this time");
                continue;
            }
            Err(e) => {
                log::warn!("{who} of pod {vm_name}: {e}");
                failed.push(format!("{vm_name}: {e}"));
                continue;
            }
        };
        let result = attach::settle_pending(&agent, pod).and_then(|mut pod| {
            let (records, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
            let mut locks = Vec::new();
            let mut stale = Vec::new();
            for r in records {
                if r.state_version != STATE_VERSION || !picked(&r) {
                    continue;
                }
                // A call on the attachment is running: it is not stale, or that call ends it.
                let key = (
                    r.container_id.clone(),
                    attach::scope(conf.mode, &r.ifname)
                        .unwrap_or("")
                        .to_string(),
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
                    "{who}: releasing {} of sandbox {} in pod {vm_name}",
                    r.ifname,
                    r.container_id
                );
            }
            let dropped = attach::drop_attachments(&agent, &mut pod, &stale);
            attach::close(pod)?;
            for (_, lock) in locks {
                if let Err(e) = lock.remove() {
                    log::warn!("{who}: removing an attachment's lock: {e}");
                }
            }
            dropped.map(|()| stale.len())
        });
        match result {
            Ok(n) => released += n,
            Err(e) => {
                log::warn!("{who} of pod {vm_name}: {e}");
                failed.push(format!("{vm_name}: {e}"));
            }
        }
    }
    match state.sweep_locks() {
        Ok(swept) if !swept.is_empty() => log::info!("{who} removed stale locks {swept:?}"),
        Ok(_) => {}
        Err(e) => failed.push(format!("locks: {e}")),
    }
    log::info!("{who} released {released} attachment(s)");
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Io {
            what: format!("{who} released {released} attachment(s) but failed for"),
            source: std::io::Error::other(failed.join("; ")),
        })
    }
}

/// STATUS: ready when the agent answers.
pub fn status(conf: &NetConf) -> Result<()> {
    Agent::new(&conf.contrail).reachable()
}
