//! BENCHMARKS.md: the generated section, and the text around it kept.

use crate::{BEGIN, END, Opts, R};
use crate::{phases::*, stats::*};
use std::fmt::Write as _;
use std::fs::{self};
use std::path::Path;
use std::process::Command;

pub(crate) struct Report {
    pub(crate) single: Single,
    pub(crate) thick: Vec<Thick>,
    pub(crate) parallel: Parallel,
    pub(crate) ready: Ready,
    pub(crate) sizes_kb: Vec<(String, f64)>,
    pub(crate) warmup: usize,
    pub(crate) workers: usize,
    pub(crate) load_start: String,
}

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

pub(crate) fn f1(x: f64) -> String {
    format!("{x:.1}")
}

pub(crate) fn f2(x: f64) -> String {
    format!("{x:.2}")
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// Marginal ADD cost per added interface between consecutive thick sizes, ms.
pub(crate) fn marginals(t: &[Thick], pick: fn(&Thick) -> f64) -> Vec<(usize, usize, f64)> {
    t.windows(2)
        .map(|w| {
            (
                w[0].n,
                w[1].n,
                (pick(&w[1]) - pick(&w[0])) / (w[1].n - w[0].n) as f64,
            )
        })
        .collect()
}

pub(crate) fn markdown(opts: &Opts, r: &Report) -> String {
    let mut m = String::new();
    let s = &r.single;
    let (ours, ptp, raw, ops) = (
        stats(&s.ours.total),
        stats(&s.ptp.total),
        stats(&s.raw.total),
        stats(&s.raw_ops.total),
    );
    let rss_of = |label: &str| s.rss.iter().find(|(l, _)| *l == label).map(|(_, r)| r);
    let rss_ours = ["contrail-k8s-cni ADD", "contrail-k8s-cni DEL"]
        .iter()
        .filter_map(|l| rss_of(l))
        .fold(0.0f64, |a, r| a.max(r.peak()));
    let rss_ptp = ["ptp + static ADD", "ptp + static DEL"]
        .iter()
        .filter_map(|l| rss_of(l))
        .fold(0.0f64, |a, r| a.max(r.peak()));
    let add_m = marginals(&r.thick, |t| t.add.median);
    let del_m = marginals(&r.thick, |t| t.del.median);
    let flat = |v: &[(usize, usize, f64)]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(x.2), hi.max(x.2)));
        hi / lo
    };
    let (add_flat, del_flat) = (flat(&add_m), flat(&del_m));
    let per_if_64 = r.thick.last().map_or(0.0, |t| t.add.median / t.n as f64);
    let per_if_4 = r.thick.get(1).map_or(0.0, |t| t.add.median / t.n as f64);

    let _ = writeln!(m, "{BEGIN}\n");
    let _ = writeln!(m, "## Machine and versions\n");
    let _ = writeln!(m, "| | |\n|---|---|");
    for (k, v) in machine(opts, &r.load_start) {
        let _ = writeln!(m, "| {k} | {v} |");
    }
    let _ = writeln!(m, "\n## Targets\n");
    let _ = writeln!(m, "| target | measured | |\n|---|---|---|");
    let _ = writeln!(
        m,
        "| ADD+DEL median at most half of ptp+static's | {} ms vs {} ms: ratio {} | {} |",
        f1(ours.median),
        f1(ptp.median),
        f2(ours.median / ptp.median),
        verdict(ours.median <= 0.5 * ptp.median)
    );
    let _ = writeln!(
        m,
        "| ADD+DEL median within 2x of the raw netlink floor | {} ms vs {} ms: {}x | {} |",
        f1(ours.median),
        f1(raw.median),
        f2(ours.median / raw.median),
        verdict(ours.median <= 2.0 * raw.median)
    );
    let _ = writeln!(
        m,
        "| peak RSS at most 60% of ptp's | {} KiB vs {} KiB: {:.0}% | {} |",
        rss_ours,
        rss_ptp,
        100.0 * rss_ours / rss_ptp,
        verdict(rss_ours <= 0.6 * rss_ptp)
    );
    let _ = writeln!(
        m,
        "| readiness lag median under 100 ms (default polling) | median {} ms, worst {} ms | {} |",
        f1(r.ready.lag.median),
        f1(r.ready.lag.max),
        verdict(r.ready.lag.median < 100.0)
    );
    let _ = writeln!(
        m,
        "| thick mode: time per interface flat from 1 to 64 | marginal ADD cost per interface varies {}x (DEL {}x) across 1→4→16→64; {} ms per interface at 64 vs {} at 4 | {} |",
        f2(add_flat),
        f2(del_flat),
        f2(per_if_64),
        f2(per_if_4),
        verdict(add_flat <= 1.5 && del_flat <= 1.5 && per_if_64 <= per_if_4 * 1.1)
    );
    let _ = writeln!(
        m,
        "| {} pods ADDed in parallel without failure | {} ADD and {} DEL failures | {} |",
        r.parallel.pods,
        r.parallel.add_failures.len(),
        r.parallel.del_failures.len(),
        verdict(r.parallel.add_failures.is_empty() && r.parallel.del_failures.is_empty())
    );
    let _ = writeln!(
        m,
        "\nAbove the raw netlink floor (the kernel's own time, mostly the veth deletion), \
         contrail-k8s-cni spends {} ms per ADD+DEL and ptp + static {} ms: a ratio of {}.",
        f1(ours.median - raw.median),
        f1(ptp.median - raw.median),
        f2((ours.median - raw.median) / (ptp.median - raw.median))
    );
    let _ = writeln!(
        m,
        "\n\"Flat\" means: the marginal cost of one more interface (the slope between consecutive \
         sizes) varies by at most 1.5x, and the time per interface at 64 is no worse than at 4 \
         (+10%)."
    );

    let _ = writeln!(
        m,
        "\n## 1-2. One attachment, ADD+DEL ({} runs each, interleaved, after {} warm-up runs)\n",
        ours.n, r.warmup
    );
    let _ = writeln!(
        m,
        "Times in ms, from spawn to reaping (`wait4`); the raw rows are in-process. \
         The simulator answers at once.\n"
    );
    let _ = writeln!(
        m,
        "| | ADD median | DEL median | ADD+DEL median | ADD+DEL p95 | min | max | vs contrail-k8s-cni |\n|---|---|---|---|---|---|---|---|"
    );
    let mut rows = vec![
        ("contrail-k8s-cni", &s.ours),
        ("ptp + static", &s.ptp),
        (
            "raw rtnetlink, per call (runtime, sockets, operations)",
            &s.raw,
        ),
        ("raw rtnetlink, operations only", &s.raw_ops),
    ];
    if let Some(v) = &s.stat {
        rows.insert(1, ("contrail-k8s-cni, static-pie build (see Findings)", v));
    }
    for (name, v) in rows {
        let (a, d, t) = (stats(&v.add), stats(&v.del), stats(&v.total));
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            f2(a.median),
            f2(d.median),
            f2(t.median),
            f2(t.p95),
            f2(t.min),
            f2(t.max),
            f2(t.median / ours.median)
        );
    }
    let (vo, vp, vt) = (
        stats(&s.version_ours),
        stats(&s.version_ptp),
        stats(&s.version_true),
    );
    let _ = writeln!(
        m,
        "| start-up only: `VERSION`, contrail-k8s-cni / ptp / `/bin/true` | {} / {} / {} | | | | | | |",
        f2(vo.median),
        f2(vp.median),
        f2(vt.median)
    );
    let _ = writeln!(
        m,
        "\nOne HTTP request to the simulator (new TCP connection, as the plugin makes them) \
         takes {} ms (median) from this program.",
        f2(stats(&s.http).median)
    );
    let _ = writeln!(
        m,
        "\nptp's ADD execs `static` (two processes) and does a little more kernel work than \
         contrail-k8s-cni: it creates the veth inside the pod and moves the host end out, and \
         also puts the gateway address and a host route on the host end. contrail-k8s-cni's \
         ADD additionally makes three HTTP requests to the agent (pod, IP config, port \
         registration), writes its state file (fsync) under the pod lock, and its DEL \
         deregisters the pod (one more request). The raw floor has neither HTTP nor files. \
         In-process floor without runtime and sockets: {} ms.",
        f2(ops.median)
    );

    let _ = writeln!(m, "\n## 3. Peak RSS and binary size\n");
    let _ = writeln!(
        m,
        "Peak RSS (`VmHWM`) of each process of a call, read under ptrace as it exits \
         ({} runs of each call, after the timed runs; the largest process counts). \
         `wait4`'s `ru_maxrss` cannot be used: a child started with vfork (Rust's `Command`, \
         Go's `os/exec`) keeps, across `execve`, the high-water mark of the parent memory it \
         borrowed, so it reports at least the spawner's RSS: here {} KiB even for `/bin/true`.\n",
        s.rss.first().map_or(0, |r| r.1.largest.len()),
        s.wait4_true_kb
    );
    let _ = writeln!(
        m,
        "| call | peak RSS of the largest process, KiB | median, KiB | private memory at exit, all processes, median KiB | every process: peak KiB (private + file-backed at exit) |\n|---|---|---|---|---|"
    );
    for (label, r) in &s.rss {
        let _ = writeln!(
            m,
            "| {label} | {} | {} | {} | {} |",
            r.peak(),
            stats(&r.largest).median,
            stats(&r.anon).median,
            r.processes()
        );
    }
    let _ = writeln!(
        m,
        "| contrail-k8s-cni `--features thick`, 1..64 interfaces | {} | | | |",
        r.thick.iter().map(|t| t.rss_kb).max().unwrap_or(0)
    );
    let _ = writeln!(m, "\n| binary | size, KiB |\n|---|---|");
    for (name, kb) in &r.sizes_kb {
        let _ = writeln!(m, "| {name} | {kb:.0} |");
    }
    let _ = writeln!(
        m,
        "\n## 4. Thick mode: one call for all of a pod's interfaces\n"
    );
    let _ = writeln!(
        m,
        "| interfaces | runs | ADD median, ms | ADD per interface | DEL median, ms | DEL per interface | peak RSS (traced), KiB |\n|---|---|---|---|---|---|---|"
    );
    for t in &r.thick {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} |",
            t.n,
            t.add.n,
            f1(t.add.median),
            f2(t.add.median / t.n as f64),
            f1(t.del.median),
            f2(t.del.median / t.n as f64),
            t.rss_kb
        );
    }
    let _ = writeln!(
        m,
        "\nMarginal cost of one more interface (slope between sizes), ms:\n"
    );
    let _ = writeln!(m, "| sizes | ADD | DEL |\n|---|---|---|");
    for (a, d) in add_m.iter().zip(&del_m) {
        let _ = writeln!(m, "| {} → {} | {} | {} |", a.0, a.1, f2(a.2), f2(d.2));
    }

    let p = &r.parallel;
    let _ = writeln!(m, "\n## 5. {} pods ADDed in parallel\n", p.pods);
    let _ = writeln!(
        m,
        "Each pod has its own netns and simulated pod (one VMI); all {n} ADDs are started \
         together (one thread each, released by a barrier), then all {n} DELs.\n",
        n = p.pods
    );
    let _ = writeln!(
        m,
        "| | all done after, ms | per call median, ms | per call max, ms | failures |\n|---|---|---|---|---|"
    );
    let _ = writeln!(
        m,
        "| ADD | {} | {} | {} | {} |",
        f1(p.add_total),
        f1(p.add.median),
        f1(p.add.max),
        p.add_failures.len()
    );
    let _ = writeln!(
        m,
        "| DEL | {} | {} | {} | {} |",
        f1(p.del_total),
        f1(p.del.median),
        f1(p.del.max),
        p.del_failures.len()
    );
    let serial = stats(&s.ours.add).median * p.pods as f64;
    let _ = writeln!(
        m,
        "\nFor comparison, {} sequential ADDs at the single-attachment median would take {} ms. \
         After the ADDs the node namespace had {} links (lo + one host end per pod).",
        p.pods,
        f1(serial),
        p.host_links
    );
    for f in p.add_failures.iter().chain(&p.del_failures).take(3) {
        let _ = writeln!(m, "\nFailure: `{}`", f.replace('`', "'"));
    }

    let l = &r.ready.lag;
    let _ = writeln!(m, "\n## 6. Readiness lag\n");
    let _ = writeln!(
        m,
        "{} pods whose VMI gets its IP configuration at a random moment (`ip-delay-ms` uniform in \
         0..2000 after the registration, fixed seed), {} at a time; default `poll-timeout` and \
         `poll-retries`. Lag = when ADD returned minus the moment the simulator started answering \
         with the IP config (its registration time plus the delay); it includes the rest of the \
         ADD (addresses, routes) after the VMI is seen ready.\n",
        l.n, r.workers
    );
    let _ = writeln!(
        m,
        "| median, ms | p95, ms | worst, ms | best, ms |\n|---|---|---|---|"
    );
    let _ = writeln!(
        m,
        "| {} | {} | {} | {} |",
        f1(l.median),
        f1(l.p95),
        f1(l.max),
        f1(l.min)
    );
    let _ = writeln!(
        m,
        "\nFor reference, the ADD median with the agent answering at once is {} ms.",
        f1(stats(&s.ours.add).median)
    );

    let svg = opts.svg.strip_prefix(&opts.repo).unwrap_or(&opts.svg);
    let _ = writeln!(m, "\n## Plot\n\n![latency]({})\n", svg.display());
    let _ = writeln!(m, "{END}");
    m
}

