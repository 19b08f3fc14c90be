//! The container image `deploy/image/build` assembles with buildah (no Docker daemon on
//! this machine, and podman cannot run containers here): it is mounted, and `pinfed
//! --version` runs inside it through chroot as the image's user, which is not root.
//!
//! The image is built from `PINFED_IMAGE_BIN` when set (a release binary: then the image
//! must also stay within the 40 MB target), otherwise from this build's `pinfed` (debug in
//! CI, where a release build would cost ~10 minutes of the two cores): then the image may
//! add at most a few MB to the binary. Needs buildah (`e2e/test` installs it) and root, or
//! `buildah unshare` for the mount.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The size target of the release image (uncompressed).
const RELEASE_IMAGE_MAX_BYTES: u64 = 40_000_000;
/// What the image may hold besides the binary: the C library, libm, libgcc_s, the loader,
/// the CA bundle, /etc/passwd and /etc/group (about 3.5 MB on Debian 12).
const IMAGE_OVERHEAD_MAX_BYTES: u64 = 6_000_000;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Removes the test's image however the test ends.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("buildah").args(["rmi", &self.0]).output();
    }
}

/// Mounts the image in a working container, reads its config and runs `pinfed --version`
/// in it through chroot as the configured user. Prints `key=value` lines.
const INSPECT: &str = r#"set -eu
image=$1
ctr=$(buildah from --pull-never "$image")
trap 'buildah umount "$ctr" >/dev/null 2>&1; buildah rm "$ctr" >/dev/null 2>&1' EXIT
mnt=$(buildah mount "$ctr")
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
echo "user=$user"
echo "entrypoint=$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$image")"
echo "version_label=$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$image")"
echo "revision_label=$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}' "$image")"
echo "size=$(du -sb "$mnt" | cut -f1)"
echo "binary_size=$(stat -c %s "$mnt/usr/local/bin/pinfed")"
echo "passwd_user=$(grep "^[^:]*:[^:]*:${user%%:*}:" "$mnt/etc/passwd" | cut -d: -f1)"
echo "version=$(chroot --userspec="$user" "$mnt" /usr/local/bin/pinfed --version)"
"#;

fn field<'a>(lines: &'a str, key: &str) -> &'a str {
    lines
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the image inspection printed no {key}:\n{lines}"))
}

#[test]
fn the_image_runs_pinfed_version_as_a_non_root_user() {
    let buildah = Command::new("buildah").arg("--version").output();
    assert!(
        buildah.is_ok_and(|o| o.status.success()),
        "buildah is not installed: e2e/test installs it (apt-get install buildah), and \
         deploy/image/build does when it builds without Docker"
    );
    let from_release = std::env::var_os("PINFED_IMAGE_BIN").map(PathBuf::from);
    let binary = from_release
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pinfed")));
    let tag = format!(
        "localhost/{}:{}",
        testkit::unique_name("pinfed-image-test"),
        env!("CARGO_PKG_VERSION")
    );
    let image = Image(tag.clone());
    let dir = std::env::temp_dir().join(testkit::unique_name("pinfed-image-test"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let archive = dir.join("pinfed.oci.tar");

    let out = run(
        Command::new(repo().join("deploy/image/build"))
            .args(["--tag", &tag, "--oci-archive"])
            .arg(&archive)
            .arg("--binary")
            .arg(&binary)
            .env("PINFED_IMAGE_BUILDER", "buildah"),
        "deploy/image/build",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some(tag.as_str()),
        "the last stdout line is the image reference"
    );

    let unshare = !is_root();
    let mut inspect = if unshare {
        let mut c = Command::new("buildah");
        c.args(["unshare", "sh", "-c", INSPECT, "inspect", &image.0]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", INSPECT, "inspect", &image.0]);
        c
    };
    let out = run(&mut inspect, "mounting the image and running pinfed in it");
    let facts = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{facts}");

    assert_eq!(
        field(&facts, "version"),
        format!("pinfed {}", env!("CARGO_PKG_VERSION"))
    );
    let user = field(&facts, "user");
    let uid = user.split(':').next().unwrap_or_default();
    assert!(
        !user.is_empty() && uid != "0" && uid != "root",
        "the image runs as {user:?}: it must name a non-root user"
    );
    assert_eq!(
        field(&facts, "passwd_user"),
        "nonroot",
        "uid {uid} in /etc/passwd"
    );
    assert_eq!(field(&facts, "entrypoint"), "[/usr/local/bin/pinfed]");
    assert_eq!(field(&facts, "version_label"), env!("CARGO_PKG_VERSION"));
    assert!(
        field(&facts, "revision_label").len() >= 40,
        "the revision label is the commit: {facts}"
    );

    let size: u64 = field(&facts, "size").parse().expect("size");
    let binary_size: u64 = field(&facts, "binary_size").parse().expect("binary size");
    assert!(
        size - binary_size <= IMAGE_OVERHEAD_MAX_BYTES,
        "the image holds {} bytes besides the {binary_size}-byte binary (at most \
         {IMAGE_OVERHEAD_MAX_BYTES}): something else went in",
        size - binary_size
    );
    if let Some(bin) = &from_release {
        assert!(
            size <= RELEASE_IMAGE_MAX_BYTES,
            "the image from {} is {size} bytes, over the {RELEASE_IMAGE_MAX_BYTES}-byte target",
            bin.display()
        );
    }

    let listing = run(
        Command::new("tar").arg("-tf").arg(&archive),
        "listing the OCI archive",
    );
    let listing = String::from_utf8_lossy(&listing.stdout);
    for want in ["oci-layout", "index.json"] {
        assert!(
            listing.lines().any(|l| l == want),
            "{} is not an OCI archive (no {want}):\n{listing}",
            archive.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
