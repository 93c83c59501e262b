//! Latency quantiles from Prometheus histograms, as `histogram_quantile` works them out: over
//! the interval's bucket increases (the two scrapes' difference, a restart read as in
//! [`super::counter`]), summed over a shard's replicas, interpolated linearly within the
//! bucket the quantile falls in.

pub use luigi_runtime::metrics::scrape::Bucket;

/// Whether two histograms have the same bucket bounds.
fn same_layout(a: &[Bucket], b: &[Bucket]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.le == y.le)
}

/// The observations of the interval from `previous` to `current` (both cumulative since the
/// server started): bucket by bucket differences, or `current` as it is when the server
/// restarted in between (a count went down, or the buckets changed).
pub fn interval(previous: &[Bucket], current: &[Bucket]) -> Vec<Bucket> {
    let restarted = !same_layout(previous, current) || previous.iter().zip(current).any(|(p, c)| c.count < p.count);
    if restarted {
        return current.to_vec();
    }
    previous.iter().zip(current).map(|(p, c)| Bucket { le: c.le, count: c.count - p.count }).collect()
}

/// The bucket-by-bucket sum of `histograms` (a shard's replicas); `None` if there are none or
/// their buckets differ (every server uses the same bounds: docs/METRICS.md).
pub fn sum<'a>(mut histograms: impl Iterator<Item = &'a [Bucket]>) -> Option<Vec<Bucket>> {
    let mut total = histograms.next()?.to_vec();
    for h in histograms {
        if !same_layout(&total, h) {
            return None;
        }
        for (t, b) in total.iter_mut().zip(h) {
            t.count += b.count;
        }
    }
    Some(total)
}

