//! PMI-1 "simple" wire format: one command per line.
//!
//! A line is `cmd=NAME key=value key=value\n`: tokens separated by one or more spaces,
//! the first token is always `cmd=NAME`, each token is split at its *first* `=` (so a
//! value may itself contain `=`, exactly as MPICH's `PMIU_parse_keyvals` reads it). Keys
//! and values never contain spaces, newlines or other control characters.
//!
//! [`Command::decode`] is total: any input yields a [`Command`] or a [`PmiError`], never
//! a panic (property-tested below). [`Command::encode`] writes the canonical form that
//! [`Command::decode`] reads back unchanged.

use std::fmt;

use crate::error::PmiError;

/// The longest line (without its terminating newline) either end accepts, in bytes.
pub const MAX_LINE_LEN: usize = 4096;

/// The PMI version this crate speaks.
pub const PMI_VERSION: u32 = 1;

/// The PMI subversion this crate speaks.
pub const PMI_SUBVERSION: u32 = 1;

/// One decoded PMI-1 command: its name (the value of `cmd=`) and its other arguments in
/// wire order.
///
/// Build one with [`Command::new`] and [`Command::arg`]; the caller must pass tokens that
/// satisfy [`is_valid_key`] / [`is_valid_value`] (the client validates user input before
/// building; the server only echoes tokens that were decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    name: String,
    args: Vec<(String, String)>,
}

impl Command {
    /// A command `cmd=name` without arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            args: Vec::new(),
        }
    }

    /// Appends the argument `key=value`.
    #[must_use]
    pub fn arg(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        let key = key.into();
        let value = value.to_string();
        debug_assert!(is_valid_key(&key), "invalid PMI key {key:?}");
        debug_assert!(is_valid_value(&value), "invalid PMI value {value:?}");
        self.args.push((key, value));
        self
    }

    /// The command name (`init`, `put`, `get_result`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments other than `cmd`, in wire order.
    pub fn args(&self) -> &[(String, String)] {
        &self.args
    }

    /// The value of argument `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of argument `key`, or a [`PmiError::Protocol`] naming the command.
    pub fn require(&self, key: &str) -> Result<&str, PmiError> {
        self.get(key).ok_or_else(|| {
            PmiError::Protocol(format!("`cmd={}` lacks the `{key}` argument", self.name))
        })
    }

    /// The argument `key` parsed as a number, or a [`PmiError::Protocol`].
    pub fn require_num<T: std::str::FromStr>(&self, key: &str) -> Result<T, PmiError> {
        let raw = self.require(key)?;
        raw.parse().map_err(|_| {
            PmiError::Protocol(format!(
                "`cmd={}`: `{key}={raw}` is not a valid number",
                self.name
            ))
        })
    }

    /// The canonical wire form, newline included.
    pub fn encode(&self) -> String {
        let mut line = self.to_string();
        line.push('\n');
        line
    }

    /// Decodes one line, with or without its terminating `\n`.
    ///
    /// Rejects: lines over [`MAX_LINE_LEN`], non-UTF-8, embedded newlines or other control
    /// characters, a first token other than `cmd=NAME`, an empty command name, a token
    /// without `=`, an empty key, a key given twice (`cmd` included).
    pub fn decode(line: &[u8]) -> Result<Self, PmiError> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.len() > MAX_LINE_LEN {
            return Err(PmiError::LineTooLong {
                len: line.len(),
                max: MAX_LINE_LEN,
            });
        }
        let text = std::str::from_utf8(line)
            .map_err(|e| PmiError::Malformed(format!("not UTF-8 ({e})")))?;
        if let Some(c) = text.chars().find(|c| c.is_control()) {
            return Err(PmiError::Malformed(format!(
                "control character {c:?} in line"
            )));
        }
        let mut tokens = text.split(' ').filter(|t| !t.is_empty());
        let first = tokens
            .next()
            .ok_or_else(|| PmiError::Malformed("empty line".to_owned()))?;
        let name = first.strip_prefix("cmd=").ok_or_else(|| {
            PmiError::Malformed(format!("line does not start with `cmd=`: {first:?}"))
        })?;
        if name.is_empty() {
            return Err(PmiError::Malformed("empty command name".to_owned()));
        }
        let mut cmd = Command::new(name);
        for token in tokens {
            let (key, value) = token
                .split_once('=')
                .ok_or_else(|| PmiError::Malformed(format!("token without `=`: {token:?}")))?;
            if key.is_empty() {
                return Err(PmiError::Malformed(format!("empty key in token {token:?}")));
            }
            if key == "cmd" || cmd.get(key).is_some() {
                return Err(PmiError::Malformed(format!("duplicate key `{key}`")));
            }
            cmd.args.push((key.to_owned(), value.to_owned()));
        }
        Ok(cmd)
    }

    /// Decodes one line given as text; see [`Command::decode`].
    pub fn parse(line: &str) -> Result<Self, PmiError> {
        Self::decode(line.as_bytes())
    }
}

