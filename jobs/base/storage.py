"""Where offsetlake reads and writes: a location given as a local path or a URI, resolved once.

Spark reads and writes through Hadoop's filesystems, and is given the location as the user wrote it (`s3a://`,
`hdfs://`, `abfss://`, `dbfs:/`, a path). Everything else (the local runner's files, the staged tables, the run
record, the lock, delta-rs's commits, the reading commands) goes through this one layer: a pyarrow filesystem
and a path in it, and the URI and storage options delta-rs takes. Credentials come from the environment
(AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, ...) or from `--storage-option KEY=VALUE`, named as delta-rs
names them (AWS_ENDPOINT_URL, AWS_REGION, AZURE_STORAGE_ACCOUNT_NAME, ...); they are never printed.

A plain path is a local folder, relative to the caller's working folder. `dbfs:/x` and `/Volumes/...` are local
paths on a Databricks node (its FUSE mounts), and Spark's paths there as written.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from jobs.base.errors import BadInput, redact

# Schemes and what pyarrow and delta-rs call them.
_ARROW = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "abfs": "abfs", "abfss": "abfs", "hdfs": "hdfs"}
SCHEMES = ("file", *_ARROW, "dbfs")
# Storage options that say where or how to connect, as pyarrow's S3FileSystem takes them.
_S3 = {"AWS_ACCESS_KEY_ID": "access_key", "AWS_SECRET_ACCESS_KEY": "secret_key", "AWS_SESSION_TOKEN": "session_token",
       "AWS_REGION": "region", "AWS_DEFAULT_REGION": "region", "AWS_ENDPOINT_URL": "endpoint_override",
       "AWS_ENDPOINT": "endpoint_override"}
DELTA_RS_REFUSES = "^[]|"  # in a local path, delta-rs 1.x panics ("Invalid object store url")


@dataclass(frozen=True)
class Location:
    """A folder or file of offsetlake's: `uri` as Spark takes it, `path` in the filesystem `fs` resolves."""

    uri: str
    scheme: str  # "file" for a local path
    path: str
    options: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # storage options (delta-rs names)

    @classmethod
    def parse(cls, text: "str | os.PathLike", options: dict[str, str] | None = None, option: str = "--output",
              cwd: str | None = None) -> "Location":
        """`text` as a location: a URI of a known scheme, or a local path (relative: to `cwd`, default the
        working folder). BadInput for an unknown scheme."""
        text = os.fspath(text)
        found = tuple(sorted((options or {}).items()))
        scheme = urlsplit(text).scheme.lower() if "://" in text or text.startswith("dbfs:/") else ""
        if not scheme or len(scheme) == 1:  # a path (C: is a drive, not a scheme)
            path = os.path.abspath(os.path.join(cwd or os.getcwd(), text))
            return cls(path, "file", path, found)
        if scheme not in SCHEMES:
            raise BadInput(f"{named(option, text)}: unknown scheme {scheme}:// (expected a path or "
                           f"{', '.join(s + '://' for s in SCHEMES if s != 'dbfs')} or dbfs:/)")
        if scheme == "file":
            path = urlsplit(text).path or "/"
            return cls(path, "file", path, found)
        if scheme == "dbfs":  # the driver sees DBFS through its FUSE mount
            return cls(text, "dbfs", "/dbfs/" + text.split(":", 1)[1].lstrip("/"), found)
        parts = urlsplit(text)
        if scheme == "hdfs":  # hdfs:///x: the default namenode of the Hadoop configuration
            return cls(text.rstrip("/"), scheme, parts.path.rstrip("/") or "/", found)
        if not parts.netloc:
            raise BadInput(f"{named(option, text)}: no bucket, container or host after {scheme}://")
        return cls(text.rstrip("/"), scheme, f"{parts.netloc}{parts.path}".rstrip("/"), found)

    @property
    def hadoop_uri(self) -> str:
        """The location as Spark takes it: a local path as file:// (a bare path means fs.defaultFS to Hadoop,
        HDFS on most clusters), anything else as written."""
        return "file://" + self.path if self.scheme == "file" else self.uri

    @property
    def local(self) -> bool:
        return self.scheme in ("file", "dbfs")

    @property
    def local_path(self) -> Path:
        """The location as a path of this machine (a local location only)."""
        if not self.local:
            raise ValueError(f"{self.uri} is not a local path")
        return Path(self.path)

    @property
    def fs(self) -> Any:
        """The pyarrow filesystem `path` is in."""
        return filesystem(self.scheme, urlsplit(self.uri).netloc if self.scheme == "hdfs" else "", self.options)

    @property
    def delta_uri(self) -> str:
        """The location as delta-rs takes it: a local path, or the URI (s3a:// read as s3://). BadInput for a
        path delta-rs cannot parse (it panics, printing its own trace, on ^ [ ] | in a local path)."""
        if self.local:
            self.check_delta_path(str(self))
            return self.path
        return ("s3://" + self.path) if self.scheme in ("s3", "s3a") else self.uri

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The storage options for delta-rs (None: from the environment only)."""
        options = dict(self.options)
        if self.scheme in ("s3", "s3a") and options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            options.setdefault("AWS_ALLOW_HTTP", "true")
        return options or None

    def child(self, *names: str) -> "Location":
        sep = "/" if not self.uri.endswith("/") else ""
        return Location(self.uri + sep + "/".join(names), self.scheme, posixpath.join(self.path, *names),
                        self.options)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> "Location":
        return Location(self.uri.rsplit("/", 1)[0], self.scheme, posixpath.dirname(self.path), self.options)

    # --- files, through the filesystem ----------------------------------------------------------------

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return self.fs.get_file_info(self.path).type != FileType.NotFound

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return self.fs.get_file_info(self.path).type == FileType.Directory

    def mkdir(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def children(self) -> list["Location"]:
        """The entries of this folder (none when it does not exist)."""
        from pyarrow.fs import FileSelector

        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(FileSelector(self.path))
        return [self.child(posixpath.basename(i.path)) for i in sorted(infos, key=lambda i: i.path)]

    def files(self, pattern_start: str = "") -> Iterator["Location"]:
        """Every file under this folder whose name starts with `pattern_start`, at any depth."""
        from pyarrow.fs import FileSelector, FileType

        if not self.is_dir():
            return
        for info in self.fs.get_file_info(FileSelector(self.path, recursive=True)):
            if info.type == FileType.File and posixpath.basename(info.path).startswith(pattern_start):
                yield Location(self.uri + info.path[len(self.path):], self.scheme, info.path, self.options)

    def remove(self) -> None:
        """Remove this file or folder, if it is there."""
        from pyarrow.fs import FileType

        kind = self.fs.get_file_info(self.path).type
        if kind == FileType.Directory:
            self.fs.delete_dir(self.path)
        elif kind == FileType.File:
            self.fs.delete_file(self.path)

    def read_text(self) -> str:
        with self.fs.open_input_stream(self.path) as f:
            return f.read().decode()

    def write_text(self, text: str) -> None:
        with self.fs.open_output_stream(self.path) as f:
            f.write(text.encode())

    def mtime(self) -> float | None:
        info = self.fs.get_file_info(self.path)
        return None if info.mtime is None else info.mtime.timestamp()

    def check_delta_path(self, named_as: str) -> None:
        """BadInput (naming the location as `named_as`) when delta-rs cannot open a table under this path."""
        bad = sorted(set(self.path) & set(DELTA_RS_REFUSES)) if self.local else []
        if bad:
            raise BadInput(f"{named_as}: delta-rs cannot open a Delta table under a path with {' '.join(bad)} in "
                           f"it; choose another folder")

    def check_reachable(self, option: str, text: str, folder: bool = True) -> None:
        """Ask the filesystem about this location once: BadInput (one line, secrets redacted) when its bucket
        does not exist, the credentials are missing or refused, or the endpoint does not answer."""
        from pyarrow.fs import FileType

        bucket = self.path.split("/", 1)[0]
        try:
            info = self.fs.get_file_info(self.path)
            if self.scheme != "hdfs" and info.type == FileType.NotFound and \
                    self.fs.get_file_info(bucket).type == FileType.NotFound:
                raise BadInput(f"{named(option, text)}: bucket {bucket} does not exist")
        except BadInput:
            raise
        except Exception as e:  # pyarrow raises OSError subclasses carrying the store's message
            reason = redact(first_line(e), self.options)
            if self.scheme in ("s3", "s3a") and not _aws_credentials(dict(self.options)):
                reason = f"no AWS credentials found in the environment, --storage-option or ~/.aws ({reason})"
            raise BadInput(f"{named(option, text)}: {reason}") from None
        if folder and info.type == FileType.File:
            raise BadInput(f"{named(option, text)}: is a file, not a folder")

    def __str__(self) -> str:
        return self.uri


def named(option: str, text: str) -> str:
    """How an error names a location: `--output DIR`, or `--source parquet:DIR` for an option ending in `:`."""
    return f"{option}{text}" if option.endswith(":") else f"{option} {text}"


def _aws_credentials(options: dict[str, str]) -> bool:
    """Some source of AWS credentials is configured (keys, a profile, a web identity, a container role, files)."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
             "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
    files = (os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
             os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"))
    return any(options.get(n) or os.environ.get(n) for n in names) or \
        any(os.path.isfile(os.path.expanduser(f)) for f in files)


def first_line(error: BaseException, limit: int = 300) -> str:
    """An error as one line of at most `limit` characters, naming the operating system's cause where a library
    buried it (delta-rs: "Generic LocalFileSystem error: ... (os error 28)" is "No space left on device"), without
    the terminal colours delta-rs puts in its messages."""
    import re

    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split()) or type(error).__name__
    cause = os_cause(error)
    if cause is not None and cause.lower() not in text.lower():
        text = f"{cause}: {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def os_cause(error: BaseException) -> str | None:
    """The operating system's words for the errno behind `error` (or its causes), None when there is none."""
    import re

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno:
            return os.strerror(error.errno)
        found = re.search(r"os error (\d+)|errno[ =:]*(\d+)", str(error), re.IGNORECASE)
        if found:
            return os.strerror(int(found.group(1) or found.group(2)))
        error = error.__cause__ or error.__context__
    return None


