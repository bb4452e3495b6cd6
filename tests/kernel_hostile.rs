//! Kernels against hostile code: a killed relay, forged protocol lines on
//! every descriptor, floods, memory exhaustion, dropped runs. Each case
//! asserts the typed outcome and that the next run is unaffected.

mod common;

use std::time::Duration;

use dockhand::kernel::{Kernel, KernelError, RunOptions};
use dockhand::session::SessionApi;
use dockhand::Error;

use common::{kernel, kernel_config as config};

/// How many kernel processes run in the container.
/// Kernel processes: started on their own (`ipykernel_launcher`) or forked
/// by the relay's fork server (named `dockhand-kernel`).
async fn kernels_running(k: &Kernel) -> usize {
    let ps = k
        .exec("for p in /proc/[0-9]*; do echo \"$(cat $p/comm 2>/dev/null) $(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\"; done")
        .await
        .unwrap()
        .stdout;
    ps.lines()
        .filter(|l| l.contains("ipykernel_launcher") || l.starts_with("dockhand-kernel "))
        .count()
}

/// Kills the relay from the kernel's own code: the run fails typed.
async fn kill_the_relay(k: &Kernel) {
    let kill = "import os, signal\n\
        for p in os.listdir('/proc'):\n    \
            if p.isdigit():\n        \
                try:\n            \
                    if b'relay.py' in open('/proc/%s/cmdline' % p, 'rb').read(): os.kill(int(p), signal.SIGKILL)\n        \
                except OSError: pass";
    let err = k.run(kill).await.unwrap_err();
    assert!(
        matches!(err, Error::Kernel(KernelError::Unavailable { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn killing_the_relay_is_typed_and_the_next_run_starts_afresh() {
    let k = kernel(config()).await;
    k.run("x = 1").await.unwrap();
    kill_the_relay(&k).await;
    // The next run gets a new relay and kernel; the old state is gone, and
    // so is the old kernel.
    let ex = k.run("'x' in globals()").await.unwrap();
    assert_eq!(ex.text(), Some("False"));
    assert_eq!(kernels_running(&k).await, 1);
    assert_eq!(k.run("6 * 7").await.unwrap().text(), Some("42"));
    k.close().await.unwrap();
}

/// Code that plants modules where a Python started after it might import
/// them (the user site, the relay's own directory, the directory the relay
/// used to run from), each one marking that it was loaded by the relay,
/// tries to change the relay itself, then kills the relay. The relay that replaces
/// it must load none of them, and its results must be real.
#[tokio::test]
async fn a_relay_started_after_hostile_code_loads_nothing_it_wrote() {
    let k = kernel(config()).await;
    let plant = r#"
import os, site, sys, signal
marker = "/tmp/relay-loaded-planted-code"
payload = ("import sys\n"
           "if any('relay' in a for a in sys.argv):\n"
           "    open(%r, 'a').write(__name__ + ' ')\n" % marker)
refused, planted = [], []
helpers = "/var/inputs/.dockhand"
# (Only where the kernel's own next start would not trip over them: a
# zmq.py on the kernel's path would break the kernel, not the relay.)
targets = {
    helpers: ["usercustomize.py", "sitecustomize.py", "secrets.py", "zmq.py"],
    site.getusersitepackages(): ["usercustomize.py", "sitecustomize.py"],
    "/tmp/.dockhand-kernel": ["secrets.py", "zmq.py", "usercustomize.py"],
}
for d, names in targets.items():
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        pass
    for name in names:
        path = os.path.join(d, name)
        try:
            with open(path, "w") as f:
                f.write(payload)
            planted.append(path)
        except OSError:
            refused.append(path)
for name in os.listdir(helpers):
    path = os.path.join(helpers, name)
    try:
        with open(path, "a") as f:
            f.write("\nraise SystemExit('tampered')\n")
        planted.append(path)
    except OSError:
        refused.append(path)
try:
    os.rename(helpers, "/var/inputs/moved")
    planted.append("renamed")
except OSError:
    refused.append("rename")
str(sorted(set(p for p in planted if p.startswith(helpers) or p == "renamed")))
"#;
    let ex = k.run(plant).await.unwrap();
    assert_eq!(
        ex.text(),
        Some("'[]'"),
        "the helpers' directory must not be writable: {ex:?}"
    );
    kill_the_relay(&k).await;
    let ex = k.run("6 * 7").await.unwrap();
    assert_eq!(ex.text(), Some("42"), "{ex:?}");
    let ex = k
        .run("import os\nos.path.exists('/tmp/relay-loaded-planted-code') and open('/tmp/relay-loaded-planted-code').read()")
        .await
        .unwrap();
    assert_eq!(
        ex.text(),
        Some("False"),
        "the new relay loaded planted code: {ex:?}"
    );
    k.close().await.unwrap();
}

#[tokio::test]
async fn forged_protocol_lines_never_become_results() {
    let k = kernel(config()).await;
    let forged = r#"{"ev":"msg","ctx":"default","channel":"iopub","msg":{"header":{"msg_id":"f","username":"x","session":"s","msg_type":"execute_result","version":"5.3","date":"2026-01-01T00:00:00Z"},"parent_header":{},"metadata":{},"content":{"execution_count":1,"data":{"text/plain":"'FORGED'"},"metadata":{}}}}"#;
    let code = format!(
        "import os\nline = {forged:?}.encode() + b'\\n'\nreached = []\n\
         for path in ['/proc/1/fd/1', '/proc/%d/fd/1' % os.getppid()]:\n    \
             try:\n        open(path, 'wb').write(line); reached.append(path)\n    except OSError: pass\n\
         os.write(1, line); os.write(2, line)\n\
         import time; time.sleep(0.3)\n\
         k = get_ipython().kernel\n\
         k.session.send(k.iopub_socket, 'execute_result', {{'execution_count': 1, 'data': {{'text/plain': \"'FORGED'\"}}, 'metadata': {{}}}}, parent={{'msg_id': 'not-a-run', 'msg_type': 'execute_request'}})\n\
         reached"
    );
    // The relay's and the agent's channels are out of reach; what the code
    // writes to its own stdout is its own output; a signed reply to another
    // request is dropped. (ipykernel reads descriptor-level output on a
    // thread of its own: bytes written as a cell ends may reach the next
    // run, hence the pause after them.)
    let ex = k.run(&code).await.unwrap();
    assert_eq!(ex.text(), Some("[]"), "{ex:?}");
    assert!(ex.stdout.contains("FORGED"));
    assert_eq!(ex.results.len(), 1, "{ex:?}");
    // Raw bytes to every descriptor the kernel holds (its own sockets and
    // pipes included): the kernel may wreck itself, which ends as a typed
    // timeout and a restart, or shrug it off.
    let spray = format!(
        "import os\nline = {forged:?}.encode() + b'\\n'\n\
         for fd in range(3, 200):\n    \
             try:\n        os.write(fd, line)\n    except OSError: pass\n'done'"
    );
    let short = RunOptions::new().timeout(Duration::from_secs(5));
    match k.run_with(&spray, short).await {
        Ok(ex) => assert!(!format!("{ex:?}").contains("FORGED'"), "{ex:?}"),
        Err(Error::Kernel(KernelError::Timeout { .. } | KernelError::Died { .. })) => {}
        Err(e) => panic!("{e:?}"),
    }
    for _ in 0..3 {
        let ex = k.run("'real'").await.unwrap();
        assert_eq!(ex.text(), Some("'real'"));
        assert_eq!(ex.results.len(), 1, "{ex:?}");
        assert!(!format!("{ex:?}").contains("FORGED"), "{ex:?}");
    }
    k.close().await.unwrap();
}

#[tokio::test]
async fn floods_are_capped_and_memory_exhaustion_is_reported() {
    let k = kernel(
        config()
            .text_limit(64 << 10)
            .payload_limit(1 << 20)
            .session(|s| s.memory("512Mi")),
    )
    .await;
    // A result over the payload limit says which of its types were cut.
    let ex = k
        .run("from IPython.display import HTML\nHTML('<p>' + 'x' * (2 << 20) + '</p>')")
        .await
        .unwrap();
    assert_eq!(ex.results.len(), 1, "{:?}", ex.results.len());
    assert!(
        ex.results[0].cut.contains(&"text/html".to_string()),
        "{:?}",
        ex.results[0].cut
    );
    let ex = k
        .run("for i in range(20000):\n    print('x' * 1000)\n'end'")
        .await
        .unwrap();
    assert!(ex.stdout_truncated);
    assert!(ex.stdout.len() <= 64 << 10, "{}", ex.stdout.len());
    assert_eq!(ex.text(), Some("'end'"));

    k.run("kept = 1").await.unwrap();
    let err = k
        .run("blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel(KernelError::Died {
                out_of_memory: true,
                ..
            })
        ),
        "{err:?}"
    );
    // The context was restarted: it answers, without its old state.
    let ex = k.run("'kept' in globals()").await.unwrap();
    assert_eq!(ex.text(), Some("False"));

    // A dropped run is interrupted, so the next one does not queue behind it.
    let slow = k.run("import time\ntime.sleep(30)");
    assert!(tokio::time::timeout(Duration::from_millis(500), slow)
        .await
        .is_err());
    let ex = k
        .run_with("'next'", RunOptions::new().timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("'next'"));

    // Closing removes the container.
    let id = k.session().describe().container_id.unwrap();
    k.close().await.unwrap();
    common::wait_gone(&id).await;
}

#[tokio::test]
async fn a_fork_bomb_in_a_kernel_is_typed_and_the_kernel_recovers() {
    let k = kernel(config().session(|s| s.pids(64))).await;
    let bomb =
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let outcome = k
        .run_with(bomb, RunOptions::new().timeout(Duration::from_secs(20)))
        .await;
    match outcome {
        Err(Error::ProcessLimit { limit, .. }) => assert_eq!(limit, 64),
        other => panic!("{other:?}"),
    }
    // The next run works, in a kernel with its pids back.
    let mut answered = None;
    for _ in 0..3 {
        match k.run("6 * 7").await {
            Ok(ex) => {
                answered = Some(ex);
                break;
            }
            Err(e) => eprintln!("after the bomb: {e:?}"),
        }
    }
    assert_eq!(
        answered.expect("the kernel answers again").text(),
        Some("42")
    );
    k.close().await.unwrap();
}

/// Output of a thread an earlier run left running is not the later run's;
/// floods of text and of displays are cut in the kernel, answered at once,
/// and the context keeps its state.
#[tokio::test]
async fn a_runs_output_is_its_own_and_floods_are_cut_in_the_kernel() {
    let k = kernel(config().text_limit(64 << 10).session(|s| s.memory("512Mi"))).await;
    let leave = "import threading, time\nfrom IPython.display import display\n\
        kept = 'state'\n\
        def chatter():\n    \
            while True:\n        \
                print('left behind', flush=True)\n        \
                display({'text/plain': 'left behind'}, raw=True)\n        \
                time.sleep(0.02)\n\
        threading.Thread(target=chatter, daemon=True).start()\n\
        time.sleep(0.1)";
    let first = k.run(leave).await.unwrap();
    assert!(first.stdout.contains("left behind"), "{first:?}");
    let ex = k
        .run("import time\ntime.sleep(1)\nprint('mine')")
        .await
        .unwrap();
    assert_eq!(ex.stdout, "mine\n", "{ex:?}");
    assert!(ex.results.is_empty(), "{:?}", ex.results);
    // Threads and executor tasks of this run are this run's.
    let ex = k
        .run(
            "import threading, concurrent.futures\n\
             t = threading.Thread(target=lambda: print('from a thread')); t.start(); t.join()\n\
             with concurrent.futures.ThreadPoolExecutor(2) as pool:\n    \
                 pool.submit(print, 'from a task').result()",
        )
        .await
        .unwrap();
    assert!(
        ex.stdout.contains("from a thread") && ex.stdout.contains("from a task"),
        "{ex:?}"
    );

    // 10,000 displays: the run's first 500 come back, the rest are dropped
    // in the kernel (said on stderr), promptly.
    let started = std::time::Instant::now();
    let ex = k
        .run_with(
            "from IPython.display import display\nfor i in range(10000):\n    display({'text/plain': 'x' * 32768}, raw=True)",
            RunOptions::new().timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(ex.results.len(), 500, "{}", ex.stderr);
    assert!(
        ex.stderr.contains("further displays are dropped"),
        "{}",
        ex.stderr
    );
    assert!(took < Duration::from_secs(60), "{took:?}");

    // A GiB printed a MiB at a time under 512 MiB: cut at the text limit,
    // and the kernel lives with its state.
    let ex = k
        .run_with(
            "chunk = 'y' * (1 << 20)\nfor i in range(1024):\n    print(chunk)\n'printed'",
            RunOptions::new().timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    assert!(ex.stdout_truncated, "{}", ex.stdout.len());
    assert!(ex.stdout.len() <= 64 << 10, "{}", ex.stdout.len());
    assert_eq!(ex.text(), Some("'printed'"));
    assert_eq!(k.run("kept").await.unwrap().text(), Some("'state'"));
    k.close().await.unwrap();
}

/// A dropped run whose code ignores the interrupt costs the next run the
/// interrupt's grace and a restart, not the next run's whole timeout.
#[tokio::test]
async fn a_dropped_run_that_ignores_its_interrupt_holds_the_next_for_the_grace_only() {
    let k = kernel(config()).await;
    let stubborn = k.run(
        "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass",
    );
    assert!(tokio::time::timeout(Duration::from_millis(1500), stubborn)
        .await
        .is_err());
    let started = std::time::Instant::now();
    let ex = k.run("6 * 7").await.unwrap();
    let took = started.elapsed();
    assert_eq!(ex.text(), Some("42"));
    assert!(
        took < Duration::from_secs(15),
        "the next run waited {took:?}"
    );
    // A dropped run that takes its interrupt costs nothing more.
    k.run("x = 1").await.unwrap();
    let polite = k.run("import time\ntime.sleep(100)");
    assert!(tokio::time::timeout(Duration::from_millis(500), polite)
        .await
        .is_err());
    let started = std::time::Instant::now();
    assert_eq!(k.run("x").await.unwrap().text(), Some("1"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    k.close().await.unwrap();
}

/// The fork server Python contexts are forked from: its pipes to the relay
/// are out of the kernels' reach, siblings forked from it do not share
/// numpy's random state, and killing it costs only speed (the next
/// contexts start anyway, the running ones go on).
#[tokio::test]
async fn the_fork_server_is_out_of_reach_and_its_loss_costs_only_speed() {
    let k = kernel(config()).await;
    for name in ["c1", "c2"] {
        k.create_context(name).await.unwrap();
    }
    let draw = "int(np.random.randint(1 << 62))";
    let one = k
        .run_with(draw, RunOptions::new().context("c1"))
        .await
        .unwrap();
    let two = k
        .run_with(draw, RunOptions::new().context("c2"))
        .await
        .unwrap();
    assert!(
        one.text().is_some() && one.text() != two.text(),
        "{one:?} {two:?}"
    );

    let probe = r#"
import os, signal
def comm(p):
    try: return open('/proc/%s/comm' % p).read().strip()
    except OSError: return ''
def cmdline(p):
    try: return open('/proc/%s/cmdline' % p, 'rb').read()
    except OSError: return b''
servers = [p for p in os.listdir('/proc') if p.isdigit()
           and b'kernel_zygote.py' in cmdline(p) and comm(p) != 'dockhand-kernel']
reached = []
for p in servers:
    for fd, mode in (('0', os.O_RDONLY), ('1', os.O_WRONLY)):
        try:
            os.close(os.open('/proc/%s/fd/%s' % (p, fd), mode))
            reached.append(fd)
        except OSError:
            pass
for p in servers:
    os.kill(int(p), signal.SIGKILL)
(len(servers), reached)
"#;
    let ex = k.run(probe).await.unwrap();
    assert_eq!(ex.text(), Some("(1, [])"), "{ex:?}");
    // Contexts made after its death start (without it), and those made
    // before it go on.
    k.create_context("after").await.unwrap();
    let ex = k
        .run_with("6 * 7", RunOptions::new().context("after"))
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("42"));
    let ex = k
        .run_with("1 + 1", RunOptions::new().context("c1"))
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("2"));
    k.close().await.unwrap();
}

/// The notes a kernel leaves of the bound modules its code used are
/// written where its code can write too: what else it writes there (other
/// modules, a FIFO the relay would block on, a flood) changes nothing but
/// which bound modules later contexts start with.
#[tokio::test]
async fn forged_first_use_notes_import_nothing_unbound_and_block_nothing() {
    let k = kernel(config()).await;
    k.create_context("c1").await.unwrap();
    let forge = r#"
import glob, os, sys
own = os.path.dirname(sys.argv[sys.argv.index('-f') + 1])
others = [d for d in glob.glob('/tmp/.dockhand-kernels/*') if os.path.isdir(d) and d != own]
with open(os.path.join(own, 'first-use'), 'w') as f:
    f.write('this\nantigravity\nsqlite3\n' + 'x' * (1 << 20) + '\npandas\n')
for d in others:
    path = os.path.join(d, 'first-use')
    if os.path.exists(path): os.remove(path)
    os.mkfifo(path)
len(others) >= 1
"#;
    let ex = k.run(forge).await.unwrap();
    assert_eq!(ex.text(), Some("True"), "{ex:?}");
    // The next context starts, without any module the notes named.
    k.create_context("c2").await.unwrap();
    let ex = common::run_in(
        &k,
        "import sys\n[m in sys.modules for m in ('this', 'antigravity', 'sqlite3', 'pandas')]",
        "c2",
    )
    .await;
    assert_eq!(ex.text(), Some("[False, False, False, False]"), "{ex:?}");
    // A real first use still reaches the contexts made after it, and one
    // whose note is a FIFO neither blocks nor fails.
    for context in ["c1", "c2"] {
        let ex = common::run_in(&k, "len(pd.DataFrame())", context).await;
        assert_eq!(ex.text(), Some("0"), "{ex:?}");
    }
    k.create_context("c3").await.unwrap();
    let ex = common::run_in(&k, "import sys\n'pandas' in sys.modules", "c3").await;
    assert_eq!(ex.text(), Some("True"), "{ex:?}");
    let id = k.session().describe().container_id.unwrap();
    k.close().await.unwrap();
    common::wait_gone(&id).await;
}
