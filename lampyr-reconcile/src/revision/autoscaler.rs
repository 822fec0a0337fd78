//! The cluster's autoscaler settings for the Fiber Revision reconciler: a
//! watch of `knative-serving/config-autoscaler` that keeps the settings in
//! effect (the ConfigMap's when valid, upstream's defaults when it does not
//! exist, the last valid ones while it is invalid), and what an invalid
//! ConfigMap produces: a log line, a Warning Event on the ConfigMap and the
//! `autoscaler_config_valid` gauge at 0.
//!
//! What to do with one observation of the ConfigMap is the pure
//! [`AutoscalerSettings::observe`]; [`watch()`] only performs its effects.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use lampyr_api::autoscaler::{AutoscalerConfig, InvalidConfig};
use tokio::sync::watch;

use super::children::FIELD_MANAGER;
use super::configmap;
use super::metrics::Metrics;

/// Reason of the Event on an invalid ConfigMap.
pub const REASON_INVALID: &str = "InvalidConfiguration";

/// What one observation of the ConfigMap changed.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// The settings in effect changed: every Revision is reconciled again.
    Changed,
    /// Valid, and the same settings as before.
    Unchanged,
    /// Invalid: the settings in effect stay. `first` when this content was not
    /// seen invalid just before (report it once, not at every resync).
    Invalid {
        /// Why.
        error: InvalidConfig,
        /// The first observation of this invalid content.
        first: bool,
    },
}

/// The settings in effect, shared by every reconcile.
pub struct AutoscalerSettings {
    current: watch::Sender<Arc<AutoscalerConfig>>,
    /// Whether the ConfigMap was read once (reconciles wait for it).
    synced: watch::Sender<bool>,
    /// The invalid content last seen, so each is reported once.
    last_invalid: Mutex<Option<BTreeMap<String, String>>>,
}

impl Default for AutoscalerSettings {
    fn default() -> Self {
        AutoscalerSettings {
            current: watch::Sender::new(Arc::new(AutoscalerConfig::default())),
            synced: watch::Sender::new(false),
            last_invalid: Mutex::new(None),
        }
    }
}

impl AutoscalerSettings {
    /// The settings in effect now.
    pub fn current(&self) -> Arc<AutoscalerConfig> {
        Arc::clone(&self.current.borrow())
    }

    /// Takes one observation of the ConfigMap's `data` (`None`: it does not
    /// exist, so upstream's defaults apply) and says what changed.
    pub fn observe(&self, data: Option<&BTreeMap<String, String>>) -> Observed {
        let empty = BTreeMap::new();
        let data = data.unwrap_or(&empty);
        let parsed = AutoscalerConfig::from_data(data);
        self.synced.send_replace(true);
        let mut last_invalid = self.last_invalid.lock().unwrap_or_else(PoisonError::into_inner);
        match parsed {
            Err(error) => {
                let first = last_invalid.as_ref() != Some(data);
                *last_invalid = Some(data.clone());
                Observed::Invalid { error, first }
            }
            Ok(config) => {
                *last_invalid = None;
                let changed = self.current.send_if_modified(|current| {
                    let differs = **current != config;
                    if differs {
                        *current = Arc::new(config);
                    }
                    differs
                });
                if changed { Observed::Changed } else { Observed::Unchanged }
            }
        }
    }

    /// Completes once the ConfigMap was read (whether valid or not).
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// Yields once per later change of the settings in effect.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        configmap::changes(&self.current)
    }
}

/// Watches the ConfigMap `namespace/name` until the stream ends, applying each
/// observation to `settings` and reporting invalid content.
pub async fn watch(client: Client, namespace: String, name: String, settings: Arc<AutoscalerSettings>, metrics: Metrics) {
    tracing::info!(configmap = %format!("{namespace}/{name}"), "watching the cluster's autoscaler settings");
    let mut observations = std::pin::pin!(configmap::observations(client.clone(), &namespace, &name, "the cluster's autoscaler settings"));
    while let Some(seen) = observations.next().await {
        let outcome = settings.observe(seen.as_ref().and_then(|cm| cm.data.as_ref()));
        report(&client, seen.as_ref(), &outcome, &settings, &metrics).await;
    }
}

