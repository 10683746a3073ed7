//! BENCHMARKS.md: the generated section, and the text around it kept.

use crate::{BEGIN, END, NODE_ATTACHMENTS, NODE_IP_DELAY_MS, Opts, R};
use crate::{phases::*, stats::*, storm::*};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self};
use std::path::Path;
use std::process::Command;

pub(crate) struct Report {
    pub(crate) single: Single,
    pub(crate) disk: Vec<Disk>,
    pub(crate) thick: Vec<Thick>,
    pub(crate) parallel: Parallel,
    pub(crate) node: Vec<NodeRound>,
    pub(crate) ready: Ready,
    pub(crate) storms: Vec<Storm>,
    pub(crate) quiets: Vec<Quiet>,
    pub(crate) sizes_kb: Vec<(String, f64)>,
    pub(crate) warmup: usize,
    pub(crate) workers: usize,
    pub(crate) load_start: String,
}

impl Report {
    /// The ADD's floor, ms: medians of an empty static program's start-up, the attachment's
    /// netlink work in-process (netns, sockets, operations) and the agent's three requests on
    /// one kept-alive connection, summed.
    pub(crate) fn floor(&self) -> f64 {
        let s = &self.single;
        stats(&s.empty).median + stats(&s.raw.add).median + stats(&s.agent).median
    }

    /// The readiness lag's floor, ms: half the period of a waiting call's polls (the plugin's
    /// `POLL_PERIOD`: the ready moment falls anywhere between two polls) plus the rest of the ADD
    /// after the poll that saw the IP configuration (median).
    pub(crate) fn ready_floor(&self) -> f64 {
        poll_half() + self.ready.rest.median
    }

    /// How far the median lag of these samples may stray from the floor by chance: the
    /// standard error of the median of n phases uniform over a poll period, P / (2 sqrt n).
    pub(crate) fn ready_noise(&self) -> f64 {
        poll_half() / (self.ready.lag.n.max(1) as f64).sqrt()
    }

    /// Agent requests of one ADD and of one DEL with the agent answering at once (medians).
    pub(crate) fn requests_per_call(&self) -> (f64, f64) {
        let s = &self.single;
        (stats(&s.requests_add).median, stats(&s.requests_del).median)
    }

    /// How many requests a call makes per second while it waits for its IP configuration: the
    /// readiness phase's requests beyond what the same ADDs and DELs make with the agent
    /// answering at once, over the time the ADDs spent between their registration and their
    /// return.
    pub(crate) fn waiting_rate(&self) -> f64 {
        let (add, del) = self.requests_per_call();
        let extra = self.ready.requests as f64 - self.ready.lag.n as f64 * (add + del);
        if self.ready.waiting_s > 0.0 {
            extra / self.ready.waiting_s
        } else {
            0.0
        }
    }
}

