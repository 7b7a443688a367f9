"""A real OpenLDAP directory for the tests: Debian's ``slapd`` on 127.0.0.1.

Each directory gets a throwaway ``slapd.conf`` (an MDB database, the ``memberof`` overlay so a
user's entry lists its groups, TLS with a CA of its own for ``ldaps://`` and StartTLS), starts
in the foreground, and is ready when it logs ``slapd starting``. People and groups are added
through LDAP as the root DN, so the overlay fills in ``memberOf``. ``.ci/run`` installs slapd
when it is missing; without it these tests fail rather than skip under CI.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ldap3
import pytest
from tests.oidc_issuer import make_certificates
from tests.runtime.runtime_support import wait_until

SLAPD = shutil.which("slapd") or "/usr/sbin/slapd"
BASE = "dc=example,dc=com"
ROOT_DN = f"cn=admin,{BASE}"
ROOT_PASSWORD = "root-secret"
SERVICE_DN = f"cn=jobgate,ou=services,{BASE}"
SERVICE_PASSWORD = "service-secret"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"
# uid -> (password, display name, groups)
USERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "alice": ("alice-pw", "Alice Admin", ("jobgate-admins",)),
    "bob": ("bob-pw", "Bob Operator", ("jobgate-operators",)),
    "carol": ("carol-pw", "Carol Reader", ()),
    "dave": ("dave-pw", "Dave Auditor", ("jobgate-auditors", "jobgate-operators")),
    # one person per role, for the role x route matrix (a consumer is in no group: the default)
    "acme-admin": ("matrix-pw", "Acme Admin", ("jobgate-admins",)),
    "acme-operator": ("matrix-pw", "Acme Operator", ("jobgate-operators",)),
    "acme-activator": ("matrix-pw", "Acme Activator", ("jobgate-activators",)),
    "acme-auditor": ("matrix-pw", "Acme Auditor", ("jobgate-auditors",)),
    "acme-consumer": ("matrix-pw", "Acme Consumer", ()),
}
GROUP_NAMES = ("jobgate-admins", "jobgate-operators", "jobgate-activators", "jobgate-auditors")


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Directory:
    ldap_url: str  # plain, for StartTLS
    ldaps_url: str
    ca_bundle: Path
    process: subprocess.Popen[bytes]

    def config(self, **overrides: Any) -> dict[str, Any]:
        """An ``auth.ldap`` section for this directory (``jobgate.yaml`` form)."""
        doc: dict[str, Any] = {
            "url": self.ldaps_url,
            "ca_bundle": str(self.ca_bundle),
            "bind_dn": SERVICE_DN,
            "bind_password_env": "JOBGATE_TEST_LDAP_PASSWORD",
            "user_base": PEOPLE,
            "groups": {
                group_dn("jobgate-admins"): "admin",
                group_dn("jobgate-auditors"): "auditor",
                group_dn("jobgate-operators"): "operator",
                group_dn("jobgate-activators"): "activator",
            },
            "tenant": "acme",
        }
        doc.update(overrides)
        return doc

    @contextmanager
    def root(self) -> Iterator[ldap3.Connection]:
        server = ldap3.Server(self.ldap_url, get_info=ldap3.NONE)
        conn = ldap3.Connection(server, ROOT_DN, ROOT_PASSWORD, auto_bind=True)
        try:
            yield conn
        finally:
            conn.unbind()

    def set_password(self, uid: str, password: str) -> None:
        with self.root() as conn:
            conn.modify(f"uid={uid},{PEOPLE}", {"userPassword": [(ldap3.MODIFY_REPLACE, [password])]})
            assert conn.result["result"] == 0, conn.result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def _slapd_conf(folder: Path, ca: Path, cert: Path, key: Path) -> Path:
    data = folder / "data"
    data.mkdir()
    conf = folder / "slapd.conf"
    conf.write_text(
        "\n".join(
            [
                *(f"include /etc/ldap/schema/{s}.schema" for s in ("core", "cosine", "inetorgperson", "nis")),
                "modulepath /usr/lib/ldap",
                "moduleload back_mdb",
                "moduleload memberof",
                f"pidfile {folder / 'slapd.pid'}",
                f"TLSCACertificateFile {ca}",
                f"TLSCertificateFile {cert}",
                f"TLSCertificateKeyFile {key}",
                "database mdb",
                f'suffix "{BASE}"',
                f'rootdn "{ROOT_DN}"',
                f"rootpw {ROOT_PASSWORD}",
                f"directory {data}",
                "maxsize 10485760",
                "overlay memberof",
                # People may read the directory once bound; an anonymous search finds nothing.
                "access to attrs=userPassword by self =xw by anonymous auth by * none",
                "access to * by users read by * none",
                "",
            ]
        )
    )
    return conf


def _answers(directory: Directory) -> bool:
    """Whether the directory completes a root bind now."""
    try:
        with directory.root():
            return True
    except ldap3.core.exceptions.LDAPCommunicationError:
        return False


def _seed(directory: Directory) -> None:
    with directory.root() as conn:
        conn.add(BASE, ["dcObject", "organization"], {"o": "Example", "dc": "example"})
        for ou in ("people", "groups", "services"):
            conn.add(f"ou={ou},{BASE}", "organizationalUnit", {"ou": ou})
        conn.add(
            SERVICE_DN,
            ["simpleSecurityObject", "organizationalRole"],
            {"cn": "jobgate", "userPassword": SERVICE_PASSWORD},
        )
        for uid, (password, name, _) in USERS.items():
            conn.add(
                f"uid={uid},{PEOPLE}",
                "inetOrgPerson",
                {"uid": uid, "cn": name, "sn": name.split()[-1], "userPassword": password},
            )
        for group in GROUP_NAMES:
            members = [f"uid={u},{PEOPLE}" for u, (_, _, groups) in USERS.items() if group in groups]
            conn.add(group_dn(group), "groupOfNames", {"cn": group, "member": members})
            assert conn.result["result"] == 0, conn.result


@contextmanager
def running_directory(folder: Path) -> Iterator[Directory]:
    if not os.path.exists(SLAPD):
        if os.environ.get("CI"):
            pytest.fail("slapd is not installed (.ci/run installs Debian's slapd)")
        pytest.skip("slapd is not installed (apt-get install slapd)")
    folder.mkdir(parents=True, exist_ok=True)
    ca, cert, key = make_certificates(folder)
    conf = _slapd_conf(folder, ca, cert, key)
    plain, secure = _free_port(), _free_port()
    urls = f"ldap://127.0.0.1:{plain}/ ldaps://127.0.0.1:{secure}/"
    process = subprocess.Popen([SLAPD, "-f", str(conf), "-h", urls, "-d", "none"], stderr=subprocess.PIPE)
    ready = threading.Event()
    started = threading.Event()
    lines: list[str] = []

    def drain() -> None:  # read slapd's log until it ends: ready at "slapd starting"
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if "slapd starting" in line:
                started.set()
                ready.set()
        ready.set()  # ended: whoever waits learns it did not start

    threading.Thread(target=drain, daemon=True).start()
    directory = Directory(f"ldap://127.0.0.1:{plain}", f"ldaps://127.0.0.1:{secure}", ca, process)
    try:
        if not ready.wait(timeout=20) or not started.is_set():
            raise RuntimeError("slapd did not start:\n" + "".join(lines[-20:]))
        # "slapd starting" comes just before its listeners call listen(): until both accept, no signal.
        wait_until(lambda: _accepts(plain) and _accepts(secure), timeout=10, what="slapd listening")
        # Accepting is not yet answering: under load a first bind was reset by the peer (seen in CI).
        wait_until(lambda: _answers(directory), timeout=10, what="slapd answering a bind")
        _seed(directory)
        yield directory
    finally:
        directory.stop()
