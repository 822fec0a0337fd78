//! Knative's conformance suites against Lampyr: reading a suite's `go test -v` output,
//! joining it with the documented reasons for what does not pass
//! (`docs/conformance-reasons.yaml`), and rendering the table `docs/conformance.md` holds.
//! Pure functions; `lampyr-cli/tests/conformance.rs` runs the suites.

use std::collections::BTreeMap;

use serde::Deserialize;

/// How one test ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// `--- PASS`.
    Pass,
    /// `--- FAIL`.
    Fail,
    /// `--- SKIP`.
    Skip,
    /// Started (`=== RUN`) but never reported: the binary panicked or timed out.
    Unfinished,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
            Outcome::Unfinished => "did not finish",
        }
    }
}

/// Every test (and subtest, `Parent/child`) a suite's verbose output names, with its outcome.
pub fn parse_verbose(output: &str) -> BTreeMap<String, Outcome> {
    let mut results = BTreeMap::new();
    for line in output.lines() {
        let line = line.trim_start();
        if let Some(name) = line.strip_prefix("=== RUN").map(str::trim) {
            results.entry(name.to_string()).or_insert(Outcome::Unfinished);
            continue;
        }
        let ended = [("--- PASS:", Outcome::Pass), ("--- FAIL:", Outcome::Fail), ("--- SKIP:", Outcome::Skip)]
            .into_iter()
            .find_map(|(prefix, outcome)| line.strip_prefix(prefix).map(|rest| (rest, outcome)));
        if let Some((rest, outcome)) = ended
            && let Some(name) = rest.split_whitespace().next()
        {
            results.insert(name.to_string(), outcome);
        }
    }
    results
}

/// Why a test does not pass on Lampyr, as `docs/conformance-reasons.yaml` says.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    /// `limit` (a documented subset limit: by design of fibers), `missing` (a Lampyr
    /// feature not built yet: a plan says when), `vacuous` (passes, but checks nothing
    /// on a fiber) or `environment` (this machine).
    pub kind: String,
    /// The outcome the reason explains (`fail`, `skip` or `pass` for `vacuous`).
    pub outcome: String,
    /// The explanation (and, for `missing`, the plan).
    pub why: String,
    /// Whether sub-tests without a reason of their own take this one (`true` by default);
    /// `false` for a parent whose result only follows one sub-test's.
    #[serde(default = "inherit_by_default", rename = "sub-tests-inherit")]
    pub sub_tests_inherit: bool,
}

fn inherit_by_default() -> bool {
    true
}

/// The outcome of a reason for a test whose result depends on how loaded the machine is.
pub const EITHER: &str = "pass or fail";

impl Reason {
    /// Whether this reason explains `outcome`.
    fn explains(&self, outcome: Outcome) -> bool {
        self.outcome == outcome.word() || (self.outcome == EITHER && matches!(outcome, Outcome::Pass | Outcome::Fail))
    }

    /// The result the table shows for a test this reason explains and that ended `outcome`.
    fn result(&self, outcome: Outcome) -> String {
        let word = if self.outcome == EITHER { EITHER } else { outcome.word() };
        format!("{word} ({})", self.kind)
    }
}

/// The reasons file: suite name → test name → reason.
pub type Reasons = BTreeMap<String, BTreeMap<String, Reason>>;

/// One suite's results, with its name and heading.
pub struct SuiteResults {
    /// Key in the reasons file (`serving-api`, …).
    pub name: String,
    /// Heading of its table.
    pub title: String,
    /// Outcomes by test.
    pub results: BTreeMap<String, Outcome>,
    /// What the totals count: the top-level tests when `None`; else these tests (a suite
    /// that is one test of many sub-tests, like the KIngress suite, names them).
    pub units: Option<Vec<String>>,
}

/// The reason explaining `test`'s `outcome`: its own, else (for a failure or skip) the
/// nearest ancestor's (`Parent/child` inherits `Parent`'s) that explains the same outcome
/// (for a pass, only an ancestor's whose result depends on load).
/// The flag says whether it was inherited.
fn reason_for<'a>(explained: &'a BTreeMap<String, Reason>, test: &str, outcome: Outcome) -> Option<(&'a Reason, bool)> {
    if let Some(own) = explained.get(test) {
        return Some((own, false));
    }
    let mut path = test;
    while let Some((parent, _)) = path.rsplit_once('/') {
        // A pass inherits only a result that depends on load; a pass under a failing parent is a plain pass.
        let inherits = |r: &&Reason| r.sub_tests_inherit && r.explains(outcome) && (outcome != Outcome::Pass || r.outcome == EITHER);
        if let Some(reason) = explained.get(parent).filter(inherits) {
            return Some((reason, true));
        }
        path = parent;
    }
    None
}

