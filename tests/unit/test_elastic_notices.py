"""The driver <-> rank 0 control channel: the per-job secret proven both
ways before anything is said, notices handed out once, reports of the
shrunk size and of commits, what a stranger without the secret gets (nothing),
and the environment hookup of the notice source."""
import json
import socket
import struct

from tf_ring.elastic import control_client, hosts, notices
from tf_ring.plumbing import control_wire
from tf_ring.elastic.errors import HostUpdateResult
from tf_ring.elastic_driver.control_service import ControlService
from tf_ring.plumbing import endpoints


def service_and_client(secret="s3cret", client_secret=None):
    service = ControlService(secret, ["127.0.0.1"])
    env = dict(service.environment(), TF_RING_ELASTIC_SECRET=client_secret or secret)
    return service, control_client.from_environment(env)


def test_notices_reach_rank_0_once_and_a_new_world_starts_empty():
    service, client = service_and_client()
    try:
        assert client.notices() == []
        service.add_notice(5.5, HostUpdateResult.added)
        service.add_notice(6.0, HostUpdateResult.removed)
        assert client.notices() == [(5.5, 2), (6.0, 1)]
        assert client.notices() == []
        service.add_notice(7.0, HostUpdateResult.added)
        assert client.notices() == [(7.0, 2)]
        service.new_world()
        assert service.world_size is None
    finally:
        client.close()
        service.close()


def test_reports_of_size_and_commit_reach_the_launcher():
    service, client = service_and_client()
    try:
        assert service.world_size is None and service.committed == 0
        client.report_world_size(2)
        client.report_commit(7)
        client.report_commit(5)  # an older report never lowers it
        assert service.world_size == 2 and service.committed == 7
        assert service.refused == 0
    finally:
        client.close()
        service.close()


def test_shrink_reports_name_the_survivors_and_a_split_world_sums_its_fragments():
    service, client = service_and_client()
    try:
        assert service.survivors is None
        client.report_world_size(3, [0, 1, 3])  # rank 2 of 4 lost
        client.report_world_size(2, [0, 1])  # then rank 3: the later report replaces it
        assert service.world_size == 2 and service.survivors == {0, 1}
        service.new_world()
        # ULFM split a world of 3: ranks 0 and 1 each shrank to a world of one.
        client.report_world_size(1, [0])
        client.report_world_size(1, [1])
        assert service.world_size == 2 and service.survivors == {0, 1}
        client.report_world_size(2, [5])  # a size its list contradicts is refused
        assert service.world_size == 2 and service.survivors == {0, 1}
        assert service.refused >= 1
    finally:
        client.close()
        service.close()


def test_a_client_without_the_secret_learns_and_changes_nothing(capsys):
    service, client = service_and_client(client_secret="wrong")
    try:
        service.add_notice(1.0, HostUpdateResult.added)
        assert client.notices() == []  # the launcher refused it
        client.report_world_size(1)
        assert service.world_size is None
        assert "cannot reach tfringrun's control channel" in capsys.readouterr().err
        assert service.refused >= 1
    finally:
        client.close()
        service.close()


def _frame(payload):
    """A frame as the wire carries it before the proof: kind, length, payload."""
    return struct.pack(">cI", b"j", len(payload)) + payload


def _read_frame(sock):
    head = sock.recv(5, socket.MSG_WAITALL)
    if not head:
        return None
    return json.loads(sock.recv(struct.unpack(">cI", head)[1], socket.MSG_WAITALL))


def test_a_stranger_gets_only_a_nonce_and_garbage_is_refused():
    service = ControlService("s3cret", ["127.0.0.1"])
    try:
        for attempt in (b'{"op": "notices", "since": 0}', b"\xff\xfe not json",
                        json.dumps({"nonce": "n", "proof": "\u00e9" * 64}).encode()):
            with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
                assert set(_read_frame(sock)) == {"nonce"}
                sock.sendall(_frame(attempt))
                assert sock.recv(4096) == b""  # dropped without an answer
        assert service.refused == 3
    finally:
        service.close()


def test_a_fake_launcher_is_refused_by_the_rank():
    """Something listening where the rank looks, without the secret, cannot
    hand rank 0 notices: its proof fails."""
    fake = socket.socket()
    fake.bind(("127.0.0.1", 0))
    fake.listen(1)
    client = control_client.from_environment({
        control_wire.ADDRESS_ENV: endpoints.format_endpoint("0" * 32, ["127.0.0.1"],
                                                            fake.getsockname()[1]),
        control_wire.SECRET_ENV: "s3cret"})

    def serve():
        conn, _ = fake.accept()
        fake.close()  # the client's retry finds nobody
        with conn:
            conn.sendall(_frame(json.dumps({"nonce": "ab" * 16}).encode()))
            _read_frame(conn)
            conn.sendall(_frame(json.dumps({"proof": "0" * 64}).encode()))
            conn.sendall(_frame(b'{"notices": [[1.0, 2]], "next": 1}'))
    import threading
    threading.Thread(target=serve, daemon=True).start()
    try:
        assert client.notices() == []
    finally:
        client.close()
        fake.close()


def test_environment_installs_the_service_source(monkeypatch):
    service = ControlService("s3cret", ["127.0.0.1"])
    try:
        assert notices.source_from_environment({}) is None
        for key, value in dict(service.environment(), TF_RING_ELASTIC_SECRET="s3cret").items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(control_client, "_client_checked", False)
        monkeypatch.setattr(hosts, "_source", None)
        monkeypatch.setattr(hosts, "_from_environment_checked", False)
        service.add_notice(1.0, HostUpdateResult.added)
        assert hosts.poll_host_updates() == [(1.0, 2)]
        hosts.set_host_update_source(None)  # an explicit choice wins over the environment
        service.add_notice(2.0, HostUpdateResult.added)
        assert hosts.poll_host_updates() == []
    finally:
        control_client.from_environment().close()
        service.close()


def test_rank_0_asks_at_most_every_poll_interval():
    asked = []

    class Client:
        def notices(self):
            asked.append(1)
            return [(1.0, 2)]

    now = [0.0]
    source = notices.ServiceNoticeSource(Client(), clock=lambda: now[0])
    assert source() == [(1.0, 2)]
    now[0] += notices.MIN_POLL_INTERVAL_S / 2
    assert source() == []
    now[0] += notices.MIN_POLL_INTERVAL_S
    assert source() == [(1.0, 2)] and len(asked) == 2
