//! `kubectl` against the selected kubeconfig and context, credentials unchanged.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The field manager of everything `ly` applies.
pub const FIELD_MANAGER: &str = "ly";

/// A kubectl invocation failed.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    /// kubectl could not be run.
    #[error("could not run kubectl ({source}); install kubectl and put it on PATH (or set LY_KUBECTL to it)")]
    Spawn {
        /// Why.
        source: std::io::Error,
    },
    /// kubectl ran and failed.
    #[error("kubectl {args} failed: {stderr}")]
    Failed {
        /// The arguments (without kubeconfig/context).
        args: String,
        /// What it said.
        stderr: String,
    },
}

impl KubectlError {
    /// Whether kubectl said the kind is unknown to the server (its CRD is not installed).
    pub fn unknown_kind(&self) -> bool {
        matches!(self, KubectlError::Failed { stderr, .. }
            if stderr.contains("no matches for kind") || stderr.contains("the server doesn't have a resource type"))
    }
}

/// kubectl with `--kubeconfig` and `--context` as the user gave them.
#[derive(Clone, Debug)]
pub struct Kubectl {
    program: PathBuf,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
}

impl Kubectl {
    /// kubectl from `LY_KUBECTL` or PATH, for `kubeconfig` (else KUBECONFIG/~/.kube/config) and `context` (else current).
    pub fn new(kubeconfig: Option<PathBuf>, context: Option<String>) -> Self {
        let program = std::env::var_os("LY_KUBECTL").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("kubectl"));
        Kubectl { program, kubeconfig, context }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        if let Some(kubeconfig) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        if let Some(context) = &self.context {
            command.arg("--context").arg(context);
        }
        command.args(args);
        command
    }

    /// Runs kubectl with `args`, `stdin` on its standard input; returns its stdout.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, KubectlError> {
        let mut command = self.command(args);
        command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| KubectlError::Spawn { source })?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).map_err(|source| KubectlError::Spawn { source })?;
        }
        let out = child.wait_with_output().map_err(|source| KubectlError::Spawn { source })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(KubectlError::Failed { args: args.join(" "), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
        }
    }

    /// Server-side applies `objects` (a YAML stream) as field manager `ly`, taking over conflicting fields.
    pub fn apply(&self, objects: &str) -> Result<String, KubectlError> {
        let manager = format!("--field-manager={FIELD_MANAGER}");
        self.run(&["apply", "--server-side", "--force-conflicts", &manager, "-f", "-"], Some(objects))
    }

    /// The object as JSON, or `None` when it does not exist (or its kind is unknown).
    pub fn get_json(&self, resource: &str, namespace: Option<&str>) -> Result<Option<serde_json::Value>, KubectlError> {
        let mut args = vec!["get", resource, "-o", "json", "--ignore-not-found"];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        match self.run(&args, None) {
            Ok(out) if out.trim().is_empty() => Ok(None),
            Ok(out) => Ok(serde_json::from_str(&out).ok()),
            Err(e) if e.unknown_kind() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
