"""moto's S3 server on 127.0.0.1, with credentials checked as S3 checks them, for tests of URI locations.

    with S3Server.start() as s3:
        s3.env            # AWS_* variables of a user allowed everything (and no instance metadata lookups)
        s3.options        # ["--storage-option", "AWS_ENDPOINT_URL=http://127.0.0.1:PORT"]
        s3.fs             # a pyarrow S3FileSystem on the server, as that user

moto checks signatures once its first INITIAL_NO_AUTH_ACTION_COUNT requests are done: those create the
user, its policy, its access key and the bucket; every later request needs that key.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

REGION = "us-east-1"
SETUP_REQUESTS = 4  # create_user, put_user_policy, create_access_key, create_bucket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    process: subprocess.Popen
    endpoint: str
    bucket: str
    key_id: str
    secret: str
    log: str

    @classmethod
    def start(cls, log_path: str, bucket: str = "lake") -> "S3Server":
        # Port 0: the server picks a free port and prints it; a port chosen here could be taken by another test
        # process before the server binds it.
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                                       stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while True:
            running = re.search(r"Running on (http://127\.0\.0\.1:\d+)", open(log_path, errors="replace").read())
            if running:
                try:
                    urllib.request.urlopen(f"{running.group(1)}/moto-api/", timeout=2)
                    break
                except OSError:
                    pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto's S3 server did not start: {open(log_path).read()[-2000:]}")
            time.sleep(0.2)
        endpoint = running.group(1)
        import boto3

        anyone = dict(endpoint_url=endpoint, region_name=REGION, aws_access_key_id="setup",
                      aws_secret_access_key="setup")
        iam = boto3.client("iam", **anyone)
        iam.create_user(UserName="offsetlake")
        iam.put_user_policy(UserName="offsetlake", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="offsetlake")["AccessKey"]
        boto3.client("s3", **{**anyone, "aws_access_key_id": key["AccessKeyId"],
                              "aws_secret_access_key": key["SecretAccessKey"]}).create_bucket(Bucket=bucket)
        return cls(process, endpoint, bucket, key["AccessKeyId"], key["SecretAccessKey"], log_path)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process that reaches the server as the allowed user."""
        return {**no_credentials(), "AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_REGION": REGION}

    @property
    def options(self) -> list[str]:
        return ["--storage-option", f"AWS_ENDPOINT_URL={self.endpoint}"]

    @property
    def storage(self) -> dict[str, str]:
        """The storage options of a Location (with the credentials, for a test's own reads)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": REGION}

    @property
    def fs(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key=self.key_id, secret_key=self.secret, region=REGION,
                                 endpoint_override=self.endpoint.removeprefix("http://"), scheme="http")

    def keys(self) -> list[str]:
        """Every object in the bucket."""
        from pyarrow.fs import FileSelector, FileType

        infos = self.fs.get_file_info(FileSelector(self.bucket, recursive=True))
        return sorted(i.path for i in infos if i.type == FileType.File)


def no_credentials() -> dict[str, str]:
    """This process's environment without AWS credentials, and without the instance metadata lookup the SDKs
    make when they find none (it would wait for a timeout off EC2)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env
