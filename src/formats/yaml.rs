//! The YAML that training configs are written in (LLaMA-Factory's and axolotl's examples), read
//! into a JSON value: block mappings and sequences by indentation, `- key: value` items, flow
//! lists and maps, quoted scalars, `|` / `>` block text, comments. Scalars follow PyYAML's
//! `safe_load` (YAML 1.1), which both frameworks use: `yes` / `no` / `on` / `off` are booleans,
//! `~` and an empty value are null. Anchors, aliases, tags and multi-document streams are
//! refused with the line they are on, not guessed.

use serde_json::{Map, Number, Value};

/// One meaningful line: its indentation, its text without the comment, its 1-based number.
struct Line {
    indent: usize,
    text: String,
    no: usize,
}

/// Parses a YAML document into JSON (mappings as objects, in document order).
pub fn parse(text: &str) -> Result<Value, String> {
    let mut lines = vec![];
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let lead = &raw[..raw.len() - raw.trim_start().len()];
        if lead.contains('\t') && !raw.trim().is_empty() {
            return Err(format!(
                "line {no}: a tab in the indentation (YAML indents with spaces)"
            ));
        }
        let body = strip_comment(raw);
        let trimmed = body.trim_end();
        if trimmed.trim().is_empty() {
            continue;
        }
        if trimmed == "---" && lines.is_empty() {
            continue;
        }
        if trimmed == "---" || trimmed == "..." {
            return Err(format!(
                "line {no}: a second YAML document (one config per file)"
            ));
        }
        let indent = trimmed.len() - trimmed.trim_start().len();
        lines.push(Line {
            indent,
            text: trimmed.trim_start().to_string(),
            no,
        });
    }
    if lines.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    join_open_flows(&mut lines)?;
    let mut i = 0;
    let indent = lines[0].indent;
    let v = block(&mut lines, &mut i, indent, text)?;
    if let Some(l) = lines.get(i) {
        return Err(format!("line {}: unexpected indentation", l.no));
    }
    Ok(v)
}

/// The depth of `[` / `{` a line leaves open, outside quotes.
fn open_depth(text: &str) -> i64 {
    let (mut single, mut double, mut depth) = (false, false, 0i64);
    for c in text.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '[' | '{' if !single && !double => depth += 1,
            ']' | '}' if !single && !double => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// A flow list or map that goes on over several lines is joined into its first line, as
/// PyYAML reads it.
fn join_open_flows(lines: &mut Vec<Line>) -> Result<(), String> {
    let mut i = 0;
    while i < lines.len() {
        let no = lines[i].no;
        // Only a value that opens a flow collection (`key: [`, `- {`) goes on.
        let t = lines[i].text.trim_start_matches("- ");
        let value = key_split(t).map_or_else(|| t.to_string(), |(_, v)| v);
        if !value.trim_start().starts_with(['[', '{']) {
            i += 1;
            continue;
        }
        while open_depth(&lines[i].text) > 0 {
            if i + 1 >= lines.len() {
                return Err(format!("line {no}: a flow list or map that is not closed"));
            }
            let next = lines.remove(i + 1);
            lines[i].text.push(' ');
            lines[i].text.push_str(&next.text);
        }
        i += 1;
    }
    Ok(())
}

/// A line without its comment: `#` at the start or after a blank, outside quotes.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && (prev == ' ' || prev == '\t' || i == 0) => {
                return &line[..i]
            }
            _ => {}
        }
        prev = c;
    }
    line
}

