use super::*;

fn cjk(s: &str) -> bool {
    s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

#[test]
fn both_languages_have_the_same_keys_and_placeholders() {
    let mut seen = std::collections::HashSet::new();
    for (en, zh) in entries() {
        assert!(
            !en.trim().is_empty() && !zh.trim().is_empty(),
            "empty entry {en:?} → {zh:?}"
        );
        assert!(seen.insert(en), "English key twice: {en:?}");
        // Only a pure separator pattern (`{} — {}`) may have no Chinese in it.
        let words = pieces(en)
            .0
            .iter()
            .any(|l| l.chars().any(|c| c.is_ascii_alphabetic()));
        assert!(cjk(zh) || !words, "not translated: {en:?} → {zh:?}");
        assert_eq!(
            en.matches('#').count(),
            zh.matches('#').count(),
            "numbers differ: {en:?} → {zh:?}"
        );
        assert_eq!(pieces(en).1, pieces(zh).1, "holes differ: {en:?} → {zh:?}");
        // A key is looked up with its numbers written `#`: a digit left in a key never matches.
        assert_eq!(
            numbers_out(en).1,
            Vec::<String>::new(),
            "write numbers as # in {en:?}"
        );
    }
}

#[test]
fn numbers_are_abstracted_but_words_with_digits_are_not() {
    let (key, nums) = numbers_out(
        "batch 8 × 4096 in fp32 on 1.5B: 24.00 GiB, bf16, q_proj2, 1,024 tokens, +1.50 GiB, ZeRO-3",
    );
    assert_eq!(
        key,
        "batch # × # in fp32 on 1.5B: # GiB, bf16, q_proj2, # tokens, # GiB, ZeRO-#"
    );
    assert_eq!(nums, ["8", "4096", "24.00", "1,024", "+1.50", "3"]);
    assert_eq!(
        numbers_in("批 # × #", &["8".into(), "4096".into()]),
        "批 8 × 4096"
    );
}

#[test]
fn english_is_the_identity_and_a_missing_text_stays_english() {
    assert_eq!(tr(Lang::En, "Peak allocated"), "Peak allocated");
    let odd = "a sentence no table has 12";
    assert_eq!(tr(Lang::Zh, odd), odd);
    assert!(!has(odd));
}

#[test]
fn numbers_go_back_in_order_and_patterns_translate_what_they_hold() {
    // Fixed label, a text with numbers, and a pattern around a name with numbers in it.
    assert_eq!(tr(Lang::Zh, "Peak allocated"), "峰值已分配");
    assert_eq!(
        tr(Lang::Zh, "for one GPU · effective batch 32"),
        "单卡 · 有效批大小 32"
    );
    assert_eq!(
        tr(
            Lang::Zh,
            "NVIDIA GeForce RTX 4090: needs 30.50 of 24.00 GiB"
        ),
        "NVIDIA GeForce RTX 4090：需要 30.50 / 24.00 GiB"
    );
    // A hole that is neither a text of the table nor code makes no match.
    assert!(!has(
        "together: a phrase no table has + gradient_checkpointing=True"
    ));
}

#[test]
fn languages_come_from_links_and_browser_tags() {
    assert_eq!(Lang::parse("zh"), Some(Lang::Zh));
    assert_eq!(Lang::parse("zh-CN"), Some(Lang::Zh));
    assert_eq!(Lang::parse("zh-Hans-SG"), Some(Lang::Zh));
    assert_eq!(Lang::parse("zh-TW"), None);
    assert_eq!(Lang::parse("en-US"), Some(Lang::En));
    assert_eq!(Lang::parse("fr"), None);
    assert_eq!(Lang::from_preferences(["fr-FR", "zh-CN", "en"]), Lang::Zh);
    assert_eq!(Lang::from_preferences(["de"]), Lang::En);
    assert_eq!(Lang::Zh.html_tag(), "zh-CN");
}

/// `data/zh.json` is what the pages fetch: it must be this table. After changing the table, run
/// `LORAFIT_BLESS=1 cargo test zh_json` to write it.
#[test]
fn zh_json_is_the_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/zh.json");
    let want = table_json();
    if std::env::var_os("LORAFIT_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "data/zh.json differs from the table: run LORAFIT_BLESS=1 cargo test zh_json"
    );
    // And what a page installs from it (read by `install`'s reader) is the compiled-in table.
    let pairs = super::read_pairs(&have).unwrap();
    assert_eq!(pairs.len(), entries().count());
    assert!(pairs
        .iter()
        .zip(entries())
        .all(|((e, z), (e2, z2))| e == e2 && z == z2));
    assert!(super::read_pairs(r#"[["a", "b", "c"]]"#).is_err());
    assert!(super::read_pairs(r#"{"a": "b"}"#).is_err());
}

/// The planner page hands its Chinese bundle `data/zh.json` as the browser reads it
/// (`JSON.parse`, flattened, joined with NUL: `web::chinese`): that must give the table's pairs,
/// so no text of the table may hold a NUL, and a text without its pair is refused.
#[test]
fn the_table_as_the_page_hands_it_to_its_chinese_bundle() {
    let json = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/zh.json"))
        .expect("data/zh.json");
    let pairs = read_pairs(&json).expect("zh.json reads");
    assert!(pairs.len() > 500, "{} pairs", pairs.len());
    assert!(
        pairs
            .iter()
            .all(|(en, zh)| !en.contains('\0') && !zh.contains('\0')),
        "a text of the table holds a NUL"
    );
    let joined: Vec<&str> = pairs
        .iter()
        .flat_map(|(en, zh)| [en.as_str(), zh.as_str()])
        .collect();
    assert_eq!(split_pairs(&joined.join("\0")), Ok(pairs));
    assert!(split_pairs("peak\0峰值\0orphan").is_err());
}
