//! A regex to a boolean query over grams that every file holding a match
//! satisfies (docs/index.md, "N-gram scheme"), and its evaluation over the
//! posting lists to a set of candidate content ids.
//!
//! The analysis is Russ Cox's for Google Code Search, on regex-syntax's HIR
//! parsed exactly as grep's matcher parses it: for each node, what every
//! match of it can be said to be (a small set of exact strings) or to start
//! and end with (prefix and suffix sets), and a query every match satisfies.
//! Strings are kept ASCII folded, as the index's grams are. Soundness is the
//! one rule: whenever unsure, a part of the query is `All`.

use std::collections::BTreeSet;

use regex_syntax::ast::parse::ParserBuilder;
use regex_syntax::hir::{self, Class, Hir, HirKind};

use super::grams::{fold, pack, Gram, Postings, GRAM_LEN, NL};

/// What every file holding a match must contain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum GramQuery {
    /// Nothing can be said: every file is a candidate.
    All,
    Gram(Gram),
    And(Vec<GramQuery>),
    Or(Vec<GramQuery>),
}

/// Strings in an exact, prefix or suffix set at most: a product of two sets
/// that would exceed it is given up (turned into the query). 64 keeps
/// `[0-9a-f]`-sized classes and a few `-i` expansions exact while queries
/// stay at most a few hundred grams.
const MAX_SET: usize = 64;
/// Characters in a class expanded to its strings at most: larger classes
/// (`\w`, `.`, `[^x]`) say nothing.
const MAX_CLASS: usize = 32;

type Set = BTreeSet<Vec<u8>>;

/// What is known about the matches of one HIR node.
#[derive(Debug, Clone)]
struct Info {
    /// Every match is one of these (folded) strings.
    exact: Option<Set>,
    /// Every match starts with one of these; ends with one of `suffix`
    /// (meaningful when `exact` is `None`).
    prefix: Set,
    suffix: Set,
    /// Holds for every match.
    query: GramQuery,
}

fn one(s: &[u8]) -> Set {
    BTreeSet::from([s.to_vec()])
}

impl Info {
    fn exact(set: Set) -> Info {
        Info {
            exact: Some(set),
            prefix: Set::new(),
            suffix: Set::new(),
            query: GramQuery::All,
        }
    }

    /// Nothing known (matches anything, empty included).
    fn any() -> Info {
        Info {
            exact: None,
            prefix: one(b""),
            suffix: one(b""),
            query: GramQuery::All,
        }
    }

    /// What every match starts with.
    fn starts(&self) -> &Set {
        self.exact.as_ref().unwrap_or(&self.prefix)
    }

    /// What every match ends with.
    fn ends(&self) -> &Set {
        self.exact.as_ref().unwrap_or(&self.suffix)
    }

    /// Gives up the exact set, keeping what it implies: its query, and the
    /// set as prefixes and suffixes.
    fn inexact(mut self) -> Info {
        if let Some(exact) = self.exact.take() {
            self.query = and(vec![self.query, set_query(&exact)]);
            self.prefix = exact.clone();
            self.suffix = exact;
        }
        self
    }

    /// The query of everything known.
    fn into_query(self) -> GramQuery {
        match self.exact {
            Some(exact) => and(vec![self.query, set_query(&exact)]),
            None => and(vec![
                self.query,
                set_query(&self.prefix),
                set_query(&self.suffix),
            ]),
        }
    }

