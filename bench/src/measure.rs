//! Running a CNI plugin as a runtime does, timed, and its peak RSS under ptrace.

use crate::error::R;

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One plugin execution: how it ended, how long it took, its peak RSS.
pub(crate) struct Call {
    pub(crate) ok: bool,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) maxrss_kb: u64,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Call {
    pub(crate) fn ms(&self) -> f64 {
        ms(self.end - self.start)
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "stdout={} stderr={}",
            self.stdout.trim(),
            self.stderr.trim()
        )
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `Instant` of a CLOCK_MONOTONIC reading (nanoseconds) taken by another process.
pub(crate) fn instant_of(monotonic_ns: u64) -> Instant {
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

/// A CNI plugin's command as a runtime runs it: a clean environment, the config on stdin.
/// stdin, stdout and stderr are files (`scratch` with the extensions `out` and `err`), opened
/// here, before any clock starts, so that every plugin pays the same and no pipe can fill up.
fn command(program: &Path, env: &[(&str, &str)], stdin: &Path, scratch: &Path) -> R<Command> {
    let io = |e: std::io::Error| format!("{}: {e}", scratch.display());
    let input = File::open(stdin).map_err(io)?;
    let out = File::create(scratch.with_extension("out")).map_err(io)?;
    let err = File::create(scratch.with_extension("err")).map_err(io)?;
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(input)
        .stdout(out)
        .stderr(err);
    Ok(cmd)
}

/// Runs a CNI plugin as a runtime does (see [`command`]), timed from spawn to the reaping
/// `wait4`.
pub(crate) fn exec(bin: &Path, env: &[(&str, &str)], stdin: &Path, scratch: &Path) -> R<Call> {
    let mut cmd = command(bin, env, stdin, scratch)?;
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
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
        stdout: fs::read_to_string(scratch.with_extension("out")).unwrap_or_default(),
        stderr: fs::read_to_string(scratch.with_extension("err")).unwrap_or_default(),
    })
}

/// Memory of one process of a call, KiB: peak RSS (`VmHWM`), and at exit its private
/// (anonymous) and file-backed (binary, libraries: shared page cache) parts.
#[derive(Clone, Debug)]
pub(crate) struct Peak {
    pub(crate) name: String,
    pub(crate) hwm: u64,
    pub(crate) anon: u64,
    pub(crate) file: u64,
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
pub(crate) fn traced_rss(
    bin: &Path,
    env: &[(&str, &str)],
    stdin: &Path,
    scratch: &Path,
) -> R<(bool, Vec<Peak>)> {
    use std::collections::{HashMap, HashSet};
    let mut cmd = command(bin, env, stdin, scratch)?;
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

/// The sync calls of `strace -c`'s count.
pub(crate) const SYNC_CALLS: [&str; 3] = ["fsync", "fdatasync", "sync_file_range"];

/// How often one call (its process and any it starts) asks the kernel to write its files to
/// disk: `strace -f -c` counting fsync, fdatasync and sync_file_range, by name (the ones it
/// never makes are absent). Untimed: strace slows every system call.
pub(crate) fn syncs(
    bin: &Path,
    env: &[(&str, &str)],
    stdin: &Path,
    scratch: &Path,
) -> R<(bool, BTreeMap<String, u64>)> {
    let summary = scratch.with_extension("strace");
    let mut cmd = command(Path::new("strace"), env, stdin, scratch)?;
    cmd.args(["-f", "-c", "-e"])
        .arg(format!("trace={}", SYNC_CALLS.join(",")))
        .arg("-o")
        .arg(&summary)
        .arg(bin);
    let status = cmd
        .status()
        .map_err(|e| format!("strace (scripts/bench installs it): {e}"))?;
    let text = fs::read_to_string(&summary).map_err(|e| format!("{}: {e}", summary.display()))?;
    // `% time  seconds  usecs/call  calls  [errors]  syscall`: the calls are the 4th column;
    // nothing at all when no such call was made.
    let counts = text
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = *cols.last()?;
            let calls = cols.get(3)?.parse().ok()?;
            SYNC_CALLS
                .contains(&name)
                .then(|| (name.to_string(), calls))
        })
        .collect();
    Ok((status.success(), counts))
}

/// Environment of one CNI call.
pub(crate) struct CniEnv {
    pub(crate) command: &'static str,
    pub(crate) container_id: String,
    pub(crate) netns: String,
    pub(crate) ifname: String,
    pub(crate) pod: String,
    pub(crate) cni_path: String,
    pub(crate) conf_dir: String,
    /// `K8S_POD_UID`, which a vhost-user attachment needs (its directory's name).
    pub(crate) pod_uid: Option<String>,
}

impl CniEnv {
    pub(crate) fn vars(&self) -> Vec<(&str, String)> {
        vec![
            ("CNI_COMMAND", self.command.to_string()),
            ("CNI_CONTAINERID", self.container_id.clone()),
            ("CNI_NETNS", self.netns.clone()),
            ("CNI_IFNAME", self.ifname.clone()),
            (
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};\
                     K8S_POD_INFRA_CONTAINER_ID={}{}",
                    self.pod,
                    self.container_id,
                    self.pod_uid
                        .as_ref()
                        .map(|u| format!(";K8S_POD_UID={u}"))
                        .unwrap_or_default()
                ),
            ),
            ("CNI_PATH", self.cni_path.clone()),
            ("CONTRAIL_CNI_CONF_DIR", self.conf_dir.clone()),
        ]
    }

    pub(crate) fn run(&self, bin: &Path, stdin: &Path, scratch: &Path) -> R<Call> {
        let vars = self.vars();
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        exec(bin, &env, stdin, scratch)
    }

    pub(crate) fn traced(&self, bin: &Path, stdin: &Path, scratch: &Path) -> R<(bool, Vec<Peak>)> {
        let vars = self.vars();
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        traced_rss(bin, &env, stdin, scratch)
    }

    pub(crate) fn syncs(
        &self,
        bin: &Path,
        stdin: &Path,
        scratch: &Path,
    ) -> R<(bool, BTreeMap<String, u64>)> {
        let vars = self.vars();
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        syncs(bin, &env, stdin, scratch)
    }

    /// The same sandbox's call for another of its interfaces, as a meta-plugin makes them.
    pub(crate) fn on(&self, ifname: &str) -> CniEnv {
        CniEnv {
            ifname: ifname.to_string(),
            ..self.with(self.command)
        }
    }

    pub(crate) fn with(&self, command: &'static str) -> CniEnv {
        CniEnv {
            command,
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            pod: self.pod.clone(),
            cni_path: self.cni_path.clone(),
            conf_dir: self.conf_dir.clone(),
            pod_uid: self.pod_uid.clone(),
        }
    }
}

/// An ADD must succeed and print a result with interfaces; anything else is a failure.
pub(crate) fn expect_add(who: &str, c: &Call) -> R<()> {
    let result: Value = serde_json::from_str(&c.stdout).unwrap_or(Value::Null);
    if c.ok && result["interfaces"].is_array() {
        Ok(())
    } else {
        Err(format!("{who} ADD failed: {}", c.describe()))
    }
}

pub(crate) fn expect_del(who: &str, c: &Call) -> R<()> {
    if c.ok {
        Ok(())
    } else {
        Err(format!("{who} DEL failed: {}", c.describe()))
    }
}
