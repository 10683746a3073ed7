//! The operator's command line: `install`, `inspect`, `--help`, `--version`, on lexopt. A CNI
//! call parses no arguments (`main` never gets here with `CNI_COMMAND` set), but the parser's
//! code sits among the pages every call maps: lexopt adds 800 bytes to the binary where clap
//! added 230 KB and a call's peak RSS went past its target (docs/dependencies.md). The help
//! texts are written out here; lexopt splits the arguments, and every mistake (an unknown
//! subcommand or option, a missing or repeated one, a value that is not a whole number) is an
//! error.

use std::ffi::OsString;
use std::path::PathBuf;

use lexopt::prelude::*;

use crate::ops::{inspect, install};

const NAME: &str = "contrail-k8s-cni";

/// What the operator asked for.
#[derive(Debug)]
pub enum Command {
    Install(install::Options),
    Inspect(inspect::Options),
    /// `--help`: the text for stdout.
    Help(String),
    /// `--version`: the text for stdout.
    Version(String),
}

/// A mistake on the command line: the message for stderr (exit status 2).
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

const TOP_USAGE: &str = "Usage: contrail-k8s-cni <COMMAND>";
const INSTALL_USAGE: &str = "Usage: contrail-k8s-cni install [OPTIONS] --bin-dir <DIR>";
const INSPECT_USAGE: &str = "Usage: contrail-k8s-cni inspect [OPTIONS]";

const INSTALL_HELP: &str = "\
Copy this binary, and the node-wide config, into place

Usage: contrail-k8s-cni install [OPTIONS] --bin-dir <DIR>

Options:
      --bin-dir <DIR>             Where CNI plugins live on the node (the kubelet's CNI bin dir)
      --conf-dir <DIR>            Where the node's CNI configs live (with --conf)
      --conf <FILE>               The node-wide config to install there (checked as the plugin
                                  would read it; with --conf-dir)
      --watch                     Keep running (the DaemonSet's container): install again
                                  whatever changes, sweep the attachments of sandboxes that are
                                  gone, exit 0 on SIGTERM
      --sweep-interval <SECONDS>  With --watch: seconds between sweeps (0: no sweep; needs
                                  --conf) [default: 60]
      --sweep-grace <SECONDS>     With --watch: a sandbox's attachments are swept only when their
                                  state is older than this [default: 300]
  -h, --help                      Print help
";

const INSPECT_HELP: &str = "\
Show this node's attachments, joined with the pods' namespaces, the host and the agent

Usage: contrail-k8s-cni inspect [OPTIONS]

Options:
      --config <FILE>  The node-wide config (default: the first *contrail.conf in
                       /etc/cni/net.d, or in $CONTRAIL_CNI_CONF_DIR)
      --json           Print JSON for tools instead of a table
  -h, --help           Print help
";

/// The top-level help: the commands, then the config keys from the one table of them.
fn help() -> String {
    format!(
        "A CNI plugin that connects Kubernetes pods to Contrail / Tungsten Fabric networks, one \
         interface per call. Runtimes and meta-plugins run it with CNI_COMMAND set; these \
         subcommands are for operators.\n\n\
         {TOP_USAGE}\n\n\
         Commands:\n  \
         install  Copy this binary, and the node-wide config, into place\n  \
         inspect  Show this node's attachments, joined with the pods' namespaces, the host and \
         the agent\n\n\
         Options:\n  \
         -h, --help     Print help\n  \
         -V, --version  Print version\n\n{}",
        crate::config::help()
    )
}

/// `error: <what>`, the usage, and where to look.
fn mistake(what: impl std::fmt::Display, usage: &str) -> Usage {
    Usage(format!(
        "error: {what}\n\n{usage}\n\nFor more information, try '--help'.\n"
    ))
}

/// Parses the arguments after the program's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Usage> {
    let mut p = lexopt::Parser::from_args(args);
    let top = |e: lexopt::Error| mistake(said(e), TOP_USAGE);
    match p.next().map_err(top)? {
        None => Err(mistake("a subcommand is required", TOP_USAGE)),
        Some(Short('h') | Long("help")) => Ok(Command::Help(help())),
        Some(Short('V') | Long("version")) => {
            Ok(Command::Version(format!("{NAME} {}\n", crate::version())))
        }
        Some(Value(sub)) => match sub.to_str() {
            Some("install") => install(&mut p),
            Some("inspect") => inspect(&mut p),
            _ => Err(mistake(
                format!("unrecognized subcommand '{}'", sub.to_string_lossy()),
                TOP_USAGE,
            )),
        },
        Some(arg) => Err(mistake(said(arg.unexpected()), TOP_USAGE)),
    }
}

/// lexopt's words for a mistake, as clap words the same ones (which operators know).
fn said(e: lexopt::Error) -> String {
    match e {
        lexopt::Error::MissingValue { option: Some(o) } => {
            format!("a value is required for '{o}' but none was supplied")
        }
        lexopt::Error::UnexpectedOption(o) => format!("unexpected argument '{o}' found"),
        lexopt::Error::UnexpectedArgument(a) => {
            format!("unexpected argument '{}' found", a.to_string_lossy())
        }
        lexopt::Error::UnexpectedValue { option, .. } => {
            format!("unexpected value for '{option}'")
        }
        other => other.to_string(),
    }
}

/// A value for an option given at most once, and not another option's name.
fn once<T>(
    slot: &mut Option<T>,
    p: &mut lexopt::Parser,
    option: &str,
    usage: &str,
    read: impl FnOnce(OsString) -> Result<T, String>,
) -> Result<(), Usage> {
    if slot.is_some() {
        return Err(mistake(
            format!("the argument '{option}' cannot be used multiple times"),
            usage,
        ));
    }
    let value = p.value().map_err(|e| mistake(said(e), usage))?;
    if value.to_str().is_some_and(|v| v.starts_with('-')) {
        return Err(mistake(
            format!("a value is required for '{option}' but none was supplied"),
            usage,
        ));
    }
    *slot = Some(read(value).map_err(|why| mistake(why, usage))?);
    Ok(())
}

fn path(v: OsString) -> Result<PathBuf, String> {
    Ok(PathBuf::from(v))
}

/// Whole seconds.
fn seconds(option: &'static str) -> impl FnOnce(OsString) -> Result<u64, String> {
    move |v| {
        v.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
            format!(
                "invalid value '{}' for '{option} <SECONDS>': not a whole number",
                v.to_string_lossy()
            )
        })
    }
}

