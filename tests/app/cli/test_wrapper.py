"""The first run: the `qlwfw` wrapper, its help, caller-relative paths, the server install, packaging."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WRAPPER = REPO / "qlwfw"


def wrapper(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(WRAPPER), *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=300, check=False)


def test_help_lists_the_wrapper_and_every_qlwf_command(tmp_path: Path) -> None:
    out = wrapper("--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for word in ("check", "test", "install-postgres", "oracle", "conform", "replay", "prove", "explore"):
        assert f"  {word}" in out.stdout, word


def test_a_driver_command_runs_in_qlwfs_environment(tmp_path: Path) -> None:
    """`python` in a --driver command is the venv's, whatever python the caller's PATH finds first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bare = bin_dir / "python"  # a python without qlwf installed, first on the caller's PATH
    bare.write_text("#!/bin/sh\necho 'the caller python ran' >&2\nexit 9\n", encoding="utf-8")
    bare.chmod(0o755)
    out = wrapper("conform", "--backend", "exec", "--driver", "python -m qlwf.impl.sqlite.driver", "--traces", "1",
                  cwd=tmp_path, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout + out.stderr
    assert "the caller python ran" not in out.stderr


def test_check_help_lists_checks_profiles_exit_codes_and_postgres(tmp_path: Path) -> None:
    from qlwf.gate.checks import CHECKS

    out = wrapper("check", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for check in CHECKS:
        assert check.name in out.stdout
    for text in ("--quick", "exit codes", "QLWF_PG_DSN", "--skip postgres", "unknown"):
        assert text in out.stdout


def test_relative_paths_are_the_callers(tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "frontier-diamond-root-succeeded.json", tmp_path / "snap.json")
    out = wrapper("oracle", "frontier", "snap.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('{"schema":')
    report = wrapper("check", "--only", "spec-vectors", "--json", "gate.json", cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    assert (tmp_path / "gate.json").is_file() and not (REPO / "gate.json").exists()
    # progress goes to stderr, the report to stdout
    assert "qlwf check [1/1] spec-vectors: started" in report.stderr
    assert "started" not in report.stdout


def _fake_apt(tmp_path: Path, exit_code: int) -> tuple[dict[str, str], Path, Path]:
    """A fake apt-get on PATH that records the policy-rc.d it sees, and exits with `exit_code`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen-policy"
    policy = tmp_path / "policy-rc.d"
    fake = bin_dir / "apt-get"
    fake.write_text(f'#!/bin/sh\ncat "{policy}" > "{seen}"\nexit {exit_code}\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "QLWFW_POLICY_RC_D": str(policy)}
    return env, policy, seen


def test_server_install_keeps_an_existing_policy_and_reports_a_failed_install(tmp_path: Path) -> None:
    env, policy, seen = _fake_apt(tmp_path, 100)
    policy.write_text("#!/bin/sh\n# the machine's own policy\nexit 0\n")
    original = policy.read_text()
    out = wrapper("install-postgres", cwd=tmp_path, env=env)
    assert out.returncode == 100
    assert "installing the postgresql package failed (apt-get exit 100)" in out.stderr
    assert "exit 101" in seen.read_text()  # during the install, services were kept from starting
    assert policy.read_text() == original  # and the machine's policy is back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "policy-rc.d", "seen-policy"]


def test_server_install_removes_the_policy_it_created(tmp_path: Path) -> None:
    env, policy, seen = _fake_apt(tmp_path, 0)
    out = wrapper("install-postgres", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "exit 101" in seen.read_text()
    assert not policy.exists()


@pytest.mark.parametrize("uv_works", [True, False])
def test_the_first_run_installs_with_uv_and_falls_back_to_pip(tmp_path: Path, uv_works: bool) -> None:
    """Decisions Q-88, on a copy of the wrapper whose interpreter is a fake that logs each call: uv
    installs the project when it can; when it cannot, pip does, and the wrapper says so."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(WRAPPER, repo / "qlwfw")
    shutil.copy2(REPO / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy2(REPO / "requirements.lock", repo / "requirements.lock")
    log = tmp_path / "calls"
    fake_python = tmp_path / "python"
    # `-m venv DIR` makes DIR/bin/python (this same fake) and a DIR/bin/qlwf that answers --help
    fake_python.write_text(f"""#!/bin/sh
echo "$*" >> {log}
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && printf '#!/bin/sh\\necho qlwf-help\\n' > "$3/bin/qlwf"
  chmod +x "$3/bin/qlwf"
fi
if [ "$1 $2" = "-m uv" ] && [ "$QLWFW_TEST_UV" != works ]; then exit 2; fi
exit 0
""")
    fake_python.chmod(0o755)
    out = subprocess.run([str(repo / "qlwfw"), "--help"], capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "PYTHON": str(fake_python), "QLWFW_TEST_UV": "works" if uv_works else ""})
    assert out.returncode == 0, out.stderr
    assert "qlwf-help" in out.stdout
    calls = log.read_text().splitlines()
    venv = repo / ".venv"
    uv = f"-m uv pip install -q --native-tls --compile-bytecode --python {venv}/bin/python"
    expected = [f"-m venv {venv}", "-m pip install -qq --disable-pip-version-check uv"]
    if uv_works:  # the locked dependencies with their hashes, then qlwf alone (decisions Q-138)
        expected += [f"{uv} --require-hashes -r {repo}/requirements.lock", f"{uv} --no-deps -e {repo}"]
    else:
        expected += [f"{uv} --require-hashes -r {repo}/requirements.lock",
                     "-m pip install -qq --disable-pip-version-check --upgrade pip",
                     f"-m pip install -qq --disable-pip-version-check --require-hashes -r {repo}/requirements.lock",
                     f"-m pip install -qq --disable-pip-version-check --no-deps -e {repo}"]
    assert calls == expected
    assert ("could not install with uv; installing with pip" in out.stderr) is not uv_works
    assert (venv / ".qlwf-installed").is_file()  # the next run installs nothing
    subprocess.run([str(repo / "qlwfw"), "--help"], capture_output=True, timeout=60, check=True,
                   env={**os.environ, "PYTHON": str(fake_python)})
    assert log.read_text().splitlines() == calls


def test_the_lock_pins_every_dependency_within_pyprojects_minimums() -> None:
    """requirements.lock (decisions Q-138) holds one exact, hashed version of every dependency that
    pyproject.toml names for the installed extras, and that version satisfies pyproject's minimum:
    a dependency added without `./qlwfw lock` fails here, not on a fresh machine."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for extra in ("dev", "cluster") for r in project["optional-dependencies"][extra]]
    pinned: dict[str, list[str]] = {}
    lines = (REPO / "requirements.lock").read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            spec = line.split(";")[0].split()[0]
            name, _, version = spec.partition("==")
            assert version, f"not an exact pin: {line}"
            assert "--hash=sha256:" in line, f"no hash: {line}"
            pinned.setdefault(canonicalize_name(name.split("[")[0]), []).append(version)
    for req in wanted:
        versions = pinned.get(canonicalize_name(req.name))
        assert versions, f"{req.name} is in pyproject.toml but not in requirements.lock (run ./qlwfw lock)"
        assert all(req.specifier.contains(v, prereleases=True) for v in versions), (req, versions)


def test_the_package_builds_quietly_with_its_data(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w",
                          str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0 and "No matching distribution" in out.stderr:
        pytest.skip("no package index reachable for the build requirements")
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stdout + out.stderr, out.stdout + out.stderr
    (wheel,) = tmp_path.glob("qlwf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for required in ("qlwf/impl/sqlite/schema.sql", "qlwf/impl/postgres/schema.sql",
                     "qlwf/conformance/checkers/explore_manifest.json", "qlwf/campaign/shards.py",
                     "qlwf/conformance/stateful/machine.py"):
        assert required in names
    assert any(n.startswith("qlwf/conformance/traces/corpus/") and n.endswith(".json") for n in names)
