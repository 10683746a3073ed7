//! The operator's command line: `install`, `inspect`, `--help`, `--version`. Written out here
//! rather than with an argument-parsing crate: a CNI call parses no arguments, yet such a
//! crate's code (a tenth of the binary) sits among the pages every call maps.

use std::ffi::OsString;
use std::fmt::Write;
use std::path::PathBuf;

use crate::ops::{inspect, install};

const NAME: &str = "contrail-k8s-cni";

const ABOUT: &str = "A CNI plugin that connects Kubernetes pods to Contrail / Tungsten Fabric \
    networks, one interface per call. Runtimes and meta-plugins run it with CNI_COMMAND set; \
    these subcommands are for operators.";

/// What the operator asked for.
#[derive(Debug)]
pub enum Command {
    Install(install::Options),
    Inspect(inspect::Options),
    /// `--help` (text for stdout).
    Help(String),
    /// `--version`.
    Version,
}

/// A mistake on the command line: the message for stderr (exit status 2).
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

/// One option of a subcommand: `--name`, with a value when `value` names it.
struct Opt {
    name: &'static str,
    value: Option<&'static str>,
    help: &'static str,
    default: Option<&'static str>,
    required: bool,
    /// Another option that must come with this one.
    requires: Option<&'static str>,
}

const fn flag(name: &'static str, help: &'static str) -> Opt {
    Opt {
        name,
        value: None,
        help,
        default: None,
        required: false,
        requires: None,
    }
}

const fn valued(name: &'static str, value: &'static str, help: &'static str) -> Opt {
    Opt {
        value: Some(value),
        ..flag(name, help)
    }
}

struct Sub {
    name: &'static str,
    about: &'static str,
    opts: &'static [Opt],
}

const INSTALL: Sub = Sub {
    name: "install",
    about: "Copy this binary, and the node-wide config, into place",
    opts: &[
        Opt {
            required: true,
            ..valued(
                "bin-dir",
                "DIR",
                "Where CNI plugins live on the node (the kubelet's CNI bin dir)",
            )
        },
        Opt {
            requires: Some("conf"),
            ..valued("conf-dir", "DIR", "Where the node's CNI configs live")
        },
        Opt {
            requires: Some("conf-dir"),
            ..valued(
                "conf",
                "FILE",
                "The node-wide config to install there (checked as the plugin would read it)",
            )
        },
        flag(
            "watch",
            "Keep running (the DaemonSet's container): install again whatever changes, sweep \
             the attachments of sandboxes that are gone, exit 0 on SIGTERM",
        ),
        Opt {
            default: Some("60"),
            ..valued(
                "sweep-interval",
                "SECONDS",
                "With --watch: seconds between sweeps (0: no sweep; needs --conf)",
            )
        },
        Opt {
            default: Some("300"),
            ..valued(
                "sweep-grace",
                "SECONDS",
                "With --watch: a sandbox's attachments are swept only when their state is older \
                 than this",
            )
        },
    ],
};

const INSPECT: Sub = Sub {
    name: "inspect",
    about: "Show this node's attachments, joined with the pods' namespaces, the host and the \
            agent",
    opts: &[
        valued(
            "config",
            "FILE",
            "The node-wide config (default: the first *contrail.conf in /etc/cni/net.d, or in \
             $CONTRAIL_CNI_CONF_DIR)",
        ),
        flag("json", "Print JSON for tools instead of a table"),
    ],
};

const SUBS: [&Sub; 2] = [&INSTALL, &INSPECT];

/// Parses the arguments after the program's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Usage> {
    let mut args = args.into_iter().map(utf8);
    let first = args.next().transpose()?;
    let top = || format!("Usage: {NAME} <COMMAND>");
    match first.as_deref() {
        Some("-h" | "--help") | None => Ok(Command::Help(help())),
        Some("-V" | "--version") => Ok(Command::Version),
        Some(name) => match SUBS.iter().find(|s| s.name == name) {
            Some(sub) => parse_sub(sub, args),
            None => Err(mistake(
                &format!("unrecognized subcommand '{name}'"),
                &top(),
            )),
        },
    }
}

