//! The calls and assignments of a Python training script, read without running it: every call
//! `name(...)` with its positional and keyword arguments, and every statement `NAME = value`.
//! Argument values that are literals (strings, numbers, `True` / `False` / `None`, lists, tuples
//! and dicts of literals, `torch.<dtype>`) become JSON values; a bare name is looked up among the
//! script's assignments (once assigned, to a literal); anything else keeps its source text, so the
//! reader can say which key it could not use and why.

use serde_json::{Map, Number, Value};

/// An argument's value: a literal, or the text of an expression that is not one.
#[derive(Clone, Debug, PartialEq)]
pub enum PyValue {
    /// A literal, as JSON.
    Lit(Value),
    /// Not a literal: the expression as written.
    Expr(String),
}

/// One argument of a call.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// The keyword, `None` for a positional argument.
    pub name: Option<String>,
    /// Its value.
    pub value: PyValue,
}

/// A call `a.b.name(...)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The callee as written, dotted (`AutoModelForCausalLM.from_pretrained`).
    pub callee: String,
    /// Its arguments, in order.
    pub args: Vec<Arg>,
}

impl Call {
    /// The callee's last name (`from_pretrained`).
    pub fn name(&self) -> &str {
        self.callee.rsplit('.').next().unwrap_or(&self.callee)
    }

    /// The keyword arguments as a JSON object; a value that is not a literal is given to
    /// `expr` (key, text), which says what stands in its place (`None`: left out).
    pub fn keywords(
        &self,
        mut expr: impl FnMut(&str, &str) -> Option<Value>,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for a in &self.args {
            let Some(k) = &a.name else { continue };
            match &a.value {
                PyValue::Lit(v) => {
                    out.insert(k.clone(), v.clone());
                }
                PyValue::Expr(t) => {
                    if let Some(v) = expr(k, t) {
                        out.insert(k.clone(), v);
                    }
                }
            }
        }
        out
    }

    /// The `i`-th positional argument.
    pub fn positional(&self, i: usize) -> Option<&PyValue> {
        self.args
            .iter()
            .filter(|a| a.name.is_none())
            .nth(i)
            .map(|a| &a.value)
    }
}

/// What a script calls and assigns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    /// Every call, in the order its name appears.
    pub calls: Vec<Call>,
    /// `NAME = value` statements, resolved as arguments are.
    pub assigns: Vec<(String, PyValue)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    /// An f-string or bytes literal: not a value the reader uses.
    OtherStr(String),
    Num(String),
    Op(String),
    /// The end of a logical line (outside brackets).
    End,
}

fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = text.chars().collect();
    let mut out = vec![];
    let mut depth = 0usize;
    let mut i = 0;
    let mut line = 1;
    while i < c.len() {
        let ch = c[i];
        match ch {
            '\n' => {
                line += 1;
                if depth == 0 && out.last().is_some_and(|t| *t != Tok::End) {
                    out.push(Tok::End);
                }
                i += 1;
            }
            '#' => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '\\' if c.get(i + 1) == Some(&'\n') => {
                line += 1;
                i += 2;
            }
            ';' if depth == 0 => {
                out.push(Tok::End);
                i += 1;
            }
            c0 if c0.is_whitespace() => i += 1,
            c0 if c0.is_ascii_digit()
                || (c0 == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let start = i;
                while i < c.len()
                    && (c[i].is_ascii_alphanumeric()
                        || c[i] == '.'
                        || c[i] == '_'
                        || ((c[i] == '-' || c[i] == '+') && matches!(c[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
                out.push(Tok::Num(c[start..i].iter().collect()));
            }
            c0 if c0.is_alphabetic() || c0 == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                // A string prefix (r, b, f, u and their pairs) directly before a quote.
                if word.len() <= 2
                    && word.chars().all(|p| "rRbBfFuU".contains(p))
                    && matches!(c.get(i), Some('"') | Some('\''))
                {
                    let (s, next) = string_at(&c, i, line)?;
                    let raw = word.contains(['r', 'R']);
                    let plain = !word.contains(['b', 'B', 'f', 'F']);
                    line += s.matches('\n').count();
                    let body = if raw { s } else { unescape(&s) };
                    out.push(if plain {
                        Tok::Str(body)
                    } else {
                        Tok::OtherStr(format!("{word}{:?}", body))
                    });
                    i = next;
                } else {
                    out.push(Tok::Name(word));
                }
            }
            '"' | '\'' => {
                let (s, next) = string_at(&c, i, line)?;
                line += s.matches('\n').count();
                out.push(Tok::Str(unescape(&s)));
                i = next;
            }
            '(' | '[' | '{' => {
                depth += 1;
                out.push(Tok::Op(ch.to_string()));
                i += 1;
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                out.push(Tok::Op(ch.to_string()));
                i += 1;
            }
            _ => {
                // Two-character operators that contain `=` must not read as an assignment.
                let two: String = c[i..(i + 2).min(c.len())].iter().collect();
                if [
                    "==", "!=", "<=", ">=", "**", "->", ":=", "+=", "-=", "*=", "/=",
                ]
                .contains(&two.as_str())
                {
                    out.push(Tok::Op(two));
                    i += 2;
                } else {
                    out.push(Tok::Op(ch.to_string()));
                    i += 1;
                }
            }
        }
    }
    out.push(Tok::End);
    Ok(out)
}

/// The string literal opening at `c[i]` (a quote): its body as written and the index after it.
fn string_at(c: &[char], i: usize, line: usize) -> Result<(String, usize), String> {
    let q = c[i];
    let triple = c.get(i + 1) == Some(&q) && c.get(i + 2) == Some(&q);
    let mut j = if triple { i + 3 } else { i + 1 };
    let start = j;
    while j < c.len() {
        if c[j] == '\\' {
            j += 2;
            continue;
        }
        if triple {
            if c[j] == q && c.get(j + 1) == Some(&q) && c.get(j + 2) == Some(&q) {
                return Ok((c[start..j].iter().collect(), j + 3));
            }
        } else if c[j] == q {
            return Ok((c[start..j].iter().collect(), j + 1));
        } else if c[j] == '\n' {
            break;
        }
        j += 1;
    }
    Err(format!("line {line}: a string that is not closed"))
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(ch) = it.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\n') => {}
            Some(o) if "\\'\"".contains(o) => out.push(o),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// The index of the bracket that closes the one at `open`.
fn closing(t: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, tok) in t.iter().enumerate().skip(open) {
        if let Tok::Op(o) = tok {
            match o.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return j;
                    }
                }
                _ => {}
            }
        }
    }
    t.len()
}

/// `t` split at its top-level commas (an empty last part, after a trailing comma, left out).
fn split_commas(t: &[Tok]) -> Vec<&[Tok]> {
    let mut parts = vec![];
    let (mut depth, mut start) = (0usize, 0);
    for (j, tok) in t.iter().enumerate() {
        if let Tok::Op(o) = tok {
            match o.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth = depth.saturating_sub(1),
                "," if depth == 0 => {
                    parts.push(&t[start..j]);
                    start = j + 1;
                }
                _ => {}
            }
        }
    }
    if start < t.len() {
        parts.push(&t[start..]);
    }
    parts
}

fn text_of(t: &[Tok]) -> String {
    let mut out = String::new();
    for tok in t {
        let piece = match tok {
            Tok::Name(n) | Tok::Num(n) | Tok::Op(n) | Tok::OtherStr(n) => n.clone(),
            Tok::Str(s) => format!("{s:?}"),
            Tok::End => continue,
        };
        let glue = matches!(piece.as_str(), "." | "(" | ")" | "[" | "]" | ",")
            || out.ends_with(['.', '(', '['])
            || out.is_empty();
        if !glue {
            out.push(' ');
        }
        out.push_str(&piece);
    }
    out
}

/// The dotted name `t` is (`torch.bfloat16`), if it is one.
fn dotted(t: &[Tok]) -> Option<String> {
    let mut out = String::new();
    for (j, tok) in t.iter().enumerate() {
        match (j % 2, tok) {
            (0, Tok::Name(n)) => out.push_str(n),
            (1, Tok::Op(o)) if o == "." => out.push('.'),
            _ => return None,
        }
    }
    (t.len() % 2 == 1).then_some(out)
}

fn number(text: &str, negative: bool) -> Option<Value> {
    let clean = text.replace('_', "");
    let sign = if negative { "-" } else { "" };
    if let Ok(i) = format!("{sign}{clean}").parse::<i64>() {
        return Some(Value::Number(i.into()));
    }
    format!("{sign}{clean}")
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
}

