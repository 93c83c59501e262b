//! Seed 000's published tables (`../shared/seeds/000_d2ffd91e072f47fb.txt`, sections 4.1-4.3:
//! Luigi's micro benchmark, Luigi's and Mako's TPC-C, the cross-shard study), as data, so that
//! the report can set every measured cell beside the seed's (`report::against_seeds`).
//!
//! The seeds' figures came from a build that executed nothing (docs/DESIGN.md says how that
//! was found): a ratio against them says where a measured cell stands against the shape the
//! seed claimed, not how two systems compare. Mako is set beside our `occ` baseline (OCC with
//! two-phase commit, in Mako's style). The cells were transcribed by a script from the seed's
//! markdown (rows threads 1, 2, 4, 8; columns [`SEED_NETS`](crate::suite::matrix::SEED_NETS));
//! `line` is the line of each table's header in the seed file.

use crate::suite::matrix::Shape;

/// One published cell: throughput and average latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PublishedCell {
    /// Transactions per second.
    pub tps: f64,
    /// Average latency, milliseconds.
    pub avg_ms: f64,
}

const fn c(tps: f64, avg_ms: f64) -> PublishedCell {
    PublishedCell { tps, avg_ms }
}

/// One published table of seed 000: a workload on a shape, by one system.
#[derive(Clone, Copy, Debug)]
pub struct PublishedTable {
    /// `micro` or `tpcc`.
    pub workload: &'static str,
    /// The cluster shape.
    pub shape: Shape,
    /// The system the seed names: `Luigi` or `Mako`.
    pub system: &'static str,
    /// Our protocol set beside it.
    pub ours: &'static str,
    /// Line of the table's header in the seed file.
    pub line: u32,
    /// Rows threads 1, 2, 4, 8; columns the four networks.
    pub cells: [[PublishedCell; 4]; 4],
}

/// The threads of the published tables' rows.
pub const PUBLISHED_THREADS: [u32; 4] = [1, 2, 4, 8];