fn utf8(arg: OsString) -> Result<String, Usage> {
    arg.into_string().map_err(|a| {
        mistake(
            &format!("invalid UTF-8 in argument {}", a.to_string_lossy()),
            &format!("Usage: {NAME} <COMMAND>"),
        )
    })
}

/// A subcommand's options, then its Options.
fn parse_sub(
    sub: &Sub,
    args: impl Iterator<Item = Result<String, Usage>>,
) -> Result<Command, Usage> {
    let usage = usage(sub);
    let fail = |what: String| Err(mistake(&what, &usage));
    let mut given: Vec<(&Opt, Option<String>)> = Vec::new();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let arg = arg?;
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help(sub_help(sub)));
        }
        let (name, inline) = match arg.strip_prefix("--") {
            Some(rest) => match rest.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (rest, None),
            },
            None => return fail(format!("unexpected argument '{arg}' found")),
        };
        let Some(opt) = sub.opts.iter().find(|o| o.name == name) else {
            return fail(format!("unexpected argument '--{name}' found"));
        };
        if given.iter().any(|(o, _)| o.name == opt.name) {
            return fail(format!(
                "the argument '{}' cannot be used multiple times",
                shown(opt)
            ));
        }
        let value = match (opt.value, inline) {
            (None, None) => None,
            (None, Some(_)) => return fail(format!("unexpected value for '--{name}'")),
            (Some(_), Some(v)) => Some(v),
            // The next argument, unless it is another option.
            (Some(_), None) => {
                match args.next_if(|a| a.as_ref().is_ok_and(|a| !a.starts_with('-'))) {
                    Some(v) => Some(v?),
                    None => {
                        return Err(Usage(format!(
                            "error: a value is required for '{}' but none was supplied\n\nFor more \
                         information, try '--help'.\n",
                            shown(opt)
                        )));
                    }
                }
            }
        };
        given.push((opt, value));
    }
    let has = |name: &str| given.iter().any(|(o, _)| o.name == name);
    let missing: Vec<String> = sub
        .opts
        .iter()
        .filter(|o| o.required && !has(o.name))
        .chain(
            given
                .iter()
                .filter_map(|(o, _)| o.requires)
                .filter(|r| !has(r))
                .filter_map(|r| sub.opts.iter().find(|o| o.name == r)),
        )
        .map(|o| format!("  {}", shown(o)))
        .collect();
    if !missing.is_empty() {
        return fail(format!(
            "the following required arguments were not provided:\n{}",
            missing.join("\n")
        ));
    }
    let value = |name: &str| {
        given
            .iter()
            .find(|(o, _)| o.name == name)
            .and_then(|(_, v)| v.clone())
            .or_else(|| {
                let opt = sub.opts.iter().find(|o| o.name == name);
                opt.and_then(|o| o.default).map(str::to_string)
            })
    };
    let seconds = |name: &str| -> Result<u64, Usage> {
        let v = value(name).unwrap_or_default();
        v.parse().map_err(|_| {
            mistake(
                &format!("invalid value '{v}' for '--{name} <SECONDS>': not a whole number"),
                &usage,
            )
        })
    };
    let path = |name: &str| value(name).map(PathBuf::from);
    Ok(match sub.name {
        "install" => Command::Install(install::Options {
            bin_dir: path("bin-dir").unwrap_or_default(),
            conf_dir: path("conf-dir"),
            conf: path("conf"),
            watch: has("watch"),
            sweep_interval: seconds("sweep-interval")?,
            sweep_grace: seconds("sweep-grace")?,
        }),
        _ => Command::Inspect(inspect::Options {
            config: path("config"),
            json: has("json"),
        }),
    })
}

fn mistake(what: &str, usage: &str) -> Usage {
    Usage(format!(
        "error: {what}\n\n{usage}\n\nFor more information, try '--help'.\n"
    ))
}

/// `--name <VALUE>`, or `--name`.
fn shown(o: &Opt) -> String {
    match o.value {
        Some(v) => format!("--{} <{v}>", o.name),
        None => format!("--{}", o.name),
    }
}

