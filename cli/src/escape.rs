//! Untrusted text made safe to show on a terminal.
//!
//! Images and cache directories are untrusted input: an entry name, an
//! owner label, a producer, a label, a dependency name, an entry point, an
//! artifact kind or a file name can hold terminal escape sequences (which
//! recolour, retitle or rewrite the screen) or bidirectional overrides
//! (which reorder the text shown). Every human-readable output passes such
//! text through [`escape`] (or [`path`]) before it is printed; `--json`
//! output goes through [`write_json`], which keeps every string exact and
//! writes these characters as `\uXXXX` escapes.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde_json::ser::{Formatter, PrettyFormatter};

/// Whether `c` must not reach a terminal as it is: a C0 control
/// (U+0000–U+001F), DEL (U+007F), a C1 control (U+0080–U+009F), or a
/// bidirectional embedding, override or isolate (U+202A–U+202E,
/// U+2066–U+2069).
pub(crate) fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [unsafe](is_unsafe) character written as Rust's
/// `char::escape_debug` writes it (`\n`, `\r`, `\t`, `\0`, else `\u{1b}`);
/// every other character, ordinary Unicode included, is kept. The result
/// holds no unsafe character, so escaping it again changes nothing.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            match c {
                '\n' => shown.push_str("\\n"),
                '\r' => shown.push_str("\\r"),
                '\t' => shown.push_str("\\t"),
                '\0' => shown.push_str("\\0"),
                // Writing to a String cannot fail.
                _ => {
                    let _ = write!(shown, "\\u{{{:x}}}", u32::from(c));
                }
            }
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// A path as [`escape`] shows text (bytes that are not UTF-8 shown as
/// U+FFFD).
pub(crate) fn path(path: &Path) -> String {
    escape(&path.to_string_lossy()).into_owned()
}

/// Each line of `text` escaped on its own: for messages whose line breaks
/// are the program's own and whose untrusted parts were escaped already.
pub(crate) fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// Writes `value` as pretty JSON. Strings stay exact (they parse back to
/// the same text); C0 controls are escaped as JSON requires, and DEL, C1
/// controls and bidirectional overrides, which JSON allows raw, are written
/// as `\uXXXX` too, so the output is as safe on a terminal as the text one.
pub(crate) fn write_json(
    out: &mut impl io::Write,
    value: &impl serde::Serialize,
) -> serde_json::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(out, SafeFormatter::default());
    value.serialize(&mut serializer)
}

/// [`PrettyFormatter`], with the characters [`is_unsafe`] names escaped in
/// strings (serde_json escapes the C0 ones before they get here).
#[derive(Default)]
struct SafeFormatter {
    pretty: PrettyFormatter<'static>,
}

impl Formatter for SafeFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| is_unsafe(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            // Every unsafe character lies in the Basic Multilingual Plane:
            // one `\uXXXX` escape.
            write!(writer, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.pretty.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.pretty.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str =
        "a\x1b[31mb\x07c\rd\ne\tf\0g\x7fh\u{85}i\u{9b}j\u{202e}k\u{2066}l\u{2069}m";

    fn json(value: &serde_json::Value) -> String {
        let mut out = Vec::new();
        write_json(&mut out, value).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escape_removes_every_control_and_bidi_character() {
        let shown = escape(HOSTILE);
        assert!(!shown.chars().any(is_unsafe), "{shown:?}");
        assert_eq!(
            shown,
            "a\\u{1b}[31mb\\u{7}c\\rd\\ne\\tf\\0g\\u{7f}h\\u{85}i\\u{9b}j\\u{202e}k\\u{2066}l\\u{2069}m"
        );
    }

    #[test]
    fn escape_keeps_ordinary_unicode_and_is_idempotent() {
        for text in [
            "saxpy",
            "gemm<float, 128>",
            "größe",
            "カーネル",
            "emoji 🚀",
            "\u{202f}",
        ] {
            assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
        }
        let once = escape(HOSTILE).into_owned();
        assert_eq!(escape(&once), once);
    }

    #[test]
    fn is_unsafe_covers_exactly_the_listed_ranges() {
        let unsafe_chars: Vec<u32> = (0..=0x2100u32)
            .filter_map(char::from_u32)
            .filter(|&c| is_unsafe(c))
            .map(u32::from)
            .collect();
        let expected: Vec<u32> = (0x00..=0x1f)
            .chain(0x7f..=0x9f)
            .chain(0x202a..=0x202e)
            .chain(0x2066..=0x2069)
            .collect();
        assert_eq!(unsafe_chars, expected);
    }

    #[test]
    fn escape_lines_keeps_only_the_line_breaks_between_lines() {
        assert_eq!(
            escape_lines("one \x1b[2J\ntwo\u{202e}"),
            "one \\u{1b}[2J\ntwo\\u{202e}"
        );
    }

    #[test]
    fn json_is_exact_and_holds_no_unsafe_character() {
        let value = serde_json::json!({ HOSTILE: [HOSTILE, "plain", 1], "k": { "x": HOSTILE } });
        let text = json(&value);
        assert!(!text.chars().any(|c| is_unsafe(c) && c != '\n'), "{text:?}");
        assert!(text.contains("\\u202e") && text.contains("\\u0085") && text.contains("\\u007f"));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn json_layout_is_the_pretty_one() {
        let value = serde_json::json!({ "a": [1, { "b": "c" }], "d": [] , "e": {} });
        assert_eq!(json(&value), serde_json::to_string_pretty(&value).unwrap());
    }
}
