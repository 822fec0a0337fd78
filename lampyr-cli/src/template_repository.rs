//! Which repository an installation's fiberd templates go to: the rules of
//! `ly cluster install` over `zygoteRegistries` and `registryMirrors`
//! (`docs/ly-cluster.md`).

use std::collections::BTreeMap;

use lampyr_artifact::reference::Repository;

/// The repository path templates get inside a chosen registry.
pub const TEMPLATES_PATH: &str = "lampyr/fiberd-templates";

/// Registries that are never an installation's local registry, whatever their scheme.
const PUBLIC_REGISTRIES: [&str; 11] = [
    "docker.io",
    "index.docker.io",
    "registry-1.docker.io",
    "ghcr.io",
    "quay.io",
    "gcr.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "mcr.microsoft.com",
    "public.ecr.aws",
    "registry.gitlab.com",
];

/// A `registryMirrors` entry: the registry the cluster reaches, behind the key the host uses.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryMirror {
    /// The registry (`host[:port]`) as the cluster reaches it, e.g. `kind-registry:5000`.
    pub registry: String,
    /// Whether the registry speaks plain HTTP.
    #[serde(default)]
    pub plain_http: bool,
}

/// Where templates go: pushed by the host, pulled by grant Pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRepository {
    /// The repository as grant Pods reach it (`http://…` when plain HTTP).
    pub pull: String,
    /// The repository the host pushes to (`http://…` when plain HTTP).
    pub push: String,
    /// `zygoteRegistries` as the installation records it (as the GrantPolicy takes them: no scheme
    /// for TLS, `http://` for plain HTTP): the given list
    /// without `https://`, or the default this choice made.
    pub zygote_registries: Vec<String>,
}

/// Why no template repository could be chosen. Nothing has been changed yet.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateRepositoryError {
    /// A `zygoteRegistries` entry is not a repository.
    #[error(
        "zygoteRegistries entry {entry:?} is not a repository: {why}; write registry/path, e.g. myacr.azurecr.io/templates \
         (http:// in front for a plain-HTTP registry)"
    )]
    InvalidEntry {
        /// The entry as given.
        entry: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `registryMirrors` key or registry is not a registry.
    #[error("registryMirrors entry {key:?}: {why}")]
    InvalidMirror {
        /// The mirror's key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// `zygoteRegistries` admits the in-cluster targets of several local mirrors.
    #[error(
        "zygoteRegistries admits several local registry mirrors ({}); Lampyr cannot pick one: \
         list only the one templates should go to",
        .0.join(", ")
    )]
    SeveralMirrorsAdmitted(Vec<String>),
    /// No `zygoteRegistries` and not exactly one local mirror to default to.
    #[error(
        "no template repository: {found} local registry mirrors; set zygoteRegistries in --provider-config to an \
         anonymously pullable repository (e.g. myacr.azurecr.io/lampyr/fiberd-templates), or give exactly one \
         local registry mirror in registryMirrors"
    )]
    NoTemplateRegistry {
        /// How many local mirrors there were.
        found: usize,
    },
}

/// Whether `other` is `entry` or below it, reached the same way.
fn admits(entry: &Repository, other: &Repository) -> bool {
    entry.plain_http == other.plain_http && entry.contains(other)
}

/// Parses a `zygoteRegistries` entry; `https://` is the default and dropped.
fn parse_entry(entry: &str) -> Result<Repository, TemplateRepositoryError> {
    let invalid = |why: &str| TemplateRepositoryError::InvalidEntry { entry: entry.to_string(), why: why.to_string() };
    let (plain_http, rest) = match (entry.strip_prefix("http://"), entry.strip_prefix("https://")) {
        (Some(rest), _) => (true, rest),
        (_, Some(rest)) => (false, rest),
        _ if entry.contains("://") => return Err(invalid("only http:// and https:// are schemes a registry speaks")),
        _ => (false, entry),
    };
    let rest = rest.trim_end_matches('/');
    let (registry, path) = rest.split_once('/').ok_or_else(|| invalid("it has no path after the registry"))?;
    check_registry(registry).map_err(|why| invalid(&why))?;
    if path.contains('@') {
        return Err(invalid("it has a digest; a repository has none"));
    }
    if path.contains(':') {
        return Err(invalid("it has a tag; a repository has none"));
    }
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
    };
    if !path.split('/').all(component_ok) {
        return Err(invalid("the path must be lowercase letters, digits and . _ - between slashes"));
    }
    Ok(Repository { plain_http, registry: registry.to_string(), path: path.to_string() })
}

