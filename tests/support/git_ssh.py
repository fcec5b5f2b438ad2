"""Git over SSH from the git server image: sshd as the image's non-root user ``git``.

Shared by the image tests and the integration tier (the e2e chart ``ci-backends`` runs the
same: ``sshd -D -e -f /etc/ssh-server/sshd_config`` in the git-server image). Non-root sshd
has no privilege separation and lets in only the user it runs as: ``git``, shell git-shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CONFIG_DIR = "/etc/ssh-server"
SSHD_COMMAND = ["/usr/sbin/sshd", "-D", "-e", "-f", f"{CONFIG_DIR}/sshd_config"]
SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey /etc/ssh-server/host_key
PidFile none
AuthorizedKeysFile /etc/ssh-server/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowUsers git
"""


def keypair(directory: Path, name: str) -> Path:
    """A new ed25519 key without passphrase: ``directory/name`` and ``name.pub``."""
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def known_hosts_line(port: int, host_key: Path) -> str:
    """The known_hosts entry of a server on 127.0.0.1:port with ``host_key``."""
    return f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}"
