//! The report's facts about the machine: CPU, memory, kernel, versions, load; binary sizes.

use crate::context::Opts;
use crate::error::R;

use std::fs::{self};
use std::path::Path;
use std::process::Command;

pub(crate) fn kb(path: &Path) -> f64 {
    fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1024.0)
}

pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) fn machine(opts: &Opts, load_start: &str) -> Vec<(&'static str, String)> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("?".to_string(), |(_, m)| m.trim().to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or("?".into(), |k| format!("{:.1} GiB", k / 1024.0 / 1024.0));
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let virt = output("systemd-detect-virt", &[]).unwrap_or_else(|_| "unknown".into());
    let repo = opts.repo.to_string_lossy().to_string();
    let git = output(
        "git",
        &[
            "-C",
            &repo,
            "describe",
            "--always",
            "--dirty",
            "--abbrev=12",
        ],
    )
    .unwrap_or_else(|_| "?".into());
    let rustc = Command::new("rustc")
        .arg("--version")
        .current_dir(&opts.repo)
        .output()
        .map_or("?".into(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        });
    let ptp = output(
        "dpkg-query",
        &["-W", "-f", "${Version}", "containernetworking-plugins"],
    )
    .unwrap_or_else(|_| "?".into());
    let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let profile = fs::read_to_string(opts.repo.join("Cargo.toml"))
        .unwrap_or_default()
        .split("[profile.release]")
        .nth(1)
        .map(|s| {
            s.lines()
                .skip(1)
                .take_while(|l| !l.starts_with('['))
                .filter(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "(none: cargo defaults)".into());
    vec![
        ("CPU", format!("{model} ({cores} cores, {virt})")),
        ("memory", mem),
        ("kernel", kernel.trim().to_string()),
        ("rustc", rustc),
        (
            "contrail-k8s-cni",
            format!("git {git}, release profile: {profile}"),
        ),
        (
            "ptp, static",
            format!("Debian containernetworking-plugins {ptp}"),
        ),
        ("date", date),
        (
            "load average (1, 5, 15 min)",
            format!(
                "{load_start} at the start, {} at the end (other work on the machine shows here)",
                loadavg()
            ),
        ),
    ]
}

/// A command's trimmed stdout, for the report's facts about the machine.
fn output(cmd: &str, args: &[&str]) -> R<String> {
    contrail_testkit::try_sh(cmd, args).map(|s| s.trim().to_string())
}
