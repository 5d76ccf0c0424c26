use std::collections::HashSet;

use super::*;
use crate::grep::{Engine, EngineOptions};
use crate::index::grams::tests::Rng;
use crate::index::grams::{file_grams, gram_of, GramScratch, SegmentBuilder};

fn g(s: &str) -> GramQuery {
    let b = s.as_bytes();
    GramQuery::Gram(gram_of([b[0], b[1], b[2]]))
}

fn grams_of(text: &str) -> HashSet<Gram> {
    thread_local! {
        // 3 MiB each: made once per thread, not per text.
        static SCRATCH: std::cell::RefCell<GramScratch> = std::cell::RefCell::new(GramScratch::new());
    }
    let mut out = Vec::new();
    SCRATCH.with(|s| file_grams(text.as_bytes(), &mut s.borrow_mut(), &mut out));
    out.into_iter().collect()
}

/// Whether a text with these grams satisfies `q`.
fn holds(q: &GramQuery, grams: &HashSet<Gram>) -> bool {
    match q {
        GramQuery::All => true,
        GramQuery::Gram(g) => grams.contains(g),
        GramQuery::And(v) => v.iter().all(|q| holds(q, grams)),
        GramQuery::Or(v) => v.iter().any(|q| holds(q, grams)),
    }
}

/// grep's own matcher, as its Engine builds it (`None` if grep refuses).
fn engine(pattern: &str, ignore_case: bool, literal: bool) -> Option<Engine> {
    Engine::new(
        pattern,
        EngineOptions {
            ignore_case,
            literal,
            context: 0,
            limit: 1,
            store_cap: None,
        },
    )
    .ok()
}

/// `plan` holds on every text grep matches (and, for the hand cases, the
/// text is one grep matches, so the case is not vacuous).
fn sound_on(pattern: &str, ignore_case: bool, literal: bool, text: &str) {
    let e = engine(pattern, ignore_case, literal).expect("grep accepts it");
    assert!(
        e.is_match(text.as_bytes()),
        "{pattern:?} should match {text:?}"
    );
    let q = plan(pattern, ignore_case, literal);
    assert!(
        holds(&q, &grams_of(text)),
        "{pattern:?} (i={ignore_case} F={literal}) -> {q:?} fails on {text:?}"
    );
}

#[test]
fn literals_need_all_their_grams() {
    assert_eq!(
        plan("abcd", false, false),
        GramQuery::And(vec![g("abc"), g("bcd")])
    );
    assert_eq!(plan("ab", false, false), GramQuery::All);
    // Case folded either way: the index holds folded grams.
    assert_eq!(plan("ABC", false, false), g("abc"));
    assert_eq!(plan("ABC", true, false), g("abc"));
    assert_eq!(plan("^abc$", false, false), g("abc"));
    assert_eq!(plan(r"\babc\b", false, false), g("abc"));
}

#[test]
fn alternations_and_classes() {
    assert_eq!(
        plan("abc|xyz", false, false),
        GramQuery::Or(vec![g("abc"), g("xyz")])
    );
    assert_eq!(
        plan("(abc|ab)x", false, false),
        or(vec![and(vec![g("abc"), g("bcx")]), g("abx")])
    );
    let q = plan("ab[cd]e", false, false);
    assert_eq!(
        q,
        GramQuery::Or(vec![
            GramQuery::And(vec![g("abc"), g("bce")]),
            GramQuery::And(vec![g("abd"), g("bde")]),
        ])
    );
    // An alternation with a branch that says nothing says nothing.
    assert_eq!(plan("abc|x", false, false), GramQuery::All);
    for p in [r"\w+", ".", "a*", "[^a]bc", r"\d+", "(abc)?", ""] {
        assert_eq!(plan(p, false, false), GramQuery::All, "{p}");
    }
    // What follows a large class still counts.
    assert_eq!(plan("[^a]bcd", false, false), g("bcd"));
}

