//! The connection budget (DESIGN.md rule 13): how many connections a server keeps open, how
//! many one source address may hold, and the share kept for the other servers of the
//! cluster. Pure (no sockets, no clock): the accept loop asks it at every accept, the event
//! loop tells it when a connection proves it is a peer, and a connection's reader gives its
//! seat back when it ends.
//!
//! Seats: strangers (connections that have not authenticated) and clients share
//! [`ConnLimits::stranger_seats`]; the rest of the total, [`ConnLimits::peer_reserve`], is
//! never theirs. A connection accepted while the stranger seats are all taken sits on the
//! reserve: it must prove it is a peer within [`ConnLimits::reserve_deadline`] and cannot
//! become a client. The accept loop cannot tell a peer from a stranger (both are
//! unauthenticated at accept), so this is how peers get in while strangers hold every seat
//! they may hold.

use std::net::IpAddr;
use std::time::Duration;

use luigi_txn::Map;

use super::ConnId;

/// Connections a server keeps open at once: clients, peers and unauthenticated ones.
pub const CONNECTIONS_MAX: usize = 4096;
/// Of [`CONNECTIONS_MAX`], the seats clients and strangers cannot take: two for each of 256
/// other servers (see [`ConnLimits::fit_peers`], which raises it for a larger cluster).
pub const PEER_RESERVE: usize = 512;
/// Unauthenticated and client connections one source address (an IPv6 /64) may hold. A
/// benchmark on one machine opens one connection to every server per client thread, all
/// from 127.0.0.1 (luigi-bench's `MAX_THREADS`, 1024); this leaves half as much again for
/// reconnections, its probe and check clients and status queries. Two sources at the limit
/// still leave room in the stranger seats (2 x 1536 < 4096 - 512).
pub const PER_SOURCE_MAX: usize = 1536;
/// How long a connection has to authenticate (a client's `Hello`, a peer's `PeerHello`)
/// before it is closed. A handshake is one round trip (the challenge out, the hello back:
/// about 0.3 s in the `geo` scenario), so this is generous for clients and peers, and a
/// stranger holds a seat no longer. A status query needs no hello: it is answered in one
/// round trip, and `luigi status` closes its connection then.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// How long a connection accepted on the peer reserve has to prove it is a peer: short, so
/// strangers that land there give their seats back soon, and still several handshakes long.
pub const RESERVE_HELLO_DEADLINE: Duration = Duration::from_secs(2);

/// The connection limits of a server (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once.
    pub total: usize,
    /// Seats only peers authenticate on.
    pub peer_reserve: usize,
    /// Unauthenticated and client connections from one source address.
    pub per_source: usize,
    /// Time to authenticate on a stranger seat.
    pub hello_deadline: Duration,
    /// Time to prove being a peer on a reserve seat.
    pub reserve_deadline: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            total: CONNECTIONS_MAX,
            peer_reserve: PEER_RESERVE,
            per_source: PER_SOURCE_MAX,
            hello_deadline: HELLO_DEADLINE,
            reserve_deadline: RESERVE_HELLO_DEADLINE,
        }
    }
}

impl ConnLimits {
    /// Seats for unauthenticated and client connections.
    pub fn stranger_seats(&self) -> usize {
        self.total.saturating_sub(self.peer_reserve)
    }

    /// These limits with a reserve of at least two seats per other server of the cluster
    /// (`others`: each keeps one link here, and one reconnecting may still hold its old
    /// connection until this server notices it is dead); the total grows by as much, so
    /// strangers keep their seats.
    pub fn fit_peers(self, others: usize) -> Self {
        let needed = others.saturating_mul(2);
        let grow = needed.saturating_sub(self.peer_reserve);
        ConnLimits { total: self.total.saturating_add(grow), peer_reserve: self.peer_reserve + grow, ..self }
    }
}

/// What an open connection holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// A stranger seat: unauthenticated, or a client.
    Stranger,
    /// A reserve seat, taken while the stranger seats were full: unauthenticated, it must
    /// prove it is a peer soon.
    Reserve,
    /// An authenticated peer (counted against the total only).
    Peer,
}

