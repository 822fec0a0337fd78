//! The installation's image map: which digest-pinned snapshot artifact runs a
//! Revision that names only a container image (no `lampyr.dev/snapshot-artifact`
//! annotation), read from the ConfigMap `lampyr-system/image-artifacts` an
//! operator maintains. Each data key is one entry, its value a small YAML
//! document:
//!
//! ```yaml
//! helloworld: |
//!   image: ko.local/helloworld        # a repository (any tag), repo:tag, or repo@sha256:…
//!   artifact: registry.example/conformance/helloworld@sha256:…
//! ```
//!
//! Images are compared as the container runtime would name them (`helloworld` is
//! `docker.io/library/helloworld:latest`); an entry naming a tag or digest wins over
//! one naming the repository. An invalid entry is left out and reported (log,
//! Warning Event on the ConfigMap, `image_map_invalid_entries` gauge); the others
//! stay in effect. Parsing is the pure [`ImageMap::from_data`]; [`watch()`] performs
//! the effects.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use oci_spec::distribution::Reference;
use serde::Deserialize;
use tokio::sync::watch;

use super::artifact::{ArtifactProblem, parse_pinned};
use super::children::FIELD_MANAGER;
use super::configmap;
use super::metrics::Metrics;

/// Namespace of the image map's ConfigMap (Lampyr's own).
pub const CONFIG_MAP_NAMESPACE: &str = "lampyr-system";
/// Name of the image map's ConfigMap.
pub const CONFIG_MAP_NAME: &str = "image-artifacts";
/// Reason of the Event on a Revision whose artifact came from the image map.
pub const REASON_MAPPED: &str = "ImageMapped";
/// Reason of the Event on a ConfigMap with invalid entries.
pub const REASON_INVALID: &str = "InvalidImageMapping";

/// What an entry's `image` matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// Every tag and digest of `registry/repository`.
    Repository(String),
    /// Exactly this `registry/repository:tag` or `registry/repository@digest`.
    Exact(String),
}

/// One valid entry of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The ConfigMap data key that holds it.
    pub key: String,
    /// The image as the entry writes it.
    pub image: String,
    /// The artifact, canonical (`registry/repository@sha256:…`, no scheme).
    pub artifact: String,
    pattern: Pattern,
}

/// An entry that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("entry {key:?}: {reason}")]
pub struct EntryProblem {
    /// The ConfigMap data key.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The valid entries of the image map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMap {
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryDocument {
    image: String,
    artifact: String,
}

/// `registry/repository` and, when the text names one, `:tag` or `@digest`, as a runtime resolves it.
fn normalize(image: &str) -> Result<(String, Option<String>), String> {
    let image = image.trim();
    let parsed = Reference::from_str(image).map_err(|e| format!("{image:?} is not an image reference: {e}"))?;
    let repository = format!("{}/{}", parsed.registry(), parsed.repository());
    let named = lampyr_api::fiber::repository_of(image) != image;
    let exact = match (parsed.digest(), parsed.tag()) {
        (Some(digest), _) => Some(format!("{repository}@{digest}")),
        (None, Some(tag)) => Some(format!("{repository}:{tag}")),
        (None, None) => None,
    };
    Ok((repository, if named { exact } else { None }))
}

impl ImageMap {
    /// The map a ConfigMap's `data` describes, and the entries left out.
    pub fn from_data(data: &BTreeMap<String, String>) -> (ImageMap, Vec<EntryProblem>) {
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        for (key, value) in data {
            if key.starts_with('_') {
                continue; // `_example` and other notes, as upstream's ConfigMaps have.
            }
            match Self::entry(key, value) {
                Ok(entry) => entries.push(entry),
                Err(reason) => problems.push(EntryProblem { key: key.clone(), reason }),
            }
        }
        (ImageMap { entries }, problems)
    }

    fn entry(key: &str, value: &str) -> Result<Entry, String> {
        let doc: EntryDocument =
            serde_yaml::from_str(value).map_err(|e| format!("not a YAML mapping with `image` and `artifact` ({e})"))?;
        let (repository, exact) = normalize(&doc.image).map_err(|e| format!("image: {e}"))?;
        let artifact = match parse_pinned(&doc.artifact) {
            Ok(pinned) => pinned.canonical,
            Err(ArtifactProblem::BadReference { reason, .. }) => return Err(format!("artifact {:?}: {reason}", doc.artifact)),
            Err(other) => return Err(format!("artifact {:?}: {other}", doc.artifact)),
        };
        let pattern = match exact {
            Some(exact) => Pattern::Exact(exact),
            None => Pattern::Repository(repository),
        };
        Ok(Entry { key: key.to_string(), image: doc.image.trim().to_string(), artifact, pattern })
    }

