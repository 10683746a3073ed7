//! The process, as a runtime or an operator starts it. With `CNI_COMMAND` set it is a CNI call:
//! the environment and stdin go to the library, its result or error object to stdout, nothing
//! else. Without, it is run by hand: the subcommands, `--version` and `--help`.

// A CNI call's stdout is its result object alone; only the operator's commands print.
#![deny(clippy::print_stdout)]

use std::io::{Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use contrail_k8s_cni::cni::{self, Env, Version};
use contrail_k8s_cni::ops::cli::{self, Command, Usage};
use contrail_k8s_cni::ops::{inspect, install};
use contrail_k8s_cni::{Error, Result};

/// Network configs are a few hundred bytes; a larger stdin is a mistake or an attack.
const MAX_STDIN: u64 = 1 << 20;

fn read_stdin() -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut buf)
        .map_err(Error::io(
            "reading the network config from",
            "stdin".as_ref(),
        ))?;
    if buf.len() as u64 > MAX_STDIN {
        return Err(Error::config(
            "(stdin)",
            format!("network config is larger than {MAX_STDIN} bytes"),
        ));
    }
    Ok(buf)
}

/// A CNI call: a panic is logged (file and stderr) and turned into a CNI error, never a bare
/// crash; the result or error object is the only thing on stdout.
fn cni_call() -> ExitCode {
    panic::set_hook(Box::new(|info| {
        log::error!("internal error: {info}");
        eprintln!("contrail-k8s-cni: internal error: {info}");
    }));
    let mut version = Version::NEWEST.as_str().to_string();
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        contrail_k8s_cni::run(
            Env::from_process().map_err(Error::from),
            read_stdin(),
            &mut version,
        )
    }))
    .unwrap_or(Err(Error::Internal));
    let (out, status) = match result {
        Ok(v) => (v, ExitCode::SUCCESS),
        Err(e) => (Some(e.to_json(&version)), ExitCode::FAILURE),
    };
    if let Some(v) = out {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{v}");
        let _ = stdout.flush();
    }
    status
}

/// Run by hand. With no arguments, what the reference plugins print (on stderr, exit 0).
#[allow(
    clippy::print_stdout,
    reason = "an operator's command: its output is for the terminal, not a runtime"
)]
fn by_hand() -> ExitCode {
    if std::env::args_os().len() <= 1 {
        eprintln!(
            "CNI contrail-k8s-cni plugin v{}\nCNI protocol versions supported: {}",
            env!("CARGO_PKG_VERSION"),
            cni::SUPPORTED_VERSIONS.join(", ")
        );
        return ExitCode::SUCCESS;
    }
    let result = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Install(opts)) => install::run(&opts),
        Ok(Command::Inspect(opts)) => inspect::run(&opts),
        // --help and --version to stdout (exit 0), mistakes to stderr (exit 2).
        Ok(Command::Help(text) | Command::Version(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(Usage(text)) => {
            eprint!("{text}");
            return ExitCode::from(2);
        }
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
    if std::env::var_os("CNI_COMMAND").is_some() {
        cni_call()
    } else {
        by_hand()
    }
}
