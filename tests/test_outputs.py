"""`bdh.outputs`: the one way outputs are written (checks before work, atomic files and folders, umask modes)."""

from __future__ import annotations

import os
import stat

import pytest

from bdh.errors import UserError
from bdh.outputs import (
    OutputError,
    atomic_file,
    atomic_folder,
    check_output,
    file_mode,
    folder_mode,
    write_bytes,
    write_text,
)


@pytest.fixture
def umask():
    """Set a umask for one test and restore the old one."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def test_output_error_is_a_user_error():
    assert issubclass(OutputError, UserError) and issubclass(UserError, ValueError)


def test_new_and_empty_targets_are_accepted(tmp_path):
    assert check_output(tmp_path / "new" / "file.txt") == tmp_path / "new" / "file.txt"
    (tmp_path / "empty").touch()
    check_output(tmp_path / "empty")
    (tmp_path / "dir").mkdir()
    check_output(tmp_path / "dir", folder=True)


def test_existing_nonempty_targets_need_overwrite(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(OutputError, match=r"--out .*precious.txt: exists; pass --overwrite"):
        check_output(tmp_path / "precious.txt")
    check_output(tmp_path / "precious.txt", overwrite=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(OutputError, match="add --resume"):
        check_output(tmp_path / "full", folder=True, how="add --resume to continue it")
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_a_file_where_a_folder_is_wanted_and_back(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match="not a folder"):
        check_output(tmp_path / "f", folder=True, overwrite=True)
    with pytest.raises(OutputError, match="is a folder"):
        check_output(tmp_path / "d", overwrite=True)
    with pytest.raises(OutputError, match="not a folder"):
        check_output(tmp_path / "f" / "inside.html")


def test_inputs_are_never_outputs_even_with_overwrite(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for target in (model, tmp_path, model / "config.json"):
        with pytest.raises(OutputError, match="input of this command"):
            check_output(target, overwrite=True, inputs=[model / "config.json"], folder=target.is_dir())
    # a relative spelling of the same folder is the same folder
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputError, match="is an input"):
        check_output("./model/../model", overwrite=True, inputs=[model], folder=True)
    check_output(model / "reports" / "viz.html", inputs=[model])  # beside the inputs, inside the folder: allowed


def test_a_symbolic_link_loop_is_one_line_as_output_and_as_a_locked_folder(tmp_path):
    from bdh.outputs import folder_lock

    (tmp_path / "loop").symlink_to("loop")
    for target in (tmp_path / "loop", tmp_path / "loop" / "inside"):
        with pytest.raises(OutputError, match="symbolic link that loops"):
            check_output(target, folder=True)
        with pytest.raises(OutputError, match="symbolic link that loops"), folder_lock(target):
            pass
    check_output(tmp_path / "new", inputs=[tmp_path / "loop"])  # an input that loops is its reader's to refuse


def test_a_file_that_cannot_be_put_in_place_is_named_never_its_temporary(tmp_path):
    (tmp_path / "report.md").mkdir()  # a folder where the file goes: the rename fails
    with pytest.raises(OutputError) as info:
        write_text(tmp_path / "report.md", "# report\n")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'report.md'}: not written") and ".tmp" not in message
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # the temporary removed


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_before_work(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="permission denied"):
            check_output(ro / "out.html")
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_files_and_folders_follow_the_umask(tmp_path, umask, mask):
    umask(mask)
    assert file_mode() == 0o666 & ~mask and folder_mode() == 0o777 & ~mask
    f = write_text(tmp_path / "a.txt", "hello")
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask
    with atomic_folder(tmp_path / "folder") as tmp:
        write_bytes(tmp / "b.bin", b"\x00\x01")
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((tmp_path / "folder" / "b.bin").stat().st_mode) == 0o666 & ~mask


def test_an_interrupted_file_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = write_text(tmp_path / "data.txt", "old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(path, "w", encoding="utf-8") as f:
            f.write("new, half written")
            raise KeyboardInterrupt
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]


def test_a_folder_is_swapped_in_whole(tmp_path):
    out = tmp_path / "model"
    with atomic_folder(out) as tmp:
        (tmp / "config.json").write_text("1")
        (tmp / "meta.json").write_text("stale")
    with atomic_folder(out) as tmp:  # the replacement has no meta.json: nothing stale survives
        (tmp / "config.json").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["config.json"] and (out / "config.json").read_text() == "2"
    with pytest.raises(RuntimeError):
        with atomic_folder(out) as tmp:
            (tmp / "config.json").write_text("3")
            raise RuntimeError("crash while writing")
    assert (out / "config.json").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left behind


def test_parents_are_made_and_a_file_in_the_way_is_one_error(tmp_path):
    write_text(tmp_path / "a" / "b" / "c.txt", "x")
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "x"
    with pytest.raises(OutputError, match="not a folder"):
        write_text(tmp_path / "a" / "b" / "c.txt" / "d.txt", "y")