    /// Keeps the prefix and suffix sets small: too large a set is saved to
    /// the query, then cut to its strings' first (last) `GRAM_LEN - 1`
    /// bytes, which can still form grams with what comes before or after.
    fn bound(mut self) -> Info {
        if let Some(exact) = &self.exact {
            if exact.len() > MAX_SET {
                self = self.inexact();
            }
        }
        if self.exact.is_none() {
            for (set, is_prefix) in [(&mut self.prefix, true), (&mut self.suffix, false)] {
                if set.len() <= MAX_SET {
                    continue;
                }
                self.query = and(vec![
                    std::mem::replace(&mut self.query, GramQuery::All),
                    set_query(set),
                ]);
                let keep = GRAM_LEN - 1;
                let cut: Set = set
                    .iter()
                    .map(|s| {
                        if s.len() <= keep {
                            s.clone()
                        } else if is_prefix {
                            s[..keep].to_vec()
                        } else {
                            s[s.len() - keep..].to_vec()
                        }
                    })
                    .collect();
                *set = if cut.len() <= MAX_SET { cut } else { one(b"") };
            }
        }
        self
    }
}

/// Every pairing of a string of `a` then one of `b`, if not too many.
fn product(a: &Set, b: &Set) -> Option<Set> {
    if a.len().saturating_mul(b.len()) > MAX_SET {
        return None;
    }
    let mut out = Set::new();
    for x in a {
        for y in b {
            let mut s = x.clone();
            s.extend_from_slice(y);
            out.insert(s);
        }
    }
    Some(out)
}

/// The grams of one string, all required (`All` if it has none). A gram
/// holding a line end is never indexed (grep's matches hold none), so it
/// says nothing.
fn string_query(s: &[u8]) -> GramQuery {
    and(s
        .windows(GRAM_LEN)
        .map(|w| {
            if w.contains(&NL) {
                GramQuery::All
            } else {
                GramQuery::Gram(pack(w[0], w[1], w[2]))
            }
        })
        .collect())
}

/// One of the strings occurs.
fn set_query(set: &Set) -> GramQuery {
    if set.is_empty() {
        // No string: no match possible; `All` is sound and simple.
        return GramQuery::All;
    }
    or(set.iter().map(|s| string_query(s)).collect())
}

fn and(parts: Vec<GramQuery>) -> GramQuery {
    let mut out = Vec::new();
    for p in parts {
        match p {
            GramQuery::All => {}
            GramQuery::And(v) => out.extend(v),
            q => out.push(q),
        }
    }
    dedup(&mut out);
    match out.len() {
        0 => GramQuery::All,
        1 => out.pop().expect("one"),
        _ => GramQuery::And(out),
    }
}

fn or(parts: Vec<GramQuery>) -> GramQuery {
    let mut out = Vec::new();
    for p in parts {
        match p {
            GramQuery::All => return GramQuery::All,
            GramQuery::Or(v) => out.extend(v),
            q => out.push(q),
        }
    }
    dedup(&mut out);
    match out.len() {
        0 => GramQuery::All,
        1 => out.pop().expect("one"),
        _ => GramQuery::Or(out),
    }
}

/// Canonical order, without repeats: equal queries compare equal.
fn dedup(v: &mut Vec<GramQuery>) {
    v.sort_unstable();
    v.dedup();
}

fn folded(s: &[u8]) -> Vec<u8> {
    s.iter().map(|&b| fold(b)).collect()
}

/// The strings a class matches, folded, if the class is small.
fn class_strings(class: &Class) -> Option<Set> {
    let mut out = Set::new();
    match class {
        Class::Unicode(c) => {
            let count: usize = c.ranges().iter().map(|r| r.len()).sum();
            if count > MAX_CLASS {
                return None;
            }
            let mut buf = [0u8; 4];
            for r in c.ranges() {
                for ch in r.start()..=r.end() {
                    out.insert(folded(ch.encode_utf8(&mut buf).as_bytes()));
                }
            }
        }
        Class::Bytes(c) => {
            let count: usize = c.ranges().iter().map(|r| r.len()).sum();
            if count > MAX_CLASS {
                return None;
            }
            for r in c.ranges() {
                for b in r.start()..=r.end() {
                    out.insert(vec![fold(b)]);
                }
            }
        }
    }
    Some(out)
}

