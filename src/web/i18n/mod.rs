//! The page in English and 简体中文. English is the source language: every text the page shows
//! is English first (labels in the views, texts the planner writes), and [`tr`] looks its
//! translation up in one message table ([`zh`]), keyed by the English text.
//!
//! Texts with numbers in them are keyed with each number written `#` (`effective batch #` for
//! `effective batch 32`), and the numbers go back in the same order, so numbers, units and
//! formulas are identical in both languages. A few texts that embed another text (a GPU name, a
//! setting) are patterns with `{}`; what `{}` matched is itself translated when the table has it.
//!
//! Each entry is an (English, Chinese) pair, so a key without a translation does not compile;
//! tests check that every text the planner can produce and every label the views use has an
//! entry, and a browser test that the Chinese page shows no English sentence. A text missing
//! all the same is shown in English, never as a key.
//!
//! The pages' wasm does not carry the table: the build copies it as `data/zh.json` (a test keeps
//! that file equal to [`zh`]), a page fetches it when it is shown in Chinese and [`install`]s it;
//! until then, or if it cannot be fetched, texts stay English. English visitors never load it.

#[cfg(not(target_arch = "wasm32"))]
mod zh;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A language of the page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lang {
    /// English (the source texts).
    #[default]
    En,
    /// Simplified Chinese.
    Zh,
}

impl Lang {
    /// The link's value (`lang=zh`).
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    /// From the link's value or a browser language tag (`zh`, `zh-CN`, `zh-Hans-SG`, `en-US`).
    /// Traditional Chinese tags (`zh-TW`, `zh-HK`, `zh-Hant`) are not Simplified: None.
    pub fn parse(tag: &str) -> Option<Lang> {
        let t = tag.trim().to_ascii_lowercase();
        let primary = t.split(['-', '_']).next().unwrap_or("");
        match primary {
            "en" => Some(Lang::En),
            "zh" if ["-tw", "-hk", "-mo", "-hant"].iter().any(|s| t.contains(s)) => None,
            "zh" => Some(Lang::Zh),
            _ => None,
        }
    }

    /// The first of the browser's preferred languages that the page speaks.
    pub fn from_preferences<'a>(tags: impl IntoIterator<Item = &'a str>) -> Lang {
        tags.into_iter().find_map(Lang::parse).unwrap_or(Lang::En)
    }

    /// The document's `<html lang>`.
    pub fn html_tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }

    /// The other language (the switch).
    pub fn other(self) -> Lang {
        match self {
            Lang::En => Lang::Zh,
            Lang::Zh => Lang::En,
        }
    }
}

/// The text in `lang`: itself in English; the translation in Chinese (the English text when the
/// table has none, which the tests rule out).
pub fn tr(lang: Lang, en: &str) -> Cow<'_, str> {
    match lang {
        Lang::En => Cow::Borrowed(en),
        Lang::Zh => match engine(en) {
            Some(t) => Cow::Owned(t),
            None => Cow::Borrowed(en),
        },
    }
}

/// Natively, the table compiled in.
#[cfg(not(target_arch = "wasm32"))]
fn engine(en: &str) -> Option<String> {
    translate(en)
}

/// In a page, the translator the page chose ([`use_engine`]); none until then.
#[cfg(target_arch = "wasm32")]
static ENGINE: OnceLock<fn(&str) -> Option<String>> = OnceLock::new();

#[cfg(target_arch = "wasm32")]
fn engine(en: &str) -> Option<String> {
    ENGINE.get().and_then(|f| f(en))
}

/// Makes `f` the page's translator: [`translate`] over the table this wasm [`install`]ed (the
/// sections bundle, the GPU page), or the planner page's Chinese bundle through JavaScript
/// (`web::chinese`), so the planner's own wasm carries no table code. The first one stays.
#[cfg(target_arch = "wasm32")]
pub fn use_engine(f: fn(&str) -> Option<String>) {
    let _ = ENGINE.set(f);
}

/// Whether the table translates `en` (tests: nothing the page shows may be missing).
pub fn has(en: &str) -> bool {
    en.trim().is_empty() || translate(en).is_some()
}

/// The table's key for a text: its numbers written `#` (what a translator adds to the table).
pub fn key_of(en: &str) -> String {
    numbers_out(en).0
}

/// Every (English, Chinese) entry of the table.
#[cfg(not(target_arch = "wasm32"))]
pub fn entries() -> impl Iterator<Item = (&'static str, &'static str)> {
    zh::TABLES.iter().flat_map(|t| t.iter().copied())
}

/// The table as `data/zh.json` holds it: one `[English, Chinese]` pair per line.
#[cfg(not(target_arch = "wasm32"))]
pub fn table_json() -> String {
    let lines: Vec<String> = entries()
        .map(|pair| serde_json::to_string(&pair).unwrap_or_default())
        .collect();
    format!("[\n{}\n]\n", lines.join(",\n"))
}

/// The table, split for lookup: exact entries by key, and the patterns in table order.
struct Table {
    exact: HashMap<&'static str, &'static str>,
    patterns: Vec<(&'static str, &'static str)>,
}

