//! Tests of the TPC-C workload.