/// The block (mapping or sequence) whose lines start at `indent`.
fn block(lines: &mut Vec<Line>, i: &mut usize, indent: usize, src: &str) -> Result<Value, String> {
    if is_item(&lines[*i].text) {
        sequence(lines, i, indent, src)
    } else {
        mapping(lines, i, indent, src)
    }
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

fn sequence(
    lines: &mut Vec<Line>,
    i: &mut usize,
    indent: usize,
    src: &str,
) -> Result<Value, String> {
    let mut out = vec![];
    while *i < lines.len() && lines[*i].indent == indent && is_item(&lines[*i].text) {
        let rest = lines[*i].text[1..].trim_start().to_string();
        let no = lines[*i].no;
        if rest.is_empty() {
            *i += 1;
            match lines.get(*i) {
                Some(l) if l.indent > indent => {
                    let inner = l.indent;
                    out.push(block(lines, i, inner, src)?);
                }
                _ => out.push(Value::Null),
            }
        } else if key_split(&rest).is_some() && !rest.starts_with(['[', '{', '"', '\'']) {
            // `- key: value` opens a mapping whose keys line up with `key`.
            let offset = lines[*i].text.len() - rest.len();
            lines[*i].indent = indent + offset;
            lines[*i].text = rest;
            let inner = lines[*i].indent;
            out.push(mapping(lines, i, inner, src)?);
        } else {
            out.push(scalar(&rest, no)?);
            *i += 1;
        }
    }
    if let Some(l) = lines.get(*i) {
        if l.indent > indent {
            return Err(format!("line {}: unexpected indentation", l.no));
        }
    }
    Ok(Value::Array(out))
}

/// `key: value` or `key:` split at the first `: ` (or a final `:`) outside quotes.
fn key_split(text: &str) -> Option<(String, String)> {
    let (mut single, mut double) = (false, false);
    let b = text.as_bytes();
    for (k, &c) in b.iter().enumerate() {
        match c {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b':' if !single && !double && (k + 1 == b.len() || b[k + 1] == b' ') => {
                let key = text[..k].trim();
                let key = unquote(key).unwrap_or_else(|| key.to_string());
                return Some((key, text[k + 1..].trim().to_string()));
            }
            _ => {}
        }
    }
    None
}

fn mapping(
    lines: &mut Vec<Line>,
    i: &mut usize,
    indent: usize,
    src: &str,
) -> Result<Value, String> {
    let mut out = Map::new();
    while *i < lines.len() && lines[*i].indent == indent && !is_item(&lines[*i].text) {
        let no = lines[*i].no;
        let text = lines[*i].text.clone();
        let Some((key, value)) = key_split(&text) else {
            return Err(format!("line {no}: expected `key: value`, got {text:?}"));
        };
        if key.starts_with(['&', '*', '!', '?']) || value.starts_with(['&', '*', '!']) {
            return Err(format!(
                "line {no}: anchors, aliases, tags and complex keys are not read"
            ));
        }
        *i += 1;
        let v = if value.is_empty() {
            match lines.get(*i) {
                Some(l) if l.indent > indent => {
                    let inner = l.indent;
                    block(lines, i, inner, src)?
                }
                // A sequence may sit at its key's indentation.
                Some(l) if l.indent == indent && is_item(&l.text) => {
                    sequence(lines, i, indent, src)?
                }
                _ => Value::Null,
            }
        } else if matches!(value.chars().next(), Some('|' | '>')) {
            let folded = value.starts_with('>');
            let mut parts = vec![];
            while *i < lines.len() && lines[*i].indent > indent {
                parts.push(lines[*i].text.clone());
                *i += 1;
            }
            Value::String(parts.join(if folded { " " } else { "\n" }))
        } else {
            scalar(&value, no)?
        };
        if out.insert(key.clone(), v).is_some() {
            return Err(format!("line {no}: key {key:?} given twice"));
        }
    }
    if let Some(l) = lines.get(*i) {
        if l.indent > indent {
            return Err(format!("line {}: unexpected indentation", l.no));
        }
    }
    Ok(Value::Object(out))
}

/// The text of a quoted scalar, if `t` is one.
fn unquote(t: &str) -> Option<String> {
    if t.len() >= 2 && t.starts_with('\'') && t.ends_with('\'') {
        return Some(t[1..t.len() - 1].replace("''", "'"));
    }
    if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') {
        let mut out = String::new();
        let mut chars = t[1..t.len() - 1].chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(o) => out.push(o),
                    None => {}
                }
            } else {
                out.push(c);
            }
        }
        return Some(out);
    }
    None
}

