//! Node-wide commands of CNI 1.1 (GC releases attachments whose sandbox is gone; STATUS says
//! whether ADD can work), and the sweep that does GC's work where no runtime asks for it.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::agent::Agent;
use crate::commands::call::lock_scope;
use crate::config::{Contrail, NetConf};
use crate::error::{During, Error, Result};
use crate::ids::{IfName, VmName};
use crate::kernel::links::{Kinds, Links};
use crate::state::ledger;
use crate::state::{Record, StateDir, sandbox_gone};

/// GC: finishes what is pending and removes what killed calls left (temp files, empty pod
/// directories, lock files), then releases every attachment (and reservation) whose container
/// is not among the valid attachments and whose sandbox is provably gone
/// ([`sandbox_gone`]).
/// The list alone is not proof: a runtime sends GC to each network config it loads with the
/// attachments of the pods that use that config directly (CRI-O's ocicni), so a Contrail
/// config beside Multus's gets an empty list while every pod of the node is attached through
/// Multus. A container that appears there with any interface is alive: Multus forwards GC only
/// to the cluster network, so the list names eth0 alone and the pod's other attachments must
/// survive it. So no list (cnitool 1.3's `gc` sends none) is no list of live sandboxes either:
/// what is provably gone goes. The OpenSDN Go plugin's attachments are released as this
/// plugin's are. Keeps going after errors and reports them at the end.
pub fn gc(conf: &NetConf, started: Instant) -> Result<()> {
    let valid = &conf.valid_attachments;
    let live: HashSet<&str> = valid.iter().map(|a| a.container_id.as_str()).collect();
    let boot = crate::state::files::boot_id();
    release_where(&conf.contrail, "GC", started, |r| {
        !live.contains(r.container_id.as_str()) && sandbox_gone(r, &boot)
    })
}

/// The sweep of `install --watch`, for the attachments no runtime will GC or DEL (Multus sends
/// GC to the cluster network only, and a DEL it lost never comes): releases, as GC does, those
/// whose sandbox is provably gone ([`sandbox_gone`]) and whose claim is older than `grace`. A
/// live sandbox, or one whose namespace path proves nothing, is kept.
pub fn sweep(conf: &Contrail, grace: Duration) -> Result<()> {
    let now = Claimed {
        boot: crate::state::files::boot_id(),
        uptime: crate::state::files::uptime(),
        wall: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    };
    release_where(conf, "sweep", Instant::now(), |r| {
        sandbox_gone(r, &now.boot) && now.older(r, grace)
    })
}

/// Now, as a claim's age is measured.
struct Claimed {
    boot: String,
    uptime: Duration,
    wall: Duration,
}

impl Claimed {
    /// Whether record `r` was claimed more than `grace` ago. Measured on CLOCK_BOOTTIME, which
    /// no clock step moves, when the claim was made in this boot; a claim of an earlier boot is
    /// old (every sandbox of that boot is gone). A record without those times (0.1's) has only
    /// its wall-clock time: one in the future (a clock stepped back since) counts as old too;
    /// the OpenSDN Go plugin's (its time is Go's text, no number) counts as old: it was written
    /// before this plugin was installed.
    fn older(&self, r: &Record, grace: Duration) -> bool {
        if !r.claimed_boot.is_empty() && r.claimed_boot != self.boot {
            return true;
        }
        if let Ok(ms) = r.claimed_uptime_ms.parse::<u64>() {
            return self.uptime.saturating_sub(Duration::from_millis(ms)) >= grace;
        }
        let at = r.time.parse::<f64>().unwrap_or(0.0);
        let age = self.wall.as_secs_f64() - at;
        age < 0.0 || age >= grace.as_secs_f64()
    }
}

/// Finishes what is pending in every pod and removes what killed calls left, then releases the
/// attachments and reservations that `picked` picks (this plugin's and the OpenSDN Go
/// plugin's), skipping any a call is working on. Keeps going after errors and reports them all
/// at the end.
fn release_where(
    conf: &Contrail,
    who: &str,
    started: Instant,
    picked: impl Fn(&Record) -> bool,
) -> Result<()> {
    let dir = &conf.config_dir;
    let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? else {
        return Ok(());
    };
    let agent = Agent::new(conf, started);
    let mut links = Links::new(Kinds::new(conf), agent.deadline())?;
    let (mut released, mut failed) = (0, Vec::new());
    for vm_name in state.pods().map_err(Error::io("reading", dir))? {
        let result = release_in(conf, who, &picked, &agent, &mut links, &state, &vm_name);
        match result {
            Ok(n) => released += n,
            Err(e) => {
                log::warn!("{who} of pod {vm_name}: {e}");
                failed.push(Error::Pod {
                    vm_name,
                    source: Box::new(e),
                });
            }
        }
    }
    match state.sweep_locks() {
        Ok(swept) if !swept.is_empty() => log::info!("{who} removed stale locks {swept:?}"),
        Ok(_) => {}
        Err(e) => failed.push(Error::io("sweeping locks in", dir)(e)),
    }
    log::info!("{who} released {released} attachment(s)");
    Error::several(failed, During::NodeWide)
}

/// [`release_where`] in one pod: how many attachments it released.
fn release_in(
    conf: &Contrail,
    who: &str,
    picked: &impl Fn(&Record) -> bool,
    agent: &Agent,
    links: &mut Links,
    state: &StateDir,
    vm_name: &VmName,
) -> Result<usize> {
    // A pod a call is working on is skipped: this never waits for a slow call, and that call,
    // or the next pass, finishes what is pending.
    let Some((mut pod, files)) = ledger::try_open(agent, links.kinds(), state, vm_name)? else {
        log::info!("{who}: pod {vm_name} is busy with a call: skipped this time");
        return Ok(0);
    };
    let mut locks = Vec::new();
    let (mut records, mut reserved) = (Vec::new(), Vec::new());
    let candidates = files
        .records
        .into_iter()
        .map(|r| (r, false))
        .chain(files.reserved.into_iter().map(|r| (r, true)));
    for (r, is_reserved) in candidates {
        if !picked(&r) {
            continue;
        }
        // A call on the attachment is running: it is not stale, or that call ends it.
        let key = (
            r.container_id.clone(),
            lock_scope(conf.mode, &r.ifname)
                .map_or("", IfName::as_str)
                .to_string(),
        );
        if !locks.iter().any(|(k, _)| *k == key) {
            let lock = state
                .try_lock_attachment(vm_name, &key.0, &key.1)
                .map_err(Error::io("locking an attachment in", state.path()))?;
            let Some(lock) = lock else { continue };
            locks.push((key, lock));
        }
        log::info!(
            "{who}: releasing {} of sandbox {} in pod {vm_name}",
            r.ifname,
            r.container_id
        );
        if is_reserved {
            reserved.push(r);
        } else {
            records.push(r);
        }
    }
    let removed = ledger::remove(agent, links, &mut pod, &records, &reserved);
    ledger::close(pod)?;
    // The attachments' locks go with `locks`.
    drop(locks);
    removed.map(|()| records.len() + reserved.len())
}

/// STATUS: ready when the agent answers.
pub fn status(conf: &NetConf, started: Instant) -> Result<()> {
    Agent::new(&conf.contrail, started).reachable()
}