#[test]
fn repetitions() {
    assert_eq!(plan("(abc)+", false, false), g("abc"));
    assert_eq!(
        plan("x(abc)+y", false, false),
        and(vec![g("xab"), g("abc"), g("bcy")])
    );
    assert_eq!(plan("abc{2}", false, false), and(vec![g("abc"), g("bcc")]));
    assert_eq!(
        plan("ab(c)?de", false, false),
        or(vec![
            and(vec![g("abc"), g("bcd"), g("cde")]),
            and(vec![g("abd"), g("bde")]),
        ])
    );
    assert_eq!(
        plan("abc.*xyz", false, false),
        and(vec![g("abc"), g("xyz")])
    );
    assert_eq!(plan("abc{1,5}", false, false), g("abc"));
}

#[test]
fn grep_refusals_say_nothing() {
    assert_eq!(plan("foo(", false, false), GramQuery::All);
    assert_eq!(plan("a{2,1}bcd", false, false), GramQuery::All);
}

#[test]
fn literal_mode_escapes_metacharacters() {
    assert_eq!(
        plan("a.b(c", false, true),
        and(vec![g("a.b"), g(".b("), g("b(c")])
    );
    sound_on("a.b(c", false, true, "xx a.b(c yy");
    sound_on("EXPORT_SYMBOL(usb_", true, true, "export_symbol(USB_x)");
}

#[test]
fn case_insensitive_non_ascii() {
    // `k` folds to the Kelvin sign, `s` to the long s, `ß` to `ẞ`.
    sound_on("kelvin", true, false, "\u{212A}ELVIN");
    sound_on("kelvin", true, false, "KeLvIn");
    sound_on("sss", true, false, "\u{17F}S\u{17F}");
    sound_on("aßb", true, false, "A\u{1E9E}B");
    sound_on("xÉy", true, false, "XéY");
    sound_on("éé", true, false, "ÉÉ");
    sound_on("k", true, false, "\u{212A}");
    // Without -i, non-ASCII bytes are taken as they are.
    assert_eq!(
        plan("xÉ", false, false),
        string_query(&folded("xÉ".as_bytes()))
    );
    assert_ne!(plan("kelvin", true, false), GramQuery::All);
}

#[test]
fn regex_bench_queries_are_selective() {
    sound_on(
        r"EXPORT_SYMBOL\(usb_",
        false,
        false,
        "EXPORT_SYMBOL(usb_foo);",
    );
    let q = plan(r"EXPORT_SYMBOL\(usb_", false, false);
    assert!(!holds(&q, &grams_of("EXPORT_SYMBOL(pci_foo);")));
    let q = plan("irq_set_affinity_hint", false, false);
    assert!(!holds(&q, &grams_of("irq_set_affinity(x)")));
}

#[test]
fn candidates_follow_the_postings() {
    let texts = ["abc xyz", "xyz", "ABC", "nothing", "abxyz"];
    let mut b = SegmentBuilder::new();
    let mut scratch = GramScratch::new();
    let mut grams = Vec::new();
    for (id, t) in texts.iter().enumerate() {
        file_grams(t.as_bytes(), &mut scratch, &mut grams);
        b.add(id as u32, &grams);
    }
    let mut postings = Postings::new();
    postings.push(b.finish());
    let ids = |q: &GramQuery| {
        candidates(q, &postings).map(|s| (0..10).filter(|&i| s.contains(i)).collect::<Vec<_>>())
    };
    assert_eq!(ids(&plan("abc", false, false)), Some(vec![0, 2]));
    assert_eq!(ids(&plan("abc|xyz", false, false)), Some(vec![0, 1, 2, 4]));
    assert_eq!(ids(&plan("abc.*xyz", false, false)), Some(vec![0]));
    assert_eq!(ids(&plan("qqq", false, false)), Some(vec![]));
    assert_eq!(ids(&plan(r"\w+", false, false)), None);
    assert_eq!(ids(&plan("nothing|.", false, false)), None);
}

// ---------------------------------------------------------------------------
// Soundness property: generated patterns × generated texts.

const ATOMS: &[&str] = &[
    "a",
    "b",
    "c",
    "ab",
    "abc",
    "bca",
    "K",
    "k",
    "s",
    "S",
    "ß",
    "é",
    "É",
    "\u{212A}",
    "\u{17F}",
    "\u{1E9E}",
    "x",
    "_",
    " ",
    ".",
    r"\.",
    "[ab]",
    "[a-c]",
    "[^a]",
    r"\w",
    r"\d",
    "[kK]",
    "(?i:s)",
    "(?-i:b)",
    r"\b",
    "^",
    "$",
    "[é-ê]",
    "[ßs]",
    r"\s",
    "(?i:ab)",
    r"\x41",
    "[[:alpha:]]",
    "(?-u:\\xC3)",
    "(?-u:[\\x80-\\xFF])",
];