fn concat(a: Info, b: Info) -> Info {
    if let (Some(x), Some(y)) = (&a.exact, &b.exact) {
        if let Some(p) = product(x, y) {
            return Info {
                exact: Some(p),
                prefix: Set::new(),
                suffix: Set::new(),
                query: and(vec![a.query, b.query]),
            };
        }
    }
    // The grams across the boundary: an end of `a` then a start of `b`.
    let across = product(a.ends(), b.starts()).map_or(GramQuery::All, |p| set_query(&p));
    let prefix = match &a.exact {
        Some(x) => product(x, b.starts()),
        None => None,
    }
    .unwrap_or_else(|| a.starts().clone());
    let suffix = match &b.exact {
        Some(y) => product(a.ends(), y),
        None => None,
    }
    .unwrap_or_else(|| b.ends().clone());
    Info {
        exact: None,
        prefix,
        suffix,
        query: and(vec![a.inexact().query, b.inexact().query, across]),
    }
}

fn alternate(a: Info, b: Info) -> Info {
    if let (Some(x), Some(y)) = (&a.exact, &b.exact) {
        let mut u = x.clone();
        u.extend(y.iter().cloned());
        return Info {
            exact: Some(u),
            prefix: Set::new(),
            suffix: Set::new(),
            query: or(vec![a.query, b.query]),
        };
    }
    let (a, b) = (a.inexact(), b.inexact());
    let mut prefix = a.prefix;
    prefix.extend(b.prefix);
    let mut suffix = a.suffix;
    suffix.extend(b.suffix);
    Info {
        exact: None,
        prefix,
        suffix,
        query: or(vec![a.query, b.query]),
    }
}

fn analyze(h: &Hir) -> Info {
    let info = match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Info::exact(one(b"")),
        HirKind::Literal(hir::Literal(bytes)) => Info::exact(one(&folded(bytes))),
        HirKind::Class(c) => match class_strings(c) {
            Some(set) => Info::exact(set),
            // One character of many: nothing known, but never empty.
            None => Info::any(),
        },
        HirKind::Capture(c) => analyze(&c.sub),
        HirKind::Repetition(r) => {
            let sub = analyze(&r.sub);
            if r.min == 0 {
                // `x?` is `x` or nothing; `x*` anything.
                if r.max == Some(1) {
                    alternate(sub, Info::exact(one(b"")))
                } else {
                    Info::any()
                }
            } else if r.max == Some(r.min) && r.min <= 4 {
                // `x{2}`: small exact repeats stay exact.
                let mut acc = sub.clone();
                for _ in 1..r.min {
                    acc = concat(acc, sub.clone()).bound();
                }
                acc
            } else {
                // At least one `x`: starts as `x` starts, ends as it ends,
                // and holds what every `x` holds.
                sub.inexact()
            }
        }
        HirKind::Concat(parts) => {
            let mut acc = Info::exact(one(b""));
            for p in parts {
                acc = concat(acc, analyze(p)).bound();
            }
            acc
        }
        HirKind::Alternation(parts) => {
            let mut iter = parts.iter();
            let mut acc = iter.next().map_or_else(|| Info::exact(one(b"")), analyze);
            for p in iter {
                acc = alternate(acc, analyze(p)).bound();
            }
            acc
        }
    };
    info.bound()
}

/// The pattern as grep's matcher parses it (grep-regex's `ConfiguredHIR`
/// for the options `grep::search::Engine::new` sets: unicode, multi-line,
/// no octal, `-i`, `-F` by escaping). Its line-terminator stripping is left
/// out: it only removes `\n` from classes, and a gram holding `\n` already
/// says nothing here.
fn parse(pattern: &str, ignore_case: bool, literal: bool) -> Option<Hir> {
    let pattern = if literal {
        format!("(?:{})", regex_syntax::escape(pattern))
    } else {
        format!("(?:{pattern})")
    };
    // grep-regex's defaults: nest limit 250, no octal, no `x` flag.
    let ast = ParserBuilder::new()
        .nest_limit(250)
        .octal(false)
        .ignore_whitespace(false)
        .build()
        .parse(&pattern)
        .ok()?;
    hir::translate::TranslatorBuilder::new()
        .utf8(false)
        .case_insensitive(ignore_case)
        .multi_line(true)
        .dot_matches_new_line(false)
        .crlf(false)
        .swap_greed(false)
        .unicode(true)
        .build()
        .translate(&pattern, &ast)
        .ok()
}

