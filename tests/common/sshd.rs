//! An `sshd` of the test's own on port 22 of a loopback address of its own
//! (ssh:// endpoints carry no port: see `Error::DaemonUnreachable` for
//! `ssh://host:port`), logging in with a key made here and pointing the
//! remote `docker` at `docker_host`. Stopped, and its known_hosts entry
//! removed, on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback address nothing else here uses.
pub const ADDRESS: &str = "127.0.0.77";

pub struct Sshd {
    dir: PathBuf,
    child: Child,
    /// The private key to log in with.
    pub identity: PathBuf,
}

fn keygen(path: &std::path::Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen")
        .success();
    assert!(ok, "ssh-keygen failed");
}

fn forget_host_key() {
    let _ = Command::new("ssh-keygen")
        .args(["-R", ADDRESS])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Sshd {
    /// Starts one, or says why it cannot (no sshd installed, port taken).
    pub fn start(docker_host: &str) -> Result<Sshd, String> {
        let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .ok_or("sshd is not installed (`apt-get install openssh-server`)")?;
        if std::net::TcpStream::connect((ADDRESS, 22)).is_ok() {
            return Err(format!("something already listens on {ADDRESS}:22"));
        }
        let dir = PathBuf::from(format!("/tmp/dh-sshd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Privilege separation needs this folder; Debian's package makes it at boot.
        std::fs::create_dir_all("/run/sshd").unwrap();
        keygen(&dir.join("host_key"));
        keygen(&dir.join("client_key"));
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let config = format!(
            "ListenAddress {ADDRESS}:22\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nSetEnv DOCKER_HOST={docker_host}\n",
            d = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        forget_host_key();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting sshd: {e}"))?;
        let fixture = Sshd {
            identity: dir.join("client_key"),
            dir,
            child,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect((ADDRESS, 22)).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                let log = std::fs::read_to_string(fixture.dir.join("log")).unwrap_or_default();
                return Err(format!("sshd did not listen: {log}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(fixture)
    }

    /// `ssh://root@ADDRESS`.
    pub fn endpoint(&self) -> String {
        format!("ssh://root@{ADDRESS}")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        forget_host_key();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
