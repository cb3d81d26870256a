//! A small JSON reader for what the planner page itself reads: the catalog it carries, the
//! Chinese table it fetches and the multi-GPU layout setting. serde_json stays the reader of
//! everything else (pasted config.json, JSONL, snapshots); keeping its deserializers out of the
//! page's wasm saves about a tenth of what a visit loads. Inputs are bounded (nesting depth,
//! no recursion beyond it) and every malformed text is an `Err`, never a panic.

/// A JSON value. Numbers keep their text, so integers read back exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as written.
    Num(String),
    /// A string, unescaped.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// Members in document order (a repeated key: the last wins in [`Json::get`], as in
    /// serde_json's `Value`).
    Obj(Vec<(String, Json)>),
}

/// Deepest nesting accepted (serde_json's default is 128 as well).
const MAX_DEPTH: usize = 128;

/// Parses one JSON text (surrounding whitespace allowed, nothing after it).
pub fn parse(text: &str) -> Result<Json, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

impl Json {
    /// The member `key` of an object (None for a missing key or a non-object).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The member `key`, with `null` read as missing.
    pub fn field(&self, key: &str) -> Option<&Json> {
        self.get(key).filter(|v| **v != Json::Null)
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A non-negative integer written without fraction or exponent (as serde reads a `u64`).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Num(t) => t.parse().ok(),
            _ => None,
        }
    }

    /// A number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(t) => t.parse().ok(),
            _ => None,
        }
    }

    /// The items of an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, word: &str) -> Result<(), String> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.ws();
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end")),
            Some(b'n') => self.eat("null").map(|_| Json::Null),
            Some(b't') => self.eat("true").map(|_| Json::Bool(true)),
            Some(b'f') => self.eat("false").map(|_| Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'[') => self.list(b']', |p| p.value(depth + 1)).map(Json::Arr),
            Some(b'{') => self
                .list(b'}', |p| {
                    p.ws();
                    if p.s.get(p.i) != Some(&b'"') {
                        return Err(p.err("expected a key"));
                    }
                    let key = p.string()?;
                    p.ws();
                    if p.s.get(p.i) != Some(&b':') {
                        return Err(p.err("expected :"));
                    }
                    p.i += 1;
                    Ok((key, p.value(depth + 1)?))
                })
                .map(Json::Obj),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a value")),
        }
    }

    /// The items of an array or object after its opening bracket, up to `close`, each read by
    /// `item`, separated by commas.
    fn list<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&close) {
            self.i += 1;
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(&c) if c == close => {
                    self.i += 1;
                    return Ok(items);
                }
                _ => return Err(self.err("expected , or a closing bracket")),
            }
        }
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let from = p.i;
            while let Some(b'0'..=b'9') = p.s.get(p.i) {
                p.i += 1;
            }
            p.i > from
        };
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let int_start = self.i;
        if !digits(self) {
            return Err(self.err("expected digits"));
        }
        if self.s[int_start] == b'0' && self.i - int_start > 1 {
            return Err(self.err("leading zero"));
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return Err(self.err("expected digits"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if !digits(self) {
                return Err(self.err("expected digits"));
            }
        }
        // The slice is ASCII digits and signs: always UTF-8.
        let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        if !text.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(self.err("number out of range"));
        }
        Ok(Json::Num(text))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<String, String> {
        self.i += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(self.err("unterminated string"));
            };
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated string"));
                    };
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if !self.s[self.i..].starts_with(b"\\u") {
                                    return Err(self.err("lone surrogate"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("lone surrogate"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or_else(|| self.err("lone surrogate"))?
                        }
                        _ => return Err(self.err("bad escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return Err(self.err("control character in string")),
                _ => out.push(b),
            }
        }
        // The input is a &str and escapes are whole chars, so the bytes are UTF-8.
        String::from_utf8(out).map_err(|_| self.err("invalid UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value serde_json reads, this reader reads the same (compared through serde_json's
    /// own `Value`); every text serde_json refuses, it refuses too.
    fn same_as_serde(text: &str) {
        let ours = parse(text);
        let theirs: Result<serde_json::Value, _> = serde_json::from_str(text);
        match (ours, theirs) {
            (Ok(a), Ok(b)) => assert_eq!(to_serde(&a), b, "{text}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{text}: ours {a:?}, serde_json {b:?}"),
        }
    }

    /// Our value as serde_json's, numbers read by serde_json (as it reads the same text).
    fn to_serde(v: &Json) -> serde_json::Value {
        convert(v, &|t| serde_json::from_str(t).unwrap())
    }

    /// Our value as serde_json's, numbers read exactly (Rust's correctly rounded `parse`; the
    /// serde_json built here rounds some floats one unit off, so it does not read back its own
    /// output exactly).
    fn to_serde_exact(v: &Json) -> serde_json::Value {
        convert(v, &|t| {
            t.parse::<i64>()
                .map(serde_json::Value::from)
                .or_else(|_| t.parse::<u64>().map(serde_json::Value::from))
                .unwrap_or_else(|_| serde_json::Value::from(t.parse::<f64>().unwrap()))
        })
    }

    fn convert(v: &Json, num: &dyn Fn(&str) -> serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Num(t) => num(t),
            Json::Str(s) => Value::String(s.clone()),
            Json::Arr(a) => Value::Array(a.iter().map(|x| convert(x, num)).collect()),
            Json::Obj(m) => {
                let mut o = serde_json::Map::new();
                for (k, v) in m {
                    o.insert(k.clone(), convert(v, num)); // the last wins, as in `get`
                }
                Value::Object(o)
            }
        }
    }

    #[test]
    fn reads_what_serde_reads() {
        for t in [
            r#"{"a": [1, -2.5e3, 0.125, true, false, null], "b": {"c": "d\"\\\/\n\u00e9\ud83d\ude00"}}"#,
            "[]",
            "{}",
            "  42  ",
            r#"["中文", "a\tb"]"#,
            r#"{"x": 1, "x": 2}"#,
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "-",
            "\"\\ud800\"",
            "\"abc",
            "[1] 2",
            "nul",
            "\"\u{1}\"",
            "1e400",
            "",
        ] {
            same_as_serde(t);
        }
    }

    proptest::proptest! {
        /// Texts made of JSON's own characters: accepted and refused as serde_json does, and
        /// read to the same values.
        #[test]
        fn agrees_with_serde_on_json_like_text(t in r#"[\[\]{}":, 0-9a-z\\.eE+-]{0,40}"#) {
            same_as_serde(&t);
        }

        /// Any JSON document serde_json writes (compact or pretty) reads back to the same value.
        #[test]
        fn reads_every_document_serde_writes(v in any_json(), pretty: bool) {
            let text = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) };
            let ours = parse(&text.unwrap()).unwrap();
            proptest::prop_assert_eq!(to_serde_exact(&ours), v);
        }

        /// Any text at all: an answer, never a panic.
        #[test]
        fn never_panics(t in ".{0,80}") {
            let _ = parse(&t);
        }
    }

    /// Random JSON values: every kind, nested.
    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((".{0,6}", inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn bounded_depth_and_exact_integers() {
        assert!(parse(&"[".repeat(200)).is_err());
        assert!(parse(&format!("{}{}", "[".repeat(100), "]".repeat(100))).is_ok());
        assert_eq!(
            parse("18446744073709551615").unwrap().as_u64(),
            Some(u64::MAX)
        );
        assert_eq!(parse("4096.0").unwrap().as_u64(), None);
    }
}