/// Splits a flow collection's inside at top-level commas.
fn flow_items(inner: &str) -> Vec<String> {
    let (mut depth, mut single, mut double) = (0i32, false, false);
    let mut out = vec![];
    let mut cur = String::new();
    for c in inner.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '[' | '{' if !single && !double => depth += 1,
            ']' | '}' if !single && !double => depth -= 1,
            ',' if depth == 0 && !single && !double => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A scalar or flow collection, typed as PyYAML's `safe_load` types it.
fn scalar(t: &str, no: usize) -> Result<Value, String> {
    let t = t.trim();
    if let Some(s) = unquote(t) {
        return Ok(Value::String(s));
    }
    if t.starts_with('[') {
        let inner = t
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .ok_or_else(|| format!("line {no}: a flow list must end on its line with `]`"))?;
        return flow_items(inner)
            .iter()
            .map(|x| scalar(x, no))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if t.starts_with('{') {
        let inner = t
            .strip_prefix('{')
            .and_then(|x| x.strip_suffix('}'))
            .ok_or_else(|| format!("line {no}: a flow map must end on its line with `}}`"))?;
        let mut m = Map::new();
        for item in flow_items(inner) {
            let (k, v) = key_split(&item)
                .ok_or_else(|| format!("line {no}: expected `key: value` in {{…}}"))?;
            m.insert(k, scalar(&v, no)?);
        }
        return Ok(Value::Object(m));
    }
    if t.starts_with(['&', '*', '!']) {
        return Err(format!("line {no}: anchors, aliases and tags are not read"));
    }
    Ok(match t {
        "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Value::Bool(true),
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            Value::Bool(false)
        }
        _ => number(t).unwrap_or_else(|| Value::String(t.to_string())),
    })
}

/// An integer, or a float as YAML 1.1 writes one (PyYAML reads `5e-5`, without a dot, as text;
/// it is read as a number here, which is what the trainers then make of it).
fn number(t: &str) -> Option<Value> {
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t).replace('_', "");
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let clean = t.replace('_', "");
        if let Ok(i) = clean.parse::<i64>() {
            return Some(Value::Number(i.into()));
        }
    }
    if t.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'-' || b == b'+' || b == b'.')
        && t.bytes().any(|b| b.is_ascii_digit())
    {
        let f: f64 = t.replace('_', "").parse().ok()?;
        return Number::from_f64(f).map(Value::Number);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_shapes_configs_use() {
        let v = parse(
            "### model\nmodel_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct  # a comment\n\
             lora_target: all\nlearning_rate: 1.0e-4\nlr: 5e-5\nbf16: true\nn: 8\nempty:\n\
             flag: yes\nquoted: \"a # not a comment\"\nsingle: 'it''s'\n\
             fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  fsdp_offload_params: true\n  nested:\n    deep: 1\n\
             datasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\n  - path: b\nflow: [q_proj, \"v_proj\"]\nmap: {a: 1, b: x}\n\
             same_indent:\n- a\n- b\ntext: |\n  line one\n  line two\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({
                "model_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct",
                "lora_target": "all", "learning_rate": 1.0e-4, "lr": 5e-5, "bf16": true, "n": 8,
                "empty": null, "flag": true, "quoted": "a # not a comment", "single": "it's",
                "fsdp": ["full_shard", "auto_wrap"],
                "fsdp_config": {"fsdp_offload_params": true, "nested": {"deep": 1}},
                "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}, {"path": "b"}],
                "flow": ["q_proj", "v_proj"], "map": {"a": 1, "b": "x"},
                "same_indent": ["a", "b"], "text": "line one\nline two"
            })
        );
    }

    #[test]
    fn refuses_what_it_does_not_read_with_the_line() {
        for (text, needle) in [
            ("a: 1\n  b: 2\n", "line 2"),
            ("a: 1\na: 2\n", "given twice"),
            ("a: &x 1\n", "anchors"),
            ("a: 1\n---\nb: 2\n", "second YAML document"),
            ("just text\n", "expected `key: value`"),
            ("a: [1, 2\n", "flow list"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
