//! ADD: the attachments of one call (plugin mode: the one CNI_IFNAME names; thick mode: every
//! VMI of the pod), in the agent's order: the pod's VMIs, the claims, the interfaces, the
//! registrations (`POST /vm`), the IP configurations (which the agent has only for a registered
//! port), the addresses and routes. A failure undoes what the call made
//! ([`ledger::undo`]); its claims stay the attachments' (reservations), so that a retry gets
//! the same VMIs and no sibling takes them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::agent::Agent;
use crate::cni::pod::Pod;
use crate::cni::{BadEnv, Env, EnvProblem, Outcome};
use crate::commands::call::{Acted, Call, open_netns};
use crate::config::{Mode, NetConf};
use crate::crash::{self, Step};
use crate::error::{Conflict, During, Error, Result};
use crate::ids::{ContainerId, IfName, VmName, VmiUuid};
use crate::kernel::interface::{self, Spec};
use crate::kernel::links::{self, Intent, Kinds, Links};
use crate::kernel::netlink::{Netns, Socket};
use crate::state::ledger::{self, Linked, Recorded, Registered};
use crate::state::{Lock, PodDir, PodFiles, Record, Route, STATE_VERSION, StateDir};
use crate::text::Shown;
use crate::vmi::{self, Attachment, Unresolved, Vmi, Wanted};

/// ADD: sets up the call's attachments and returns the result of the first (thick mode's
/// runtime knows no other).
pub fn add(call: &Call) -> Acted<Outcome> {
    match start(call) {
        Ok((mut add, pod)) => add.run(pod),
        Err(e) => Err(e).into(),
    }
}

/// What the ADD needs before it asks the agent anything: the pod, the node ready for the
/// attachment's kind, the netns, the state directory, the attachment's lock.
fn start<'a>(call: &Call<'a>) -> Result<(Add<'a>, &'a Pod)> {
    let pod = call
        .pod
        .ok_or_else(|| BadEnv::new("CNI_ARGS", EnvProblem::NoPodName))?;
    warn_about_requests(call.conf, call.env);
    // What the attachment's kind needs of the node is checked before anything (a vhost-user
    // attachment where it cannot work: code 7; nested mode's parent interface).
    let mut links = Links::new(Kinds::new(&call.conf.contrail), call.deadline())?;
    links.ready(&Intent {
        conf: call.conf,
        env: call.env,
        container_id: call.container_id,
        ifname: call.interface,
    })?;
    let netns = open_netns(&call.env.netns)?;
    let contrail = &call.conf.contrail;
    let dir = &contrail.config_dir;
    let state = StateDir::open(dir).map_err(Error::io("opening", dir))?;
    let vm_name = pod.vm_name(&contrail.cluster_name)?;
    // Held for the whole call: a duplicate ADD waits for this one, a DEL asks it to stop. Its
    // file goes when it is dropped, on every return path.
    let lock = call.lock(&state, &vm_name)?;
    if let Err(e) = lock.clear_stop() {
        log::warn!("clearing a stale request to stop: {e}");
    }
    let stop = lock
        .stop_probe()
        .map_err(Error::io("locking the attachment in", state.path()))?;
    let add = Add {
        env: call.env,
        container_id: call.container_id,
        interface: call.interface,
        conf: call.conf,
        agent: Agent::new(contrail, call.started).stop_when(move || stop.requested()),
        links,
        ctr: Socket::open(&netns)?,
        netns,
        state,
        vm_name,
        _lock: lock,
    };
    Ok((add, pod))
}

/// What every step of one ADD works with.
struct Add<'a> {
    env: &'a Env,
    container_id: &'a ContainerId,
    interface: &'a IfName,
    conf: &'a NetConf,
    agent: Agent,
    links: Links,
    ctr: Socket,
    netns: Netns,
    state: StateDir,
    vm_name: VmName,
    /// The attachment's lock, held for the whole call (dropped last: the fields drop in this
    /// order): a duplicate ADD waits for this one, a DEL asks it to stop.
    _lock: Lock,
}

/// The claims an ADD recorded.
struct Claimed {
    records: Vec<Recorded>,
    /// What each record replaced: this attachment's own record, when a retried ADD rewrote it
    /// (the attachment was there before the call, registered), which a rollback puts back.
    prior: Vec<Option<Record>>,
    /// Whether one was an older sandbox's, which may have registered it.
    took_over: bool,
}

