//! The regular expressions peft takes as `target_modules` when it is one string (peft matches
//! it with Python's `re.fullmatch` against each module's full name). A small backtracking
//! matcher of the subset those patterns use: literals and escapes (`\.`, `\d`, `\w`, `\s`),
//! `.`, classes (`[0-9]`, `[\d]`, `[^a]`), groups (`( )`, `(?: )`) with alternation, and the
//! quantifiers `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}` (greedy). Anything else is refused with
//! what it is, never guessed.

use std::cell::Cell;

/// One piece of a pattern.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A character class: ranges, negated or not.
    Class(Vec<(char, char)>, bool),
    /// Any character but a newline.
    Any,
    /// A group: its alternatives, each a sequence.
    Group(Vec<Vec<Node>>),
    /// A node repeated `min..=max` times.
    Repeat(Box<Node>, usize, usize),
}

/// A compiled pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct Regex {
    alts: Vec<Vec<Node>>,
}

/// Whether `text` reads as a regular expression rather than a module name.
pub fn looks_like_regex(text: &str) -> bool {
    text.contains(['(', '[', '*', '+', '?', '|', '\\', '^', '$', '{'])
}

fn class_of(c: char) -> Option<Vec<(char, char)>> {
    Some(match c {
        'd' => vec![('0', '9')],
        'w' => vec![('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')],
        's' => vec![(' ', ' '), ('\t', '\t'), ('\n', '\n'), ('\r', '\r')],
        _ => return None,
    })
}

struct Parser<'a> {
    c: &'a [char],
    i: usize,
}

impl Parser<'_> {
    fn alts(&mut self) -> Result<Vec<Vec<Node>>, String> {
        let mut alts = vec![self.seq()?];
        while self.c.get(self.i) == Some(&'|') {
            self.i += 1;
            alts.push(self.seq()?);
        }
        Ok(alts)
    }

    fn seq(&mut self) -> Result<Vec<Node>, String> {
        let mut out = vec![];
        while let Some(&ch) = self.c.get(self.i) {
            let atom = match ch {
                '|' | ')' => break,
                '(' => {
                    self.i += 1;
                    if self.c.get(self.i) == Some(&'?') {
                        if self.c.get(self.i + 1) == Some(&':') {
                            self.i += 2;
                        } else {
                            return Err(
                                "a group other than ( ) and (?: ) (look-around, named)".into()
                            );
                        }
                    }
                    let alts = self.alts()?;
                    if self.c.get(self.i) != Some(&')') {
                        return Err("a group that is not closed".into());
                    }
                    self.i += 1;
                    Node::Group(alts)
                }
                '[' => self.class()?,
                '.' => {
                    self.i += 1;
                    Node::Any
                }
                '^' | '$' => {
                    // fullmatch anchors both ends already.
                    self.i += 1;
                    continue;
                }
                '\\' => {
                    let e = *self.c.get(self.i + 1).ok_or("a pattern ending in \\")?;
                    self.i += 2;
                    match class_of(e) {
                        Some(r) => Node::Class(r, false),
                        None if e.is_ascii_alphanumeric() => {
                            return Err(format!("the escape \\{e}"));
                        }
                        None => Node::Class(vec![(e, e)], false),
                    }
                }
                '*' | '+' | '?' | '{' => return Err(format!("{ch} with nothing to repeat")),
                c => {
                    self.i += 1;
                    Node::Class(vec![(c, c)], false)
                }
            };
            out.push(self.quantified(atom)?);
        }
        Ok(out)
    }

    fn quantified(&mut self, atom: Node) -> Result<Node, String> {
        let (min, max) = match self.c.get(self.i) {
            Some('*') => (0, usize::MAX),
            Some('+') => (1, usize::MAX),
            Some('?') => (0, 1),
            Some('{') => {
                let end = self.c[self.i..]
                    .iter()
                    .position(|&x| x == '}')
                    .ok_or("a { that is not closed")?;
                let body: String = self.c[self.i + 1..self.i + end].iter().collect();
                let num = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("{{{body}}}"));
                let (min, max) = match body.split_once(',') {
                    None => (num(&body)?, num(&body)?),
                    Some((a, "")) => (num(a)?, usize::MAX),
                    Some((a, b)) => (num(a)?, num(b)?),
                };
                self.i += end;
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.i += 1;
        if matches!(self.c.get(self.i), Some('?') | Some('+')) {
            return Err("lazy or possessive quantifiers".into());
        }
        Ok(Node::Repeat(Box::new(atom), min, max))
    }

    fn class(&mut self) -> Result<Node, String> {
        self.i += 1;
        let neg = self.c.get(self.i) == Some(&'^');
        if neg {
            self.i += 1;
        }
        let mut ranges = vec![];
        let mut first = true;
        loop {
            let ch = *self.c.get(self.i).ok_or("a [ that is not closed")?;
            if ch == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            let lo = if ch == '\\' {
                let e = *self.c.get(self.i + 1).ok_or("a [ that is not closed")?;
                self.i += 2;
                if let Some(r) = class_of(e) {
                    ranges.extend(r);
                    continue;
                }
                e
            } else {
                self.i += 1;
                ch
            };
            if self.c.get(self.i) == Some(&'-') && self.c.get(self.i + 1).is_some_and(|&x| x != ']')
            {
                let hi = self.c[self.i + 1];
                self.i += 2;
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Node::Class(ranges, neg))
    }
}

impl Regex {
    /// Compiles `pattern`, or says what it uses that is not read.
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let c: Vec<char> = pattern.chars().collect();
        let mut p = Parser { c: &c, i: 0 };
        let alts = p.alts()?;
        if p.i != c.len() {
            return Err("a ) with no group open".into());
        }
        Ok(Regex { alts })
    }

    /// Whether the whole of `text` matches (Python's `re.fullmatch`).
    pub fn full_match(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        let budget = Cell::new(200_000usize);
        self.alts
            .iter()
            .any(|seq| run(seq, &t, 0, &budget, &mut |end| end == t.len()))
    }
}