const TEXT_CHARS: &[&str] = &[
    "a", "b", "c", "A", "B", "C", "k", "K", "s", "S", "ß", "é", "É", "ê", "\u{212A}", "\u{17F}",
    "\u{1E9E}", "x", "_", " ", ".", "\n", "1", "ab", "abc", "SS",
];

fn pick<'a>(rng: &mut Rng, v: &[&'a str]) -> &'a str {
    v[rng.below(v.len() as u64) as usize]
}

fn gen_pattern(rng: &mut Rng, depth: u32) -> String {
    let n = 1 + rng.below(4);
    let mut out = String::new();
    for _ in 0..n {
        let mut piece = if depth > 0 && rng.below(4) == 0 {
            let alts = 1 + rng.below(3);
            let parts: Vec<String> = (0..alts).map(|_| gen_pattern(rng, depth - 1)).collect();
            format!("({})", parts.join("|"))
        } else {
            pick(rng, ATOMS).to_string()
        };
        match rng.below(10) {
            0 => piece = format!("(?:{piece})?"),
            1 => piece = format!("(?:{piece})*"),
            2 => piece = format!("(?:{piece})+"),
            3 => piece = format!("(?:{piece}){{2}}"),
            4 => piece = format!("(?:{piece}){{1,3}}"),
            _ => {}
        }
        out.push_str(&piece);
    }
    out
}

fn gen_text(rng: &mut Rng) -> String {
    (0..rng.below(24)).map(|_| pick(rng, TEXT_CHARS)).collect()
}

/// Runs the property; returns (cases where grep matched, failures found).
fn soundness_cases(seed: u64, patterns: usize) -> (usize, Vec<String>) {
    let mut rng = Rng(seed);
    let mut matched = 0;
    let mut failures = Vec::new();
    for _ in 0..patterns {
        let pattern = gen_pattern(&mut rng, 2);
        let ignore_case = rng.below(2) == 0;
        let literal = rng.below(5) == 0;
        let Some(e) = engine(&pattern, ignore_case, literal) else {
            continue;
        };
        let q = plan(&pattern, ignore_case, literal);
        let pieces = exact_pieces(&pattern, ignore_case, literal);
        for _ in 0..80 {
            // Texts often hold the pattern's own pieces, so matches are common.
            let mut text = gen_text(&mut rng);
            if rng.below(2) == 0 {
                let lit: String = pattern.chars().filter(|c| c.is_alphanumeric()).collect();
                text = format!("{}{lit}{}", gen_text(&mut rng), gen_text(&mut rng));
            }
            if e.is_match(text.as_bytes()) {
                matched += 1;
                if !holds(&q, &grams_of(&text)) {
                    failures.push(format!(
                        "{pattern:?} i={ignore_case} F={literal} q={q:?} text={text:?}"
                    ));
                }
                let bytes = text.as_bytes();
                if let Some(p) = pieces
                    .iter()
                    .find(|p| !bytes.windows(p.len()).any(|w| w == p.as_slice()))
                {
                    failures.push(format!(
                        "{pattern:?} F={literal}: piece {p:?} not in {text:?}"
                    ));
                }
            }
        }
    }
    (matched, failures)
}

