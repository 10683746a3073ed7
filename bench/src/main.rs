//! Benchmark of the release binary, run by `scripts/bench` (not part of the test suite).
//!
//! Usage: bench --plugin BIN --thick-plugin BIN --sim BIN [--cni-dir /usr/lib/cni]
//!        [--repo DIR] [--md BENCHMARKS.md] [--svg benchmarks/latency.svg] [--quick]
//!        [--static-plugin BIN] [--compare OTHER_BIN]
//!
//! `--static-plugin` adds the same code linked as a static PIE to the single-attachment and
//! RSS measurements. `--compare` measures only ADD+DEL and peak RSS of `--plugin` against another build of it,
//! interleaved, and prints the result without writing anything: for trying a change.
//!
//! Everything runs inside a private "node": a network namespace and a mount namespace (with
//! its own sysfs) that this program enters at start, so host-side veths, ptp's `ip_forward`,
//! the simulator's loopback and the pods' /run/netns mounts never touch the machine's own, and
//! all of it vanishes with the process. One agent simulator answers at once. Pod namespaces
//! (`ip netns add`), the temporary directory and the simulator are removed by guards, also on
//! SIGINT/SIGTERM. Plugins are executed the way runtimes do (environment + config on stdin),
//! timed from spawn to the reaping `wait4`. Peak RSS is read under ptrace from each process's
//! `/proc/<pid>/status` as it exits (see `traced_rss` for why not `ru_maxrss`).
//!
//! Measured:
//! 1. ADD+DEL of one attachment: contrail-k8s-cni against Debian's ptp + static IPAM doing
//!    the equivalent kernel work, interleaved in one loop;
//! 2. the same work as bare in-process rtnetlink calls (the floor);
//! 3. peak RSS and binary size;
//! 4. thick mode with 1, 4, 16 and 64 interfaces: time per interface;
//! 5. 64 pods ADDed (then DELed) in parallel, each in its own netns;
//! 6. readiness lag: the VMI's IP config appears at a random moment, how long after it
//!    does ADD return.
//!
//! Results go to the generated section of BENCHMARKS.md (the text around it is kept) and to
//! an SVG plot. Progress goes to stderr.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use nix::sched::{CloneFlags, setns, unshare};
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};
use serde_json::{Value, json};

type R<T> = Result<T, String>;

const BEGIN: &str = "<!-- scripts/bench: generated section, rewritten on every run -->";
const END: &str = "<!-- scripts/bench: end of generated section -->";
/// Container-side address and gateway of every single-interface pod.
const POD_ADDR: &str = "10.1.0.11";
const POD_GW: &str = "10.1.0.1";
const POD_MAC: [u8; 6] = [0x02, 0xbe, 0x4c, 0x00, 0x00, 0x0b];
const THICK_SIZES: [usize; 4] = [1, 4, 16, 64];

// ------------------------------------------------------------------------------ options

struct Opts {
    plugin: PathBuf,
    thick: PathBuf,
    sim: PathBuf,
    cni_dir: PathBuf,
    repo: PathBuf,
    md: PathBuf,
    svg: PathBuf,
    quick: bool,
    /// A second build to compare with `plugin`, ADD+DEL and RSS only (`--compare BIN`).
    compare: Option<PathBuf>,
    /// The same code linked as a static PIE (`--static-plugin BIN`): measured next to it.
    static_plugin: Option<PathBuf>,
}

impl Opts {
    fn parse() -> R<Opts> {
        let mut it = std::env::args().skip(1);
        let mut m: BTreeMap<String, String> = BTreeMap::new();
        let mut quick = false;
        while let Some(flag) = it.next() {
            if flag == "--quick" {
                quick = true;
                continue;
            }
            let v = it.next().ok_or(format!("{flag} needs a value"))?;
            m.insert(flag.trim_start_matches("--").to_string(), v);
        }
        let mut take = |k: &str, default: Option<&str>| -> R<PathBuf> {
            m.remove(k)
                .or(default.map(str::to_string))
                .map(PathBuf::from)
                .ok_or(format!("--{k} is required"))
        };
        let o = Opts {
            plugin: take("plugin", None)?,
            thick: take("thick-plugin", None)?,
            sim: take("sim", None)?,
            cni_dir: take("cni-dir", Some("/usr/lib/cni"))?,
            repo: take("repo", Some("."))?,
            md: take("md", Some("BENCHMARKS.md"))?,
            svg: take("svg", Some("benchmarks/latency.svg"))?,
            quick,
            compare: m.remove("compare").map(PathBuf::from),
            static_plugin: m.remove("static-plugin").map(PathBuf::from),
        };
        if let Some(k) = m.keys().next() {
            return Err(format!("unknown option --{k}"));
        }
        for p in [&o.plugin, &o.thick, &o.sim] {
            if !p.exists() {
                return Err(format!(
                    "{} does not exist (scripts/bench builds it)",
                    p.display()
                ));
            }
        }
        Ok(o)
    }

    fn ptp(&self) -> PathBuf {
        self.cni_dir.join("ptp")
    }
}

/// How much to measure: the full run, or a smoke test for working on the bench itself.
struct Sizes {
    runs: usize,
    warmup: usize,
    version_runs: usize,
    thick_reps: [usize; 4],
    parallel: usize,
    ready: usize,
    ready_workers: usize,
    rss_runs: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                runs: 20,
                warmup: 2,
                version_runs: 20,
                thick_reps: [4, 3, 2, 2],
                parallel: 16,
                ready: 12,
                ready_workers: 4,
                rss_runs: 3,
            }
        } else {
            Sizes {
                runs: 200,
                warmup: 10,
                version_runs: 200,
                thick_reps: [30, 20, 12, 8],
                parallel: 64,
                ready: 80,
                ready_workers: 4,
                rss_runs: 20,
            }
        }
    }
}

// ------------------------------------------------------------------------------ interruption

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM only set a flag: the loops stop at the next step and every guard runs.
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn check_interrupt() -> R<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

// ------------------------------------------------------------------------------ guards

fn sh(cmd: &str, args: &[&str]) -> R<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn uuid() -> String {
    fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "00000000-0000-4000-8000-000000000000".into())
}