    /// The entry for a container's `image`: one naming it exactly, else one naming its repository.
    pub fn lookup(&self, image: &str) -> Option<&Entry> {
        let (repository, exact) = normalize(image).ok()?;
        // A container image without tag or digest is `:latest`, as the runtime pulls it.
        let exact = exact.unwrap_or_else(|| format!("{repository}:latest"));
        self.entries
            .iter()
            .find(|e| e.pattern == Pattern::Exact(exact.clone()))
            .or_else(|| self.entries.iter().find(|e| e.pattern == Pattern::Repository(repository.clone())))
    }

    /// How many entries are in effect.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is in effect.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The image map in effect, shared by every reconcile.
pub struct ImageMapSettings {
    current: watch::Sender<Arc<ImageMap>>,
    synced: watch::Sender<bool>,
    /// The problems last reported, so each content is reported once.
    last_problems: Mutex<Vec<EntryProblem>>,
}

impl Default for ImageMapSettings {
    fn default() -> Self {
        ImageMapSettings {
            current: watch::Sender::new(Arc::default()),
            synced: watch::Sender::new(false),
            last_problems: Mutex::new(Vec::new()),
        }
    }
}

impl ImageMapSettings {
    /// The map in effect now.
    pub fn current(&self) -> Arc<ImageMap> {
        Arc::clone(&self.current.borrow())
    }

    /// Takes one observation of the ConfigMap's `data` (`None`: it does not exist, an
    /// empty map). Returns the entries left out and whether they differ from the last ones.
    pub fn observe(&self, data: Option<&BTreeMap<String, String>>) -> (Vec<EntryProblem>, bool) {
        let (map, problems) = ImageMap::from_data(data.unwrap_or(&BTreeMap::new()));
        self.current.send_if_modified(|current| {
            let differs = **current != map;
            if differs {
                *current = Arc::new(map);
            }
            differs
        });
        self.synced.send_replace(true);
        let mut last = self.last_problems.lock().unwrap_or_else(PoisonError::into_inner);
        let new = *last != problems;
        last.clone_from(&problems);
        (problems, new)
    }

    /// Completes once the ConfigMap was read (whether it exists or not).
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// Yields once per later change of the map in effect.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        configmap::changes(&self.current)
    }
}

/// Watches the ConfigMap `namespace/name` until the stream ends, applying each
/// observation to `settings` and reporting invalid entries.
pub async fn watch(client: Client, namespace: String, name: String, settings: Arc<ImageMapSettings>, metrics: Metrics) {
    tracing::info!(configmap = %format!("{namespace}/{name}"), "watching the image map");
    let mut seen = std::pin::pin!(configmap::observations(client.clone(), &namespace, &name, "the image map"));
    while let Some(configmap) = seen.next().await {
        let (problems, new) = settings.observe(configmap.as_ref().and_then(|cm| cm.data.as_ref()));
        let entries = settings.current().len();
        metrics.image_map_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        metrics.image_map_invalid_entries.set(i64::try_from(problems.len()).unwrap_or(i64::MAX));
        if !new {
            continue;
        }
        tracing::info!(entries, invalid = problems.len(), "image map read");
        if problems.is_empty() {
            continue;
        }
        let note = event_note(&problems);
        tracing::error!(problems = %note, "image map entries refused; the other entries stay in effect");
        let Some(configmap) = configmap else { continue };
        let recorder = Recorder::new(client.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: None });
        let event = Event {
            type_: EventType::Warning,
            reason: REASON_INVALID.into(),
            note: Some(note),
            action: "ReadImageMap".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &configmap.object_ref(&())).await {
            tracing::warn!(error = %e, "publishing the Event on the image map failed");
        }
    }
}

/// The audit text of a Revision whose container `image` took its artifact from `entry` of `map`.
pub fn audit(entry: &Entry, image: &str, map: &str) -> String {
    format!("{image} -> {} (image map {map}, entry {:?})", entry.artifact, entry.key)
}

