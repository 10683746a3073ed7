//! The command line: the switches, and the fault switches in command-line order.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use clap::{CommandFactory, FromArgMatches, Parser};

use super::die;

/// How a request matched by a fault switch misbehaves.
#[derive(Clone)]
pub(crate) enum Fault {
    Fail(u16),
    /// Answers the status (500 for --flaky, 404 for --not-yet) to the first N matching
    /// requests, then lets them through.
    Flaky(Arc<AtomicUsize>, u16),
    Hang,
    Garbage,
    Truncate,
    Respond(u16, Vec<u8>),
    /// The whole answer, status line and headers included.
    Raw(Vec<u8>),
}

impl Fault {
    /// The switch that made it, for `GET /sim/requests`.
    pub(crate) fn flag(&self) -> &'static str {
        match self {
            Fault::Fail(_) => "--fail",
            Fault::Flaky(_, 404) => "--not-yet",
            Fault::Flaky(..) => "--flaky",
            Fault::Hang => "--hang",
            Fault::Garbage => "--garbage",
            Fault::Truncate => "--truncate",
            Fault::Respond(..) => "--respond",
            Fault::Raw(_) => "--raw",
        }
    }
}

#[derive(Clone)]
pub(crate) struct Rule {
    pub(crate) method: String,
    pub(crate) prefix: String,
    pub(crate) fault: Fault,
}

// ---------------------------------------------------------------- command line

/// Stand-in for the vRouter agent's port-IPC REST API, for tests. A fault switch makes the
/// requests whose method is METHOD and whose path starts with PATH_PREFIX misbehave; the first
/// matching switch on the command line wins.
#[derive(Parser)]
#[command(name = "contrail-agent-sim")]
pub(crate) struct Args {
    /// The pods the agent knows, with their VMIs (like sim/demo-pod.json).
    #[arg(long, value_name = "FILE")]
    pub(crate) pods: PathBuf,
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9091")]
    pub(crate) listen: String,
    /// Write a port file there on registration, and reload them at start, as the agent does.
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// The agent's ports directory: write a file there on `POST /port` (removed by `DELETE
    /// /port`), and re-add those ports at start, as the agent does.
    #[arg(long, value_name = "DIR")]
    pub(crate) ports_dir: Option<PathBuf>,
    /// A DPDK vRouter node: a `POST /port` VM port (type 0) is a vhost-user port, and a
    /// vrouter-dpdk stand-in connects to `<vr-socket-dir>/uvh_vif_<system-name>` for it
    /// (`GET /sim/vhost`); a `POST /vm` port stays an AF_PACKET port.
    #[arg(long)]
    pub(crate) dpdk: bool,
    /// With --dpdk: vrouter-dpdk's `--vr_socket_dir`.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/run/vrouter",
        requires = "dpdk"
    )]
    pub(crate) vr_socket_dir: PathBuf,
    /// With --dpdk: how long the stand-in waits before it connects again, in milliseconds
    /// (vrouter-dpdk: 5 s).
    #[arg(long, value_name = "MS", default_value_t = 5000, requires = "dpdk")]
    pub(crate) vhost_retry_ms: u64,
    /// Delay every answer by N milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) delay_ms: u64,
    /// Model the agent's DB exclusion: each request holds the DB for --request-db-us, each
    /// VMI's config work (after its ip-delay-ms) needs --vmi-db-us of it, first come, first
    /// served; an IP configuration exists from the end of that work.
    #[arg(long)]
    pub(crate) exclusion: bool,
    /// With --exclusion: how long one request holds the agent's DB, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 250, requires = "exclusion")]
    pub(crate) request_db_us: u64,
    /// With --exclusion: how long one VMI's config work holds the agent's DB, in microseconds.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 2000,
        requires = "exclusion"
    )]
    pub(crate) vmi_db_us: u64,
    /// Keep every request with its arrival time, for `GET /sim/log`.
    #[arg(long)]
    pub(crate) log_requests: bool,
    /// Also serve the Kubernetes API there (plain HTTP): the pods and NADs of --pods, as the
    /// meta-plugins read them (`kube_api`); prints `kube-api listening on <addr>` after the
    /// agent's line.
    #[arg(long, value_name = "ADDR")]
    pub(crate) kube_api: Option<String>,
    /// With --kube-api: serve HTTPS there too (a connection that opens with a TLS handshake), as
    /// the API server does for in-cluster clients: a CA made at start signs the certificate
    /// for 127.0.0.1; its certificate is written to DIR/ca.crt for the clients to verify with.
    #[arg(long, value_name = "DIR", requires = "kube_api")]
    pub(crate) kube_api_tls: Option<PathBuf>,
    /// With --kube-api: the node every pod of --pods is bound to (`spec.nodeName`).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "node-1",
        requires = "kube_api"
    )]
    pub(crate) node_name: String,
    /// Answer STATUS with an agent-style error body.
    #[arg(long, value_name = "METHOD:PATH_PREFIX:STATUS", value_parser = rule_of("--fail"))]
    pub(crate) fail: Vec<Rule>,
    /// Answer 500 to the first N matching requests only, as a briefly busy agent would.
    #[arg(long, value_name = "METHOD:PATH_PREFIX:N", value_parser = rule_of("--flaky"))]
    pub(crate) flaky: Vec<Rule>,
    /// Answer 404, the agent's "not there yet", to the first N matching requests only: a
    /// wait that is sure to wait, however soon its first request comes.
    #[arg(long, value_name = "METHOD:PATH_PREFIX:N", value_parser = rule_of("--not-yet"))]
    pub(crate) not_yet: Vec<Rule>,
    /// Never answer, holding the connection until the client gives up.
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--hang"))]
    pub(crate) hang: Vec<Rule>,
    /// Answer 200 with malformed JSON.
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--garbage"))]
    pub(crate) garbage: Vec<Rule>,
    /// Answer 200 with half of the real body under its full Content-Length, then close (the
    /// request still takes effect).
    #[arg(long, value_name = "METHOD:PATH_PREFIX", value_parser = rule_of("--truncate"))]
    pub(crate) truncate: Vec<Rule>,
    /// Answer STATUS with the exact bytes of FILE (read at start).
    #[arg(long, value_name = "METHOD:PATH_PREFIX:STATUS:FILE", value_parser = rule_of("--respond"))]
    pub(crate) respond: Vec<Rule>,
    /// Send the exact bytes of FILE (read at start) as the whole answer, status line and
    /// headers included, then serve the connection's next request whatever they say; with
    /// --log-requests, `GET /sim/log` notes how many of them went out before the client closed
    /// the connection ("raw-sent").
    #[arg(long, value_name = "METHOD:PATH_PREFIX:FILE", value_parser = rule_of("--raw"))]
    pub(crate) raw: Vec<Rule>,
}