/// The seats of the open connections. Its tables hold one entry per open connection and
/// per source with one, so they are bounded by [`ConnLimits::total`].
#[derive(Debug)]
pub struct ConnBudget {
    limits: ConnLimits,
    seats: Map<ConnId, (IpAddr, Seat)>,
    /// Unauthenticated and client connections (stranger and reserve seats) by source.
    by_source: Map<IpAddr, usize>,
    strangers: usize,
}

impl ConnBudget {
    /// An empty budget under `limits`.
    pub fn new(limits: ConnLimits) -> Self {
        ConnBudget { limits, seats: Map::default(), by_source: Map::default(), strangers: 0 }
    }

    /// The limits.
    pub fn limits(&self) -> &ConnLimits {
        &self.limits
    }

    /// Seats connection `conn` from `source`, or says why not.
    pub fn admit(&mut self, conn: ConnId, source: IpAddr) -> Result<Seat, String> {
        let l = &self.limits;
        if self.seats.len() >= l.total {
            return Err(format!("the server holds its limit of {} connections; try again later", l.total));
        }
        let source = source_of(source);
        let held = self.by_source.get(&source).copied().unwrap_or(0);
        if held >= l.per_source {
            let name = match source {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("{v6}/64"),
            };
            return Err(format!(
                "{name} holds {held} connections, the most one address may; close some, or connect from another address"
            ));
        }
        let seat = if self.strangers < l.stranger_seats() { Seat::Stranger } else { Seat::Reserve };
        if seat == Seat::Stranger {
            self.strangers += 1;
        }
        self.seats.insert(conn, (source, seat));
        *self.by_source.entry(source).or_insert(0) += 1;
        Ok(seat)
    }

    /// Connection `conn` proved it is a peer: it leaves its source's count and, if it had
    /// one, its stranger seat.
    pub fn became_peer(&mut self, conn: ConnId) {
        if let Some((source, seat)) = self.seats.get(&conn).copied() {
            self.leave(source, seat);
            self.seats.insert(conn, (source, Seat::Peer));
        }
    }

    /// Connection `conn` closed: its seat is free.
    pub fn release(&mut self, conn: ConnId) {
        if let Some((source, seat)) = self.seats.remove(&conn) {
            self.leave(source, seat);
        }
    }

    fn leave(&mut self, source: IpAddr, seat: Seat) {
        match seat {
            Seat::Peer => return,
            Seat::Stranger => self.strangers = self.strangers.saturating_sub(1),
            Seat::Reserve => {}
        }
        if let Some(n) = self.by_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&source);
            }
        }
    }

    /// Open connections.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.seats.len()
    }

    /// Connections on stranger seats.
    #[cfg(test)]
    pub fn strangers(&self) -> usize {
        self.strangers
    }

    /// Unauthenticated and client connections from `source`.
    #[cfg(test)]
    pub fn held_by(&self, source: IpAddr) -> usize {
        self.by_source.get(&source_of(source)).copied().unwrap_or(0)
    }
}

