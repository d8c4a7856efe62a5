"""Shared pytest set-up for the dynaspec tests.

The tiny models are dominated by per-op overhead, and the test machine has few cores shared
with other jobs: one intra-op thread is several times faster than the default there (with
two threads on a loaded 2-core machine a tiny forward took ~60 ms instead of ~4 ms).

The suite is meant to run with `-W error::DeprecationWarning -W error::FutureWarning`. One
third-party warning is exempted: when a Hypothesis test fails, its pytest plugin imports
libcst, which trips mypy_extensions' TypedDict deprecation; as an error that would turn the
real failure report into an INTERNALERROR.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# Lets test modules `import tiny_models` however pytest was invoked (rootdir or tests/).
sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import DEVICES  # noqa: E402

torch.set_num_threads(1)

# As a mark, since pytest restores the warning filters around each test's whole protocol.
_LIBCST_IMPORT = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking a `device` argument runs on the CPU, and on the GPU when there is one."""
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(_LIBCST_IMPORT)


@pytest.fixture
def keep_thread_count():
    """For tests that load models (loading sets torch's thread count): give the other tests
    back the count they had."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in tiny target saved as a transformers folder (config.json, weights,
    tokenizer)."""
    from dynaspec.models.tiny import tiny_pair

    target, _, tokenizer = tiny_pair()
    folder = tmp_path_factory.mktemp("tiny-folder")
    target.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