/// What an ADD made so far, for its undo.
#[derive(Default)]
struct Made {
    links: Vec<Linked>,
    /// Registration was tried (the agent may have taken it even when the answer was lost).
    registered: bool,
}

impl Add<'_> {
    fn run(&mut self, pod: &Pod) -> Acted<Outcome> {
        let claimed = self.agent.wait_for_pod(pod, &self.vm_name);
        let claimed = match claimed.and_then(|vmis| self.claim(&vmis)) {
            Ok(claimed) => claimed,
            Err(e) => return Err(e).into(),
        };
        crash::point(Step::Claimed);
        let vmis = claimed.records.iter().map(|r| r.vmi_uuid.clone()).collect();
        let mut made = Made::default();
        let result = self
            .attach(&claimed.records, &mut made)
            .map_err(|e| self.undo(&claimed, &made, e));
        Acted::on(vmis, result)
    }

    /// Chooses and records the claims under the pod's lock, so that concurrent ADDs of one pod
    /// never take the same VMI, and a crash after this point leaves records a DEL acts on.
    fn claim(&mut self, vmis: &[Vmi]) -> Result<Claimed> {
        let (mut pod, files) =
            ledger::open(&self.agent, self.links.kinds(), &self.state, &self.vm_name)?;
        let claimed = self.record_claims(&mut pod, &files, vmis);
        ledger::close(pod)?;
        claimed
    }

    fn record_claims(
        &mut self,
        pod: &mut PodDir,
        files: &PodFiles,
        vmis: &[Vmi],
    ) -> Result<Claimed> {
        for u in &files.unreadable {
            log::warn!(
                "leaving unreadable state file {} alone: {}",
                u.path.display(),
                u.why
            );
        }
        let wanted = self.choose(vmis, files)?;
        let cid = self.container_id;
        let prior: Vec<Option<Record>> = wanted
            .iter()
            .map(|w| {
                let own = |h: &&Record| h.vmi_uuid == w.vmi.uuid && h.is(cid, &w.ifname);
                files.records.iter().find(own).cloned()
            })
            .collect();
        // A retried or interrupted ADD's attachment may have its interface already: it is
        // replaced, but only when the link of that name in the pod is that interface, not
        // something a pod put there meanwhile. Any other name (a new claim, a reservation) must
        // be free in the pod. Both before anything changes.
        for old in prior.iter().flatten() {
            if self.links.in_the_way(&mut self.ctr, old)? {
                return Err(Error::Interface(Conflict::NameTaken {
                    name: old.ifname.clone(),
                    netns: self.env.netns.clone(),
                }));
            }
        }
        let new_names: Vec<&IfName> = wanted
            .iter()
            .zip(&prior)
            .filter(|(_, old)| old.is_none())
            .map(|(w, _)| &w.ifname)
            .collect();
        links::check_free(&mut self.ctr, &self.netns, &new_names)?;
        let mut claimed = Claimed {
            records: Vec::new(),
            prior,
            took_over: false,
        };
        // The older sandboxes' attachments taken over, released as DEL, GC and the sweep would
        // (their links, whatever a new one of the same name would replace, and their pieces
        // outside the state: a vhost-user attachment's device-info file), once their files are
        // this call's claims.
        let mut displaced = Vec::new();
        let mut records = Vec::with_capacity(wanted.len());
        for w in &wanted {
            let older = files.records.iter().chain(&files.reserved);
            if let Some(old) = older
                .filter(|h| h.vmi_uuid == w.vmi.uuid)
                .find(|h| h.container_id != *cid)
            {
                claimed.took_over |= files.records.contains(old);
                log::info!(
                    "VMI {} was held by older sandbox {} as {}{}: taking it over",
                    w.vmi.uuid,
                    old.container_id,
                    old.ifname,
                    if old.is_legacy() {
                        " (the OpenSDN Go plugin's)"
                    } else {
                        ""
                    }
                );
                displaced.push(old.clone());
            }
            let contrail = &self.conf.contrail;
            let host_ifname = self.links.host_name(contrail, &w.vmi.uuid);
            let mut record = record(self.env, cid, &self.vm_name, w, host_ifname)?;
            record.mtu = contrail.mtu.to_string();
            self.links
                .keep(&self.agent, &self.intent(), w.vmi, &mut record)?;
            records.push(record);
        }
        // Every record is made before the first is written: a VMI its kind refuses leaves none.
        for record in records {
            claimed.records.push(ledger::write(pod, record)?);
        }
        for e in ledger::unlink(&mut self.links, &displaced) {
            log::warn!("releasing what an older sandbox of the pod had: {e}");
        }
        Ok(claimed)
    }

    /// The call's new attachment, for its kind.
    fn intent(&self) -> Intent<'_> {
        Intent {
            conf: self.conf,
            env: self.env,
            container_id: self.container_id,
            ifname: self.interface,
        }
    }

    /// The VMIs this call sets up, by mode.
    fn choose<'v>(&self, vmis: &'v [Vmi], files: &PodFiles) -> Result<Vec<Wanted<'v>>> {
        match self.conf.contrail.mode {
            Mode::Plugin => {
                let network = &self.conf.network;
                let at = Attachment {
                    network,
                    container_id: self.container_id,
                    ifname: self.interface,
                };
                let unresolved = |why| Error::NoVmi {
                    vm_name: self.vm_name.clone(),
                    network: network.clone(),
                    ifname: self.interface.clone(),
                    why,
                };
                // Only a network attached more than once needs the agent's view to tell VMIs
                // apart: asked under the pod's lock, after the pod was settled, so that it
                // matches the files.
                let how = self.links.kinds().registration_for(&self.conf.contrail);
                let vmi = vmi::resolve(at, vmis, &files.claims())
                    .map_err(unresolved)?
                    .take(|v| self.agent.is_registered(how, &v.vm_uuid, &v.uuid))
                    .ok_or_else(|| {
                        let count = vmis.iter().filter(|v| v.network == *network).count();
                        unresolved(Unresolved::AllTaken { count })
                    })?;
                let wanted = vmi::for_attachment(vmis, vmi, self.interface);
                log::debug!(
                    "{} resolved to VMI {} (index {})",
                    wanted.ifname,
                    wanted.vmi.uuid,
                    wanted.vmi.index
                );
                Ok(vec![wanted])
            }
            #[cfg(feature = "thick")]
            Mode::Thick => vmi::for_pod(vmis, self.interface).map_err(Error::Interface),
        }
    }

    /// The interfaces, registrations, IP configurations, addresses and routes of the claims.
    fn attach(&mut self, records: &[Recorded], made: &mut Made) -> Result<Outcome> {
        let mtu = self.conf.contrail.mtu;
        for r in records {
            made.links.push(ledger::create_link(
                &mut self.links,
                &self.state,
                r,
                mtu,
                &self.netns,
                &mut self.ctr,
            )?);
        }
        crash::point(Step::Veth);
        made.registered = true;
        ledger::register(&self.agent, self.links.kinds(), &made.links)?;
        crash::point(Step::Registered);
        let uuids: Vec<&VmiUuid> = records.iter().map(|r| &r.vmi_uuid).collect();
        let ips = match records.first() {
            Some(r) => self.agent.wait_for_ips(&r.vm_uuid, &uuids)?,
            None => Vec::new(),
        };
        crash::point(Step::Ip);
        let specs = records
            .iter()
            .zip(&ips)
            .map(|(r, ip)| interface::describe(r, ip, mtu))
            .collect::<Result<Vec<Spec>>>()?;
        let mut outcomes = Vec::with_capacity(specs.len());
        for (spec, r) in specs.iter().zip(records) {
            outcomes.push(self.links.finish(&mut self.ctr, spec, r)?);
        }
        crash::point(Step::Addressed);
        self.still_held(records)?;
        outcomes.into_iter().next().ok_or_else(|| Error::NoVmi {
            vm_name: self.vm_name.clone(),
            network: self.conf.network.clone(),
            ifname: self.interface.clone(),
            why: Unresolved::NoVmis,
        })
    }

    /// A newer sandbox of the pod that took a VMI over meanwhile rewrote its claim: then this
    /// ADD is undone rather than leave an interface no record knows.
    fn still_held(&self, records: &[Recorded]) -> Result<()> {
        let (pod, files) =
            ledger::open(&self.agent, self.links.kinds(), &self.state, &self.vm_name)?;
        ledger::close(pod)?;
        match records.iter().find(|r| !files.records.contains(r)) {
            Some(gone) => Err(Error::Interface(Conflict::TakenOver {
                ifname: gone.ifname.clone(),
            })),
            None => Ok(()),
        }
    }

    /// Undoes what this call made, keeping going after a failure: `error` with every failure of
    /// the rollback. What another sandbox took over meanwhile is no longer this call's.
    fn undo(&mut self, claimed: &Claimed, made: &Made, error: Error) -> Error {
        log::warn!("ADD failed, rolling back: {error}");
        let registered = if made.registered || claimed.took_over {
            Registered::Maybe
        } else {
            Registered::No
        };
        let opened = ledger::open(&self.agent, self.links.kinds(), &self.state, &self.vm_name);
        let failed = match opened {
            Err(e) => {
                // The pod's state cannot be locked or read: its interfaces go all the same.
                let mut failed = vec![e];
                let made: Vec<Record> = made.links.iter().map(|l| Record::clone(l)).collect();
                failed.extend(ledger::unlink(&mut self.links, &made));
                failed
            }
            Ok((mut pod, files)) => {
                let ours = |r: &Record| {
                    !files
                        .records
                        .iter()
                        .chain(&files.reserved)
                        .any(|h| h.vmi_uuid == r.vmi_uuid && !h.is(&r.container_id, &r.ifname))
                };
                let links: Vec<Record> = made
                    .links
                    .iter()
                    .filter(|r| ours(r))
                    .map(|l| Record::clone(l))
                    .collect();
                // An attachment that was there before this call, registered, gets its record
                // back as it was (before the agent is brought in line); a new claim is
                // released.
                let (mut restore, mut claims) = (Vec::new(), Vec::new());
                for (r, old) in claimed.records.iter().zip(&claimed.prior) {
                    match old {
                        _ if !ours(r) => {}
                        Some(old) => restore.push(old.clone()),
                        None => claims.push(Record::clone(r)),
                    }
                }
                let mut failed = ledger::undo(
                    &self.agent,
                    &mut self.links,
                    &mut pod,
                    &restore,
                    &links,
                    &claims,
                    registered,
                );
                failed.extend(ledger::close(pod).err());
                failed
            }
        };
        for e in &failed {
            log::warn!("rollback: {e}");
        }
        Error::with_also(error, failed, During::Rollback)
    }
}

