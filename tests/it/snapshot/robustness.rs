//! Hostile and damaged inputs: every call must return `Ok` or `Err`, never
//! panic, hang or allocate without bound.

use std::io::Write;

use super::common::{fixture, fixture_snapshot, Rng, NAMES};
use lorafit::formats::snapshot::{parse, parse_with_limits, Limits, Report};

/// Parses `bytes` and, for a snapshot, runs every analysis on it.
fn exercise(bytes: &[u8]) -> Result<(), String> {
    if let Report::Snapshot(s) = parse(bytes)? {
        let t = s.timeline();
        let _ = s.trace_truncated();
        let mid = t.points.len() / 2;
        let _ = s.largest_blocks_at(mid, 5);
        let _ = s.largest_blocks_at(usize::MAX, 5);
    }
    Ok(())
}

fn raw_fixture() -> Vec<u8> {
    lorafit::formats::snapshot::gunzip(&fixture(NAMES[0], "pickle.gz"), 1 << 30).expect("gunzip")
}

/// A small pickle in PyTorch's layout built from the smaller fixture.
fn small_pickle() -> Vec<u8> {
    super::common::pickle(&super::common::snapshot_value(
        &fixture_snapshot(NAMES[0]),
        6,
        250,
    ))
}

#[test]
fn truncated_files_fail_cleanly() {
    for data in [fixture(NAMES[0], "pickle.gz"), raw_fixture()] {
        for k in 0..64 {
            let cut = data.len() * k / 64;
            let err = exercise(&data[..cut]).expect_err("a prefix is never complete");
            assert!(!err.is_empty());
        }
    }
    let raw = raw_fixture();
    let err = parse(&raw[..raw.len() / 2]).unwrap_err();
    assert!(err.starts_with("truncated pickle"), "{err}");
}

fn flip(data: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(m.len());
        m[i] ^= 1 << rng.below(8);
    }
    m
}

#[test]
fn random_byte_flips_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let small = small_pickle();
    let (mut ok, mut err) = (0, 0);
    for _ in 0..3000 {
        match exercise(&flip(&small, &mut rng)) {
            Ok(()) => ok += 1,
            Err(_) => err += 1,
        }
    }
    let raw = raw_fixture();
    for _ in 0..20 {
        let _ = exercise(&flip(&raw, &mut rng));
    }
    let texts = [
        fixture(NAMES[0], "summary.txt"),
        super::common::stats_json(1, 2, 3).into_bytes(),
    ];
    for text in &texts {
        for _ in 0..500 {
            let _ = exercise(&flip(text, &mut rng));
        }
    }
    println!("small pickle flips: {ok} parsed, {err} rejected");
    assert!(ok > 0 && err > 0);
}

fn pickle_of(body: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 4];
    p.extend_from_slice(body);
    p.push(b'.');
    p
}

#[test]
fn deep_nesting_is_rejected() {
    // 100k nested lists built on the stack.
    let mut body = vec![b']'; 100_000];
    body.extend(std::iter::repeat_n(b'a', 99_999));
    let err = parse(&pickle_of(&body)).unwrap_err();
    assert!(err.contains("deeper than"), "{err}");
    // 100k nested lists built through the memo, with a tiny stack.
    let mut body = b"]\x94".to_vec();
    for i in 1u32..100_000 {
        body.extend_from_slice(b"]\x94j");
        body.extend_from_slice(&(i - 1).to_le_bytes());
        body.push(b'a');
        body.push(b'0'); // POP is not allowed either
    }
    let err = parse(&pickle_of(&body)).unwrap_err();
    assert!(err.contains("POP"), "{err}");
    let mut body = b"]\x94".to_vec();
    for i in 1u32..100_000 {
        body.extend_from_slice(b"]\x94j");
        body.extend_from_slice(&(i - 1).to_le_bytes());
        body.push(b'a');
    }
    let err = parse(&pickle_of(&body)).unwrap_err();
    assert!(err.contains("deeper than"), "{err}");
}

#[test]
fn mark_and_stack_bombs_are_rejected() {
    let err = parse(&pickle_of(&vec![b'('; 1_000_000])).unwrap_err();
    assert!(err.contains("MARK"), "{err}");
    let err = parse(&pickle_of(&vec![b'N'; 2_000_000])).unwrap_err();
    assert!(err.contains("stack exceeds"), "{err}");
    // Unbalanced or misused opcodes.
    for body in [
        &b"e"[..],
        b"a",
        b"u",
        b"]K\x01s",
        b"}(K\x01u",
        b"N\x94h\x05",
        b"Nr\xff\xff\xff\x7f",
    ] {
        assert!(parse(&pickle_of(body)).is_err(), "{body:?}");
    }
    // A huge declared string length.
    let mut body = vec![0x8d];
    body.extend_from_slice(&u64::MAX.to_le_bytes());
    let err = parse(&pickle_of(&body)).unwrap_err();
    assert!(err.contains("claims"), "{err}");
    // No STOP.
    assert!(parse(&[0x80, 4, b'N']).unwrap_err().contains("truncated"));
}