pub(crate) fn rule_of(
    flag: &'static str,
) -> impl Fn(&str) -> Result<Rule, String> + Clone + Send + Sync {
    move |s| parse_rule(flag, s).ok_or_else(|| format!("not a {flag} switch"))
}

/// The arguments, and the fault switches in command-line order.
pub(crate) fn parse_args() -> (Args, Vec<Rule>) {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let switches = [
        ("fail", &args.fail),
        ("flaky", &args.flaky),
        ("not_yet", &args.not_yet),
        ("hang", &args.hang),
        ("garbage", &args.garbage),
        ("truncate", &args.truncate),
        ("respond", &args.respond),
        ("raw", &args.raw),
    ];
    let mut rules: Vec<(usize, Rule)> = switches
        .iter()
        .flat_map(|(id, rules)| {
            let at = matches.indices_of(id).into_iter().flatten();
            at.zip(rules.iter().cloned())
        })
        .collect();
    rules.sort_by_key(|(at, _)| *at);
    (args, rules.into_iter().map(|(_, r)| r).collect())
}

/// `METHOD:PATH_PREFIX`, then `:STATUS` for --fail, `:N` for --flaky and --not-yet, `:STATUS:FILE` for
/// --respond and `:FILE` for --raw. The prefix may itself contain colons: for --respond, it
/// ends at the first `:NNN:`; for --raw, at the last colon (a file path has none here).
pub(crate) fn parse_rule(flag: &str, s: &str) -> Option<Rule> {
    let (method, rest) = s.split_once(':')?;
    let status = |s: &str, min| s.parse().ok().filter(|n| (min..600).contains(n));
    let (prefix, fault) = match flag {
        "--fail" => {
            let (prefix, code) = rest.rsplit_once(':')?;
            (prefix, Fault::Fail(status(code, 400)?))
        }
        "--flaky" | "--not-yet" => {
            let (prefix, n) = rest.rsplit_once(':')?;
            let status = if flag == "--flaky" { 500 } else { 404 };
            (
                prefix,
                Fault::Flaky(Arc::new(AtomicUsize::new(n.parse().ok()?)), status),
            )
        }
        "--respond" => {
            let (prefix, code, file) = rest.match_indices(':').find_map(|(i, _)| {
                let (code, file) = rest[i + 1..].split_once(':')?;
                (code.len() == 3).then_some((&rest[..i], code, file))
            })?;
            let body =
                fs::read(file).unwrap_or_else(|e| die(&format!("--respond {s:?}: {file}: {e}")));
            (prefix, Fault::Respond(status(code, 200)?, body))
        }
        "--raw" => {
            let (prefix, file) = rest.rsplit_once(':')?;
            let bytes =
                fs::read(file).unwrap_or_else(|e| die(&format!("--raw {s:?}: {file}: {e}")));
            (prefix, Fault::Raw(bytes))
        }
        "--hang" => (rest, Fault::Hang),
        "--garbage" => (rest, Fault::Garbage),
        _ => (rest, Fault::Truncate),
    };
    let ok = !method.is_empty() && prefix.starts_with('/');
    ok.then(|| Rule {
        method: method.into(),
        prefix: prefix.into(),
        fault,
    })
}