/// What does not agree between results and reasons: a test that fails without a reason,
/// or whose reason names another outcome (a fixed test keeps a stale reason).
pub fn disagreements(suite: &SuiteResults, reasons: &Reasons) -> Vec<String> {
    let empty = BTreeMap::new();
    let explained = reasons.get(&suite.name).unwrap_or(&empty);
    let mut problems = Vec::new();
    for (test, outcome) in &suite.results {
        match (reason_for(explained, test, *outcome).map(|(r, _)| r), outcome) {
            (None, Outcome::Pass) => {}
            (None, other) => {
                problems.push(format!("{}: {test}: {} with no reason in docs/conformance-reasons.yaml", suite.name, other.word()))
            }
            (Some(reason), other) if !reason.explains(*other) => problems.push(format!(
                "{}: {test}: {}, but docs/conformance-reasons.yaml explains `{}` ({})",
                suite.name,
                other.word(),
                reason.outcome,
                reason.kind
            )),
            (Some(_), _) => {}
        }
    }
    for test in explained.keys().filter(|t| !suite.results.contains_key(*t)) {
        problems.push(format!("{}: {test}: has a reason but did not run", suite.name));
    }
    problems
}

/// The markdown table of one suite: every test and subtest with its outcome and reason,
/// then totals over top-level tests.
pub fn render(suite: &SuiteResults, reasons: &Reasons) -> String {
    let empty = BTreeMap::new();
    let explained = reasons.get(&suite.name).unwrap_or(&empty);
    let mut out = format!("### {}\n\n| test | result | why |\n|---|---|---|\n", suite.title);
    for (test, outcome) in &suite.results {
        let (result, why) = match reason_for(explained, test, *outcome) {
            Some((reason, false)) => (reason.result(*outcome), reason.why.trim().replace('\n', " ")),
            Some((reason, true)) => (reason.result(*outcome), "as above".to_string()),
            None => (outcome.word().to_string(), String::new()),
        };
        let name = match test.split_once('/') {
            Some((_, sub)) => format!("↳ {sub}"),
            None => format!("`{test}`"),
        };
        out.push_str(&format!("| {name} | {result} | {why} |\n"));
    }
    let counted = |t: &str| match &suite.units {
        Some(units) => units.iter().any(|u| u == t),
        None => !t.contains('/'),
    };
    let either = |t: &str| explained.get(t).is_some_and(|r| r.outcome == EITHER);
    let top: Vec<Outcome> = suite.results.iter().filter(|(t, _)| counted(t) && !either(t)).map(|(_, o)| *o).collect();
    let count = |o: Outcome| top.iter().filter(|x| **x == o).count();
    let by_timing = suite.results.keys().filter(|t| counted(t) && either(t)).count();
    let vacuous = suite
        .results
        .iter()
        .filter(|(t, o)| counted(t) && **o == Outcome::Pass && explained.get(*t).is_some_and(|r| r.kind == "vacuous"))
        .count();
    let what = if suite.units.is_some() { "sub-tests" } else { "tests" };
    out.push_str(&format!(
        "\n**{} {what}: {} pass ({} of them vacuously), {} fail, {} skip, {} did not finish{}.**\n",
        top.len() + by_timing,
        count(Outcome::Pass),
        vacuous,
        count(Outcome::Fail),
        count(Outcome::Skip),
        count(Outcome::Unfinished),
        if by_timing == 0 { String::new() } else { format!(", {by_timing} {EITHER} by timing") }
    ));
    out
}

/// Marks around the generated part of `docs/conformance.md`.
pub const BEGIN: &str = "<!-- BEGIN GENERATED: lampyr-cli/tests/conformance.rs -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- END GENERATED -->";