/// The `q` quantile (0 to 1) of the observations in `buckets`, as Prometheus's
/// `histogram_quantile`: linear interpolation within the bucket where the rank falls (the
/// first bucket starts at 0); a rank in the `+Inf` bucket is the largest finite bound. `None`
/// without observations, without a `+Inf` bucket or for `q` outside 0 to 1.
pub fn quantile(q: f64, buckets: &[Bucket]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut sorted = buckets.to_vec();
    sorted.sort_by(|a, b| a.le.total_cmp(&b.le));
    // Cumulative counts never go down; a scrape taken while an observation was being added
    // can show one bucket a little behind the next (Prometheus evens this out the same way).
    let mut highest = 0.0_f64;
    for b in &mut sorted {
        highest = highest.max(b.count);
        b.count = highest;
    }
    let last = sorted.last()?;
    if sorted.len() < 2 || last.le != f64::INFINITY || last.count <= 0.0 {
        return None;
    }
    let rank = q * last.count;
    let at = sorted[..sorted.len() - 1].iter().position(|b| b.count >= rank).unwrap_or(sorted.len() - 1);
    if at == sorted.len() - 1 {
        return Some(sorted[at - 1].le);
    }
    if at == 0 && sorted[0].le <= 0.0 {
        return Some(sorted[0].le);
    }
    let (start, below) = if at == 0 { (0.0, 0.0) } else { (sorted[at - 1].le, sorted[at - 1].count) };
    let end = sorted[at].le;
    let in_bucket = sorted[at].count - below;
    if in_bucket <= 0.0 {
        return Some(start); // rank 0 in an empty first bucket
    }
    Some(start + (end - start) * ((rank - below) / in_bucket))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(pairs: &[(f64, f64)]) -> Vec<Bucket> {
        pairs.iter().map(|&(le, count)| Bucket { le, count }).collect()
    }

    const INF: f64 = f64::INFINITY;

    #[test]
    fn a_quantile_is_interpolated_within_its_bucket() {
        // 10 observations at most 1, 30 in (1, 2], 60 in (2, 4]: 100 in all.
        let h = buckets(&[(1.0, 10.0), (2.0, 40.0), (4.0, 100.0), (INF, 100.0)]);
        // Rank 50: 10 of the 60 in (2, 4] -> 2 + 2 * 10/60.
        assert!((quantile(0.5, &h).unwrap() - (2.0 + 2.0 * 10.0 / 60.0)).abs() < 1e-12);
        // Rank 99: 59 of 60 -> 2 + 2 * 59/60.
        assert!((quantile(0.99, &h).unwrap() - (2.0 + 2.0 * 59.0 / 60.0)).abs() < 1e-12);
        // Rank 5 falls in the first bucket, which starts at 0.
        assert!((quantile(0.05, &h).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(quantile(0.0, &h), Some(0.0));
        assert_eq!(quantile(1.0, &h), Some(4.0));
        let empty_first = buckets(&[(1.0, 0.0), (2.0, 4.0), (INF, 4.0)]);
        assert_eq!(quantile(0.0, &empty_first), Some(0.0), "not 0/0");
    }

    #[test]
    fn a_rank_in_the_inf_bucket_is_the_largest_finite_bound() {
        let h = buckets(&[(1.0, 1.0), (2.0, 2.0), (INF, 100.0)]);
        assert_eq!(quantile(0.99, &h), Some(2.0));
    }

    #[test]
    fn the_buckets_order_in_the_scrape_does_not_matter() {
        let h = buckets(&[(INF, 4.0), (2.0, 4.0), (1.0, 2.0)]);
        assert_eq!(quantile(0.5, &h), Some(1.0));
    }

    #[test]
    fn no_observations_no_inf_bucket_or_a_bad_q_give_no_quantile() {
        assert_eq!(quantile(0.5, &buckets(&[(1.0, 0.0), (INF, 0.0)])), None, "no samples");
        assert_eq!(quantile(0.5, &[]), None, "no buckets");
        assert_eq!(quantile(0.5, &buckets(&[(1.0, 3.0), (2.0, 5.0)])), None, "no +Inf bucket");
        assert_eq!(quantile(0.5, &buckets(&[(INF, 5.0)])), None, "only +Inf: no bound to interpolate");
        let h = buckets(&[(1.0, 3.0), (INF, 3.0)]);
        assert_eq!(quantile(-0.1, &h), None);
        assert_eq!(quantile(1.5, &h), None);
        assert_eq!(quantile(f64::NAN, &h), None);
    }

    #[test]
    fn a_bucket_behind_the_one_below_is_evened_out() {
        // 3 at most 1, and a torn read shows 2 at most 2: read as 3.
        let h = buckets(&[(1.0, 3.0), (2.0, 2.0), (4.0, 4.0), (INF, 4.0)]);
        assert_eq!(quantile(0.75, &h), Some(1.0));
        assert_eq!(quantile(1.0, &h), Some(4.0));
    }

    #[test]
    fn the_interval_is_the_bucket_increase_and_a_restart_counts_from_zero() {
        let before = buckets(&[(1.0, 10.0), (2.0, 20.0), (INF, 20.0)]);
        let after = buckets(&[(1.0, 10.0), (2.0, 25.0), (INF, 30.0)]);
        assert_eq!(interval(&before, &after), buckets(&[(1.0, 0.0), (2.0, 5.0), (INF, 10.0)]));
        // Only the new observations count: the 10 at most 1 are old.
        assert_eq!(quantile(0.5, &interval(&before, &after)), Some(2.0));
        // A restarted server's histogram starts again from 0: fewer than before is all new.
        let restarted = buckets(&[(1.0, 1.0), (2.0, 3.0), (INF, 3.0)]);
        assert_eq!(interval(&after, &restarted), restarted);
        assert_eq!(interval(&before, &before), buckets(&[(1.0, 0.0), (2.0, 0.0), (INF, 0.0)]));
        assert_eq!(quantile(0.5, &interval(&before, &before)), None, "nothing observed in the interval");
        let other_layout = buckets(&[(5.0, 1.0), (INF, 1.0)]);
        assert_eq!(interval(&before, &other_layout), other_layout);
    }

    #[test]
    fn a_shards_replicas_are_summed_bucket_by_bucket() {
        let a = buckets(&[(1.0, 1.0), (INF, 2.0)]);
        let b = buckets(&[(1.0, 3.0), (INF, 3.0)]);
        assert_eq!(sum([a.as_slice(), b.as_slice()].into_iter()), Some(buckets(&[(1.0, 4.0), (INF, 5.0)])));
        assert_eq!(sum(std::iter::empty()), None);
        let c = buckets(&[(2.0, 1.0), (INF, 1.0)]);
        assert_eq!(sum([a.as_slice(), c.as_slice()].into_iter()), None, "different bounds are not summed");
    }
}