/// Half the plugin's poll period, ms: the mean wait from a ready moment to the next poll.
pub(crate) fn poll_half() -> f64 {
    contrail_k8s_cni::POLL_PERIOD.as_secs_f64() * 1000.0 / 2.0
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

/// The sync calls of one call by name, "2 fsync, 1 fdatasync"; "none" for none.
fn syncs(counts: &BTreeMap<String, u64>) -> String {
    let v: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// A count that should not vary: "3", or "3 (2-4 over the runs)" when it did.
fn count(v: &[f64]) -> String {
    let s = stats(v);
    if s.min == s.max {
        format!("{}", s.median)
    } else {
        format!("{} ({}-{} over the runs)", s.median, s.min, s.max)
    }
}

pub(crate) fn markdown(opts: &Opts, r: &Report) -> String {
    let mut m = String::new();
    let s = &r.single;
    let (ours_add, ptp_add) = (stats(&s.ours.add), stats(&s.ptp.add));
    let (ours_del, raw_del) = (stats(&s.ours.del), stats(&s.raw.del));
    let rss_of = |label: &str| s.rss.iter().find(|(l, _)| *l == label).map(|(_, r)| r);
    let peak = |labels: [&str; 2]| {
        labels
            .iter()
            .filter_map(|l| rss_of(l))
            .fold(0.0f64, |a, r| a.max(r.peak()))
    };
    let rss_ours = peak(["contrail-k8s-cni ADD", "contrail-k8s-cni DEL"]);
    let rss_ptp = peak(["ptp + static ADD", "ptp + static DEL"]);
    let (req_add, req_del) = r.requests_per_call();
    let rate = r.waiting_rate();
    let lag = &r.ready.lag;

    let _ = writeln!(m, "{BEGIN}\n");
    let _ = writeln!(m, "## Machine and versions\n");
    let _ = writeln!(m, "| | |\n|---|---|");
    for (k, v) in machine(opts, &r.load_start) {
        let _ = writeln!(m, "| {k} | {v} |");
    }
    let _ = writeln!(m, "\n## Targets\n");
    let _ = writeln!(
        m,
        "ADD and DEL from one interleaved loop (sections 1-2), the state directory on ext4 on a \
         loop device as on a node; peak RSS from section 3, the readiness lag from section 8.\n"
    );
    let _ = writeln!(m, "| target | measured | |\n|---|---|---|");
    let _ = writeln!(
        m,
        "| ADD median at most 0.5x ptp + static's (a guard: a tenth of a millisecond per call \
         is worth nothing next to the node's agent) | {} ms vs {} ms: {}x | {} |",
        f2(ours_add.median),
        f2(ptp_add.median),
        f2(ours_add.median / ptp_add.median),
        verdict(ours_add.median <= 0.5 * ptp_add.median)
    );
    let floor = r.floor();
    let _ = writeln!(
        m,
        "| DEL median at most 1.05x the raw netlink floor's | {} ms vs {} ms: {}x | {} |",
        f2(ours_del.median),
        f2(raw_del.median),
        f2(ours_del.median / raw_del.median),
        verdict(ours_del.median <= 1.05 * raw_del.median)
    );
    let _ = writeln!(
        m,
        "| peak RSS at most 0.5x ptp's | {rss_ours} KiB vs {rss_ptp} KiB: {}x | {} |",
        f2(rss_ours / rss_ptp),
        verdict(rss_ours <= 0.5 * rss_ptp)
    );
    let (ready_floor, noise) = (r.ready_floor(), r.ready_noise());
    let _ = writeln!(
        m,
        "| readiness lag median at its floor ({} ms, half the poll period, + the rest of the \
         ADD, median {} ms; within the sampling error of {} samples, {} ms), a waiting call \
         making at most 50 requests a second to the agent | median {} ms vs {} ms (worst {} \
         ms); {} requests per waiting second | {} |",
        f2(poll_half()),
        f2(r.ready.rest.median),
        lag.n,
        f2(noise),
        f2(lag.median),
        f2(ready_floor),
        f1(lag.max),
        f1(rate),
        verdict(lag.median <= ready_floor + noise && rate <= 50.0)
    );
    let p = &r.parallel;
    let _ = writeln!(
        m,
        "| {} pods ADDed in parallel without failure | {} ADD and {} DEL failures | {} |",
        p.pods,
        p.add_failures.len(),
        p.del_failures.len(),
        verdict(p.add_failures.is_empty() && p.del_failures.is_empty())
    );
    if let Some(full) = r.node.last() {
        let failures: usize = r
            .node
            .iter()
            .map(|n| n.add.failures.len() + n.del.failures.len())
            .sum();
        let problems: usize = r.node.iter().map(|n| n.problems.len()).sum();
        let _ = writeln!(
            m,
            "| a full node (up to {} pods x {} attachments, section 7): no failure, each \
             interface its own VMI's MAC, nothing left | {failures} failures, {problems} \
             problems found by the checks | {} |",
            full.pods,
            NODE_ATTACHMENTS.len(),
            verdict(failures == 0 && problems == 0)
        );
    }
    load_targets(&mut m, &r.storms, &r.quiets);
    let _ = writeln!(
        m,
        "\nAgent requests with the agent answering at once (counted by the simulator): {} per \
         ADD, {} per DEL.",
        count(&s.requests_add),
        count(&s.requests_del)
    );

    let _ = writeln!(
        m,
        "\n## 1-2. One attachment: ADD and DEL ({} runs each, interleaved, after {} warm-up \
         runs)\n",
        ours_add.n, r.warmup
    );
    let _ = writeln!(
        m,
        "Times in ms, from spawn to reaping (`wait4`); the raw rows are in-process. \
         The simulator answers at once.\n"
    );
    let _ = writeln!(
        m,
        "| | ADD median | ADD p95 | ADD min | DEL median | DEL p95 | DEL min | agent requests, ADD / DEL |\n|---|---|---|---|---|---|---|---|"
    );
    let rows = [
        ("contrail-k8s-cni", &s.ours),
        ("contrail-k8s-cni, vhost-user attachment", &s.vhost),
        ("ptp + static", &s.ptp),
        ("floor: raw rtnetlink (netns, sockets, operations)", &s.raw),
        ("raw rtnetlink, operations only", &s.raw_ops),
    ];
    for (name, v) in rows {
        let (a, d) = (stats(&v.add), stats(&v.del));
        let requests = if name == "contrail-k8s-cni" {
            format!("{req_add} / {req_del}")
        } else {
            "-".into()
        };
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} | {} | {} | {requests} |",
            f2(a.median),
            f2(a.p95),
            f2(a.min),
            f2(d.median),
            f2(d.p95),
            f2(d.min),
        );
    }
    for (name, v) in [
        ("floor: an empty static program (`cc -static`)", &s.empty),
        (
            "floor: the agent's requests of one ADD, one connection",
            &s.agent,
        ),
    ] {
        let a = stats(v);
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | | | | 3 / - |",
            f2(a.median),
            f2(a.p95),
            f2(a.min),
        );
    }
    let _ = writeln!(
        m,
        "| **floor of an ADD** (the three floor rows' medians) | {} | | | | | | |",
        f2(floor)
    );
    let (vo, vp, vt) = (
        stats(&s.version_ours),
        stats(&s.version_ptp),
        stats(&s.version_true),
    );
    let _ = writeln!(
        m,
        "\nStart-up alone (`VERSION`, median): contrail-k8s-cni {} ms, ptp {} ms, `/bin/true` \
         (dynamically linked) {} ms.",
        f2(vo.median),
        f2(vp.median),
        f2(vt.median),
    );
    let _ = writeln!(
        m,
        "\nptp's ADD execs `static` (two processes) and does a little more kernel work than \
         contrail-k8s-cni: it creates the veth inside the pod and moves the host end out, and \
         also puts the gateway address and a host route on the host end. contrail-k8s-cni's \
         ADD additionally makes {req_add} requests to the agent (the pod, the port \
         registration, the IP configuration) and writes its state file (no fsync, section 4) \
         under the pod lock; its DEL makes {req_del} (the deregistration) and removes the file. \
         The floor has no files and no parsing of its own; most of every DEL is the kernel's \
         veth deletion, which waits for an RCU grace period. The vhost-user row is the same \
         network as a vhost-user attachment on a DPDK node: `POST /port` instead of `POST /vm`, \
         the pod's directory, a symlink and a JSON file instead of a veth; its DEL makes one \
         request (`DELETE /port/<vmi>`) and deletes no kernel interface."
    );
    let _ = writeln!(
        m,
        "\nADD+DEL of each run, for comparison with earlier runs (no longer a target):\n"
    );
    let _ = writeln!(m, "| | median | p95 | min | max |\n|---|---|---|---|---|");
    for (name, v) in rows.iter().filter(|(n, _)| !n.starts_with("raw rtnetlink")) {
        let t = stats(&v.total);
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} |",
            f2(t.median),
            f2(t.p95),
            f2(t.min),
            f2(t.max)
        );
    }

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

    let _ = writeln!(m, "\n## 4. The state directory on other filesystems\n");
    let _ = writeln!(
        m,
        "One attachment's ADD and DEL with `config-dir` on ext4 on a loop device (a sparse 64 \
         MiB file, `mkfs.ext4 -q`, mounted in the benchmark's own mount namespace), where the \
         other phases keep it, on tmpfs, and in the benchmark's temporary directory; {} runs \
         each, interleaved, after {} warm-up runs. fsyncs: the fsync, fdatasync and \
         sync_file_range calls of one ADD and one DEL, by name, counted by `strace -f -c`.\n",
        r.disk.first().map_or(0, |d| d.add.len()),
        r.warmup
    );
    let _ = writeln!(
        m,
        "| filesystem | ADD median, ms | DEL median, ms | fsyncs per ADD | fsyncs per DEL |\n|---|---|---|---|---|"
    );
    for d in &r.disk {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            d.fs,
            f2(stats(&d.add).median),
            f2(stats(&d.del).median),
            syncs(&d.add_syncs),
            syncs(&d.del_syncs)
        );
    }

    let add_m = marginals(&r.thick, |t| t.add.median);
    let del_m = marginals(&r.thick, |t| t.del.median);
    let _ = writeln!(
        m,
        "\n## 5. Thick mode: one call for all of a pod's interfaces\n"
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

    let _ = writeln!(m, "\n## 6. {} pods ADDed in parallel\n", p.pods);
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
    let serial = ours_add.median * p.pods as f64;
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

    node_section(&mut m, r);

    let _ = writeln!(m, "\n## 8. Readiness lag\n");
    let extra = r.ready.requests as f64 - lag.n as f64 * (req_add + req_del);
    let _ = writeln!(
        m,
        "{} pods whose VMI gets its IP configuration at a random moment (`ip-delay-ms` uniform in \
         0..2000 after the registration, fixed seed), {} at a time; default `poll-timeout` and \
         `poll-retries`. Lag = when ADD returned minus the moment the simulator started answering \
         with the IP config (its registration time plus the delay); it includes the rest of the \
         ADD (addresses, routes) after the VMI is seen ready. The agent served {} requests during \
         these ADDs and their DELs: {} more than the same calls make with the agent answering at \
         once, made while the ADDs waited {} s in all (from their registration to their \
         return).\n",
        lag.n,
        r.workers,
        r.ready.requests,
        extra,
        f1(r.ready.waiting_s)
    );
    let _ = writeln!(
        m,
        "| | median, ms | p95, ms | worst, ms | best, ms |\n|---|---|---|---|---|"
    );
    for (name, st) in [
        ("lag", lag),
        (
            "its first part: the ready moment to the poll that saw it",
            &r.ready.seen,
        ),
        (
            "its second part: that poll to the ADD's return (the rest of the ADD)",
            &r.ready.rest,
        ),
    ] {
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} |",
            f1(st.median),
            f1(st.p95),
            f1(st.max),
            f1(st.min)
        );
    }
    let _ = writeln!(
        m,
        "\nA waiting call made {} requests per waiting second. The first part's floor is half \
         the plugin's poll period (`POLL_PERIOD`, {} ms): the ready moment falls anywhere \
         between two polls.",
        f1(rate),
        f1(2.0 * poll_half())
    );
    let _ = writeln!(
        m,
        "\nFor reference, the ADD median with the agent answering at once is {} ms.",
        f1(ours_add.median)
    );

    load_section(&mut m, &r.storms, &r.quiets);

    let svg = opts.svg.strip_prefix(&opts.repo).unwrap_or(&opts.svg);
    let _ = writeln!(m, "\n## Plot\n\n![latency]({})\n", svg.display());
    let _ = writeln!(m, "{END}");
    m
}

