//! From rendered manifests to what the backend creates for one pod: the
//! pod owned by this process's lease, its ConfigMaps, and a Secret of its
//! own when it has secret values.

use k8s_openapi::api::core::v1::Pod;

use super::owned::{secret_of, Companion};
use super::Cluster;
use crate::error::{Error, Result};
use crate::manifests::{KubeOptions, Manifests, Object};

/// What to create for one pod, in order: the companions, then the pod.
pub(crate) struct PodPlan {
    /// The pod's name.
    pub(crate) name: String,
    pub(crate) pod: Pod,
    pub(crate) companions: Vec<Companion>,
}

impl Cluster {
    /// Renders a new pod `<prefix>-<random>` of `image` with `render`, and
    /// plans it: owned by this process's lease, labelled for the namespace's
    /// offline policy when `offline`, with the rendered ConfigMaps and (when
    /// `secrets` has values) a Secret `<pod>-secrets` the pod refers to. A
    /// rendered NetworkPolicy is left out: the shared one selects the pod.
    pub(crate) fn plan_pod(
        &self,
        prefix: &str,
        image: &str,
        secrets: &[(String, String)],
        offline: bool,
        render: impl FnOnce(&KubeOptions) -> Result<Manifests>,
    ) -> Result<PodPlan> {
        let name = crate::manifests::pod_name(&format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        ));
        let secret_object = format!("{name}-secrets");
        let mut opts = self.render_options(image, &name);
        if !secrets.is_empty() {
            opts = opts.secrets_object(secret_object.clone());
        }
        let mut pod = None;
        let mut companions = Vec::new();
        for object in render(&opts)?.objects() {
            match object {
                Object::Pod(p) => pod = Some(p.clone()),
                Object::ConfigMap(m) => companions.push(Companion::ConfigMap(
                    m.metadata.name.clone().unwrap_or_default(),
                    m.clone(),
                )),
                _ => {}
            }
        }
        let mut pod = pod.ok_or_else(|| Error::spec("kubernetes", "no pod was rendered"))?;
        if !secrets.is_empty() {
            companions.push(Companion::Secret(secret_object, secret_of(secrets)));
        }
        pod.metadata.owner_references = Some(vec![self.owner_reference()]);
        if offline {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(super::NETWORK_LABEL.into(), "none".into());
        }
        Ok(PodPlan {
            name,
            pod,
            companions,
        })
    }
}