impl fmt::Display for Command {
    /// The wire form without the trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cmd={}", self.name)?;
        for (k, v) in &self.args {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// Whether `key` can travel as a key: non-empty, no `=`, no whitespace or control
/// characters.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && !key.contains('=') && key.chars().all(is_token_char)
}

/// Whether `value` can travel as a value on the wire: no whitespace or control characters
/// (may be empty; `=` is legal on the wire, though [`crate::PmiClient::put`] refuses it for
/// portability).
pub fn is_valid_value(value: &str) -> bool {
    value.chars().all(is_token_char)
}

/// Percent-encode free text (an abort message) so it travels as one value:
/// `%`, `=`, whitespace and control characters become `%XX` (UTF-8 bytes).
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || c == '=' || !is_token_char(c) {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Undo [`escape_text`]; malformed escapes are kept as they are.
pub fn unescape_text(text: &str) -> String {
    fn hex(d: u8) -> Option<u8> {
        (d as char).to_digit(16).map(|v| v as u8)
    }
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A character that may appear inside a key or value token.
fn is_token_char(c: char) -> bool {
    !c.is_whitespace() && !c.is_control()
}

#[cfg(test)]
mod escape_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_round_trip() {
        let t = "rank 3: x = 5%\n\tdone é";
        let e = escape_text(t);
        assert!(is_valid_value(&e) && !e.contains('='), "{e}");
        assert_eq!(unescape_text(&e), t);
        assert_eq!(unescape_text("100%"), "100%");
        assert_eq!(unescape_text("%zz%4"), "%zz%4");
        assert_eq!(unescape_text("%é"), "%é");
    }

    proptest! {
        #[test]
        fn any_text_round_trips(t in ".*") {
            prop_assert_eq!(unescape_text(&escape_text(&t)), t);
        }
        #[test]
        fn unescape_never_panics(t in ".*") {
            let _ = unescape_text(&t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_hydra_lines() {
        let c = Command::decode(b"cmd=put kvsname=kvs_1 key=a value=x=y\n").unwrap();
        assert_eq!(c.name(), "put");
        assert_eq!(c.get("kvsname"), Some("kvs_1"));
        assert_eq!(c.get("value"), Some("x=y"));
        let c = Command::parse("cmd=barrier_in").unwrap();
        assert_eq!(c.name(), "barrier_in");
        assert!(c.args().is_empty());
        let c = Command::parse("  cmd=get_result   rc=0 value=  ").unwrap();
        assert_eq!(c.get("rc"), Some("0"));
        assert_eq!(c.get("value"), Some(""));
    }

    #[test]
    fn rejects_malformed_lines() {
        for bad in [
            &b""[..],
            b"\n",
            b"   \n",
            b"put key=a\n",
            b"key=a cmd=put\n",
            b"cmd= key=a\n",
            b"cmd=put key\n",
            b"cmd=put =a\n",
            b"cmd=put key=a key=b\n",
            b"cmd=put cmd=get\n",
            b"cmd=put key=a\nvalue=b\n",
            b"cmd=put key=\x00\n",
            b"cmd=put\tkey=a\n",
            b"cmd=put key=\xff\xfe\n",
        ] {
            assert!(Command::decode(bad).is_err(), "accepted {bad:?}");
        }
        let long = format!("cmd=put value={}", "x".repeat(MAX_LINE_LEN));
        assert!(matches!(
            Command::parse(&long),
            Err(PmiError::LineTooLong { .. })
        ));
    }

    #[test]
    fn encodes_canonically() {
        let c = Command::new("get").arg("kvsname", "k").arg("key", "a");
        assert_eq!(c.encode(), "cmd=get kvsname=k key=a\n");
        assert_eq!(Command::decode(c.encode().as_bytes()).unwrap(), c);
    }

    fn token() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_:#(),.+/-]{1,12}"
    }

    fn value() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_:#(),.=+/é-]{0,40}"
    }

    fn command() -> impl Strategy<Value = Command> {
        (
            token(),
            proptest::collection::btree_map(token(), value(), 0..8),
        )
            .prop_map(|(name, args)| {
                args.into_iter()
                    .filter(|(k, _)| k != "cmd")
                    .fold(Command::new(name), |c, (k, v)| c.arg(k, v))
            })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Command::decode(&bytes);
        }

        #[test]
        fn near_valid_lines_never_panic(s in "(cmd=)?[a-z= \n\t\u{0}é]{0,60}") {
            if let Ok(c) = Command::parse(&s) {
                // Whatever is accepted re-encodes to something accepted and equal.
                prop_assert_eq!(Command::parse(&c.encode()).unwrap(), c);
            }
        }

        #[test]
        fn encode_decode_round_trips(c in command()) {
            let line = c.encode();
            prop_assert!(line.ends_with('\n'));
            prop_assert_eq!(Command::decode(line.as_bytes()).unwrap(), c);
        }
    }
}
