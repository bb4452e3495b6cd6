//! A Docker registry of the test's own: Debian's `docker-registry` package
//! (the CNCF distribution registry) in an image dockhand builds, published
//! on a free port of 127.0.0.1, which the daemon may reach over plain HTTP.
//! Removed on drop.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use dockhand::{Client, ImageSpec};

/// The login of [`TestRegistry::with_login`].
pub const USER: &str = "robot";
pub const PASSWORD: &str = "reg-pass-3f9a1c";

/// The registry's configuration: an open one, and one behind htpasswd.
fn setup_command() -> String {
    format!(
        "htpasswd -Bbc /etc/registry.htpasswd {USER} {PASSWORD} && \
         printf 'version: 0.1\\nstorage:\\n  filesystem:\\n    rootdirectory: /var/lib/docker-registry\\nhttp:\\n  addr: :5000\\n' > /etc/registry-open.yml && \
         cp /etc/registry-open.yml /etc/registry-login.yml && \
         printf 'auth:\\n  htpasswd:\\n    realm: dockhand-test\\n    path: /etc/registry.htpasswd\\n' >> /etc/registry-login.yml"
    )
}

pub struct TestRegistry {
    container: String,
    /// `127.0.0.1:<port>`.
    pub host: String,
}

impl TestRegistry {
    /// One that takes any push.
    pub async fn open(client: &Client) -> TestRegistry {
        Self::start(client, "/etc/registry-open.yml").await
    }

    /// One that takes pushes from [`USER`] with [`PASSWORD`] only.
    pub async fn with_login(client: &Client) -> TestRegistry {
        Self::start(client, "/etc/registry-login.yml").await
    }

    async fn start(client: &Client, config: &str) -> TestRegistry {
        let spec = ImageSpec::default()
            .trust_host_certificates()
            .apt(["docker-registry", "apache2-utils"])
            .run(setup_command());
        let image = client
            .resolve_image(&spec)
            .await
            .expect("the registry's image");
        let container = crate::common::docker(&[
            "run",
            "-d",
            "--rm",
            "--label",
            "dev.dockhand.test=registry",
            "-p",
            "127.0.0.1::5000",
            &image.reference,
            "docker-registry",
            "serve",
            config,
        ])
        .trim()
        .to_string();
        let port = crate::common::docker(&["port", &container, "5000/tcp"]);
        let host = port
            .lines()
            .find(|l| l.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no published port: {port}"))
            .trim()
            .to_string();
        let registry = TestRegistry { container, host };
        let deadline = Instant::now() + Duration::from_secs(30);
        while registry.get("/v2/").0 == 0 {
            assert!(Instant::now() < deadline, "the registry never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// `GET path` (HTTP/1.0, the registry's own login if it asks for one):
    /// the status (0: no answer) and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, "")
    }

    /// `HEAD path`: the status.
    pub fn head(&self, path: &str) -> u16 {
        self.request("HEAD", path, "").0
    }

    /// A manifest, in the format Docker pushes.
    pub fn manifest(&self, name: &str, reference: &str) -> (u16, String) {
        self.request(
            "GET",
            &format!("/v2/{name}/manifests/{reference}"),
            "Accept: application/vnd.docker.distribution.manifest.v2+json\r\n",
        )
    }

    fn request(&self, method: &str, path: &str, headers: &str) -> (u16, String) {
        use base64::Engine as _;
        let Ok(mut stream) = std::net::TcpStream::connect(&self.host) else {
            return (0, String::new());
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let login = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Basic {login}\r\n{headers}\r\n",
            self.host
        );
        if stream.write_all(request.as_bytes()).is_err() {
            return (0, String::new());
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.container])
            .output();
    }
}