fn usage(sub: &Sub) -> String {
    let mut u = format!("Usage: {NAME} {} [OPTIONS]", sub.name);
    for o in sub.opts.iter().filter(|o| o.required) {
        u.push(' ');
        u.push_str(&shown(o));
    }
    u
}

/// Two columns, the first as wide as its widest entry.
fn columns(rows: &[(String, String)]) -> String {
    let width = rows.iter().map(|(a, _)| a.len()).max().unwrap_or(0);
    rows.iter().fold(String::new(), |mut out, (a, b)| {
        let _ = writeln!(out, "  {a:<width$}  {b}");
        out
    })
}

fn help() -> String {
    let commands: Vec<(String, String)> = SUBS
        .iter()
        .map(|s| (s.name.to_string(), s.about.to_string()))
        .collect();
    let options = [
        ("-h, --help".to_string(), "Print help".to_string()),
        ("-V, --version".to_string(), "Print version".to_string()),
    ];
    format!(
        "{ABOUT}\n\nUsage: {NAME} <COMMAND>\n\nCommands:\n{}\nOptions:\n{}",
        columns(&commands),
        columns(&options)
    )
}

fn sub_help(sub: &Sub) -> String {
    let mut rows: Vec<(String, String)> = sub
        .opts
        .iter()
        .map(|o| {
            let help = match o.default {
                Some(d) => format!("{} [default: {d}]", o.help),
                None => o.help.to_string(),
            };
            (format!("    {}", shown(o)), help)
        })
        .collect();
    rows.push(("-h, --help".into(), "Print help".into()));
    format!(
        "{}\n\n{}\n\nOptions:\n{}",
        sub.about,
        usage(sub),
        columns(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, Usage> {
        parse(args.iter().map(OsString::from))
    }

    fn error(args: &[&str]) -> String {
        run(args).unwrap_err().0
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
    }

    #[test]
    fn help_and_version() {
        for args in [&[][..], &["--help"], &["-h"]] {
            let Ok(Command::Help(h)) = run(args) else {
                panic!("{args:?}");
            };
            assert!(h.contains("Usage: contrail-k8s-cni <COMMAND>"), "{h}");
            assert!(h.contains("  install  Copy this binary"), "{h}");
        }
        let Ok(Command::Help(h)) = run(&["install", "--bin-dir", "/b", "--help"]) else {
            panic!("no install help");
        };
        assert!(
            h.contains("Usage: contrail-k8s-cni install [OPTIONS] --bin-dir <DIR>"),
            "{h}"
        );
        assert!(h.contains("--sweep-grace <SECONDS>"), "{h}");
        assert!(h.contains("[default: 300]"), "{h}");
        assert!(matches!(run(&["-V"]), Ok(Command::Version)));
    }

    #[test]
    fn mistakes_are_explained_with_the_usage() {
        for (args, words) in [
            (&["frobnicate"][..], "unrecognized subcommand 'frobnicate'"),
            (
                &["install"],
                "required arguments were not provided:\n  --bin-dir <DIR>",
            ),
            (
                &["install", "--bin-dir"],
                "a value is required for '--bin-dir <DIR>'",
            ),
            (&["install", "--bin-dir", "--watch"], "a value is required"),
            (
                &["install", "--bin-dir", "/b", "--conf", "/y"],
                "  --conf-dir <DIR>",
            ),
            (
                &["install", "--bin-dir", "/b", "--conf-dir", "/y"],
                "  --conf <FILE>",
            ),
            (
                &["install", "--bin-dir", "/b", "--sweep-grace", "soon"],
                "invalid value 'soon'",
            ),
            (
                &["install", "--bin-dir", "/b", "--bin-dir", "/c"],
                "cannot be used multiple times",
            ),
            (&["inspect", "--jsn"], "unexpected argument '--jsn' found"),
            (&["inspect", "json"], "unexpected argument 'json' found"),
            (&["inspect", "--json=yes"], "unexpected value for '--json'"),
        ] {
            let e = error(args);
            assert!(
                e.starts_with("error: ") && e.contains(words),
                "{args:?}: {e}"
            );
            assert!(e.ends_with("For more information, try '--help'.\n"), "{e}");
        }
    }
}
