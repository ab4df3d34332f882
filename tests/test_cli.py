"""The command line: exit codes, messages, default output path, nothing half-written.

Most tests drive the click group in-process with ``CliRunner``; those that check what only
a real process shows (the module entry point, shell completion, a recipe that would block a
read) run ``python -m aot.cli``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from aot.cli import HINT, main
from aot.cli.commands import cli
from aot.cli.options import Size
from aot.env import VARIABLES

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AOTC_CACHE_DIR": str(cache), "AOTC_NO_PROGRESS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "aot.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def invoke(args: list[str], cache: Path, **env: str) -> Result:
    """``aotc ARGS`` in this process; a traceback (any exception but the exit) fails the test."""
    environ = {"AOTC_CACHE_DIR": str(cache), "AOTC_NO_PROGRESS": "1", **env}
    r = CliRunner().invoke(cli, args, env=environ, prog_name="aotc")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_build_inspect_verify(recipe_dir: Path, tmp_path: Path, compile_cache: Path) -> None:
    r = run(["build", str(recipe_dir / "small.toml")], tmp_path, compile_cache)
    assert r.returncode == 0, r.stderr
    bundle = tmp_path / "artifacts" / "small-1.0.aotc"
    assert bundle.exists() and (tmp_path / "artifacts" / "small-1.0.report.md").exists()
    assert "wrote" in r.stdout and "report:" in r.stdout
    r = run(["inspect", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 0 and "kernel scale(" in r.stdout
    r = run(["verify", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 0 and r.stdout.startswith("OK")
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 0xFF
    bundle.write_bytes(bytes(data))
    r = run(["verify", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 3 and "fails its checksum" in r.stderr and "Traceback" not in r.stderr


def test_plan_prints_matrix(recipe_dir: Path, tmp_path: Path) -> None:
    r = invoke(["plan", str(recipe_dir / "small.toml")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert "matrix: 16 variants in all" in r.stdout
    # every candidate of both buckets is within the model's shortlist of 12: all 8
    # distinct most specialized variants; the heuristic's picks also come to 8 variants
    assert "without a GPU: 8 variants compiled for the learned cost model" in r.stdout
    assert "with --predict heuristic, 8 (the heuristic's pick" in r.stdout
    assert not (tmp_path / "c").exists()  # planning compiles nothing


def test_plan_lists_a_models_compilations(tmp_path: Path) -> None:
    r = invoke(["plan", str(ROOT / "recipes" / "layer.toml")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert "model layer (models/layer.py:make_layer, fp16, backend aoti" in r.stdout
    assert "buckets (12): batch ≤ [1, 4, 16, 32], seq ≤ [128, 512, 2048]; padded: batch, seq" in (
        r.stdout
    )
    assert "compilations: 24 = 12 buckets × 2 modes" in r.stdout and "(sm_90)" in r.stdout
    assert "matrix:" not in r.stdout  # no kernels, no kernel matrix
    assert not (tmp_path / "c").exists()


def test_bad_recipe_exit_2_and_nothing_written(recipe_dir: Path, tmp_path: Path) -> None:
    recipe = recipe_dir / "small.toml"
    recipe.write_text(recipe.read_text().replace('"H100"', '"H1OO"'))
    r = invoke(["build", str(recipe), "-o", str(tmp_path / "out" / "x.aotc")], tmp_path / "c")
    assert r.exit_code == 2
    assert "aotc: error: " in r.stderr
    assert "small.toml: [bundle].targets[1]: unknown GPU 'H1OO'" in r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def test_explicit_output_path(
    recipe_dir: Path, tmp_path: Path, compile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(compile_cache))
    out = tmp_path / "deep" / "dir" / "mine.aotc"
    assert main(["build", str(recipe_dir / "small.toml"), "-o", str(out), "--no-progress"]) == 0
    assert out.exists() and out.with_suffix(".report.md").exists()
    leftovers = [p for p in out.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_missing_bundle(tmp_path: Path) -> None:
    r = invoke(["inspect", str(tmp_path / "nope.aotc")], tmp_path)
    assert r.exit_code == 3 and "no such bundle file" in r.stderr


def test_usage_error_is_clicks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = invoke(["frobnicate"], tmp_path)
    assert r.exit_code == 2 and "Usage: aotc [OPTIONS] COMMAND" in r.stderr
    assert "No such command 'frobnicate'" in r.stderr
    # main() returns the code where click alone would exit the process.
    assert main(["build"]) == 2
    assert "Missing argument 'RECIPE'" in capsys.readouterr().err


def test_version_help_and_environment(tmp_path: Path) -> None:
    assert invoke(["--version"], tmp_path).stdout == "aotc 0.1.0\n"
    r = invoke(["--help"], tmp_path)
    assert r.exit_code == 0
    verbs = ["plan", "build", "tune", "merge", "merge-db", "push", "pull", "inspect", "verify"]
    assert set(verbs) <= set(cli.commands)
    for word in [*verbs, *VARIABLES, "_AOTC_COMPLETE=bash_source aotc"]:
        assert word in r.stdout, word
    assert invoke(["-h"], tmp_path).stdout == r.stdout


@pytest.mark.parametrize("value", ["x", "1.5", "0", "-3"])
def test_bad_env_var(tmp_path: Path, value: str) -> None:
    r = invoke(["plan", "x.toml"], tmp_path, AOTC_JOBS=value)
    assert r.exit_code == 2 and "AOTC_JOBS" in r.stderr


def test_bad_env_var_in_a_process(tmp_path: Path) -> None:
    env = {**os.environ, "AOTC_JOBS": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "aot.cli", "plan", "x.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "aotc: error: AOTC_JOBS=0: give 1 or more" in r.stderr


@pytest.mark.parametrize("verb", ["build", "tune"])
@pytest.mark.parametrize("jobs", ["0", "-3", "two"])
def test_jobs_must_be_positive(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str, jobs: str
) -> None:
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    r = invoke([verb, str(recipe_dir / "small.toml"), "-j", jobs], tmp_path / "c")
    assert r.exit_code == 2 and "Invalid value for '-j' / '--jobs'" in r.stderr
    assert "Usage: aotc " in r.stderr
    assert files_under(tmp_path) == before


def test_shared_options_are_on_every_command_that_wears_them() -> None:
    def options(verb: str) -> set[str]:
        return {o for p in cli.commands[verb].params for o in p.opts}

    for verb in ("build", "tune"):
        assert {"-j", "--jobs", "--no-progress"} <= options(verb), verb
    for verb in ("push", "pull", "inspect"):
        assert "--insecure" in options(verb), verb


# Output paths that cannot be written: refused before any work, naming the path and the fix,
# with nothing written (no bundle, report, report images, tuning database or compile cache).
# /proc takes no new files, even from root, so these cases hold whoever runs the tests.
BAD_OUTPUTS = [
    ("outdir", "-o {tmp}/outdir: is a folder; give a file path, e.g. -o {tmp}/outdir/small-1.0"),
    ("afile/x.aotc", "-o {tmp}/afile/x.aotc: {tmp}/afile is a file, not a folder"),
    ("afile/deeper/x.aotc", "{tmp}/afile is a file, not a folder; choose another path"),
    ("/proc/x.aotc", "-o /proc/x.aotc: cannot create files in /proc"),
    ("/proc/version", "-o /proc/version: cannot create files in /proc"),
    ("/proc/no/such/x.aotc", "-o /proc/no/such/x.aotc: cannot create folders in /proc"),
]


@pytest.mark.parametrize(("output", "message"), BAD_OUTPUTS, ids=[o for o, _ in BAD_OUTPUTS])
def test_build_refuses_an_output_it_cannot_write(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, message: str
) -> None:
    work = tmp_path / "work"
    (work / "outdir").mkdir(parents=True)
    (work / "afile").write_text("x")
    monkeypatch.chdir(work)
    before = files_under(work)
    out = output if output.startswith("/") else str(work / output)
    r = invoke(["build", str(recipe_dir / "small.toml"), "-o", out], tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert message.format(tmp=work) in r.stderr
    assert files_under(work) == before  # no outdir.report.md, no tuning database
    assert not (tmp_path / "c").exists()  # no compile started


def test_other_outputs_are_checked_before_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outdir").mkdir()
    (tmp_path / "afile").write_text("x")
    (tmp_path / "a.jsonl").write_text("")
    cases = [
        (["merge", "a.aotc", "b.aotc", "-o", "outdir"], "-o outdir: is a folder"),
        (["merge-db", "a.jsonl", "-o", "outdir"], "e.g. -o outdir/merged.tunedb.jsonl"),
        (["merge-db", "a.jsonl", "-o", "/proc/m.jsonl"], "cannot create files in /proc"),
        # Without the check this would reach the network: exit 4, port 9 refuses.
        (["pull", "oci://127.0.0.1:9/r:t", "-o", "afile/x.aotc"], "afile is a file, not a"),
        (["pull", "oci://127.0.0.1:9/r:t", "-o", "/proc"], "cannot create files in /proc"),
    ]
    before = files_under(tmp_path)
    for args, message in cases:
        r = invoke(args, tmp_path / "c")
        assert r.exit_code == 2 and message in r.stderr, (args, r.output)
    assert files_under(tmp_path) == before


def test_tune_refuses_a_database_it_cannot_write(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dbdir").mkdir()
    before = files_under(tmp_path)
    r = invoke(["tune", str(recipe_dir / "small.toml"), "--db", "dbdir"], tmp_path / "c")
    assert r.exit_code == 2 and "--db dbdir: is a folder; give a file path" in r.stderr
    assert files_under(tmp_path) == before


BAD_ARGUMENTS = [
    (["build", "{recipe}", "--shard", "1of3"], "--shard '1of3': expected I/N, e.g. --shard 2/3"),
    (["build", "{recipe}", "--shard", "4/3"], "--shard 4/3: I must be between 1 and N"),
    (["build", "{recipe}", "--shard", "0/3"], "--shard 0/3: I must be between 1 and N"),
    (["build", "{recipe}", "--targets", "sm_70"], "--targets sm_70: not a target of small.toml"),
    (["build", "{recipe}", "--targets", ","], "--targets: give one or more target names"),
    (["build", "{recipe}", "--model-workers", "0"], "Invalid value for '--model-workers': 0"),
    (["build", "{recipe}", "--model-device", "gpu"], "'gpu' is not one of 'auto', 'cuda', 'cpu'"),
    (["push", "b.aotc", "oci://h/r:t", "--chunk-size", "0"], "'0': give 1 byte or more"),
    (["push", "b.aotc", "oci://h/r:t", "--chunk-size", "-3M"], "'-3M' is not a size in bytes"),
    (["push", "b.aotc", "oci://h/r:t", "--chunk-size", "1.5M"], "'1.5M' is not a size in bytes"),
    (["push", "b.aotc", "oci://h/r:t", "--chunk-size", "M"], "'M' is not a size in bytes"),
    (["push", "b.aotc", "oci://h/r:t", "--chunk-size", "9" * 40], "is too large"),
    (["plan", "{dir}"], "Invalid value for 'RECIPE': '{dir}' is a folder; give the recipe's"),
    (["build", "{dir}/small.toml/x.toml"], "small.toml/x.toml': cannot read it (Not a directory)"),
    (["plan", "/dev/zero"], "'/dev/zero' is not a regular file; give the recipe's .toml file"),
    (["plan", "{dir}/nope.toml"], "aotc: error: {dir}/nope.toml: no such file"),
    (["merge", "-o", "m.aotc"], "Missing argument 'PART...'"),
    (["merge-db", "a.jsonl"], "Missing option '-o' / '--output'"),
]


@pytest.mark.parametrize(
    ("args", "message"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS]
)
def test_bad_arguments_exit_2_with_a_message(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    where = {"recipe": str(recipe_dir / "small.toml"), "dir": str(recipe_dir)}
    before = files_under(tmp_path)
    r = invoke([a.format(**where) for a in args], tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert message.format(**where) in r.stderr
    assert files_under(tmp_path) == before


def test_unreadable_recipe(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root reads any file, so the permission is taken away where the CLI asks for it.
    recipe = recipe_dir / "small.toml"
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: mode != os.R_OK and access(p, mode))
    r = invoke(["plan", str(recipe)], tmp_path / "c")
    assert r.exit_code == 2 and f"'{recipe}': cannot read it (permission denied)" in r.stderr


def test_a_fifo_recipe_is_refused_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "r.toml")  # reading it would wait for a writer for ever
    r = subprocess.run(
        [sys.executable, "-m", "aot.cli", "plan", "r.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "'r.toml' is not a regular file" in r.stderr


def test_core_errors_and_interrupts_keep_their_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aot import inspect
    from aot.errors import BadBundle

    def damaged(path: Path) -> str:
        raise BadBundle(f"{path}: damaged")

    monkeypatch.setattr(inspect, "verify", damaged)
    r = invoke(["verify", "x.aotc"], tmp_path)
    assert r.exit_code == 3 and r.stderr == "aotc: error: x.aotc: damaged\n"

    def interrupted(path: Path) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect, "verify", interrupted)
    r = invoke(["verify", "x.aotc"], tmp_path)
    assert r.exit_code == 130 and r.stderr == "aotc: interrupted; nothing was written\n"
    assert main(["verify", "x.aotc"]) == 130

    def ran_out(path: Path) -> str:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    monkeypatch.setattr(inspect, "verify", ran_out)  # click alone calls this an interrupt
    r = invoke(["verify", "x.aotc"], tmp_path)
    assert r.exit_code == 1 and r.stderr.startswith("aotc: error: unexpected end of data (")
    assert "interrupted" not in r.stderr


def test_without_click_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A loader-only install: aot.cli imports, and main() names the extra instead of a traceback.
    monkeypatch.setitem(sys.modules, "click", None)  # `import click` now fails
    monkeypatch.delitem(sys.modules, "aot.cli.commands")
    monkeypatch.delitem(sys.modules, "aot.cli.options")
    assert main(["plan", "x.toml"]) == 2
    assert capsys.readouterr().err == HINT + "\n"
    assert "pip install 'aotc[build]'" in HINT


def test_console_script_and_shell_completion(tmp_path: Path) -> None:
    script = shutil.which("aotc", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the aotc console script is not installed beside this Python")
    r = subprocess.run([script, "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "aotc 0.1.0\n"
    env = {**os.environ, "_AOTC_COMPLETE": "bash_source"}
    r = subprocess.run([script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0 and "_aotc_completion" in r.stdout
    env = {
        **os.environ,
        "_AOTC_COMPLETE": "bash_complete",
        "COMP_WORDS": "aotc mer",
        "COMP_CWORD": "1",
    }
    r = subprocess.run([script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.stdout.split() == ["plain,merge", "plain,merge-db"]
    env = {**env, "COMP_WORDS": "aotc build rec", "COMP_CWORD": "2"}
    r = subprocess.run([script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.stdout.split() == ["file,rec"]  # a recipe: the shell completes file names


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("65536", 65536),
        ("512K", 512 << 10),
        ("16M", 16 << 20),
        ("16mb", 16 << 20),
        ("1GiB", 1 << 30),
        (" 8M ", 8 << 20),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert Size().convert(text, None, None) == size


@pytest.mark.parametrize("text", ["0", "0M", "-1", "1.5M", "M", "", "16T", "²", "9" * 40])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(click.BadParameter):
        Size().convert(text, None, None)


def test_tune_only_names_kernels_the_recipe_has(recipe_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "x.aotc"
    recipe = str(recipe_dir / "tune.toml")
    r = invoke(["build", recipe, "-o", str(out), "--tune-only", "scale,nope"], tmp_path / "c")
    assert r.exit_code == 2
    assert "--tune-only names nope, which" in r.stderr and "its kernels: scale" in r.stderr
    r = invoke(["build", recipe, "-o", str(out), "--tune-only", "scale", "--no-tune"],
               tmp_path / "c")  # fmt: skip
    assert r.exit_code == 2 and "--tune-only and --no-tune contradict" in r.stderr
    r = invoke(["tune", recipe, "--db", str(out.with_suffix(".jsonl")), "--tune-only", "nope"],
               tmp_path / "c")  # fmt: skip
    assert r.exit_code == 2 and "--tune-only names nope" in r.stderr
    assert not out.parent.exists()


def test_plan_with_a_database_says_what_a_build_would_time_again(
    recipe_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "empty.tunedb.jsonl"
    db.write_text("")
    r = invoke(["plan", str(recipe_dir / "tune.toml"), "--db", str(db)], tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert f"tuning database {db}: 0 records; a GPU build reuses every one it reads" in r.stdout
    r = invoke(["plan", str(recipe_dir / "tune.toml"), "--db", str(tmp_path / "none")],
               tmp_path / "c")  # fmt: skip
    assert r.exit_code == 2 and "none" in r.stderr