impl Table {
    fn of(entries: impl Iterator<Item = (&'static str, &'static str)>) -> Table {
        let (patterns, exact): (Vec<_>, Vec<_>) = entries.partition(|(en, _)| is_pattern(en));
        Table {
            exact: exact.into_iter().collect(),
            patterns,
        }
    }
}

static TABLE: OnceLock<Table> = OnceLock::new();

/// The table: compiled in natively.
#[cfg(not(target_arch = "wasm32"))]
fn table() -> Option<&'static Table> {
    Some(TABLE.get_or_init(|| Table::of(entries())))
}

/// The table: in a page, once [`install`]ed.
#[cfg(target_arch = "wasm32")]
fn table() -> Option<&'static Table> {
    TABLE.get()
}

/// Installs the table from `data/zh.json`'s text (a page, after fetching it). Kept for the
/// page's life; a second call changes nothing.
pub fn install(json: &str) -> Result<(), String> {
    let pairs = read_pairs(json).map_err(|e| format!("zh.json: {e}"))?;
    install_pairs(pairs);
    Ok(())
}

/// Installs the table from its texts alternating English, Chinese, English, … and separated by
/// NUL characters: `data/zh.json` as the planner page's JavaScript hands it to its Chinese
/// bundle (`JSON.parse`, flattened, joined), so that wasm needs no JSON reader.
pub fn install_split(texts: &str) -> Result<(), String> {
    install_pairs(split_pairs(texts)?);
    Ok(())
}

/// The (English, Chinese) pairs of [`install_split`]'s texts.
fn split_pairs(texts: &str) -> Result<Vec<(String, String)>, String> {
    let parts: Vec<&str> = texts.split('\0').collect();
    if parts.len() % 2 != 0 {
        return Err("zh.json: an English text without its Chinese".into());
    }
    Ok(parts
        .chunks(2)
        .map(|p| (p[0].to_string(), p[1].to_string()))
        .collect())
}

fn install_pairs(pairs: Vec<(String, String)>) {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let _ = TABLE.set(Table::of(
        pairs.into_iter().map(|(en, zh)| (leak(en), leak(zh))),
    ));
}

/// `[[English, Chinese], …]` (read with the page's small JSON reader, not serde).
fn read_pairs(json: &str) -> Result<Vec<(String, String)>, String> {
    use crate::formats::json::{parse, Json};
    let v = parse(json)?;
    let rows = v.as_array().ok_or("expected an array of pairs")?;
    rows.iter()
        .map(|row| match row.as_array() {
            Some([Json::Str(en), Json::Str(zh)]) => Ok((en.clone(), zh.clone())),
            _ => Err("expected [English, Chinese] pairs".to_string()),
        })
        .collect()
}

/// Whether the page can translate: natively always (the table is compiled in); in a page, once
/// it has chosen its translator ([`use_engine`]).
pub fn installed() -> bool {
    #[cfg(target_arch = "wasm32")]
    return ENGINE.get().is_some();
    #[cfg(not(target_arch = "wasm32"))]
    table().is_some()
}

/// Whether an entry is a pattern (has a `{}` or `{=}` hole).
fn is_pattern(en: &str) -> bool {
    en.contains("{}") || en.contains("{=}")
}

/// `en` in Chinese from the table (compiled in natively; in a wasm, once [`install`]ed), if
/// the table has it.
pub fn translate(en: &str) -> Option<String> {
    let table = table()?;
    if let Some(zh) = table.exact.get(en) {
        return Some((*zh).to_string());
    }
    let (key, numbers) = numbers_out(en);
    if let Some(zh) = table.exact.get(key.as_str()) {
        return Some(numbers_in(zh, &numbers));
    }
    pattern(&table.patterns, &key, &numbers).or_else(|| joined(en))
}

/// Lists the planner joins (`a; b`, `a + b`): translated part by part, each part a text of the
/// table or a setting as users type it (`gradient_checkpointing=True`).
fn joined(en: &str) -> Option<String> {
    for (sep, zh_sep) in [("; ", "；"), (" + ", " + ")] {
        if en.contains(sep) {
            let parts: Option<Vec<String>> = en
                .split(sep)
                .map(|p| translate(p).or_else(|| is_code(p).then(|| p.to_string())))
                .collect();
            return parts.map(|p| p.join(zh_sep));
        }
    }
    None
}

/// A setting or identifier as users type it (no space, or `name=value`).
fn is_code(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.=:,/()[]".contains(c))
}

/// A pattern's pieces: literal text, then a hole (`{}` translated, `{=}` a name kept as is),
/// literal, hole, …, literal.
fn pieces(pat: &str) -> (Vec<&str>, Vec<bool>) {
    let (mut lits, mut names) = (vec![], vec![]);
    let mut rest = pat;
    loop {
        let hole = [("{}", false), ("{=}", true)]
            .into_iter()
            .filter_map(|(h, name)| rest.find(h).map(|i| (i, h.len(), name)))
            .min();
        match hole {
            Some((i, len, name)) => {
                lits.push(&rest[..i]);
                names.push(name);
                rest = &rest[i + len..];
            }
            None => {
                lits.push(rest);
                return (lits, names);
            }
        }
    }
}

