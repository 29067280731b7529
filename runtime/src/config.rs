//! Configuration: `gmpi.toml` (the current directory first, then
//! `$XDG_CONFIG_HOME/gmpi/gmpi.toml`, else `~/.config/gmpi/gmpi.toml`), then
//! `GMPI_*` environment variables, which win. Sizes accept `K`, `M`, `G`
//! suffixes (powers of two).
//!
//! | key (`gmpi.toml`) | environment | meaning | default |
//! |---|---|---|---|
//! | `eager_limit` | `GMPI_EAGER_LIMIT` | largest message sent eagerly | the transport's (shm: 8 KiB) |
//! | `get_threshold` | `GMPI_GET_THRESHOLD` | smallest message sent by single-copy get | the transport's (shm: 8 KiB) |
//! | `pipeline_chunk` | `GMPI_PIPELINE_CHUNK` | fragment size of the pipelined rendezvous | the transport's largest fragment |
//! | `cma` | `GMPI_CMA` | use `process_vm_readv` single copy (`true`/`false`) | `true` |
//! | `shm_ring_bytes` | `GMPI_SHM_RING_BYTES` | bytes per shared-memory ring | automatic (memory bound) |
//! | `shm_max_frag` | `GMPI_SHM_MAX_FRAG` | largest shared-memory fragment | 32 KiB − 8 (a 32 KiB record) |
//! | `spin` | `GMPI_SPIN` | empty polls before yielding | 2000 (5 when oversubscribed) |
//! | `yields` | `GMPI_YIELDS` | yields before blocking | 100 (4 when oversubscribed) |
//! | `block_ms` | `GMPI_BLOCK_MS` | longest single sleep while idle | 100 |
//! | `log` | `GMPI_LOG` | tracing filter, e.g. `pml=debug`, `coll=debug` | off (warnings) |
//! | `coll_shm` | `GMPI_COLL_SHM` | barrier, bcast and small reductions of single-node communicators through shared memory | `true` |
//! | `coll_shm_max` | `GMPI_COLL_SHM_MAX` | largest message those shared-memory collectives carry | 16 KiB |
//! | `bcast_large` | `GMPI_BCAST_LARGE` | bcast: binomial tree below, scatter + ring allgather from here | 128 KiB |
//! | `allreduce_large` | `GMPI_ALLREDUCE_LARGE` | allreduce: recursive doubling below, ring reduce-scatter + allgather from here | 64 KiB |
//! | `allgather_large` | `GMPI_ALLGATHER_LARGE` | allgather: Bruck below (total bytes), ring from here | 64 KiB |
//! | `alltoall_large` | `GMPI_ALLTOALL_LARGE` | alltoall: all exchanges at once below (bytes per peer), pairwise from here | 8 KiB |
//! | `coll_check` | `GMPI_COLL_CHECK` | check that every rank passed the same root, op and size to each collective (one extra exchange per call) | `false` |

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// A size in `gmpi.toml`: an integer, or a string with a `K`/`M`/`G` suffix.
fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Int(u64),
        Text(String),
    }
    match Option::<Size>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Int(n)) => usize::try_from(n)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(Size::Text(t)) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// The configuration in force.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest eager message.
    #[serde(deserialize_with = "de_size")]
    pub eager_limit: Option<usize>,
    /// Smallest single-copy message.
    #[serde(deserialize_with = "de_size")]
    pub get_threshold: Option<usize>,
    /// Pipelined fragment size.
    #[serde(deserialize_with = "de_size")]
    pub pipeline_chunk: Option<usize>,
    /// Allow CMA single copy.
    pub cma: bool,
    /// Shared-memory ring size.
    #[serde(deserialize_with = "de_size")]
    pub shm_ring_bytes: Option<usize>,
    /// Largest shared-memory fragment.
    #[serde(deserialize_with = "de_size")]
    pub shm_max_frag: Option<usize>,
    /// Empty polls before yielding.
    pub spin: Option<u32>,
    /// Yields before blocking.
    pub yields: Option<u32>,
    /// Longest sleep when idle, in milliseconds.
    pub block_ms: u64,
    /// Tracing filter.
    pub log: Option<String>,
    /// Shared-memory collectives for single-node communicators.
    pub coll_shm: bool,
    /// Largest shared-memory collective message.
    #[serde(deserialize_with = "de_size")]
    pub coll_shm_max: Option<usize>,
    /// Bcast: scatter + allgather from this size.
    #[serde(deserialize_with = "de_size")]
    pub bcast_large: Option<usize>,
    /// Allreduce: ring from this size.
    #[serde(deserialize_with = "de_size")]
    pub allreduce_large: Option<usize>,
    /// Allgather: ring from this total size.
    #[serde(deserialize_with = "de_size")]
    pub allgather_large: Option<usize>,
    /// Alltoall: pairwise from this size per peer.
    #[serde(deserialize_with = "de_size")]
    pub alltoall_large: Option<usize>,
    /// Check collective arguments across ranks.
    pub coll_check: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            eager_limit: None,
            get_threshold: None,
            pipeline_chunk: None,
            cma: true,
            shm_ring_bytes: None,
            shm_max_frag: None,
            spin: None,
            yields: None,
            block_ms: 100,
            log: None,
            coll_shm: true,
            coll_shm_max: None,
            bcast_large: None,
            allreduce_large: None,
            allgather_large: None,
            alltoall_large: None,
            coll_check: false,
        }
    }
}