def write_parquet(table: Any, where: Location, **options: Any) -> None:
    """`table` as the Parquet file `where` (options: pyarrow's ParquetWriter's). Where the write fails (a full
    disk), the file is closed once and removed: pyarrow's own write_table leaves its writer open, to be closed
    again, and fail again, when it is collected (`close_parquet`)."""
    import pyarrow.parquet as pq

    writer = pq.ParquetWriter(where.path, table.schema, filesystem=where.fs, **options)
    try:
        try:
            writer.write_table(table)
        finally:
            close_parquet(writer)
    except BaseException:
        with contextlib.suppress(OSError):  # the first failure is the one to tell
            where.remove()
        raise


def close_parquet(*writers: Any) -> None:
    """Close pyarrow ParquetWriters, each once even where closing fails (a full disk: the footer is written last),
    and raise the first failure once all are closed. A writer whose close failed would try again when collected,
    in __del__, whose failure Python prints as "Exception ignored" and a traceback beside the run's one line."""
    failure = None
    for writer in writers:
        try:
            writer.close()
        except Exception as e:
            writer.is_open = False
            failure = failure or e
    if failure is not None:
        raise failure


def os_detail(error: BaseException, cause: str) -> str:
    """`first_line(error)` without the operating system's `cause` and error numbers, which the caller names once."""
    import re

    text = re.sub(r"\s*(\[errno \d+\]|\(os error \d+\))", "", first_line(error, 1000), flags=re.IGNORECASE)
    text = text.replace(cause, "").replace(" ↳ ", ": ")  # delta-rs: "an error ↳ its cause ↳ ..."
    text = text.strip(" .:↳").removesuffix(". Detail").strip(" .:")  # pyarrow: "... Detail: <cause>"
    return text or type(error).__name__


