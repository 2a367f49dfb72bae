//! The dispatcher archive cannot drift from the Dockerfile: its runtime stage,
//! parsed here, against `dispatcher_image`'s config and layers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tcab_oci_image::{BASE_ENV, Entry, WORKING_DIR, dispatcher_image, workload_image};

use crate::support::{bin_true, fake_bin_dir, is_shell};

/// The base the image's config values (env, working directory, no
/// entrypoint) were copied from. A new base fails here first: check its
/// config (`crane config <base>`) and update `dispatcher_image` and this.
const EXPECTED_BASE: &str = "gcr.io/distroless/cc-debian12:nonroot";

/// One instruction: its keyword (upper case) and the rest of its logical line.
#[derive(Debug, Clone, PartialEq)]
struct Instruction {
    keyword: String,
    args: String,
}

/// The instructions of a Dockerfile: comments and blank lines skipped (also
/// inside a continuation, as buildkit does), `\` continuations joined.
fn instructions(text: &str) -> Vec<Instruction> {
    let (mut out, mut logical) = (Vec::new(), String::new());
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            logical.push_str(head);
            logical.push(' ');
            continue;
        }
        logical.push_str(line);
        let text = std::mem::take(&mut logical);
        let (keyword, args) = text
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or((text.trim(), ""));
        out.push(Instruction {
            keyword: keyword.to_uppercase(),
            args: args.trim().to_string(),
        });
    }
    out
}