/// The query every file holding a match of `pattern` satisfies, for grep's
/// options `-i` (`ignore_case`) and `-F` (`literal`). A pattern grep would
/// refuse gives `All` (the search reports the error anyway).
pub(crate) fn plan(pattern: &str, ignore_case: bool, literal: bool) -> GramQuery {
    match parse(pattern, ignore_case, literal) {
        Some(hir) => analyze(&hir).into_query(),
        None => GramQuery::All,
    }
}

/// Byte strings every match holds exactly, case and all (the literal
/// pieces of the pattern's top-level concatenation), for the large files'
/// exact 5-gram filters; empty when the search ignores case or nothing is
/// known.
pub(crate) fn exact_pieces(pattern: &str, ignore_case: bool, literal: bool) -> Vec<Vec<u8>> {
    if ignore_case {
        return Vec::new();
    }
    let Some(hir) = parse(pattern, false, literal) else {
        return Vec::new();
    };
    let parts = match hir.kind() {
        HirKind::Concat(parts) => parts.as_slice(),
        _ => std::slice::from_ref(&hir),
    };
    parts
        .iter()
        .filter_map(|h| match h.kind() {
            HirKind::Literal(hir::Literal(bytes)) if bytes.len() >= GRAM_LEN => {
                Some(bytes.to_vec())
            }
            _ => None,
        })
        .collect()
}

/// A set of content ids, one bit each.
#[derive(Debug, Clone)]
pub(crate) struct IdSet {
    bits: Vec<u64>,
}

impl IdSet {
    fn empty(end: u32) -> IdSet {
        IdSet {
            bits: vec![0; (end as usize).div_ceil(64)],
        }
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w >> (id % 64) & 1 != 0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0)
    }

    /// The ids in the set, in increasing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().enumerate().flat_map(|(i, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let bit = w.trailing_zeros();
                    w &= w - 1;
                    i as u32 * 64 + bit
                })
            })
        })
    }

    pub(crate) fn remove(&mut self, id: u32) {
        if let Some(w) = self.bits.get_mut(id as usize / 64) {
            *w &= !(1 << (id % 64));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn and_with(&mut self, o: &IdSet) {
        for (a, b) in self.bits.iter_mut().zip(&o.bits) {
            *a &= b;
        }
    }

    fn or_with(&mut self, o: &IdSet) {
        for (a, b) in self.bits.iter_mut().zip(&o.bits) {
            *a |= b;
        }
    }
}

/// The ids whose files satisfy `q`, among those `postings` holds; `None`
/// when every file is a candidate. Ids not in the postings (files never
/// indexed) are not in the set: the caller treats them as candidates.
pub(crate) fn candidates(q: &GramQuery, postings: &Postings) -> Option<IdSet> {
    let end = postings.id_end();
    match q {
        GramQuery::All => None,
        GramQuery::Gram(g) => {
            let mut set = IdSet::empty(end);
            for seg in postings.segments() {
                if let Some(list) = seg.list(*g) {
                    list.or_into(&mut set.bits);
                }
            }
            Some(set)
        }
        GramQuery::And(parts) => {
            let mut acc: Option<IdSet> = None;
            for p in parts {
                if let Some(s) = candidates(p, postings) {
                    match &mut acc {
                        None => acc = Some(s),
                        Some(a) => a.and_with(&s),
                    }
                    if acc.as_ref().is_some_and(IdSet::is_empty) {
                        break;
                    }
                }
            }
            acc
        }
        GramQuery::Or(parts) => {
            let mut acc = IdSet::empty(end);
            for p in parts {
                acc.or_with(&candidates(p, postings)?);
            }
            Some(acc)
        }
    }
}

#[cfg(test)]
mod tests;
