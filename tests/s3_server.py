"""A real S3-compatible server on 127.0.0.1 for the tests: moto's `moto_server`, its requests
counted from its access log (on a real bucket each request is latency and money)."""

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')


class S3Server:
    """`moto_server` on a free loopback port. `env` holds the standard AWS variables that
    point pyarrow and boto3 at it (endpoint, test credentials, region)."""

    def __init__(self, root: Path, port: int):
        self.log_path = root / f"moto-{port}.log"
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not self.requests() and time.monotonic() < deadline:
            try:
                self.client().list_buckets()
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def uri(self, bucket: str, path: str = "sweeps") -> str:
        """A storage URI in pyarrow's query form, naming this server."""
        return f"s3://{bucket}/{path}?endpoint_override={self.endpoint[7:]}&scheme=http"

    def bucket(self) -> str:
        """A new empty bucket."""
        name = f"sweeps-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server has answered so far."""
        self.log.flush()
        return REQUEST.findall(self.log_path.read_text())

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
