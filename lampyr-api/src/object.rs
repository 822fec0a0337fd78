//! What turns a `metadata` + `spec` (+ `status`) struct into a Kubernetes
//! object: [`kube_object!`].

/// Makes a struct with `metadata: ObjectMeta`, `spec` and, when `status` is
/// given, `status: Option<Status>` fields a Kubernetes object:
///
/// - inherent `KIND` (the struct's name), `GROUP`, `VERSION`, `API_VERSION`
///   and `PLURAL` constants;
/// - `Serialize`, writing `apiVersion` and `kind` first, then `metadata`,
///   `spec`, and `status` when it is `Some` (the struct's derived
///   `Deserialize` ignores `apiVersion` and `kind`);
/// - `kube::Resource` (static type information, `DynamicType = ()`), and
///   kube's `HasSpec` / `HasStatus`;
/// - `JsonSchema`, the object with `apiVersion`, `kind`, `metadata`, `spec`
///   and `status` properties.
macro_rules! kube_object {
    (
        $ty:ident, group $group:literal, version $version:literal, plural $plural:literal,
        scope $scope:ty, spec $spec:ty $(, status $status:ty)? $(,)?
    ) => {
        impl $ty {
            /// The object's `kind`.
            pub const KIND: &'static str = stringify!($ty);
            /// The object's API group.
            pub const GROUP: &'static str = $group;
            /// The object's API version within its group.
            pub const VERSION: &'static str = $version;
            /// The object's `apiVersion`: `group/version`.
            pub const API_VERSION: &'static str = concat!($group, "/", $version);
            /// The resource name in API paths.
            pub const PLURAL: &'static str = $plural;
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("apiVersion", Self::API_VERSION)?;
                map.serialize_entry("kind", Self::KIND)?;
                map.serialize_entry("metadata", &self.metadata)?;
                map.serialize_entry("spec", &self.spec)?;
                $(
                    let status: &Option<$status> = &self.status;
                    if let Some(status) = status {
                        map.serialize_entry("status", status)?;
                    }
                )?
                map.end()
            }
        }

        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                Self::KIND.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                Self::GROUP.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                Self::VERSION.into()
            }

            fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
                Self::API_VERSION.into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                Self::PLURAL.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl kube::core::object::HasSpec for $ty {
            type Spec = $spec;

            fn spec(&self) -> &$spec {
                &self.spec
            }

            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
        }

        $(
            impl kube::core::object::HasStatus for $ty {
                type Status = $status;

                fn status(&self) -> Option<&$status> {
                    self.status.as_ref()
                }

                fn status_mut(&mut self) -> &mut Option<$status> {
                    &mut self.status
                }
            }
        )?

        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                Self::KIND.into()
            }

            fn schema_id() -> std::borrow::Cow<'static, str> {
                concat!($group, "/", $version, "/", stringify!($ty)).into()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let mut properties = serde_json::Map::new();
                properties.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
                properties.insert("kind".into(), serde_json::json!({"type": "string"}));
                properties.insert(
                    "metadata".into(),
                    generator
                        .subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()
                        .into(),
                );
                properties.insert("spec".into(), generator.subschema_for::<$spec>().into());
                $(
                    properties.insert("status".into(), generator.subschema_for::<$status>().into());
                )?
                schemars::json_schema!({"type": "object", "properties": properties})
            }
        }
    };
}

pub(crate) use kube_object;