/// The state record of one attachment: the agent's POST /vm body plus ours. The VM name is the
/// pod's (a pod's name and namespace may be too long together for one), the host-side name
/// derived.
fn record(
    env: &Env,
    container_id: &ContainerId,
    vm_name: &VmName,
    w: &Wanted,
    host_ifname: String,
) -> Result<Record> {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let vmi = w.vmi;
    Ok(Record {
        time: format!("{}.{:03}", t.as_secs(), t.subsec_millis()),
        container_id: container_id.clone(),
        vm_uuid: vmi.vm_uuid.clone(),
        vm_name: vm_name.clone(),
        host_ifname: IfName::parse(host_ifname).map_err(|_| Error::Internal)?,
        ifname: w.ifname.clone(),
        netns: env.netns.clone(),
        vn_uuid: vmi.vn_uuid.clone(),
        vmi_uuid: vmi.uuid.clone(),
        state_version: STATE_VERSION.to_string(),
        network: vmi.network.clone(),
        mac: Some(vmi.mac),
        default_gw: w.default_gw,
        mtu: String::new(),
        claimed_boot: crate::state::files::boot_id(),
        claimed_uptime_ms: crate::state::files::uptime().as_millis().to_string(),
        vlan: None,
        route: Route::Vm,
        pod_uid: None,
        device_info: None,
        written_before_boot: false,
    })
}

/// Runtimes and meta-plugins may ask for an IP or MAC; Contrail allocates both, so a request
/// is logged and ignored (docs/configuration.md, "Requested IPs and MACs"), never silently honoured in part.
fn warn_about_requests(conf: &NetConf, env: &Env) {
    let sources = [
        ("runtimeConfig", conf.runtime_config.as_ref()),
        (
            "args.cni",
            conf.args
                .as_ref()
                .and_then(|a| a.get("cni"))
                .and_then(Value::as_object),
        ),
    ];
    for (section, value) in sources {
        for key in ["ips", "mac"] {
            if let Some(v) = value.and_then(|r| r.get(key)) {
                let v = v.to_string();
                log::warn!(
                    "ignoring {section}.{key} {}: Contrail allocates addresses and MACs",
                    Shown(&v)
                );
            }
        }
    }
    for kv in env
        .args
        .split(';')
        .filter(|kv| kv.starts_with("IP=") || kv.starts_with("MAC="))
    {
        log::warn!(
            "ignoring CNI_ARGS {}: Contrail allocates addresses and MACs",
            Shown(kv)
        );
    }
}
