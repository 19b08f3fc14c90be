//! The artifact store: reviewed workload definitions by name and version, each with its
//! checksum, in a plain directory the JSS reads.
//!
//! ```text
//! ARTIFACTS/<name>/<version>/workload.yaml   the reviewed resource (one document)
//! ARTIFACTS/<name>/<version>/sha256          "<64 hex digits>  workload.yaml\n"
//! ```
//!
//! The `sha256` file is in `sha256sum` format, so `cd ARTIFACTS/web/1.0.0 && sha256sum -c
//! sha256` checks an artifact by hand. The JSS verifies the checksum on every read and
//! refuses an artifact whose file does not match (or that has no checksum). A published
//! version is immutable: publishing different content under it again is refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const WORKLOAD_FILE: &str = "workload.yaml";
pub const CHECKSUM_FILE: &str = "sha256";
/// Artifacts larger than this are refused (the same as the JSS body limit).
pub const MAX_ARTIFACT_BYTES: u64 = 1 << 20;

/// A reference to an artifact: its name and version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRef {
    pub name: String,
    pub version: String,
}

impl std::fmt::Display for ArtifactRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// A verified artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    pub reference: ArtifactRef,
    pub text: String,
    /// Hex SHA-256 of `text`.
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The name or version cannot name an artifact (and could escape the store).
    #[error("{field}: {message}")]
    BadReference {
        field: &'static str,
        message: String,
    },
    #[error("artifact {0} does not exist in the store")]
    NotFound(ArtifactRef),
    #[error("artifact {reference} has no valid checksum file ({CHECKSUM_FILE})")]
    NoChecksum { reference: ArtifactRef },
    #[error(
        "artifact {reference} does not match its checksum: recorded sha256 {expected}, content has {actual}"
    )]
    ChecksumMismatch {
        reference: ArtifactRef,
        expected: String,
        actual: String,
    },
    #[error("artifact {reference} is larger than {MAX_ARTIFACT_BYTES} bytes")]
    TooLarge { reference: ArtifactRef },
    #[error("artifact {reference} is not UTF-8 text")]
    NotText { reference: ArtifactRef },
    #[error(
        "artifact {reference} is already published with different content (sha256 {existing}); publish a new version"
    )]
    Exists {
        reference: ArtifactRef,
        existing: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Names are DNS labels: lower-case alphanumerics and '-', at most 63 characters.
pub fn check_name(name: &str) -> Result<(), ArtifactError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ArtifactError::BadReference {
            field: "artifact.name",
            message: format!(
                "{name:?} is not an artifact name (lower-case alphanumerics and '-', at most 63)"
            ),
        })
    }
}

/// Versions start with an alphanumeric and hold alphanumerics, '.', '_', '+' and '-'
/// (at most 128): `1.4.2`, `2024-06-01`, `v3+build.7`. No '/' so they stay one directory.
pub fn check_version(version: &str) -> Result<(), ArtifactError> {
    let ok = !version.is_empty()
        && version.len() <= 128
        && version.as_bytes()[0].is_ascii_alphanumeric()
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ArtifactError::BadReference {
            field: "artifact.version",
            message: format!(
                "{version:?} is not an artifact version (alphanumerics, '.', '_', '+', '-'; starts with an alphanumeric)"
            ),
        })
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The checksum file's content for a digest.
pub fn checksum_line(hex: &str) -> String {
    format!("{hex}  {WORKLOAD_FILE}\n")
}

/// The digest recorded in a checksum file (`sha256sum` format, or the bare digest).
pub fn recorded_digest(checksum_file: &str) -> Option<String> {
    let first = checksum_file.split_whitespace().next()?;
    (first.len() == 64 && first.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| first.to_ascii_lowercase())
}

/// Checks content against its checksum file. Pure.
pub fn verify(
    reference: &ArtifactRef,
    content: &[u8],
    checksum_file: &str,
) -> Result<Artifact, ArtifactError> {
    let expected = recorded_digest(checksum_file).ok_or_else(|| ArtifactError::NoChecksum {
        reference: reference.clone(),
    })?;
    let actual = sha256_hex(content);
    if actual != expected {
        return Err(ArtifactError::ChecksumMismatch {
            reference: reference.clone(),
            expected,
            actual,
        });
    }
    let text = String::from_utf8(content.to_vec()).map_err(|_| ArtifactError::NotText {
        reference: reference.clone(),
    })?;
    Ok(Artifact {
        reference: reference.clone(),
        text,
        sha256: actual,
    })
}