/// The first pattern that matches the key, with what its holes hold translated (or kept, for
/// names). A hole whose text neither translates nor is code makes no match.
fn pattern(
    patterns: &[(&'static str, &'static str)],
    key: &str,
    numbers: &[String],
) -> Option<String> {
    patterns.iter().find_map(|(pat, zh)| {
        let (lits, names) = pieces(pat);
        let args = holes(&lits, key)?;
        // Hand the numbers out in text order: the pattern's own `#` stay outside the holes.
        let mut nums = numbers.iter().cloned();
        let (mut outside, mut inside) = (vec![], vec![]);
        for (lit, (a, name)) in lits.iter().zip(args.iter().zip(&names)) {
            outside.extend(nums.by_ref().take(lit.matches('#').count()));
            let a = numbers_in(
                a,
                &nums
                    .by_ref()
                    .take(a.matches('#').count())
                    .collect::<Vec<_>>(),
            );
            inside.push(if *name {
                a
            } else {
                translate(&a).or_else(|| is_code(&a).then_some(a))?
            });
        }
        outside.extend(nums);
        let (zh_lits, _) = pieces(zh);
        let mut out = String::new();
        for (i, lit) in zh_lits.iter().enumerate() {
            out.push_str(&numbers_in(
                lit,
                &take_front(&mut outside, lit.matches('#').count()),
            ));
            if let Some(a) = inside.get(i) {
                out.push_str(a);
            }
        }
        Some(out)
    })
}

/// What the holes between the literals hold, when `s` is the literals with non-empty texts
/// between them (the first split that works, shortest holes first).
fn holes(lits: &[&str], s: &str) -> Option<Vec<String>> {
    let (first, rest_lits) = lits.split_first()?;
    let rest = s.strip_prefix(first)?;
    if rest_lits.is_empty() {
        return rest.is_empty().then(Vec::new);
    }
    let (next, _) = rest_lits.split_first()?;
    for (i, _) in rest.char_indices().skip(1).chain([(rest.len(), ' ')]) {
        if rest[i..].starts_with(next) {
            let mut tail = vec![rest[..i].to_string()];
            let mut sub_lits = vec![""];
            sub_lits.extend_from_slice(&rest_lits[1..]);
            if let Some(more) = holes(&sub_lits, &rest[i + next.len()..]) {
                tail.extend(more);
                return Some(tail);
            }
        }
    }
    None
}

/// The first `n` of `v`, removed from it.
fn take_front(v: &mut Vec<String>, n: usize) -> Vec<String> {
    v.drain(..n.min(v.len())).collect()
}

/// Whether a number starts at `i`: a digit not glued to a word (`fp32`, `q_proj2`), or a sign
/// right before one after a space or bracket (`+1.25 GiB`, `(-3 %`), so signs go with the number.
fn number_at(s: &[u8], i: usize) -> bool {
    let free = |j: usize| j == 0 || !(s[j - 1].is_ascii_alphanumeric() || s[j - 1] == b'_');
    match s[i] {
        b'0'..=b'9' => free(i),
        b'+' | b'-' => {
            s.get(i + 1).is_some_and(u8::is_ascii_digit) && (i == 0 || b" (:[".contains(&s[i - 1]))
        }
        _ => false,
    }
}

/// The text with each number (digits, with `.` or `,` between digits) written `#`, and the
/// numbers in order. Digits glued to letters (`fp32`, `bf16`, `RTX4090`) are part of a word.
fn numbers_out(s: &str) -> (String, Vec<String>) {
    let b = s.as_bytes();
    let (mut key, mut nums) = (String::with_capacity(s.len()), vec![]);
    let mut i = 0;
    let mut plain = 0;
    while i < b.len() {
        if number_at(b, i) {
            let start = i;
            if !b[i].is_ascii_digit() {
                i += 1;
            }
            while i < b.len()
                && (b[i].is_ascii_digit()
                    || ((b[i] == b'.' || b[i] == b',')
                        && i + 1 < b.len()
                        && b[i + 1].is_ascii_digit()))
            {
                i += 1;
            }
            if i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_') {
                // `7B`, `4bit`: a word, not a number.
                continue;
            }
            key.push_str(&s[plain..start]);
            key.push('#');
            nums.push(s[start..i].to_string());
            plain = i;
        } else {
            i += 1;
        }
    }
    key.push_str(&s[plain..]);
    (key, nums)
}

/// Puts the numbers back, in order, where the translation has `#`.
fn numbers_in(zh: &str, numbers: &[String]) -> String {
    let mut out = String::with_capacity(zh.len() + 8 * numbers.len());
    let mut n = numbers.iter();
    for c in zh.chars() {
        match (c, n.len()) {
            ('#', 1..) => out.push_str(n.next().map(String::as_str).unwrap_or("#")),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
