//! Reading the containers' `/metrics` (the Prometheus text format) and the
//! dispatcher's own view the dev stack shows from them: each lane's
//! in-flight count against its cap, the gate, and deaths, lost reports and
//! reaps.

use std::collections::BTreeMap;

/// One sample: a metric name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name as exposed (`..._total`, `..._bucket`, ...).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// The samples, in the order exposed.
    pub samples: Vec<Sample>,
}

/// Why a line of the text format could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}: {text:?}")]
pub struct ParseError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: &'static str,
    /// The line.
    pub text: String,
}

/// Reads the labels of `{a="x",b="y"}` (without the braces); `None` when malformed.
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        rest = after[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(labels)
}

impl Scrape {
    /// Parses the Prometheus text format: comments and blank lines are
    /// skipped, every other line is `name{labels} value`.
    pub fn parse(text: &str) -> Result<Scrape, ParseError> {
        let mut samples = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |why| ParseError {
                line: i + 1,
                why,
                text: line.to_owned(),
            };
            let (series, value) = line.rsplit_once(' ').ok_or_else(|| error("no value"))?;
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().map_err(|_| error("value is not a number"))?,
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let inner = rest
                        .strip_suffix('}')
                        .ok_or_else(|| error("unclosed labels"))?;
                    let labels = parse_labels(inner).ok_or_else(|| error("malformed labels"))?;
                    (name, labels)
                }
                None => (series, BTreeMap::new()),
            };
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        Ok(Scrape { samples })
    }

    /// The samples named `name` whose labels include every pair of `with`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
    }

    /// The value of the one sample named `name` with `with`, if any.
    pub fn value(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, with).next().map(|s| s.value)
    }

    /// The sum of the samples named `name` with `with` (0 when none).
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).fold(0.0, |sum, s| sum + s.value)
    }
}

/// One lane as the admitter reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneView {
    /// Live Jobs of the lane at its last tick.
    pub in_flight: f64,
    /// Its cap.
    pub cap: f64,
    /// Whether the admitter last read its gate as open.
    pub gate_open: bool,
}

/// The dispatcher's own view, from the three containers' metrics; a part
/// is `None` when its container could not be scraped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DispatcherView {
    /// The run and publish lanes (admitter).
    pub lanes: Option<[LaneView; 2]>,
    /// Death reports the backend accepted (lease-keeper).
    pub deaths: Option<f64>,
    /// Lost reports the backend accepted (lease-keeper).
    pub lost: Option<f64>,
    /// Sandbox pods reaped (reaper).
    pub reaped: Option<f64>,
}

impl DispatcherView {
    /// The view from each container's scrape (`None`: not scraped).
    pub fn read(
        admitter: Option<&Scrape>,
        lease_keeper: Option<&Scrape>,
        reaper: Option<&Scrape>,
    ) -> Self {
        let lane = |s: &Scrape, lane: &str| LaneView {
            in_flight: s
                .value("tcab_dispatcher_lane_in_flight", &[("lane", lane)])
                .unwrap_or(0.0),
            cap: s
                .value("tcab_dispatcher_lane_cap", &[("lane", lane)])
                .unwrap_or(0.0),
            gate_open: s.value("tcab_dispatcher_gate_open", &[("lane", lane)]) == Some(1.0),
        };
        DispatcherView {
            lanes: admitter.map(|s| [lane(s, "run"), lane(s, "publish")]),
            deaths: lease_keeper.map(|s| s.sum("tcab_dispatcher_death_reports_total", &[])),
            lost: lease_keeper.map(|s| s.sum("tcab_dispatcher_lost_reports_total", &[])),
            reaped: reaper.map(|s| s.sum("tcab_dispatcher_sandboxes_reaped_total", &[])),
        }
    }

    /// `run 3/8 (gate open), publish 0/8 (gate open), deaths 0, lost 0, reaped 0`;
    /// `?` for what could not be read.
    pub fn line(&self) -> String {
        let lanes = match &self.lanes {
            Some([run, publish]) => {
                let one = |name: &str, l: &LaneView| {
                    let gate = if l.gate_open { "open" } else { "closed" };
                    format!("{name} {}/{} (gate {gate})", l.in_flight, l.cap)
                };
                format!("{}, {}", one("run", run), one("publish", publish))
            }
            None => "lanes ?".to_owned(),
        };
        let count = |name: &str, v: Option<f64>| match v {
            Some(v) => format!("{name} {v}"),
            None => format!("{name} ?"),
        };
        format!(
            "{lanes}, {}, {}, {}",
            count("deaths", self.deaths),
            count("lost", self.lost),
            count("reaped", self.reaped)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP tcab_dispatcher_lane_in_flight Live Jobs.
# TYPE tcab_dispatcher_lane_in_flight gauge
tcab_dispatcher_lane_in_flight{lane="run"} 3
tcab_dispatcher_lane_in_flight{lane="publish"} 0
tcab_dispatcher_lane_cap{lane="run"} 8
tcab_dispatcher_lane_cap{lane="publish"} 4
tcab_dispatcher_gate_open{lane="run"} 1
tcab_dispatcher_gate_open{lane="publish"} 0
tcab_dispatcher_admissions_total{lane="run",outcome="created"} 12
tcab_dispatcher_build_info{version="0.1.0",revision="a \"quoted\" one",binary="tcab-admitter"} 1
tcab_dispatcher_tick_duration_seconds_bucket{loop="admit_run",le="+Inf"} 40
tcab_dispatcher_view_current 1
"#;

    #[test]
    fn the_text_format_is_read() {
        let s = Scrape::parse(TEXT).expect("parses");
        assert_eq!(s.samples.len(), 10);
        assert_eq!(
            s.value(
                "tcab_dispatcher_admissions_total",
                &[("lane", "run"), ("outcome", "created")]
            ),
            Some(12.0)
        );
        assert_eq!(s.value("tcab_dispatcher_view_current", &[]), Some(1.0));
        assert_eq!(
            s.value(
                "tcab_dispatcher_build_info",
                &[("revision", "a \"quoted\" one")]
            ),
            Some(1.0)
        );
        assert_eq!(s.sum("tcab_dispatcher_lane_in_flight", &[]), 3.0);
        assert_eq!(s.sum("tcab_dispatcher_death_reports_total", &[]), 0.0);
        for bad in ["x{lane=\"run\" 1", "x{lane=run} 1", "x one", "x"] {
            assert!(Scrape::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_status_line_shows_each_lane_against_its_cap_and_the_reports() {
        let admitter = Scrape::parse(TEXT).unwrap();
        let keeper = Scrape::parse(
            "tcab_dispatcher_death_reports_total{cause=\"oom_killed\"} 1\n\
             tcab_dispatcher_death_reports_total{cause=\"killed\"} 2\n\
             tcab_dispatcher_lost_reports_total{lane=\"run\"} 1\n",
        )
        .unwrap();
        let view = DispatcherView::read(Some(&admitter), Some(&keeper), None);
        assert_eq!(
            view.line(),
            "run 3/8 (gate open), publish 0/4 (gate closed), deaths 3, lost 1, reaped ?"
        );
        assert_eq!(
            DispatcherView::read(None, None, Some(&Scrape::default())).line(),
            "lanes ?, deaths ?, lost ?, reaped 0"
        );
    }
}
