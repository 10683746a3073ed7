//! DEL: the call's attachments (the one on CNI_IFNAME; every one of its network on a CNI-Genie
//! node; the sandbox's in thick mode), their interfaces, files and registrations, and their
//! reservations. Nothing recorded for them (a repeated DEL, an older sandbox's late DEL, a netns
//! already gone) is success, and an attachment of another network is never theirs.

use crate::agent::Agent;
use crate::commands::call::{Acted, Call, Scope};
use crate::error::{Error, Result};
use crate::ids::{IfName, VmName};
use crate::kernel::links::{Kinds, Links};
use crate::state::ledger;
use crate::state::{Lock, PodDir, PodFiles, Record, StateDir};
use crate::text::Shown;

/// DEL. An ADD of the same attachment still running (its runtime gave up on it) is first asked
/// to stop, then waited for: it may be killed before its rollback, and what it built is then
/// this DEL's to remove.
pub fn del(call: &Call) -> Acted<()> {
    let (state, vm_name, locks) = match locked(call) {
        Ok(Some(found)) => found,
        other => return other.map(drop).into(),
    };
    let held: Vec<Option<&IfName>> = locks.iter().map(|(ifname, _)| ifname.as_ref()).collect();
    let removed = remove(call, &state, &vm_name, &held);
    // The requests to stop are answered; the locks' files go when `locks` is dropped.
    for (_, lock) in &locks {
        if let Err(e) = lock.clear_stop() {
            log::warn!("withdrawing the request to stop: {e}");
        }
    }
    removed
}

/// The attachment locks a DEL holds, each with its interface (`None`: the whole sandbox's).
type Locks = Vec<(Option<IfName>, Lock)>;

/// The state directory, the pod and the locks of the call's attachments; `None` when nothing
/// is recorded.
fn locked(call: &Call) -> Result<Option<(StateDir, VmName, Locks)>> {
    let Some((state, vm_name)) = call.locate()? else {
        return Ok(None);
    };
    let mut locks = Vec::new();
    for ifname in lock_keys(call, &state, &vm_name)? {
        let lock = lock_stopping_an_add(call, &state, &vm_name, ifname.as_ref())?;
        locks.push((ifname, lock));
    }
    Ok(Some((state, vm_name, locks)))
}

/// Which attachment locks the call takes: its interface's, the sandbox's (thick mode), or, for
/// every attachment of its network (CNI-Genie), each one's interface, as the pod's files name
/// them now (read unlocked: what appears later is not this DEL's).
fn lock_keys(call: &Call, state: &StateDir, vm_name: &VmName) -> Result<Vec<Option<IfName>>> {
    match call.scope() {
        Scope::Interface(ifname) => Ok(vec![Some(ifname.clone())]),
        Scope::Sandbox => Ok(vec![None]),
        Scope::Network => {
            let reading = || Error::io("reading", state.path());
            if !state.has_pod(vm_name).map_err(reading())? {
                return Ok(Vec::new());
            }
            let files = state.read_pod(vm_name).map_err(reading())?;
            let mut ifnames: Vec<Option<IfName>> = Vec::new();
            for r in files.records.iter().chain(&files.reserved) {
                let key = Some(r.ifname.clone());
                if call.covers(r) && !ifnames.contains(&key) {
                    ifnames.push(key);
                }
            }
            Ok(ifnames)
        }
    }
}

/// The lock of the attachment on `ifname`; when an ADD holds it, that ADD is asked to stop
/// first.
fn lock_stopping_an_add(
    call: &Call,
    state: &StateDir,
    vm_name: &VmName,
    ifname: Option<&IfName>,
) -> Result<Lock> {
    let (cid, key) = (call.container_id, ifname.map_or("", IfName::as_str));
    let locking = || Error::io("locking the attachment in", state.path());
    match state
        .try_lock_attachment(vm_name, cid, key)
        .map_err(locking())?
    {
        Some(lock) => Ok(lock),
        None => {
            log::info!("an ADD of this attachment is running: asking it to stop");
            state
                .stop_attachment(vm_name, cid, key)
                .map_err(locking())?;
            call.lock_on(state, vm_name, ifname)
        }
    }
}

/// DEL under the attachments' locks (`held`): what the call covers among them.
fn remove(call: &Call, state: &StateDir, vm_name: &VmName, held: &[Option<&IfName>]) -> Acted<()> {
    let contrail = &call.conf.contrail;
    let agent = Agent::new(contrail, call.started);
    let kinds = Kinds::new(contrail);
    let (mut pod, files) = match opened(&agent, &kinds, state, vm_name) {
        Ok(Some(opened)) => opened,
        other => return other.map(drop).into(),
    };
    if let Scope::Interface(ifname) = call.scope() {
        note_what_is_left(call, ifname, &files);
    }
    let mut ours = call.ours(files);
    let locked = |r: &Record| held.iter().any(|h| h.is_none_or(|i| *i == r.ifname));
    ours.records.retain(locked);
    ours.reserved.retain(locked);
    let result = Links::new(kinds, agent.deadline()).and_then(|mut links| {
        let removed = ledger::remove(&agent, &mut links, &mut pod, &ours.records, &ours.reserved);
        ledger::close(pod)?;
        removed
    });
    Acted::on(ours.vmis(), result)
}

/// What a DEL of `ifname` leaves of the sandbox, for the node's log: an attachment of another
/// network on that interface (never this DEL's), and, when none of its network is there, the
/// network's attachments on other interfaces (a caller that DELs with another CNI_IFNAME than
/// its ADD's: CNI-Genie).
fn note_what_is_left(call: &Call, ifname: &IfName, files: &PodFiles) {
    let sandbox = |r: &&Record| r.container_id == *call.container_id;
    let all = || files.records.iter().chain(&files.reserved).filter(sandbox);
    let network = Shown(&call.conf.network);
    for r in all().filter(|r| r.ifname == *ifname && !call.covers(r)) {
        log::warn!(
            "DEL of network {network} on {ifname}: {ifname} holds network {}'s attachment \
             (VMI {}), which is left alone",
            Shown(&r.network),
            r.vmi_uuid
        );
    }
    if all().any(|r| call.covers(r)) {
        return;
    }
    let elsewhere: Vec<&str> = all()
        .filter(|r| !r.network.is_empty() && call.conf.read_network() == Some(&r.network))
        .map(|r| r.ifname.as_str())
        .collect();
    if !elsewhere.is_empty() {
        log::warn!(
            "DEL of network {network} on {ifname} found no attachment there; the sandbox has \
             that network's on {}: a caller that DELs with another CNI_IFNAME than its ADD's \
             (CNI-Genie) needs \"meta-plugin\": \"genie\" in the node-wide file; until then they \
             go with a DEL that names them, GC or the sweep",
            elsewhere.join(", ")
        );
    }
}

/// The pod's directory, locked and settled; `None` when the pod has none.
fn opened(
    agent: &Agent,
    kinds: &Kinds,
    state: &StateDir,
    vm_name: &VmName,
) -> Result<Option<(PodDir, PodFiles)>> {
    if !state
        .has_pod(vm_name)
        .map_err(Error::io("reading", state.path()))?
    {
        // Nothing to delete; a lock file a killed call left goes (best effort: the DEL succeeds).
        if let Err(e) = state.drop_stale_pod_lock(vm_name) {
            log::warn!("pod {vm_name}: removing its stale lock: {e}");
        }
        return Ok(None);
    }
    ledger::open(agent, kinds, state, vm_name).map(Some)
}