#[test]
fn plan_is_sound_on_generated_cases() {
    let (matched, failures) = soundness_cases(0x5eed, 600);
    assert!(matched > 2500, "too few matching cases: {matched}");
    assert!(
        failures.is_empty(),
        "{} unsound: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// Selectivity on a real tree, for docs/index.md ("N-gram scheme"): files
/// the index names as candidates vs files grep really matches. Run:
/// `cargo test --release -p pi-native-ops-core index::query::tests::selectivity -- --ignored --nocapture`
#[test]
#[ignore]
fn selectivity() {
    use crate::index::grams::tests::measure::{build_tree, corpus, files_under};
    let files = files_under(&corpus());
    let (postings, bytes) = build_tree(&files, true);
    for (pattern, ignore_case) in [
        ("irq_set_affinity_hint", false),
        (r"EXPORT_SYMBOL\(usb_", false),
        ("irq_set_affinity_hint", true),
        (r"\bfoo_bar\w+", false),
        ("(kmalloc|kzalloc)\\(sizeof", false),
    ] {
        let t = std::time::Instant::now();
        let q = plan(pattern, ignore_case, false);
        let cands = candidates(&q, &postings);
        let took = t.elapsed();
        let e = engine(pattern, ignore_case, false).unwrap();
        let mut matching = 0;
        let mut missed = 0;
        let mut n = 0;
        for (id, path) in files.iter().enumerate() {
            let is_cand = cands.as_ref().is_none_or(|s| s.contains(id as u32));
            n += is_cand as usize;
            let data = std::fs::read(path).unwrap_or_default();
            // grep stops at a NUL (binary file).
            let text = &data[..memchr::memchr(0, &data).unwrap_or(data.len())];
            if e.is_match(text) {
                matching += 1;
                missed += !is_cand as usize;
            }
        }
        println!(
            "{pattern:?} -i={ignore_case}: candidates {n}, matching {matching}, plan+candidates {:.2} ms, {} grams in query",
            took.as_secs_f64() * 1e3,
            format!("{q:?}").matches("Gram(").count()
        );
        assert_eq!(missed, 0, "a matching file was not a candidate");
    }
    let _ = bytes;
}

#[test]
fn exact_pieces_are_the_literal_parts_of_a_case_sensitive_pattern() {
    let pieces = |p: &str, i: bool, f: bool| -> Vec<String> {
        exact_pieces(p, i, f)
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect()
    };
    assert_eq!(
        pieces("irq_set_affinity_hint", false, false),
        ["irq_set_affinity_hint"]
    );
    assert_eq!(
        pieces(r"EXPORT_SYMBOL\(usb_", false, false),
        ["EXPORT_SYMBOL(usb_"]
    );
    assert_eq!(pieces("a.b(c", false, true), ["a.b(c"]);
    assert_eq!(pieces(r"\bfoo_bar\w+", false, false), ["foo_bar"]);
    assert_eq!(pieces("abc.*defg", false, false), ["abc", "defg"]);
    assert_eq!(pieces("xÉy", false, false), ["xÉy"]);
    assert!(pieces("irq_set_affinity_hint", true, false).is_empty());
    assert!(pieces("(?i)kelvin", false, false).is_empty());
    assert!(pieces("foo|barbaz", false, false).is_empty());
    assert!(pieces("ab", false, false).is_empty());
    assert!(pieces("(unclosed", false, false).is_empty());
}

/// Lists of every density (bitmaps and delta lists), in segments that
/// start on and off word and byte boundaries, give each id exactly
/// once they hold, whether decoded id by id or a byte at a time.
#[test]
fn lists_into_sets_as_their_ids() {
    for (lo, n) in [(0, 200), (3, 200), (61, 130), (64, 64), (100, 7), (5, 1)] {
        let mut postings = Postings::new();
        // A first segment before `lo`, so later ones sit at an offset.
        if lo > 0 {
            let mut b = SegmentBuilder::new();
            for id in 0..lo {
                b.add(id, &[1, 2]);
            }
            postings.push(b.finish());
        }
        let mut b = SegmentBuilder::new();
        let grams = |id: u32| -> Vec<Gram> {
            let mut g = vec![1];
            if id.is_multiple_of(3) {
                g.push(2);
            }
            if id % 50 == 7 {
                g.push(3);
            }
            if id == lo + n - 1 {
                g.push(4);
            }
            g
        };
        for id in lo..lo + n {
            b.add(id, &grams(id));
        }
        postings.push(b.finish());
        let end = postings.id_end();
        for g in [1, 2, 3, 4, 5] {
            let want: Vec<u32> = (0..end)
                .filter(|&id| {
                    if id < lo {
                        g <= 2
                    } else {
                        grams(id).contains(&g)
                    }
                })
                .collect();
            let set = candidates(&GramQuery::Gram(g), &postings).unwrap();
            let got: Vec<u32> = (0..end + 64).filter(|&id| set.contains(id)).collect();
            assert_eq!(got, want, "gram {g}, segment at {lo} of {n} ids");
            assert_eq!(set.iter().collect::<Vec<u32>>(), want);
            assert_eq!(set.len(), want.len());
        }
    }
}
