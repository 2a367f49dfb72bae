//! Image references and pulls as the kubelet sees them, applied by both
//! kubelets of the rig (kube-sim's and the node agent's)
//! (pkg/kubelet/images/image_manager.go): a reference that does not parse
//! is `InvalidImageName` and never pulled; a failed pull is `ErrImagePull`,
//! and until its back-off (10 s doubling to 300 s) passes the container
//! waits with `ImagePullBackOff`.

use std::time::Duration;

/// Waiting reason of a reference that does not parse.
pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
/// Waiting reason of a failed pull.
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
/// Waiting reason while the pull back-off runs.
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";

fn path_component_ok(c: &str) -> bool {
    // lowercase alphanumerics separated by '.', '_', '__' or runs of '-'
    if c.is_empty() {
        return false;
    }
    let b = c.as_bytes();
    if !b[0].is_ascii_lowercase() && !b[0].is_ascii_digit() {
        return false;
    }
    if !b[b.len() - 1].is_ascii_lowercase() && !b[b.len() - 1].is_ascii_digit() {
        return false;
    }
    let mut prev_sep: Option<u8> = None;
    let mut run = 0;
    for &ch in b {
        match ch {
            b'a'..=b'z' | b'0'..=b'9' => {
                prev_sep = None;
                run = 0;
            }
            b'.' | b'_' | b'-' => {
                match prev_sep {
                    None => {}
                    Some(b'-') if ch == b'-' => {}
                    Some(b'_') if ch == b'_' && run == 1 => {}
                    _ => return false,
                }
                prev_sep = Some(ch);
                run += 1;
            }
            _ => return false,
        }
    }
    true
}

fn domain_ok(d: &str) -> bool {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return false;
    }
    !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Checks an image reference with the grammar of the distribution
/// reference parser; the error is the kubelet's `InvalidImageName` message.
pub fn check_reference(image: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "Failed to apply default image tag \"{image}\": couldn't parse image name \"{image}\": {why}"
        ))
    };
    if image.is_empty() || image.len() > 255 + 128 + 80 {
        return bad("invalid reference format");
    }
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let ok = d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"+.-_".contains(&c))
                && hex.len() >= 32
                && hex.bytes().all(|c| c.is_ascii_hexdigit())
        });
        if !ok {
            return bad("invalid reference format");
        }
    }
    // The tag follows the last ':' after the last '/'.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let ok = !t.is_empty()
            && t.len() <= 128
            && (t.as_bytes()[0].is_ascii_alphanumeric() || t.starts_with('_'))
            && t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(&c));
        if !ok {
            return bad("invalid reference format");
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        if !domain_ok(parts[0]) {
            return bad("invalid reference format");
        }
        parts.remove(0);
    }
    if name.bytes().any(|c| c.is_ascii_uppercase())
        && parts
            .iter()
            .all(|p| path_component_ok(&p.to_ascii_lowercase()))
    {
        return bad("invalid reference format: repository name must be lowercase");
    }
    if parts.is_empty() || !parts.iter().all(|p| path_component_ok(p)) {
        return bad("invalid reference format");
    }
    Ok(())
}

/// The back-off after the `failures`-th failed pull in a row: `initial`
/// doubling, capped at `max`.
pub fn back_off(failures: u32, initial: Duration, max: Duration) -> Duration {
    let mut d = initial;
    for _ in 1..failures {
        d = (d * 2).min(max);
    }
    d.min(max)
}

/// The waiting message while the pull back-off runs: the back-off Event's
/// text with the last pull's error after it (image_manager.go
/// `EnsureImageExists`: `prevPullErrMsg`, `"<ErrImagePull>: <message>"`).
pub fn back_off_message(image: &str) -> String {
    format!(
        "{}: {ERR_IMAGE_PULL}: {}",
        back_off_event(image),
        pull_error(image)
    )
}

/// The text of the `BackOff` Event (and the start of the waiting message).
pub fn back_off_event(image: &str) -> String {
    format!("Back-off pulling image \"{image}\"")
}

/// The message of a failed pull (what containerd answers for an image that
/// does not exist or may not be read, as the kubelet shows it: the gRPC
/// status's message, without its `rpc error: code = ... desc =` wrapping).
pub fn pull_error(image: &str) -> String {
    format!(
        "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        for ok in [
            "busybox",
            "busybox:1.36",
            "tcab/driver:dev",
            "registry.example.com:5000/team/driver:v1.2_3",
            "ghcr.io/org/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "localhost/x",
            "a__b/c-d--e",
        ] {
            assert_eq!(check_reference(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Busybox",
            "busy box",
            "img:",
            ":tag",
            "a//b",
            "img::1",
            "img@sha256:xyz",
            "-a",
            "a_",
            "img:-tag",
        ] {
            assert!(check_reference(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_reference("Driver:1").unwrap_err(),
            "Failed to apply default image tag \"Driver:1\": couldn't parse image name \"Driver:1\": invalid reference format: repository name must be lowercase"
        );
    }

    #[test]
    fn back_off_doubles_to_the_cap() {
        let s = Duration::from_secs;
        let b = |n| back_off(n, s(10), s(300));
        assert_eq!(
            (b(1), b(2), b(3), b(6), b(9)),
            (s(10), s(20), s(40), s(300), s(300))
        );
    }
}
