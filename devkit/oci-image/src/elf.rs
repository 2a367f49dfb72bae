//! Just enough of ELF to list what a dynamically linked x86-64 binary needs:
//! its program interpreter (the dynamic loader) and its `DT_NEEDED` names.

use std::path::Path;

use anyhow::{Context, Result, bail};

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;

/// What one ELF file needs at run time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The loader's absolute path (`PT_INTERP`); `None` for a shared library or a static binary.
    pub interpreter: Option<String>,
    /// The `DT_NEEDED` sonames, in file order.
    pub needed: Vec<String>,
}

/// Reads the `PT_INTERP` and `DT_NEEDED` entries of a 64-bit little-endian ELF file.
pub fn needs(path: &Path) -> Result<Needs> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&data)
        .with_context(|| format!("{} is not a 64-bit little-endian ELF file", path.display()))
}

fn parse(d: &[u8]) -> Result<Needs> {
    if d.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        bail!("bad ELF header");
    }
    let (phoff, phentsize, phnum) = (u64_at(d, 0x20)?, u16_at(d, 0x36)?, u16_at(d, 0x38)?);
    let mut loads = Vec::new();
    let (mut interp, mut dynamic) = (None, None);
    for i in 0..u64::from(phnum) {
        let ph = usize::try_from(phoff + i * u64::from(phentsize))?;
        let (kind, offset, vaddr, filesz) = (
            u32_at(d, ph)?,
            u64_at(d, ph + 8)?,
            u64_at(d, ph + 16)?,
            u64_at(d, ph + 32)?,
        );
        match kind {
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_INTERP => interp = Some(cstr(d, usize::try_from(offset)?)?),
            PT_DYNAMIC => dynamic = Some((usize::try_from(offset)?, usize::try_from(filesz)?)),
            _ => {}
        }
    }
    let mut needs = Needs {
        interpreter: interp,
        needed: Vec::new(),
    };
    let Some((start, len)) = dynamic else {
        return Ok(needs);
    };
    let (mut strtab, mut names) = (None, Vec::new());
    for at in (start..start + len).step_by(16) {
        match (u64_at(d, at)?, u64_at(d, at + 8)?) {
            (0, _) => break,
            (DT_NEEDED, v) => names.push(v),
            (DT_STRTAB, v) => strtab = Some(v),
            _ => {}
        }
    }
    if names.is_empty() {
        return Ok(needs);
    }
    let strtab = strtab.context("DT_NEEDED without DT_STRTAB")?;
    // DT_STRTAB is an address; the PT_LOAD segment holding it maps it to the file.
    let &(vaddr, offset, _) = loads
        .iter()
        .find(|(v, _, size)| (*v..v + size).contains(&strtab))
        .context("DT_STRTAB outside every PT_LOAD segment")?;
    let base = strtab - vaddr + offset;
    for name in names {
        needs.needed.push(cstr(d, usize::try_from(base + name)?)?);
    }
    Ok(needs)
}

fn slice(d: &[u8], at: usize, n: usize) -> Result<&[u8]> {
    d.get(at..at + n).context("truncated ELF file")
}

fn u16_at(d: &[u8], at: usize) -> Result<u16> {
    Ok(u16::from_le_bytes(slice(d, at, 2)?.try_into()?))
}

fn u32_at(d: &[u8], at: usize) -> Result<u32> {
    Ok(u32::from_le_bytes(slice(d, at, 4)?.try_into()?))
}

fn u64_at(d: &[u8], at: usize) -> Result<u64> {
    Ok(u64::from_le_bytes(slice(d, at, 8)?.try_into()?))
}

fn cstr(d: &[u8], at: usize) -> Result<String> {
    let rest = d.get(at..).context("truncated ELF file")?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .context("unterminated ELF string")?;
    Ok(String::from_utf8(rest[..end].to_vec())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_true_needs_libc_through_the_x86_64_loader() {
        let needs = needs(Path::new("/bin/true")).unwrap();
        assert_eq!(
            needs.interpreter.as_deref(),
            Some("/lib64/ld-linux-x86-64.so.2")
        );
        assert!(needs.needed.contains(&"libc.so.6".to_string()), "{needs:?}");
    }

    #[test]
    fn a_text_file_is_refused() {
        assert!(parse(b"#!/bin/sh\n").is_err());
    }
}
