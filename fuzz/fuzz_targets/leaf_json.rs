//! Hostile bytes for fedsim's LEAF JSON reader (FEMNIST and Shakespeare); see `tests/hostile/mod.rs`.
#![no_main]

#[allow(dead_code)] // each target uses one reader
#[path = "../../tests/hostile/mod.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::leaf_json(data));
