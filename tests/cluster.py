"""A real Spark standalone cluster for the tests: a master and two workers, started from pyspark's own jars
(`bin/spark-class org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker`), on 127.0.0.1.

    cluster = StandaloneCluster(tmp_path)      # the master on 7077 when free, else on a port it picks
    cluster.start()                            # returns once the master has every worker ALIVE
    subprocess.run([cluster.spark_submit, "--master", cluster.master_url, ...], env=cluster.client_env())
    cluster.logs()                             # the tails of the master's, workers' and executors' logs
    cluster.stop()

Every port but the master's 7077 is picked by the JVM that listens on it (port 0) and read from the master's
log: a port chosen here and bound seconds later by a starting JVM can be taken meanwhile by another test
process, and Spark then silently moves to the next port.

Each worker has its own work directory (its executors' folders and logs) and scratch folder, one core and
1 GiB for executors. `client_env()` is the environment of a spark-submit against it: SPARK_HOME, 127.0.0.1, and
a client configuration folder (spark-defaults.conf, as a cluster's gateway machine has one) that sizes the
executors small (512 MiB, one core each) and asks for both workers' cores.

Nothing here reads the repository's code: the cluster's processes see neither PYTHONPATH nor any SPARK_* or
PYSPARK_* of the test process, so executors run whatever the submitted application names
(spark.pyspark.python: a virtualenv with the wheel).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

MASTER_PORT = 7077  # Spark's default: used when free
LOCALHOST = "127.0.0.1"
DAEMON_MEMORY = "256m"  # master and workers: they only keep track of applications
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
RUNNING: list["StandaloneCluster"] = []  # started and not stopped: the failure hook shows their logs


def spark_home() -> Path:
    """pip's pyspark bundles Spark: its package folder is SPARK_HOME (bin/spark-class, bin/spark-submit, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_missing() -> str | None:
    """Why no JVM can start here, or None."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return None
    return None if shutil.which("java") else "no Java: neither JAVA_HOME/bin/java nor java on PATH"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOCALHOST, port))
        except OSError:
            return False
        return True


def port_missing() -> str | None:
    """Why no port of 127.0.0.1 can be listened on, or None."""
    try:
        free_port()
    except OSError as e:
        return f"cannot listen on {LOCALHOST}: {e}"
    return None


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the test run's Python path and Spark settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH", "SPARK_"))}
    env.update(extra)
    return env


class StandaloneCluster:
    def __init__(self, base: Path, workers: int = 2) -> None:
        self.base = base
        self.home = spark_home()
        self.spark_submit = self.home / "bin" / "spark-submit"
        self.port = MASTER_PORT if port_is_free(MASTER_PORT) else 0  # 0 until the master says which it took
        self.webui_port = 0
        self.conf_dir = base / "conf"
        self.worker_dirs = [base / f"worker-{i}" for i in range(1, workers + 1)]
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.log_files: list[Path] = []
        self.started_s: float | None = None  # how long start() took
        self.peaks_mb: dict[str, int] = {}  # each JVM's peak resident memory (VmHWM), last seen
        self.peak_total_mb = 0  # the most the cluster's JVMs held at once (sampled every second)
        self.peak_with_python_mb = 0  # the same with the executors' Python workers
        self._sampler: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def master_url(self) -> str:
        return f"spark://{LOCALHOST}:{self.port}"

    @property
    def note(self) -> str:
        """What the master listens on, said once: 7077 was taken when it is not the port."""
        taken = "" if self.port == MASTER_PORT else f" ({MASTER_PORT} was taken)"
        return f"master {self.master_url}{taken}, web UI http://{LOCALHOST}:{self.webui_port}"

    # --- starting and stopping -------------------------------------------------------------------------

    def start(self, timeout_s: float = 180) -> "StandaloneCluster":
        started = time.monotonic()
        deadline = started + timeout_s
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        RUNNING.append(self)
        try:
            self._write_conf()
            self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", LOCALHOST, "--port",
                                    self.port, "--webui-port", 0])
            self.port, self.webui_port = self._wait_for_master_ports(deadline)
            self._write_conf()  # now with the master's URL, for the workers and the clients
            for i, work in enumerate(self.worker_dirs, 1):
                work.mkdir(parents=True, exist_ok=True)
                scratch = self.base / f"scratch-{i}"
                scratch.mkdir(exist_ok=True)
                self._launch(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", LOCALHOST,
                                             "--port", 0, "--webui-port", 0, "--cores", WORKER_CORES,
                                             "--memory", WORKER_MEMORY, "--work-dir", work, self.master_url],
                             SPARK_LOCAL_DIRS=str(scratch))
            self._wait_for_workers(deadline)
            self._sampler = threading.Thread(target=self._sample_memory, name="cluster-memory", daemon=True)
            self._sampler.start()
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - started
        return self

    def _write_conf(self) -> None:
        """spark-defaults.conf of the daemons and of the clients (`client_env`). The master reads it at start
        too: the REST submission server stays off (it would listen on a fixed port, 6066)."""
        (self.conf_dir / "spark-defaults.conf").write_text("\n".join([
            "spark.master.rest.enabled false",
            *([f"spark.master {self.master_url}"] if self.webui_port else []),
            f"spark.executor.memory {EXECUTOR_MEMORY}",
            f"spark.executor.cores {WORKER_CORES}",
            f"spark.cores.max {WORKER_CORES * len(self.worker_dirs)}",  # one executor on each worker
            "spark.driver.memory 1g",
            "",
        ]))

    def _launch(self, name: str, args: list, **env: str) -> None:
        log_file = self.base / f"{name}.log"
        self.log_files.append(log_file)
        with log_file.open("wb") as out:
            process = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), *map(str, args)], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.base, env=self.daemon_env(**env),
                start_new_session=True)  # its own process group: the worker's executors stop with it
        self.processes.append((name, process))

    def daemon_env(self, **extra: str) -> dict[str, str]:
        return clean_env(SPARK_HOME=str(self.home), SPARK_LOCAL_IP=LOCALHOST, SPARK_CONF_DIR=str(self.conf_dir),
                         SPARK_DAEMON_MEMORY=DAEMON_MEMORY, TMPDIR=str(self.base), **extra)

    def _check_alive(self) -> None:
        dead = [(name, p.returncode) for name, p in self.processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"the cluster's {dead[0][0]} exited with status {dead[0][1]}\n{self.logs()}")

    def _wait_for_master_ports(self, deadline: float) -> tuple[int, int]:
        """The master's RPC and web UI ports, from the lines its log prints once each is bound."""
        log = self.log_files[0]
        while time.monotonic() < deadline:
            self._check_alive()
            text = log.read_text(errors="replace") if log.exists() else ""
            rpc = re.search(r"Starting Spark master at spark://[^:\s]+:(\d+)", text)
            ui = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
            if rpc and ui:
                return int(rpc.group(1)), int(ui.group(1))
            time.sleep(0.2)
        raise RuntimeError(f"the master did not report its ports in time\n{self.logs()}")

    def _wait_for_workers(self, deadline: float) -> None:
        state: dict = {}
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                state = self.master_state()
            except OSError:
                state = {}
            if state.get("status") == "ALIVE" and len(self.alive_workers(state)) == len(self.worker_dirs):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the master did not report {len(self.worker_dirs)} ALIVE workers in time "
                           f"(last: {json.dumps(state)[:500]})\n{self.logs()}")

    def master_state(self) -> dict:
        """The master's web UI JSON: status, workers (each with its state), applications."""
        with urllib.request.urlopen(f"http://{LOCALHOST}:{self.webui_port}/json/", timeout=5) as r:
            return json.load(r)

    def alive_workers(self, state: dict | None = None) -> list[dict]:
        return [w for w in (state or self.master_state()).get("workers", []) if w.get("state") == "ALIVE"]

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM to each process group (a worker's kills its executors), then SIGKILL what is left."""
        self._stopping.set()
        if self._sampler is not None:
            self._sampler.join(5)
        for _, process in reversed(self.processes):
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, process in self.processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for _, process in self.processes:
            _signal(process, signal.SIGKILL)  # the group too: an executor that outlived its worker
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self in RUNNING:
            RUNNING.remove(self)

    # --- using it ------------------------------------------------------------------------------------

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment of a spark-submit against this cluster (its spark-defaults.conf sizes the executors;
        `--master` still names the cluster on the command line, as users write it)."""
        return clean_env(SPARK_HOME=str(self.home), SPARK_LOCAL_IP=LOCALHOST, SPARK_CONF_DIR=str(self.conf_dir),
                         **extra)

    def executor_logs(self) -> list[Path]:
        """Every executor's stderr and stdout, oldest first (WORK_DIR/<app>/<executor>/std*)."""
        found = [p for work in self.worker_dirs for p in work.glob("app-*/*/std*")]
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def logs(self, lines: int = 40, executors: int = 4) -> str:
        """The tail of each daemon's log and of the newest executors' logs."""
        parts = []
        for path in [*self.log_files, *self.executor_logs()[-executors:]]:
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as e:
                text = [f"(unreadable: {e})"]
            parts.append(f"----- {path} (last {lines} lines)\n" + "\n".join(text))
        return f"{self.note}\n" + "\n".join(parts)

    def running(self) -> dict[str, int]:
        """The cluster's running processes by name and pid: its JVMs (master, worker-N, worker-N/executor-PID)
        and the others (the executors' Python workers: .../python3.11-PID)."""
        found = {}
        for name, process in self.processes:
            if process.poll() is None:
                found[name] = process.pid
                for pid in _descendants(process.pid):
                    found[f"{name}/{'executor' if _is_java(pid) else _exe(pid)}-{pid}"] = pid
        return found

    def _sample_memory(self) -> None:
        while not self._stopping.wait(1.0):
            jvms = everything = 0
            for name, pid in self.running().items():
                status = _status_mb(pid)
                everything += status.get("VmRSS", 0)
                if name.count("/") == 0 or "/executor-" in name:
                    jvms += status.get("VmRSS", 0)
                    if "VmHWM" in status:
                        self.peaks_mb[name] = max(self.peaks_mb.get(name, 0), status["VmHWM"])
            self.peak_total_mb = max(self.peak_total_mb, jvms)
            self.peak_with_python_mb = max(self.peak_with_python_mb, everything)

    def memory_report(self) -> str:
        return (f"cluster JVMs' peak resident memory at once: {self.peak_total_mb} MiB "
                f"({self.peak_with_python_mb} MiB with the executors' Python workers); each JVM's peak: "
                + ", ".join(f"{n} {mb} MiB" for n, mb in sorted(self.peaks_mb.items())))


def _signal(process: subprocess.Popen, sig: int) -> None:
    """`sig` to the process group `process` leads (it was started in a session of its own)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(pid: int) -> list[int]:
    children = []
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        for task in tasks:
            children += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        return []
    return children + [d for c in children for d in _descendants(c)]


def _status_mb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in MiB (empty once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) // 1024 for line in status.splitlines()
            if line.startswith(("VmRSS:", "VmHWM:"))}


def _exe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name
    except OSError:
        return "gone"


def _is_java(pid: int) -> bool:
    return _exe(pid) == "java"
