"""Finding OpenSSL to probe: system libraries, the internal entry points the exported
functions share, and OpenSSL linked into an executable. Real files of this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from otel_ebpf.kernel.ssl_probes import (
    EXPORTED,
    _first_mnemonic,
    has_openssl_inside,
    internal_entries,
    system_libssl,
)
from otel_ebpf.kernel.uprobes import file_offsets, mapped_files

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def libssl() -> str:
    found = sorted(system_libssl())
    if not found:
        pytest.fail("no libssl on this machine (make install brings libssl-dev)")
    return found[0]


def test_system_libssl_is_openssls_not_nss(libssl):
    assert all("/libssl.so" in path for path in system_libssl())
    assert all(not path.endswith("libssl3.so") for path in system_libssl())  # NSS's
    assert os.path.realpath(libssl) == libssl


def test_exported_functions_and_internal_entries(libssl):
    offsets = file_offsets(libssl, EXPORTED, (".dynsym", ".symtab"))
    assert {"SSL_read", "SSL_write", "SSL_do_handshake"} <= offsets.keys()
    internal = internal_entries(libssl, offsets)
    if os.uname().machine == "x86_64":
        code = Path(libssl).read_bytes()
        assert set(internal) == {"read", "write"}
        assert internal["read"] != internal["write"]
        # a prologue the kernel emulates, unlike the exported functions' `sub $n,%rsp`
        assert _first_mnemonic(code, internal["read"]) == "push"
        assert internal["read"] not in offsets.values()


def test_mapped_files_of_this_process_include_the_interpreter():
    files = mapped_files(os.getpid())
    assert any(os.path.basename(p).startswith(("python", "libpython")) for p in files)
    assert mapped_files(2**22 + 7) == set()  # no such process


def test_openssl_inside_an_executable_is_told_by_its_text(tmp_path):
    clang = shutil.which("clang")
    if clang is None:
        pytest.fail("clang is needed (make install brings it)")
    binary = tmp_path / "tls_client"
    subprocess.run([clang, "-O1", "-static", "-o", str(binary),
                    str(REPO / "tests/integration/peers/tls_client.c"), "-lssl", "-lcrypto",
                    "-lpthread"], check=True, capture_output=True, timeout=120)
    assert has_openssl_inside(str(binary))
    assert file_offsets(str(binary), ("SSL_write", "SSL_read"), (".dynsym", ".symtab"))
    assert not has_openssl_inside("/bin/sh")
    assert not has_openssl_inside(str(tmp_path / "missing"))