/// A flag given at most once.
fn flag(set: &mut bool, option: &str, usage: &str) -> Result<(), Usage> {
    if *set {
        return Err(mistake(
            format!("the argument '{option}' cannot be used multiple times"),
            usage,
        ));
    }
    *set = true;
    Ok(())
}

fn install(p: &mut lexopt::Parser) -> Result<Command, Usage> {
    let u = INSTALL_USAGE;
    let (mut bin_dir, mut conf_dir, mut conf) = (None, None, None);
    let (mut watch, mut interval, mut grace) = (false, None, None);
    while let Some(arg) = p.next().map_err(|e| mistake(said(e), u))? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help(INSTALL_HELP.into())),
            Long("bin-dir") => once(&mut bin_dir, p, "--bin-dir <DIR>", u, path)?,
            Long("conf-dir") => once(&mut conf_dir, p, "--conf-dir <DIR>", u, path)?,
            Long("conf") => once(&mut conf, p, "--conf <FILE>", u, path)?,
            Long("watch") => flag(&mut watch, "--watch", u)?,
            Long("sweep-interval") => once(
                &mut interval,
                p,
                "--sweep-interval <SECONDS>",
                u,
                seconds("--sweep-interval"),
            )?,
            Long("sweep-grace") => once(
                &mut grace,
                p,
                "--sweep-grace <SECONDS>",
                u,
                seconds("--sweep-grace"),
            )?,
            other => return Err(mistake(said(other.unexpected()), u)),
        }
    }
    let missing: Vec<&str> = [
        (bin_dir.is_none(), "--bin-dir <DIR>"),
        (conf.is_some() && conf_dir.is_none(), "--conf-dir <DIR>"),
        (conf_dir.is_some() && conf.is_none(), "--conf <FILE>"),
    ]
    .into_iter()
    .filter_map(|(gone, name)| gone.then_some(name))
    .collect();
    match bin_dir {
        Some(bin_dir) if missing.is_empty() => Ok(Command::Install(install::Options {
            bin_dir,
            conf_dir,
            conf,
            watch,
            sweep_interval: interval.unwrap_or(60),
            sweep_grace: grace.unwrap_or(300),
        })),
        _ => Err(mistake(
            format!(
                "the following required arguments were not provided:\n  {}",
                missing.join("\n  ")
            ),
            u,
        )),
    }
}