/// A registry is `localhost`, or a host with a dot or a port (else it would be a Docker Hub path).
fn check_registry(registry: &str) -> Result<(), String> {
    let host = host_of(registry);
    if registry.is_empty() || registry.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(format!("{registry:?} is not a registry host"));
    }
    if host == "localhost" || registry.contains('.') || registry.contains(':') {
        Ok(())
    } else {
        Err(format!("the registry {registry:?} must be localhost or have a dot or a port"))
    }
}

/// `host` of `host[:port]` (and of `[::1]:port`).
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    if registry.matches(':').count() > 1 {
        return registry; // a bare IPv6 address
    }
    registry.split(':').next().unwrap_or(registry)
}

/// Whether the mirror behind `key` is a local registry: its key is a loopback
/// name, or it speaks plain HTTP and its key is no public registry.
fn is_local_mirror(key: &str, mirror: &RegistryMirror) -> bool {
    let host = host_of(key);
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "::1");
    loopback || (mirror.plain_http && !PUBLIC_REGISTRIES.contains(&host))
}

/// A local mirror: the host's key and the cluster's target.
struct LocalMirror<'a> {
    key: &'a str,
    mirror: &'a RegistryMirror,
}

impl LocalMirror<'_> {
    /// `path` in the mirror as the cluster reaches it.
    fn target(&self, path: &str) -> Repository {
        Repository { plain_http: self.mirror.plain_http, registry: self.mirror.registry.clone(), path: path.to_string() }
    }

    /// `path` in the mirror as the host reaches it.
    fn through_key(&self, path: &str) -> Repository {
        Repository { plain_http: self.mirror.plain_http, registry: self.key.to_string(), path: path.to_string() }
    }
}

/// Chooses the template repository from the platform settings' `zygoteRegistries`
/// (`None` when not given) and `registryMirrors` (key → mirror). Checks every
/// entry first; an error means the install must stop before changing anything.
pub fn choose(
    zygote_registries: Option<&[String]>,
    registry_mirrors: &BTreeMap<String, RegistryMirror>,
) -> Result<TemplateRepository, TemplateRepositoryError> {
    let entries = zygote_registries.map(|list| list.iter().map(|e| parse_entry(e)).collect::<Result<Vec<_>, _>>()).transpose()?;
    for (key, mirror) in registry_mirrors {
        let invalid = |why: String| TemplateRepositoryError::InvalidMirror { key: key.clone(), why };
        check_registry(key).map_err(invalid)?;
        check_registry(&mirror.registry).map_err(|why| TemplateRepositoryError::InvalidMirror { key: key.clone(), why })?;
    }
    let local: Vec<LocalMirror<'_>> = registry_mirrors
        .iter()
        .filter(|(key, mirror)| is_local_mirror(key, mirror))
        .map(|(key, mirror)| LocalMirror { key, mirror })
        .collect();
    match entries {
        Some(entries) if !entries.is_empty() => choose_from_entries(&entries, &local),
        _ => match local.as_slice() {
            [only] => {
                let pull = only.target(TEMPLATES_PATH);
                Ok(TemplateRepository {
                    push: only.through_key(TEMPLATES_PATH).to_string(),
                    zygote_registries: vec![pull.to_string()],
                    pull: pull.to_string(),
                })
            }
            _ => Err(TemplateRepositoryError::NoTemplateRegistry { found: local.len() }),
        },
    }
}