/// The value of the expression `t`; `names` resolves a bare name.
fn value(t: &[Tok], names: &dyn Fn(&str) -> Option<Value>) -> PyValue {
    let expr = || PyValue::Expr(text_of(t));
    match t {
        [] => expr(),
        [Tok::Num(n)] => number(n, false).map_or_else(expr, PyValue::Lit),
        [Tok::Op(m), Tok::Num(n)] if m == "-" || m == "+" => {
            number(n, m == "-").map_or_else(expr, PyValue::Lit)
        }
        [Tok::Name(n)] => match n.as_str() {
            "True" => PyValue::Lit(Value::Bool(true)),
            "False" => PyValue::Lit(Value::Bool(false)),
            "None" => PyValue::Lit(Value::Null),
            _ => names(n).map_or_else(expr, PyValue::Lit),
        },
        _ if t.iter().all(|x| matches!(x, Tok::Str(_))) => PyValue::Lit(Value::String(
            t.iter()
                .map(|x| match x {
                    Tok::Str(s) => s.as_str(),
                    _ => "",
                })
                .collect(),
        )),
        [Tok::Op(o), inner @ .., Tok::Op(c)]
            if (o == "[" && c == "]") || (o == "(" && c == ")") =>
        {
            // A list or a tuple (a parenthesised single value is that value).
            let parts = split_commas(inner);
            let tuple = inner.iter().any(|x| *x == Tok::Op(",".into()));
            if o == "(" && !tuple {
                return value(inner, names);
            }
            let mut items = vec![];
            for p in parts {
                match value(p, names) {
                    PyValue::Lit(v) => items.push(v),
                    PyValue::Expr(_) => return expr(),
                }
            }
            PyValue::Lit(Value::Array(items))
        }
        [Tok::Op(o), inner @ .., Tok::Op(c)] if o == "{" && c == "}" => {
            let mut obj = Map::new();
            for p in split_commas(inner) {
                let Some(colon) = p.iter().position(|x| *x == Tok::Op(":".into())) else {
                    return expr();
                };
                match (&p[..colon], value(&p[colon + 1..], names)) {
                    ([Tok::Str(k)], PyValue::Lit(v)) => {
                        obj.insert(k.clone(), v);
                    }
                    _ => return expr(),
                }
            }
            PyValue::Lit(Value::Object(obj))
        }
        _ => match dotted(t) {
            // torch's dtypes, by the name the settings read (torch.bfloat16).
            Some(d) if d.starts_with("torch.") && !d[6..].contains('.') => {
                PyValue::Lit(Value::String(d))
            }
            _ => expr(),
        },
    }
}