/// The source a connection from `ip` counts against: an IPv4 address (also when mapped into
/// IPv6), or an IPv6 /64 (one host is commonly given a whole /64, so counting single IPv6
/// addresses would bound nothing).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn small() -> ConnLimits {
        ConnLimits { total: 10, peer_reserve: 3, per_source: 100, ..ConnLimits::default() }
    }

    #[test]
    fn strangers_take_at_most_their_seats_and_the_rest_is_kept_for_peers() {
        let mut b = ConnBudget::new(small());
        for conn in 0..7 {
            assert_eq!(b.admit(conn, ip(conn as u8)), Ok(Seat::Stranger));
        }
        for conn in 7..10 {
            assert_eq!(b.admit(conn, ip(1)), Ok(Seat::Reserve), "beyond the stranger seats: the reserve");
        }
        let full = b.admit(10, ip(2)).unwrap_err();
        assert!(full.contains("limit of 10 connections"), "{full}");
        // A reserve seat that proves it is a peer keeps its place in the total.
        b.became_peer(7);
        assert_eq!((b.open(), b.strangers()), (10, 7));
        assert!(b.admit(10, ip(2)).is_err());
        // A stranger leaving frees a stranger seat; a reserve seat leaving frees a reserve one.
        b.release(0);
        assert_eq!(b.admit(11, ip(3)), Ok(Seat::Stranger));
        b.release(8);
        assert_eq!(b.admit(12, ip(3)), Ok(Seat::Reserve));
        // Peers on stranger seats give them back: strangers get them again.
        b.became_peer(1);
        assert_eq!(b.strangers(), 6);
    }

    #[test]
    fn one_source_holds_at_most_its_share_and_peers_do_not_count() {
        let mut b = ConnBudget::new(ConnLimits { per_source: 3, ..small() });
        for conn in 0..3 {
            assert_eq!(b.admit(conn, ip(1)), Ok(Seat::Stranger));
        }
        let why = b.admit(3, ip(1)).unwrap_err();
        assert!(why.contains("10.0.0.1 holds 3 connections, the most one address may"), "{why}");
        assert_eq!(b.admit(4, ip(2)), Ok(Seat::Stranger), "another source");
        b.became_peer(0);
        assert_eq!(b.held_by(ip(1)), 2);
        assert_eq!(b.admit(5, ip(1)), Ok(Seat::Stranger), "a peer leaves its source's count");
        // An IPv6 /64 is one source; an IPv4 address mapped into IPv6 is that address.
        let mut b = ConnBudget::new(ConnLimits { per_source: 2, ..small() });
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(b.admit(0, v6("2001:db8:1:2::1")), Ok(Seat::Stranger));
        assert_eq!(b.admit(1, v6("2001:db8:1:2:ffff::9")), Ok(Seat::Stranger));
        let why = b.admit(2, v6("2001:db8:1:2::3")).unwrap_err();
        assert!(why.starts_with("2001:db8:1:2::/64 holds 2 connections"), "{why}");
        assert_eq!(b.admit(3, v6("2001:db8:1:3::1")), Ok(Seat::Stranger), "another /64");
        assert_eq!(b.admit(4, v6("::ffff:10.0.0.1")), Ok(Seat::Stranger));
        assert_eq!(b.held_by(ip(1)), 1);
        // Reserve seats count for their source too.
        let mut b = ConnBudget::new(ConnLimits { total: 4, peer_reserve: 3, per_source: 2, ..small() });
        assert_eq!(b.admit(0, ip(1)), Ok(Seat::Stranger));
        assert_eq!(b.admit(1, ip(1)), Ok(Seat::Reserve));
        assert!(b.admit(2, ip(1)).is_err());
    }

    #[test]
    fn the_tables_hold_only_open_connections() {
        let mut b = ConnBudget::new(small());
        for conn in 0..10 {
            b.admit(conn, ip(conn as u8 % 3)).unwrap();
        }
        b.became_peer(4);
        b.became_peer(8);
        b.release(99); // unknown: nothing
        b.became_peer(99);
        for conn in 0..10 {
            b.release(conn);
        }
        assert_eq!((b.open(), b.strangers()), (0, 0));
        assert!(b.seats.is_empty() && b.by_source.is_empty());
    }

    #[test]
    fn the_reserve_grows_with_the_cluster_and_strangers_keep_their_seats() {
        let l = ConnLimits::default();
        assert_eq!(l.fit_peers(10), l, "two seats for each of 10 others fit in the default reserve");
        let big = l.fit_peers(1000);
        assert_eq!(big.peer_reserve, 2000);
        assert_eq!(big.stranger_seats(), l.stranger_seats());
    }

    /// The relationships the defaults' doc comments state.
    #[test]
    fn the_default_limits_hold_together() {
        let l = ConnLimits::default();
        assert_eq!(l.stranger_seats(), 3584);
        assert!(2 * l.per_source < l.stranger_seats(), "two full sources leave room for others");
        assert!(l.peer_reserve >= 2 * 10 && l.peer_reserve < l.total / 4);
        assert!(l.reserve_deadline < l.hello_deadline);
    }
}