/// A pod network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> R<Netns> {
        let name = format!("ckbench-{}-{tag}", std::process::id());
        sh("ip", &["netns", "add", &name])?;
        let ns = Netns { name };
        sh("ip", &["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    fn ifnames(&self) -> R<Vec<String>> {
        let v: Value = serde_json::from_str(&sh("ip", &["-n", &self.name, "-j", "link"])?)
            .map_err(|e| e.to_string())?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// What a single-interface ADD must leave: eth0 with the pod address, a default route.
    fn assert_attached(&self, who: &str) -> R<()> {
        let addr = sh(
            "ip",
            &["-n", &self.name, "-4", "-o", "addr", "show", "dev", "eth0"],
        )?;
        let route = sh("ip", &["-n", &self.name, "-4", "route", "show", "default"])?;
        if !addr.contains(&format!("{POD_ADDR}/24")) || !route.contains(POD_GW) {
            return Err(format!(
                "{who}: eth0 not set up as expected: {addr:?} {route:?}"
            ));
        }
        Ok(())
    }

    fn assert_empty(&self, who: &str) -> R<()> {
        let names = self.ifnames()?;
        if names != ["lo"] {
            return Err(format!("{who}: left {names:?} in {}", self.name));
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> R<TempDir> {
        let p = std::env::temp_dir().join(format!("ckbench-{}", std::process::id()));
        fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The agent simulator on an ephemeral loopback port, killed on drop (and by the kernel if
/// this program dies first: PR_SET_PDEATHSIG).
struct Sim {
    child: Child,
    port: u16,
}

impl Sim {
    fn start(bin: &Path, pods_file: &Path) -> R<Sim> {
        let mut cmd = Command::new(bin);
        cmd.args([
            "--pods",
            &pods_file.to_string_lossy(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("simulator stdout")?;
        let _ = BufReader::new(stdout).read_line(&mut line);
        let mut sim = Sim { child, port: 0 };
        sim.port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or(format!("simulator did not start: {line:?}"))?;
        Ok(sim)
    }

    /// A GET the plugin does not make: names the pod, which starts the simulator's delay
    /// clock for it. Returns when the answer is in.
    /// One GET on a fresh connection; the body, read by its Content-Length (the simulator
    /// keeps connections open, as the agent does).
    fn get(&self, path: &str) -> R<Value> {
        let e = |e: std::io::Error| format!("GET {path}: {e}");
        let s = TcpStream::connect(("127.0.0.1", self.port)).map_err(e)?;
        let mut r = BufReader::new(s);
        write!(
            r.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        .map_err(e)?;
        let mut length = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).map_err(e)?;
            if line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("GET {path}: bad length"))?;
                }
            }
        }
        let mut body = vec![0; length];
        r.read_exact(&mut body).map_err(e)?;
        serde_json::from_slice(&body).map_err(|x| format!("GET {path}: {x}"))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------ executing a plugin

/// One plugin execution: how it ended, how long it took, its peak RSS.
struct Call {
    ok: bool,
    start: Instant,
    end: Instant,
    maxrss_kb: u64,
    stdout: String,
    stderr: String,
}

impl Call {
    fn ms(&self) -> f64 {
        ms(self.end - self.start)
    }

    fn describe(&self) -> String {
        format!(
            "stdout={} stderr={}",
            self.stdout.trim(),
            self.stderr.trim()
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `Instant` of a CLOCK_MONOTONIC reading (nanoseconds) taken by another process.
fn instant_of(monotonic_ns: u64) -> Instant {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let now = Instant::now();
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    let now_ns = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
    now - Duration::from_nanos(now_ns.saturating_sub(monotonic_ns))
}

/// Runs a CNI plugin as a runtime does: a clean environment, the config on stdin. stdin,
/// stdout and stderr are files opened before the clock starts, so both plugins pay the same
/// and no pipe can fill up. Timed from spawn to the reaping `wait4`.
fn exec(bin: &Path, env: &[(&str, &str)], stdin: &Path, scratch: &Path) -> R<Call> {
    let io = |e: std::io::Error| format!("{}: {e}", scratch.display());
    let out_path = scratch.with_extension("out");
    let err_path = scratch.with_extension("err");
    let input = File::open(stdin).map_err(io)?;
    let out = File::create(&out_path).map_err(io)?;
    let err = File::create(&err_path).map_err(io)?;
    let start = Instant::now();
    let child = Command::new(bin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(input)
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; the pid is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("wait4: {e}"));
        }
    }
    let end = Instant::now();
    drop(child); // reaped above; dropping a Child neither waits nor kills
    Ok(Call {
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        start,
        end,
        maxrss_kb: ru.ru_maxrss as u64,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    })
}

/// Memory of one process of a call, KiB: peak RSS (`VmHWM`), and at exit its private
/// (anonymous) and file-backed (binary, libraries: shared page cache) parts.
#[derive(Clone, Debug)]
struct Peak {
    name: String,
    hwm: u64,
    anon: u64,
    file: u64,
}

/// The peak RSS (`VmHWM`) of every process one call runs, largest first.
///
/// `wait4`'s `ru_maxrss` cannot tell this: a child started with vfork/`CLONE_VM` (Rust's
/// `Command`, Go's `os/exec`) inherits, at `execve`, the high-water mark of the memory it
/// borrowed, so every child would show at least this program's own RSS. Instead the call runs
/// under ptrace (`PTRACE_O_TRACEEXIT`, following forks, vforks, clones and execs), and each
/// process's `/proc/<pid>/status` is read when it stops on its way out, with its memory still
/// mapped. Slow, so it runs apart from the timed calls. The caller must have no other child
/// that could exit meanwhile (the simulator does not).
fn traced_rss(
    bin: &Path,
    env: &[(&str, &str)],
    stdin: &Path,
    scratch: &Path,
) -> R<(bool, Vec<Peak>)> {
    use std::collections::{HashMap, HashSet};
    let io = |e: std::io::Error| format!("{}: {e}", scratch.display());
    let input = File::open(stdin).map_err(io)?;
    let out = File::create(scratch.with_extension("out")).map_err(io)?;
    let err = File::create(scratch.with_extension("err")).map_err(io)?;
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(input)
        .stdout(out)
        .stderr(err);
    // SAFETY: ptrace(TRACEME) is async-signal-safe; the child stops at its execve.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
    let root = child.id() as libc::pid_t;
    drop(child);
    let wait = |pid: libc::pid_t| -> R<(libc::pid_t, libc::c_int)> {
        let mut st = 0;
        loop {
            // SAFETY: plain syscall with a pointer to a local.
            let w = unsafe { libc::waitpid(pid, &mut st, libc::__WALL) };
            if w > 0 {
                return Ok((w, st));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("waitpid: {e}"));
            }
        }
    };
    let cont = |pid: libc::pid_t, sig: libc::c_int| {
        // SAFETY: pid is a stopped tracee of ours.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, sig as libc::c_long) };
    };
    let (_, st) = wait(root)?;
    if !libc::WIFSTOPPED(st) {
        return Err(format!("{}: did not stop at exec", bin.display()));
    }
    let opts = libc::PTRACE_O_TRACEEXIT
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_EXITKILL;
    // SAFETY: root is stopped and traced by us.
    unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, root, 0, opts as libc::c_long) };
    cont(root, 0);
    let mut live: HashSet<libc::pid_t> = HashSet::from([root]);
    let mut peaks: HashMap<libc::pid_t, Peak> = HashMap::new();
    let mut ok = false;
    while !live.is_empty() {
        let (w, st) = wait(-1)?;
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            live.remove(&w);
            if w == root {
                ok = libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0;
            }
            continue;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        let event = (st >> 16) & 0xff;
        let sig = libc::WSTOPSIG(st);
        let first = live.insert(w);
        if event == libc::PTRACE_EVENT_EXIT {
            let status = fs::read_to_string(format!("/proc/{w}/status")).unwrap_or_default();
            let field = |k: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim().trim_end_matches(" kB").trim().to_string())
            };
            // Threads share their process's memory: count the thread-group leader once.
            if field("Tgid:") == field("Pid:") {
                let kb = |k: &str| field(k).and_then(|v| v.parse().ok()).unwrap_or(0);
                let peak = Peak {
                    name: field("Name:").unwrap_or_default(),
                    hwm: kb("VmHWM:"),
                    anon: kb("RssAnon:"),
                    file: kb("RssFile:"),
                };
                peaks.insert(w, peak);
            }
            cont(w, 0);
        } else if event != 0 || (first && sig == libc::SIGSTOP) || sig == libc::SIGTRAP {
            // fork/vfork/clone/exec events, a new tracee's first stop: nothing to deliver.
            cont(w, 0);
        } else {
            cont(w, sig);
        }
    }
    let mut v: Vec<Peak> = peaks.into_values().collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.hwm));
    Ok((ok, v))
}

/// Environment of one CNI call.
struct CniEnv {
    command: &'static str,
    container_id: String,
    netns: String,
    ifname: String,
    pod: String,
    cni_path: String,
    conf_dir: String,
}

impl CniEnv {
    fn vars(&self) -> Vec<(&str, String)> {
        vec![
            ("CNI_COMMAND", self.command.to_string()),
            ("CNI_CONTAINERID", self.container_id.clone()),
            ("CNI_NETNS", self.netns.clone()),
            ("CNI_IFNAME", self.ifname.clone()),
            (
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};\
                     K8S_POD_INFRA_CONTAINER_ID={}",
                    self.pod, self.container_id
                ),
            ),
            ("CNI_PATH", self.cni_path.clone()),
            ("CONTRAIL_CNI_CONF_DIR", self.conf_dir.clone()),
        ]
    }

    fn run(&self, bin: &Path, stdin: &Path, scratch: &Path) -> R<Call> {
        let vars = self.vars();
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        exec(bin, &env, stdin, scratch)
    }

    fn traced(&self, bin: &Path, stdin: &Path, scratch: &Path) -> R<(bool, Vec<Peak>)> {
        let vars = self.vars();
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        traced_rss(bin, &env, stdin, scratch)
    }

    fn with(&self, command: &'static str) -> CniEnv {
        CniEnv {
            command,
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            pod: self.pod.clone(),
            cni_path: self.cni_path.clone(),
            conf_dir: self.conf_dir.clone(),
        }
    }
}

