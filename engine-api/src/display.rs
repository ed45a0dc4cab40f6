//! How a key appears in messages and reports. Its own module so that the error type and the
//! codec (which returns that error type) both render keys without depending on each other.

/// Renders a key for messages: UTF-8 when printable, hex otherwise, truncated when long.
pub fn display_key(key: &[u8]) -> String {
    const MAX: usize = 64;
    let shown = &key[..key.len().min(MAX)];
    let mut s = match std::str::from_utf8(shown) {
        Ok(text) if text.chars().all(|c| !c.is_control()) => format!("{text:?}"),
        _ => {
            let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    };
    if key.len() > MAX {
        s.push_str(&format!("… ({} bytes)", key.len()));
    }
    s
}
