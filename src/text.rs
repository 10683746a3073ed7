//! Text someone else chose (a tenant's key, interface name or network, an agent's annotation),
//! made safe to show: every control character escaped, so that it stays on one line and cannot
//! move a terminal's cursor, and bounded. The log ([`crate::ops::logging`]) and error objects
//! ([`crate::error::Error::to_json`]) show such text only through here. Pure: no I/O.

use std::fmt;

/// The most bytes of one tenant-chosen string in a line.
const MAX_SHOWN: usize = 128;

/// Writes `s` with every control character escaped (`\n`, `\u{1b}`, ...), so that it stays on
/// one line and cannot move the terminal's cursor, and every bidirectional formatting character
/// too (U+202E and its kin would show the rest of the line reversed); at most `max` bytes
/// written (escapes included), then a mark.
pub(crate) fn escape_into(out: &mut impl fmt::Write, s: &str, max: usize) -> fmt::Result {
    let mut written = 0;
    for (at, c) in s.char_indices() {
        let escaped = (c.is_control() || is_bidi(c)).then(|| c.escape_default().to_string());
        let width = escaped.as_ref().map_or(c.len_utf8(), String::len);
        if written + width > max {
            return write!(out, "...({} more bytes)", s.len() - at);
        }
        written += width;
        match escaped {
            Some(e) => out.write_str(&e)?,
            None => out.write_char(c)?,
        }
    }
    Ok(())
}

/// The characters that change the direction text is shown in (Unicode's bidi controls).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` escaped as [`escape_into`] writes it, at most `max` bytes.
pub(crate) fn escaped(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    let _ = escape_into(&mut out, s, max);
    out
}

/// A string someone else chose (a tenant's key, interface name or requested address), as it is
/// shown in a log line: escaped and cut short.
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        escape_into(f, self.0, MAX_SHOWN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_strings_are_escaped_and_bounded() {
        let s = "net1\n2026-01-01T00:00:00Z INFO forged\r\u{1b}[2J\u{7f}\u{85}ok";
        assert_eq!(
            Shown(s).to_string(),
            "net1\\n2026-01-01T00:00:00Z INFO forged\\r\\u{1b}[2J\\u{7f}\\u{85}ok"
        );
        // The bound is in bytes: é takes two.
        let long = "é".repeat(300);
        let shown = Shown(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(MAX_SHOWN / 2)), "{shown}");
        assert!(
            shown.ends_with(&format!("...({} more bytes)", 2 * (300 - MAX_SHOWN / 2))),
            "{shown}"
        );
        // Text that would show the rest of the line reversed is escaped.
        assert_eq!(Shown("a\u{202e}exe.txt").to_string(), "a\\u{202e}exe.txt");
        // The bound counts what is written: escapes that grow a string count as they are shown.
        let nuls = "\0".repeat(300);
        let shown = Shown(&nuls).to_string();
        assert_eq!(shown, format!("{}...(275 more bytes)", "\\u{0}".repeat(25)));
    }
}
