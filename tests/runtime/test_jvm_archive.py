"""The class-data archive of the JVMs offsetlake starts (jobs.runtime.jvm_archive)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from jobs.runtime.jvm_archive import ABANDONED_SECONDS, MAGIC, SWITCH, archive_flags, archive_key, archive_path, wait_for_archive

SETTINGS = {"spark.master": "local[*]"}


def _flag_path(flags: list[str], option: str) -> Path:
    (flag,) = flags
    name, _, path = flag.partition("=")
    assert name == option
    return Path(path)


def test_a_machine_without_an_archive_records_one_under_a_name_of_its_own(tmp_path):
    first = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:ArchiveClassesAtExit")
    second = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:ArchiveClassesAtExit")
    # Two JVMs started before either has written its archive never write the same file.
    assert first != second and first.parent == second.parent == tmp_path
    assert first.suffix == ".part" and first.exists()
    assert not archive_path(SETTINGS, tmp_path).exists()


def test_a_whole_part_is_adopted_and_every_later_jvm_starts_from_it(tmp_path):
    part = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:ArchiveClassesAtExit")
    unfinished = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:ArchiveClassesAtExit")
    part.write_bytes(MAGIC + b"classes")  # its JVM has exited: the header, written last, is there
    final = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:SharedArchiveFile")
    assert final == archive_path(SETTINGS, tmp_path) and final.read_bytes() == MAGIC + b"classes"
    assert not part.exists() and unfinished.exists()  # a JVM may still be writing that one
    unfinished.write_bytes(MAGIC + b"later")
    assert _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:SharedArchiveFile") == final
    assert not unfinished.exists() and final.read_bytes() == MAGIC + b"classes"  # a second whole one goes


def test_a_part_its_jvm_never_finished_is_removed_after_a_day(tmp_path):
    part = _flag_path(archive_flags(SETTINGS, tmp_path), "-XX:ArchiveClassesAtExit")
    day_ago = time.time() - ABANDONED_SECONDS - 60
    os.utime(part, (day_ago, day_ago))
    assert wait_for_archive(SETTINGS, 0, tmp_path) is None
    assert not part.exists()


def test_an_archive_is_keyed_by_the_classpath_settings():
    assert archive_key(SETTINGS) == archive_key({**SETTINGS, "spark.app.name": "other"})
    assert archive_key(SETTINGS) != archive_key({**SETTINGS, "spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"})


def test_switched_off_or_unwritable_there_are_no_flags(tmp_path, monkeypatch):
    monkeypatch.setenv(SWITCH, "off")
    assert archive_flags(SETTINGS, tmp_path) == []
    monkeypatch.delenv(SWITCH)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert archive_flags(SETTINGS, blocked / "offsetlake") == []


@pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"), reason="no java here")
def test_this_jdk_writes_an_archive_the_module_recognises_and_starts_from_it(tmp_path):
    """The flags and the header's magic, against the real JVM: it records, the part is adopted, it maps it."""
    java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME") else "java"
    record = archive_flags(SETTINGS, tmp_path)
    subprocess.run([java, *record, "-version"], check=True, capture_output=True, timeout=120)
    final = wait_for_archive(SETTINGS, 30, tmp_path)
    assert final is not None and final.read_bytes()[:len(MAGIC)] == MAGIC
    use = archive_flags(SETTINGS, tmp_path)
    assert use == [f"-XX:SharedArchiveFile={final}"]
    # -Xshare:on: a JVM that cannot map the archive fails instead of carrying on without it.
    done = subprocess.run([java, *use, "-Xshare:on", "-Xlog:cds=info", "-version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bench_records_the_archive_untimed_when_there_is_none(tmp_path, monkeypatch):
    from jobs.tools import bench
    from jobs.config import defaults

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    settings = defaults()["spark"]
    ran = []

    def timed(command):  # what the rebuild's JVM does: it records, and writes the part as it exits
        ran.append(command)
        _flag_path(archive_flags(settings), "-XX:ArchiveClassesAtExit").write_bytes(MAGIC + b"classes")
        return 1.0, ""

    monkeypatch.setattr(bench, "_timed", timed)
    archive = bench._with_jvm_archive(["rebuild"])
    assert ran == [["rebuild"]] and archive == archive_path(settings) and archive.parent == tmp_path / "offsetlake"
    assert bench._with_jvm_archive(["rebuild"]) == archive and len(ran) == 1  # there: nothing more is run
    monkeypatch.setenv(SWITCH, "off")
    assert bench._with_jvm_archive(["rebuild"]) is None and len(ran) == 1
