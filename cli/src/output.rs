//! How the inspection commands print: aligned `label  value` lines for people, or one JSON
//! document (`--json`, schemas in docs/CLI.md) for scripts.

use std::fmt::Write as _;

use serde::Serialize;
use tidemark::{Error, Result, display_key};

/// Lines of `label  value`, the values aligned in one column.
#[derive(Debug, Default)]
pub struct Fields {
    rows: Vec<(String, String)>,
}

impl Fields {
    /// Adds a line.
    pub fn add(&mut self, label: &str, value: impl Into<String>) -> &mut Self {
        self.rows.push((label.to_string(), value.into()));
        self
    }

    /// The two lines of a store's progress: `W` (with a note when it is above the applied end:
    /// an adopted lake end, a lagging replica) and the applied end.
    pub fn progress(&mut self, watermark: u64, applied_end: u64) -> &mut Self {
        let w = if watermark > applied_end {
            format!(
                "{watermark} (above the applied end: an adopted lake end, a lagging replica; \
                 replay the WAL from {watermark})"
            )
        } else {
            watermark.to_string()
        };
        self.add("watermark W", w)
            .add("applied end", applied_end.to_string())
    }

    /// The lines, each ending in a newline.
    pub fn render(&self) -> String {
        let width = self.rows.iter().map(|(l, _)| l.chars().count()).max();
        let mut out = String::new();
        for (label, value) in &self.rows {
            let _ = writeln!(out, "{label:<w$}  {value}", w = width.unwrap_or(0));
        }
        out
    }
}

/// Prints a command's result on stdout: `doc` as pretty JSON with `--json`, else `text()`.
pub fn emit(json: bool, doc: &impl Serialize, text: impl FnOnce() -> String) -> Result<()> {
    if json {
        let rendered = serde_json::to_string_pretty(doc)
            .map_err(|e| Error::Internal(format!("cannot render JSON: {e}")))?;
        println!("{rendered}");
    } else {
        print!("{}", text());
    }
    Ok(())
}

/// A key as JSON shows it: readable (`display_key`) and exact (hex).
#[derive(Debug, Serialize)]
pub struct JsonKey {
    /// UTF-8 in quotes when printable, else `0x…` hex; long keys truncated.
    pub key: String,
    /// Every byte, hex.
    pub key_hex: String,
}

impl JsonKey {
    /// Both forms of `key`.
    pub fn new(key: &[u8]) -> Self {
        JsonKey {
            key: display_key(key),
            key_hex: key.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_align_their_values() {
        let mut f = Fields::default();
        f.add("a", "1").add("longer", "2");
        assert_eq!(f.render(), "a       1\nlonger  2\n");
    }

    #[test]
    fn keys_have_a_readable_and_an_exact_form() {
        let k = JsonKey::new(b"k1");
        assert_eq!((k.key.as_str(), k.key_hex.as_str()), ("\"k1\"", "6b31"));
        assert_eq!(JsonKey::new(&[0, 0xff]).key, "0x00ff");
    }
}