/// An ADD must succeed and print a result with interfaces; anything else is a failure.
fn expect_add(who: &str, c: &Call) -> R<()> {
    let result: Value = serde_json::from_str(&c.stdout).unwrap_or(Value::Null);
    if c.ok && result["interfaces"].is_array() {
        Ok(())
    } else {
        Err(format!("{who} ADD failed: {}", c.describe()))
    }
}

fn expect_del(who: &str, c: &Call) -> R<()> {
    if c.ok {
        Ok(())
    } else {
        Err(format!("{who} DEL failed: {}", c.describe()))
    }
}

// ------------------------------------------------------------------------------ the simulated pods

struct Vmi {
    uuid: String,
    network: &'static str,
    n: usize,
    ip_delay_ms: u64,
}

impl Vmi {
    fn new(network: &'static str, n: usize) -> Vmi {
        Vmi {
            uuid: uuid(),
            network,
            n,
            ip_delay_ms: 0,
        }
    }

    fn json(&self) -> Value {
        let n = self.n;
        let mut mac = POD_MAC;
        mac[4] = (n >> 8) as u8;
        mac[5] = n as u8;
        let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
        json!({
            "uuid": self.uuid, "network": self.network, "mac": mac.join(":"),
            "ip": format!("10.{n}.0.{}/24", n + 10), "gateway": format!("10.{n}.0.1"),
            "ip-delay-ms": self.ip_delay_ms,
        })
    }
}

struct Pod {
    name: String,
    vmis: Vec<Vmi>,
}

impl Pod {
    /// A pod of `n` VMIs: index 0 on the cluster network (10.1.0.11/24), the rest on net-a.
    fn new(name: String, n: usize) -> Pod {
        let vmis = (1..=n)
            .map(|k| Vmi::new(if k == 1 { "default" } else { "net-a" }, k))
            .collect();
        Pod { name, vmis }
    }

    fn json(&self) -> Value {
        json!({"name": self.name, "namespace": "default", "uuid": uuid(),
               "vmis": self.vmis.iter().map(Vmi::json).collect::<Vec<_>>()})
    }
}

// ------------------------------------------------------------------------------ statistics

#[derive(Clone, Copy, Default)]
struct Stats {
    n: usize,
    median: f64,
    p95: f64,
    min: f64,
    max: f64,
}

fn stats(v: &[f64]) -> Stats {
    if v.is_empty() {
        return Stats::default();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Stats {
        n: s.len(),
        median,
        p95: rank(0.95),
        min: s[0],
        max: s[s.len() - 1],
    }
}

/// Deterministic delays: the same run-to-run (xorshift64*, fixed seed).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }
}

// ------------------------------------------------------------------------------ the bench

/// Everything the phases share.
struct Ctx {
    opts: Opts,
    sizes: Sizes,
    dir: TempDir,
    sim: Sim,
    /// Config files on stdin, by purpose.
    ours_conf: PathBuf,
    thick_conf: PathBuf,
    ptp_conf: PathBuf,
    version_conf: PathBuf,
    bench_pod: Pod,
    thick_pods: Vec<Pod>,
    parallel_pods: Vec<Pod>,
    ready_pods: Vec<Pod>,
    load_start: String,
}

impl Ctx {
    fn env(&self, command: &'static str, netns: &Netns, pod: &str) -> CniEnv {
        CniEnv {
            command,
            container_id: uuid().replace('-', ""),
            netns: netns.path(),
            ifname: "eth0".into(),
            pod: pod.to_string(),
            cni_path: self.opts.cni_dir.to_string_lossy().into_owned(),
            conf_dir: self.dir.0.join("node-conf").to_string_lossy().into_owned(),
        }
    }

    fn scratch(&self, tag: &str) -> PathBuf {
        self.dir.0.join("io").join(tag)
    }
}

