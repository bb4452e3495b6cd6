//! TLS: each sandbox's own certificate authority (made here; its key never
//! leaves the gateway), the certificates it issues for the hosts whose
//! requests carry secrets, the server name a client asks for, and the
//! trust the gateway's own upstream connections use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A trust store the image may carry (dockhand's carries none: the owner
/// sends the host's bundle when the gateway starts).
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Certificates issued for hosts are kept this many per sandbox.
const MAX_LEAVES: usize = 256;

/// One sandbox's certificate authority.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, for the sandbox's trust store.
    pub cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl Authority {
    pub fn new() -> Result<Authority, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params
            .distinguished_name
            .push(DnType::CommonName, "dockhand egress gateway (one sandbox)");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// A server configuration presenting a certificate for `host` (a name
    /// or an address) issued by this authority.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            CertificateParams::new(vec![host.to_string()]).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, host);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| e.to_string())?;
        let chain = vec![cert.der().clone(), self.cert_der.clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// The roots the gateway trusts upstream: the image's bundle, if any, and
/// the certificates the owner gave (the host's bundle among them), as PEM.
pub fn roots(extra_pem: &[String]) -> (RootCertStore, String) {
    let mut store = RootCertStore::empty();
    let mut bundle = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    for pem in extra_pem {
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(pem);
    }
    for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()).flatten() {
        let _ = store.add(cert);
    }
    (store, bundle)
}

/// The client configuration for the gateway's own TLS connections.
pub fn upstream_config(roots: RootCertStore) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What the first bytes of a TLS connection say about the server it wants.
pub enum Hello {
    /// More bytes are needed.
    Incomplete,
    /// A ClientHello, with its server name if it gave one.
    Server(Option<String>),
    /// Not TLS.
    Invalid,
}

/// Reads the server name from the bytes received so far, without answering.
pub fn server_name(received: &[u8]) -> Hello {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut reader = received;
    while !reader.is_empty() {
        if acceptor.read_tls(&mut reader).is_err() {
            return Hello::Invalid;
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => {
            Hello::Server(accepted.client_hello().server_name().map(String::from))
        }
        Ok(None) => Hello::Incomplete,
        Err(_) => Hello::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_issues_certificates_a_client_trusting_it_accepts() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let authority = Authority::new().expect("authority");
        let config = authority.server_config("api.test").expect("leaf");
        let again = authority.server_config("api.test").expect("leaf");
        assert!(Arc::ptr_eq(&config, &again), "issued once");
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(authority.cert_pem.as_bytes()) {
            store.add(cert.expect("pem")).expect("root");
        }
        let client = upstream_config(store);
        let name = rustls::pki_types::ServerName::try_from("api.test").expect("name");
        let mut client = rustls::ClientConnection::new(client, name).expect("client");
        let mut server = rustls::ServerConnection::new(config).expect("server");
        let mut hello = Vec::new();
        client.write_tls(&mut hello).expect("hello");
        assert!(matches!(server_name(&hello), Hello::Server(Some(n)) if n == "api.test"));
        assert!(matches!(server_name(&hello[..10]), Hello::Incomplete));
        assert!(matches!(
            server_name(b"GET / HTTP/1.1\r\n\r\n"),
            Hello::Invalid
        ));
        // A full handshake: the client verifies the leaf against the authority.
        let mut to_server = hello;
        for _ in 0..10 {
            server.read_tls(&mut &to_server[..]).expect("read");
            server.process_new_packets().expect("server");
            let mut to_client = Vec::new();
            server.write_tls(&mut to_client).expect("write");
            client.read_tls(&mut &to_client[..]).expect("read");
            client.process_new_packets().expect("client verifies");
            to_server = Vec::new();
            client.write_tls(&mut to_server).expect("write");
            if !client.is_handshaking() && !server.is_handshaking() {
                break;
            }
        }
        assert!(!client.is_handshaking());
    }
}
