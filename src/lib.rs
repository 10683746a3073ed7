//! contrail-k8s-cni: attaches a Kubernetes pod to Contrail / Tungsten Fabric networks, one
//! interface per call, as a delegate of Multus or CNI-Genie.
//!
//! [`run`] is one CNI call: the config, the command, the result. The modules are named after
//! their domain; the decisions in `cni`, `config`, `pod` and `vmi` are pure, the effects live
//! in `agent` (HTTP), `state` (files) and `netlink`, and `add`, `del` and `check` run the
//! steps.

// A CNI call's stdout is its result object alone: nothing in the library prints.
#![deny(clippy::print_stdout)]

pub mod agent;
pub mod cni;
mod commands;
pub mod config;
mod crash;
pub mod error;
pub mod ids;
pub mod kernel;
pub mod ops;
mod state;
pub mod text;
pub mod vmi;

use std::time::Instant;

use serde_json::Value;

/// How often a waiting call polls the agent (the benchmark states the readiness lag's floor
/// from it).
pub use crate::agent::POLL_PERIOD;
use crate::cni::{Command, Env, pod};
use crate::commands::call::{Acted, Call};
use crate::commands::{add, check, del, node};
pub use crate::error::{Error, Result};
use crate::ids::VmiUuid;
use crate::ops::{logging, metrics};

/// `--version`: the crate version, the git revision it was built from, the CNI versions.
pub fn version() -> String {
    let features: Vec<&str> = [
        ("thick", cfg!(feature = "thick")),
        ("crash-points", cfg!(feature = "crash-points")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    format!(
        "{} (git {}); CNI versions {}{}",
        env!("CARGO_PKG_VERSION"),
        env!("GIT_REVISION"),
        cni::SUPPORTED_VERSIONS.join(", "),
        if features.is_empty() {
            String::new()
        } else {
            format!("; features {}", features.join(", "))
        }
    )
}

/// What a call's log line says about it: filled in as the call learns it. What the caller chose
/// is shown as it came (the log escapes it), also when it was refused.
struct Line {
    command: String,
    container: String,
    ifname: String,
    network: String,
    pod: String,
    vmis: String,
    /// The caller's W3C trace context (`TRACEPARENT`, OpenTelemetry's environment carrier),
    /// when it passed one.
    trace: Option<String>,
}

impl Line {
    fn new(env: Option<&Env>) -> Line {
        let var = |name: &str| {
            std::env::var_os(name).map_or_else(String::new, |v| v.to_string_lossy().into_owned())
        };
        let (command, container, ifname) = match env {
            Some(e) => (
                e.command.as_str().to_string(),
                e.sandbox
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                e.interface
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ),
            None => (
                var("CNI_COMMAND"),
                var("CNI_CONTAINERID"),
                var("CNI_IFNAME"),
            ),
        };
        Line {
            command,
            container,
            ifname,
            network: "?".into(),
            pod: "?".into(),
            vmis: "-".into(),
            trace: std::env::var_os("TRACEPARENT")
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string_lossy().into_owned()),
        }
    }
}

/// The trace id of a W3C `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex
/// flags>`, lower case; a later version may append fields after a dash), when it is valid: not
/// version `ff`, neither id all zeros.
fn trace_id(traceparent: &str) -> Option<&str> {
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let (version, rest) = traceparent.split_once('-')?;
    let fields = rest.get(..52)?;
    let tail = &rest[52..];
    let (trace, parent, flags) = (fields.get(..32)?, fields.get(33..49)?, fields.get(50..)?);
    let well_formed = hex(version, 2)
        && version != "ff"
        && (if version == "00" {
            tail.is_empty()
        } else {
            tail.is_empty() || tail.starts_with('-')
        })
        && fields.as_bytes()[32] == b'-'
        && fields.as_bytes()[49] == b'-'
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2);
    (well_formed && !zero(trace) && !zero(parent)).then_some(trace)
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} container={} ifname={} network={} pod={} vmi={}",
            self.command, self.container, self.ifname, self.network, self.pod, self.vmis
        )?;
        match self.trace.as_deref() {
            None => Ok(()),
            Some(t) => match trace_id(t) {
                Some(id) => write!(f, " trace={id}"),
                // The caller's bytes: escaped and cut short, never taken for an id.
                None => write!(f, " trace=invalid({})", text::Shown(t)),
            },
        }
    }
}

