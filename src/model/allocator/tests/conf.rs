//! `AllocConf::parse`: PYTORCH_CUDA_ALLOC_CONF strings, good and bad.

use crate::model::allocator::config::ROUNDUP_POWER2_INTERVALS;
use crate::model::allocator::constants::{K_LARGE_BUFFER, K_MB};
use crate::model::allocator::AllocConf;

#[test]
fn empty_string_gives_defaults() {
    let c = AllocConf::parse("").unwrap();
    assert_eq!(c, AllocConf::default());
    assert_eq!(c.max_split_size_bytes, None);
    assert_eq!(c.max_split_size(), u64::MAX);
    assert_eq!(c.max_non_split_rounding_bytes, K_LARGE_BUFFER);
    assert!(!c.expandable_segments);
    assert_eq!(c.garbage_collection_threshold, None);
}

#[test]
fn full_example_parses() {
    let c = AllocConf::parse(
        "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,garbage_collection_threshold:0.8",
    )
    .unwrap();
    assert!(c.expandable_segments);
    assert_eq!(c.max_split_size_bytes, Some(128 * K_MB));
    assert_eq!(c.roundup_power2_divisions, [4; ROUNDUP_POWER2_INTERVALS]);
    assert_eq!(c.garbage_collection_threshold, Some(0.8));
}

#[test]
fn whitespace_and_trailing_comma_are_accepted() {
    let c = AllocConf::parse(" expandable_segments : False , max_split_size_mb : 20 ,").unwrap();
    assert!(!c.expandable_segments);
    assert_eq!(c.max_split_size_bytes, Some(20 * K_MB));
}

#[test]
fn roundup_list_form_fills_intervals() {
    let c = AllocConf::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
    let d = c.roundup_power2_divisions;
    assert!(d[..8].iter().all(|&v| v == 1), "{d:?}");
    assert_eq!(d[8], 1);
    assert_eq!(d[9], 2);
    assert_eq!(d[10], 4);
    assert!(d[11..].iter().all(|&v| v == 8), "{d:?}");
    assert_eq!(c.roundup_power2_divisions_for(300 * K_MB), 1);
    assert_eq!(c.roundup_power2_divisions_for(600 * K_MB), 2);
    assert_eq!(c.roundup_power2_divisions_for(1500 * K_MB), 4);
    assert_eq!(c.roundup_power2_divisions_for(64 * 1024 * K_MB), 8);
    assert_eq!(c.roundup_power2_divisions_for(100), 1);
}

#[test]
fn large_segment_size_sets_rounding_default_and_split_minimum() {
    let c = AllocConf::parse("max_split_size_mb:64,large_segment_size_mb:64").unwrap();
    assert_eq!(c.large_segment_size_bytes, 64 * K_MB);
    assert_eq!(c.max_non_split_rounding_bytes, 64 * K_MB);
    assert!(AllocConf::parse("max_split_size_mb:40,large_segment_size_mb:64").is_err());
    let c = AllocConf::parse("max_non_split_rounding_mb:30").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 30 * K_MB);
}

#[test]
fn ignored_but_valid_keys_are_accepted() {
    AllocConf::parse(
        "backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False,pinned_num_register_threads:8",
    )
    .unwrap();
}

#[test]
fn bad_strings_are_errors_with_a_message() {
    let bad = [
        "max_split_size_mb:10",                           // below kLargeBuffer
        "max_split_size_mb:abc",                          // not a number
        "max_split_size_mb:-5",                           // negative
        "max_split_size_mb:99999999999999999999999",      // overflows u64
        "max_split_size_mb",                              // no value
        "max_split_size_mb:",                             // no value
        "max_split_size_mb:128 expandable_segments:True", // missing comma
        "foo:1",                                          // unknown key
        "expandable_segments:yes",
        "expandable_segments:true", // PyTorch wants True/False
        "garbage_collection_threshold:1.5",
        "garbage_collection_threshold:0",
        "garbage_collection_threshold:NaN",
        "roundup_power2_divisions:3",
        "roundup_power2_divisions:0",
        "roundup_power2_divisions:[256:3]",
        "roundup_power2_divisions:[300:2]",
        "roundup_power2_divisions:[256:2",
        "roundup_power2_divisions:[256:2,",
        "roundup_power2_divisions:[256]",
        "backend:cudaMallocAsync",
        "backend:other",
        "large_segment_size_mb:10",
        ":",
        ",",
        "expandable_segments:True:False",
    ];
    for s in bad {
        let e = AllocConf::parse(s).expect_err(s);
        assert!(!e.to_string().is_empty(), "{s}");
        let as_string: String = e.into();
        assert!(as_string.contains("PYTORCH_CUDA_ALLOC_CONF"), "{as_string}");
    }
}

#[test]
fn parse_never_panics_on_random_input() {
    // Deterministic pseudo-random strings over the config's own vocabulary.
    let pieces = [
        "max_split_size_mb",
        "roundup_power2_divisions",
        "expandable_segments",
        "garbage_collection_threshold",
        "large_segment_size_mb",
        "backend",
        "max_non_split_rounding_mb",
        ":",
        ",",
        "[",
        "]",
        ">",
        "True",
        "False",
        "0",
        "1",
        "2",
        "20",
        "256",
        "0.5",
        "18446744073709551615",
        " ",
        "x",
        "é",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..20_000 {
        let mut s = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for k in 0..(state % 9) {
            let r = state.rotate_left((k * 7) as u32);
            s.push_str(pieces[(r % pieces.len() as u64) as usize]);
        }
        let _ = AllocConf::parse(&s);
    }
}

/// The first bundle's reader (`AllocConf::first_bundle`) reads none and expandable segments
/// alone, as the full parser does, and leaves every other configuration to the full planner.
#[test]
fn first_bundle_reads_expandable_segments_as_the_parser_does() {
    for s in [
        "",
        "expandable_segments:True",
        " expandable_segments : True ",
        "expandable_segments:False",
    ] {
        let first = AllocConf::first_bundle(s).expect("read by the first bundle");
        if cfg!(feature = "extended-ops") {
            assert_eq!(first, AllocConf::parse(s).unwrap(), "{s:?}");
        }
    }
    assert!(
        AllocConf::first_bundle("expandable_segments:True")
            .unwrap()
            .expandable_segments
    );
    for s in [
        "max_split_size_mb:128",
        "expandable_segments:True,max_split_size_mb:128",
        "expandable_segments:true",
    ] {
        assert!(AllocConf::first_bundle(s).is_none(), "{s:?}");
    }
}
