"""A clone that finds its own writer id on the remote says where the id comes from (found
by an audit: it blamed CTAPE_WRITER when the id came from a folder made again where a
removed copy was, with its path and inode back). Folder remote, real processes."""

from conftest import run_cli


def test_a_clone_names_where_its_writer_id_comes_from(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    env = {"CTAPE_WRITER": "sharedid01"}
    a = tmp_path / "A"
    run_cli("--dir", a, "init", env=env, check=True)
    run_cli("--dir", a, "append", "user", "--text", "hi", "-s", "chat", env=env, check=True)
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", env=env, check=True)
    run_cli("--dir", a, "push", env=env, check=True)
    p = run_cli("clone", f"file://{remote}", tmp_path / "B", env=env, check=True)
    err = p.stderr.decode()
    assert "writer id 'sharedid01'" in err and "(set by CTAPE_WRITER)" in err and "if it was removed" in err, err
    p = run_cli("clone", f"file://{remote}", tmp_path / "C", check=True)  # an id of its own: nothing to say
    assert b"writer id" not in p.stderr, p.stderr