/// Reads the calls and assignments of `text`; fails only on a string that is not closed.
pub fn parse(text: &str) -> Result<Script, String> {
    let t = tokenize(text)?;
    // Assignments first (a name is resolved against every literal assignment of it, wherever
    // it stands): `NAME = value` at the start of a logical line.
    let mut raw: Vec<(String, &[Tok])> = vec![];
    let mut start = 0;
    for (j, tok) in t.iter().enumerate() {
        if *tok != Tok::End {
            continue;
        }
        let stmt = &t[start..j];
        start = j + 1;
        if let [Tok::Name(n), Tok::Op(eq), rhs @ ..] = stmt {
            if eq == "=" && !rhs.is_empty() {
                raw.push((n.clone(), rhs));
            }
        }
    }
    let none = |_: &str| None;
    let literal: Vec<(String, PyValue)> = raw
        .iter()
        .map(|(n, rhs)| (n.clone(), value(rhs, &none)))
        .collect();
    // A name is resolved when every assignment of it gives the same literal.
    let names = |n: &str| -> Option<Value> {
        let mut found: Option<Value> = None;
        for (k, v) in &literal {
            if k != n {
                continue;
            }
            match (v, &found) {
                (PyValue::Lit(x), None) => found = Some(x.clone()),
                (PyValue::Lit(x), Some(f)) if x == f => {}
                _ => return None,
            }
        }
        found
    };
    let assigns = raw
        .iter()
        .map(|(n, rhs)| (n.clone(), value(rhs, &names)))
        .collect();
    let mut calls = vec![];
    for j in 0..t.len() {
        let (Tok::Name(_), Some(Tok::Op(p))) = (&t[j], t.get(j + 1)) else {
            continue;
        };
        if p != "(" {
            continue;
        }
        // The dotted callee ending here.
        let mut k = j;
        while k >= 2 && t[k - 1] == Tok::Op(".".into()) && matches!(t[k - 2], Tok::Name(_)) {
            k -= 2;
        }
        let callee = dotted(&t[k..=j]).unwrap_or_default();
        let close = closing(&t, j + 1);
        let inner = &t[j + 2..close.min(t.len())];
        let mut args = vec![];
        for part in split_commas(inner) {
            match part {
                [Tok::Name(kw), Tok::Op(eq), rhs @ ..] if eq == "=" => args.push(Arg {
                    name: Some(kw.clone()),
                    value: value(rhs, &names),
                }),
                [Tok::Op(star), rest @ ..] if star == "**" || star == "*" => args.push(Arg {
                    name: Some(format!("{star}{}", text_of(rest))),
                    value: PyValue::Expr(text_of(part)),
                }),
                _ => args.push(Arg {
                    name: None,
                    value: value(part, &names),
                }),
            }
        }
        calls.push(Call { callee, args });
    }
    Ok(Script { calls, assigns })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call<'s>(s: &'s Script, name: &str) -> &'s Call {
        s.calls.iter().find(|c| c.name() == name).unwrap()
    }

    #[test]
    fn keywords_literals_and_names_are_read() {
        let s = parse(
            "import torch\nR = 16\nlora = LoraConfig(\n    r=R,  # rank\n    lora_alpha=2 * R,\n    target_modules=['q_proj', \"v_proj\"],\n    lora_dropout=.05,\n)\nargs = TrainingArguments(output_dir=f\"out/{R}\", bf16=True, learning_rate=-1e-4, kw={'use_reentrant': False}, t=(1,))\nmodel = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', torch_dtype=torch.bfloat16, **extra)\n",
        )
        .unwrap();
        let l = call(&s, "LoraConfig");
        let kw = l.keywords(|_, t| Some(json!({ "expr": t })));
        assert_eq!(kw["r"], json!(16));
        assert_eq!(kw["lora_alpha"], json!({"expr": "2 * R"}));
        assert_eq!(kw["target_modules"], json!(["q_proj", "v_proj"]));
        assert_eq!(kw["lora_dropout"], json!(0.05));
        let a = call(&s, "TrainingArguments").keywords(|_, _| None);
        assert_eq!(a.get("output_dir"), None, "an f-string is not a literal");
        assert_eq!(a["bf16"], json!(true));
        assert_eq!(a["learning_rate"], json!(-0.0001));
        assert_eq!(a["kw"], json!({"use_reentrant": false}));
        assert_eq!(a["t"], json!([1]));
        let m = call(&s, "from_pretrained");
        assert_eq!(m.callee, "AutoModelForCausalLM.from_pretrained");
        assert_eq!(
            m.positional(0),
            Some(&PyValue::Lit(json!("meta-llama/Llama-2-7b-hf")))
        );
        assert_eq!(
            m.keywords(|_, _| None)["torch_dtype"],
            json!("torch.bfloat16")
        );
        assert!(m.args.iter().any(|a| a.name.as_deref() == Some("**extra")));
    }

    #[test]
    fn a_name_assigned_two_values_is_not_resolved_and_comments_are_skipped() {
        let s = parse("B = 2\nif x:\n    B = 4\nf(batch=B, s='# not a comment')  # f(batch=9)\n")
            .unwrap();
        let f = &s
            .calls
            .iter()
            .filter(|c| c.name() == "f")
            .collect::<Vec<_>>();
        assert_eq!(f.len(), 1);
        let kw = f[0].keywords(|_, t| Some(Value::String(format!("<{t}>"))));
        assert_eq!(kw["batch"], json!("<B>"));
        assert_eq!(kw["s"], json!("# not a comment"));
    }

    #[test]
    fn triple_quoted_strings_and_nested_calls() {
        let s = parse("\"\"\"doc\nLoraConfig(r=1)\n\"\"\"\ntrainer = SFTTrainer(args=SFTConfig(max_length=512), peft_config=LoraConfig(r=4))\n").unwrap();
        let names: Vec<&str> = s.calls.iter().map(Call::name).collect();
        assert_eq!(names, ["SFTTrainer", "SFTConfig", "LoraConfig"]);
        assert_eq!(call(&s, "LoraConfig").keywords(|_, _| None)["r"], json!(4));
        assert!(parse("x = 'open").is_err());
    }
}
