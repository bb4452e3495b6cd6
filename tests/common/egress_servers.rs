//! Test servers for the egress tests (the SDK's and the command's): one
//! container answering HTTP (80)
//! and HTTPS (443, a certificate from a test CA) under several names, on an
//! internal network of the test's own. The gateway reaches them through that
//! network; nothing leaves the machine.

// Its own copy: the examples that include this file have no `common`.
#[allow(clippy::duplicate_mod)]
#[path = "docker_cli.rs"]
mod docker_cli;
use docker_cli::docker;

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// What the server answers: the Host it was asked for, whether it was
/// reached over TLS, and a hash of the Authorization header (never the
/// header itself, so a test can check a secret without the sandbox seeing it).
/// Under `/echo` it is a hostile host instead: it sends the Authorization
/// header back verbatim, in a header and in a body chunked so that the
/// value is split across chunks (`/echo/gzip`: compressed, whatever the
/// request asked for; `/echo/two-encodings` says `identity` then `gzip`;
/// `/echo/te-gzip` compresses in its transfer coding). `/ws` switches to a
/// WebSocket's protocol and echoes what comes.
const SERVER: &str = r#"
import gzip, hashlib, http.server, json, ssl, threading
class Echo(http.server.BaseHTTPRequestHandler):
    # Keep-alive, as real APIs do; one write per response, no Nagle wait.
    protocol_version = "HTTP/1.1"
    wbufsize = -1
    disable_nagle_algorithm = True
    def echo(self, auth):
        body = ("you sent: " + auth + " | again: " + auth + " | json: " + json.dumps({"auth": auth})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Echo-Auth", auth)
        self.send_header("X-Accept-Encoding", self.headers.get("Accept-Encoding", ""))
        if self.path == "/echo/gzip":
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/echo/two-encodings":
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "identity")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/echo/te-gzip":
            body = gzip.compress(body)
            self.send_header("Transfer-Encoding", "gzip, chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), 7):
            piece = body[i:i + 7]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        if self.path.startswith("/echo"):
            return self.echo(auth)
        if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            # Switches, then echoes every byte (what crosses is the client's).
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                data = self.connection.recv(4096)
                if not data:
                    break
                self.connection.sendall(data)
            self.close_connection = True
            return
        body = json.dumps({
            "host": self.headers.get("Host", ""),
            "path": self.path,
            "tls": isinstance(self.connection, ssl.SSLSocket),
            "auth_sha256": hashlib.sha256(auth.encode()).hexdigest(),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
plain = Server(("0.0.0.0", 80), Echo)
secure = Server(("0.0.0.0", 443), Echo)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
secure.socket = context.wrap_socket(secure.socket, server_side=True)
threading.Thread(target=secure.serve_forever, daemon=True).start()
print("serving", flush=True)
plain.serve_forever()
"#;

/// The names the server answers to.
pub const NAMES: [&str; 3] = [
    "api.example.test",
    "other.example.test",
    "blocked.example.test",
];

/// A running test server and its network; both go when it is dropped.
pub struct TestServers {
    /// The internal network the gateway must be attached to.
    pub network: String,
    /// The test CA, which the gateway is told to trust.
    pub ca_pem: String,
    /// The server's address on that network.
    pub address: String,
    container: String,
    _dir: tempfile::TempDir,
}

impl TestServers {
    /// Starts the server from `image` (which has python3).
    pub fn start(image: &str) -> TestServers {
        let tag = format!("{}-{}", std::process::id(), uuid_like());
        let network = format!("dh-egress-test-{tag}");
        let container = format!("dh-egress-server-{tag}");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        // A name of its own: a client holding another fixture's CA must not
        // mistake one for the other.
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("dockhand egress test CA {tag}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let sans: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let files: [(&str, String); 3] = [
            ("server.py", SERVER.to_string()),
            ("cert.pem", cert.pem()),
            ("key.pem", key.serialize_pem()),
        ];
        for (name, text) in files {
            let path: PathBuf = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
        }
        // Readable by the server whatever user it runs as.
        std::process::Command::new("chmod")
            .args(["-R", "a+rX", &dir.path().display().to_string()])
            .status()
            .unwrap();
        docker(&[
            "network",
            "create",
            "--internal",
            "--label",
            "dev.dockhand.test=egress",
            &network,
        ]);
        let mut run = vec![
            "run".to_string(),
            "-d".into(),
            "--name".into(),
            container.clone(),
            "--label".into(),
            "dev.dockhand.test=egress".into(),
            "--network".into(),
            network.clone(),
            "-v".into(),
            format!("{}:/srv:ro", dir.path().display()),
            "--user".into(),
            "0:0".into(),
        ];
        for name in NAMES {
            run.push("--network-alias".into());
            run.push(name.into());
        }
        run.extend([
            image.to_string(),
            "python3".into(),
            "-u".into(),
            "/srv/server.py".into(),
        ]);
        let args: Vec<&str> = run.iter().map(String::as_str).collect();
        docker(&args);
        let mut servers = TestServers {
            address: String::new(),
            network,
            ca_pem: ca.pem(),
            container,
            _dir: dir,
        };
        // Serving once its first line is out.
        for _ in 0..100 {
            if docker(&["logs", &servers.container]).contains("serving") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let address = docker(&[
            "inspect",
            "-f",
            &format!(
                "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
                servers.network
            ),
            &servers.container,
        ]);
        servers.address = address.trim().to_string();
        servers
    }
}

impl Drop for TestServers {
    fn drop(&mut self) {
        let run = |args: &[&str]| std::process::Command::new("docker").args(args).output();
        let _ = run(&["rm", "-f", &self.container]);
        // A gateway still attached (a test that failed before its client
        // went) is detached: the network must go either way.
        for _ in 0..20 {
            if let Ok(out) = run(&[
                "network",
                "inspect",
                "-f",
                "{{range .Containers}}{{.Name}} {{end}}",
                &self.network,
            ]) {
                for name in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = run(&["network", "disconnect", "-f", &self.network, name]);
                }
            }
            match run(&["network", "rm", &self.network]) {
                Ok(out) if out.status.success() => return,
                Ok(out) if String::from_utf8_lossy(&out.stderr).contains("not found") => return,
                _ => std::thread::sleep(std::time::Duration::from_millis(250)),
            }
        }
    }
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos:08x}")
}
