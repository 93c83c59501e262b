//! The coordinator as the shells see it: Luigi's [`ClientCore`].

use super::Coordinator;
use luigi_txn::client_core::ClientOutput;
use luigi_txn::client_core::{ClientCore, ClientCounters, FlightsView, InvalidPieces};
use luigi_txn::msg::ServerMsg;
use luigi_txn::types::{ClientId, Protocol, ShardId, ShardPiece, TimeUs, TxnId};

impl ClientCore for Coordinator {
    fn client(&self) -> ClientId {
        self.config.client
    }

    fn protocol(&self) -> Protocol {
        Protocol::Luigi
    }

    fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        pieces: Vec<ShardPiece>,
        out: &mut Vec<ClientOutput>,
    ) -> Result<TxnId, InvalidPieces> {
        Coordinator::submit(self, now, procedure, args, pieces, out)
    }

    fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<ClientOutput>) {
        Coordinator::on_message(self, now, msg, out)
    }

    fn tick(&mut self, now: TimeUs, out: &mut Vec<ClientOutput>) {
        Coordinator::tick(self, now, out)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        Coordinator::next_deadline(self)
    }

    fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        Coordinator::shard_unreachable(self, now, shard)
    }

    fn replica_link(&mut self, now: TimeUs, shard: ShardId, replica: u32, up: bool) {
        Coordinator::replica_link(self, now, shard, replica, up)
    }

    fn table(&self) -> &dyn FlightsView {
        &self.flights
    }

    /// Read-write transactions in the table, and read-only ones at a snapshot.
    fn in_flight(&self) -> usize {
        self.flights.in_flight() + self.reads.len()
    }

    fn can_submit(&self) -> bool {
        self.flights.can_submit() && self.reads.len() < super::read_only::READS_MAX
    }

    fn check_invariants(&self) -> Result<(), String> {
        Coordinator::check_invariants(self)
    }

    fn counters(&self) -> ClientCounters {
        let s = self.stats;
        let (fast, fanned_out, early, ts_mismatch) = (s.fast, s.fanned_out, s.early, s.ts_mismatch);
        let (late_arrivals, headroom_us_sum) = (s.late_arrivals, s.headroom_us_sum);
        let flights = self.flights.counts();
        ClientCounters { flights, fast, fanned_out, early, ts_mismatch, late_arrivals, headroom_us_sum }
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.stats())
    }

    /// Seeds the one-way-delay estimate (the timestamps rest on it).
    fn ping(&self, now: TimeUs, shard: ShardId, out: &mut Vec<ClientOutput>) {
        Coordinator::ping(self, now, shard, out)
    }

    fn owd_estimate_us(&self, now: TimeUs, shard: ShardId) -> Option<i64> {
        Some(Coordinator::owd_estimate_us(self, now, shard))
    }
}