def located(where: "Location | Path | str", options: dict[str, str] | None = None) -> Location:
    """`where` as a Location (a Path or a string is parsed: a local path or a URI)."""
    return where if isinstance(where, Location) else Location.parse(str(where), options)


_FILESYSTEMS: dict[tuple, Any] = {}


def filesystem(scheme: str, authority: str, options: tuple[tuple[str, str], ...]) -> Any:
    """The pyarrow filesystem of a scheme (one per process and settings)."""
    key = (scheme if scheme not in ("file", "dbfs") else "file", authority if scheme == "hdfs" else "", options)
    if key not in _FILESYSTEMS:
        _FILESYSTEMS[key] = _open_filesystem(scheme, authority, dict(options))
    return _FILESYSTEMS[key]


def _open_filesystem(scheme: str, authority: str, options: dict[str, str]) -> Any:
    import pyarrow.fs as pafs

    kind = _ARROW.get(scheme, "file")
    if kind == "file":
        return pafs.LocalFileSystem()
    if kind == "s3":
        settings: dict[str, Any] = {}
        for name, value in {**{k: v for k, v in os.environ.items() if k in _S3}, **options}.items():
            if name in _S3:
                settings[_S3[name]] = value
        endpoint = settings.get("endpoint_override")
        if endpoint and "://" in endpoint:
            parts = urlsplit(endpoint)
            settings["endpoint_override"] = parts.netloc
            settings["scheme"] = parts.scheme
        # An endpoint that does not answer is reported in seconds rather than after the SDK's long retries.
        settings.setdefault("connect_timeout", 3)
        settings.setdefault("request_timeout", 30)
        settings.setdefault("retry_strategy", pafs.AwsStandardS3RetryStrategy(max_attempts=2))
        return pafs.S3FileSystem(**settings)
    if kind == "gs":
        return pafs.GcsFileSystem()
    if kind == "abfs":
        account = options.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        host = authority.split("@", 1)[-1]
        if account is None and host.endswith(".dfs.core.windows.net"):
            account = host.split(".", 1)[0]
        key = options.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
        return pafs.AzureFileSystem(account_name=account, account_key=key)
    host, _, port = authority.partition(":")
    try:  # libhdfs, found through HADOOP_HOME, JAVA_HOME and a CLASSPATH of Hadoop's jars
        return pafs.HadoopFileSystem(host or "default", int(port or 0))
    except OSError as e:
        raise BadInput(f"hdfs://{authority}: cannot connect ({first_line(e)}); offsetlake reaches HDFS through "
                       f"libhdfs: set HADOOP_HOME and CLASSPATH=$(hadoop classpath --glob)") from None


def parse_storage_options(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`KEY=VALUE` pairs of --storage-option as a dict; BadInput for one without `=`."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--storage-option {key.strip() or pair!r}: expected KEY=VALUE")
        found[key.strip()] = value
    return found

