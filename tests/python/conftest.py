"""Fixtures of the Python package's tests: the library (BITSPLIT_LIBRARY, else the installed
package's), the bundled bible-base model as it is and converted by `bitsplit convert` (the CLI from
BITSPLIT_CLI, else build/bitsplit), skipping what cannot run."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"


def cli_path() -> str | None:
    given = os.environ.get("BITSPLIT_CLI")
    if given:
        return given if Path(given).exists() else None
    built = ROOT / "build" / "bitsplit"
    return str(built) if built.exists() else shutil.which("bitsplit")


@pytest.fixture(scope="session")
def bitsplit_module():
    bitsplit = pytest.importorskip("bitsplit")
    try:
        bitsplit._lib()
    except bitsplit.LoadError as e:
        pytest.skip(f"no libbitsplit: {e}")
    return bitsplit


def fixture_model(name: str) -> Path:
    path = MODELS / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def base_path() -> Path:
    return fixture_model("bible-base.gguf")


@pytest.fixture(scope="session")
def cli() -> str:
    path = cli_path()
    if path is None:
        pytest.skip("no bitsplit CLI (set BITSPLIT_CLI or build build/bitsplit)")
    return path


@pytest.fixture(scope="session")
def converted_path(base_path, cli, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "base.bitsplit.gguf"
    subprocess.run([cli, "convert", str(base_path), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def model(bitsplit_module, converted_path):
    """The converted base (decoded speculatively), shared by the tests that do not change it."""
    with bitsplit_module.Model(converted_path) as m:
        yield m


@pytest.fixture(scope="session")
def plain_model(bitsplit_module, base_path):
    with bitsplit_module.Model(base_path) as m:
        yield m
