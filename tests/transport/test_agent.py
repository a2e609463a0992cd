"""``dstp agent``: ``dstp get`` handed to a long-lived process over a Unix socket, run as a user would.

Real ``dstp get`` processes talk to an agent (a real ``dstp agent`` process, or one in this process
where a test needs to hold a download at a gate) which downloads from a real server on loopback.
The oracle for every byte is the published file itself.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dstp.agent import AGENT_ENV, Agent, _Clients
from dstp.transport.wire.crc import crc32c
from dstp.transport.client.files import PARTIAL_SUFFIX, STATE_SUFFIX
from agents import DSTP, agent_env, gated_agent, refusing_agent

NAME = "ccm3_1990-01.nc"


def _get(server: str, out: Path, sock: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSTP, "get", "ccm3", NAME, "-o", str(out), "--server", server, *extra],
                          env=agent_env(sock), capture_output=True, text=True, timeout=120)


def test_get_through_the_agent_is_the_file_and_reuses_the_agents_client(data_server, catalog_root, tmp_path,
                                                                          agent_process) -> None:
    sock, proc = agent_process
    source = (catalog_root / "ccm3" / NAME).read_bytes()
    server = data_server.endpoints.grpc
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    said = []
    for i, transport in enumerate(["striped", "striped", "auto"]):
        out = tmp_path / f"copy{i}.nc"
        run = _get(server, out, sock, "--transport", transport, "--streams", "2", "-v")
        assert run.returncode == 0, run.stderr
        assert out.read_bytes() == source
        assert f"CRC-32C {crc32c(source):08x} verified" in run.stderr
        said.append(next(line for line in run.stderr.splitlines() if line.startswith("agent: ")))
        assert not list(tmp_path.glob("*" + STATE_SUFFIX + "*"))
    assert said[0].endswith(f"on a new client of {server}")
    assert all(s.endswith("on a client kept from an earlier request") for s in said[1:]), said
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped after 3 request(s)" in err
    assert not sock.exists()


def test_a_get_through_the_agent_loads_no_grpc(data_server, catalog_root, tmp_path, agent_process) -> None:
    sock, _ = agent_process
    out = tmp_path / "light.nc"
    program = ("import sys\nfrom dstp.cli import main\n"
               f"code = main(['get', 'ccm3', {NAME!r}, '-o', {str(out)!r}, '--server', "
               f"{data_server.endpoints.grpc!r}])\n"
               "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google', 'pyarrow', 'numpy'))\n"
               "print(code, heavy)\n")
    run = subprocess.run([sys.executable, "-c", program], env=agent_env(sock), capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "0 []", run.stdout + run.stderr
    assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()


def test_without_an_agent_at_the_socket_get_says_so_and_downloads_itself(data_server, catalog_root, tmp_path) -> None:
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))  # a socket file nobody listens on: an agent that died
    s.close()
    for sock in (tmp_path / "none.sock", stale):
        out = tmp_path / "direct.nc"
        run = _get(data_server.endpoints.grpc, out, sock)
        assert run.returncode == 0, run.stderr
        assert f"no agent answers at {sock}" in run.stderr and "downloading without it" in run.stderr
        assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()
        out.unlink()


def test_an_agent_of_another_release_that_refuses_the_download_is_passed_over(data_server, catalog_root,
                                                                               tmp_path) -> None:
    sock = tmp_path / "newer.sock"
    out = tmp_path / "itself.nc"
    with refusing_agent(sock, "not a dstp agent request of protocol 2 (is this dstp older or newer than the "
                              "agent? restart the agent)"):
        run = _get(data_server.endpoints.grpc, out, sock)
    assert run.returncode == 0, run.stderr
    assert f"dstp: the agent at {sock} refused the download (not a dstp agent request of protocol 2" in run.stderr
    assert "downloading without it" in run.stderr
    assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()


def test_an_error_says_what_it_says_without_the_agent(data_server, tmp_path, agent_process) -> None:
    sock, proc = agent_process
    server = data_server.endpoints.grpc
    for args in (["ccm3", "no_such_file.nc"], ["no_such_dataset", NAME]):
        cmd = [*DSTP, "get", *args, "-o", str(tmp_path / "x"), "--server", server]
        via = subprocess.run(cmd, env=agent_env(sock), capture_output=True, text=True, timeout=60)
        direct = subprocess.run([*cmd, "--no-agent"], env=agent_env(sock), capture_output=True, text=True, timeout=60)
        assert via.returncode == direct.returncode == 1
        assert via.stderr.startswith("dstp: error: ") and via.stderr == direct.stderr
        assert not (tmp_path / "x").exists()
    assert proc.poll() is None


def _ask(sock: Path, data: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall(data)
        return dict(json.loads(s.makefile("rb").readline()))


@pytest.mark.parametrize("data, says", [
    (b"not json\n", "not JSON"),
    (b'{"dstp_agent": 99, "op": "get"}\n', "restart the agent"),
    (b'{"dstp_agent": 1, "op": "rm"}\n', "unknown op 'rm'"),
    (b'{"dstp_agent": 1, "op": "get", "server": "h:1", "dataset": "d", "file": "f", "out": "rel/x"}\n',
     "absolute path"),
    (b'{"dstp_agent": 1, "op": "get", "dataset": "d"}\n', "'server' missing"),
    (b"x" * 70_000, "longer than"),
])
def test_a_bad_request_gets_a_clear_error_and_the_agent_keeps_serving(data_server, catalog_root, tmp_path,
                                                                       agent_process, data, says) -> None:
    sock, proc = agent_process
    answer = _ask(sock, data)
    assert "bad request to the agent" in answer["error"] and says in answer["error"], answer
    out = tmp_path / "after.nc"
    assert _get(data_server.endpoints.grpc, out, sock).returncode == 0
    assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()


def test_a_second_agent_on_the_same_socket_is_refused_and_a_stale_socket_replaced(tmp_path, agent_process) -> None:
    sock, _ = agent_process
    again = subprocess.run([*DSTP, "agent", "--socket", str(sock)], env=agent_env(""), capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 1 and f"an agent already listens at {sock}" in again.stderr
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()
    with Agent(stale, connect=lambda *a, **k: None):
        assert _ask(stale, b"{}\n")["error"].startswith("bad request")


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_stopping_a_get_stops_it_in_the_agent_and_the_next_get_resumes(own_server, catalog_root, tmp_path,
                                                                        sig, status, said) -> None:
    """Ctrl-C (or SIGTERM) on `dstp get` stops the download in the agent, which keeps what arrived."""
    data_server = own_server
    sock = tmp_path / "agent.sock"
    out = tmp_path / "big.nc"
    source = (catalog_root / "ccm3" / NAME).read_bytes()
    argv = ["get", "ccm3", NAME, "-o", str(out), "--server", data_server.endpoints.grpc, "--transport", "striped",
            "--streams", "1"]
    with gated_agent(sock, tmp_path, "left; stopping at the next block") as (agent, stop):
        code, err = stop(argv, sig)
        assert code == status, err
        assert f"dstp: {said}; {out} was not written; what arrived is kept in {out.name}{PARTIAL_SUFFIX}" in err
        assert not out.exists() and (tmp_path / (out.name + STATE_SUFFIX)).exists()
        again = _get(data_server.endpoints.grpc, out, sock, "--transport", "striped", "--streams", "1")
        assert agent._outputs == {}  # no entry is kept per output once its requests are answered
    assert again.returncode == 0, again.stderr
    assert out.read_bytes() == source
    resumed = int(again.stderr.split("resumed after ")[1].split(" bytes")[0].replace(",", ""))
    assert 0 < resumed < len(source)


@pytest.mark.parametrize("said", [b"", b'{"stop": "terminated"}\n'])
def test_a_caller_that_left_is_marked_gone_before_the_log_says_so(said: bytes) -> None:
    """Whoever sees "stopping at the next block" in the log may let the next block through: the download must
    already know its caller left (a test opened its gate on that line, and under load the download finished)."""
    import logging

    from dstp.agent import _Watcher

    ours, theirs = socket.socketpair()
    seen: list[bool] = []
    watcher: Any = None

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "stopping at the next" in record.getMessage():
                seen.append(watcher.gone.is_set())

    log = logging.getLogger("dstp.agent")
    handler, level = Seen(logging.INFO), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        watcher = _Watcher(ours, lambda answer: None, False, Path("out.nc"))
        theirs.sendall(said)
        theirs.shutdown(socket.SHUT_WR)
        assert watcher.gone.wait(30)
        watcher.close()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        theirs.close()
        ours.close()
    assert seen == [True]


def test_kept_clients_are_closed_once_unused_for_their_idle_time() -> None:
    now = [0.0]
    closed: list[str] = []

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    clients = _Clients(lambda server, **kw: Client(server), idle_s=60.0, clock=lambda: now[0])
    a, kept = clients.take(("a:1", "", False, ""))
    assert not kept
    b, _ = clients.take(("b:1", "", False, ""))
    clients.give(("a:1", "", False, ""), a)
    now[0] = 30.0
    clients.give(("b:1", "", False, ""), b)
    again, kept = clients.take(("a:1", "", False, ""))
    assert again is a and kept
    clients.give(("a:1", "", False, ""), a)  # used again at 30 s
    now[0] = 89.0
    assert clients.reap() == 0 and closed == []
    now[0] = 90.0
    assert clients.reap() == 2 and sorted(closed) == ["a:1", "b:1"] and clients.idle() == 0


def test_a_background_agent_prints_what_to_eval_and_serves_until_killed(data_server, catalog_root, tmp_path) -> None:
    sock = tmp_path / "bg" / "agent.sock"
    started = subprocess.run([*DSTP, "agent", "--background", "--socket", str(sock)], env=agent_env(""),
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    lines = started.stdout.splitlines()
    assert lines[0] == f"export {AGENT_ENV}={sock}" and lines[1].startswith("export DSTP_AGENT_PID=")
    pid = int(lines[1].split("=")[1])
    try:
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        shell = f'eval "$({" ".join(DSTP)} agent --background --socket {sock} 2>&1)"; echo "$DSTP_AGENT_SOCK"'
        again = subprocess.run(["bash", "-c", shell], env=agent_env(""), capture_output=True, text=True, timeout=60)
        assert f"an agent already listens at {sock}" in again.stdout + again.stderr
        out = tmp_path / "bg.nc"
        run = _get(data_server.endpoints.grpc, out, sock, "-v")
        assert run.returncode == 0 and "agent: " in run.stderr, run.stderr
        assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()
    finally:
        ended = os.pidfd_open(pid)  # readable once the agent has exited (it is not our child to wait for)
        os.kill(pid, signal.SIGTERM)
        assert select.select([ended], [], [], 60)[0], "the agent did not stop on SIGTERM"
        os.close(ended)
    assert "dstp agent stopped after 1 request(s)" in Path(f"{sock}.log").read_text()
    assert not sock.exists()


def _stopped(pid: int) -> None:
    ended = os.pidfd_open(pid)  # readable once the agent has exited (it is not our child to wait for)
    try:
        assert select.select([ended], [], [], 60)[0], f"the agent {pid} did not stop"
    finally:
        os.close(ended)


def test_each_agent_has_a_socket_of_its_own_as_ssh_agent(data_server, catalog_root, tmp_path) -> None:
    """Two terminals (or logins) of one user that each start an agent get two; each shell uses the one it started."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**agent_env(""), "XDG_RUNTIME_DIR": str(runtime)}
    del env[AGENT_ENV]
    terminal = f'eval "$({" ".join(DSTP)} agent)" 2>/dev/null; echo "$DSTP_AGENT_SOCK $DSTP_AGENT_PID"'
    started = []
    try:
        for _ in range(2):
            shell = subprocess.run(["bash", "-c", terminal], env=env, capture_output=True, text=True, timeout=60)
            sock, pid = shell.stdout.split()
            started.append((Path(sock), int(pid)))
        (first, _), (second, _) = started
        assert first != second and first.parent != second.parent
        for sock, pid in started:
            assert sock.parent.parent == runtime and stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
            assert stat.S_IMODE(sock.stat().st_mode) == 0o600
            out = tmp_path / f"via-{pid}.nc"
            run = _get(data_server.endpoints.grpc, out, sock, "-v")
            assert run.returncode == 0 and f"agent: {sock}, on a new client" in run.stderr, run.stderr
            assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()
        for sock, pid in started:  # eval "$(dstp agent -k)" stops the shell's own agent and forgets it
            killed = subprocess.run(["bash", "-c", f'eval "$({" ".join(DSTP)} agent -k)"; echo "[$DSTP_AGENT_SOCK]"'],
                                    env={**env, AGENT_ENV: str(sock), "DSTP_AGENT_PID": str(pid)},
                                    capture_output=True, text=True, timeout=60)
            assert killed.returncode == 0 and killed.stdout.strip() == "[]", killed.stderr
            _stopped(pid)
            assert not sock.parent.exists()  # its private folder went with it
        started.clear()
    finally:
        for _, pid in started:
            os.kill(pid, signal.SIGTERM)


