//! Hostile bytes for fedsim's `.npy` array reader; see `tests/hostile/mod.rs`.
#![no_main]

#[allow(dead_code)] // each target uses one reader
#[path = "../../tests/hostile/mod.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::npy(data));