fn setup(opts: Opts) -> R<Ctx> {
    let load_start = loadavg();
    let sizes = Sizes::new(opts.quick);
    let dir = TempDir::new()?;
    for sub in ["io", "node-conf", "ports"] {
        fs::create_dir_all(dir.0.join(sub)).map_err(|e| e.to_string())?;
    }
    let bench_pod = Pod::new("bench".into(), 1);
    let thick_pods: Vec<Pod> = THICK_SIZES
        .iter()
        .map(|&n| Pod::new(format!("thick-{n}"), n))
        .collect();
    let parallel_pods: Vec<Pod> = (0..sizes.parallel)
        .map(|i| Pod::new(format!("par-{i}"), 1))
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let ready_pods: Vec<Pod> = (0..sizes.ready)
        .map(|i| {
            let mut p = Pod::new(format!("ready-{i}"), 1);
            p.vmis[0].ip_delay_ms = rng.below(2000);
            p
        })
        .collect();
    let all: Vec<Value> = std::iter::once(&bench_pod)
        .chain(&thick_pods)
        .chain(&parallel_pods)
        .chain(&ready_pods)
        .map(Pod::json)
        .collect();
    let pods_file = dir.0.join("pods.json");
    fs::write(&pods_file, json!({ "pods": all }).to_string()).map_err(|e| e.to_string())?;
    let sim = Sim::start(&opts.sim, &pods_file)?;

    let contrail = json!({
        "vrouter-port": sim.port,
        "config-dir": dir.0.join("ports"),
        "log-file": dir.0.join("cni.log"),
    });
    let write = |name: &str, v: Value| -> R<PathBuf> {
        let p = dir.0.join(name);
        fs::write(&p, v.to_string()).map_err(|e| e.to_string())?;
        Ok(p)
    };
    let ours_conf = write(
        "ours.json",
        json!({"cniVersion": "1.0.0", "name": "contrail-k8s-cni", "type": "contrail-k8s-cni",
               "contrail": contrail}),
    )?;
    let mut thick_contrail = contrail.clone();
    thick_contrail["mode"] = json!("thick");
    let thick_conf = write(
        "thick.json",
        json!({"cniVersion": "1.0.0", "name": "contrail-k8s-cni", "type": "contrail-k8s-cni",
               "contrail": thick_contrail}),
    )?;
    // ptp + static doing what contrail-k8s-cni does for one attachment: a veth pair with the
    // container end in the pod, its address, the default route.
    let ptp_conf = write(
        "ptp.json",
        json!({"cniVersion": "1.0.0", "name": "bench", "type": "ptp", "mtu": 1500,
               "ipam": {"type": "static",
                        "addresses": [{"address": format!("{POD_ADDR}/24"), "gateway": POD_GW}],
                        "routes": [{"dst": "0.0.0.0/0", "gw": POD_GW}]}}),
    )?;
    let version_conf = write("version.json", json!({"cniVersion": "1.0.0"}))?;
    Ok(Ctx {
        opts,
        sizes,
        dir,
        sim,
        ours_conf,
        thick_conf,
        ptp_conf,
        version_conf,
        bench_pod,
        thick_pods,
        parallel_pods,
        ready_pods,
        load_start,
    })
}

// ---------------------------------------------------------------- 1-3: one attachment

#[derive(Default)]
struct Variant {
    add: Vec<f64>,
    del: Vec<f64>,
    total: Vec<f64>,
}

impl Variant {
    fn push(&mut self, add: f64, del: f64) {
        self.add.push(add);
        self.del.push(del);
        self.total.push(add + del);
    }
}

/// Peak RSS of one kind of call over its runs: of the largest process of each run, and per
/// process name.
#[derive(Default)]
struct Rss {
    largest: Vec<f64>,
    /// Sum over the call's processes of their private memory at exit.
    anon: Vec<f64>,
    /// Per process name: the largest peak, with its private and file-backed parts.
    by_process: BTreeMap<String, Peak>,
}

impl Rss {
    fn push(&mut self, call: &str, (ok, peaks): (bool, Vec<Peak>)) -> R<()> {
        if !ok {
            return Err(format!("{call} failed under ptrace"));
        }
        self.largest
            .push(peaks.first().map_or(0.0, |p| p.hwm as f64));
        self.anon.push(peaks.iter().map(|p| p.anon as f64).sum());
        for p in peaks {
            let e = self.by_process.entry(p.name.clone()).or_insert(p.clone());
            if p.hwm > e.hwm {
                *e = p;
            }
        }
        Ok(())
    }

    fn peak(&self) -> f64 {
        self.largest.iter().fold(0.0, |a, &b| a.max(b))
    }

    fn processes(&self) -> String {
        let v: Vec<String> = self
            .by_process
            .iter()
            .map(|(n, p)| format!("{n} {} ({} private + {} file)", p.hwm, p.anon, p.file))
            .collect();
        v.join(", ")
    }
}

struct Single {
    ours: Variant,
    ptp: Variant,
    raw: Variant,
    /// In-process floor without runtime and socket set-up: the kernel operations alone.
    raw_ops: Variant,
    /// The static-pie build (`--static-plugin`), when measured.
    stat: Option<Variant>,
    version_ours: Vec<f64>,
    version_ptp: Vec<f64>,
    version_true: Vec<f64>,
    /// One GET to the simulator from this program (new connection, as the plugin does).
    http: Vec<f64>,
    /// Peak RSS by call: ours ADD, ours DEL, ptp ADD, ptp DEL, ours VERSION, ptp VERSION, true.
    rss: Vec<(&'static str, Rss)>,
    /// What `wait4`'s ru_maxrss reports for /bin/true spawned by this program.
    wait4_true_kb: u64,
}

fn one_attachment(cx: &Ctx) -> R<Single> {
    let ns = Netns::new("single")?;
    let mut s = Single {
        ours: Variant::default(),
        ptp: Variant::default(),
        raw: Variant::default(),
        raw_ops: Variant::default(),
        stat: None,
        version_ours: Vec::new(),
        version_ptp: Vec::new(),
        version_true: Vec::new(),
        http: Vec::new(),
        rss: Vec::new(),
        wait4_true_kb: 0,
    };
    let total = cx.sizes.warmup + cx.sizes.runs;
    let scratch = cx.scratch("single");
    let ptp = cx.opts.ptp();
    // The variants: 0 contrail-k8s-cni, 1 ptp + static, 2 raw netlink, 3 the static-pie build.
    let n = if cx.opts.static_plugin.is_some() {
        4
    } else {
        3
    };
    let mut stat = Variant::default();
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  ADD+DEL run {i}/{total}");
        }
        let keep = i >= cx.sizes.warmup;
        // Rotate the order so that no variant always runs right after another.
        for k in 0..n {
            let (who, bin, conf, into) = match (i + k) % n {
                0 => (
                    "contrail-k8s-cni",
                    &cx.opts.plugin,
                    &cx.ours_conf,
                    &mut s.ours,
                ),
                1 => ("ptp", &ptp, &cx.ptp_conf, &mut s.ptp),
                2 => {
                    let t = raw_netlink(&ns, i == 0)?;
                    if keep {
                        s.raw.push(t.add, t.del);
                        s.raw_ops.push(t.add_ops, t.del_ops);
                    }
                    continue;
                }
                _ => match &cx.opts.static_plugin {
                    Some(bin) => ("static-pie build", bin, &cx.ours_conf, &mut stat),
                    None => continue,
                },
            };
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bin, conf, &scratch)?;
            expect_add(who, &add)?;
            if i == 0 {
                ns.assert_attached(who)?;
            }
            let del = env.with("DEL").run(bin, conf, &scratch)?;
            expect_del(who, &del)?;
            if keep {
                into.push(add.ms(), del.ms());
            }
            if i == 0 {
                ns.assert_empty(who)?;
            }
        }
    }
    s.stat = cx.opts.static_plugin.is_some().then_some(stat);
    ns.assert_empty("ADD+DEL")?;
    eprintln!("  VERSION (start-up cost) x{}", cx.sizes.version_runs);
    for i in 0..cx.sizes.version_runs + cx.sizes.warmup {
        check_interrupt()?;
        let env = cx.env("VERSION", &ns, &cx.bench_pod.name);
        let truth = PathBuf::from("/bin/true");
        for (bin, times) in [
            (&cx.opts.plugin, &mut s.version_ours),
            (&ptp, &mut s.version_ptp),
            (&truth, &mut s.version_true),
        ] {
            let c = env.run(bin, &cx.version_conf, &scratch)?;
            if !c.ok {
                return Err(format!("VERSION failed: {}", c.describe()));
            }
            if i >= cx.sizes.warmup {
                times.push(c.ms());
            }
            if bin == &truth {
                s.wait4_true_kb = s.wait4_true_kb.max(c.maxrss_kb);
            }
        }
        let t = Instant::now();
        cx.sim
            .get(&format!("/vm-cfg/k8s__default__{}", cx.bench_pod.name))?;
        if i >= cx.sizes.warmup {
            s.http.push(ms(t.elapsed()));
        }
    }

    eprintln!("  peak RSS under ptrace x{}", cx.sizes.rss_runs);
    let labels = [
        "contrail-k8s-cni ADD",
        "contrail-k8s-cni DEL",
        "ptp + static ADD",
        "ptp + static DEL",
        "contrail-k8s-cni VERSION",
        "ptp VERSION",
        "/bin/true",
    ];
    let mut rss: Vec<Rss> = labels.iter().map(|_| Rss::default()).collect();
    let mut rss_static = [Rss::default(), Rss::default()];
    for _ in 0..cx.sizes.rss_runs {
        check_interrupt()?;
        for (k, (bin, conf)) in [(&cx.opts.plugin, &cx.ours_conf), (&ptp, &cx.ptp_conf)]
            .into_iter()
            .enumerate()
        {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss[2 * k].push(labels[2 * k], env.traced(bin, conf, &scratch)?)?;
            rss[2 * k + 1].push(
                labels[2 * k + 1],
                env.with("DEL").traced(bin, conf, &scratch)?,
            )?;
        }
        if let Some(bin) = &cx.opts.static_plugin {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss_static[0].push("static ADD", env.traced(bin, &cx.ours_conf, &scratch)?)?;
            let del = env.with("DEL").traced(bin, &cx.ours_conf, &scratch)?;
            rss_static[1].push("static DEL", del)?;
        }
        let env = cx.env("VERSION", &ns, &cx.bench_pod.name);
        rss[4].push(
            labels[4],
            env.traced(&cx.opts.plugin, &cx.version_conf, &scratch)?,
        )?;
        rss[5].push(labels[5], env.traced(&ptp, &cx.version_conf, &scratch)?)?;
        rss[6].push(
            labels[6],
            env.traced(Path::new("/bin/true"), &cx.version_conf, &scratch)?,
        )?;
    }
    ns.assert_empty("ADD+DEL under ptrace")?;
    s.rss = labels.into_iter().zip(rss).collect();
    if cx.opts.static_plugin.is_some() {
        let [a, d] = rss_static;
        s.rss.push(("static-pie build ADD", a));
        s.rss.push(("static-pie build DEL", d));
    }
    Ok(s)
}

