"""The auxiliary images the test cluster uses: each starts as non-root and does its one job."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

from image_testlib import docker
from support.git_ssh import SSHD_CONFIG, keypair, known_hosts_line
from support.net import free_port
from support.wait import wait_until


def uid_of(image: str) -> str:
    return docker("image", "inspect", "-f", "{{.Config.User}}", image).stdout.strip()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_git_server_serves_seeded_repos_and_accepts_pushes(
    aux_images: dict[str, str], tmp_path: Path
) -> None:
    image = aux_images["git-server"]
    assert uid_of(image) == "10001:10001"
    seed = tmp_path / "seed" / "weather"
    seed.mkdir(parents=True)
    (seed / "plugin.yaml").write_text("name: weather\n")
    port = free_port()
    name = f"hermes-git-server-test-{os.getpid()}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only",
           "--tmpfs", "/tmp", "--tmpfs", "/srv/git:uid=10001,gid=10001",
           "-v", f"{tmp_path / 'seed'}:/srv/seed:ro", image,
           "--root", "/srv/git", "--seed", "/srv/seed", "--port", str(port))  # fmt: skip
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 30, "git-server")
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
        clone = tmp_path / "clone"
        url = f"http://127.0.0.1:{port}/weather.git"
        subprocess.run(["git", "clone", "-q", url, str(clone)], env=env, check=True)
        assert (clone / "plugin.yaml").read_text() == "name: weather\n"
        (clone / "new.txt").write_text("pushed\n")
        git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "add", "new.txt"], env=env, check=True)
        subprocess.run([*git, "commit", "-qm", "push test"], env=env, check=True)
        subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], env=env, check=True)
        heads = subprocess.run(
            ["git", "ls-remote", url, "refs/heads/main"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        local = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        assert heads.stdout.split()[0] == local.stdout.strip()
    finally:
        docker("rm", "-f", name, check=False)


def test_git_server_serves_ssh_as_its_non_root_user(
    aux_images: dict[str, str], tmp_path: Path
) -> None:
    """sshd as UID 10001 (as tests/e2e/charts/ci-backends runs it): a deploy key fetches."""
    image = aux_images["git-server"]
    config = tmp_path / "ssh-server"
    config.mkdir()
    host = keypair(tmp_path, "host")
    deploy = keypair(tmp_path, "deploy")
    other = keypair(tmp_path, "other")
    (config / "host_key").write_text(host.read_text())
    (config / "host_key").chmod(0o644)  # root-owned in the container, as a Secret volume
    (config / "authorized_keys").write_text(deploy.with_suffix(".pub").read_text())
    port = free_port()
    (config / "sshd_config").write_text(SSHD_CONFIG.format(port=port))
    name = f"hermes-git-server-ssh-test-{os.getpid()}"
    sshd = "exec /usr/sbin/sshd -D -e -f /etc/ssh-server/sshd_config"
    script = f"git init -q --bare /srv/git/t.git && {sshd}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only",
           "--tmpfs", "/tmp", "--tmpfs", "/srv/git:uid=10001,gid=10001",
           "-v", f"{config}:/etc/ssh-server:ro",
           "--entrypoint", "sh", image, "-c", script)  # fmt: skip
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line(port, host))
    url = f"ssh://git@127.0.0.1:{port}/srv/git/t.git"

    def ls_remote(key: Path) -> subprocess.CompletedProcess[str]:
        ssh = f"ssh -i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={known}"
        ssh += " -o StrictHostKeyChecking=yes"
        env = {**os.environ, "GIT_SSH_COMMAND": ssh, "HOME": str(tmp_path)}
        return subprocess.run(["git", "ls-remote", url], env=env, capture_output=True, text=True)

    try:
        wait_until(lambda: ls_remote(deploy).returncode == 0, 30, "git over ssh")
        refused = ls_remote(other)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused.stderr
    finally:
        docker("rm", "-f", name, check=False)


def test_fake_llm_answers_chat_completions(aux_images: dict[str, str]) -> None:
    image = aux_images["fake-llm"]
    port = free_port()
    name = f"hermes-fake-llm-test-{os.getpid()}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only", image,
           "--host", "127.0.0.1", "--port", str(port))  # fmt: skip
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 30, "fake-llm")
        body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            reply = json.loads(response.read())["choices"][0]["message"]["content"]
        assert reply == "Echo: hi"
        assert docker("exec", name, "id", "-u").stdout.strip() == "10001"
    finally:
        docker("rm", "-f", name, check=False)


def test_seaweedfs_and_openbao_carry_their_real_binaries(aux_images: dict[str, str]) -> None:
    weed = docker("run", "--rm", "--read-only", aux_images["seaweedfs"], "version").stdout
    assert "4.48" in weed
    bao = docker("run", "--rm", "--read-only", aux_images["openbao"], "version").stdout
    assert "OpenBao v2.7.2" in bao
    assert uid_of(aux_images["seaweedfs"]) == "10002:10002"
    assert uid_of(aux_images["openbao"]) == "10003:10003"


def test_busybox_probe_has_the_applets_the_e2e_suite_uses(aux_images: dict[str, str]) -> None:
    """tests/e2e probes Services with busybox's sh, wget and nc, as nobody, read-only."""
    image = aux_images["busybox"]
    out = docker(
        "run",
        "--rm",
        "--read-only",
        "--cap-drop",
        "ALL",
        image,
        "-c",
        "id -u; ls /bin/wget /bin/nc /bin/sleep /bin/nslookup",
    ).stdout.split()
    assert out == ["65534", "/bin/nc", "/bin/nslookup", "/bin/sleep", "/bin/wget"], out