/// Runs one CNI call (the process's environment `env` and `stdin`, as read): `Some` result for
/// stdout, `None` when the command prints nothing. `version` is updated as soon as the caller's
/// cniVersion is known, so that an error object echoes it. Every call but VERSION leaves one
/// line in the node's log, whatever its environment and stdin say, refused ones included.
pub fn run(
    env: Result<Env>,
    stdin: Result<Vec<u8>>,
    version: &mut String,
) -> Result<Option<Value>> {
    #[cfg(feature = "crash-points")]
    crash::armed()?;
    let env = match env {
        Ok(e) => match Op::of(e.command) {
            Some(op) => Ok((e, op)),
            None => return Ok(Some(version_info(stdin))),
        },
        Err(e) => Err(e),
    };
    let started = Instant::now();
    // The node's settings first: they alone say where the log goes, so that nothing the caller
    // sends can keep a call out of it.
    let node = config::load_node();
    let contrail = match &node {
        Ok(n) => n.contrail.clone(),
        // A node-wide file that cannot be read: the call fails, in the default log.
        Err(_) => config::Contrail::default(),
    };
    logging::init(contrail.log_file.as_deref(), contrail.log_level);
    let mut line = Line::new(env.as_ref().ok().map(|(e, _)| e));
    // The pod, as CNI_ARGS names it, also for a call refused before it is looked at.
    if let Ok((e, _)) = &env {
        if let Ok(Some(p)) = pod::from_args(&e.args) {
            line.pod = format!("{}/{}", p.namespace, p.name);
        }
    }
    // A metrics label: a known command, never the caller's bytes.
    let command = env.as_ref().map_or("invalid", |(e, _)| e.command.as_str());
    let result = node.and_then(|node| {
        let (env, op) = env?;
        call(&env, op, &node, stdin, version, &mut line, started)
    });
    record(&contrail, &line, command, &result, started);
    result
}

/// VERSION, and whatever a probe sends (podman and libcni may send an empty or partial
/// config): answered regardless.
fn version_info(stdin: Result<Vec<u8>>) -> Value {
    let stdin = stdin.unwrap_or_default();
    let requested = serde_json::from_slice::<Value>(&stdin).ok();
    let requested = requested
        .as_ref()
        .and_then(|v| v.get("cniVersion"))
        .and_then(Value::as_str);
    cni::version_info(requested)
}

/// One call of a command that acts, with the node's settings read: its network's config, its
/// refusals, then the command; what the log line says of it goes into `line`.
fn call(
    env: &Env,
    op: Op,
    node: &config::Node,
    stdin: Result<Vec<u8>>,
    version: &mut String,
    line: &mut Line,
    started: Instant,
) -> Result<Option<Value>> {
    for w in &node.warnings {
        log::warn!("{w}");
    }
    let conf = match stdin.and_then(|stdin| config::parse(&stdin, node)) {
        Ok(conf) => conf,
        // A pod must be able to go whatever its network's config became: DEL needs only its
        // environment and the node's settings.
        Err(e) if env.command == Command::Del => {
            log::warn!("DEL with the node's settings: its network config cannot be read: {e}");
            config::NetConf::node_only(node)
        }
        Err(e) => return Err(e),
    };
    *version = conf.cni_version.as_str().to_string();
    line.network = conf.network.clone();
    for w in &conf.warnings {
        log::warn!("{w}");
    }
    if let Some(refusal) = conf.refusal() {
        // A DEL must go through, or a pod whose NAD went stale never goes: it acts with the
        // node's settings, which are the only ones that count.
        if env.command != Command::Del {
            return Err(refusal);
        }
        log::warn!("DEL with the node's settings: {refusal}");
    }
    let pod = pod::from_args(&env.args)?;
    let on = match op {
        // They act on the node.
        Op::Gc => return node::gc(&conf, started).map(|()| None),
        Op::Status => return node::status(&conf, started).map(|()| None),
        Op::Attachment(on) => on,
    };
    let (container_id, interface) = (env.container_id()?, env.ifname()?);
    let call = Call {
        env,
        container_id,
        interface,
        conf: &conf,
        pod: pod.as_ref(),
        started,
    };
    let acted = dispatch(&call, on);
    if !acted.vmis.is_empty() {
        line.vmis = acted
            .vmis
            .iter()
            .map(VmiUuid::as_str)
            .collect::<Vec<_>>()
            .join(",");
    }
    acted.result
}

