//! Bearer tokens for `sandbench mcp --http`. A loopback port is reachable by
//! every local user and, through a browser, by every web page, so the
//! server answers only requests that carry `Authorization: Bearer TOKEN`.
//!
//! By default a fresh token is made at start (32 random bytes, hex) and
//! written to a file only its owner can read, in a directory only its owner
//! can enter: `$XDG_RUNTIME_DIR/sandbench/`, else `run/` in the state
//! directory. The directory is made with mode 0700 or, when it exists, used
//! only if it is a real directory (not a link) that belongs to us and that no
//! one else can enter; the file is created afresh (`O_EXCL | O_NOFOLLOW`,
//! mode 0600) relative to the directory's descriptor, and removed when the
//! server exits. `--token-file` names a file the operator made instead: one
//! token per line (several clients, each with its own token), readable by
//! its owner alone.
//!
//! Tokens are compared as SHA-256 digests in constant time.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token `--token-file` may hold.
const MIN_TOKEN: usize = 16;
/// Most tokens one file may hold.
const MAX_TOKENS: usize = 64;

/// The tokens a server accepts; a request carrying one of them is that
/// token's principal (its index).
#[derive(Clone)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} accepted)", self.digests.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Tokens {
        Tokens { digests: tokens.into_iter().map(|t| digest(t.as_bytes())).collect() }
    }

    /// The principal an `Authorization` header's value names, if any. Every
    /// accepted token is compared, whichever matches, in constant time.
    pub fn check(&self, header: Option<&[u8]>) -> Option<usize> {
        let value = header?;
        let (scheme, rest) = split_once(value, b' ')?;
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return None;
        }
        let token = trim(rest);
        if token.is_empty() {
            return None;
        }
        let d = digest(token);
        let mut found = None;
        for (i, known) in self.digests.iter().enumerate() {
            if bool::from(known.ct_eq(&d)) {
                found = Some(i);
            }
        }
        found
    }
}

fn split_once(v: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = v.iter().position(|b| *b == sep)?;
    Some((&v[..i], &v[i + 1..]))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// A token file this server made; removed when dropped.
pub struct TokenFile {
    dir: OwnedFd,
    name: String,
    pub path: PathBuf,
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = unlinkat(self.dir.as_fd(), self.name.as_str(), UnlinkatFlags::NoRemoveDir);
    }
}

/// Where generated tokens go: the runtime dir (`XDG_RUNTIME_DIR`, a tmpfs
/// only the user can enter), else `run/` in the state directory.
pub fn default_dir(runtime_dir: Option<&Path>, state_dir: Option<&Path>) -> PathBuf {
    match runtime_dir.filter(|d| d.is_absolute()) {
        Some(d) => d.join("sandbench"),
        None => state_dir.map(Path::to_path_buf).unwrap_or_else(crate::config::log_dir).join("run"),
    }
}

