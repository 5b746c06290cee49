"""conf/databricks.yml and conf/spark-submit-daily.sh call what the wheel has, with options it knows.

Both are read as text (no Databricks, no cluster): the entry point each names must be one the wheel installs,
and every `--flag` passed to offsetlake must be an option of the click command it reaches.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def options_of(command: click.Command) -> set[str]:
    return {name for param in command.params if isinstance(param, click.Option) for name in param.opts}


def flags(arguments: list[str]) -> list[str]:
    """The `--flag` words of an argument list (`--flag=value` counts as --flag)."""
    return [a.split("=", 1)[0] for a in arguments if a.startswith("--")]


def script_target(name: str) -> object:
    """The function a [project.scripts] entry runs."""
    module, _, attribute = PYPROJECT["project"]["scripts"][name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def wheel_tasks() -> list[dict]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is a test extra: pip install -e '.[test]'")
    bundle = yaml.safe_load((REPO / "conf" / "databricks.yml").read_text())
    tasks = [task for job in bundle["resources"]["jobs"].values() for task in job["tasks"]
             if "python_wheel_task" in task]
    assert tasks, "no python_wheel_task in conf/databricks.yml"
    return tasks


def test_the_bundle_runs_an_entry_point_of_the_wheel_with_known_options():
    from jobs.cli import cli, main

    for task in wheel_tasks():
        wheel = task["python_wheel_task"]
        assert wheel["package_name"] == PYPROJECT["project"]["name"]
        assert wheel["entry_point"] in PYPROJECT["project"]["scripts"]
        assert script_target(wheel["entry_point"]) is main  # which runs the click group `cli`
        subcommand, *arguments = wheel["parameters"]
        assert subcommand in cli.commands, subcommand
        unknown = set(flags(arguments)) - options_of(cli.commands[subcommand])
        assert not unknown, f"not options of `offsetlake {subcommand}`: {sorted(unknown)}"
        assert {"--source", "--output", "--snapshot"} <= set(flags(arguments))
        assert any(lib.get("whl", "").endswith(".whl") for lib in task["libraries"])


def spark_submit_arguments() -> tuple[list[str], list[str], str]:
    """(spark-submit's options, the entry's arguments, the ENTRY assignment) of conf/spark-submit-daily.sh, each
    optional group of options (an array the script fills when its variable is set: `"${NAME[@]}"`) in its place."""
    text = (REPO / "conf" / "spark-submit-daily.sh").read_text()
    command = re.search(r'^exec "\$SPARK_SUBMIT" .*?(?<!\\)$', text.replace("\\\n", " "), re.M)
    assert command, 'no `exec "$SPARK_SUBMIT" ...` command'
    arrays = {name: shlex.split(words) for name, words in re.findall(r"^\s*([A-Z_]+)=\(([^()]+)\)$", text, re.M)
              if words.strip()}
    words = []
    for word in shlex.split(command.group(0))[2:]:
        array = re.fullmatch(r"\$\{([A-Z_]+)\[@\]\}", word)
        assert not array or arrays.get(array.group(1)), f"{word}: no non-empty {word[2:-4]}=(...) in the script"
        words += arrays[array.group(1)] if array else [word]
    entry = words.index("$ENTRY")
    assignment = re.search(r"^ENTRY=(.*)$", text, re.M)
    assert assignment, "no ENTRY= line"
    return words[:entry], words[entry + 1:], assignment.group(1)


def test_the_cron_script_submits_the_wheels_entry_with_rebuild_options():
    from jobs.cli import cli

    submit, arguments, entry = spark_submit_arguments()
    assert 'find_spec("jobs.__main__")' in entry  # the module spark-submit runs, from the installed package
    assert importlib.util.find_spec("jobs.__main__") is not None
    assert "jobs" in PYPROJECT["tool"]["setuptools"]["packages"]
    # jobs/__main__.py puts `rebuild` in front of its arguments: they are rebuild's options.
    from jobs.__main__ import rebuild_arguments

    assert rebuild_arguments(["--source", "s", "--debug", "-q"]) == ["--debug", "-q", "rebuild", "--source", "s"]
    unknown = set(flags(arguments)) - options_of(cli.commands["rebuild"])
    assert not unknown, f"not options of `offsetlake rebuild`: {sorted(unknown)}"
    assert {"--source", "--output", "--snapshot", "--as-of", "--kafka-config"} <= set(flags(arguments))
    assert "--packages" in submit and "--master" in submit  # spark-submit's own options stay before the entry


def test_the_cron_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(REPO / "conf" / "spark-submit-daily.sh")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