/// Logs what an observation changed, sets the gauge, and publishes an Event
/// on an invalid ConfigMap (once per content).
async fn report(client: &Client, configmap: Option<&ConfigMap>, outcome: &Observed, settings: &AutoscalerSettings, metrics: &Metrics) {
    match outcome {
        Observed::Changed => {
            metrics.autoscaler_config_valid.set(1);
            let absent = if configmap.is_none() { " (the ConfigMap does not exist: upstream's defaults)" } else { "" };
            tracing::info!(settings = ?settings.current(), "autoscaler settings changed{absent}; reconciling every Revision");
        }
        Observed::Unchanged => {
            metrics.autoscaler_config_valid.set(1);
        }
        Observed::Invalid { error, first } => {
            metrics.autoscaler_config_valid.set(0);
            if !*first {
                return;
            }
            tracing::error!(%error, "config-autoscaler refused; the last valid autoscaler settings stay in effect");
            let Some(configmap) = configmap else { return };
            // A recorder per event: kube's recorder would fold a new message into the previous event.
            let recorder = Recorder::new(client.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: None });
            let event = Event {
                type_: EventType::Warning,
                reason: REASON_INVALID.into(),
                note: Some(event_note(error)),
                action: "ReadAutoscalerSettings".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &configmap.object_ref(&())).await {
                tracing::warn!(error = %e, "publishing the Event on config-autoscaler failed");
            }
        }
    }
}

/// The Event's note: the problems and what happens meanwhile, within the 1 kB an Event allows.
fn event_note(error: &InvalidConfig) -> String {
    configmap::fit_note(format!("{error}. lampyr-controller keeps the last valid autoscaler settings until this is fixed."))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn valid_settings_take_effect_and_invalid_ones_keep_the_last_valid() {
        let settings = AutoscalerSettings::default();
        assert_eq!(*settings.current(), AutoscalerConfig::default(), "upstream's defaults before any");
        let short = data(&[("scale-to-zero-grace-period", "5s")]);
        assert_eq!(settings.observe(Some(&short)), Observed::Changed);
        assert_eq!(settings.current().scale_to_zero_grace_period, Duration::from_secs(5));
        assert_eq!(settings.observe(Some(&short)), Observed::Unchanged, "a resync changes nothing");

        let bad = data(&[("scale-to-zero-grace-period", "0s")]);
        match settings.observe(Some(&bad)) {
            Observed::Invalid { error, first: true } => assert_eq!(error.problems[0].key, "scale-to-zero-grace-period"),
            other => panic!("{other:?}"),
        }
        assert_eq!(settings.current().scale_to_zero_grace_period, Duration::from_secs(5), "the last valid settings");
        assert!(matches!(settings.observe(Some(&bad)), Observed::Invalid { first: false, .. }), "reported once");
        let worse = data(&[("scale-to-zero-grace-period", "never")]);
        assert!(matches!(settings.observe(Some(&worse)), Observed::Invalid { first: true, .. }), "new content");

        // Fixed: its settings; deleted: upstream's defaults.
        assert_eq!(settings.observe(Some(&data(&[("enable-scale-to-zero", "false")]))), Observed::Changed);
        assert!(!settings.current().enable_scale_to_zero);
        assert_eq!(settings.observe(None), Observed::Changed);
        assert_eq!(*settings.current(), AutoscalerConfig::default());
        // Unknown keys (upstream's _example block) change nothing.
        assert_eq!(settings.observe(Some(&data(&[("_example", "# docs")]))), Observed::Unchanged);
    }

    #[tokio::test]
    async fn changes_yield_once_per_change_after_subscribing() {
        let settings = AutoscalerSettings::default();
        settings.observe(Some(&data(&[("max-scale-up-rate", "10")])));
        let mut changes = std::pin::pin!(settings.changes());
        settings.observe(Some(&data(&[("max-scale-up-rate", "10")])));
        settings.observe(Some(&data(&[("max-scale-up-rate", "20")])));
        assert_eq!(changes.next().await, Some(()));
        assert_eq!(changes.next().now_or_never(), None, "no change since");
        settings.synced().await;
    }

    #[test]
    fn the_event_note_fits_an_event() {
        let problems = (0..200)
            .map(|i| lampyr_api::autoscaler::ConfigProblem { key: "min-scale", value: format!("{i}"), reason: "é".repeat(5) })
            .collect();
        let note = event_note(&InvalidConfig { problems });
        assert!(note.len() <= 1000 && note.ends_with("..."), "{}", note.len());
        let one = event_note(&AutoscalerConfig::from_data(&data(&[("min-scale", "-1")])).unwrap_err());
        assert!(one.contains("min-scale: \"-1\" must be at least 0") && one.contains("last valid"), "{one}");
    }
}
