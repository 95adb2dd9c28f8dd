"""The driver -> rank 0 notice channel: private directory, secret-checked
lines, partial lines left for the next poll, and the environment hookup."""
import os
import stat

from tf_ring.elastic import hosts, notices
from tf_ring.elastic.errors import HostUpdateResult


def test_job_dir_is_private_and_secret_is_per_job(tmp_path):
    path, secret = notices.make_job_dir(str(tmp_path), "j1")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    _, other = notices.make_job_dir(str(tmp_path), "j2")
    assert len(secret) == 32 and secret != other


def test_source_reads_new_notices_once_and_ignores_wrong_secret(tmp_path):
    path, secret = notices.make_job_dir(str(tmp_path), "j")
    source = notices.FileNoticeSource(path, secret)
    assert source() == []  # no file yet
    notices.write_notice(path, secret, 5.5, HostUpdateResult.added)
    notices.write_notice(path, "not-the-secret", 6.0, HostUpdateResult.removed)
    assert source() == [(5.5, 2)]
    assert source() == []
    with open(os.path.join(path, notices.NOTICE_FILE), "a") as f:
        f.write("%s 7.0 1" % secret)  # no newline yet: a write in progress
    assert source() == []
    with open(os.path.join(path, notices.NOTICE_FILE), "a") as f:
        f.write("\n")
    assert source() == [(7.0, 1)]


def test_environment_installs_the_file_source(tmp_path, monkeypatch):
    path, secret = notices.make_job_dir(str(tmp_path), "j")
    assert notices.source_from_environment({}) is None
    monkeypatch.setenv("TF_RING_ELASTIC_DIR", path)
    monkeypatch.setenv("TF_RING_ELASTIC_SECRET", secret)
    monkeypatch.setattr(hosts, "_source", None)
    monkeypatch.setattr(hosts, "_from_environment_checked", False)
    notices.write_notice(path, secret, 1.0, HostUpdateResult.added)
    assert hosts.poll_host_updates() == [(1.0, 2)]
    hosts.set_host_update_source(None)  # an explicit choice wins over the environment
    notices.write_notice(path, secret, 2.0, HostUpdateResult.added)
    assert hosts.poll_host_updates() == []