pub(crate) const SKELETON_HEAD: &str = "# Benchmarks\n\n\
Run `scripts/bench` as root (a few minutes on 2 cores). It builds the release binary, the \
simulator and the benchmark (`examples/bench.rs`) into `target/bench`, the thick build into \
`target/bench-thick` and a static-PIE build into `target/bench-static`, runs the benchmark and \
rewrites the generated section below and `benchmarks/latency.svg`; the text outside the \
generated section is kept. `scripts/bench --quick` is a smoke run that writes nothing; \
`scripts/bench --compare OTHER_BIN` measures ADD+DEL and peak RSS of this build against \
another, interleaved, for trying a change.\n\n";

pub(crate) const SKELETON_TAIL: &str =
    "\n## Findings\n\n(Hand-written analysis; kept across runs.)\n";

/// Replaces the generated section of the file, keeping the text around it.
pub(crate) fn write_markdown(path: &Path, section: &str) -> R<()> {
    let old = fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!(
                "{}{}{}",
                &old[..b],
                section.trim_end(),
                &old[e + END.len()..]
            )
        }
        _ => format!("{SKELETON_HEAD}{section}{SKELETON_TAIL}"),
    };
    fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

/// A command's trimmed stdout, for the report's facts about the machine.
fn output(cmd: &str, args: &[&str]) -> R<String> {
    contrail_testkit::try_sh(cmd, args).map(|s| s.trim().to_string())
}
