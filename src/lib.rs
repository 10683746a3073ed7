//! contrail-k8s-cni: attaches a Kubernetes pod to Contrail / Tungsten Fabric networks, one
//! interface per call, as a delegate of Multus or CNI-Genie.
//!
//! [`run`] is one CNI call: the config, the command, the result. The modules are named after
//! their domain; the decisions in `cni`, `config`, `pod` and `vmi` are pure, the effects live
//! in `agent` (HTTP), `state` (files) and `netlink`, and `attach` runs the steps.

pub mod agent;
pub mod attach;
pub mod cni;
pub mod config;
pub mod crash;
pub mod error;
pub mod inspect;
pub mod install;
pub mod logging;
pub mod metrics;
pub mod netlink;
pub mod node;
pub mod pod;
pub mod state;
pub mod vmi;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use crate::attach::Call;
use crate::cni::{Command, Env};
use crate::config::NetConf;
pub use crate::error::{Error, Result};

/// `--version`: the crate version, the git revision it was built from, the CNI versions.
pub fn version() -> String {
    format!(
        "{} (git {}); CNI versions {}",
        env!("CARGO_PKG_VERSION"),
        env!("GIT_REVISION"),
        cni::SUPPORTED_VERSIONS.join(", ")
    )
}

/// The node-wide defaults (from `CONTRAIL_CNI_CONF_DIR` or /etc/cni/net.d) under stdin.
fn load_config(stdin: &[u8]) -> Result<NetConf> {
    let dir = std::env::var_os(config::NODE_CONF_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_NODE_CONF_DIR));
    let node = config::load_node_defaults(&dir)?;
    config::parse(stdin, node.as_ref().map(|(p, v)| (p.as_path(), v)))
}

/// Runs one CNI command: `Some` result for stdout, `None` when the command prints nothing.
/// `version` is updated as soon as the caller's cniVersion is known, so that an error object
/// echoes it.
pub fn run(env: &Env, stdin: &[u8], version: &mut String) -> Result<Option<Value>> {
    if env.command == Command::Version {
        // Probes (podman, libcni) may send an empty or partial config: answer regardless.
        let requested = serde_json::from_slice::<Value>(stdin).ok();
        let requested = requested
            .as_ref()
            .and_then(|v| v.get("cniVersion"))
            .and_then(Value::as_str);
        return Ok(Some(cni::version_info(requested)));
    }
    let conf = load_config(stdin)?;
    *version = conf.cni_version.as_str().to_string();
    logging::init(conf.contrail.log_file.as_deref(), conf.contrail.log_level);
    for w in &conf.warnings {
        log::warn!("{w}");
    }
    let started = Instant::now();
    let pod = pod::from_args(&env.args)?;
    let what = format!(
        "{} container={} ifname={} network={} pod={}",
        env.command.as_str(),
        env.container_id,
        env.ifname,
        conf.network,
        pod.as_ref().map_or_else(
            || "?".to_string(),
            |p| format!("{}/{}", p.namespace, p.name)
        ),
    );
    let mut call = Call {
        env,
        conf: &conf,
        pod: pod.as_ref(),
        vmis: Vec::new(),
    };
    let result = dispatch(&mut call);
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let vmi = match call.vmis.as_slice() {
        [] => "-".to_string(),
        vmis => vmis.join(","),
    };
    match &result {
        Ok(_) => log::info!("{what} vmi={vmi}: ok in {ms:.1} ms"),
        Err(e) => log::error!("{what} vmi={vmi}: failed in {ms:.1} ms: {e}"),
    }
    if let Some(path) = &conf.contrail.metrics_file {
        let call = metrics::Call {
            command: env.command.as_str(),
            code: result.as_ref().err().map_or(0, Error::code),
            took: started.elapsed(),
            agent_wait: agent::waited(),
        };
        if let Err(e) = metrics::record(path, &call) {
            log::warn!("updating metrics file {}: {e}", path.display());
        }
    }
    result
}

fn dispatch(call: &mut Call) -> Result<Option<Value>> {
    let conf = call.conf;
    match call.env.command {
        Command::Add => {
            let result = attach::add(call)?.to_json(conf.cni_version);
            Ok(Some(match &conf.prev_result {
                Some(prev) => cni::chain(prev, result, conf.cni_version),
                None => result,
            }))
        }
        Command::Del => attach::del(call).map(|()| None),
        Command::Check => attach::check(call).map(|()| None),
        Command::Gc => node::gc(conf).map(|()| None),
        Command::Status => node::status(conf).map(|()| None),
        Command::Version => Ok(Some(cni::version_info(Some(conf.cni_version.as_str())))),
    }
}
