//! A minimal, deterministic ustar writer: regular files, directories and
//! symlinks, every mtime 0, no user or group names.

use anyhow::{Result, bail};

const BLOCK: usize = 512;

/// The kind of one tar entry.
pub(crate) enum Kind<'a> {
    File(&'a [u8]),
    Dir,
    Symlink(&'a str),
}

/// Appends one entry (`name` relative, without a leading `/`) to `out`.
pub(crate) fn append(
    out: &mut Vec<u8>,
    name: &str,
    kind: Kind<'_>,
    mode: u32,
    uid: u32,
    gid: u32,
) -> Result<()> {
    let mut h = [0u8; BLOCK];
    let (name, size, flag, link) = match kind {
        Kind::File(data) => (name.to_string(), data.len() as u64, b'0', ""),
        Kind::Dir => (format!("{name}/"), 0, b'5', ""),
        Kind::Symlink(target) => (name.to_string(), 0, b'2', target),
    };
    let (prefix, base) = split_name(&name)?;
    put(&mut h[0..100], base.as_bytes(), &name)?;
    octal(&mut h[100..108], u64::from(mode & 0o7777), &name)?;
    octal(&mut h[108..116], u64::from(uid), &name)?;
    octal(&mut h[116..124], u64::from(gid), &name)?;
    octal(&mut h[124..136], size, &name)?;
    octal(&mut h[136..148], 0, &name)?;
    h[156] = flag;
    put(&mut h[157..257], link.as_bytes(), &name)?;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    put(&mut h[345..500], prefix.as_bytes(), &name)?;
    // The checksum is computed with its own field read as spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    if let Kind::File(data) = kind {
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    Ok(())
}

/// Ends an archive: two zero blocks.
pub(crate) fn finish(out: &mut Vec<u8>) {
    out.resize(out.len() + 2 * BLOCK, 0);
}

/// Splits a name longer than 100 bytes into ustar's prefix and name at a `/`.
fn split_name(name: &str) -> Result<(&str, &str)> {
    if name.len() <= 100 {
        return Ok(("", name));
    }
    // The name part may keep a trailing `/` (directories), so look before it.
    let search = name.trim_end_matches('/');
    for (i, _) in search.match_indices('/') {
        let (prefix, rest) = (&name[..i], &name[i + 1..]);
        if prefix.len() <= 155 && rest.len() <= 100 && !rest.is_empty() {
            return Ok((prefix, rest));
        }
    }
    bail!("tar: the path {name:?} is too long for ustar")
}

fn put(field: &mut [u8], value: &[u8], name: &str) -> Result<()> {
    if value.len() > field.len() {
        bail!(
            "tar: a field of {name:?} is too long ({} bytes)",
            value.len()
        );
    }
    field[..value.len()].copy_from_slice(value);
    Ok(())
}

/// Writes `value` as zero-padded octal digits followed by a NUL.
fn octal(field: &mut [u8], value: u64, name: &str) -> Result<()> {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    if text.len() > digits {
        bail!("tar: a number of {name:?} is too large for ustar ({value})");
    }
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_checksum_is_the_sum_of_its_bytes_with_the_field_as_spaces() {
        let mut out = Vec::new();
        append(&mut out, "a/b", Kind::File(b"hi"), 0o644, 1, 2).unwrap();
        let mut h = out[..BLOCK].to_vec();
        let written = std::str::from_utf8(&h[148..154]).unwrap().to_string();
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(u32::from_str_radix(&written, 8).unwrap(), sum);
        assert_eq!(out.len(), 2 * BLOCK, "one header and one padded data block");
    }

    #[test]
    fn a_long_path_is_split_into_prefix_and_name() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        assert_eq!(split_name(&long).unwrap(), (&long[..120], &long[121..]));
        assert!(split_name(&"x".repeat(101)).is_err());
    }
}