/// Seed 000's micro (Luigi) and TPC-C (Luigi, Mako) tables.
pub const PUBLISHED: [PublishedTable; 12] = [
    PublishedTable {
        workload: "micro",
        shape: Shape::new(1, 1),
        system: "Luigi",
        ours: "luigi",
        line: 43,
        cells: [
            [c(20713.0, 9.0), c(3041.0, 66.0), c(1180.0, 169.0), c(636.0, 313.0)],
            [c(19141.0, 21.0), c(5740.0, 70.0), c(2309.0, 173.0), c(1247.0, 321.0)],
            [c(15795.0, 50.0), c(9145.0, 87.0), c(4378.0, 182.0), c(2371.0, 337.0)],
            [c(12475.0, 128.0), c(10765.0, 148.0), c(6856.0, 232.0), c(4288.0, 370.0)],
        ],
    },
    PublishedTable {
        workload: "micro",
        shape: Shape::new(1, 3),
        system: "Luigi",
        ours: "luigi",
        line: 52,
        cells: [
            [c(11031.0, 18.0), c(2755.0, 72.0), c(1162.0, 172.0), c(624.0, 319.0)],
            [c(11788.0, 34.0), c(4874.0, 82.0), c(2218.0, 180.0), c(1211.0, 330.0)],
            [c(10849.0, 73.0), c(6989.0, 114.0), c(3827.0, 208.0), c(2178.0, 365.0)],
            [c(8856.0, 180.0), c(7826.0, 204.0), c(5337.0, 298.0), c(3603.0, 442.0)],
        ],
    },
    PublishedTable {
        workload: "micro",
        shape: Shape::new(2, 1),
        system: "Luigi",
        ours: "luigi",
        line: 61,
        cells: [
            [c(9925.0, 20.0), c(2130.0, 94.0), c(846.0, 235.0), c(451.0, 440.0)],
            [c(10741.0, 37.0), c(4034.0, 99.0), c(1663.0, 239.0), c(878.0, 451.0)],
            [c(10120.0, 79.0), c(6744.0, 118.0), c(3159.0, 252.0), c(1718.0, 462.0)],
            [c(8611.0, 185.0), c(7750.0, 206.0), c(5437.0, 293.0), c(3176.0, 499.0)],
        ],
    },
    PublishedTable {
        workload: "micro",
        shape: Shape::new(2, 3),
        system: "Luigi",
        ours: "luigi",
        line: 70,
        cells: [
            [c(5503.0, 36.0), c(2015.0, 99.0), c(830.0, 240.0), c(439.0, 452.0)],
            [c(4823.0, 82.0), c(3402.0, 117.0), c(1584.0, 251.0), c(863.0, 460.0)],
            [c(5022.0, 159.0), c(4287.0, 186.0), c(2813.0, 283.0), c(1644.0, 482.0)],
            [c(4444.0, 358.0), c(4217.0, 377.0), c(3751.0, 424.0), c(2869.0, 552.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(1, 1),
        system: "Luigi",
        ours: "luigi",
        line: 101,
        cells: [
            [c(20349.0, 9.0), c(2955.0, 67.0), c(1146.0, 174.0), c(616.0, 324.0)],
            [c(24768.0, 15.0), c(5581.0, 71.0), c(2221.0, 180.0), c(1181.0, 337.0)],
            [c(26163.0, 30.0), c(10180.0, 78.0), c(4176.0, 191.0), c(2179.0, 365.0)],
            [c(26577.0, 59.0), c(14010.0, 114.0), c(5637.0, 283.0), c(2941.0, 541.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(1, 1),
        system: "Mako",
        ours: "occ",
        line: 110,
        cells: [
            [c(64101.0, 15.0), c(63899.0, 15.0), c(63221.0, 15.0), c(60850.0, 16.0)],
            [c(109409.0, 18.0), c(116414.0, 17.0), c(120226.0, 16.0), c(123200.0, 16.0)],
            [c(160376.0, 24.0), c(186113.0, 21.0), c(202252.0, 19.0), c(212231.0, 18.0)],
            [c(213851.0, 37.0), c(268340.0, 29.0), c(308450.0, 25.0), c(301888.0, 26.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(1, 3),
        system: "Luigi",
        ours: "luigi",
        line: 123,
        cells: [
            [c(11838.0, 15.0), c(2762.0, 72.0), c(1141.0, 175.0), c(610.0, 325.0)],
            [c(11475.0, 34.0), c(4971.0, 80.0), c(2142.0, 186.0), c(1173.0, 340.0)],
            [c(12039.0, 66.0), c(8373.0, 95.0), c(4011.0, 199.0), c(2160.0, 369.0)],
            [c(15215.0, 104.0), c(10877.0, 146.0), c(5599.0, 285.0), c(2994.0, 531.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(1, 3),
        system: "Mako",
        ours: "occ",
        line: 132,
        cells: [
            [c(36610.0, 27.0), c(43948.0, 22.0), c(43636.0, 22.0), c(43141.0, 23.0)],
            [c(63859.0, 31.0), c(80158.0, 24.0), c(81389.0, 24.0), c(80612.0, 24.0)],
            [c(72842.0, 54.0), c(133550.0, 29.0), c(138214.0, 28.0), c(140937.0, 28.0)],
            [c(61374.0, 128.0), c(95811.0, 82.0), c(157176.0, 50.0), c(153252.0, 51.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(2, 1),
        system: "Luigi",
        ours: "luigi",
        line: 145,
        cells: [
            [c(9880.0, 20.0), c(1931.0, 103.0), c(763.0, 261.0), c(408.0, 486.0)],
            [c(12298.0, 32.0), c(3671.0, 109.0), c(1479.0, 269.0), c(779.0, 509.0)],
            [c(13951.0, 57.0), c(6632.0, 120.0), c(2831.0, 282.0), c(1497.0, 530.0)],
            [c(13934.0, 114.0), c(9657.0, 165.0), c(4669.0, 341.0), c(2525.0, 627.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(2, 1),
        system: "Mako",
        ours: "occ",
        line: 154,
        cells: [
            [c(310.0, 22.0), c(31.0, 28.0), c(9.0, 34.0), c(5.0, 35.0)],
            [c(940.0, 21.0), c(89.0, 28.0), c(29.0, 33.0), c(16.0, 32.0)],
            [c(2068.0, 22.0), c(212.0, 27.0), c(82.0, 33.0), c(43.0, 46.0)],
            [c(4129.0, 25.0), c(415.0, 29.0), c(168.0, 32.0), c(79.0, 39.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(2, 3),
        system: "Luigi",
        ours: "luigi",
        line: 167,
        cells: [
            [c(6902.0, 28.0), c(1880.0, 106.0), c(754.0, 264.0), c(397.0, 497.0)],
            [c(7001.0, 56.0), c(3336.0, 119.0), c(1461.0, 272.0), c(770.0, 512.0)],
            [c(6699.0, 119.0), c(5157.0, 154.0), c(2715.0, 293.0), c(1503.0, 528.0)],
            [c(6482.0, 245.0), c(6196.0, 257.0), c(4361.0, 365.0), c(2501.0, 632.0)],
        ],
    },
    PublishedTable {
        workload: "tpcc",
        shape: Shape::new(2, 3),
        system: "Mako",
        ours: "occ",
        line: 176,
        cells: [
            [c(337.0, 33.0), c(32.0, 39.0), c(10.0, 43.0), c(5.0, 44.0)],
            [c(1031.0, 35.0), c(94.0, 39.0), c(32.0, 41.0), c(16.0, 42.0)],
            [c(2476.0, 43.0), c(247.0, 45.0), c(89.0, 51.0), c(40.0, 59.0)],
            [c(5982.0, 44.0), c(414.0, 68.0), c(177.0, 56.0), c(84.0, 64.0)],
        ],
    },
];

/// One row of seed 000's cross-shard study (TPC-C NewOrder, 2x3, geo, 8 threads; table at
/// line 247, latencies at line 256).
#[derive(Clone, Copy, Debug)]
pub struct PublishedCrossShard {
    /// Remote-item percentage.
    pub remote_pct: u32,
    /// Luigi's throughput and average latency.
    pub luigi: PublishedCell,
    /// Mako's throughput, and its average latency (`None`: published as "<1 ms").
    pub mako_tps: f64,
    /// Mako's average latency, milliseconds, if published as a number.
    pub mako_avg_ms: Option<f64>,
}

/// Seed 000's cross-shard study.
pub const PUBLISHED_CROSS_SHARD: [PublishedCrossShard; 4] = [
    PublishedCrossShard { remote_pct: 5, luigi: c(2651.0, 596.0), mako_tps: 42.9, mako_avg_ms: Some(13.0) },
    PublishedCrossShard { remote_pct: 10, luigi: c(2662.0, 594.0), mako_tps: 25.8, mako_avg_ms: Some(10.0) },
    PublishedCrossShard { remote_pct: 15, luigi: c(2653.0, 595.0), mako_tps: 19.7, mako_avg_ms: Some(12.0) },
    PublishedCrossShard { remote_pct: 20, luigi: c(2720.0, 584.0), mako_tps: 16.9, mako_avg_ms: None },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::matrix::SEED_SHAPES;

    #[test]
    fn every_shape_has_luigis_micro_and_tpcc_tables_and_makos_tpcc() {
        for shape in SEED_SHAPES {
            let of = |w: &str, sys: &str| {
                PUBLISHED.iter().filter(|t| t.workload == w && t.shape == shape && t.system == sys).count()
            };
            assert_eq!((of("micro", "Luigi"), of("tpcc", "Luigi"), of("tpcc", "Mako")), (1, 1, 1), "{shape}");
        }
    }

    #[test]
    fn the_transcribed_cells_are_positive_and_spot_checks_match_the_seed() {
        for t in PUBLISHED {
            assert!(t.cells.iter().flatten().all(|c| c.tps > 0.0 && c.avg_ms > 0.0), "{} {}", t.workload, t.shape);
        }
        // Seed 000, micro 2x3 (line 70), 8 threads under geo: 2,869 tx/s, 552 ms.
        let micro_2x3 = PUBLISHED.iter().find(|t| t.workload == "micro" && t.shape == Shape::new(2, 3)).unwrap();
        assert_eq!(micro_2x3.cells[3][3], c(2869.0, 552.0));
        // TPC-C 2x3 Luigi (line 167), 1 thread, same region: 6,902 tx/s, 28 ms.
        let tpcc = PUBLISHED
            .iter()
            .find(|t| t.workload == "tpcc" && t.shape == Shape::new(2, 3) && t.system == "Luigi")
            .unwrap();
        assert_eq!(tpcc.cells[0][0], c(6902.0, 28.0));
    }
}
