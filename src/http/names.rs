//! What a display name may hold beyond its length, in Unicode terms: a name becomes the name of
//! an organization that other members see, so it must not reorder the text around it nor look
//! like nothing at all (issue 37, item 9).
//!
//! Refused: the explicit bidirectional formatting characters (embeddings and overrides U+202A to
//! U+202E, isolates U+2066 to U+2069; "Trojan Source", CVE-2021-42574), which reorder what
//! follows them wherever the name is shown; and a name made only of characters that draw
//! nothing (white space and Unicode's default-ignorable code points, such as zero-width spaces,
//! joiners, the Hangul fillers, variation selectors and tag characters, plus the blank braille
//! pattern). The implicit marks (LRM, RLM, ALM) stay allowed: they only nudge neutral characters
//! next to them, and right-to-left names need them.

/// The rule a name breaks, for `details.rule`; `None` when it breaks none.
pub fn refusal(name: &str) -> Option<&'static str> {
    if name.chars().any(is_bidi_control) {
        return Some("no bidirectional embeddings, overrides or isolates");
    }
    if name.chars().all(draws_nothing) {
        return Some("at least one visible character");
    }
    None
}

/// U+202A..U+202E (LRE, RLE, PDF, LRO, RLO) and U+2066..U+2069 (LRI, RLI, FSI, PDI).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn draws_nothing(c: char) -> bool {
    c.is_whitespace() || c == '\u{2800}' || is_default_ignorable(c)
}

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1): characters
/// a renderer shows as nothing when it does not support them. The table is short and has not
/// changed since Unicode 9, so it is written out here rather than taken from a crate.
fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_controls_and_blank_names_are_refused() {
        for name in [
            "Acme \u{202e}fdp.exe",
            "\u{202a}x",
            "a\u{2066}b\u{2069}",
            "\u{2068}",
        ] {
            assert_eq!(
                refusal(name),
                Some("no bidirectional embeddings, overrides or isolates"),
                "{name:?}"
            );
        }
        for name in [
            "\u{200b}",
            "\u{2060}\u{feff}",
            "\u{3164}\u{3164}",
            "\u{ffa0}",
            "\u{2800} \u{2800}",
            "\u{e0020}\u{e007f}",
            "\u{fe0f}",
            "\u{200f}",
        ] {
            assert_eq!(
                refusal(name),
                Some("at least one visible character"),
                "{name:?}"
            );
        }
    }

    #[test]
    fn names_in_any_script_pass() {
        for name in [
            "Ada Lovelace",
            "Jose\u{301}",
            "\u{5e9}\u{5dc}\u{5d5}\u{5dd} \u{200f}Ltd",
            "\u{1f469}\u{200d}\u{1f4bb}",
            "\u{d55c}\u{ad6d}",
            "\u{2603}",
            "x\u{200b}",
        ] {
            assert_eq!(refusal(name), None, "{name:?}");
        }
    }
}
