//! Running one probe on both clusters and judging the difference.

use crate::cluster::Cluster;
use crate::divergences::{self, Divergence};
use crate::outcome::{Difference, Outcome};
use anyhow::Result;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// A namespace for the probe: `conf-<probe>-<random>` (a DNS label).
pub fn namespace_for(probe: &str) -> String {
    let mut base: String = probe
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while base.contains("--") {
        base = base.replace("--", "-");
    }
    let base: String = base.trim_matches('-').chars().take(48).collect();
    format!(
        "conf-{}-{:04x}",
        base.trim_end_matches('-'),
        rand::random::<u16>()
    )
}

/// One side's result.
pub(crate) struct Ran {
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<anyhow::Error>,
    pub(crate) took: Duration,
}

/// What the two sides and the table of divergences are called in a report.
pub(crate) struct Names {
    /// The model's side (kube-sim, the node agent).
    pub(crate) model: &'static str,
    /// The upstream side.
    pub(crate) upstream: &'static str,
    /// The README whose table lists the divergences.
    pub(crate) readme: &'static str,
}

/// kube-sim against the real control plane.
const SIM_NAMES: Names = Names {
    model: "kube-sim",
    upstream: "real",
    readme: "devkit/kube-sim/README.md",
};

/// Runs `probe` on a fresh kube-sim and on the shared real control plane at
/// once, prints both outcomes, and panics on a difference that
/// `devkit/kube-sim/README.md` does not list (or a listed one that is gone).
/// `name` is the probe's name in that table (`area::probe`).
pub async fn differential(name: &str, probe: impl AsyncFn(&Cluster, &mut Outcome) -> Result<()>) {
    differential_on(name, async |ns: String| Cluster::real(&ns).await, probe).await
}

/// [`differential`] with the real side made by `real` (from the namespace;
/// `Ok(None)`: skipped, after its `SKIP:` line), e.g. a control plane of the
/// probe's own.
pub async fn differential_on(
    name: &str,
    real: impl AsyncFnOnce(String) -> Result<Option<Cluster>>,
    probe: impl AsyncFn(&Cluster, &mut Outcome) -> Result<()>,
) {
    let ns = namespace_for(name);
    let probe = &probe;
    let sim_side = async {
        let t = Instant::now();
        let mut outcome = Outcome::new();
        let error = match Cluster::sim(&ns).await {
            Ok(c) => probe(&c, &mut outcome).await.err(),
            Err(e) => Some(e.context("starting kube-sim")),
        };
        Ran {
            outcome,
            error,
            took: t.elapsed(),
        }
    };
    let real_side = async {
        let t = Instant::now();
        let mut outcome = Outcome::new();
        let error = match real(ns.clone()).await {
            Ok(None) => return None,
            Ok(Some(c)) => probe(&c, &mut outcome).await.err(),
            Err(e) => Some(e.context("the real control plane")),
        };
        Some(Ran {
            outcome,
            error,
            took: t.elapsed(),
        })
    };
    let (sim, real) = tokio::join!(sim_side, real_side);
    let rows = divergences::load().unwrap_or_else(|e| panic!("{e:#}"));
    let listed = divergences::of_probe(&rows, name);
    let (report, failures) = judge(name, &ns, &sim, real.as_ref(), &listed, &SIM_NAMES);
    println!("{report}");
    if !failures.is_empty() {
        panic!("probe {name}:\n{}", failures.join("\n"));
    }
}