struct RawTimes {
    add: f64,
    del: f64,
    add_ops: f64,
    del_ops: f64,
}

/// The kernel work of one attachment as bare rtnetlink calls on a current-thread runtime,
/// in-process: per "call" a runtime and its sockets (host, and one created inside the pod's
/// netns), then veth with the peer created in the netns (name, MAC, MTU), both ends up,
/// address, default route; DEL is a new runtime and host socket, and the delete.
fn raw_netlink(ns: &Netns, verify: bool) -> R<RawTimes> {
    let e = |what: &'static str| move |err: rtnetlink::Error| format!("raw netlink {what}: {err}");
    let io = |what: &'static str| move |err: std::io::Error| format!("raw netlink {what}: {err}");
    let host_name = "rawveth0";

    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(io("runtime"))?;
    let netns = File::open(ns.path()).map_err(io("open netns"))?;
    let host = {
        let _g = rt.enter();
        let (conn, handle, _) = rtnetlink::new_connection().map_err(io("socket"))?;
        rt.spawn(conn);
        handle
    };
    let ctr = {
        let home = File::open("/proc/thread-self/ns/net").map_err(io("home netns"))?;
        setns(&netns, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns: {e}"))?;
        let made = {
            let _g = rt.enter();
            rtnetlink::new_connection()
        };
        setns(&home, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns back: {e}"))?;
        let (conn, handle, _) = made.map_err(io("socket in netns"))?;
        rt.spawn(conn);
        handle
    };
    let t_ops = Instant::now();
    let peer = LinkUnspec::new_with_name("eth0")
        .address(POD_MAC.to_vec())
        .mtu(1500)
        .setns_by_fd(netns.as_raw_fd())
        .build();
    let veth = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(host_name.to_string())
        .mtu(1500)
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    rt.block_on(host.link().add(veth).execute())
        .map_err(e("create veth"))?;
    let up = LinkUnspec::new_with_name(host_name).up().build();
    rt.block_on(host.link().set(up).execute())
        .map_err(e("host end up"))?;
    let links: Vec<_> = rt
        .block_on(ctr.link().get().match_name("eth0").execute().try_collect())
        .map_err(e("get eth0"))?;
    let index = links
        .first()
        .ok_or("raw netlink: eth0 missing")?
        .header
        .index;
    let up = LinkUnspec::new_with_index(index).up().build();
    rt.block_on(ctr.link().set(up).execute())
        .map_err(e("eth0 up"))?;
    let addr: Ipv4Addr = POD_ADDR.parse().map_err(|_| "addr")?;
    rt.block_on(ctr.address().add(index, addr.into(), 24).execute())
        .map_err(e("address"))?;
    let gw: Ipv4Addr = POD_GW.parse().map_err(|_| "gw")?;
    let route = RouteMessageBuilder::<Ipv4Addr>::new()
        .gateway(gw)
        .output_interface(index)
        .build();
    rt.block_on(ctr.route().add(route).execute())
        .map_err(e("route"))?;
    let add_ops = ms(t_ops.elapsed());
    drop((host, ctr, netns));
    drop(rt);
    let add = ms(t0.elapsed());
    if verify {
        ns.assert_attached("raw netlink")?;
    }

    let t1 = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(io("runtime"))?;
    let host = {
        let _g = rt.enter();
        let (conn, handle, _) = rtnetlink::new_connection().map_err(io("socket"))?;
        rt.spawn(conn);
        handle
    };
    let t_ops = Instant::now();
    let del = LinkUnspec::new_with_name(host_name).build();
    rt.block_on(host.link().del_with_message(del).execute())
        .map_err(e("delete"))?;
    let del_ops = ms(t_ops.elapsed());
    drop(host);
    drop(rt);
    Ok(RawTimes {
        add,
        del: ms(t1.elapsed()),
        add_ops,
        del_ops,
    })
}

/// `--compare`: two builds of the plugin, interleaved, ADD+DEL times and traced peak RSS.
fn compare(cx: &Ctx, other: &Path) -> R<()> {
    let ns = Netns::new("compare")?;
    let scratch = cx.scratch("compare");
    let bins = [cx.opts.plugin.as_path(), other];
    let mut v = [Variant::default(), Variant::default()];
    let mut rss = [Rss::default(), Rss::default()];
    let total = cx.sizes.warmup + cx.sizes.runs;
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  compare run {i}/{total}");
        }
        for k in [i % 2, 1 - i % 2] {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bins[k], &cx.ours_conf, &scratch)?;
            expect_add("compare", &add)?;
            let del = env.with("DEL").run(bins[k], &cx.ours_conf, &scratch)?;
            expect_del("compare", &del)?;
            if i >= cx.sizes.warmup {
                v[k].push(add.ms(), del.ms());
            }
        }
    }
    for _ in 0..cx.sizes.rss_runs {
        for k in 0..2 {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss[k].push("ADD", env.traced(bins[k], &cx.ours_conf, &scratch)?)?;
            rss[k].push(
                "DEL",
                env.with("DEL").traced(bins[k], &cx.ours_conf, &scratch)?,
            )?;
        }
    }
    eprintln!(
        "| build | ADD median | DEL median | ADD+DEL median | p95 | peak RSS KiB | size KiB |"
    );
    for k in 0..2 {
        let (a, d, t) = (stats(&v[k].add), stats(&v[k].del), stats(&v[k].total));
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {:.0} |",
            bins[k].display(),
            f2(a.median),
            f2(d.median),
            f2(t.median),
            f2(t.p95),
            rss[k].peak(),
            kb(bins[k])
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- 4: thick mode

struct Thick {
    n: usize,
    add: Stats,
    del: Stats,
    /// Peak RSS of one ADD and one DEL, traced.
    rss_kb: u64,
}

fn thick(cx: &Ctx) -> R<Vec<Thick>> {
    let scratch = cx.scratch("thick");
    let nss: Vec<Netns> = THICK_SIZES
        .iter()
        .map(|n| Netns::new(&format!("thick{n}")))
        .collect::<R<_>>()?;
    let mut add: Vec<Vec<f64>> = vec![Vec::new(); THICK_SIZES.len()];
    let mut del = add.clone();
    let mut rss = vec![0u64; THICK_SIZES.len()];
    let rounds = 1 + cx.sizes.thick_reps.iter().max().copied().unwrap_or(0);
    for round in 0..rounds {
        check_interrupt()?;
        eprintln!("  thick round {round}/{rounds}");
        for (k, (&n, pod)) in THICK_SIZES.iter().zip(&cx.thick_pods).enumerate() {
            // Round 0 warms up; then each size until it has its repetitions.
            if round > cx.sizes.thick_reps[k] {
                continue;
            }
            let env = cx.env("ADD", &nss[k], &pod.name);
            let a = env.run(&cx.opts.thick, &cx.thick_conf, &scratch)?;
            expect_add(&format!("thick x{n}"), &a)?;
            if round == 0 {
                let names = nss[k].ifnames()?;
                if names.len() != n + 1 {
                    return Err(format!(
                        "thick x{n}: {} interfaces in the pod",
                        names.len() - 1
                    ));
                }
            }
            let d = env
                .with("DEL")
                .run(&cx.opts.thick, &cx.thick_conf, &scratch)?;
            expect_del(&format!("thick x{n}"), &d)?;
            if round == 0 {
                nss[k].assert_empty(&format!("thick x{n}"))?;
                // One traced ADD+DEL per size for its peak RSS.
                let env = cx.env("ADD", &nss[k], &pod.name);
                for e in [&env, &env.with("DEL")] {
                    let (ok, peaks) = e.traced(&cx.opts.thick, &cx.thick_conf, &scratch)?;
                    if !ok {
                        return Err(format!("thick x{n}: {} failed under ptrace", e.command));
                    }
                    rss[k] = rss[k].max(peaks.first().map_or(0, |p| p.hwm));
                }
            } else {
                add[k].push(a.ms());
                del[k].push(d.ms());
            }
        }
    }
    Ok(THICK_SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| Thick {
            n,
            add: stats(&add[k]),
            del: stats(&del[k]),
            rss_kb: rss[k],
        })
        .collect())
}

