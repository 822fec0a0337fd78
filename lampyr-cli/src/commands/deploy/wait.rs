//! Waiting for an applied Knative Service to become Ready, reporting each
//! change of its status on the way.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::DeployError;
use crate::commands::cluster::ClusterError;
use crate::commands::cluster::kubectl::Kubectl;
use crate::ui::Ui;

/// How often the Service is read.
const POLL: Duration = Duration::from_millis(500);

/// What a Ready Service reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyService {
    /// `status.url`.
    pub url: String,
    /// `status.latestReadyRevisionName`.
    pub revision: String,
}

/// Where a Service's status stands, for generation `generation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Ready: serving at the URL.
    Ready(ReadyService),
    /// The latest Revision failed (ConfigurationsReady=False): waiting more will not help.
    Failed(String),
    /// Not yet: what the status says now.
    Pending(String),
}

/// Reads where `status` stands for `generation` (a pure function of the observed object).
pub fn progress(service: &Value, generation: i64) -> Progress {
    let status = &service["status"];
    if status["observedGeneration"].as_i64().unwrap_or(0) < generation {
        return Progress::Pending("waiting for the Knative controller to observe the new generation".into());
    }
    let condition = |kind: &str| status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == kind)).cloned();
    let describe = |c: &Value| {
        let reason = c["reason"].as_str().unwrap_or_default();
        let message = c["message"].as_str().unwrap_or_default();
        match (reason.is_empty(), message.is_empty()) {
            (_, false) if !reason.is_empty() => format!("{reason}: {message}"),
            (_, false) => message.to_string(),
            (false, true) => reason.to_string(),
            (true, true) => "no reason given".to_string(),
        }
    };
    let Some(ready) = condition("Ready") else {
        return Progress::Pending("no Ready condition yet".into());
    };
    match ready["status"].as_str() {
        Some("True") => Progress::Ready(ReadyService {
            url: status["url"].as_str().unwrap_or_default().to_string(),
            revision: status["latestReadyRevisionName"].as_str().unwrap_or_default().to_string(),
        }),
        Some("False") if condition("ConfigurationsReady").is_some_and(|c| c["status"] == "False") => Progress::Failed(describe(&ready)),
        _ => Progress::Pending(describe(&ready)),
    }
}

/// Polls Service `namespace/name` until Ready at `generation`, failed, or `timeout` passed.
pub fn until_ready(
    kubectl: &Kubectl,
    namespace: &str,
    name: &str,
    generation: i64,
    timeout: Duration,
    ui: &mut Ui,
) -> Result<ReadyService, DeployError> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let service = kubectl.get_json(&format!("services.serving.knative.dev/{name}"), Some(namespace)).map_err(ClusterError::from)?;
        let now = match service.as_ref().map(|s| progress(s, generation)) {
            None => Progress::Pending("the Service does not exist (deleted meanwhile?)".into()),
            Some(Progress::Ready(ready)) if !ready.url.is_empty() => return Ok(ready),
            Some(Progress::Ready(_)) => Progress::Pending("Ready, waiting for the Route to publish the URL".into()),
            Some(Progress::Failed(why)) => {
                return Err(DeployError::Failed { service: format!("{namespace}/{name}"), why });
            }
            Some(pending) => pending,
        };
        if let Progress::Pending(what) = now
            && what != last
        {
            ui.step(format!("  {namespace}/{name}: {what}"));
            last = what;
        }
        if started.elapsed() >= timeout {
            return Err(DeployError::Timeout { service: format!("{namespace}/{name}"), waited: timeout, last });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(generation: i64, conditions: Value) -> Value {
        json!({ "status": { "observedGeneration": generation, "conditions": conditions,
            "url": "http://hello.default.example.com", "latestReadyRevisionName": "hello-00001" } })
    }

    #[test]
    fn ready_only_at_the_applied_generation() {
        let ready = json!([{ "type": "Ready", "status": "True" }]);
        assert!(matches!(progress(&service(1, ready.clone()), 2), Progress::Pending(_)));
        let expected = ReadyService { url: "http://hello.default.example.com".into(), revision: "hello-00001".into() };
        assert_eq!(progress(&service(2, ready), 2), Progress::Ready(expected));
    }

    #[test]
    fn a_failed_revision_fails_and_anything_else_waits() {
        let failed = json!([
            { "type": "Ready", "status": "False", "reason": "RevisionFailed", "message": "Revision \"hello-00001\" failed" },
            { "type": "ConfigurationsReady", "status": "False" },
        ]);
        assert_eq!(progress(&service(1, failed), 1), Progress::Failed("RevisionFailed: Revision \"hello-00001\" failed".into()));
        let route_pending = json!([
            { "type": "Ready", "status": "False", "reason": "RevisionMissing" },
            { "type": "ConfigurationsReady", "status": "Unknown" },
        ]);
        assert_eq!(progress(&service(1, route_pending), 1), Progress::Pending("RevisionMissing".into()));
        assert_eq!(progress(&service(1, json!([])), 1), Progress::Pending("no Ready condition yet".into()));
    }
}
