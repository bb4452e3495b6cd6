//! TLS material made at test time: a CA, a daemon certificate for 127.0.0.1
//! and localhost, and a client certificate, written as the docker CLI names
//! them (`ca.pem`, `cert.pem`, `key.pem`).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A CA with one daemon and one client certificate, in `dir`.
pub struct TlsSet {
    /// `ca.pem`, `cert.pem`, `key.pem` for the daemon (`--tlscacert` ...).
    pub server: PathBuf,
    /// `ca.pem`, `cert.pem`, `key.pem` for a client.
    pub client: PathBuf,
}

impl TlsSet {
    pub fn make(dir: &Path, name: &str) -> TlsSet {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("dockhand test CA {name}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let issue = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose, into: &Path| {
            let mut params = CertificateParams::new(sans).unwrap();
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &ca).unwrap();
            std::fs::create_dir_all(into).unwrap();
            std::fs::write(into.join("ca.pem"), ca.pem()).unwrap();
            std::fs::write(into.join("cert.pem"), cert.pem()).unwrap();
            std::fs::write(into.join("key.pem"), key.serialize_pem()).unwrap();
        };
        let server = dir.join(format!("{name}-server"));
        let client = dir.join(format!("{name}-client"));
        issue(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            &server,
        );
        issue(
            vec!["client".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &client,
        );
        TlsSet { server, client }
    }

    /// The dockerd arguments that serve TLS on `127.0.0.1:port` and require
    /// client certificates signed by this CA.
    pub fn daemon_args(&self, port: u16) -> Vec<String> {
        let f = |name: &str| self.server.join(name).display().to_string();
        vec![
            "-H".into(),
            format!("tcp://127.0.0.1:{port}"),
            "--tlsverify".into(),
            format!("--tlscacert={}", f("ca.pem")),
            format!("--tlscert={}", f("cert.pem")),
            format!("--tlskey={}", f("key.pem")),
        ]
    }
}

/// A TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
