"""The compiled RoCE path is the project's own extension: setup builds it, so a test
run without it fails here, once, instead of skipping the data-path tests."""

from emulation.roce.native import compiled


def test_the_compiled_roce_path_is_built() -> None:
    assert compiled is not None, "emulation/roce/_roce.c is not built (scripts/setup.sh)"
    assert compiled.RP_STATE_BYTES > 0