/// Parse a size: a number with an optional `K`, `M` or `G` suffix (KiB...).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in {s:?} (use K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("not a size: {s:?}"))
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("not a boolean: {s:?}")),
    }
}

impl Config {
    /// The file that would be read, if any exists.
    pub fn file() -> Option<PathBuf> {
        let cwd = PathBuf::from("gmpi.toml");
        if cwd.is_file() {
            return Some(cwd);
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
        let p = base.join("gmpi").join("gmpi.toml");
        p.is_file().then_some(p)
    }

    /// Parse a `gmpi.toml` text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Load: defaults, then the file, then the environment.
    pub fn load() -> Result<Self, String> {
        let mut c = match Self::file() {
            Some(p) => {
                let text =
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                Self::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => Self::default(),
        };
        c.apply_env(|k| std::env::var(k).ok())?;
        Ok(c)
    }

    /// Apply `GMPI_*` overrides read through `get`.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        let size = |k: &str| -> Result<Option<usize>, String> {
            get(k)
                .map(|v| parse_size(&v).map_err(|e| format!("{k}: {e}")))
                .transpose()
        };
        let num = |k: &str| -> Result<Option<u64>, String> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{k}: not a number: {v:?}"))
                })
                .transpose()
        };
        if let Some(v) = size("GMPI_EAGER_LIMIT")? {
            self.eager_limit = Some(v);
        }
        if let Some(v) = size("GMPI_GET_THRESHOLD")? {
            self.get_threshold = Some(v);
        }
        if let Some(v) = size("GMPI_PIPELINE_CHUNK")? {
            self.pipeline_chunk = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_RING_BYTES")? {
            self.shm_ring_bytes = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_MAX_FRAG")? {
            self.shm_max_frag = Some(v);
        }
        if let Some(v) = get("GMPI_CMA") {
            self.cma = parse_bool(&v).map_err(|e| format!("GMPI_CMA: {e}"))?;
        }
        if let Some(v) = num("GMPI_SPIN")? {
            self.spin = Some(v.min(u64::from(u32::MAX)) as u32);
        }
        if let Some(v) = num("GMPI_YIELDS")? {
            self.yields = Some(v.min(u64::from(u32::MAX)) as u32);
        }
        if let Some(v) = num("GMPI_BLOCK_MS")? {
            self.block_ms = v.max(1);
        }
        for (k, slot) in [
            ("GMPI_COLL_SHM_MAX", &mut self.coll_shm_max),
            ("GMPI_BCAST_LARGE", &mut self.bcast_large),
            ("GMPI_ALLREDUCE_LARGE", &mut self.allreduce_large),
            ("GMPI_ALLGATHER_LARGE", &mut self.allgather_large),
            ("GMPI_ALLTOALL_LARGE", &mut self.alltoall_large),
        ] {
            if let Some(v) = size(k)? {
                *slot = Some(v);
            }
        }
        if let Some(v) = get("GMPI_COLL_SHM") {
            self.coll_shm = parse_bool(&v).map_err(|e| format!("GMPI_COLL_SHM: {e}"))?;
        }
        if let Some(v) = get("GMPI_COLL_CHECK") {
            self.coll_check = parse_bool(&v).map_err(|e| format!("GMPI_COLL_CHECK: {e}"))?;
        }
        if let Some(v) = get("GMPI_LOG") {
            self.log = Some(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size(" 2M "), Ok(2 << 20));
        assert!(parse_size("3x").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn file_then_env() {
        let mut c =
            Config::from_toml("eager_limit = 1024\ncma = false\nlog = \"pml=debug\"\n").unwrap();
        assert_eq!(c.eager_limit, Some(1024));
        assert!(!c.cma);
        c.apply_env(|k| match k {
            "GMPI_EAGER_LIMIT" => Some("8K".into()),
            "GMPI_CMA" => Some("on".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.eager_limit, Some(8192));
        assert!(c.cma);
        assert!(
            Config::from_toml("eager_limt = 3").is_err(),
            "typos are reported"
        );
        assert!(c
            .apply_env(|k| (k == "GMPI_SPIN").then(|| "lots".into()))
            .is_err());
    }
}
