//! The algorithm checked as fedsim checks its own: flat, relayed and aggregated runs, workers,
//! a stop and resume, failures, in a few seconds of small real runs.

#[test]
fn the_algorithm_keeps_fedsims_promises() {
    let scratch = std::env::temp_dir().join("my-fl-algorithm-conformance");
    let passed =
        fedsim::plugin::conformance::check(&my_fl_algorithm::registry(), "server_step", &scratch)
            .unwrap_or_else(|breach| panic!("{breach}"));
    assert!(
        passed.contains(&"a stopped run resumes to the same bits"),
        "{passed:?}"
    );
}