#[test]
fn code_loading_opcodes_are_rejected() {
    let err = parse(b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00ls\x85R.").unwrap_err();
    assert_eq!(
        err,
        "not a PyTorch memory snapshot: pickle opcode GLOBAL (0x63) at offset 2 is not allowed"
    );
    let err = parse(b"\x80\x04\x8c\x02os\x8c\x06system\x93.").unwrap_err();
    assert!(err.contains("STACK_GLOBAL (0x93) at offset 14"), "{err}");
    let err = parse(b"\x80\x04)NR.").unwrap_err();
    assert!(err.contains("REDUCE"), "{err}");
    // A valid pickle of something else.
    let err = parse(&pickle_of(b"K\x05")).unwrap_err();
    assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    let err = parse(&pickle_of(b"}")).unwrap_err();
    assert!(err.contains("neither 'segments'"), "{err}");
    // A bare empty list (an old-style snapshot is a non-empty list of segments) is no run.
    let err = parse(&pickle_of(b"]")).unwrap_err();
    assert!(
        err.starts_with("not a PyTorch memory snapshot: the pickle holds an empty list"),
        "{err}"
    );
}

#[test]
fn shared_references_cannot_amplify_work() {
    // One block dict referenced 1000 times by one blocks list, whose segment
    // is referenced 100k times: 10^8 blocks if expanded.
    let mut body = b"}\x94(\x8c\x04size\x94K\x01u]\x94(".to_vec();
    body.extend(std::iter::repeat_n(&b"h\x00"[..], 1000).flatten());
    body.extend_from_slice(b"e}\x94(\x8c\x06blocks\x94h\x02u\x8c\x08segments\x94]\x94(");
    body.extend(std::iter::repeat_n(&b"h\x03"[..], 100_000).flatten());
    body.extend_from_slice(b"e}\x94(h\x05h\x06u");
    let err = parse(&pickle_of(&body)).unwrap_err();
    assert!(err.contains("self-referential"), "{err}");
}

fn gzip(data: &[u8], repeat: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for _ in 0..repeat {
        enc.write_all(data).expect("write");
    }
    enc.finish().expect("finish")
}

#[test]
fn gzip_bombs_stop_at_the_limit() {
    let zeros = vec![0u8; 1 << 20];
    let limits = Limits {
        max_input_bytes: 4 << 20,
        ..Limits::default()
    };
    let err = parse_with_limits(&gzip(&zeros, 16), &limits).unwrap_err();
    assert!(err.contains("limit"), "{err}");
    // 600 MiB of zeros against the default 512 MiB limit.
    let bomb = gzip(&zeros, 600);
    assert!(bomb.len() < 8 << 20, "{}", bomb.len());
    let err = parse(&bomb).unwrap_err();
    assert!(err.contains("512 MiB limit"), "{err}");
    // A trailer declaring 4 GiB is not trusted.
    let mut lying = fixture(NAMES[0], "pickle.gz");
    let n = lying.len();
    lying[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(parse(&lying).is_err());
    // Garbage after the gzip magic.
    assert!(parse(&[0x1f, 0x8b, 8, 0, 0, 0]).is_err());
}

#[test]
fn odd_inputs_are_rejected() {
    for input in [
        &b""[..],
        b"   ",
        b"\x80",
        b"\x80\x09",
        b"hello",
        b"[1,2]",
        b"{",
        b"{}",
    ] {
        assert!(parse(input).is_err(), "{input:?}");
    }
    let deep_json = "[".repeat(100_000);
    assert!(parse(format!("{{\"a\":{deep_json}").as_bytes()).is_err());
    let summary = b"|  PyTorch CUDA memory summary, device ID 0  |\n| nonsense |";
    assert!(parse(summary).is_err());
}

#[test]
fn many_shared_device_traces_stay_linear() {
    // 50k references to one segment and 200k references to one one-event trace.
    let mut body = b"}\x94(\x8c\x08segments\x94]\x94(".to_vec();
    body.extend_from_slice(b"}\x94(\x8c\x06device\x94K\x00\x8c\x0atotal_size\x94K\x00u");
    body.extend(std::iter::repeat_n(&b"h\x03"[..], 49_999).flatten());
    body.extend_from_slice(b"e\x8c\x0ddevice_traces\x94]\x94(]\x94(}\x94(");
    body.extend_from_slice(b"\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04size\x94K\x01ue");
    body.extend(std::iter::repeat_n(&b"h\x08"[..], 199_999).flatten());
    body.extend_from_slice(b"eu");
    let start = std::time::Instant::now();
    let Ok(Report::Snapshot(s)) = parse(&pickle_of(&body)) else {
        panic!("should parse");
    };
    assert_eq!((s.segments.len(), s.device_traces.len()), (50_000, 200_000));
    assert!(!s.trace_truncated());
    assert_eq!(s.timeline().peak_allocated_requested_bytes, 1);
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}