/// A store rooted at a directory.
#[derive(Clone, Debug)]
pub struct ArtifactStore {
    pub root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl ArtifactStore {
    pub fn new(root: impl Into<PathBuf>) -> ArtifactStore {
        ArtifactStore { root: root.into() }
    }

    fn dir(&self, r: &ArtifactRef) -> Result<PathBuf, ArtifactError> {
        check_name(&r.name)?;
        check_version(&r.version)?;
        Ok(self.root.join(&r.name).join(&r.version))
    }

    /// Reads and verifies an artifact.
    pub fn read(&self, r: &ArtifactRef) -> Result<Artifact, ArtifactError> {
        let dir = self.dir(r)?;
        let file = dir.join(WORKLOAD_FILE);
        let meta = match std::fs::metadata(&file) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::NotFound(r.clone()));
            }
            Err(e) => return Err(io(&file)(e)),
        };
        if meta.len() > MAX_ARTIFACT_BYTES {
            return Err(ArtifactError::TooLarge {
                reference: r.clone(),
            });
        }
        let content = std::fs::read(&file).map_err(io(&file))?;
        let sum_path = dir.join(CHECKSUM_FILE);
        let sum = match std::fs::read_to_string(&sum_path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(&sum_path)(e)),
        };
        verify(r, &content, &sum)
    }

    /// Publishes reviewed content under a name and version (atomically: the checksum is
    /// written last, so a half-written artifact never verifies). Republishing the same
    /// content is a no-op; different content under a published version is refused.
    pub fn publish(&self, r: &ArtifactRef, text: &str) -> Result<String, ArtifactError> {
        let dir = self.dir(r)?;
        let hex = sha256_hex(text.as_bytes());
        if let Ok(existing) = std::fs::read_to_string(dir.join(CHECKSUM_FILE))
            && let Some(existing) = recorded_digest(&existing)
        {
            if existing == hex {
                return Ok(hex);
            }
            return Err(ArtifactError::Exists {
                reference: r.clone(),
                existing,
            });
        }
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let write = |name: &str, content: &str| -> Result<(), ArtifactError> {
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, content).map_err(io(&tmp))?;
            let dest = dir.join(name);
            std::fs::rename(&tmp, &dest).map_err(io(&dest))
        };
        write(WORKLOAD_FILE, text)?;
        write(CHECKSUM_FILE, &checksum_line(&hex))?;
        Ok(hex)
    }

    /// Every artifact in the store (name, version), sorted; unreadable entries skipped.
    /// The owner team an artifact names (`spec.owner.team`), when it reads, verifies and
    /// parses as a workload.
    pub fn owner_team(&self, r: &ArtifactRef) -> Option<String> {
        let a = self.read(r).ok()?;
        match crate::api::parse::parse_one(&a.text).ok()? {
            crate::api::parse::Document::Workload(w) => Some(w.as_ref().owner().team.clone()),
            _ => None,
        }
    }

    pub fn list(&self) -> Vec<ArtifactRef> {
        let mut out = Vec::new();
        let Ok(names) = std::fs::read_dir(&self.root) else {
            return out;
        };
        for n in names.flatten() {
            let name = n.file_name().to_string_lossy().to_string();
            if check_name(&name).is_err() {
                continue;
            }
            let Ok(versions) = std::fs::read_dir(n.path()) else {
                continue;
            };
            for v in versions.flatten() {
                let version = v.file_name().to_string_lossy().to_string();
                if check_version(&version).is_ok() && v.path().join(WORKLOAD_FILE).is_file() {
                    out.push(ArtifactRef {
                        name: name.clone(),
                        version,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(n: &str, v: &str) -> ArtifactRef {
        ArtifactRef {
            name: n.into(),
            version: v.into(),
        }
    }

    #[test]
    fn verify_accepts_the_recorded_digest_only() {
        let hex = sha256_hex(b"kind: X\n");
        assert_eq!(hex.len(), 64, "hex sha256 is 64 characters: {hex}");
        let a = verify(&r("web", "1"), b"kind: X\n", &checksum_line(&hex)).unwrap();
        assert_eq!(a.text, "kind: X\n");
        assert!(verify(&r("web", "1"), b"kind: X\n", &hex.to_uppercase()).is_ok());
        assert!(matches!(
            verify(&r("web", "1"), b"kind: Y\n", &checksum_line(&hex)),
            Err(ArtifactError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            verify(&r("web", "1"), b"kind: X\n", "garbage"),
            Err(ArtifactError::NoChecksum { .. })
        ));
        assert!(matches!(
            verify(&r("web", "1"), b"kind: X\n", ""),
            Err(ArtifactError::NoChecksum { .. })
        ));
    }

    #[test]
    fn references_cannot_escape_the_store() {
        for bad in ["", "..", "a/b", "A", "-a", "a-", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "..", ".hidden", "1/2", "../x", "a b"] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("web-1").is_ok());
        assert!(check_version("v1.2.3+build_7-rc").is_ok());
    }

    #[test]
    fn publish_read_tamper_and_immutability() {
        let dir = std::env::temp_dir().join(format!("pinfed-artifacts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = ArtifactStore::new(&dir);
        let web = r("web", "1.0.0");
        let hex = store.publish(&web, "a: 1\n").unwrap();
        assert_eq!(store.read(&web).unwrap().sha256, hex);
        assert_eq!(store.publish(&web, "a: 1\n").unwrap(), hex, "idempotent");
        assert!(matches!(
            store.publish(&web, "a: 2\n"),
            Err(ArtifactError::Exists { .. })
        ));
        assert!(matches!(
            store.read(&r("web", "2.0.0")),
            Err(ArtifactError::NotFound(_))
        ));
        assert_eq!(store.list(), vec![web.clone()]);
        std::fs::write(dir.join("web/1.0.0/workload.yaml"), "a: 3\n").unwrap();
        assert!(matches!(
            store.read(&web),
            Err(ArtifactError::ChecksumMismatch { .. })
        ));
        std::fs::remove_file(dir.join("web/1.0.0/sha256")).unwrap();
        assert!(matches!(
            store.read(&web),
            Err(ArtifactError::NoChecksum { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
