//! Network namespaces for process tests that cut the network (issue 26): loopback alone
//! cannot isolate a server, whose outgoing sockets leave from 127.0.0.1.
//!
//! One namespace per server, each joined by a veth pair to a bridge in the root namespace;
//! the bridge holds `10.77.X.1/24` and server `k` listens on `10.77.X.(10 + k)`, so the test's
//! client (in the root namespace) reaches every server through the bridge. `X` is claimed by
//! creating the bridge `lub<X>` (creation fails if it exists: two test processes never share
//! a subnet); its alias names the owning process, and a bridge whose owner is gone is a
//! leftover of a killed run, deleted with its namespaces and routes before `X` is reused.
//! Only addresses inside `10.77.0.0/16` are ever configured.
//!
//! Faults are routes and link states (no `iptables` or `tc netem` needed):
//! - both ways: the server's veth down ([`NetNs::isolate`]);
//! - its outgoing packets dropped: blackhole routes over the subnet in its namespace
//!   ([`NetNs::drop_outgoing`]);
//! - its incoming packets dropped: a blackhole route to it in every other namespace and the
//!   root's ([`NetNs::drop_incoming`]);
//! - cut from some servers only (a leader from its group; clients still reach it): blackhole
//!   routes between it and each of them ([`NetNs::cut_between`]).
//!
//! TCP connections survive every cut: what is sent waits in the senders' buffers and is
//! delivered (late) after [`NetNs::heal`], as on a real network.
//!
//! Everything is undone on drop (also when the test panics). Tests call [`NetNs::create`],
//! which returns `None` with a printed notice where namespaces cannot be made (not root, no
//! `ip`): such a test skips, it does not fail.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};

use super::{server_args, spawn_server, ServerProc, EXE};

/// The first two octets of every address this harness configures.
const NET: &str = "10.77";

/// One blackhole route added by a fault: the namespace it is in (`None`: the root) and its
/// destination prefix.
struct Blackhole {
    ns: Option<String>,
    prefix: String,
}

/// A bridge and one namespace per server; see the module doc.
pub struct NetNs {
    /// The subnet's third octet.
    x: u8,
    servers: usize,
    /// Blackhole routes in force.
    routes: Vec<Blackhole>,
    /// Servers whose veth is down.
    down: Vec<usize>,
}

