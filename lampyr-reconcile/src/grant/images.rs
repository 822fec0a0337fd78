//! GrantPolicy enforcement: which image repositories grant Pods may run, and
//! which repositories they may pull fiberd templates from.

use lampyr_api::{CapacityGrantSpec, GrantPolicy};

/// A grant image whose repository no GrantPolicy allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field} {image}: repository {repository} is not allowed by any GrantPolicy ({allowed}); \
     add it to a GrantPolicy's spec.allowedRepositories or use an allowed image"
)]
pub struct ImageRefused {
    /// `spec.grantImage` or `spec.helperImage`.
    pub field: &'static str,
    /// The image as the grant names it.
    pub image: String,
    /// Its repository.
    pub repository: String,
    /// What the policies allow, for the message.
    pub allowed: String,
}

pub use lampyr_api::fiber::repository_of;

/// Every GrantPolicy's `zygoteRegistries`, each once, in policy order: the
/// repositories grant Pods may pull templates from (none listed: no restriction).
pub fn template_repositories(policies: &[GrantPolicy]) -> Vec<String> {
    let mut repositories: Vec<String> = Vec::new();
    for entry in policies.iter().flat_map(|p| &p.spec.zygote_registries) {
        if !repositories.contains(entry) {
            repositories.push(entry.clone());
        }
    }
    repositories
}

/// Every GrantPolicy's `registryCA`, each once, in policy order, as one PEM bundle: the
/// certificate authorities grant Pods trust for registries (none: only the system's).
pub fn registry_ca(policies: &[GrantPolicy]) -> Option<String> {
    let mut bundle: Vec<&str> = Vec::new();
    for pem in policies.iter().filter_map(|p| p.spec.registry_ca.as_deref()).map(str::trim).filter(|p| !p.is_empty()) {
        if !bundle.contains(&pem) {
            bundle.push(pem);
        }
    }
    (!bundle.is_empty()).then(|| bundle.join("\n") + "\n")
}

/// Checks the grant's images against every GrantPolicy: each must be in some
/// policy's `allowedRepositories`. With no policy at all, nothing is allowed.
pub fn check_images(spec: &CapacityGrantSpec, policies: &[GrantPolicy]) -> Result<(), ImageRefused> {
    let allowed: Vec<&str> = policies.iter().flat_map(|p| p.spec.allowed_repositories.iter().map(String::as_str)).collect();
    for (field, image) in [("spec.grantImage", &spec.grant_image), ("spec.helperImage", &spec.helper_image)] {
        let repository = repository_of(image);
        if !allowed.contains(&repository) {
            let allowed = if allowed.is_empty() { "no GrantPolicy exists".to_string() } else { format!("allowed: {}", allowed.join(", ")) };
            return Err(ImageRefused { field, image: image.clone(), repository: repository.to_string(), allowed });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lampyr_api::GrantPolicySpec;

    use super::*;

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn spec(grant: &str, helper: &str) -> CapacityGrantSpec {
        CapacityGrantSpec {
            fiber_slots: 1,
            memory_bytes: 1,
            instances: 1,
            placement: None,
            grant_image: grant.to_string(),
            helper_image: helper.to_string(),
        }
    }

    fn policy(repositories: &[&str]) -> GrantPolicy {
        GrantPolicy::new(
            "p",
            GrantPolicySpec { allowed_repositories: repositories.iter().map(|r| r.to_string()).collect(), ..GrantPolicySpec::default() },
        )
    }

    #[test]
    fn repositories_drop_digest_and_tag_but_keep_registry_ports() {
        for (image, repository) in [
            (format!("ghcr.io/team/fiberd@{DIGEST}"), "ghcr.io/team/fiberd"),
            (format!("localhost:5000/lampyr/fiberd@{DIGEST}"), "localhost:5000/lampyr/fiberd"),
            ("localhost:5000/lampyr/fiberd:v1".to_string(), "localhost:5000/lampyr/fiberd"),
            (format!("registry.local:5000/a/b:v2@{DIGEST}"), "registry.local:5000/a/b"),
            ("fiberd".to_string(), "fiberd"),
        ] {
            assert_eq!(repository_of(&image), repository, "{image}");
        }
    }

    #[test]
    fn both_images_must_be_allowed_by_some_policy() {
        let grant = format!("ghcr.io/team/fiberd@{DIGEST}");
        let helper = format!("ghcr.io/team/helper@{DIGEST}");
        let both = [policy(&["ghcr.io/team/fiberd"]), policy(&["ghcr.io/team/helper"])];
        assert_eq!(check_images(&spec(&grant, &helper), &both), Ok(()));

        let refused = check_images(&spec(&grant, &helper), &both[..1]).expect_err("helper not allowed");
        assert_eq!((refused.field, refused.repository.as_str()), ("spec.helperImage", "ghcr.io/team/helper"));
        assert!(refused.to_string().contains("allowed: ghcr.io/team/fiberd"), "{refused}");

        // A prefix is not a match: the repository must be listed exactly.
        let refused = check_images(&spec(&grant, &helper), &[policy(&["ghcr.io/team"])]).expect_err("prefix");
        assert_eq!(refused.field, "spec.grantImage");
    }

    #[test]
    fn without_any_policy_nothing_is_allowed() {
        let image = format!("ghcr.io/team/fiberd@{DIGEST}");
        let refused = check_images(&spec(&image, &image), &[]).expect_err("no policy");
        assert!(refused.to_string().contains("no GrantPolicy exists"), "{refused}");
    }

    #[test]
    fn the_policies_cas_make_one_bundle_each_once() {
        let policy =
            |ca: Option<&str>| GrantPolicy::new("p", GrantPolicySpec { registry_ca: ca.map(str::to_string), ..GrantPolicySpec::default() });
        assert_eq!(registry_ca(&[policy(None)]), None);
        let bundle = registry_ca(&[policy(Some("A\n")), policy(None), policy(Some("B")), policy(Some(" A "))]);
        assert_eq!(bundle.as_deref(), Some("A\nB\n"));
    }
}