/// The rules when `zygoteRegistries` is given: an admitted local mirror's
/// default repository, else the first entry (pushed through a mirror whose
/// target it is on, if any).
fn choose_from_entries(entries: &[Repository], local: &[LocalMirror<'_>]) -> Result<TemplateRepository, TemplateRepositoryError> {
    let zygote_registries: Vec<String> = entries.iter().map(ToString::to_string).collect();
    let admitted: Vec<&LocalMirror<'_>> = local.iter().filter(|m| entries.iter().any(|e| admits(e, &m.target(TEMPLATES_PATH)))).collect();
    match admitted.as_slice() {
        [] => {}
        [only] => {
            return Ok(TemplateRepository {
                pull: only.target(TEMPLATES_PATH).to_string(),
                push: only.through_key(TEMPLATES_PATH).to_string(),
                zygote_registries,
            });
        }
        several => {
            return Err(TemplateRepositoryError::SeveralMirrorsAdmitted(several.iter().map(|m| m.key.to_string()).collect()));
        }
    }
    let first = &entries[0];
    let via_mirror = local.iter().find(|m| m.mirror.registry == first.registry && m.mirror.plain_http == first.plain_http);
    let push = match via_mirror {
        Some(mirror) => mirror.through_key(&first.path).to_string(),
        None => first.to_string(),
    };
    Ok(TemplateRepository { pull: first.to_string(), push, zygote_registries })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mirrors(list: &[(&str, &str, bool)]) -> BTreeMap<String, RegistryMirror> {
        list.iter()
            .map(|(key, registry, plain_http)| {
                (key.to_string(), RegistryMirror { registry: registry.to_string(), plain_http: *plain_http })
            })
            .collect()
    }

    fn given(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| s.to_string()).collect())
    }

    fn chosen(pull: &str, push: &str, zygote: &[&str]) -> Result<TemplateRepository, TemplateRepositoryError> {
        Ok(TemplateRepository { pull: pull.into(), push: push.into(), zygote_registries: zygote.iter().map(|s| s.to_string()).collect() })
    }

    const KIND: (&str, &str, bool) = ("localhost:5002", "kind-registry:5000", true);

    /// A rule: its name, `zygoteRegistries`, `registryMirrors`, and the outcome.
    type Case = (&'static str, Option<Vec<String>>, BTreeMap<String, RegistryMirror>, Result<TemplateRepository, TemplateRepositoryError>);

    #[test]
    fn every_rule_of_the_reference() {
        use TemplateRepositoryError as E;
        let cases: Vec<Case> = vec![
            (
                "zygoteRegistries admits the local mirror's target: lampyr/fiberd-templates there, pushed through its key",
                given(&["http://kind-registry:5000/lampyr"]),
                mirrors(&[KIND]),
                chosen(
                    "http://kind-registry:5000/lampyr/fiberd-templates",
                    "http://localhost:5002/lampyr/fiberd-templates",
                    &["http://kind-registry:5000/lampyr"],
                ),
            ),
            (
                "an admitting entry that is not first still picks the mirror",
                given(&["ghcr.io/team/templates", "http://kind-registry:5000/lampyr/fiberd-templates"]),
                mirrors(&[KIND]),
                chosen(
                    "http://kind-registry:5000/lampyr/fiberd-templates",
                    "http://localhost:5002/lampyr/fiberd-templates",
                    &["ghcr.io/team/templates", "http://kind-registry:5000/lampyr/fiberd-templates"],
                ),
            ),
            (
                "otherwise the first entry, pushed directly",
                given(&["myacr.azurecr.io/templates", "other.example.com/t"]),
                mirrors(&[KIND]),
                chosen("myacr.azurecr.io/templates", "myacr.azurecr.io/templates", &["myacr.azurecr.io/templates", "other.example.com/t"]),
            ),
            (
                "the first entry on a mirror's target at another path is pushed through the mirror's key",
                given(&["http://kind-registry:5000/team/zygotes"]),
                mirrors(&[KIND]),
                chosen(
                    "http://kind-registry:5000/team/zygotes",
                    "http://localhost:5002/team/zygotes",
                    &["http://kind-registry:5000/team/zygotes"],
                ),
            ),
            (
                "https:// is the default and stripped from every entry",
                given(&["https://myacr.azurecr.io/templates", "https://b.example.com/x"]),
                BTreeMap::new(),
                chosen("myacr.azurecr.io/templates", "myacr.azurecr.io/templates", &["myacr.azurecr.io/templates", "b.example.com/x"]),
            ),
            (
                "a plain-HTTP entry does not admit the same registry over TLS",
                given(&["http://registry.local:5000/lampyr"]),
                mirrors(&[("localhost:5000", "registry.local:5000", false)]),
                chosen("http://registry.local:5000/lampyr", "http://registry.local:5000/lampyr", &["http://registry.local:5000/lampyr"]),
            ),
            (
                "no zygoteRegistries, one local (loopback) mirror: its default repository, recorded as the cluster reaches it",
                None,
                mirrors(&[KIND]),
                chosen(
                    "http://kind-registry:5000/lampyr/fiberd-templates",
                    "http://localhost:5002/lampyr/fiberd-templates",
                    &["http://kind-registry:5000/lampyr/fiberd-templates"],
                ),
            ),
            (
                "a plain-HTTP mirror with a private key is local",
                None,
                mirrors(&[("registry.internal:5000", "registry.internal:5000", true), ("docker.io", "mirror.example.com", false)]),
                chosen(
                    "http://registry.internal:5000/lampyr/fiberd-templates",
                    "http://registry.internal:5000/lampyr/fiberd-templates",
                    &["http://registry.internal:5000/lampyr/fiberd-templates"],
                ),
            ),
            (
                "a plain-HTTP mirror of a public registry is not local",
                None,
                mirrors(&[("docker.io", "mirror.internal:5000", true)]),
                Err(E::NoTemplateRegistry { found: 0 }),
            ),
            (
                "no zygoteRegistries and no mirror (AKS, an existing cluster) is refused",
                None,
                BTreeMap::new(),
                Err(E::NoTemplateRegistry { found: 0 }),
            ),
            (
                "no zygoteRegistries and two local mirrors is refused",
                None,
                mirrors(&[KIND, ("127.0.0.1:5003", "other-registry:5000", true)]),
                Err(E::NoTemplateRegistry { found: 2 }),
            ),
            ("an empty list counts as not given", given(&[]), BTreeMap::new(), Err(E::NoTemplateRegistry { found: 0 })),
            (
                "several admitted mirrors are refused",
                given(&["http://kind-registry:5000/lampyr", "http://other-registry:5000/lampyr"]),
                mirrors(&[KIND, ("127.0.0.1:5003", "other-registry:5000", true)]),
                Err(E::SeveralMirrorsAdmitted(vec!["127.0.0.1:5003".into(), "localhost:5002".into()])),
            ),
        ];
        for (rule, zygote, mirrors, expected) in cases {
            assert_eq!(choose(zygote.as_deref(), &mirrors), expected, "{rule}");
        }
    }

    #[test]
    fn invalid_entries_are_refused_with_what_is_wrong() {
        for (entry, why) in [
            ("myacr.azurecr.io", "no path"),
            ("templates/lampyr", "dot or a port"),
            ("myacr.azurecr.io/Templates", "lowercase"),
            ("myacr.azurecr.io/templates:latest", "tag"),
            ("myacr.azurecr.io/templates@sha256:abcd", "digest"),
            ("oci://myacr.azurecr.io/templates", "schemes"),
            ("myacr.azurecr.io//templates", "lowercase"),
        ] {
            let error = choose(Some(&[entry.to_string()]), &BTreeMap::new()).unwrap_err();
            assert!(matches!(error, TemplateRepositoryError::InvalidEntry { .. }), "{entry}: {error}");
            assert!(error.to_string().contains(why), "{entry}: {error} should say {why:?}");
        }
        // An invalid entry is refused even when a valid one comes first.
        let error = choose(given(&["ok.example.com/t", "bad"]).as_deref(), &BTreeMap::new()).unwrap_err();
        assert!(error.to_string().contains("\"bad\""), "{error}");
        // localhost needs no dot or port.
        assert!(choose(given(&["localhost/t"]).as_deref(), &BTreeMap::new()).is_ok());
    }

    #[test]
    fn invalid_mirrors_are_refused() {
        let error = choose(None, &mirrors(&[("localhost:5002", "kindregistry", true)])).unwrap_err();
        assert!(matches!(error, TemplateRepositoryError::InvalidMirror { .. }), "{error}");
        assert!(error.to_string().contains("dot or a port"), "{error}");
    }

    #[test]
    fn loopback_keys_are_local_in_every_spelling() {
        for key in ["localhost:5000", "127.0.0.1:5000", "[::1]:5000", "localhost"] {
            assert!(is_local_mirror(key, &RegistryMirror { registry: "r.internal:5000".into(), plain_http: false }), "{key}");
        }
        assert!(!is_local_mirror("registry.internal:5000", &RegistryMirror { registry: "r.internal:5000".into(), plain_http: false }));
    }
}
