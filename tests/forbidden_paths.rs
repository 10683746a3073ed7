//! A command cannot take the ledger's shortcuts: the forbidden paths of ARCHITECTURE.md ("The
//! agent's registrations for a pod are exactly its attachments' state files") fail to compile
//! when written in a command module.
//!
//! The issue asked for `compile_fail` doctests. A doctest is compiled as an external crate,
//! though, and these modules are private to the crate (`mod state`, `pub(crate) mod links`): a
//! doctest would fail for the wrong reason, that the module is private, and would go on failing
//! if the rule itself were lost. So each test copies the workspace, appends the forbidden code to
//! the copy's `src/commands/add.rs` and compiles the copy's library as `scripts/check` does, then
//! asserts on cargo's JSON diagnostics that every error is the rule's, by code and line, and that
//! each forbidden line has one.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use contrail_testkit::TempDir;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The command module the forbidden code is written in, as rustc names it.
const MODULE: &str = "src/commands/add.rs";

/// Ends each forbidden line of the injected code: the line its error must be reported on.
const MARK: &str = "// forbidden";

/// Registers an attachment whose `Linked` the command made itself: no record written, no link
/// made. `Linked`'s field is private to the ledger, so its constructor is too: rustc's E0603
/// ("tuple struct constructor `Linked` is private"), a privacy error.
const REGISTER_UNLINKED: &str = r#"
#[allow(dead_code)]
fn register_unlinked(agent: &crate::agent::Agent, kinds: &crate::kernel::links::Kinds, record: crate::state::Record) -> crate::error::Result<()> {
    crate::state::ledger::register(agent, kinds, &[crate::state::ledger::Linked(record)]) // forbidden
}
"#;

/// The ledger's primitives, each called as a command would: reachable by the crate's privacy
/// (`pub` or `pub(crate)`), refused by clippy.toml's `disallowed-methods`. `write_atomic` is
/// `pub(crate)`, so it too is clippy's error, not a privacy error.
const PRIMITIVES: &str = r#"
#[allow(dead_code)]
fn delete_a_link(socket: &mut crate::kernel::netlink::Socket) -> std::result::Result<bool, crate::kernel::netlink::Error> {
    socket.delete_link("eth0") // forbidden
}

#[allow(dead_code)]
fn write_a_state_file(dir: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    crate::state::files::write_atomic(dir, "vmi", b"{}", 0o600, crate::state::files::Sync::Yes) // forbidden
}

#[allow(dead_code)]
fn remove_a_vhost_user_attachment(dirs: &crate::kernel::vhost::Dirs, paths: &crate::kernel::vhost::Paths) -> crate::error::Result<()> {
    crate::kernel::vhost::remove(dirs, paths, true) // forbidden
}

#[allow(dead_code)]
fn close_a_pod_dir(pod: crate::state::PodDir) -> std::io::Result<()> {
    pod.close() // forbidden
}
"#;

/// An error as rustc reported it: its file and line (the primary span's, if it has one) and
/// its code (`E0603`, `clippy::disallowed_methods`).
type Found = (Option<String>, Option<u64>, Option<String>);

/// A copy of the workspace, without `target/` and `.git/`, whose command module ends with
/// `code`, removed when dropped (also when the test fails); and the lines of `code` marked
/// forbidden, in the copy's module.
fn copy_with(code: &str) -> (TempDir, Vec<u64>) {
    // The working tree as it is, so that the rule checked is the one in `src/` and clippy.toml.
    let copy = TempDir::new();
    copy_tree(Path::new(ROOT), &copy.0, &["target", ".git"]);
    let module = copy.0.join(MODULE);
    let mut text = std::fs::read_to_string(&module).unwrap();
    text.push_str(code);
    std::fs::write(&module, &text).unwrap();
    let lines = (1..)
        .zip(text.lines())
        .filter(|(_, l)| l.ends_with(MARK))
        .map(|(n, _)| n)
        .collect();
    (copy, lines)
}

fn copy_tree(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst, &[]);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

/// Compiles the copy's library with `cargo <subcommand> <options> <extra>` and returns rustc's
/// errors, with their rendered text for a failure's message.
fn errors(copy: &Path, subcommand: &str, extra: &[&str]) -> (Vec<Found>, String) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO"))
        .current_dir(copy)
        .arg(subcommand)
        // scripts/check's profile and flags; offline and locked: the dependencies Cargo.lock
        // pins, already fetched, so that only the injected code can make it fail.
        .args(["--profile", "testing", "-p", "contrail-k8s-cni", "--lib"])
        .args(["--offline", "--locked", "--message-format=json"])
        .args(extra)
        // The dependencies' builds are kept between runs: the copy is new each time, they are not.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(ROOT).join("target/forbidden-paths"),
        )
        .output()
        .expect("running cargo");
    eprintln!("cargo {subcommand}: {:.1?}", started.elapsed());
    assert!(
        !out.status.success(),
        "cargo {subcommand} accepted the forbidden code"
    );
    let mut found = Vec::new();
    let mut rendered = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let diag = &msg["message"];
        if msg["reason"] != "compiler-message" || diag["level"] != "error" {
            continue;
        }
        let text = diag["message"].as_str().unwrap_or_default();
        // rustc's summary, not an error of its own.
        if text.starts_with("aborting due to") {
            continue;
        }
        rendered.push_str(diag["rendered"].as_str().unwrap_or(text));
        let primary = diag["spans"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["is_primary"] == true));
        found.push((
            primary.and_then(|s| s["file_name"].as_str().map(String::from)),
            primary.and_then(|s| s["line_start"].as_u64()),
            diag["code"]["code"].as_str().map(String::from),
        ));
    }
    // No error of rustc's: cargo's own failure (resolution, the lock file) explains it.
    if found.is_empty() {
        rendered = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    found.sort();
    (found, rendered)
}

/// Each of `lines` of the command module has one error of `code`, and nothing else has one.
fn assert_only(found: &[Found], rendered: &str, lines: &[u64], code: &str) {
    let expected: Vec<Found> = lines
        .iter()
        .map(|&l| (Some(MODULE.to_string()), Some(l), Some(code.to_string())))
        .collect();
    assert_eq!(
        found, expected,
        "the forbidden lines ({lines:?} of {MODULE}) must each have one {code} error, and nothing \
         else any; rustc said:\n{rendered}"
    );
}

#[test]
fn a_command_cannot_register_an_attachment_it_did_not_record_and_link() {
    let (copy, lines) = copy_with(REGISTER_UNLINKED);
    // A privacy error stops rustc before clippy's lints: this path is compiled on its own.
    let (found, rendered) = errors(&copy.0, "check", &[]);
    assert_only(&found, &rendered, &lines, "E0603");
}

#[test]
fn a_command_cannot_reach_the_ledgers_primitives() {
    let (copy, lines) = copy_with(PRIMITIVES);
    assert_eq!(lines.len(), 4, "one forbidden line per primitive");
    let (found, rendered) = errors(&copy.0, "clippy", &["--", "-D", "warnings"]);
    assert_only(&found, &rendered, &lines, "clippy::disallowed_methods");
}
