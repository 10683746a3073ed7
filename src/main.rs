//! contrail-k8s-cni: attaches a Kubernetes pod to a Contrail / Tungsten Fabric network, one
//! interface per call, as a delegate of Multus or CNI-Genie.
//!
//! A flat pipeline: read the environment and config, dispatch the command, print the result or
//! a CNI error object on stdout. Nothing else ever reaches stdout.

mod agent;
mod attach;
mod cni;
mod config;
mod crash;
mod inspect;
mod install;
mod logging;
mod netlink;
mod node;
mod plugin;
mod pod;
#[cfg(test)]
mod proptests;
mod state;
#[cfg(feature = "thick")]
mod thick;
mod vmi;

/// Without the `thick` feature, thick mode is refused (code 7) with how to get it.
#[cfg(not(feature = "thick"))]
mod thick {
    use crate::cni::{Env, Error, Outcome, Result};
    use crate::config::NetConf;
    use crate::pod::Pod;

    fn refused<T>() -> Result<T> {
        Err(Error::config(
            "contrail.mode",
            "\"thick\" needs a build with thick mode: cargo build --release --features thick",
        ))
    }

    pub fn add(_: &Env, _: &NetConf, _: &Pod) -> Result<Outcome> {
        refused()
    }

    pub fn del(_: &Env, _: &NetConf, _: Option<&Pod>) -> Result<()> {
        refused()
    }

    pub fn check(_: &Env, _: &NetConf, _: Option<&Pod>) -> Result<()> {
        refused()
    }
}

use std::io::{Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::Value;

use crate::cni::{Command, Env, Error, Version, code};
use crate::config::{Mode, NetConf};

/// Network configs are a few hundred bytes; a larger stdin is a mistake or an attack.
const MAX_STDIN: u64 = 1 << 20;

fn read_stdin() -> cni::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(format!("reading the network config from stdin: {e}")))?;
    if buf.len() as u64 > MAX_STDIN {
        return Err(Error::config(
            "(stdin)",
            format!("network config is larger than {MAX_STDIN} bytes"),
        ));
    }
    Ok(buf)
}

fn load_config(stdin: &[u8]) -> cni::Result<NetConf> {
    let dir = std::env::var_os(config::NODE_CONF_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_NODE_CONF_DIR));
    let node = config::load_node_defaults(&dir)?;
    config::parse(stdin, node.as_ref().map(|(p, v)| (p.as_path(), v)))
}

/// Runs one command; `version` is updated as soon as the caller's cniVersion is known, so that
/// an error object echoes it.
fn run(version: &mut String) -> cni::Result<Option<Value>> {
    let env = Env::from_process()?;
    let stdin = read_stdin()?;
    if env.command == Command::Version {
        // Probes (podman, libcni) may send an empty or partial config: answer regardless.
        let requested = serde_json::from_slice::<Value>(&stdin).ok();
        let requested = requested
            .as_ref()
            .and_then(|v| v.get("cniVersion"))
            .and_then(Value::as_str);
        return Ok(Some(cni::version_info(requested)));
    }
    let conf = load_config(&stdin)?;
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
    let result = dispatch(&env, &conf, pod.as_ref());
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let vmi = logging::noted_vmi();
    match &result {
        Ok(_) => log::info!("{what} vmi={vmi}: ok in {ms:.1} ms"),
        Err(e) => log::error!("{what} vmi={vmi}: failed in {ms:.1} ms: {e}"),
    }
    result
}

fn dispatch(env: &Env, conf: &NetConf, pod: Option<&pod::Pod>) -> cni::Result<Option<Value>> {
    let thick = conf.contrail.mode == Mode::Thick;
    match env.command {
        Command::Add => {
            let pod = pod.ok_or_else(|| {
                Error::env(
                    "CNI_ARGS",
                    "K8S_POD_NAME is missing; ADD needs the pod's name",
                )
            })?;
            let outcome = if thick {
                thick::add(env, conf, pod)
            } else {
                plugin::add(env, conf, pod)
            };
            let result = outcome?.to_json(conf.cni_version);
            Ok(Some(match &conf.prev_result {
                Some(prev) => cni::chain(prev, result, conf.cni_version),
                None => result,
            }))
        }
        Command::Del if thick => thick::del(env, conf, pod).map(|()| None),
        Command::Del => plugin::del(env, conf, pod).map(|()| None),
        Command::Check if thick => thick::check(env, conf, pod).map(|()| None),
        Command::Check => plugin::check(env, conf, pod).map(|()| None),
        Command::Gc => node::gc(conf).map(|()| None),
        Command::Status => node::status(conf).map(|()| None),
        Command::Version => unreachable!("answered before the config is read"),
    }
}

/// Run by hand (runtimes pass no arguments): `--version`, `install`, `inspect`.
fn subcommand(args: &[String]) -> ExitCode {
    let result = match args[0].as_str() {
        "--version" | "version" => Ok(format!(
            "contrail-k8s-cni {} (git {}); CNI versions {}",
            env!("CARGO_PKG_VERSION"),
            env!("GIT_REVISION"),
            cni::SUPPORTED_VERSIONS.join(", ")
        )),
        "install" => install::run(&args[1..]),
        "inspect" => inspect::run(&args[1..]),
        other => Err(format!(
            "unknown subcommand {other:?}; this is a CNI plugin (run by a container runtime with CNI_COMMAND set)\n{}\n{}\n\
             usage: contrail-k8s-cni --version",
            install::USAGE,
            inspect::USAGE
        )),
    };
    match result {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("contrail-k8s-cni: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !args.is_empty() && std::env::var_os("CNI_COMMAND").is_none() {
        return subcommand(&args);
    }
    // A panic is logged (file and stderr) and turned into a CNI error below, never a bare crash.
    panic::set_hook(Box::new(|info| {
        log::error!("internal error: {info}");
        eprintln!("contrail-k8s-cni: internal error: {info}");
    }));
    let mut version = Version::NEWEST.as_str().to_string();
    let result = panic::catch_unwind(AssertUnwindSafe(|| run(&mut version))).unwrap_or_else(|_| {
        Err(Error::new(
            code::INTERNAL,
            "internal error in contrail-k8s-cni; see its log",
        ))
    });
    let (out, status) = match result {
        Ok(Some(v)) => (Some(v), ExitCode::SUCCESS),
        Ok(None) => (None, ExitCode::SUCCESS),
        Err(e) => (Some(e.to_json(&version)), ExitCode::FAILURE),
    };
    if let Some(v) = out {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{v}");
        let _ = stdout.flush();
    }
    status
}