/// Whitespace-separated words; double quotes group and are removed, `\` escapes inside them.
fn words(s: &str) -> Vec<String> {
    let (mut out, mut word, mut quoted, mut in_word) = (Vec::new(), String::new(), false, false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => (quoted, in_word) = (!quoted, true),
            '\\' if quoted => word.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                }
                in_word = false;
            }
            c => (word.push(c), in_word = true).0,
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// `${NAME}` and `$NAME` replaced by the stage's ARG values (empty when unset).
fn substitute(s: &str, args: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(inner) => {
                let end = inner.find('}').expect("an unclosed ${");
                (&inner[..end], end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        out.push_str(args.get(name).map_or("", String::as_str));
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// The final stage: its `FROM` image and instructions, and its ARG values
/// (a bare `ARG X` takes the default of the global `ARG X=...` before the first FROM).
struct FinalStage {
    from: String,
    body: Vec<Instruction>,
    args: BTreeMap<String, String>,
}

fn final_stage(text: &str) -> FinalStage {
    let all = instructions(text);
    let first_from = all
        .iter()
        .position(|i| i.keyword == "FROM")
        .expect("a FROM");
    let last_from = all.iter().rposition(|i| i.keyword == "FROM").unwrap();
    let mut globals = BTreeMap::new();
    for i in all[..first_from].iter().filter(|i| i.keyword == "ARG") {
        let (k, v) = i.args.split_once('=').unwrap_or((&i.args, ""));
        globals.insert(k.to_string(), words(v).concat());
    }
    let body = all[last_from + 1..].to_vec();
    let mut args = BTreeMap::new();
    for i in body.iter().filter(|i| i.keyword == "ARG") {
        match i.args.split_once('=') {
            Some((k, v)) => args.insert(k.to_string(), words(v).concat()),
            None => args.insert(
                i.args.clone(),
                globals.get(&i.args).cloned().unwrap_or_default(),
            ),
        };
    }
    let from = words(&all[last_from].args).into_iter().next().unwrap();
    FinalStage { from, body, args }
}

fn dockerfile() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../Dockerfile");
    std::fs::read_to_string(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()))
}

#[test]
fn the_dispatcher_image_matches_the_dockerfiles_runtime_stage() {
    let stage = final_stage(&dockerfile());
    assert_eq!(
        stage.from, EXPECTED_BASE,
        "the runtime stage's base changed: check the new base's config (Env, WorkingDir, Entrypoint, Cmd, User) and update dispatcher_image and EXPECTED_BASE"
    );
    let (version, revision) = (&stage.args["VERSION"], &stage.args["REVISION"]);
    let bins = fake_bin_dir();
    let image = dispatcher_image(bins.path(), "test", version, revision).unwrap();
    let config = &image.config;

    let (mut labels, mut copied, mut user) = (BTreeMap::new(), Vec::new(), None);
    for i in &stage.body {
        match i.keyword.as_str() {
            "ARG" => {}
            "LABEL" => {
                for w in words(&i.args) {
                    let (k, v) = w.split_once('=').expect("LABEL key=value");
                    labels.insert(k.to_string(), substitute(v, &stage.args));
                }
            }
            "COPY" => {
                let w = words(&i.args);
                let (flags, paths): (Vec<_>, Vec<_>) = w.iter().partition(|w| w.starts_with("--"));
                assert_eq!(
                    flags,
                    ["--from=build"],
                    "a COPY not from the build stage: {i:?}"
                );
                let (dest, sources) = paths.split_last().unwrap();
                for s in sources {
                    copied.push(format!("{dest}{}", s.rsplit('/').next().unwrap()));
                }
            }
            "USER" => user = Some(substitute(&i.args, &stage.args)),
            other => panic!(
                "the runtime stage has {other} {}, which dispatcher_image does not reproduce: teach it and this test",
                i.args
            ),
        }
    }

    assert_eq!(config.labels, labels, "the LABELs, with the ARG defaults");
    assert_eq!(Some(&config.user), user.as_ref(), "USER");
    assert!(
        config.entrypoint.is_empty() && config.cmd.is_empty(),
        "neither the Dockerfile nor the base sets them"
    );
    assert_eq!(config.env, BASE_ENV, "the base's Env");
    assert_eq!(config.working_dir, WORKING_DIR, "the base's WorkingDir");
    assert_eq!(image.reference(), "docker.io/library/tcab-dispatcher:test");

    // The copied binaries are in the top layer, executable, and nothing else is there.
    assert_eq!(copied.len(), 3, "{copied:?}");
    let top = image.layers.last().unwrap();
    for path in &copied {
        let name = path.rsplit('/').next().unwrap();
        match top.get(path) {
            Some(Entry::File {
                source,
                mode: 0o755,
                uid: 0,
                gid: 0,
            }) => {
                assert_eq!(
                    *source,
                    tcab_oci_image::Source::Host(bins.path().join(name)),
                    "{path}"
                );
            }
            other => panic!("{path} in the top layer: {other:?}"),
        }
    }
    let files: Vec<String> = top
        .entries()
        .filter(|(_, e)| !matches!(e, Entry::Dir { .. }))
        .map(|(p, _)| format!("/{p}"))
        .collect();
    let mut want = copied.clone();
    want.sort();
    assert_eq!(files, want, "the top layer holds only the copied binaries");
}

#[test]
fn no_layer_of_either_image_holds_a_shell() {
    let bins = fake_bin_dir();
    let images = [
        dispatcher_image(bins.path(), "t", "0.1.0", "r").unwrap(),
        workload_image("w", &bin_true(), &[]).unwrap(),
    ];
    for image in &images {
        for layer in &image.layers {
            let shells: Vec<&str> = layer
                .entries()
                .map(|(p, _)| p)
                .filter(|p| is_shell(p))
                .collect();
            assert!(shells.is_empty(), "{}: {shells:?}", image.name);
        }
    }
    assert!(
        is_shell("bin/sh") && is_shell("usr/bin/dash") && is_shell("bin/busybox"),
        "the check itself"
    );
}

#[test]
fn the_parser_joins_continuations_and_takes_arg_defaults() {
    let text = "# syntax=docker/dockerfile:1\nARG V=1.0\nARG S=\nFROM a AS build\nRUN x \\\n  # a comment\n  && y\n\
                FROM base:tag\nARG V\nARG S\nARG L=\"local value\"\n\
                LABEL a=\"${V}\" \\\n      b=\"say \\\"$L\\\"\" c=${S}\nUSER 1:2\n";
    let stage = final_stage(text);
    assert_eq!(stage.from, "base:tag");
    assert_eq!(stage.args["V"], "1.0");
    assert_eq!(stage.args["S"], "");
    assert_eq!(stage.args["L"], "local value");
    let all = instructions(text);
    assert_eq!(
        (all[3].keyword.as_str(), words(&all[3].args)),
        ("RUN", vec!["x".to_string(), "&&".into(), "y".into()])
    );
    let label = stage.body.iter().find(|i| i.keyword == "LABEL").unwrap();
    let pairs: Vec<String> = words(&label.args)
        .iter()
        .map(|w| substitute(w, &stage.args))
        .collect();
    assert_eq!(pairs, ["a=1.0", "b=say \"local value\"", "c="]);
}