// ---------------------------------------------------------------- 5: parallel pods

struct Parallel {
    pods: usize,
    add_total: f64,
    del_total: f64,
    add: Stats,
    del: Stats,
    add_failures: Vec<String>,
    del_failures: Vec<String>,
    host_links: usize,
}

fn parallel(cx: &Ctx) -> R<Parallel> {
    eprintln!("  creating {} pod netns", cx.parallel_pods.len());
    let nss: Vec<Netns> = (0..cx.parallel_pods.len())
        .map(|i| Netns::new(&format!("par{i}")))
        .collect::<R<_>>()?;
    let envs: Vec<CniEnv> = cx
        .parallel_pods
        .iter()
        .zip(&nss)
        .map(|(p, ns)| cx.env("ADD", ns, &p.name))
        .collect();
    check_interrupt()?;
    eprintln!("  {} ADDs at once", envs.len());
    let adds = all_at_once(cx, &envs, "ADD")?;
    let host_links = fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    eprintln!("  {} DELs at once", envs.len());
    let dels = all_at_once(cx, &envs, "DEL")?;
    let failures = |calls: &[Call], add: bool| -> Vec<String> {
        calls
            .iter()
            .filter_map(|c| {
                let r = if add {
                    expect_add("", c)
                } else {
                    expect_del("", c)
                };
                r.err()
            })
            .collect()
    };
    let span = |calls: &[Call]| {
        let start = calls.iter().map(|c| c.start).min();
        let end = calls.iter().map(|c| c.end).max();
        start.zip(end).map_or(0.0, |(s, e)| ms(e - s))
    };
    let p = Parallel {
        pods: envs.len(),
        add_total: span(&adds),
        del_total: span(&dels),
        add: stats(&adds.iter().map(Call::ms).collect::<Vec<_>>()),
        del: stats(&dels.iter().map(Call::ms).collect::<Vec<_>>()),
        add_failures: failures(&adds, true),
        del_failures: failures(&dels, false),
        host_links,
    };
    for ns in &nss {
        ns.assert_empty("parallel DEL")?;
    }
    Ok(p)
}

/// One thread per pod, released together by a barrier; each runs its call.
fn all_at_once(cx: &Ctx, envs: &[CniEnv], command: &'static str) -> R<Vec<Call>> {
    let barrier = Barrier::new(envs.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = envs
            .iter()
            .enumerate()
            .map(|(i, env)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let env = env.with(command);
                    let scratch = cx.scratch(&format!("par{i}"));
                    barrier.wait();
                    env.run(&cx.opts.plugin, &cx.ours_conf, &scratch)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?)
            .collect()
    })
}

// ---------------------------------------------------------------- 6: readiness lag

struct Ready {
    /// (ready moment after the ADD started, lag after the ready moment), ms.
    samples: Vec<(f64, f64)>,
    lag: Stats,
}