/// Publishes a Normal Event `ImageMapped` on `revision` with the audit text.
pub async fn publish_mapped(client: &Client, revision: &lampyr_api::Revision, audit: &str) {
    let recorder = Recorder::new(client.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: None });
    let event = Event {
        type_: EventType::Normal,
        reason: REASON_MAPPED.into(),
        note: Some(configmap::fit_note(format!("container image {audit}"))),
        action: "ResolveImage".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &revision.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing the ImageMapped Event failed");
    }
}

/// The Event's note: every problem, within the 1 kB an Event allows.
fn event_note(problems: &[EntryProblem]) -> String {
    let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
    configmap::fit_note(format!("{}. These entries are ignored; the others stay in effect.", listed.join("; ")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn entry(image: &str, artifact: &str) -> String {
        format!("image: {image}\nartifact: {artifact}\n")
    }

    fn map(pairs: &[(&str, String)]) -> (ImageMap, Vec<EntryProblem>) {
        ImageMap::from_data(&pairs.iter().map(|(k, v)| ((*k).to_string(), v.clone())).collect())
    }

    #[test]
    fn images_match_as_the_runtime_names_them_and_exact_entries_win() {
        let (map, problems) = map(&[
            ("repo", entry("ko.local/helloworld", &format!("reg.example:5000/hw@{D}"))),
            ("tagged", entry("ko.local/helloworld:v2", &format!("http://reg.example:5000/hw2@{D}"))),
            ("hub", entry("busybox", &format!("reg.example/bb@{D}"))),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(map.len(), 3);
        assert_eq!(map.lookup("ko.local/helloworld:latest").unwrap().key, "repo");
        assert_eq!(map.lookup("ko.local/helloworld").unwrap().key, "repo");
        assert_eq!(map.lookup(&format!("ko.local/helloworld@{D}")).unwrap().key, "repo");
        let tagged = map.lookup("ko.local/helloworld:v2").unwrap();
        assert_eq!((tagged.key.as_str(), tagged.artifact.as_str()), ("tagged", format!("reg.example:5000/hw2@{D}").as_str()));
        // Docker Hub's spellings are one image.
        assert_eq!(map.lookup("docker.io/library/busybox:latest").unwrap().key, "hub");
        assert_eq!(map.lookup("index.docker.io/library/busybox").unwrap().key, "hub");
        assert_eq!(map.lookup("busybox:1.36").unwrap().key, "hub", "an entry without tag or digest names the repository");
        assert_eq!(map.lookup("ko.local/other"), None);
        assert_eq!(map.lookup("Not An Image"), None);
    }

    #[test]
    fn invalid_entries_are_reported_and_the_others_stay() {
        let (map, problems) = map(&[
            ("good", entry("ko.local/a", &format!("reg.example/a@{D}"))),
            ("tag", entry("ko.local/b", "reg.example/b:latest")),
            ("image", entry("ko.local/with space", &format!("reg.example/c@{D}"))),
            ("yaml", "just text".to_string()),
            ("extra", format!("image: x\nartifact: reg.example/x@{D}\nfoo: 1\n")),
            ("_example", "# notes".to_string()),
        ]);
        assert_eq!(map.len(), 1, "{map:?} {problems:?}");
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["extra", "image", "tag", "yaml"]);
        let tag = problems.iter().find(|p| p.key == "tag").unwrap().to_string();
        assert!(tag.contains("artifact") && tag.contains("must be pinned by digest"), "{tag}");
        let yaml = problems.iter().find(|p| p.key == "yaml").unwrap().to_string();
        assert!(yaml.contains("`image` and `artifact`"), "{yaml}");
        assert!(event_note(&problems).contains("ignored"), "{}", event_note(&problems));
    }

    #[test]
    fn observations_replace_the_map_and_report_new_problems_once() {
        let settings = ImageMapSettings::default();
        let good: BTreeMap<String, String> = [("a".to_string(), entry("ko.local/a", &format!("reg.example/a@{D}")))].into();
        assert_eq!(settings.observe(Some(&good)), (vec![], false));
        assert_eq!(settings.current().len(), 1);
        let mut bad = good.clone();
        bad.insert("b".into(), "nonsense".into());
        let (problems, new) = settings.observe(Some(&bad));
        assert!(new && problems.len() == 1);
        assert!(!settings.observe(Some(&bad)).1, "the same problems are reported once");
        assert_eq!(settings.current().len(), 1, "the valid entry stays");
        settings.observe(None);
        assert!(settings.current().is_empty(), "a deleted ConfigMap maps nothing");
    }
}