/// Section 9 alone, its targets and its tables (`--storm-only`).
pub(crate) fn load_only(storms: &[Storm], quiets: &[Quiet]) -> String {
    let mut m = String::from("| target | measured | |\n|---|---|---|\n");
    load_targets(&mut m, storms, quiets);
    load_section(&mut m, storms, quiets);
    m
}

/// The burst each lane of the node's budget may send at once, beyond the rate (the plugin's
/// `budget::BURST`).
const BURST: u64 = 10;
/// The default `agent-requests-per-second`.
const RATE: u64 = 200;

/// Section 9's targets: the storm and the quiet node under this build's policy, against the
/// build before the budget's (a poll every 21 ms) and the legacy model's.
fn load_targets(m: &mut String, storms: &[Storm], quiets: &[Quiet]) {
    let find = |role| storms.iter().find(|s| s.role == role);
    let (Some(ours), Some(fixed), Some(legacy)) = (
        find(Role::This),
        find(Role::FixedPeriod),
        find(Role::Legacy),
    ) else {
        return;
    };
    let bound = RATE + 2 * BURST;
    let _ = writeln!(
        m,
        "| the storm (section 9: {} pods x {} attachments at once, IP configurations {}-{} s \
         after registration, the agent's DB exclusion modelled): an ADD returns at most 300 ms \
         (median) beyond its IP delay | median {} ms ({} before its registration, {} after) | \
         {} |",
        ours.pods,
        NODE_ATTACHMENTS.len(),
        STORM_IP_DELAY_MS.0 / 1000,
        STORM_IP_DELAY_MS.1 / 1000,
        f1(ours.beyond.median),
        f1(ours.before_reg.median),
        f1(ours.after_reg.median),
        verdict(ours.beyond.median <= 300.0)
    );
    let _ = writeln!(
        m,
        "| the storm: the last pod whole at most 1.05x as late as with a poll every 21 ms per \
         call (the same run) | {} s vs {} s: {}x | {} |",
        f1(ours.whole_s),
        f1(fixed.whole_s),
        f2(ours.whole_s / fixed.whole_s),
        verdict(ours.whole_s <= 1.05 * fixed.whole_s)
    );
    for s in storms
        .iter()
        .filter(|s| matches!(s.role, Role::This | Role::ThisBusy))
    {
        let _ = writeln!(
            m,
            "| the storm{}: at most {bound} requests in any one second (sliding) at the default \
             budget, R + a burst of each lane | {} | {} |",
            if s.role == Role::ThisBusy {
                ", every core kept busy"
            } else {
                ""
            },
            s.sliding_peak,
            verdict(s.sliding_peak <= bound)
        );
    }
    let _ = writeln!(
        m,
        "| the storm: the DB queue delay the requests caused to the agent's config work, p99 \
         at most 100 ms | p99 {} ms (median {} ms) | {} |",
        f1(ours.by_requests.p99),
        f1(ours.by_requests.median),
        verdict(ours.by_requests.p99 <= 100.0)
    );
    let broken: Vec<&Storm> = storms
        .iter()
        .filter(|s| matches!(s.role, Role::This | Role::ThisBusy))
        .collect();
    let failures: usize = broken.iter().map(|s| s.failures.len()).sum();
    let problems: usize = broken.iter().map(|s| s.problems.len()).sum();
    let _ = writeln!(
        m,
        "| the storm, idle and busy: every ADD and DEL succeeds, each interface its own VMI's \
         MAC, nothing left | {failures} failures, {problems} problems | {} |",
        verdict(failures + problems == 0)
    );
    let _ = writeln!(
        m,
        "| the storm: every pod whole no later than under the legacy model | {} s vs {} s | {} |",
        f1(ours.whole_s),
        f1(legacy.whole_s),
        verdict(ours.whole_s <= legacy.whole_s)
    );
    if let Some(quiet) = quiets.iter().find(|q| q.role == Role::This) {
        let _ = writeln!(
            m,
            "| the quiet node (one pod, its IP configuration {QUIET_IP_DELAY_MS} ms after \
             registration): the ADD returns at most 25 ms (median) after the IP configuration \
             exists | median {} ms (worst {} ms, {} samples) | {} |",
            f1(quiet.lag.median),
            f1(quiet.lag.max),
            quiet.lag.n,
            verdict(quiet.lag.median <= 25.0)
        );
    }
}