fn inspect(p: &mut lexopt::Parser) -> Result<Command, Usage> {
    let u = INSPECT_USAGE;
    let (mut config, mut json) = (None, false);
    while let Some(arg) = p.next().map_err(|e| mistake(said(e), u))? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help(INSPECT_HELP.into())),
            Long("config") => once(&mut config, p, "--config <FILE>", u, path)?,
            Long("json") => flag(&mut json, "--json", u)?,
            other => return Err(mistake(said(other.unexpected()), u)),
        }
    }
    Ok(Command::Inspect(inspect::Options { config, json }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, Usage> {
        parse(args.iter().map(OsString::from))
    }

    fn error(args: &[&str]) -> String {
        run(args).map(|c| panic!("{args:?}: {c:?}")).unwrap_err().0
    }

    fn shown(args: &[&str]) -> String {
        match run(args) {
            Ok(Command::Help(h) | Command::Version(h)) => h,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn install_takes_its_options_and_defaults() {
        let Ok(Command::Install(o)) = run(&[
            "install",
            "--bin-dir",
            "/b",
            "--conf-dir=/c",
            "--conf",
            "/c/10-contrail.conf",
            "--watch",
            "--sweep-grace",
            "0",
        ]) else {
            panic!("not install");
        };
        assert_eq!(o.bin_dir, PathBuf::from("/b"));
        assert_eq!(o.conf_dir, Some(PathBuf::from("/c")));
        assert_eq!(o.conf, Some(PathBuf::from("/c/10-contrail.conf")));
        assert!(o.watch);
        assert_eq!((o.sweep_interval, o.sweep_grace), (60, 0));
        let Ok(Command::Install(o)) = run(&["install", "--bin-dir=/b"]) else {
            panic!("not install");
        };
        assert_eq!((o.conf_dir, o.conf, o.watch), (None, None, false));
        assert_eq!((o.sweep_interval, o.sweep_grace), (60, 300));
    }

    #[test]
    fn inspect_takes_its_options() {
        let Ok(Command::Inspect(o)) = run(&["inspect", "--json"]) else {
            panic!("not inspect");
        };
        assert!(o.json && o.config.is_none());
        let Ok(Command::Inspect(o)) = run(&["inspect", "--config", "/f"]) else {
            panic!("not inspect");
        };
        assert_eq!(o.config, Some(PathBuf::from("/f")));
        assert!(!o.json);
    }

    #[test]
    fn help_and_version() {
        for args in [&["--help"][..], &["-h"]] {
            let h = shown(args);
            assert!(h.contains("Usage: contrail-k8s-cni <COMMAND>"), "{h}");
            assert!(h.contains("  install  Copy this binary"), "{h}");
            assert!(h.contains("  inspect  Show this node's attachments"), "{h}");
            // Every config key, from the one table of them.
            for key in crate::config::KEYS {
                assert!(h.contains(key.name), "{} is not in --help", key.name);
            }
        }
        let h = shown(&["install", "--bin-dir", "/b", "--help"]);
        assert!(h.contains(INSTALL_USAGE), "{h}");
        assert!(h.contains("--sweep-grace <SECONDS>"), "{h}");
        assert!(h.contains("[default: 300]"), "{h}");
        assert!(shown(&["inspect", "-h"]).contains("--config <FILE>"));
        for args in [&["-V"][..], &["--version"]] {
            assert_eq!(
                shown(args),
                format!("contrail-k8s-cni {}\n", crate::version())
            );
        }
    }

    #[test]
    fn unknown_subcommands_and_flags_and_other_mistakes_are_errors() {
        // Each command line as the shell splits it (no argument has a space).
        for (line, words) in [
            ("frobnicate", "unrecognized subcommand 'frobnicate'"),
            ("help", "unrecognized subcommand 'help'"),
            ("--json", "unexpected argument '--json'"),
            ("", "a subcommand is required"),
            (
                "install",
                "required arguments were not provided:\n  --bin-dir <DIR>",
            ),
            ("install --bin-dir", "a value is required for '--bin-dir'"),
            (
                "install --bin-dir --watch",
                "a value is required for '--bin-dir <DIR>'",
            ),
            ("install --bin-dir /b --conf /y", "  --conf-dir <DIR>"),
            ("install --bin-dir /b --conf-dir /y", "  --conf <FILE>"),
            (
                "install --bin-dir /b --sweep-grace soon",
                "invalid value 'soon'",
            ),
            (
                "install --bin-dir /b --sweep-interval 1.5",
                "invalid value '1.5'",
            ),
            (
                "install --bin-dir /b --sweep-interval -1",
                "a value is required for '--sweep-interval <SECONDS>'",
            ),
            (
                "install --bin-dir /b --bin-dir /c",
                "cannot be used multiple times",
            ),
            ("install --bin-dir /b -w", "unexpected argument '-w'"),
            ("inspect --jsn", "unexpected argument '--jsn'"),
            ("inspect json", "unexpected argument 'json'"),
            ("inspect --json=yes", "unexpected value for '--json'"),
        ] {
            let args: Vec<&str> = line.split_whitespace().collect();
            let e = error(&args);
            assert!(
                e.starts_with("error: ") && e.contains(words),
                "{args:?}: {e}"
            );
            assert!(e.ends_with("For more information, try '--help'.\n"), "{e}");
        }
    }
}
