//! A second dockerd of the test's own, beside the main one: its own data
//! root, exec root, pid file, socket and bridge (never `--bridge=none`, which
//! would delete the host's docker0), stopped and removed on drop whatever
//! happened.

#![allow(dead_code)] // each test binary uses its own part of the fixture

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BRIDGE: &str = "dh-test0";
const BRIDGE_ADDR: &str = "172.31.250.1/24";

pub struct SecondDaemon {
    dir: PathBuf,
    child: std::process::Child,
    /// dockerd's arguments, to start it again after [`SecondDaemon::kill`].
    args: Vec<String>,
    /// `unix:///...` for `Client::builder().endpoint(..)`.
    pub endpoint: String,
}

fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether gVisor's `runsc` is installed; without it a test is skipped,
/// saying so, except under CI, where that is a failure.
pub fn runsc_installed() -> bool {
    if std::path::Path::new("/usr/bin/runsc").exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "runsc is not installed: `apt-get install runsc` (.ci/run does)"
    );
    eprintln!("skipped: runsc is not installed (`apt-get install runsc`)");
    false
}

impl SecondDaemon {
    /// Starts one with `daemon_json` as its config and `image` loaded into it.
    pub fn start(daemon_json: &str, image: &str) -> SecondDaemon {
        Self::start_with(daemon_json, image, &[])
    }

    /// Like [`start`](Self::start), with more dockerd arguments (a TCP
    /// listener with TLS, say).
    pub fn start_with(daemon_json: &str, image: &str, extra_args: &[String]) -> SecondDaemon {
        // A short path: a unix socket's path has a 108-byte limit.
        let dir = PathBuf::from(format!("/tmp/dh2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("second daemon dir");
        if !run("ip", &["link", "show", BRIDGE]) {
            assert!(
                run("ip", &["link", "add", BRIDGE, "type", "bridge"]),
                "creating {BRIDGE}"
            );
            run("ip", &["addr", "add", BRIDGE_ADDR, "dev", BRIDGE]);
        }
        run("ip", &["link", "set", BRIDGE, "up"]);
        std::fs::write(dir.join("daemon.json"), daemon_json).expect("daemon.json");
        let socket = dir.join("sock");
        let p = |name: &str| dir.join(name).display().to_string();
        let mut args: Vec<String> = vec![
            "--config-file".into(),
            p("daemon.json"),
            "--data-root".into(),
            p("data"),
            "--exec-root".into(),
            p("exec"),
            "--pidfile".into(),
            p("pid"),
            "-H".into(),
            format!("unix://{}", socket.display()),
        ];
        args.extend(extra_args.iter().cloned());
        args.extend([
            "--iptables=false".into(),
            "--ip6tables=false".into(),
            format!("--bridge={BRIDGE}"),
        ]);
        let mut daemon = SecondDaemon {
            child: spawn(&dir, &args),
            args,
            endpoint: format!("unix://{}", socket.display()),
            dir,
        };
        daemon.wait_for_answer();
        daemon.load(image);
        // The watchdog's image (a megabyte), so the second daemon does not
        // compile its own while the tests run, and the base images: an
        // image is found only once its base is, and making a base there
        // (debootstrap) would take minutes.
        for kind in ["watchdog-image", "base-image"] {
            let listed = Command::new("docker")
                .args(["images", "--filter"])
                .arg(format!("label=dev.dockhand.kind={kind}"))
                .args(["--format", "{{.Repository}}:{{.Tag}}"])
                .output()
                .expect("docker images");
            for found in String::from_utf8_lossy(&listed.stdout).lines() {
                if !found.contains("<none>") {
                    daemon.load(found);
                }
            }
        }
        daemon
    }

    /// Kills dockerd outright (SIGKILL), as a crash would: its containers
    /// and their shims stay as they are until it starts again.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its containerd goes too (the shims stay, as in a crash); a zombie
        // left under its pid file would read as still running and hold up
        // the next start.
        let containerd = format!("containerd --config {}", self.dir.display());
        run("pkill", &["-KILL", "-f", &containerd]);
        std::thread::sleep(Duration::from_millis(300));
        let _ = std::fs::remove_file(self.dir.join("exec/containerd/containerd.pid"));
    }

    /// Starts dockerd again on the same files, after [`Self::kill`].
    pub fn restart(&mut self) {
        self.child = spawn(&self.dir, &self.args);
        self.wait_for_answer();
    }

    fn wait_for_answer(&mut self) {
        let started = Instant::now();
        while !self.docker(&["info"]) {
            if started.elapsed() > Duration::from_secs(60) {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                panic!("the second dockerd did not answer: {log}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Copies `image` from the main daemon into this one (it has no registry either).
    pub fn load(&self, image: &str) {
        let loaded = Command::new("sh")
            .args([
                "-c",
                &format!("docker save {image} | docker -H {} load", self.endpoint),
            ])
            .output()
            .expect("docker save | load");
        assert!(
            loaded.status.success(),
            "{}",
            String::from_utf8_lossy(&loaded.stderr)
        );
    }

    /// The folder holding the daemon's files (removed on drop).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn docker(&self, args: &[&str]) -> bool {
        let mut all = vec!["-H", &self.endpoint];
        all.extend_from_slice(args);
        run("docker", &all)
    }

    /// How many volumes of the second daemon carry `label`.
    pub fn volumes_with_label(&self, label: &str) -> usize {
        let out = Command::new("docker")
            .args(["-H", &self.endpoint, "volume", "ls", "-q", "--filter"])
            .arg(format!("label={label}"))
            .output()
            .expect("docker CLI");
        String::from_utf8_lossy(&out.stdout).lines().count()
    }

    /// How many containers of the second daemon carry `label`.
    pub fn containers_with_label(&self, label: &str) -> usize {
        let out = Command::new("docker")
            .args([
                "-H",
                &self.endpoint,
                "ps",
                "-aq",
                "--filter",
                &format!("label={label}"),
            ])
            .output()
            .expect("docker CLI");
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

fn spawn(dir: &std::path::Path, args: &[String]) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .expect("log");
    Command::new("dockerd")
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("starting a second dockerd")
}

impl Drop for SecondDaemon {
    fn drop(&mut self) {
        run("kill", &["-TERM", &self.child.id().to_string()]);
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None))
            && started.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever the daemon left running (containerd shims, a runtime stuck
        // in `start`) names our folder on its command line.
        run("pkill", &["-KILL", "-f", &self.dir.display().to_string()]);
        // Drop what it left mounted, then its directories.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let prefix = self.dir.display().to_string();
        for mount in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
            if mount.starts_with(&prefix) {
                run("umount", &["-l", mount]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // Starting a daemon must never cost the main one its bridge.
        if !run("ip", &["link", "show", "docker0"]) && !std::thread::panicking() {
            panic!(
                "docker0 is gone after the second daemon; bring it back with `ip link add \
                 docker0 type bridge; ip addr add 172.17.0.1/16 dev docker0; ip link set docker0 up`"
            );
        }
    }
}