def test_an_agent_that_dies_mid_request_is_an_error_not_a_silent_fallback(data_server, tmp_path) -> None:
    sock = tmp_path / "dying.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen(1)

    def die() -> None:  # what a crashed agent looks like from the command: the request read, then EOF
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)

    thread = threading.Thread(target=die)
    thread.start()
    try:
        out = tmp_path / "never.nc"
        run = _get(data_server.endpoints.grpc, out, sock)
    finally:
        thread.join(30)
        listener.close()
    assert run.returncode == 1
    assert run.stderr.startswith("dstp: error: the agent closed the connection without an answer"), run.stderr
    assert f"{out} was not written" in run.stderr and not out.exists()


def test_downloads_at_once_through_one_agent_each_arrive_whole(data_server, catalog_root, tmp_path,
                                                              agent_process) -> None:
    """Three commands at once: two files and one output asked twice; the agent serves them side by side
    (a client each) and runs the two for the same output one after the other."""
    sock, proc = agent_process
    names = sorted(p.name for p in (catalog_root / "ccm3").glob("ccm3_*.nc"))[:2]
    jobs = [(names[0], tmp_path / "a.nc"), (names[1], tmp_path / "b.nc"), (names[1], tmp_path / "b.nc")]
    procs = [subprocess.Popen([*DSTP, "get", "ccm3", name, "-o", str(out), "--server", data_server.endpoints.grpc,
                               "--transport", "striped", "--streams", "2"], env=agent_env(sock),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, out in jobs]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for name, out in jobs:
        assert out.read_bytes() == (catalog_root / "ccm3" / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".nc") == ["a.nc", "b.nc"]
    assert not list(tmp_path.glob("*" + STATE_SUFFIX + "*"))
    assert proc.poll() is None
