//! Images: from an [`ImageSpec`] to a local image, built once.
//!
//! A spec renders a Dockerfile deterministically; its content hash is the tag
//! (`dockhand/image:<hash>`), so a spec is built once per machine and found
//! again by any process. The Python base under it is pulled where a registry
//! answers and made from Debian packages where none does; its tag says which.
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! let client = dockhand::Client::connect().await?;
//! let spec = dockhand::ImageSpec::default().pip(["numpy"]).trust_host_certificates();
//! let image = client.resolve_image(&spec).await?;
//! println!("{} ({:?})", image.reference, image.source);
//! # Ok(()) }
//! ```

pub(crate) mod agent;
pub(crate) mod base;
pub(crate) mod bridge;
mod build;
pub(crate) mod build_log;
pub(crate) mod crate_build;
mod dockerfile;
pub(crate) mod prebuilt;
pub(crate) mod program;
mod registry;
mod resolver;
mod spec;
mod step;
pub(crate) mod watchdog;

pub use dockerfile::{BuildPlan, IMAGE_REPOSITORY};
pub use registry::{PushedImage, Registry};
pub(crate) use resolver::ImageResolver;
pub use resolver::{ImageSource, ResolvedImage};
pub use spec::{host_ca_bundle, ImageSpec, CA_CERTS_ENV, DEFAULT_PYTHON};
pub(crate) use spec::{ContextFile, CopyFrom, CONTEXT_DIR};
pub use step::{ArchiveCopy, BuildStep};
