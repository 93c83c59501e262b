//! Connection authentication: HMAC-SHA256 proofs over a per-connection challenge.
//!
//! Every connection a server accepts starts with [`WireMsg::Challenge`]: a nonce unique to
//! that connection (this server's start time and the connection's number). A peer server
//! answers with `PeerHello`, proving it holds the cluster secret; a client, when the cluster
//! has a client token, proves it in its `Hello`. A proof binds the nonce and both ends'
//! identities, so it cannot be replayed on another connection or by another node.
//!
//! Trust model: this authenticates the ends of a TCP connection; it neither encrypts nor
//! protects a connection against an attacker on the path (use a private network or a VPN
//! between regions).
//!
//! [`WireMsg::Challenge`]: crate::wire::WireMsg::Challenge

use hmac::{Hmac, Mac};
use luigi_txn::types::ClientId;
use sha2::Sha256;

use crate::config::NodeId;

type HmacSha256 = Hmac<Sha256>;

/// A connection's challenge.
pub type Nonce = [u8; 16];
/// A proof of a key.
pub type Proof = [u8; 32];

/// Waits (at most `timeout`) for the challenge a server sends first on every connection.
pub async fn read_challenge(
    reader: &mut crate::net::peer::StartedReader<crate::wire::WireMsg>,
    timeout: std::time::Duration,
) -> Result<Nonce, String> {
    match reader.next_within(timeout).await? {
        crate::wire::WireMsg::Challenge { nonce } => Ok(nonce),
        other => Err(format!("expected a challenge first, got {other:?}")),
    }
}

/// The nonce of connection `conn` of a server that started at `started_us`.
pub fn nonce(started_us: u64, conn: u64) -> Nonce {
    let mut n = [0u8; 16];
    n[..8].copy_from_slice(&started_us.to_le_bytes());
    n[8..].copy_from_slice(&conn.to_le_bytes());
    n
}

fn mac(key: &str, context: &[u8], nonce: &Nonce, parts: &[u64]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC takes keys of any length");
    m.update(context);
    m.update(nonce);
    for p in parts {
        m.update(&p.to_le_bytes());
    }
    m
}

fn node_parts(to: NodeId, from: NodeId) -> [u64; 4] {
    [u64::from(to.shard), u64::from(to.replica), u64::from(from.shard), u64::from(from.replica)]
}

/// What server `from` sends server `to` for `nonce` (key: the cluster secret, "" if none).
pub fn peer_proof(secret: &str, nonce: &Nonce, to: NodeId, from: NodeId) -> Proof {
    mac(secret, b"luigi peer v1", nonce, &node_parts(to, from)).finalize().into_bytes().into()
}

/// Checks a peer's proof in constant time.
pub fn peer_proof_ok(secret: &str, nonce: &Nonce, to: NodeId, from: NodeId, proof: &Proof) -> bool {
    mac(secret, b"luigi peer v1", nonce, &node_parts(to, from)).verify_slice(proof).is_ok()
}

/// What client `client` sends for `nonce` (key: the cluster's client token).
pub fn client_proof(token: &str, nonce: &Nonce, client: ClientId) -> Proof {
    mac(token, b"luigi client v1", nonce, &[client]).finalize().into_bytes().into()
}

/// Checks a client's proof in constant time.
pub fn client_proof_ok(token: &str, nonce: &Nonce, client: ClientId, proof: &Proof) -> bool {
    mac(token, b"luigi client v1", nonce, &[client]).verify_slice(proof).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId { shard: 0, replica: 1 };
    const B: NodeId = NodeId { shard: 1, replica: 0 };

    #[test]
    fn a_proof_holds_only_for_its_key_nonce_and_nodes() {
        let n = nonce(7, 1);
        let p = peer_proof("cluster secret 0123", &n, A, B);
        assert!(peer_proof_ok("cluster secret 0123", &n, A, B, &p));
        assert!(!peer_proof_ok("another secret 0123", &n, A, B, &p), "other key");
        assert!(!peer_proof_ok("cluster secret 0123", &nonce(7, 2), A, B, &p), "replayed on another connection");
        assert!(!peer_proof_ok("cluster secret 0123", &n, B, A, &p), "other direction");
        assert!(!peer_proof_ok("cluster secret 0123", &n, A, NodeId { shard: 1, replica: 2 }, &p), "another node");
        let c = client_proof("token 0123456789ab", &n, 42);
        assert!(client_proof_ok("token 0123456789ab", &n, 42, &c));
        assert!(!client_proof_ok("token 0123456789ab", &n, 43, &c), "another client id");
        assert_ne!(c, p);
    }
}