/// Open `path` as a directory only we can enter, making it (mode 0700) when
/// missing. An existing one that is a link, someone else's, or open to
/// others is refused: a token written there could be read or swapped.
fn private_dir(path: &Path) -> anyhow::Result<OwnedFd> {
    let parent = path.parent().ok_or_else(|| anyhow!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let pfd = open(parent, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .with_context(|| format!("cannot open {}", parent.display()))?;
    let name = path.file_name().ok_or_else(|| anyhow!("{} has no file name", path.display()))?;
    match mkdirat(pfd.as_fd(), name, Mode::S_IRWXU) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => bail!("cannot create {}: {e}", path.display()),
    }
    let fd = openat(pfd.as_fd(), name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| {
            anyhow!(
                "{} is not a directory sandbench can use for its token ({e}): remove it, or give sandbench mcp --token-file",
                path.display()
            )
        })?;
    let st = fstat(fd.as_fd()).with_context(|| format!("cannot stat {}", path.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        bail!(
            "{} is not private (owner uid {}, mode {:o}); a token there could be read by others: remove it, or give \
             sandbench mcp --token-file",
            path.display(),
            st.st_uid,
            st.st_mode & 0o7777
        );
    }
    Ok(fd)
}

/// Make a fresh token and write it to `dir/name` (see the module's doc).
pub fn generate(dir: &Path, name: &str) -> anyhow::Result<(Tokens, TokenFile)> {
    let token = fresh_token(32)?;
    let dfd = private_dir(dir)?;
    match unlinkat(dfd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => bail!("cannot replace the old token file {}: {e}", dir.join(name).display()),
    }
    let fd = openat(
        dfd.as_fd(),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .with_context(|| format!("cannot create the token file {}", dir.join(name).display()))?;
    let file = TokenFile { dir: dfd, name: name.to_string(), path: dir.join(name) };
    nix::sys::stat::fchmod(fd.as_fd(), Mode::S_IRUSR | Mode::S_IWUSR).context("cannot chmod the token file")?;
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, format!("{token}\n").as_bytes()).context("cannot write the token file")?;
    Ok((Tokens::new([token.as_str()]), file))
}

fn fresh_token(n: usize) -> anyhow::Result<String> {
    crate::host::random_hex(n).map_err(|e| anyhow!("cannot read /dev/urandom for a token: {e}"))
}

/// The tokens in an operator's `--token-file`: one per line, blank lines
/// and `#` comments skipped. The file must be a regular file of ours that no
/// one else can read or write.
pub fn from_file(path: &Path) -> anyhow::Result<Tokens> {
    let fd = open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK, Mode::empty())
        .map_err(|e| anyhow!("cannot open the token file {}: {e}", path.display()))?;
    let st = fstat(fd.as_fd()).with_context(|| format!("cannot stat {}", path.display()))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        bail!("the token file {} is not a regular file", path.display());
    }
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        bail!(
            "the token file {} can be read or written by others (owner uid {}, mode {:o}): chown it to yourself and \
             chmod 600 it",
            path.display(),
            st.st_uid,
            st.st_mode & 0o7777
        );
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(std::fs::File::from(fd), 64 << 10), &mut text)
        .with_context(|| format!("cannot read the token file {} (UTF-8 text expected)", path.display()))?;
    let tokens: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    if tokens.is_empty() {
        bail!("the token file {} holds no token (one per line)", path.display());
    }
    if tokens.len() > MAX_TOKENS {
        bail!("the token file {} holds {} tokens; at most {MAX_TOKENS}", path.display(), tokens.len());
    }
    for (i, t) in tokens.iter().enumerate() {
        if t.len() < MIN_TOKEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            bail!(
                "token {} in {} is not at least {MIN_TOKEN} printable characters without spaces (make one with: \
                 head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
                i + 1,
                path.display()
            );
        }
    }
    Ok(Tokens::new(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_known_bearer_token_names_a_principal() {
        let t = Tokens::new(["first-token-0123456789", "second-token-0123456789"]);
        assert_eq!(t.check(Some(b"Bearer first-token-0123456789")), Some(0));
        assert_eq!(t.check(Some(b"bearer  second-token-0123456789 ")), Some(1));
        for bad in [
            &b"Bearer first-token-012345678"[..],
            b"Basic first-token-0123456789",
            b"Bearer",
            b"Bearer ",
            b"first-token-0123456789",
            b"",
        ] {
            assert_eq!(t.check(Some(bad)), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(t.check(None), None);
    }

    #[test]
    fn a_generated_token_is_private_and_goes_with_the_server() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let (tokens, file) = generate(&dir, "mcp-1.token").unwrap();
        let meta = std::fs::metadata(&file.path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let text = std::fs::read_to_string(&file.path).unwrap();
        assert_eq!(text.trim().len(), 64);
        assert_eq!(tokens.check(Some(format!("Bearer {}", text.trim()).as_bytes())), Some(0));
        // A second start replaces the file, never writes through what is there.
        let path = file.path.clone();
        drop(file);
        assert!(!path.exists(), "removed when the server goes");
        std::os::unix::fs::symlink("/etc/hostname-not-ours", &path).unwrap();
        let (_, again) = generate(&dir, "mcp-1.token").unwrap();
        assert!(again.path.symlink_metadata().unwrap().is_file());
    }

    #[test]
    fn an_open_or_linked_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let open_dir = root.path().join("open");
        std::fs::create_dir(&open_dir).unwrap();
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = generate(&open_dir, "t").err().unwrap().to_string();
        assert!(e.contains("is not private") && e.contains("755"), "{e}");
        let link = root.path().join("link");
        let target = root.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = generate(&link, "t").err().unwrap().to_string();
        assert!(e.contains("is not a directory sandbench can use"), "{e}");
    }

    #[test]
    fn a_token_file_must_be_private_and_hold_real_tokens() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("tokens");
        std::fs::write(&p, "# clients\nalpha-token-0123456789\n\nbeta-token-0123456789\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = from_file(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = from_file(&p).unwrap();
        assert_eq!(t.check(Some(b"Bearer beta-token-0123456789")), Some(1));
        std::fs::write(&p, "short\n").unwrap();
        assert!(from_file(&p).unwrap_err().to_string().contains("at least 16"));
        std::fs::write(&p, "\n# nothing\n").unwrap();
        assert!(from_file(&p).unwrap_err().to_string().contains("holds no token"));
    }
}
