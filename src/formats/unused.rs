//! What an input door did not use. Every reader of untrusted JSON answers with the value it read
//! and the keys it left unused ([`Parsed`]), so that `"use_dora": true` (a setting lorafit does
//! not know yet) or a misspelt key is named in the answer instead of being planned away in
//! silence.
//!
//! Two ways to find them, one per kind of reader:
//! - a reader with a fixed list of keys (the settings table) names them itself;
//! - a reader that looks keys up as it goes (config.json, serde's model numbers) is probed
//!   ([`probe`]): a key is used when putting a value no reader accepts in its place changes what
//!   the reader answers. No second list of the keys a reader knows is kept beside it.

use serde_json::Value;

/// A value read from untrusted input, with the keys of the input it did not use (dotted paths
/// from the input's root, e.g. `settings.use_dora`, `text_config.rope_theta`).
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed<T> {
    /// What was read.
    pub value: T,
    /// Keys given but not used, in input order.
    pub ignored: Vec<String>,
}

impl<T> Parsed<T> {
    /// `value` read with nothing left unused.
    pub fn all_used(value: T) -> Self {
        Parsed {
            value,
            ignored: vec![],
        }
    }
}

/// `key` under `prefix` (`prefix.key`, or `key` at the root).
pub fn path(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A value no reader of lorafit takes for what it reads: a string starting with a NUL, which
/// is no number, flag, list, object or name of anything (a free-text name read from it comes
/// out different, which counts as read too).
fn sentinel() -> Value {
    Value::String("\u{0}unused-probe".into())
}

/// The keys of the object `root` that `read` does not use, found by probing (module docs): each
/// non-null member is replaced in turn by a value no reader accepts, and a member whose
/// replacement leaves `read`'s answer unchanged is unused — and stays replaced while the next
/// members are probed, so that of two members saying the same thing (a wrapper's `model_type`
/// and its `text_config`'s) one is named and the other counts as used: the answer is the same
/// without all the listed members together. A used member that is itself an object is probed
/// member by member (`text_config.rope_theta`). Null members say "not given" and are not
/// listed. `read` must be deterministic; it runs once per member.
pub fn probe<T: PartialEq>(
    root: &Value,
    read: &dyn Fn(&Value) -> Result<T, String>,
) -> Vec<String> {
    let base = read(root);
    let mut work = root.clone();
    let mut out = vec![];
    probe_under(&mut work, &mut vec![], &base, read, &mut out);
    out
}

fn probe_under<T: PartialEq>(
    work: &mut Value,
    at: &mut Vec<String>,
    base: &Result<T, String>,
    read: &dyn Fn(&Value) -> Result<T, String>,
    out: &mut Vec<String>,
) {
    let keys: Vec<String> = match lookup(work, at).and_then(Value::as_object) {
        Some(obj) => obj.keys().cloned().collect(),
        None => return,
    };
    for k in keys {
        at.push(k);
        let held = lookup_mut(work, at).map(|slot| std::mem::replace(slot, sentinel()));
        match held {
            Some(Value::Null) | None => {
                if let Some(slot) = lookup_mut(work, at) {
                    *slot = Value::Null;
                }
            }
            Some(v) => {
                if read(work) == *base {
                    out.push(at.join("."));
                } else {
                    let object = v.is_object();
                    if let Some(slot) = lookup_mut(work, at) {
                        *slot = v;
                    }
                    if object {
                        probe_under(work, at, base, read, out);
                    }
                }
            }
        }
        at.pop();
    }
}

fn lookup<'a>(v: &'a Value, at: &[String]) -> Option<&'a Value> {
    at.iter().try_fold(v, |v, k| v.get(k))
}

fn lookup_mut<'a>(v: &'a mut Value, at: &[String]) -> Option<&'a mut Value> {
    at.iter().try_fold(v, |v, k| v.get_mut(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reads_a_and_b_x(v: &Value) -> Result<(u64, u64), String> {
        let a = v["a"].as_u64().ok_or("a")?;
        // `b.x` defaults to 7 when absent; present, it must be a number (as lorafit's readers do).
        let b = match v.get("b") {
            None => None,
            Some(b) => Some(b.as_object().ok_or("b")?),
        };
        let bx = match b.and_then(|b| b.get("x")) {
            None => 7,
            Some(x) => x.as_u64().ok_or("b.x")?,
        };
        Ok((a, bx))
    }

    #[test]
    fn probing_names_exactly_the_members_the_reader_does_not_read() {
        let v = json!({"a": 1, "b": {"x": 2, "y": 3}, "c": [1], "d": null, "e": "text"});
        assert_eq!(probe(&v, &reads_a_and_b_x), vec!["b.y", "c", "e"]);
        // Of two members that say the same, the first is named and the second is used.
        let twice = |v: &Value| -> Result<u64, String> {
            v["p"].as_u64().or(v["q"].as_u64()).ok_or("neither".into())
        };
        assert_eq!(probe(&json!({"p": 1, "q": 1}), &twice), vec!["p"]);
        // A member read but holding its default is still used: the probe makes it unreadable.
        let v = json!({"a": 1, "b": {"x": 7}});
        assert!(probe(&v, &reads_a_and_b_x).is_empty());
        // A reader that fails on the input fails on every probe the same way: nothing it read
        // can be told apart, so everything is unused — and the caller reports the error first.
        assert_eq!(probe(&json!({"z": 1}), &reads_a_and_b_x), vec!["z"]);
    }

    #[test]
    fn paths_join_with_dots() {
        assert_eq!(path("", "k"), "k");
        assert_eq!(path("settings", "k"), "settings.k");
    }
}