fn readiness(cx: &Ctx) -> R<Ready> {
    let workers = cx.sizes.ready_workers;
    let nss: Vec<Netns> = (0..workers)
        .map(|i| Netns::new(&format!("ready{i}")))
        .collect::<R<_>>()?;
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::new());
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for (w, ns) in nss.iter().enumerate() {
            let (next, samples, failed) = (&next, &samples, &failed);
            s.spawn(move || {
                let scratch = cx.scratch(&format!("ready{w}"));
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= cx.ready_pods.len() || check_interrupt().is_err() {
                        break;
                    }
                    if i % 10 == 0 {
                        eprintln!("  readiness sample {i}/{}", cx.ready_pods.len());
                    }
                    match ready_once(cx, ns, &cx.ready_pods[i], &scratch) {
                        Ok(x) => samples.lock().unwrap_or_else(|p| p.into_inner()).push(x),
                        Err(e) => {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    check_interrupt()?;
    let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
    let lag = stats(&samples.iter().map(|s| s.1).collect::<Vec<_>>());
    Ok(Ready { samples, lag })
}

/// The agent has an IP configuration only for a registered port, `ip-delay-ms` after the
/// registration: the simulator reports when the plugin registered the VMI (CLOCK_MONOTONIC, the
/// clock behind `Instant`), so the ready moment is known exactly.
fn ready_once(cx: &Ctx, ns: &Netns, pod: &Pod, scratch: &Path) -> R<(f64, f64)> {
    let env = cx.env("ADD", ns, &pod.name);
    let add = env.run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_add("readiness", &add)?;
    let ports = cx.sim.get("/sim/ports")?;
    let registered_ns = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["vmi-uuid"] == pod.vmis[0].uuid.as_str())
        .and_then(|p| p["sim-registered-ns"].as_u64())
        .ok_or_else(|| format!("readiness: {} is not registered", pod.vmis[0].uuid))?;
    let ready = instant_of(registered_ns) + Duration::from_millis(pod.vmis[0].ip_delay_ms);
    let lag = if add.end >= ready {
        ms(add.end - ready)
    } else {
        -ms(ready - add.end)
    };
    let at = if ready >= add.start {
        ms(ready - add.start)
    } else {
        -ms(add.start - ready)
    };
    let del = env
        .with("DEL")
        .run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_del("readiness", &del)?;
    Ok((at, lag))
}

// ------------------------------------------------------------------------------ report

struct Report {
    single: Single,
    thick: Vec<Thick>,
    parallel: Parallel,
    ready: Ready,
    sizes_kb: Vec<(String, f64)>,
    warmup: usize,
    workers: usize,
    load_start: String,
}

fn kb(path: &Path) -> f64 {
    fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1024.0)
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine(opts: &Opts, load_start: &str) -> Vec<(&'static str, String)> {
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
    let virt = sh("systemd-detect-virt", &[]).unwrap_or_else(|_| "unknown".into());
    let repo = opts.repo.to_string_lossy().to_string();
    let git = sh(
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
    let ptp = sh(
        "dpkg-query",
        &["-W", "-f", "${Version}", "containernetworking-plugins"],
    )
    .unwrap_or_else(|_| "?".into());
    let date = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
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

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// Marginal ADD cost per added interface between consecutive thick sizes, ms.
fn marginals(t: &[Thick], pick: fn(&Thick) -> f64) -> Vec<(usize, usize, f64)> {
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

fn markdown(opts: &Opts, r: &Report) -> String {
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

const SKELETON_HEAD: &str = "# Benchmarks\n\n\
Run `scripts/bench` as root (a few minutes on 2 cores). It builds the release binary, the \
simulator and the benchmark (`examples/bench.rs`) into `target/bench`, the thick build into \
`target/bench-thick` and a static-PIE build into `target/bench-static`, runs the benchmark and \
rewrites the generated section below and `benchmarks/latency.svg`; the text outside the \
generated section is kept. `scripts/bench --quick` is a smoke run that writes nothing; \
`scripts/bench --compare OTHER_BIN` measures ADD+DEL and peak RSS of this build against \
another, interleaved, for trying a change.\n\n";

const SKELETON_TAIL: &str = "\n## Findings\n\n(Hand-written analysis; kept across runs.)\n";

/// Replaces the generated section of the file, keeping the text around it.
fn write_markdown(path: &Path, section: &str) -> R<()> {
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

// ------------------------------------------------------------------------------ plot

struct Series {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
    line: bool,
    dash: bool,
}

struct Panel {
    title: String,
    xlabel: String,
    ylabel: String,
    log2x: bool,
    x: (f64, f64),
    y: (f64, f64),
    series: Vec<Series>,
    hline: Option<(f64, String)>,
}

fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut v = Vec::new();
    while t <= hi + 1e-9 {
        v.push(t);
        t += step;
    }
    v
}

/// A tick label without floating-point noise: 0.6, 2.5, 1000.
fn tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn panel_svg(p: &Panel, ox: f64, oy: f64, w: f64, h: f64) -> String {
    // The legend goes under the x axis label, one line per series.
    let legend = 15.0 * p.series.len() as f64;
    let (l, r, t, b) = (58.0, 12.0, 30.0, 44.0 + legend);
    let (pw, ph) = (w - l - r, h - t - b);
    let fx = |x: f64| {
        let (a, z, x) = if p.log2x {
            (p.x.0.log2(), p.x.1.log2(), x.log2())
        } else {
            (p.x.0, p.x.1, x)
        };
        ox + l + (x - a) / (z - a) * pw
    };
    let fy = |y: f64| oy + t + ph - (y - p.y.0) / (p.y.1 - p.y.0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        ox + l,
        oy + 18.0,
        esc(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#444"/>"##,
        ox + l,
        oy + t
    );
    let xt: Vec<f64> = if p.log2x {
        THICK_SIZES.iter().map(|&n| n as f64).collect()
    } else {
        nice_ticks(p.x.0, p.x.1)
    };
    for x in xt {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" font-size="11" text-anchor="middle">{4}</text>"##,
            fx(x),
            oy + t,
            oy + t + ph,
            oy + t + ph + 14.0,
            tick(x)
        );
    }
    for y in nice_ticks(p.y.0, p.y.1) {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{3:.1}" y="{4:.1}" font-size="11" text-anchor="end">{5}</text>"##,
            ox + l,
            fy(y),
            ox + l + pw,
            ox + l - 4.0,
            fy(y) + 4.0,
            tick(y)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        ox + l + pw / 2.0,
        oy + t + ph + 34.0,
        esc(&p.xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="{0:.1}" y="{1:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {0:.1} {1:.1})">{2}</text>"#,
        ox + 14.0,
        oy + t + ph / 2.0,
        esc(&p.ylabel)
    );
    if let Some((y, label)) = &p.hline {
        let _ = writeln!(
            s,
            r##"<line x1="{x1:.1}" y1="{yy:.1}" x2="{x2:.1}" y2="{yy:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{tx:.1}" y="{ty:.1}" font-size="11" fill="#c00" text-anchor="end">{label}</text>"##,
            x1 = ox + l,
            yy = fy(*y),
            x2 = ox + l + pw,
            tx = ox + l + pw - 4.0,
            ty = fy(*y) - 4.0,
            label = esc(label)
        );
    }
    for (k, se) in p.series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = se
            .points
            .iter()
            .map(|&(x, y)| (x.clamp(p.x.0, p.x.1), y.clamp(p.y.0, p.y.1)))
            .collect();
        if se.line {
            let d: Vec<String> = pts
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", fx(x), fy(y)))
                .collect();
            let dash = if se.dash {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                d.join(" "),
                se.color
            );
        }
        if !se.line || pts.len() <= 8 {
            for &(x, y) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}" fill-opacity="0.7"/>"#,
                    fx(x),
                    fy(y),
                    se.color
                );
            }
        }
        let ly = oy + t + ph + 54.0 + 15.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            ox + l + 8.0,
            ly - 5.0,
            se.color,
            ox + l + 24.0,
            ly,
            esc(&se.name)
        );
    }
    s
}

fn cdf(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    s.iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

fn svg(r: &Report) -> String {
    let per_if = |f: fn(&Thick) -> f64| -> Vec<(f64, f64)> {
        r.thick
            .iter()
            .map(|t| (t.n as f64, f(t) / t.n as f64))
            .collect()
    };
    let add_pi = per_if(|t| t.add.median);
    let del_pi = per_if(|t| t.del.median);
    let marg: Vec<(f64, f64)> = marginals(&r.thick, |t| t.add.median)
        .iter()
        .map(|&(_, b, v)| (b as f64, v))
        .collect();
    let ymax = add_pi
        .iter()
        .chain(&del_pi)
        .chain(&marg)
        .fold(0.0f64, |a, p| a.max(p.1))
        * 1.15;
    let thick = Panel {
        title: "Thick mode: time per interface".into(),
        xlabel: "interfaces in the pod (log scale)".into(),
        ylabel: "ms per interface (median)".into(),
        log2x: true,
        x: (1.0, 64.0),
        y: (0.0, ymax.max(1.0)),
        series: vec![
            Series {
                name: "ADD / interfaces".into(),
                color: "#1f77b4",
                points: add_pi,
                line: true,
                dash: false,
            },
            Series {
                name: "DEL / interfaces".into(),
                color: "#2ca02c",
                points: del_pi,
                line: true,
                dash: false,
            },
            Series {
                name: "ADD: cost of one more interface".into(),
                color: "#9467bd",
                points: marg,
                line: true,
                dash: true,
            },
        ],
        hline: None,
    };
    let s = &r.single;
    let xmax = stats(&s.ptp.total).p95.max(stats(&s.ours.total).p95) * 1.3;
    let dist = Panel {
        title: "One attachment, ADD+DEL: distribution".into(),
        xlabel: "ms (spawn to exit; raw: in-process)".into(),
        ylabel: "fraction of runs".into(),
        log2x: false,
        x: (0.0, xmax.max(1.0)),
        y: (0.0, 1.0),
        series: vec![
            Series {
                name: "contrail-k8s-cni".into(),
                color: "#1f77b4",
                points: cdf(&s.ours.total),
                line: true,
                dash: false,
            },
            Series {
                name: "ptp + static".into(),
                color: "#ff7f0e",
                points: cdf(&s.ptp.total),
                line: true,
                dash: false,
            },
            Series {
                name: "raw rtnetlink (floor)".into(),
                color: "#7f7f7f",
                points: cdf(&s.raw.total),
                line: true,
                dash: false,
            },
        ],
        hline: None,
    };
    let lag_max = r.ready.samples.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.15;
    let ready = Panel {
        title: "Readiness lag (default polling)".into(),
        xlabel: "VMI ready, ms after ADD started".into(),
        ylabel: "ADD returned, ms after ready".into(),
        log2x: false,
        x: (0.0, 2000.0),
        y: (0.0, lag_max.max(120.0)),
        series: vec![Series {
            name: "one ADD".into(),
            color: "#d62728",
            points: r.ready.samples.clone(),
            line: false,
            dash: false,
        }],
        hline: Some((100.0, "target: median under 100 ms".into())),
    };
    let (w, h) = (420.0, 370.0);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{h}" viewBox="0 0 {} {h}" font-family="sans-serif">"#,
        3.0 * w,
        3.0 * w
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    out.push('\n');
    for (i, p) in [thick, dist, ready].iter().enumerate() {
        out.push_str(&panel_svg(p, i as f64 * w, 0.0, w, h));
    }
    out.push_str("</svg>\n");
    out
}

// ------------------------------------------------------------------------------ main

fn run(opts: Opts) -> R<()> {
    eprintln!("bench: setting up (node netns, simulator, pods)");
    let cx = setup(opts)?;
    if let Some(other) = &cx.opts.compare {
        eprintln!(
            "bench: comparing {} with {}",
            cx.opts.plugin.display(),
            other.display()
        );
        return compare(&cx, other);
    }
    eprintln!("bench: 1-3. one attachment: contrail-k8s-cni, ptp + static, raw netlink");
    let single = one_attachment(&cx)?;
    eprintln!("bench: 4. thick mode, 1/4/16/64 interfaces");
    let thick = thick(&cx)?;
    eprintln!("bench: 5. {} pods in parallel", cx.parallel_pods.len());
    let parallel = parallel(&cx)?;
    eprintln!("bench: 6. readiness lag");
    let ready = readiness(&cx)?;
    let mut sizes_kb = vec![
        ("contrail-k8s-cni".into(), kb(&cx.opts.plugin)),
        (
            "contrail-k8s-cni `--features thick`".into(),
            kb(&cx.opts.thick),
        ),
        ("ptp".into(), kb(&cx.opts.ptp())),
        ("static".into(), kb(&cx.opts.cni_dir.join("static"))),
    ];
    if let Some(bin) = &cx.opts.static_plugin {
        sizes_kb.insert(1, ("contrail-k8s-cni, static-pie build".into(), kb(bin)));
    }
    let report = Report {
        single,
        thick,
        parallel,
        ready,
        sizes_kb,
        warmup: cx.sizes.warmup,
        workers: cx.sizes.ready_workers,
        load_start: cx.load_start.clone(),
    };
    let md = markdown(&cx.opts, &report);
    if let Some(dir) = cx.opts.svg.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::write(&cx.opts.svg, svg(&report)).map_err(|e| format!("{}: {e}", cx.opts.svg.display()))?;
    write_markdown(&cx.opts.md, &md)?;
    eprintln!("{md}");
    eprintln!(
        "bench: wrote {} and {}",
        cx.opts.md.display(),
        cx.opts.svg.display()
    );
    Ok(())
}

/// Moves this process into a fresh "node": its own network namespace, and its own mount
/// namespace (receiving from the machine's, never sending back) with a sysfs of that network
/// namespace, so that /sys/class/net lists the node's links (the simulator checks there that a
/// registered port exists) and the pods' /run/netns mounts stay private. Must run before any
/// thread exists, so that every thread and child lives there; all of it ends with the process.
fn enter_node() -> R<()> {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare: {e}"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(|e| format!("making / a slave mount: {e}"))?;
    umount2("/sys", MntFlags::MNT_DETACH).map_err(|e| format!("umount /sys: {e}"))?;
    mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| format!("mount sysfs: {e}"))?;
    sh("ip", &["link", "set", "lo", "up"]).map(drop)
}

fn main() -> ExitCode {
    let opts = match Opts::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = enter_node() {
        eprintln!("bench: cannot set up the node namespaces (run as root): {e}");
        return ExitCode::FAILURE;
    }
    catch_signals();
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