/// Takes one step of the budget that bounds the search (a pattern that would backtrack
/// without end gives up: no match).
fn step(budget: &Cell<usize>) -> bool {
    let b = budget.get();
    budget.set(b.saturating_sub(1));
    b > 0
}

/// Matches `seq` at `at`, calling `k` with each end position; stops when `k` says yes.
fn run(
    seq: &[Node],
    t: &[char],
    at: usize,
    budget: &Cell<usize>,
    k: &mut dyn FnMut(usize) -> bool,
) -> bool {
    if !step(budget) {
        return false;
    }
    let Some((first, rest)) = seq.split_first() else {
        return k(at);
    };
    match first {
        Node::Any => t.get(at).is_some_and(|&c| c != '\n') && run(rest, t, at + 1, budget, k),
        Node::Class(ranges, neg) => {
            t.get(at)
                .is_some_and(|&c| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *neg)
                && run(rest, t, at + 1, budget, k)
        }
        Node::Group(alts) => alts
            .iter()
            .any(|alt| run(alt, t, at, budget, &mut |end| run(rest, t, end, budget, k))),
        Node::Repeat(node, min, max) => repeat(node, (*min, *max), rest, t, (at, 0), budget, k),
    }
}

/// `node` repeated, `done` times so far from `at`, then `rest`: greedy, one more first (never
/// an empty step, which would not end), then stop.
fn repeat(
    node: &Node,
    (min, max): (usize, usize),
    rest: &[Node],
    t: &[char],
    (at, done): (usize, usize),
    budget: &Cell<usize>,
    k: &mut dyn FnMut(usize) -> bool,
) -> bool {
    if !step(budget) {
        return false;
    }
    if done < max {
        let one = std::slice::from_ref(node);
        let more = run(one, t, at, budget, &mut |end| {
            end > at && repeat(node, (min, max), rest, t, (end, done + 1), budget, k)
        });
        if more {
            return true;
        }
    }
    done >= min && run(rest, t, at, budget, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Regex::new(p).unwrap().full_match(t)
    }

    #[test]
    fn the_patterns_in_axolotl_examples_match_as_python_does() {
        let vl = r"model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj";
        assert!(m(vl, "model.language_model.layers.12.self_attn.q_proj"));
        assert!(m(vl, "model.language_model.layers.0.mlp.down_proj"));
        assert!(!m(vl, "model.vision_tower.layers.0.mlp.down_proj"));
        assert!(!m(
            vl,
            "model.language_model.layers.0.self_attn.q_proj.lora_A"
        ));
        let some = r".*\.layers\.(3|7|11)\.self_attn\.(q|k|v|o)_proj|.*\.mlp\.(gate|up|down)_proj";
        assert!(m(some, "model.layers.7.self_attn.o_proj"));
        assert!(!m(some, "model.layers.8.self_attn.o_proj"));
        assert!(m(some, "model.layers.8.mlp.up_proj"));
        let opt = r"model.language_model.layers.[\d]+.(_checkpoint_wrapped_module.)?(mlp|self_attn).(up|down|gate|q|k|v|o)_proj";
        assert!(m(
            opt,
            "model.language_model.layers.3._checkpoint_wrapped_module.mlp.up_proj"
        ));
        assert!(m(opt, "model.language_model.layers.3.mlp.up_proj"));
        assert!(m(r"^a{2,3}b$", "aaab") && !m(r"a{2,3}b", "ab"));
        assert!(m(r"[^x]+", "abc") && !m(r"[^x]+", "axc"));
        assert!(m(r"(?:q|k)_proj", "k_proj"));
    }

    #[test]
    fn what_is_not_read_is_refused() {
        for p in [
            r"(?=q)q_proj",
            r"q\bproj",
            "(q_proj",
            "q_proj)",
            "*a",
            "a+?",
            "[ab",
        ] {
            assert!(Regex::new(p).is_err(), "{p}");
        }
        // A pattern that would backtrack without end gives up instead of hanging.
        let r = Regex::new("(a*)*b").unwrap();
        assert!(!r.full_match(&"a".repeat(40)));
    }
}