/// The call's one line in the node's log, and its metrics when the node keeps them.
fn record(
    contrail: &config::Contrail,
    line: &Line,
    command: &'static str,
    result: &Result<Option<Value>>,
    started: Instant,
) {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(_) => log::info!("{line}: ok in {ms:.1} ms"),
        Err(e) => log::error!("{line}: failed in {ms:.1} ms (code {}): {e}", e.code()),
    }
    if let Some(path) = &contrail.metrics_file {
        let (requests, budget_wait) = agent::sent();
        let call = metrics::Call {
            command,
            code: result.as_ref().err().map_or(0, Error::code),
            took: started.elapsed(),
            agent_wait: agent::waited(),
            requests,
            budget_wait,
        };
        if let Err(e) = metrics::record(path, &call) {
            log::warn!("updating metrics file {}: {e}", path.display());
        }
    }
}

/// Runs a command on the call's attachments.
fn dispatch(call: &Call, on: OnAttachment) -> Acted<Option<Value>> {
    let conf = call.conf;
    match on {
        OnAttachment::Add => add::add(call).map(|outcome| {
            let result = outcome.to_json(conf.cni_version);
            Some(match &conf.prev_result {
                Some(prev) => cni::chain(prev, result, conf.cni_version),
                None => result,
            })
        }),
        OnAttachment::Del => del::del(call).map(|()| None),
        OnAttachment::Check => check::check(call).map(|()| None),
    }
}

/// The commands that act on the node: all but VERSION, which [`run`] answers before any
/// config is read.
#[derive(Clone, Copy)]
enum Op {
    Attachment(OnAttachment),
    Gc,
    Status,
}

/// The commands on one attachment (thick mode: on a sandbox's), with CNI_CONTAINERID and
/// CNI_IFNAME.
#[derive(Clone, Copy)]
enum OnAttachment {
    Add,
    Del,
    Check,
}

impl Op {
    fn of(command: Command) -> Option<Op> {
        Some(match command {
            Command::Add => Op::Attachment(OnAttachment::Add),
            Command::Del => Op::Attachment(OnAttachment::Del),
            Command::Check => Op::Attachment(OnAttachment::Check),
            Command::Gc => Op::Gc,
            Command::Status => Op::Status,
            Command::Version => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::trace_id;

    #[test]
    fn trace_ids_of_valid_traceparents_only() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let ok = format!("00-{id}-00f067aa0ba902b7-01");
        assert_eq!(trace_id(&ok), Some(id));
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-00")), Some(id));
        // A later version may carry more fields; version 00 may not.
        assert_eq!(
            trace_id(&format!("01-{id}-00f067aa0ba902b7-01-extra")),
            Some(id)
        );
        assert_eq!(trace_id(&format!("01-{id}-00f067aa0ba902b7-01")), Some(id));
        for bad in [
            String::new(),
            "00".into(),
            format!("{ok}-extra"),
            format!("01-{id}-00f067aa0ba902b7-01x"),
            format!("ff-{id}-00f067aa0ba902b7-01"),
            ok.to_uppercase(),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{id}-0000000000000000-01"),
            format!("00-{id}-00f067aa0ba902b-01"),
            format!("00-{id}x00f067aa0ba902b7-01"),
            format!("0-{id}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", "g".repeat(32)),
            format!("00-{id}-00f067aa0ba902b7-1"),
            format!("00-{id}-00f067aa0ba902b7\n-1"),
            "00-é4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01".into(),
        ] {
            assert_eq!(trace_id(&bad), None, "{bad:?}");
        }
    }
}
