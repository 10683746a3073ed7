//! The operator's command line: `install`, `inspect`, `--help`, `--version`, declared with clap
//! (derive; no colour, no suggestions, no terminal-width wrapping). A CNI call parses no
//! arguments (`main` never gets here with `CNI_COMMAND` set): clap's cost is the binary's size,
//! measured in the CHANGELOG.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::ops::{inspect, install};

/// What the operator asked for.
#[derive(Debug)]
pub enum Command {
    Install(install::Options),
    Inspect(inspect::Options),
}

/// `--version`'s text after the name, computed once (clap wants a `&'static str`).
fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(crate::version)
}

/// A CNI plugin that connects Kubernetes pods to Contrail / Tungsten Fabric networks, one
/// interface per call. Runtimes and meta-plugins run it with CNI_COMMAND set; these subcommands
/// are for operators.
#[derive(Debug, Parser)]
#[command(
    name = "contrail-k8s-cni",
    version = version(),
    subcommand_required = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Copy this binary, and the node-wide config, into place
    Install(Install),
    /// Show this node's attachments, joined with the pods' namespaces, the host and the agent
    Inspect(Inspect),
}

#[derive(Debug, Args)]
struct Install {
    /// Where CNI plugins live on the node (the kubelet's CNI bin dir)
    #[arg(long, value_name = "DIR")]
    bin_dir: PathBuf,
    /// Where the node's CNI configs live
    #[arg(long, value_name = "DIR", requires = "conf")]
    conf_dir: Option<PathBuf>,
    /// The node-wide config to install there (checked as the plugin would read it)
    #[arg(long, value_name = "FILE", requires = "conf_dir")]
    conf: Option<PathBuf>,
    /// Keep running (the DaemonSet's container): install again whatever changes, sweep the
    /// attachments of sandboxes that are gone, exit 0 on SIGTERM
    #[arg(long)]
    watch: bool,
    /// With --watch: seconds between sweeps (0: no sweep; needs --conf)
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    sweep_interval: u64,
    /// With --watch: a sandbox's attachments are swept only when their state is older than this
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    sweep_grace: u64,
}

#[derive(Debug, Args)]
struct Inspect {
    /// The node-wide config (default: the first *contrail.conf in /etc/cni/net.d, or in
    /// $CONTRAIL_CNI_CONF_DIR)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print JSON for tools instead of a table
    #[arg(long)]
    json: bool,
}

/// Parses the arguments after the program's name. `--help` and `--version` come back as errors
/// of kind `DisplayHelp` and `DisplayVersion`: `Error::print` writes them to stdout (exit status
/// 0) and mistakes to stderr (exit status 2), as `Error::exit_code` says.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, clap::Error> {
    // The top-level help ends with the config keys, from the one table of them.
    let cmd = Cli::command().after_help(crate::config::help());
    let name = OsString::from(cmd.get_name());
    let matches = cmd.try_get_matches_from(std::iter::once(name).chain(args))?;
    Ok(match Cli::from_arg_matches(&matches)?.command {
        Sub::Install(o) => Command::Install(install::Options {
            bin_dir: o.bin_dir,
            conf_dir: o.conf_dir,
            conf: o.conf,
            watch: o.watch,
            sweep_interval: o.sweep_interval,
            sweep_grace: o.sweep_grace,
        }),
        Sub::Inspect(o) => Command::Inspect(inspect::Options {
            config: o.config,
            json: o.json,
        }),
    })
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn run(args: &[&str]) -> Result<Command, clap::Error> {
        parse(args.iter().map(OsString::from))
    }

    fn kind(args: &[&str]) -> ErrorKind {
        run(args)
            .map(|c| panic!("{args:?}: {c:?}"))
            .unwrap_err()
            .kind()
    }

    /// What `--help` or `--version` prints.
    fn shown(args: &[&str]) -> String {
        let e = run(args).unwrap_err();
        assert_eq!(e.exit_code(), 0, "{args:?}: {e}");
        e.render().to_string()
    }

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
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
            assert_eq!(kind(args), ErrorKind::DisplayHelp);
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
        assert!(
            h.contains("Usage: contrail-k8s-cni install [OPTIONS] --bin-dir <DIR>"),
            "{h}"
        );
        assert!(h.contains("--sweep-grace <SECONDS>"), "{h}");
        assert!(h.contains("[default: 300]"), "{h}");
        assert!(shown(&["inspect", "-h"]).contains("--config <FILE>"));
        for args in [&["-V"][..], &["--version"]] {
            assert_eq!(kind(args), ErrorKind::DisplayVersion);
            assert_eq!(
                shown(args),
                format!("contrail-k8s-cni {}\n", crate::version())
            );
        }
    }

    #[test]
    fn unknown_subcommands_and_flags_and_other_mistakes_are_errors() {
        for (args, expected) in [
            (&["frobnicate"][..], ErrorKind::InvalidSubcommand),
            (&["help"], ErrorKind::InvalidSubcommand),
            (&["--json"], ErrorKind::UnknownArgument),
            (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
            (&["install"], ErrorKind::MissingRequiredArgument),
            (&["install", "--bin-dir"], ErrorKind::InvalidValue),
            (
                &["install", "--bin-dir", "--watch"],
                ErrorKind::InvalidValue,
            ),
            (
                &["install", "--bin-dir", "/b", "--conf", "/y"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &["install", "--bin-dir", "/b", "--conf-dir", "/y"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &["install", "--bin-dir", "/b", "--sweep-grace", "soon"],
                ErrorKind::ValueValidation,
            ),
            (
                &["install", "--bin-dir", "/b", "--sweep-interval", "1.5"],
                ErrorKind::ValueValidation,
            ),
            (
                &["install", "--bin-dir", "/b", "--sweep-interval", "-1"],
                ErrorKind::UnknownArgument,
            ),
            (
                &["install", "--bin-dir", "/b", "--bin-dir", "/c"],
                ErrorKind::ArgumentConflict,
            ),
            (
                &["install", "--bin-dir", "/b", "-w"],
                ErrorKind::UnknownArgument,
            ),
            (&["inspect", "--jsn"], ErrorKind::UnknownArgument),
            (&["inspect", "json"], ErrorKind::UnknownArgument),
            (&["inspect", "--json=yes"], ErrorKind::TooManyValues),
            (&["--version", "inspect"], ErrorKind::DisplayVersion),
        ] {
            let e = run(args).map(|c| panic!("{args:?}: {c:?}")).unwrap_err();
            assert_eq!(e.kind(), expected, "{args:?}: {e}");
            if !matches!(expected, ErrorKind::DisplayVersion) {
                assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
            }
        }
    }

    #[test]
    fn a_missing_option_is_named() {
        for (args, named) in [
            (&["install"][..], "--bin-dir <DIR>"),
            (
                &["install", "--bin-dir", "/b", "--conf", "/y"],
                "--conf-dir <DIR>",
            ),
            (
                &["install", "--bin-dir", "/b", "--conf-dir", "/y"],
                "--conf <FILE>",
            ),
            (&["inspect", "--jsn"], "--jsn"),
        ] {
            let e = run(args).map(|c| panic!("{args:?}: {c:?}")).unwrap_err();
            assert!(e.to_string().contains(named), "{args:?}: {e}");
        }
    }
}