pub(crate) fn judge(
    name: &str,
    ns: &str,
    sim: &Ran,
    real: Option<&Ran>,
    listed: &[&Divergence],
    names: &Names,
) -> (String, Vec<String>) {
    let Names {
        model,
        upstream,
        readme,
    } = names;
    let mut out = String::new();
    let mut failures = Vec::new();
    let _ = write!(
        out,
        "probe {name} (namespace {ns}): {model} {:.1} s",
        sim.took.as_secs_f64()
    );
    if let Some(e) = &sim.error {
        failures.push(format!("{model} side failed: {e:#}"));
    }
    let Some(real) = real else {
        let _ = writeln!(out, "; {upstream} side skipped");
        for (k, v) in sim.outcome.lines() {
            let _ = writeln!(out, "  {model}  {k} = {v}");
        }
        return (out, failures);
    };
    let _ = writeln!(out, ", {upstream} {:.1} s", real.took.as_secs_f64());
    if let Some(e) = &real.error {
        failures.push(format!("{upstream} side failed: {e:#}"));
    }
    let diffs = Outcome::compare(&sim.outcome, &real.outcome);
    let differs = |k: &str| diffs.iter().find(|d| d.key == k);
    for (k, v) in sim.outcome.lines() {
        match differs(k) {
            None => {
                let _ = writeln!(out, "  same      {k} = {v}");
            }
            Some(d) => show(&mut out, d, listed, names),
        }
    }
    for d in diffs.iter().filter(|d| d.sim.is_none()) {
        show(&mut out, d, listed, names);
    }
    if sim.error.is_none() && real.error.is_none() {
        for d in &diffs {
            if !listed.iter().any(|r| r.covers(&d.key)) {
                failures.push(format!(
                    "`{}` differs and {readme} does not list it:\n    {model}: {}\n    {upstream}: {}",
                    d.key,
                    d.sim.as_deref().unwrap_or("(none)"),
                    d.real.as_deref().unwrap_or("(none)")
                ));
            }
        }
        for r in listed {
            if !r.varies && !diffs.iter().any(|d| r.covers(&d.key)) {
                failures.push(format!(
                    "`{}` is listed as a divergence in {readme} but both clusters agree now: remove the row",
                    r.line
                ));
            }
        }
    }
    (out, failures)
}

fn show(out: &mut String, d: &Difference, listed: &[&Divergence], names: &Names) {
    let tag = match listed.iter().find(|r| r.covers(&d.key)) {
        Some(_) => "LISTED   ",
        None => "DIFFERENT",
    };
    let _ = writeln!(
        out,
        "  {tag} {}\n      {}: {}\n      {}: {}",
        d.key,
        names.model,
        d.sim.as_deref().unwrap_or("(none)"),
        names.upstream,
        d.real.as_deref().unwrap_or("(none)")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(lines: &[(&str, &str)]) -> Ran {
        let mut outcome = Outcome::new();
        for (k, v) in lines {
            outcome.put(*k, *v);
        }
        Ran {
            outcome,
            error: None,
            took: Duration::ZERO,
        }
    }

    fn row(line: &str) -> Divergence {
        Divergence {
            probe: "a::b".into(),
            line: line.into(),
            upstream: "u".into(),
            kube_sim: "k".into(),
            why: "w".into(),
            varies: false,
        }
    }

    #[test]
    fn namespaces_are_dns_labels() {
        let ns = namespace_for("validation::pod_bad_ENV_name");
        assert!(ns.starts_with("conf-validation-pod-bad-env-name-"), "{ns}");
        assert!(ns.len() <= 63);
        assert!(namespace_for(&"x".repeat(100)).len() <= 63);
    }

    #[test]
    fn unlisted_differences_and_stale_rows_fail() {
        let sim = ran(&[("code", "422"), ("message", "a")]);
        let real = ran(&[("code", "422"), ("message", "b")]);
        let (_, f) = judge("a::b", "ns", &sim, Some(&real), &[], &SIM_NAMES);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("`message` differs"));
        let listed = row("message");
        let (report, f) = judge("a::b", "ns", &sim, Some(&real), &[&listed], &SIM_NAMES);
        assert!(f.is_empty(), "{f:?}");
        assert!(report.contains("LISTED"), "{report}");
        let (_, f) = judge(
            "a::b",
            "ns",
            &sim,
            Some(&sim_copy(&sim)),
            &[&listed],
            &SIM_NAMES,
        );
        assert!(f[0].contains("remove the row"), "{f:?}");
        // A row of a field upstream answers differently from run to run may
        // agree.
        let varies = Divergence {
            varies: true,
            ..row("message")
        };
        let (_, f) = judge(
            "a::b",
            "ns",
            &sim,
            Some(&sim_copy(&sim)),
            &[&varies],
            &SIM_NAMES,
        );
        assert!(f.is_empty(), "{f:?}");
        // skipped real side: nothing to compare
        let (report, f) = judge("a::b", "ns", &sim, None, &[&listed], &SIM_NAMES);
        assert!(f.is_empty() && report.contains("real side skipped"));
    }

    fn sim_copy(r: &Ran) -> Ran {
        Ran {
            outcome: r.outcome.clone(),
            error: None,
            took: r.took,
        }
    }
}