/// Section 9: the node under load, the policies side by side.
fn load_section(m: &mut String, storms: &[Storm], quiets: &[Quiet]) {
    let Some(first) = storms.first() else {
        return;
    };
    let _ = writeln!(m, "\n## 9. The node under load: polling policies\n");
    let _ = writeln!(
        m,
        "The simulator models the agent's DB exclusion (`--exclusion`): every request holds \
         the agent's DB for 0.25 ms, every VMI's config work (after its controller delay) 2 \
         ms, first come, first served; a VMI's IP configuration exists once its work is done. \
         The storm: {} pods x {} attachments ADDed at once (each pod's in Multus's order), \
         every IP configuration {}-{} s after its registration (uniform, fixed seed), then \
         every pod's DELs (in reverse); a fresh simulator and state directory per policy. \
         \"Every core kept busy\": the same storm beside one stress-ng CPU hog per core. The \
         legacy model sends the legacy Go CNI's requests (`GET /vm-cfg`, `POST /vm`, then \
         `GET /vm/<vm>/<vmi>` at once and every 3 s; its DEL one `DELETE /vm/<vm>`) and makes \
         no interfaces. The busiest second is counted in whole seconds of the simulator's \
         clock, and sliding (any second, from each request's arrival, the DELs' too); the mean \
         from the first second with requests to the last.\n",
        first.pods,
        NODE_ATTACHMENTS.len(),
        STORM_IP_DELAY_MS.0 / 1000,
        STORM_IP_DELAY_MS.1 / 1000,
    );
    let _ = write!(m, "| |");
    for s in storms {
        let _ = write!(m, " {} |", s.role.name());
    }
    let _ = write!(m, "\n|---|");
    for _ in storms {
        let _ = write!(m, "---|");
    }
    let _ = writeln!(m);
    let row = |m: &mut String, name: &str, cell: &dyn Fn(&Storm) -> String| {
        let _ = write!(m, "| {name} |");
        for s in storms {
            let _ = write!(m, " {} |", cell(s));
        }
        let _ = writeln!(m);
    };
    let spread = |st: &Stats| format!("{}, {}, {}", f1(st.median), f1(st.p95), f1(st.max));
    row(m, "ADD requests in all", &|s| s.requests.to_string());
    row(m, "per second: busiest, busiest sliding, mean", &|s| {
        format!("{}, {}, {}", s.peak, s.sliding_peak, f1(s.mean))
    });
    row(
        m,
        "share of the agent's time its DB was held by requests",
        &|s| format!("{}%", f1(100.0 * s.db_share)),
    );
    row(
        m,
        "DB queue delay the requests caused to each VMI's config work, ms: median, p99",
        &|s| format!("{}, {}", f1(s.by_requests.median), f1(s.by_requests.p99)),
    );
    row(
        m,
        "the same, all queueing (requests and other work), ms: median, p99",
        &|s| format!("{}, {}", f1(s.queued.median), f1(s.queued.p99)),
    );
    row(
        m,
        "ADD time beyond its IP delay, ms: median, p95, worst",
        &|s| spread(&s.beyond),
    );
    row(
        m,
        "of which before its registration, ms: median, p95, worst",
        &|s| spread(&s.before_reg),
    );
    row(
        m,
        "and after it (the IP delay taken off), ms: median, p95, worst",
        &|s| spread(&s.after_reg),
    );
    row(m, "time until every pod is whole, s", &|s| f1(s.whole_s));
    row(m, "DEL requests in all", &|s| s.del_requests.to_string());
    row(m, "failures, problems found", &|s| {
        format!("{}, {}", s.failures.len(), s.problems.len())
    });
    let _ = writeln!(m, "\nRequests by kind (ADDs, then DELs):\n");
    for s in storms {
        let kinds = |k: &BTreeMap<String, u64>| {
            k.iter()
                .map(|(kind, n)| format!("{kind}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            m,
            "- {}: {}; DEL: {}",
            s.role.name(),
            kinds(&s.by_kind),
            kinds(&s.del_by_kind)
        );
    }
    for f in storms
        .iter()
        .flat_map(|s| s.failures.iter().chain(&s.problems))
        .take(3)
    {
        let _ = writeln!(m, "\nFound: `{}`", f.replace('`', "'"));
    }
    let _ = writeln!(
        m,
        "\nThe quiet node: one pod, its IP configuration {QUIET_IP_DELAY_MS} ms after its \
         registration (plus its 2 ms of DB work); lag = the ADD's return (the model: the poll \
         that saw it) minus the moment the IP configuration exists.\n"
    );
    let _ = writeln!(
        m,
        "| | lag median, ms | p95, ms | worst, ms | requests per ADD |\n|---|---|---|---|---|"
    );
    for q in quiets {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            q.role.name(),
            f1(q.lag.median),
            f1(q.lag.p95),
            f1(q.lag.max),
            f1(q.requests)
        );
    }
}

/// Section 7: the full node's rounds, and what its checks found.
fn node_section(m: &mut String, r: &Report) {
    let Some(full) = r.node.last() else {
        return;
    };
    let _ = writeln!(
        m,
        "\n## 7. A full node: up to {} pods with {} attachments each\n",
        full.pods,
        NODE_ATTACHMENTS.len()
    );
    let _ = writeln!(
        m,
        "Each pod as Multus attaches it: eth0 on the cluster network (config name \
         `contrail-k8s-cni`), net1 and net2 on net-a (one network twice), net3 on net-b; one \
         VMI each, whose IP configuration comes at a random moment 0..{NODE_IP_DELAY_MS} ms \
         after its registration (fixed seed). A pod's calls run in one sandbox in Multus's \
         order (ADD eth0, net1, net2, net3; DEL the reverse); the pods run in parallel, one \
         thread each, released together. Checked after the ADDs: each pod has exactly these \
         interfaces, each with its own VMI's MAC (`ip -j link show` in the pod; MACs are \
         unique on the node, so no VMI serves two), every VMI is registered; after the DELs: no \
         link but lo in the node and the pods, nothing in the state directory but its empty \
         lock directory, no registration left. Per pod: all done after / pods.\n"
    );
    let _ = writeln!(
        m,
        "| pods | ADD: all done after, ms | ADD per pod, ms | one pod's ADDs, median ms | agent requests | DEL: all done after, ms | DEL per pod, ms | one pod's DELs, median ms | agent requests | failures | checks |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for n in &r.node {
        let checks = if n.problems.is_empty() {
            "passed".to_string()
        } else {
            format!("**{} problems**", n.problems.len())
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {checks} |",
            n.pods,
            f1(n.add.total),
            f1(n.add.total / n.pods as f64),
            f1(n.add.pod.median),
            n.add.requests,
            f1(n.del.total),
            f1(n.del.total / n.pods as f64),
            f1(n.del.pod.median),
            n.del.requests,
            n.add.failures.len() + n.del.failures.len()
        );
    }
    let attachments = (full.pods * NODE_ATTACHMENTS.len()) as f64;
    let _ = writeln!(
        m,
        "\nThe agent's requests per attachment in the round of {} pods, by method, route and \
         answer (counted by the simulator). A 404 of a GET is a poll that found nothing yet \
         (or, for a repeated network, the one look at whether a VMI is registered yet); \
         every other request is one of the call's own steps.\n",
        full.pods
    );
    let _ = writeln!(m, "| request | per ADD | per DEL |\n|---|---|---|");
    let kinds: BTreeSet<&String> = full
        .add
        .by_kind
        .keys()
        .chain(full.del.by_kind.keys())
        .collect();
    let per = |w: &Wave, k: &str| w.by_kind.get(k).copied().unwrap_or(0) as f64 / attachments;
    for k in &kinds {
        let _ = writeln!(
            m,
            "| `{k}` | {} | {} |",
            f2(per(&full.add, k)),
            f2(per(&full.del, k))
        );
    }
    let split = |w: &Wave| {
        let polls: u64 = w
            .by_kind
            .iter()
            .filter(|(k, _)| k.starts_with("GET ") && k.ends_with(" 404"))
            .map(|(_, n)| n)
            .sum();
        let n = attachments;
        ((w.requests - polls) as f64 / n, polls as f64 / n)
    };
    let ((add_steps, add_polls), (del_steps, del_polls)) = (split(&full.add), split(&full.del));
    let _ = writeln!(
        m,
        "| **steps** (not a 404 of a GET) | {} | {} |\n| **polls** (a 404 of a GET) | {} | {} |",
        f2(add_steps),
        f2(del_steps),
        f2(add_polls),
        f2(del_polls)
    );
    let found = r.node.iter().flat_map(|n| {
        n.add
            .failures
            .iter()
            .chain(&n.del.failures)
            .chain(&n.problems)
    });
    for f in found.take(3) {
        let _ = writeln!(m, "\nFound: `{}`", f.replace('`', "'"));
    }
}

pub(crate) const SKELETON_HEAD: &str = "# Benchmarks\n\n\
Run `scripts/bench` as root. It builds the release binary, the simulator and the benchmark \
(`bench/`) into `target/bench` and the thick build into `target/bench-thick`, runs the \
benchmark and rewrites the generated section below and `benchmarks/latency.svg`; the text \
outside the generated section is kept. `scripts/bench --quick` is a smoke run that writes \
nothing; `scripts/bench --compare OTHER_BIN` measures ADD, DEL and peak RSS of this build \
against another, interleaved, for trying a change.\n\n";

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