/// `doc` with its generated part replaced by `generated`; `None` when the marks are missing.
pub fn splice(doc: &str, generated: &str) -> Option<String> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = doc[start..].find(END)? + start;
    Some(format!("{}\n\n{}\n{}", &doc[..start], generated.trim_end(), &doc[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== RUN   TestB/one
=== RUN   TestB/two
    util.go:12: something
--- PASS: TestA (1.00s)
--- FAIL: TestB (2.00s)
    --- PASS: TestB/one (0.50s)
    --- FAIL: TestB/two (0.50s)
=== RUN   TestC
--- SKIP: TestC (0.00s)
=== RUN   TestD
panic: runtime error
";

    fn reason(kind: &str, outcome: &str) -> Reason {
        Reason { kind: kind.into(), outcome: outcome.into(), why: "because".into(), sub_tests_inherit: true }
    }

    #[test]
    fn verbose_output_gives_every_test_and_subtest() {
        let results = parse_verbose(OUTPUT);
        let expected = [
            ("TestA", Outcome::Pass),
            ("TestB", Outcome::Fail),
            ("TestB/one", Outcome::Pass),
            ("TestB/two", Outcome::Fail),
            ("TestC", Outcome::Skip),
            ("TestD", Outcome::Unfinished),
        ];
        assert_eq!(results, expected.iter().map(|(t, o)| (t.to_string(), *o)).collect());
    }

    #[test]
    fn unexplained_and_stale_reasons_are_disagreements_and_the_table_counts_top_level_tests() {
        let mut suite = SuiteResults { name: "s".into(), title: "Suite".into(), results: parse_verbose(OUTPUT), units: None };
        let mut reasons = Reasons::new();
        let s = reasons.entry("s".into()).or_default();
        s.insert("TestB".into(), reason("missing", "fail"));
        s.insert("TestC".into(), reason("limit", "fail"));
        s.insert("TestA".into(), reason("vacuous", "pass"));
        s.insert("TestGone".into(), reason("limit", "fail"));
        let problems = disagreements(&suite, &reasons);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("TestC: skip, but") && problems[1].contains("TestD: did not finish with no reason"), "{problems:?}");
        assert!(problems[2].contains("TestGone: has a reason but did not run"), "{problems:?}");
        let table = render(&suite, &reasons);
        assert!(
            table.contains("| `TestB` | fail (missing) | because |") && table.contains("| ↳ two | fail (missing) | as above |"),
            "{table}"
        );
        assert!(table.contains("| ↳ one | pass |  |"), "a passing child inherits nothing: {table}");
        assert!(table.contains("**4 tests: 1 pass (1 of them vacuously), 1 fail, 1 skip, 1 did not finish.**"), "{table}");
        // A result that depends on the machine's load is shown, and counted, as either.
        let either = Reason { outcome: EITHER.into(), ..reason("limit", "fail") };
        reasons.entry("s".into()).or_default().insert("TestB".into(), either.clone());
        let problems = disagreements(&suite, &reasons);
        assert!(!problems.iter().any(|p| p.contains("TestB")), "a pass and a fail are both explained: {problems:?}");
        let table = render(&suite, &reasons);
        assert!(
            table.contains("| `TestB` | pass or fail (limit) | because |") && table.contains("| ↳ one | pass or fail (limit) | as above |"),
            "{table}"
        );
        assert!(table.contains("| ↳ two | pass or fail (limit) | as above |"), "{table}");
        assert!(
            table.contains("**4 tests: 1 pass (1 of them vacuously), 0 fail, 1 skip, 1 did not finish, 1 pass or fail by timing.**"),
            "{table}"
        );
        // A parent whose result follows one sub-test's keeps its reason to itself.
        reasons.entry("s".into()).or_default().insert("TestB".into(), Reason { sub_tests_inherit: false, ..either });
        let table = render(&suite, &reasons);
        assert!(table.contains("| `TestB` | pass or fail (limit) | because |") && table.contains("| ↳ one | pass |  |"), "{table}");
        assert!(
            disagreements(&suite, &reasons).iter().any(|p| p.contains("TestB/two: fail with no reason")),
            "its failing sub-test needs its own"
        );
        suite.units = Some(vec!["TestB/one".into(), "TestB/two".into()]);
        assert!(render(&suite, &reasons).contains("**2 sub-tests: 1 pass (0 of them vacuously), 1 fail, 0 skip, 0 did not finish.**"));
    }

    #[test]
    fn the_reasons_file_parses_and_every_reason_has_a_known_kind_and_outcome() {
        let path = crate::repo_root().join("docs/conformance-reasons.yaml");
        let reasons: Reasons =
            serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap_or_default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(["serving-api", "serving-runtime", "kingress"].iter().all(|s| reasons.contains_key(*s)), "{:?}", reasons.keys());
        for (test, reason) in reasons.values().flatten() {
            assert!(["limit", "missing", "vacuous", "environment"].contains(&reason.kind.as_str()), "{test}: kind {}", reason.kind);
            assert!(["pass", "fail", "skip", EITHER].contains(&reason.outcome.as_str()), "{test}: outcome {}", reason.outcome);
            assert_eq!(reason.kind == "vacuous", reason.outcome == "pass", "{test}: only a vacuous reason explains a pass");
            assert!(!reason.why.trim().is_empty(), "{test}: says why");
        }
    }

    #[test]
    fn the_generated_part_is_replaced_between_its_marks() {
        let doc = format!("intro\n{BEGIN}\nold\n{END}\noutro\n");
        assert_eq!(splice(&doc, "new\n").expect("markers found"), format!("intro\n{BEGIN}\n\nnew\n{END}\noutro\n"));
        assert_eq!(splice("no marks", "x"), None);
    }
}
