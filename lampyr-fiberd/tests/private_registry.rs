//! fiberd pulling from a private registry (Debian's docker-registry over HTTPS with the
//! test's own CA, one htpasswd user), with the credentials a Kubernetes user already has:
//! a Home's pull Secrets (its Revision's imagePullSecrets) and its ServiceAccount's. A Home
//! without them, or with a wrong password, is refused with a message naming the registry,
//! also once the artifact sits in fiberd's cache from a Home that could read it.

mod support;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{LocalObjectReference, Secret, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use lampyr_api::HomeInstance;
use lampyr_artifact::credentials::Credentials;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryAccess, RegistryClient};
use lampyr_testenv::TestRegistry;
use lampyr_testenv::registry::docker_config;
use support::{Daemon, Env, hello_artifact, hello_policy, wait_entry};

const USER: &str = "puller";
const PASSWORD: &str = "pull-Pa55word";
const INSTANCE: &str = "grant-p-0";

fn loaded(e: Option<&HomeInstance>) -> bool {
    e.is_some_and(|e| e.loaded)
}

fn refused(e: Option<&HomeInstance>) -> bool {
    e.is_some_and(|e| !e.loaded && e.message.as_deref().is_some_and(|m| m.contains("refused")))
}

/// Creates pull Secret `name` (kubernetes.io/dockerconfigjson) logging in to `registry`.
async fn pull_secret(env: &Env, name: &str, registry: &str, password: &str) {
    let secret = Secret {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some([(".dockerconfigjson".to_string(), ByteString(docker_config(registry, USER, password)))].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(env.client.clone(), &env.ns).create(&PostParams::default(), &secret).await.expect("creating a pull Secret");
}

#[tokio::test(flavor = "multi_thread")]
async fn homes_pull_with_their_pull_secrets_and_a_cached_copy_is_not_given_to_homes_without_them() {
    let env = Env::new("fiberd-private").await;
    let (registry, ca) = TestRegistry::start_private(USER, PASSWORD);
    let host = registry.host();
    let hello = hello_artifact(1024 * 1024);
    let repo = Repository::parse(&format!("{host}/team/hello")).expect("an HTTPS repository");
    let access = RegistryAccess {
        credentials: Credentials::ConfigJson(std::sync::Arc::new(docker_config(&host, USER, PASSWORD))),
        ca_pem: Some(ca.clone().into_bytes()),
    };
    let pusher = RegistryClient::with_access(std::iter::empty::<String>(), access).expect("a client");
    let artifact = pusher.push(&hello.layout, &hello.digest, &repo, None).await.expect("pushing with the user's login").to_string();
    pull_secret(&env, "regcred", &host, PASSWORD).await;
    pull_secret(&env, "stale", &host, "not-the-password").await;
    let fiberd = Daemon::start_with(&env, INSTANCE, &["grant-p"], &registry, |config| {
        config.plain_http_registries.clear();
        config.registry_ca = Some(ca.into_bytes());
    })
    .await;
    let homes = env.homes();
    let create = async |name: &str, secrets: &[&str], account: Option<&str>| {
        env.create_home_with(name, "grant-p", &artifact, None, hello_policy(), |spec| {
            spec.image_pull_secrets = secrets.iter().map(|s| s.to_string()).collect();
            spec.service_account_name = account.map(str::to_string);
        })
        .await;
    };

    // No credentials: the registry refuses, and the message says which one and what to do.
    create("anonymous-00001", &[], None).await;
    let e = wait_entry(&homes, "anonymous-00001", INSTANCE, "refused", refused).await.expect("entry");
    let message = e.message.unwrap_or_default();
    assert!(message.contains(&host) && message.contains("imagePullSecrets"), "names the registry and the fix: {message}");

    // Its pull Secret lets a Home in; it serves.
    create("private-00001", &["missing", "regcred"], None).await;
    wait_entry(&homes, "private-00001", INSTANCE, "loaded", loaded).await.expect("entry");
    assert_eq!(fiberd.get(&env.ns, "private-00001").await, (200, "Hello Lampyr!\n".to_string()));

    // The artifact is cached now; still, no credentials or a wrong password get nothing.
    create("anonymous-00002", &[], None).await;
    wait_entry(&homes, "anonymous-00002", INSTANCE, "refused though cached", refused).await.expect("entry");
    create("stale-00001", &["stale"], None).await;
    wait_entry(&homes, "stale-00001", INSTANCE, "a wrong password refused", refused).await.expect("entry");
    assert_eq!(fiberd.get(&env.ns, "stale-00001").await.0, 404, "a refused Home is not routed");

    // A ServiceAccount's imagePullSecrets count, as for a Pod.
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some("builder".into()), ..ObjectMeta::default() },
        image_pull_secrets: Some(vec![LocalObjectReference { name: "regcred".into() }]),
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("creating the ServiceAccount");
    create("account-00001", &[], Some("builder")).await;
    wait_entry(&homes, "account-00001", INSTANCE, "loaded", loaded).await.expect("entry");
    assert_eq!(fiberd.get(&env.ns, "account-00001").await, (200, "Hello Lampyr!\n".to_string()));
    fiberd.stop().await;
}