/// Runs `ip args` and returns its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Runs `ip args` and returns its stdout ("" on failure).
fn ip_out(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Why namespaces cannot be made here, if they cannot.
fn unavailable() -> Option<String> {
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("no `ip` command (iproute2)".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Some("not running as root (network namespaces need CAP_NET_ADMIN)".into());
    }
    None
}

/// The pid in a bridge alias `luigi-test <pid>`, if any.
fn owner(alias: &str) -> Option<u32> {
    alias.strip_prefix("luigi-test ")?.trim().parse().ok()
}

/// The alias of link `name` ("" if none).
fn alias_of(name: &str) -> String {
    let text = ip_out(&["-o", "link", "show", "dev", name]);
    text.split(" alias ").nth(1).map(|a| a.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

/// Removes the subnets of every bridge whose owner is gone (a killed run's leftovers).
fn remove_leftovers(pid: u32) {
    for line in ip_out(&["-o", "link", "show", "type", "bridge"]).lines() {
        let Some(name) = line.split(':').nth(1).map(str::trim) else { continue };
        let Some(x) = name.strip_prefix("lub").and_then(|x| x.parse::<u8>().ok()) else { continue };
        match owner(&alias_of(name)) {
            Some(p) if p != pid && !Path::new(&format!("/proc/{p}")).exists() => {
                eprintln!("netns: removing the leftovers of process {p} (subnet {NET}.{x}.0/24)");
                remove_all(x);
            }
            Some(_) | None => {}
        }
    }
}

/// Deletes everything of subnet `x`: its namespaces, host-side veths, root routes and bridge.
fn remove_all(x: u8) {
    let prefix = format!("luigi-{x}-");
    for line in ip_out(&["netns", "list"]).lines() {
        if let Some(name) = line.split_whitespace().next().filter(|n| n.starts_with(&prefix)) {
            let _ = ip(&["netns", "del", name]);
        }
    }
    let host = format!("lu{x}h");
    for line in ip_out(&["-o", "link", "show"]).lines() {
        let Some(name) = line.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()) else {
            continue;
        };
        if name.starts_with(&host) {
            let _ = ip(&["link", "del", &name]);
        }
    }
    remove_root_routes(x);
    let _ = ip(&["link", "del", &format!("lub{x}")]);
}

/// Deletes the root namespace's blackhole routes into subnet `x` (faults of a killed run).
fn remove_root_routes(x: u8) {
    let subnet = format!("{NET}.{x}.");
    for line in ip_out(&["route", "show", "type", "blackhole"]).lines() {
        if let Some(dst) = line.split_whitespace().nth(1).filter(|d| d.starts_with(&subnet)) {
            let _ = ip(&["route", "del", "blackhole", dst]);
        }
    }
}

impl NetNs {
    /// A bridge and `servers` namespaces, or `None` (with a notice on stderr) where
    /// namespaces cannot be made: the caller skips its test.
    pub fn create(servers: usize) -> Option<NetNs> {
        if let Some(why) = unavailable() {
            eprintln!("SKIPPED: this test needs network namespaces: {why}");
            return None;
        }
        let pid = std::process::id();
        remove_leftovers(pid);
        let start = (pid % 200) as u8;
        for k in 0..254u16 {
            let x = ((u16::from(start) + k) % 254 + 1) as u8;
            let bridge = format!("lub{x}");
            if ip(&["link", "add", &bridge, "type", "bridge"]).is_err() {
                // Taken: by a live process, or a leftover of a killed one.
                match owner(&alias_of(&bridge)) {
                    Some(p) if p != pid && !Path::new(&format!("/proc/{p}")).exists() => {
                        eprintln!("netns: removing the leftovers of process {p} (subnet {NET}.{x}.0/24)");
                        remove_all(x);
                        if ip(&["link", "add", &bridge, "type", "bridge"]).is_err() {
                            continue;
                        }
                    }
                    Some(_) | None => continue,
                }
            }
            // Ours now: whatever else carries this subnet's names is a leftover.
            let _ = ip(&["link", "set", "dev", &bridge, "alias", &format!("luigi-test {pid}")]);
            let mut net = NetNs { x, servers, routes: Vec::new(), down: Vec::new() };
            match net.build() {
                Ok(()) => return Some(net),
                Err(why) => {
                    eprintln!("SKIPPED: this test needs network namespaces: {why}");
                    return None; // dropped: removed
                }
            }
        }
        eprintln!("SKIPPED: no free subnet in {NET}.0.0/16 for the network namespaces");
        None
    }

    /// Leftovers of subnet `x` removed, then the bridge's address and every server's
    /// namespace and veth.
    fn build(&mut self) -> Result<(), String> {
        let x = self.x;
        for k in 0..self.servers {
            let _ = ip(&["netns", "del", &self.ns(k)]);
            let _ = ip(&["link", "del", &format!("lu{x}h{k}")]);
        }
        remove_root_routes(x);
        let bridge = format!("lub{x}");
        ip(&["addr", "add", &format!("{NET}.{x}.1/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for k in 0..self.servers {
            let (ns, host, inner) = (self.ns(k), format!("lu{x}h{k}"), format!("lu{x}n{k}"));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &host, "master", &bridge, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.addr(k)), "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The namespace of server `k`.
    pub fn ns(&self, k: usize) -> String {
        format!("luigi-{}-{k}", self.x)
    }

    /// The address server `k` listens on.
    pub fn addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.x, 10 + k as u8)
    }

    /// Adds a blackhole route to `prefix` in namespace `ns` (`None`: the root).
    fn blackhole(&mut self, ns: Option<String>, prefix: String) {
        let result = match &ns {
            Some(ns) => ip(&["-n", ns, "route", "add", "blackhole", &prefix]),
            None => ip(&["route", "add", "blackhole", &prefix]),
        };
        result.unwrap();
        self.routes.push(Blackhole { ns, prefix });
    }

    /// Cuts server `k` off both ways: its veth goes down (nothing leaves or arrives).
    pub fn isolate(&mut self, k: usize) {
        ip(&["link", "set", &format!("lu{}h{k}", self.x), "down"]).unwrap();
        self.down.push(k);
    }

    /// Drops every packet server `k` sends (to servers and clients); it still receives.
    pub fn drop_outgoing(&mut self, k: usize) {
        let ns = self.ns(k);
        for half in ["0/25", "128/25"] {
            self.blackhole(Some(ns.clone()), format!("{NET}.{}.{half}", self.x));
        }
    }

    /// Drops every packet sent to server `k` (by servers and by the root namespace's
    /// clients); it still sends.
    pub fn drop_incoming(&mut self, k: usize) {
        let to = format!("{}/32", self.addr(k));
        for other in (0..self.servers).filter(|&o| o != k) {
            let ns = self.ns(other);
            self.blackhole(Some(ns), to.clone());
        }
        self.blackhole(None, to);
    }

    /// Cuts server `k` from each of `others` both ways; everyone else (clients included)
    /// still reaches it.
    pub fn cut_between(&mut self, k: usize, others: &[usize]) {
        for &o in others {
            let (ns_k, ns_o) = (self.ns(k), self.ns(o));
            self.blackhole(Some(ns_k), format!("{}/32", self.addr(o)));
            self.blackhole(Some(ns_o), format!("{}/32", self.addr(k)));
        }
    }

    /// Undoes every fault.
    pub fn heal(&mut self) {
        for route in std::mem::take(&mut self.routes) {
            let result = match &route.ns {
                Some(ns) => ip(&["-n", ns, "route", "del", "blackhole", &route.prefix]),
                None => ip(&["route", "del", "blackhole", &route.prefix]),
            };
            result.unwrap();
        }
        for k in std::mem::take(&mut self.down) {
            ip(&["link", "set", &format!("lu{}h{k}", self.x), "up"]).unwrap();
        }
    }

    /// Starts server `node` of cluster file `config` in namespace `k` (`ip netns exec`),
    /// its data under `data` and its log (`RUST_LOG=info`) appended to `log`; waits until
    /// it listens on `port` of its address.
    pub fn start_server(&self, k: usize, config: &Path, data: &Path, node: &str, port: u16, log: &Path) -> ServerProc {
        // `ip netns exec` execs the server: the child is the server itself.
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(k), EXE]);
        server_args(&mut command, config, data, node, "none");
        spawn_server(command, node, SocketAddr::from((self.addr(k), port)), log)
    }
}

impl Drop for NetNs {
    /// Removes the namespaces, veths, routes and bridge (a server still running in a deleted
    /// namespace keeps it alive, unreachable, until it exits: drop the servers first).
    fn drop(&mut self) {
        remove_all(self.x);
    }
}
